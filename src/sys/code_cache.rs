//! On-disk cache of compiled modules: the one place where bytes read from
//! disk become native code that toolhost runs. It sits in the unsafe island
//! because wasmtime's `deserialize` is `unsafe`, and its safety argument is
//! this module's invariant, which a reviewer must read beside it.
//!
//! Invariant: toolhost only deserializes native code it wrote itself, for the
//! exact wasm bytes and engine it is asked to run. An entry is named by the
//! SHA-256 of the wasm bytes and a hash of the engine's configuration, and
//! stores both (compared on load: an entry copied or renamed from another
//! module or engine is recompiled), with a SHA-256 of the key and payload. It
//! lives in a directory owned by this user and closed to others, and is
//! written by rename. A truncated, corrupted or foreign entry fails a check
//! and is recompiled, never trusted.
//!
//! What the checks cannot do is tell toolhost's writes from another writer's
//! with this user's rights: whoever can write the cache dir is trusted like
//! the toolhost binary. No tool can: the dir is kept out of every writable
//! allowed dir (see `crate::state_dirs`).
//!
//! Entry layout: `MAGIC` (8 bytes), the wasm's SHA-256 (32), the engine key
//! (16 ASCII hex digits), the SHA-256 of everything before it and the payload
//! (32), then wasmtime's serialized code.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Engine, Module};

const MAGIC: &[u8; 8] = b"THCWASM2";
/// Bytes before the payload.
const HEADER: usize = 8 + 32 + 16 + 32;

/// The disk cache; `None` directory means caching is off.
#[derive(Debug)]
pub(crate) struct DiskCache {
    dir: Option<PathBuf>,
    engine_key: String,
    /// Most bytes of entries kept; `None`: no cap.
    max_bytes: Option<u64>,
}

