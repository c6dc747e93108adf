//! The helper binary: written to a dir of this user that no one else can
//! write, checked before every mount, and the mounts a warm container
//! must have (and the engines that can run it).

use std::path::PathBuf;

use bollard::models::{Mount, MountType};

use super::HELPER_TARGET;
use crate::backend::docker::engine::unavailable;
use crate::outcome::{Outcome, OutcomeKind};
use crate::plan::ExecPlan;

/// The helper, built by build.rs for the target (empty where it cannot be).
pub(super) static HELPER: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/toolhost-docker-helper"));
/// The helper binary on this machine's disk, where the engine can bind-mount
/// it: `docker/` in toolhost's cache dir (or `$XDG_RUNTIME_DIR/toolhost`),
/// a directory of this user that no one else can write. Checked every time
/// (just before a container mounts it) to be this build's helper, a regular
/// file of this user that no one can write, and rewritten if not; every file
/// operation refuses symlinks.
pub(in crate::backend::docker) fn helper_file() -> Result<PathBuf, String> {
    static DIR: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    if HELPER.is_empty() {
        return Err(
            "this build of toolhost has no docker helper (it is built for 64-bit x86_64 and aarch64 Linux with a static C library); set [docker] warm = false, and [docker] user to a non-root uid for a root-owned workspace".into(),
        );
    }
    let dir = DIR.get_or_init(helper_dir).clone()?;
    use sha2::Digest as _;
    let hash = sha2::Sha256::digest(HELPER);
    let hex: String = hash[..8].iter().map(|b| format!("{b:02x}")).collect();
    let name = format!("toolhost-docker-helper-{hex}");
    let path = dir.join(&name);
    if is_our_helper(&path) {
        return Ok(path);
    }
    write_helper(&dir, &name)
        .map_err(|e| format!("cannot write the docker helper to {}: {e}", dir.display()))?;
    if is_our_helper(&path) {
        Ok(path)
    } else {
        Err(format!(
            "the docker helper at {} does not check out after writing it",
            path.display()
        ))
    }
}

/// The helper's directory, created if needed: never a shared temp dir.
pub(super) fn helper_dir() -> Result<PathBuf, String> {
    let dir = crate::state_dirs::cache_base()
        .map(|d| d.join("docker"))
        .or_else(crate::state_dirs::runtime_dir)
        .ok_or(
            "warm mode needs a private directory for its helper: set HOME, XDG_CACHE_HOME or XDG_RUNTIME_DIR",
        )?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let meta =
            std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !meta.is_dir() || meta.uid() != uid() {
            return Err(format!(
                "{} is not a directory of this user (a symlink, or someone else's); refused",
                dir.display()
            ));
        }
        if meta.mode() & 0o022 != 0 {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("{}: writable by others: {e}", dir.display()))?;
        }
    }
    Ok(dir)
}

