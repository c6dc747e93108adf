//! The build script: two guest builds the library embeds.
//!
//! - **The docker helper** (`docker-helper/src/main.rs`: the seccomp launcher of
//!   every container, and warm mode's command server), built as a
//!   static binary for the target, so that it runs in any Linux image. Where
//!   that cannot be done (not Linux, no static C library, a target other than
//!   64-bit x86_64 or aarch64), an empty file is embedded, with a cargo
//!   warning, and warm mode says it is unavailable.
//! - **The built-in WASI tools** (`guest-tools/`): the command modules for
//!   wasm32-wasip1 and the typed tools for wasm32-wasip2, embedded by
//!   `src/tools/builtin.rs` through `$OUT_DIR/builtin_tools.rs`, so that an
//!   installed binary carries them. The test guests (the probe, as a
//!   preview-1 module and as a preview-2 component; and the preview-3
//!   commands of `guest-tools/p3-guests`, components for wasm32-wasip2 that
//!   export `wasi:cli/run@0.3.0`) are built with them and named to the tests
//!   by `TOOLHOST_BUILD_GUEST_TESTS`, the tools' own dir by
//!   `TOOLHOST_BUILD_GUEST_DIST`. The wasm targets come from
//!   `rust-toolchain.toml`; without them the build stops and says so. The
//!   guests build in one target dir beside the host's (`target/guest-tools`),
//!   shared by every profile and host target.
//!
//! And one link option: on Linux with glibc, the `toolhost` binary's
//! relative relocations are packed (`-z pack-relative-relocs`, DT_RELR) where
//! the linker and C library support it, which a probe link tells. The
//! loader then reads about 14 KiB of relocations at each start instead of
//! 1.5 MiB (measured: 57 fewer page faults, 3% off `toolhost --version`).

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = "docker-helper/src/main.rs";
/// Every file of the helper: a change to any rebuilds it.
const SOURCES: &str = "docker-helper/src";

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let Some(out_dir) = std::env::var_os("OUT_DIR") else {
        panic!("cargo sets OUT_DIR for build scripts");
    };
    let out_dir = PathBuf::from(out_dir);
    docker_helper(&out_dir);
    guest_tools(&out_dir);
    packed_relocations(&out_dir);
}

/// Links the binaries with packed relative relocations where a probe binary,
/// linked the same way for the target, comes out with a DT_RELR table (an
/// older linker ignores the option with a warning, or refuses it without a
/// C library that supports it: no table, no option).
fn packed_relocations(out_dir: &Path) {
    const FLAG: &str = "-Wl,-z,pack-relative-relocs";
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let libc = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os != "linux" || libc != "gnu" {
        return;
    }
    let target = std::env::var("TARGET").unwrap_or_default();
    let src = out_dir.join("relr_probe.rs");
    let bin = out_dir.join("relr_probe");
    if let Err(e) = std::fs::write(&src, "fn main() {}\n") {
        panic!("cannot write {}: {e}", src.display());
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.args(["--edition", "2024", "--target", &target, "-C"])
        .arg(format!("link-arg={FLAG}"))
        .arg("-o")
        .arg(&bin)
        .arg(&src);
    if let Ok(linker) = std::env::var("RUSTC_LINKER") {
        cmd.arg("-C").arg(format!("linker={linker}"));
    }
    let linked = cmd.output().is_ok_and(|o| o.status.success());
    if linked && std::fs::read(&bin).is_ok_and(|elf| has_relr(&elf)) {
        println!("cargo::rustc-link-arg-bins={FLAG}");
    }
}

/// Whether a 64-bit little-endian ELF file's dynamic section has a DT_RELR
/// entry.
fn has_relr(elf: &[u8]) -> bool {
    const PT_DYNAMIC: u32 = 2;
    const DT_NULL: u64 = 0;
    const DT_RELR: u64 = 36;
    let u16_at = |o: usize| {
        elf.get(o..o + 2)
            .and_then(|b| b.try_into().ok())
            .map(u16::from_le_bytes)
    };
    let u32_at = |o: usize| {
        elf.get(o..o + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    // ELF magic, ELFCLASS64, ELFDATA2LSB.
    if elf.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1]) {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    for i in 0..usize::from(phnum) {
        let ph = (phoff as usize).saturating_add(i * usize::from(phentsize));
        if u32_at(ph) != Some(PT_DYNAMIC) {
            continue;
        }
        let (Some(off), Some(size)) = (u64_at(ph + 8), u64_at(ph + 32)) else {
            return false;
        };
        let (mut d, end) = (off as usize, off.saturating_add(size) as usize);
        while d.saturating_add(16) <= end {
            match u64_at(d) {
                Some(DT_RELR) => return true,
                Some(DT_NULL) | None => return false,
                Some(_) => d += 16,
            }
        }
    }
    false
}

fn docker_helper(out_dir: &Path) {
    println!("cargo::rerun-if-changed={SOURCES}");
    println!("cargo::rerun-if-env-changed=RUSTC_LINKER");
    let out = out_dir.join("toolhost-docker-helper");
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
                "cargo::warning=docker helper not built for {target} (warm mode unavailable, root-owned workspaces refused on docker): {first}"
            );
            false
        }
        Err(e) => {
            println!("cargo::warning=docker helper not built: cannot run rustc: {e}");
            false
        }
    }
}

/// The guest workspace's sources: any change there rebuilds the guests.
const GUEST_INPUTS: &[&str] = &[
    "guest-tools/Cargo.toml",
    "guest-tools/Cargo.lock",
    "guest-tools/common",
    "guest-tools/tools",
    "guest-tools/typed",
    "guest-tools/test-guests",
    "guest-tools/p3-guests",
    "wit",
];

