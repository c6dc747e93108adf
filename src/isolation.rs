//! Kernel isolation of the `direct` backend: the level a sandbox asks for and
//! the layers each call actually got.
//!
//! Invariant: a call never reports a layer that was not applied to the tool
//! before it ran. Under `strict`, a call whose required layers cannot all be
//! applied does not run (outcome `isolation_unavailable`).
//!
//! The layers (Linux; other platforms have none of them):
//! - `no_new_privs`: no setuid or file-capability gains in the tool's tree.
//! - `landlock_fs`: Landlock filesystem rules. Write access only to the
//!   read-write allowed dirs, a private tmp and `/dev/null`; read and execute on
//!   the read-only allowed dirs and [`DEFAULT_SYSTEM_READ_PATHS`] (configurable);
//!   nothing else.
//! - `landlock_net` (Landlock ABI 4+, network off): TCP bind and connect refused.
//! - `landlock_scope` (ABI 6+): no signals to, and no abstract unix sockets of,
//!   processes outside the call.
//! - `netns` (network off, toolhost running as root): the tool runs in an empty
//!   network namespace (no interface up, not even loopback).
//! - `seccomp`: a syscall filter refusing with EPERM what no tool needs (ptrace,
//!   process_vm_*, pidfd_getfd, keyctl, bpf, mount, namespaces, io_uring...).
//! - `seccomp_net` (network off): `connect`, and sockets of any family but unix
//!   or any type but stream and seqpacket (a datagram one reaches host sockets
//!   by path), refused.
//! - `subreaper`: the process tree is contained by a per-call child subreaper
//!   (setsid and double forks included) and killed at the end of the call.
//! - `pidns`: the tool runs in a PID namespace of its own under a small init
//!   (it is pid 2): nothing it starts can leave the namespace, and the kernel
//!   kills whatever is left in it when the call ends. Root, or through a user
//!   namespace.
//! - `userns` (toolhost not running as root): the tool runs in a user
//!   namespace of toolhost's (created once, mapping only toolhost's own uid and
//!   gid), which is what lets an unprivileged toolhost give it `netns` and
//!   `pidns`. Files of other users show as owned by the overflow uid there.
//! - `private_tmp`: `TMPDIR` is a fresh directory of the call, removed after it.
//! - `protected_paths`: the protected paths that exist in the writable allowed
//!   dirs (`protected_paths`, default `.git`), and the read-only allowed dirs
//!   nested in writable ones, are read-only bind mounts in a mount namespace
//!   of the call. Root, or through a user namespace. Applied
//!   (with nothing to mount) when none exists.
//! - `readonly_host`: in that mount namespace, every mount of the host is
//!   read-only but the call's writable allowed dirs and private tmp (bind
//!   mounts of themselves as the host has them): Landlock has no right for
//!   metadata, and this keeps a tool (root above all) from changing the
//!   mode, owner, times or extended attributes of a host file. Root only
//!   (an unprivileged toolhost's tools have only its user's power).

use serde::Serialize;

/// How much kernel isolation the `direct` backend applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationLevel {
    /// Every required layer (see [`REQUIRED_STRICT`]) or the call does not run.
    Strict,
    /// Every layer the host offers; the call reports which ones applied.
    BestEffort,
    /// None of the kernel layers: rlimits, environment, fd hygiene, tree
    /// containment, no_new_privs and the ptrace/`/proc` protection only.
    Off,
}

impl Default for IsolationLevel {
    fn default() -> Self {
        if cfg!(target_os = "linux") {
            IsolationLevel::BestEffort
        } else {
            IsolationLevel::Off
        }
    }
}

impl IsolationLevel {
    /// Parses `strict`, `best-effort` or `off`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "strict" => Some(IsolationLevel::Strict),
            "best-effort" => Some(IsolationLevel::BestEffort),
            "off" => Some(IsolationLevel::Off),
            _ => None,
        }
    }

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationLevel::Strict => "strict",
            IsolationLevel::BestEffort => "best-effort",
            IsolationLevel::Off => "off",
        }
    }
}

/// One isolation layer, as a bit of a layer set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Layer {
    /// `no_new_privs`.
    NoNewPrivs = 1 << 0,
    /// Landlock filesystem rules.
    LandlockFs = 1 << 1,
    /// Landlock TCP bind/connect denial.
    LandlockNet = 1 << 2,
    /// Landlock scoping of signals and abstract unix sockets.
    LandlockScope = 1 << 3,
    /// An empty network namespace.
    NetNamespace = 1 << 4,
    /// The seccomp syscall filter.
    Seccomp = 1 << 5,
    /// The seccomp socket-family filter.
    SeccompNet = 1 << 6,
    /// Per-call child subreaper.
    Subreaper = 1 << 7,
    /// A private `TMPDIR`.
    PrivateTmp = 1 << 8,
    /// A PID namespace per call.
    PidNamespace = 1 << 9,
    /// toolhost's user namespace (unprivileged toolhost only).
    UserNamespace = 1 << 10,
    /// Read-only mounts over the protected paths (a mount namespace per call).
    ProtectedPaths = 1 << 11,
    /// A Job Object per call (Windows): the tree and its limits.
    JobObject = 1 << 12,
    /// Every host mount read-only but the call's writable places (a mount
    /// namespace per call).
    ReadonlyHost = 1 << 13,
}

