//! Builds the docker warm-mode helper (`docker-helper/src/main.rs`) as a
//! static binary for the target, so that it runs in any Linux image; the
//! library embeds it. Where that cannot be done (not Linux, no static C
//! library, a target other than 64-bit x86_64 or aarch64), an empty file is
//! embedded, with a cargo warning, and warm mode says it is unavailable.

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = "docker-helper/src/main.rs";

fn main() {
    println!("cargo::rerun-if-changed={SOURCE}");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=RUSTC_LINKER");
    let Some(out_dir) = std::env::var_os("OUT_DIR") else {
        panic!("cargo sets OUT_DIR for build scripts");
    };
    let out = PathBuf::from(out_dir).join("toolhost-docker-helper");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let libc = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let target = std::env::var("TARGET").unwrap_or_default();
    // The helper declares its syscalls' types and constants for 64-bit
    // x86_64 and aarch64 Linux only (rlimits, open flags, signal numbers).
    let supported = os == "linux"
        && (libc == "gnu" || libc == "musl")
        && (arch == "x86_64" || arch == "aarch64");
    let built = supported && build(&target, &out);
    if !built && let Err(e) = std::fs::write(&out, b"") {
        panic!("cannot write {}: {e}", out.display());
    }
}

fn build(target: &str, out: &Path) -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.args([
        "--edition",
        "2024",
        "--crate-name",
        "toolhost_docker_helper",
        "--crate-type",
        "bin",
        "-C",
        "opt-level=2",
        "-C",
        "panic=abort",
        "-C",
        "target-feature=+crt-static",
        "-C",
        "strip=symbols",
        "--target",
        target,
        "-o",
    ]);
    cmd.arg(out).arg(SOURCE);
    // Cargo passes the target's configured linker (config or environment).
    if let Ok(linker) = std::env::var("RUSTC_LINKER") {
        cmd.arg("-C").arg(format!("linker={linker}"));
    }
    match cmd.output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let first = err.lines().find(|l| l.contains("error")).unwrap_or("");
            println!(
                "cargo::warning=docker warm-mode helper not built for {target} (warm mode will be unavailable): {first}"
            );
            false
        }
        Err(e) => {
            println!("cargo::warning=docker warm-mode helper not built: cannot run rustc: {e}");
            false
        }
    }
}
