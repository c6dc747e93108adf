//! Capabilities dropped from a root tool's bounding set, as named data: each
//! capability by its kernel name and number (`linux/capability.h`), and the
//! lists the isolation levels drop.

use libc::c_ulong;

/// Set-ID bits kept on write, and set for a group the caller is not in.
pub(super) const CAP_FSETID: c_ulong = 4;
/// Immutable and append-only flags.
pub(super) const CAP_LINUX_IMMUTABLE: c_ulong = 9;
/// Network administration.
pub(super) const CAP_NET_ADMIN: c_ulong = 12;
/// Raw and packet sockets.
pub(super) const CAP_NET_RAW: c_ulong = 13;
/// Loading kernel modules.
pub(super) const CAP_SYS_MODULE: c_ulong = 16;
/// I/O ports and /dev/mem.
pub(super) const CAP_SYS_RAWIO: c_ulong = 17;
/// ptrace of any process.
pub(super) const CAP_SYS_PTRACE: c_ulong = 19;
/// Mounts, namespaces and much more.
pub(super) const CAP_SYS_ADMIN: c_ulong = 21;
/// Rebooting.
pub(super) const CAP_SYS_BOOT: c_ulong = 22;
/// Priority, real-time scheduling, other processes' priorities.
pub(super) const CAP_SYS_NICE: c_ulong = 23;
/// Raising hard rlimits.
pub(super) const CAP_SYS_RESOURCE: c_ulong = 24;
/// Setting the clock.
pub(super) const CAP_SYS_TIME: c_ulong = 25;
/// Making device nodes.
pub(super) const CAP_MKNOD: c_ulong = 27;
/// The audit subsystem's configuration.
pub(super) const CAP_AUDIT_CONTROL: c_ulong = 30;
/// File capabilities.
pub(super) const CAP_SETFCAP: c_ulong = 31;
/// Overriding mandatory access control.
pub(super) const CAP_MAC_OVERRIDE: c_ulong = 32;
/// Configuring mandatory access control.
pub(super) const CAP_MAC_ADMIN: c_ulong = 33;
/// The kernel log.
pub(super) const CAP_SYSLOG: c_ulong = 34;
/// Performance monitoring (perf events of other processes).
pub(super) const CAP_PERFMON: c_ulong = 38;
/// BPF programs and maps.
pub(super) const CAP_BPF: c_ulong = 39;
/// Checkpoint and restore.
pub(super) const CAP_CHECKPOINT_RESTORE: c_ulong = 40;

/// Capabilities dropped from a root tool's bounding set when isolation is on
/// (they are gone after exec).
pub(super) const DROPPED_CAPS: [c_ulong; 20] = [
    CAP_FSETID,
    CAP_LINUX_IMMUTABLE,
    CAP_NET_ADMIN,
    CAP_SYS_MODULE,
    CAP_SYS_RAWIO,
    CAP_SYS_PTRACE,
    CAP_SYS_ADMIN,
    CAP_SYS_BOOT,
    CAP_SYS_NICE,
    CAP_SYS_RESOURCE,
    CAP_SYS_TIME,
    CAP_MKNOD,
    CAP_AUDIT_CONTROL,
    CAP_SETFCAP,
    CAP_MAC_OVERRIDE,
    CAP_MAC_ADMIN,
    CAP_SYSLOG,
    CAP_PERFMON,
    CAP_BPF,
    CAP_CHECKPOINT_RESTORE,
];

/// What the `off` level drops (as before isolation levels existed): the
/// capabilities that read another process's memory and environment through
/// /proc.
pub(super) const PROC_PEEK_CAPS: [c_ulong; 3] = [CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON];

#[cfg(test)]
mod tests {
    use super::*;

    /// The named lists are the numbers they were (4, 9, ... 40; 19, 21, 38).
    #[test]
    fn the_lists_keep_their_numbers() {
        assert_eq!(
            DROPPED_CAPS,
            [
                4, 9, 12, 16, 17, 19, 21, 22, 23, 24, 25, 27, 30, 31, 32, 33, 34, 38, 39, 40
            ]
        );
        assert_eq!(PROC_PEEK_CAPS, [19, 21, 38]);
        assert_eq!(CAP_NET_RAW, 13);
    }
}