/// Every layer, in report order.
pub const ALL_LAYERS: [Layer; 14] = [
    Layer::NoNewPrivs,
    Layer::LandlockFs,
    Layer::LandlockNet,
    Layer::LandlockScope,
    Layer::UserNamespace,
    Layer::NetNamespace,
    Layer::PidNamespace,
    Layer::Seccomp,
    Layer::SeccompNet,
    Layer::Subreaper,
    Layer::PrivateTmp,
    Layer::ProtectedPaths,
    Layer::ReadonlyHost,
    Layer::JobObject,
];

/// Layers `strict` requires (with network off, also one of `netns` or
/// `seccomp_net`; for a root toolhost, also `readonly_host`, unless `/` is a
/// writable allowed dir): filesystem confinement, the syscall filter,
/// no_new_privs and tree containment. `landlock_net`, `landlock_scope`, `userns`, `netns` and
/// `pidns` are applied where the kernel offers them and reported, but not
/// required.
pub const REQUIRED_STRICT: u32 = Layer::NoNewPrivs as u32
    | Layer::LandlockFs as u32
    | Layer::Seccomp as u32
    | Layer::Subreaper as u32
    | Layer::PrivateTmp as u32
    | Layer::ProtectedPaths as u32;

impl Layer {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Layer::NoNewPrivs => "no_new_privs",
            Layer::LandlockFs => "landlock_fs",
            Layer::LandlockNet => "landlock_net",
            Layer::LandlockScope => "landlock_scope",
            Layer::NetNamespace => "netns",
            Layer::Seccomp => "seccomp",
            Layer::SeccompNet => "seccomp_net",
            Layer::Subreaper => "subreaper",
            Layer::PrivateTmp => "private_tmp",
            Layer::PidNamespace => "pidns",
            Layer::UserNamespace => "userns",
            Layer::ProtectedPaths => "protected_paths",
            Layer::JobObject => "job_object",
            Layer::ReadonlyHost => "readonly_host",
        }
    }

    /// The bit of this layer.
    pub fn bit(self) -> u32 {
        self as u32
    }
}

/// The names of the layers in `set`, in report order.
pub fn layer_names(set: u32) -> Vec<&'static str> {
    ALL_LAYERS
        .iter()
        .filter(|l| set & l.bit() != 0)
        .map(|l| l.name())
        .collect()
}

/// What isolation one `direct` call got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IsolationReport {
    /// The configured level.
    pub level: IsolationLevel,
    /// Layers applied to the tool before it ran.
    pub applied: Vec<&'static str>,
    /// Layers this level wanted that the host could not apply.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<&'static str>,
}

impl IsolationReport {
    /// A report from layer sets.
    pub fn new(level: IsolationLevel, applied: u32, wanted: u32) -> Self {
        IsolationReport {
            level,
            applied: layer_names(applied),
            missing: layer_names(wanted & !applied),
        }
    }
}

/// What a program needs to run, readable (and executable) by every tool under
/// Landlock: the system's program and library dirs, a few files of `/etc`
/// (not all of it: `/etc/shadow` and keys stay out), the harmless devices,
/// `/proc` (the Landlock domain still keeps other processes' memory and
/// environment out of reach) and the CPU topology. Paths that do not exist are
/// skipped. Configurable as `isolation_read_paths`.
pub const DEFAULT_SYSTEM_READ_PATHS: &[&str] = &[
    "/bin",
    "/sbin",
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/etc/alternatives",
    "/etc/bash.bashrc",
    "/etc/ca-certificates",
    "/etc/debian_version",
    "/etc/gai.conf",
    "/etc/gitconfig",
    "/etc/group",
    "/etc/host.conf",
    "/etc/hostname",
    "/etc/hosts",
    "/etc/inputrc",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/locale.alias",
    "/etc/locale.conf",
    "/etc/localtime",
    "/etc/magic",
    "/etc/magic.mime",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/os-release",
    "/etc/passwd",
    "/etc/perl",
    "/etc/pki",
    "/etc/profile",
    "/etc/protocols",
    "/etc/python3",
    "/etc/resolv.conf",
    "/etc/services",
    "/etc/ssl",
    "/etc/terminfo",
    "/etc/timezone",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/proc",
    "/sys/devices/system/cpu",
];
