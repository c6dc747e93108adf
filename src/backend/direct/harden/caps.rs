//! Capabilities dropped from a root tool's bounding set, by number (see
//! `DROPPED_CAPS`).

/// Capabilities dropped from a root tool's bounding set when isolation is on
/// (they are gone after exec): CAP_FSETID (4: set-ID bits kept on write and
/// set for a group it is not in), CAP_LINUX_IMMUTABLE (9: immutable and
/// append-only flags), CAP_NET_ADMIN (12), CAP_SYS_MODULE (16), CAP_SYS_RAWIO
/// (17), CAP_SYS_PTRACE (19), CAP_SYS_ADMIN (21), CAP_SYS_BOOT (22),
/// CAP_SYS_NICE (23: priority, real-time scheduling, other processes'
/// priorities), CAP_SYS_RESOURCE (24: raising hard rlimits), CAP_SYS_TIME
/// (25), CAP_MKNOD (27), CAP_AUDIT_CONTROL (30), CAP_SETFCAP (31: file
/// capabilities), CAP_MAC_OVERRIDE (32), CAP_MAC_ADMIN (33), CAP_SYSLOG (34),
/// CAP_PERFMON (38), CAP_BPF (39), CAP_CHECKPOINT_RESTORE (40).
pub(super) const DROPPED_CAPS: [libc::c_ulong; 20] = [
    4, 9, 12, 16, 17, 19, 21, 22, 23, 24, 25, 27, 30, 31, 32, 33, 34, 38, 39, 40,
];
/// CAP_NET_RAW, dropped too while the network is off.
pub(super) const CAP_NET_RAW: libc::c_ulong = 13;
/// What the `off` level drops (as before isolation levels existed): the
/// capabilities that read another process's memory and environment through
/// /proc: CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON.
pub(super) const PROC_PEEK_CAPS: [libc::c_ulong; 3] = [19, 21, 38];