fn guest_tools(out_dir: &Path) {
    for input in GUEST_INPUTS {
        println!("cargo::rerun-if-changed={input}");
    }
    let tools = crate_dirs("guest-tools/tools");
    let typed = crate_dirs("guest-tools/typed");
    let tests = crate_dirs("guest-tools/test-guests");
    let p3 = crate_dirs("guest-tools/p3-guests");
    let target_dir = guest_target_dir(out_dir);

    // Preview-1 command modules: the tools and the test guests.
    let mut p1 = vec!["--workspace".to_string()];
    for t in typed.iter().chain(&p3) {
        p1.push("--exclude".into());
        p1.push(t.clone());
    }
    cargo_guest("wasm32-wasip1", &p1, &target_dir);
    // Components: the typed tools, the probe as a preview-2 command, and the
    // preview-3 commands.
    let mut p2 = vec!["-p".to_string(), "probe".to_string()];
    for t in typed.iter().chain(&p3) {
        p2.push("-p".into());
        p2.push(t.clone());
    }
    cargo_guest("wasm32-wasip2", &p2, &target_dir);

    let built1 = target_dir.join("wasm32-wasip1/release");
    let built2 = target_dir.join("wasm32-wasip2/release");
    let dist = out_dir.join("guest-tools/dist");
    let dist_test = out_dir.join("guest-tools/dist-test");
    for d in [&dist, &dist_test] {
        if let Err(e) = std::fs::create_dir_all(d) {
            panic!("cannot create {}: {e}", d.display());
        }
    }
    let mut embedded = Vec::new();
    for name in &tools {
        copy(
            &built1.join(format!("{name}.wasm")),
            &dist.join(format!("{name}.wasm")),
        );
        embedded.push(name.clone());
    }
    for name in &typed {
        let file = format!("{}.wasm", name.replace('-', "_"));
        copy(&built2.join(file), &dist.join(format!("{name}.wasm")));
        embedded.push(name.clone());
    }
    for name in &tests {
        copy(
            &built1.join(format!("{name}.wasm")),
            &dist_test.join(format!("{name}.wasm")),
        );
    }
    copy(&built2.join("probe.wasm"), &dist_test.join("probe-p2.wasm"));
    for name in &p3 {
        let file = format!("{}.wasm", name.replace('-', "_"));
        copy(&built2.join(file), &dist_test.join(format!("{name}.wasm")));
    }
    embedded.sort();

    let mut code = String::from(
        "/// The built-in WASI tools: name and bytes, sorted by name (generated by build.rs).\n\
         pub(crate) static TOOLS: &[(&str, &[u8])] = &[\n",
    );
    for name in &embedded {
        let path = dist.join(format!("{name}.wasm"));
        code.push_str(&format!(
            "    ({name:?}, include_bytes!({:?})),\n",
            path.display().to_string()
        ));
    }
    code.push_str("];\n");
    let gen_path = out_dir.join("builtin_tools.rs");
    if let Err(e) = std::fs::write(&gen_path, code) {
        panic!("cannot write {}: {e}", gen_path.display());
    }
    println!(
        "cargo::rustc-env=TOOLHOST_BUILD_GUEST_DIST={}",
        dist.display()
    );
    println!(
        "cargo::rustc-env=TOOLHOST_BUILD_GUEST_TESTS={}",
        dist_test.display()
    );
}

/// The crate dirs directly under `dir` (each a guest of that name), sorted.
fn crate_dirs(dir: &str) -> Vec<String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => panic!("cannot list {dir}: {e}"),
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// `target/guest-tools` beside the host build: the outermost ancestor of
/// `OUT_DIR` that cargo marked as a target dir (`CACHEDIR.TAG`), so that every
/// profile and host target shares one guest build. Else a dir in `OUT_DIR`.
fn guest_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .filter(|a| a.join("CACHEDIR.TAG").is_file())
        .last()
        .map(|t| t.join("guest-tools"))
        .unwrap_or_else(|| out_dir.join("guest-target"))
}

/// Builds guest crates for `target` in release, with the guest workspace's
/// own lock file and profile. The host build's flags are not passed on: they
/// are for the host target.
fn cargo_guest(target: &str, args: &[String], target_dir: &Path) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--quiet",
        "--locked",
        "--release",
        "--target",
        target,
    ])
    .args(["--manifest-path", "guest-tools/Cargo.toml"])
    .args(args)
    .env("CARGO_TARGET_DIR", target_dir);
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
    ] {
        cmd.env_remove(var);
    }
    match cmd.output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let hint = if err.contains("target may not be installed")
                || err.contains("can't find crate for `core`")
            {
                format!(
                    "\nthe {target} target is missing: `rustup target add {target}` (rust-toolchain.toml lists it, so rustup adds it when it installs the toolchain)"
                )
            } else {
                String::new()
            };
            panic!("building the built-in WASI tools for {target} failed:\n{err}{hint}");
        }
        Err(e) => panic!("building the built-in WASI tools: cannot run cargo: {e}"),
    }
}

/// Copies `from` to `to` through a temp file, so a reader never sees half.
fn copy(from: &Path, to: &Path) {
    let tmp = to.with_extension("wasm.tmp");
    if let Err(e) = std::fs::copy(from, &tmp).and_then(|_| std::fs::rename(&tmp, to)) {
        panic!("cannot copy {} to {}: {e}", from.display(), to.display());
    }
}