fn engine_key(engine: &Engine) -> String {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: stable for a given build, which is all a cache
    // key needs (the wasmtime version is part of the hashed configuration).
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Marks an entry used now: the eviction keeps the entries used most
/// recently (a process loads each entry once, so this is rare).
fn touch(path: &Path) {
    if let Ok(f) = fs::File::options().write(true).open(path) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

/// How long a claim marked by an attempt that ended without its entry
/// keeps those bytes from being tried again.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Whether a claim's file holds the mark of an attempt made in the last
/// [`RETRY_AFTER`] (an unreadable one counts as recent).
fn attempted_lately(file: &fs::File) -> bool {
    file.metadata().is_ok_and(|m| {
        m.len() > 0
            && m.modified()
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age < RETRY_AFTER)
    })
}

/// Opens (or creates) `path` and takes its exclusive lock, if free, on
/// the file that `path` still names once locked (one removed meanwhile,
/// `Claim::done`, is tried again).
fn lock_file(path: &Path) -> Option<fs::File> {
    for _ in 0..3 {
        let file = open_lock_file(path)?;
        file.try_lock().ok()?;
        if same_file(&file, path) {
            return Some(file);
        }
    }
    None
}

/// Opens `path` for its lock, creating it empty if missing and keeping
/// what it holds (a claim's mark) if not.
fn open_lock_file(path: &Path) -> Option<fs::File> {
    fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()
}

/// Whether `path` names the open `file`.
#[cfg(unix)]
fn same_file(file: &fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_file: &fs::File, path: &Path) -> bool {
    path.exists()
}

/// A claim on compiling one entry ([`DiskCache::claim`]). Its file is left
/// holding a mark while the attempt runs ([`Claim::mark_attempt`]) and is
/// removed once the entry is written ([`Claim::done`]): a marked file
/// found by the next claim is an attempt that ended without an entry
/// (killed or failed), not tried again until the eviction removes the
/// file, an hour after the attempt.
pub(crate) struct Claim {
    file: fs::File,
    path: PathBuf,
    tried: bool,
}

impl Claim {
    /// Whether an earlier attempt at this entry ended without it.
    pub(crate) fn tried(&self) -> bool {
        self.tried
    }

    /// Marks the attempt under way (which also dates it).
    pub(crate) fn mark_attempt(&mut self) {
        let _ = self.file.write_all(b"attempt\n");
    }

    /// The entry is written: the claim's file goes, while still locked
    /// (a process that opened it meanwhile finds it locked; one that opens
    /// the name afterwards finds the entry).
    pub(crate) fn done(self) {
        let _ = fs::remove_file(&self.path);
    }
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
    /// # Safety
    /// As the trait's: `bytes` come from `precompile` of an engine with
    /// this configuration.
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
    /// # Safety
    /// As the trait's: `bytes` come from `precompile` of an engine with
    /// this configuration.
    unsafe fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self> {
        // SAFETY: as the caller promises.
        unsafe { Component::deserialize(engine, bytes) }
    }
}

impl DiskCache {
    pub(crate) fn new(engine: &Engine, dir: Option<PathBuf>, max_bytes: Option<u64>) -> Self {
        let dir = dir.and_then(|d| match super::private_dir(&d) {
            Ok(()) => Some(d),
            Err(e) => {
                tracing::warn!("wasm compile cache disabled: {}: {e}", d.display());
                None
            }
        });
        DiskCache {
            dir,
            engine_key: engine_key(engine),
            max_bytes,
        }
    }

    /// The cache's directory; `None`: caching is off.
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The entry's path and the key it must carry.
    fn entry(&self, wasm: &[u8]) -> Option<(PathBuf, [u8; 48])> {
        let dir = self.dir.as_ref()?;
        let hash = Sha256::digest(wasm);
        let mut key = [0u8; 48];
        key[..32].copy_from_slice(&hash);
        key[32..].copy_from_slice(self.engine_key.as_bytes());
        Some((
            dir.join(format!("{:x}-{}.cwasm", hash, self.engine_key)),
            key,
        ))
    }

    /// A claim on compiling `wasm` for this cache (a tier-up's), held until
    /// dropped: an exclusive lock on the entry's `.lock` file, beside it.
    /// `None` while another process holds it (it compiles the same bytes),
    /// or when the cache is off or the lock cannot be had.
    pub(crate) fn claim(&self, wasm: &[u8]) -> Option<Claim> {
        let (path, _) = self.entry(wasm)?;
        let path = path.with_extension("lock");
        let file = lock_file(&path)?;
        Some(Claim {
            tried: attempted_lately(&file),
            file,
            path,
        })
    }

    /// Whether a background compile of `wasm` could run now: a place in
    /// the queue is free ([`DiskCache::claim_place`], looked at, not
    /// taken), and no attempt at these bytes ended without an entry in the
    /// last hour (one under way is no obstacle). Where not, a call
    /// compiles optimized code itself.
    pub(crate) fn background_compile_possible(&self, wasm: &[u8], places: usize) -> bool {
        let (Some(dir), Some((entry, _))) = (self.dir.as_ref(), self.entry(wasm)) else {
            return false;
        };
        let free = (0..places).any(|n| {
            let path = dir.join(format!("tier-up-{n}.lock"));
            match fs::File::open(&path) {
                Ok(f) => f.try_lock().is_ok(),
                Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            }
        });
        // Marked and not held: an attempt that ended without the entry.
        // Marked and held: one under way, which this call's helper leaves
        // to it.
        let failed = fs::File::open(entry.with_extension("lock"))
            .is_ok_and(|f| attempted_lately(&f) && f.try_lock().is_ok());
        free && !failed
    }

    /// A place in the queue of the processes that compile for this cache
    /// in the background (`tier-up-N.lock`, N below `places`), held until
    /// dropped; `None` when every place is taken.
    pub(crate) fn claim_place(&self, places: usize) -> Option<fs::File> {
        let dir = self.dir.as_ref()?;
        (0..places).find_map(|n| lock_file(&dir.join(format!("tier-up-{n}.lock"))))
    }

    /// The turn of one process at a time among those (`tier-up.lock`),
    /// waited for; held until dropped.
    pub(crate) fn wait_turn(&self) -> Option<fs::File> {
        let file = open_lock_file(&self.dir.as_ref()?.join("tier-up.lock"))?;
        file.lock().ok()?;
        Some(file)
    }

    /// The compiled module (or component) for `wasm` if the disk cache holds
    /// a good entry for it; no compile.
    pub(crate) fn lookup<A: Artifact>(&self, engine: &Engine, wasm: &[u8]) -> Option<A> {
        let (path, key) = self.entry(wasm)?;
        let module = self.read(engine, &path, &key)?;
        tracing::debug!("wasm code loaded from the disk cache: {}", path.display());
        touch(&path);
        Some(module)
    }

    /// Loads the compiled module (or component) for `wasm`, compiling (and
    /// storing) it on a miss. Returns whether it came from the cache.
    pub(crate) fn load<A: Artifact>(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> wasmtime::Result<(A, bool)> {
        let Some((path, key)) = self.entry(wasm) else {
            return Ok((A::compile(engine, wasm)?, false));
        };
        if let Some(module) = self.read(engine, &path, &key) {
            tracing::debug!("wasm code loaded from the disk cache: {}", path.display());
            touch(&path);
            return Ok((module, true));
        }
        let compiled = A::precompile(engine, wasm)?;
        // SAFETY: these bytes were produced just now by this engine.
        let module = unsafe { A::deserialize(engine, &compiled)? };
        match self.write(&path, &key, &compiled) {
            Ok(()) => {
                tracing::debug!("wasm code compiled and cached: {}", path.display());
                self.evict(&path);
            }
            Err(e) => tracing::warn!(
                "wasm code compiled; cache write {} failed: {e}",
                path.display()
            ),
        }
        Ok((module, false))
    }

    fn read<A: Artifact>(&self, engine: &Engine, path: &Path, key: &[u8; 48]) -> Option<A> {
        let data = fs::read(path).ok()?;
        let refuse = |why: &str| {
            tracing::warn!("wasm cache entry {} {why}; recompiling", path.display());
            let _ = fs::remove_file(path);
            None
        };
        if data.len() <= HEADER || &data[..MAGIC.len()] != MAGIC {
            return refuse("is corrupt (no header)");
        }
        let sum = Sha256::new()
            .chain_update(&data[..MAGIC.len() + 48])
            .chain_update(&data[HEADER..])
            .finalize();
        if sum[..] != data[MAGIC.len() + 48..HEADER] {
            return refuse("is corrupt (checksum)");
        }
        if data[MAGIC.len()..MAGIC.len() + 48] != key[..] {
            return refuse("is foreign (compiled from other wasm bytes or another engine)");
        }
        // SAFETY: the entry carries this module's hash and this engine's key,
        // and its checksum matches; it sits in a directory only this user can
        // write and no tool can (see `crate::state_dirs`), so it is what this
        // process's code wrote; wasmtime checks its own header and version too.
        match unsafe { A::deserialize(engine, &data[HEADER..]) } {
            Ok(m) => Some(m),
            Err(e) => refuse(&format!("is refused by wasmtime ({e})")),
        }
    }

    /// Removes the entries used least recently (by mtime) until the cache is
    /// within its cap; `keep` (the entry just written) stays. Entries of
    /// other engines count too: they share the directory. Temporary files
    /// older than an hour (left by a process that died while writing) go,
    /// and so do claims ([`DiskCache::claim`]) as old, cap or no cap.
    fn evict(&self, keep: &Path) {
        let Some(dir) = &self.dir else {
            return;
        };
        let Ok(rd) = fs::read_dir(dir) else { return };
        let now = std::time::SystemTime::now();
        let mut entries = Vec::new();
        let mut total = 0u64;
        for e in rd.flatten() {
            let path = e.path();
            let Ok(meta) = e.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let mtime = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.contains(".tmp") {
                if now.duration_since(mtime).is_ok_and(|d| d.as_secs() > 3600) {
                    let _ = fs::remove_file(&path);
                }
                continue;
            }
            if name.ends_with(".lock") {
                // An entry's claim, old and not held (the queue's and the
                // turn's own, a fixed few, stay).
                if !name.starts_with("tier-up")
                    && now.duration_since(mtime).is_ok_and(|d| d.as_secs() > 3600)
                    && fs::File::open(&path).is_ok_and(|f| f.try_lock().is_ok())
                {
                    let _ = fs::remove_file(&path);
                }
                continue;
            }
            if !name.ends_with(".cwasm") || self.max_bytes.is_none() {
                continue;
            }
            total = total.saturating_add(meta.len());
            if path != keep {
                entries.push((mtime, meta.len(), path));
            }
        }
        let Some(max) = self.max_bytes else { return };
        entries.sort();
        for (_, len, path) in entries {
            if total <= max {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                tracing::debug!(
                    "wasm cache entry {} evicted (cache over its cap)",
                    path.display()
                );
                total = total.saturating_sub(len);
            }
        }
    }

    /// Writes an entry under a temp name, then renames it into place. Not
    /// synced to disk (1.3 ms of a 50 ms cold CLI call here): an entry torn
    /// by a crash fails its checksum at the next read, and is removed and
    /// compiled again (`read`).
    fn write(&self, path: &Path, key: &[u8; 48], compiled: &[u8]) -> std::io::Result<()> {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut f = fs::File::create(&tmp)?;
        let sum = Sha256::new()
            .chain_update(MAGIC)
            .chain_update(key)
            .chain_update(compiled)
            .finalize();
        f.write_all(MAGIC)?;
        f.write_all(key)?;
        f.write_all(&sum)?;
        f.write_all(compiled)?;
        drop(f);
        fs::rename(&tmp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(dir: &Path) -> DiskCache {
        let engine = Engine::default();
        DiskCache::new(&engine, Some(dir.to_path_buf()), None)
    }

    /// One claim at a time per entry; an attempt that ended without its
    /// entry keeps the bytes from a new attempt, and from a background
    /// compile, for an hour, not longer; a finished claim leaves no file.
    #[test]
    fn a_claim_is_exclusive_and_a_failed_attempt_waits_an_hour() {
        let dir = tempfile::tempdir().expect("dir");
        let c = cache(dir.path());
        let wasm = b"\0asm\x01\0\0\0 bytes".as_slice();
        let mut first = c.claim(wasm).expect("a claim");
        assert!(!first.tried());
        assert!(c.claim(wasm).is_none(), "a second claim while held");
        assert!(c.background_compile_possible(wasm, 2));
        first.mark_attempt();
        // An attempt under way leaves the tier-up to it.
        assert!(c.background_compile_possible(wasm, 2));
        let path = first.path.clone();
        drop(first);
        // Ended without an entry: not tried again now.
        let again = c.claim(wasm).expect("a claim");
        assert!(again.tried());
        drop(again);
        assert!(!c.background_compile_possible(wasm, 2));
        // An hour later it is.
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(old))
            .expect("age the claim");
        assert!(c.background_compile_possible(wasm, 2));
        let later = c.claim(wasm).expect("a claim");
        assert!(!later.tried());
        later.done();
        assert!(!path.exists(), "a finished claim's file stays");
        // Every place in the queue taken: no background compile.
        let places: Vec<_> = (0..2).filter_map(|_| c.claim_place(2)).collect();
        assert_eq!(places.len(), 2);
        assert!(c.claim_place(2).is_none());
        assert!(!c.background_compile_possible(wasm, 2));
        drop(places);
        assert!(c.background_compile_possible(wasm, 2));
    }
}
