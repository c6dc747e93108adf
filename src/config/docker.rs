//! The `[docker]` section: the engine, the image and how containers are
//! made, with its checks.

use super::ConfigError;
use super::keys::{DOCKER_KEYS, boolean, strings, type_error, uint};

/// Settings of the `[docker]` section: the engine, the image and how
/// containers are made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DockerConfig {
    /// Image every call runs in. No default: the docker backend refuses calls
    /// until one is set, and never pulls one unless `pull` is true.
    pub image: Option<String>,
    /// User (`uid[:gid]` or a name the image knows) the tool runs as in the
    /// container. Default (`None`): the owner (uid:gid) of the read-write
    /// allowed dirs, so files the tool creates belong to the workspace's
    /// owner; refused when they have different owners or the engine remaps
    /// uids (userns-remap, rootless), until this is set. Root is refused here:
    /// a tool runs as root only when root owns its workspace.
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
    pub host: Option<String>,
    /// TLS client files for a `tcp://`/`https://` engine (CA, certificate,
    /// key); all three, or none. Default: `$DOCKER_CERT_PATH/{ca,cert,key}.pem`
    /// when `$DOCKER_TLS_VERIFY` is set.
    pub tls_ca: Option<std::path::PathBuf>,
    /// TLS client certificate (see `tls_ca`).
    pub tls_cert: Option<std::path::PathBuf>,
    /// TLS client key (see `tls_ca`).
    pub tls_key: Option<std::path::PathBuf>,
    /// Warm mode: one container per sandbox, kept running, with toolhost's
    /// command server as its init running each call. Much faster; calls share
    /// the container's `/tmp` (see docs/src/docker.md). Needs a Linux engine of this
    /// machine's architecture.
    /// Default false.
    pub warm: bool,
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
        }
    }
}

impl DockerConfig {
    pub(super) fn apply(
        &mut self,
        full: &str,
        key: &str,
        v: &toml::Value,
    ) -> Result<(), ConfigError> {
        let string = |v: &toml::Value| -> Result<String, ConfigError> {
            match v.as_str() {
                Some("") => Err(ConfigError::key(full, "must not be empty")),
                Some(s) if s.contains('\0') => Err(ConfigError::key(full, "must not contain NUL")),
                Some(s) => Ok(s.to_string()),
                None => Err(type_error(full, "a string", v)),
            }
        };
        let path = |v: &toml::Value| -> Result<std::path::PathBuf, ConfigError> {
            let s = string(v)?;
            if !std::path::Path::new(&s).is_absolute() {
                return Err(ConfigError::key(
                    full,
                    format!("{s:?} must be an absolute path"),
                ));
            }
            Ok(s.into())
        };
        match key {
            "image" => self.image = Some(string(v)?),
            "user" => {
                let u = string(v)?;
                let name = u.split(':').next().unwrap_or("");
                // `0`, `00`, `+0`...: any spelling of uid 0, as the engine
                // parses it.
                if name == "root" || name.parse::<u64>().is_ok_and(|n| n == 0) {
                    return Err(ConfigError::key(
                        full,
                        "must not be root: leave it unset, and a tool runs as the allowed dirs' owner (root only when root owns them, under toolhost's set-ID filter)",
                    ));
                }
                self.user = Some(u);
            }
            "extra_ro_mounts" => {
                let mut out = Vec::new();
                for (i, s) in strings(full, v)?.into_iter().enumerate() {
                    if !std::path::Path::new(&s).is_absolute() || s.contains([':', '\0']) {
                        return Err(ConfigError::key(
                            &format!("{full}[{i}]"),
                            format!("{s:?} must be an absolute path without ':'"),
                        ));
                    }
                    out.push(s.into());
                }
                self.extra_ro_mounts = out;
            }
            "tmpfs_size_mb" => {
                let n = uint(full, v)?;
                if n == 0 || n > 1 << 20 {
                    return Err(ConfigError::key(full, "must be from 1 to 1048576"));
                }
                self.tmpfs_size_mb = n;
            }
            "pull" => self.pull = boolean(full, v)?,
            "warm" => self.warm = boolean(full, v)?,
            "host" => {
                let h = string(v)?;
                if !["unix://", "tcp://", "http://", "https://"]
                    .iter()
                    .any(|p| h.starts_with(p))
                {
                    return Err(ConfigError::key(
                        full,
                        format!("{h:?} must start with unix://, tcp://, http:// or https://"),
                    ));
                }
                self.host = Some(h);
            }
            "tls_ca" => self.tls_ca = Some(path(v)?),
            "tls_cert" => self.tls_cert = Some(path(v)?),
            "tls_key" => self.tls_key = Some(path(v)?),
            _ => {
                return Err(ConfigError::key(
                    full,
                    format!("unknown key (known keys: {})", DOCKER_KEYS.join(", ")),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
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
