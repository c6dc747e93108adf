//! The `[docker]` section: the engine, the image and how containers are
//! made, with its checks.

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Settings of the `[docker]` section: the engine, the image and how
/// containers are made.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, expecting = "a table")]
#[non_exhaustive]
pub struct DockerConfig {
    /// Image every call runs in. No default: the docker backend refuses calls
    /// until one is set, and never pulls one unless `pull` is true.
    #[serde(
        deserialize_with = "super::keys::some",
        skip_serializing_if = "Option::is_none"
    )]
    pub image: Option<String>,
    /// User (`uid[:gid]` or a name the image knows) the tool runs as in the
    /// container. Default (`None`): the owner (uid:gid) of the read-write
    /// allowed dirs, so files the tool creates belong to the workspace's
    /// owner; refused when they have different owners or the engine remaps
    /// uids (userns-remap, rootless), until this is set. Root is refused here:
    /// a tool runs as root only when root owns its workspace.
    #[serde(
        deserialize_with = "super::keys::some",
        skip_serializing_if = "Option::is_none"
    )]
    pub user: Option<String>,
    /// Host paths bind-mounted read-only at the same path in every container,
    /// besides the allowed dirs (absolute paths).
    pub extra_ro_mounts: Vec<std::path::PathBuf>,
    /// Size of the tmpfs at /tmp, in MiB. Default 64.
    pub tmpfs_size_mb: u64,
    /// Whether a missing image is pulled. Default false.
    pub pull: bool,
    /// Engine address: `unix:///path/docker.sock`, `tcp://host:port` or
    /// `https://host:port`. Default: `$DOCKER_HOST`, else the local socket.
    #[serde(
        deserialize_with = "super::keys::some",
        skip_serializing_if = "Option::is_none"
    )]
    pub host: Option<String>,
    /// TLS client files for a `tcp://`/`https://` engine (CA, certificate,
    /// key); all three, or none. Default: `$DOCKER_CERT_PATH/{ca,cert,key}.pem`
    /// when `$DOCKER_TLS_VERIFY` is set.
    #[serde(
        deserialize_with = "super::keys::some",
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_ca: Option<std::path::PathBuf>,
    /// TLS client certificate (see `tls_ca`).
    #[serde(
        deserialize_with = "super::keys::some",
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_cert: Option<std::path::PathBuf>,
    /// TLS client key (see `tls_ca`).
    #[serde(
        deserialize_with = "super::keys::some",
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_key: Option<std::path::PathBuf>,
    /// Warm mode: one container per sandbox, kept running, with toolhost's
    /// command server as its init running each call. Much faster; calls share
    /// the container's `/tmp` (see docs/src/docker.md). Needs a Linux engine of this
    /// machine's architecture.
    /// Default false.
    pub warm: bool,
    /// OCI runtime each container runs under, by the name the engine
    /// registered it as (`runsc` for gVisor). Default (`None`): the engine's
    /// default runtime (runc on Docker). A name the engine has not registered
    /// is refused before the call, saying how to register it.
    #[serde(
        deserialize_with = "super::keys::some",
        skip_serializing_if = "Option::is_none"
    )]
    pub runtime: Option<String>,
    /// Runtime of the calls that allow the network, when it must differ from
    /// `runtime`: a runsc registered with `--network=none` has no network to
    /// give, and gVisor releases before 2023 need `--network=host` on kernels
    /// that show every netns's `net.core` sysctls (docs/src/docker.md).
    /// Default (`None`): `runtime`.
    #[serde(
        deserialize_with = "super::keys::some",
        skip_serializing_if = "Option::is_none"
    )]
    pub network_runtime: Option<String>,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            image: None,
            user: None,
            extra_ro_mounts: Vec::new(),
            tmpfs_size_mb: 64,
            pull: false,
            host: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            warm: false,
            runtime: None,
            network_runtime: None,
        }
    }
}

/// Whether a `docker.user` names uid 0: `root`, or any spelling of 0 the
/// engine reads as a number (Go's `strconv.Atoi`: one optional sign, then
/// digits), so `0`, `00`, `+0` and `-0`.
fn names_root(user: &str) -> bool {
    let name = user.split(':').next().unwrap_or("");
    let digits = name.strip_prefix(['+', '-']).unwrap_or(name);
    name == "root" || (!digits.is_empty() && digits.bytes().all(|b| b == b'0'))
}