/// Whether `path` is this build's helper: a regular file (not a symlink) of
/// this user, one link, writable by no one, with the embedded bytes.
pub(super) fn is_our_helper(path: &std::path::Path) -> bool {
    #[cfg(unix)]
    {
        use std::io::Read as _;
        use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
        let Ok(mut f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
        else {
            return false;
        };
        let Ok(meta) = f.metadata() else {
            return false;
        };
        if !meta.is_file()
            || meta.uid() != uid()
            || meta.nlink() != 1
            || meta.mode() & 0o222 != 0
            || meta.len() != HELPER.len() as u64
        {
            return false;
        }
        let mut bytes = Vec::with_capacity(HELPER.len());
        f.read_to_end(&mut bytes).is_ok() && bytes == HELPER
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

/// Writes the helper under a fresh temporary name (created exclusively, no
/// symlink followed), makes it read-only and executable, and renames it into
/// place.
pub(super) fn write_helper(dir: &std::path::Path, name: &str) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::io::Write as _;
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        let tmp = dir.join(format!(
            ".{name}.{}.{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        ));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        let written = (|| {
            f.write_all(HELPER)?;
            f.sync_all()?;
            f.set_permissions(std::fs::Permissions::from_mode(0o555))?;
            std::fs::rename(&tmp, dir.join(name))
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        } else if let Ok(entries) = std::fs::read_dir(dir) {
            // Helpers of other builds: unused by this one.
            for e in entries.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with("toolhost-docker-helper-") && n != name {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        written
    }
    #[cfg(not(unix))]
    {
        let _ = (dir, name);
        Err(std::io::Error::other("warm mode needs a Unix host"))
    }
}

#[cfg(unix)]
pub(super) fn uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The read-only mount of the helper at [`HELPER_TARGET`]. A call must not be
/// able to replace the helper of later containers: refused if a writable
/// allowed dir holds it.
pub(in crate::backend::docker) fn helper_mount(plan: &ExecPlan) -> Result<Mount, Outcome> {
    let helper = helper_file().map_err(unavailable)?;
    let real = std::fs::canonicalize(&helper).unwrap_or_else(|_| helper.clone());
    if let Some(m) = plan
        .mounts
        .iter()
        .find(|m| !m.read_only && real.starts_with(&m.path))
    {
        return Err(Outcome::new(
            OutcomeKind::PermissionDenied,
            format!(
                "the writable allowed dir {} contains toolhost's docker helper {}; refused (allow a narrower dir)",
                m.path.display(),
                real.display()
            ),
        ));
    }
    Ok(Mount {
        target: Some(HELPER_TARGET.into()),
        source: Some(helper.to_string_lossy().into_owned()),
        typ: Some(MountType::BIND),
        read_only: Some(true),
        ..Default::default()
    })
}

/// The helper's `--expect DEV:INO:PATH` arguments: every allowed dir and
/// every protected-path mount, with the device and inode toolhost sees now.
/// The helper checks, before anything runs, that each is a mount point
/// showing that inode: the engine resolves the paths again when it mounts
/// them, and a concurrent call may have swapped one for a symlink since.
/// The helper's own file comes first, as a canary: a runtime that shows no
/// host inodes but was not known for one fails the check even with nothing
/// else mounted. Under a runtime known to show none (`host_inodes` false,
/// gVisor) an entry whose source lies inside a writable allowed dir (where a
/// tool could redirect it) is `ctime:SEC.NSEC:PATH`, the host's inode change
/// time, which gVisor shows: it refuses a careless swap, not a writer that
/// changes a decoy and the source in one clock tick. The others are
/// `-:-:PATH`, a mount point only (no tool can change their paths). What
/// keeps the sandbox's own tools from swapping a source is the backend's
/// gate, which the caller holds (`DockerBackend::enter_gate`).
pub(in crate::backend::docker) fn expected_mounts(
    plan: &ExecPlan,
    held: &[crate::backend::protect::Held],
    host_inodes: bool,
) -> Result<Vec<String>, Outcome> {
    #[cfg_attr(not(unix), allow(unused_mut))]
    let mut out = Vec::new();
    #[cfg(unix)]
    {
        use cap_std::fs::MetadataExt as _;
        use std::os::unix::fs::MetadataExt as _;
        let changed = |p: &std::path::Path, why: String| {
            Outcome::new(
                OutcomeKind::PermissionDenied,
                format!(
                    "{}: {why} (something was renamed or replaced while the call was being made); refused",
                    p.display()
                ),
            )
        };
        // What the mount of `source` at `at` must show: (dev, ino, ctime,
        // ctime_nsec) as toolhost sees them now.
        let expect = |(dev, ino, secs, nsecs): (u64, u64, i64, i64),
                      source: &std::path::Path,
                      at: &std::path::Path| {
            if host_inodes {
                format!("{dev}:{ino}:{}", at.display())
            } else if crate::backend::protect::outermost_writable(&plan.mounts, source).is_some() {
                format!("ctime:{secs}.{nsecs}:{}", at.display())
            } else {
                format!("-:-:{}", at.display())
            }
        };
        let helper = helper_file().map_err(unavailable)?;
        let meta = std::fs::metadata(&helper)
            .map_err(|e| changed(std::path::Path::new(HELPER_TARGET), e.to_string()))?;
        out.push("--expect".to_string());
        out.push(expect(
            (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()),
            &helper,
            std::path::Path::new(HELPER_TARGET),
        ));
        // The allowed dir `m`, open as `dir`, must be seen at `at`.
        let expect_dir = |out: &mut Vec<String>,
                          m: &crate::plan::Mount,
                          dir: &cap_std::fs::Dir,
                          at: &std::path::Path| {
            let meta = dir
                .dir_metadata()
                .map_err(|e| changed(&m.guest, e.to_string()))?;
            out.push("--expect".to_string());
            out.push(expect(
                (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()),
                &m.path,
                at,
            ));
            Ok::<(), Outcome>(())
        };
        for (m, (_, dir)) in plan.mounts.iter().zip(plan.mount_dirs.iter()) {
            expect_dir(&mut out, m, dir, &m.guest)?;
        }
        for (target, m) in crate::backend::docker::spec::ro_elsewhere(plan) {
            let Some((_, dir)) = plan.mount_dirs.iter().find(|(p, _)| p == &m.path) else {
                return Err(changed(&m.guest, "has no handle".into()));
            };
            expect_dir(&mut out, m, dir, &target)?;
        }
        for h in held.iter().filter(|h| !h.link) {
            // With no symlink on the way (a link is refused), the place is
            // its own path: the engine resolves both ends from that path,
            // and what it finds there must be what is found now.
            let seen = |p: &std::path::Path| plan.guest_of(p).unwrap_or_else(|| p.to_path_buf());
            if h.source != h.target {
                return Err(changed(
                    &seen(&h.target),
                    format!("resolves to {}", seen(&h.source).display()),
                ));
            }
            // Every place the container sees it (refused before if none).
            let places = plan.guest_places(&h.target);
            let bound = crate::backend::docker::spec::held_places(plan, h);
            if places.is_empty() {
                return Err(changed(
                    &seen(&h.target),
                    "lies outside every allowed dir".into(),
                ));
            }
            let meta = std::fs::symlink_metadata(&h.source)
                .map_err(|e| changed(&seen(&h.target), e.to_string()))?;
            if meta.file_type().is_symlink() {
                return Err(changed(&seen(&h.target), "now a symlink".into()));
            }
            for target in bound {
                out.push("--expect".to_string());
                out.push(expect(
                    (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()),
                    &h.source,
                    &target,
                ));
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (plan, held, host_inodes);
    Ok(out)
}

/// Whether an engine of Docker architecture `arch` (Linux) runs this build's
/// helper.
pub(in crate::backend::docker) fn engine_runs_helper(arch: &str) -> bool {
    cfg!(target_os = "linux") && arch == engine_arch()
}

/// Whether this build carries the helper, or why not.
pub(in crate::backend::docker) fn helper_available() -> Result<(), String> {
    if HELPER.is_empty() {
        return Err("this build of toolhost has no docker helper (it is built for 64-bit x86_64 and aarch64 Linux with a static C library)".into());
    }
    Ok(())
}

/// Docker's name for this machine's architecture.
pub(super) fn engine_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}
