//! On-disk cache of compiled modules.
//!
//! Invariant: toolhost only deserializes native code it wrote itself. A cache
//! entry is keyed by the SHA-256 of the wasm bytes and a hash of the engine's
//! configuration, carries a SHA-256 of its own payload, lives in a directory
//! owned by this user and closed to others, and is written by rename. A
//! truncated, corrupted or foreign entry fails a check and is recompiled, never
//! trusted.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Engine, Module};

const MAGIC: &[u8; 8] = b"THCWASM1";

/// The disk cache; `None` directory means caching is off.
#[derive(Debug)]
pub(crate) struct DiskCache {
    dir: Option<PathBuf>,
    engine_key: String,
}

/// toolhost's cache directory: `$XDG_CACHE_HOME/toolhost` or
/// `~/.cache/toolhost`.
pub(crate) fn toolhost_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("toolhost"))
}

/// The default cache directory.
pub(crate) fn default_dir() -> Option<PathBuf> {
    Some(toolhost_cache_dir()?.join("wasm"))
}

fn engine_key(engine: &Engine) -> String {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: stable for a given build, which is all a cache
    // key needs (the wasmtime version is part of the hashed configuration).
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Creates `dir` if needed and checks that only this user can write to it.
pub(crate) fn usable_dir(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = fs::metadata(dir).map_err(|e| e.to_string())?;
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return Err("not owned by this user".into());
        }
        if meta.mode() & 0o022 != 0 {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("writable by others and cannot be fixed: {e}"))?;
        }
    }
    Ok(())
}

/// What the cache stores: a compiled module or component.
pub(crate) trait Artifact: Sized {
    fn compile(engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Self>;
    fn precompile(engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Vec<u8>>;
    /// # Safety
    /// `bytes` must come from `precompile` of an engine with this configuration.
    unsafe fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self>;
}

impl Artifact for Module {
    fn compile(engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Self> {
        Module::new(engine, wasm)
    }
    fn precompile(engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Vec<u8>> {
        engine.precompile_module(wasm)
    }
    unsafe fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self> {
        // SAFETY: as the caller promises.
        unsafe { Module::deserialize(engine, bytes) }
    }
}

impl Artifact for Component {
    fn compile(engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Self> {
        Component::new(engine, wasm)
    }
    fn precompile(engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Vec<u8>> {
        engine.precompile_component(wasm)
    }
    unsafe fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self> {
        // SAFETY: as the caller promises.
        unsafe { Component::deserialize(engine, bytes) }
    }
}

impl DiskCache {
    pub(crate) fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        let dir = dir.and_then(|d| match usable_dir(&d) {
            Ok(()) => Some(d),
            Err(e) => {
                tracing::warn!("wasm compile cache disabled: {}: {e}", d.display());
                None
            }
        });
        DiskCache {
            dir,
            engine_key: engine_key(engine),
        }
    }

    fn entry(&self, wasm: &[u8]) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let hash = Sha256::digest(wasm);
        Some(dir.join(format!("{:x}-{}.cwasm", hash, self.engine_key)))
    }

    /// Loads the compiled module (or component) for `wasm`, compiling (and
    /// storing) it on a miss. Returns whether it came from the cache.
    pub(crate) fn load<A: Artifact>(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> wasmtime::Result<(A, bool)> {
        let Some(path) = self.entry(wasm) else {
            return Ok((A::compile(engine, wasm)?, false));
        };
        if let Some(module) = self.read(engine, &path) {
            tracing::debug!("wasm code loaded from the disk cache: {}", path.display());
            return Ok((module, true));
        }
        let compiled = A::precompile(engine, wasm)?;
        // SAFETY: these bytes were produced just now by this engine.
        let module = unsafe { A::deserialize(engine, &compiled)? };
        match self.write(&path, &compiled) {
            Ok(()) => tracing::debug!("wasm code compiled and cached: {}", path.display()),
            Err(e) => tracing::warn!(
                "wasm code compiled; cache write {} failed: {e}",
                path.display()
            ),
        }
        Ok((module, false))
    }

    fn read<A: Artifact>(&self, engine: &Engine, path: &Path) -> Option<A> {
        let data = fs::read(path).ok()?;
        let ok = data.len() > MAGIC.len() + 32
            && &data[..MAGIC.len()] == MAGIC
            && Sha256::digest(&data[MAGIC.len() + 32..])[..] == data[MAGIC.len()..MAGIC.len() + 32];
        if !ok {
            tracing::warn!(
                "wasm cache entry {} is corrupt; recompiling",
                path.display()
            );
            let _ = fs::remove_file(path);
            return None;
        }
        // SAFETY: the payload's checksum matches the one we stored with it, in a
        // directory only this user can write, under a key that includes the
        // engine configuration; wasmtime checks its own header and version too.
        match unsafe { A::deserialize(engine, &data[MAGIC.len() + 32..]) } {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(
                    "wasm cache entry {} refused ({e}); recompiling",
                    path.display()
                );
                let _ = fs::remove_file(path);
                None
            }
        }
    }

    fn write(&self, path: &Path, compiled: &[u8]) -> std::io::Result<()> {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut f = fs::File::create(&tmp)?;
        f.write_all(MAGIC)?;
        f.write_all(&Sha256::digest(compiled))?;
        f.write_all(compiled)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)
    }
}