/// Whether `name` can name a runtime registered with an engine.
fn valid_runtime_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && name.len() <= 128
}

impl DockerConfig {
    /// The runtime a call runs under: `network_runtime` for a call that
    /// allows the network, when set; else `runtime` (`None`: the engine's
    /// default).
    pub fn runtime_for(&self, allow_network: bool) -> Option<&str> {
        if allow_network && let Some(r) = &self.network_runtime {
            return Some(r);
        }
        self.runtime.as_deref()
    }

    /// Checks the section's values; [`crate::SandboxConfig::validate`] runs
    /// it. Run it yourself before giving a config built in code to
    /// [`crate::backend::docker::DockerBackend::new`] directly.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let string = |key: &str, v: &Option<String>| match v.as_deref() {
            Some("") => Err(ConfigError::key(key, "must not be empty")),
            Some(s) if s.contains('\0') => Err(ConfigError::key(key, "must not contain NUL")),
            _ => Ok(()),
        };
        string("docker.image", &self.image)?;
        string("docker.user", &self.user)?;
        string("docker.host", &self.host)?;
        for (key, v) in [
            ("docker.runtime", &self.runtime),
            ("docker.network_runtime", &self.network_runtime),
        ] {
            string(key, v)?;
            // The engine's own rule for a runtime's name.
            if let Some(name) = v
                && !valid_runtime_name(name)
            {
                return Err(ConfigError::key(
                    key,
                    format!(
                        "{name:?} is not a runtime name: letters, digits, '.', '_' and '-', starting with a letter or digit"
                    ),
                ));
            }
        }
        if self.network_runtime.is_some() && self.runtime.is_none() {
            return Err(ConfigError::key(
                "docker.network_runtime",
                "needs docker.runtime: set the runtime of the calls without network too",
            ));
        }
        if self.user.as_deref().is_some_and(names_root) {
            return Err(ConfigError::key(
                "docker.user",
                "must not be root: leave it unset, and a tool runs as the allowed dirs' owner (root only when root owns them, under toolhost's set-ID filter)",
            ));
        }
        for (i, p) in self.extra_ro_mounts.iter().enumerate() {
            let s = p.to_string_lossy();
            if !p.is_absolute() || s.contains([':', '\0']) {
                return Err(ConfigError::key(
                    &format!("docker.extra_ro_mounts[{i}]"),
                    format!("{s:?} must be an absolute path without ':'"),
                ));
            }
        }
        if self.tmpfs_size_mb == 0 || self.tmpfs_size_mb > 1 << 20 {
            return Err(ConfigError::key(
                "docker.tmpfs_size_mb",
                "must be from 1 to 1048576",
            ));
        }
        if let Some(h) = &self.host
            && !["unix://", "tcp://", "http://", "https://"]
                .iter()
                .any(|p| h.starts_with(p))
        {
            return Err(ConfigError::key(
                "docker.host",
                format!("{h:?} must start with unix://, tcp://, http:// or https://"),
            ));
        }
        for (key, p) in [
            ("docker.tls_ca", &self.tls_ca),
            ("docker.tls_cert", &self.tls_cert),
            ("docker.tls_key", &self.tls_key),
        ] {
            if let Some(p) = p {
                if p.to_string_lossy().contains('\0') {
                    return Err(ConfigError::key(key, "must not contain NUL"));
                }
                if !p.is_absolute() {
                    return Err(ConfigError::key(
                        key,
                        format!("{:?} must be an absolute path", p.to_string_lossy()),
                    ));
                }
            }
        }
        let set = [&self.tls_ca, &self.tls_cert, &self.tls_key]
            .iter()
            .filter(|p| p.is_some())
            .count();
        if set != 0 && set != 3 {
            return Err(ConfigError::key(
                "docker.tls_ca",
                "tls_ca, tls_cert and tls_key go together: set all three or none",
            ));
        }
        Ok(())
    }
}
