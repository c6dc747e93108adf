//! Integration tests: real processes, real files, no mocks. One binary; helpers
//! in `util`, one module per area. Attack cases are named after docs/src/attacks.md.
//!
//! The Windows build runs this binary under Wine (`scripts/test`). A module or
//! test that cannot apply there is `cfg`'d out with its reason; the Windows
//! cases of the wasm and file-tool contracts, and `direct`'s Job Objects, are
//! in `windows`.

// Helpers and imports that only the Unix-only tests use.
#![cfg_attr(windows, allow(dead_code, unused_imports))]

mod util;

mod book;
mod cli;
// On Windows the wasm, file-tool and shell-policy rows run; the native rows
// (POSIX shell scripts, a Linux engine) say why they do not.
mod contract;
// Unix only: POSIX process control (signals, process groups, the supervisor);
// Windows's direct backend is tested in `windows`.
#[cfg(unix)]
mod direct;
// Unix only: a Linux Docker engine.
#[cfg(unix)]
mod docker;
// Unix only: its canaries are read back by POSIX shell scripts.
#[cfg(unix)]
mod env;
mod guest_view;
// Unix only: tmpfs mounts in a private mount namespace.
#[cfg(unix)]
mod install;
mod invariants;
// Unix only: it reads the source tree, which is one for every target.
#[cfg(unix)]
mod layout;
// Unix only: Linux kernel isolation (Landlock, seccomp, namespaces).
#[cfg(unix)]
mod isolation;
// Unix only: the MCP Python SDK client is set up for Linux, and the raw-pipe
// cases use POSIX fds.
#[cfg(unix)]
mod mcp;
// Unix only: symlink and mode fixtures of the resolver; Windows spellings are
// in `windows`.
#[cfg(unix)]
mod paths;
mod props;
// Unix only: peak RSS by wait4, against native coreutils.
#[cfg(unix)]
mod streaming;
mod toolbox;
mod wasm;
mod wasm_p3;
#[cfg(windows)]
mod windows;
