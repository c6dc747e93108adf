//! Preview-1 changes by path, made through a fresh handle on the parent
//! (`protect` has the rule and why).
//!
//! toolhost's own preview-1 calls here run on a scratch memory, not the
//! guest's: the path strings they pass are copies, and what they return is
//! read back from the scratch and written to the guest's memory only at the
//! end. Each shadow reads the guest's path once.

use wasmtime::{Caller, Linker};
use wasmtime_wasi::p1::types;
use wasmtime_wasi::p1::wasi_snapshot_preview1 as glue;
use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as P1;
use wiggle::{GuestMemory, GuestPtr};

use super::{ERRNO_FAULT, ERRNO_NAMETOOLONG, ERRNO_PERM, MAX_GUEST_PATH, State, protect, special};

/// Preview-1 `errno::ilseq` and `errno::loop`.
const ERRNO_ILSEQ: i32 = 25;
const ERRNO_LOOP: i32 = 32;
/// `lookupflags::symlink_follow` and `oflags::directory`.
const FOLLOW: i32 = 1;
const O_DIRECTORY: i32 = 2;
/// Symlink hops an open for writing follows (Linux's limit is 40).
const MAX_HOPS: usize = 40;
/// Where toolhost's scratch calls put their results, and the first string.
const RESULT_AT: usize = 0;
const STRINGS_AT: usize = 64;
/// Room for a symlink's target read back.
const LINK_BUF: usize = 64 << 10;

/// A scratch memory holding strings at known places.
struct Scratch {
    buf: Vec<u8>,
    at: Vec<(i32, i32)>,
}

impl Scratch {
    fn new(strings: &[&str], extra: usize) -> Self {
        let total: usize = strings.iter().map(|s| s.len()).sum();
        let mut buf = vec![0u8; STRINGS_AT + total + extra];
        let mut at = Vec::with_capacity(strings.len());
        let mut p = STRINGS_AT;
        for s in strings {
            buf[p..p + s.len()].copy_from_slice(s.as_bytes());
            at.push((p as i32, s.len() as i32));
            p += s.len();
        }
        Scratch { buf, at }
    }

    fn mem(&mut self) -> GuestMemory<'_> {
        GuestMemory::Unshared(&mut self.buf)
    }

    fn str(&self, i: usize) -> GuestPtr<str> {
        let (p, l) = self.at[i];
        GuestPtr::new((p as u32, l as u32))
    }

    fn result(&self) -> u32 {
        let b = &self.buf[RESULT_AT..RESULT_AT + 4];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Start and length of the space after the strings.
    fn tail(&self, extra: usize) -> (i32, i32) {
        ((self.buf.len() - extra) as i32, extra as i32)
    }
}

/// A guest string, copied; `Err` is the errno to return.
pub(super) fn guest_str(caller: &mut Caller<'_, State>, ptr: i32, len: i32) -> Result<String, i32> {
    if len as u32 as usize > MAX_GUEST_PATH {
        return Err(ERRNO_NAMETOOLONG);
    }
    let Some(mem) = super::p1::guest_memory(caller) else {
        return Err(ERRNO_FAULT);
    };
    let (p, l) = (ptr as u32 as usize, len as u32 as usize);
    let bytes = mem
        .data(&*caller)
        .get(p..p.saturating_add(l))
        .ok_or(ERRNO_FAULT)?;
    String::from_utf8(bytes.to_vec()).map_err(|_| ERRNO_ILSEQ)
}

/// Two guest strings, copied.
fn two_strs(
    caller: &mut Caller<'_, State>,
    a: (i32, i32),
    b: (i32, i32),
) -> Result<(String, String), i32> {
    Ok((guest_str(caller, a.0, a.1)?, guest_str(caller, b.0, b.1)?))
}

/// The handle a change goes through and the final name it names there.
struct Target {
    fd: i32,
    /// Opened here (closed by `release`), or the guest's own handle.
    owned: bool,
    name: String,
}

/// Gives wasmtime-wasi's context the host call's fuel, before the guard
/// calls wasmtime-wasi's own functions (`glue`): a fresh context has none,
/// and a guest's first host call would get ENOMEM.
fn set_fuel(caller: &mut Caller<'_, State>) {
    let fuel = wasmtime::AsContextMut::as_context_mut(&mut *caller).hostcall_fuel();
    P1::set_hostcall_fuel(&mut caller.data_mut().wasi, fuel);
}

/// After toolhost or a guest opened a directory: every directory handle
/// inside a protected dir becomes read-only (`protect`).
pub(super) fn restrict_all(caller: &mut Caller<'_, State>) {
    let State { wasi, common, .. } = caller.data_mut();
    if common.guard.active() {
        let table = wasmtime_wasi::WasiView::ctx(wasi).table;
        common.guard.restrict_all(table);
    }
}

/// Before the first check of a call: the preopens are restricted too (a cwd
/// inside a protected dir becomes read-only).
fn sweep_preopens(caller: &mut Caller<'_, State>) {
    let State { wasi, common, .. } = caller.data_mut();
    if common.guard.active() {
        let table = wasmtime_wasi::WasiView::ctx(wasi).table;
        common.guard.sweep_once(table);
    }
}

async fn release(caller: &mut Caller<'_, State>, t: &Target) {
    if t.owned {
        let mut s = Scratch::new(&[], 0);
        let _ = glue::fd_close(&mut caller.data_mut().wasi, &mut s.mem(), t.fd).await;
    }
}

/// Opens the parent of `path` under `dirfd` (following symlinks, as the
/// change itself would) and checks the final name. `Ok(None)`: the change
/// goes on unchanged (see `protect::split`).
async fn target(
    caller: &mut Caller<'_, State>,
    dirfd: i32,
    path: &str,
) -> wasmtime::Result<Result<Option<Target>, i32>> {
    sweep_preopens(caller);
    let path = &*protect::slashes(path);
    let Some((parent, name)) = protect::split(path) else {
        return Ok(Ok(None));
    };
    let (fd, owned) = match parent {
        None => (dirfd, false),
        Some(p) => match open_dir(caller, dirfd, p).await? {
            Ok(fd) => (fd, true),
            Err(e) => return Ok(Err(e)),
        },
    };
    let t = Target {
        fd,
        owned,
        name: name.to_string(),
    };
    let mut s = Scratch::new(&[], 0);
    let st = P1::fd_filestat_get(
        &mut caller.data_mut().wasi,
        &mut s.mem(),
        types::Fd::from(fd as u32),
    )
    .await;
    let named = match st {
        Ok(st) => caller
            .data()
            .common
            .guard
            .named_hash(st.ino, name.trim_end_matches('/')),
        Err(_) => true,
    };
    let named = named || (protect::may_be_short_name(&t.name) && entry_named(caller, &t).await);
    if named {
        release(caller, &t).await;
        return Ok(Err(ERRNO_PERM));
    }
    Ok(Ok(Some(t)))
}

/// Whether the entry `t` names, unfollowed, is one a protected name finds
/// (by identity: on Windows `GIT~1` finds `.git`), looked up as a Win32 path
/// would (`GIT~1.` too). An entry that cannot be looked at counts as one.
async fn entry_named(caller: &mut Caller<'_, State>, t: &Target) -> bool {
    let name = crate::protected::win32_base(t.name.trim_end_matches('/'));
    let mut s = Scratch::new(&[name], 0);
    let name = s.str(0);
    let fd = types::Fd::from(t.fd as u32);
    let st = P1::path_filestat_get(
        &mut caller.data_mut().wasi,
        &mut s.mem(),
        fd,
        types::Lookupflags::empty(),
        name,
    )
    .await;
    match st {
        Ok(st) => caller.data().common.guard.entry_named_hash(st.ino),
        Err(e) => !matches!(e.downcast(), Ok(types::Errno::Noent)),
    }
}

/// The target of a change whose final name is not followed. `Ok(None)`: go
/// on unchanged.
async fn change_target(
    caller: &mut Caller<'_, State>,
    dirfd: i32,
    path: &str,
) -> wasmtime::Result<Result<Option<Target>, i32>> {
    set_fuel(caller);
    if !caller.data().common.guard.active() {
        return Ok(Ok(None));
    }
    target(caller, dirfd, path).await
}

/// The target of an open for writing: a final symlink followed hop by hop
/// (when `dirflags` follows), so that the last name is opened without
/// following.
async fn open_target(
    caller: &mut Caller<'_, State>,
    dirfd: i32,
    dirflags: i32,
    path: &str,
) -> wasmtime::Result<Result<Option<Target>, i32>> {
    set_fuel(caller);
    let mut t = match target(caller, dirfd, path).await? {
        Ok(Some(t)) => t,
        other => return Ok(other),
    };
    if dirflags & FOLLOW == 0 {
        return Ok(Ok(Some(t)));
    }
    // The path reached so far, from `dirfd`: a link's target is taken from
    // its own directory, named from `dirfd` too, so that `..` in it may
    // climb as far as `dirfd` allows (as in `guard_path::open_target`).
    let mut cur = protect::slashes(path).into_owned();
    for _ in 0..MAX_HOPS {
        // A name ending in `/` must be a directory: the host follows it
        // there, and the caller acts on it as one.
        if t.name.ends_with('/') {
            return Ok(Ok(Some(t)));
        }
        let mut s = Scratch::new(&[t.name.as_str()], LINK_BUF);
        let name = s.str(0);
        let wasi = &mut caller.data_mut().wasi;
        let fd = types::Fd::from(t.fd as u32);
        let flags = types::Lookupflags::empty();
        let is_link = matches!(
            P1::path_filestat_get(wasi, &mut s.mem(), fd, flags, name).await,
            Ok(st) if st.filetype == types::Filetype::SymbolicLink
        );
        if !is_link {
            return Ok(Ok(Some(t)));
        }
        let (bp, bl) = s.tail(LINK_BUF);
        let buf = GuestPtr::<u8>::new(bp as u32);
        let n = match P1::path_readlink(wasi, &mut s.mem(), fd, name, buf, bl as u32).await {
            Ok(n) => n as usize,
            Err(_) => {
                release(caller, &t).await;
                return Ok(Err(ERRNO_PERM));
            }
        };
        let start = bp as usize;
        let link = String::from_utf8_lossy(&s.buf[start..start + n.min(LINK_BUF)]);
        let link = protect::slashes(&link).into_owned();
        // An absolute target stays absolute, and is refused below.
        cur = match cur.trim_end_matches('/').rfind('/') {
            Some(i) if !link.starts_with('/') => format!("{}/{link}", &cur[..i]),
            _ => link,
        };
        let next = match target(caller, dirfd, &cur).await? {
            Ok(Some(n)) => n,
            // An absolute target, or one ending in `.` or `..`: not a file
            // this open could create or write inside the sandbox.
            Ok(None) => {
                release(caller, &t).await;
                return Ok(Err(ERRNO_PERM));
            }
            Err(e) => {
                release(caller, &t).await;
                return Ok(Err(e));
            }
        };
        if next.fd == t.fd {
            // The same handle: keep its ownership.
            t = Target {
                owned: t.owned,
                ..next
            };
        } else {
            release(caller, &t).await;
            t = next;
        }
    }
    release(caller, &t).await;
    Ok(Err(ERRNO_LOOP))
}

/// `path_open` for writing (create, truncate or write rights) under the
/// guard: returns the errno, with the new fd written at `opened`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn open_for_writing(
    caller: &mut Caller<'_, State>,
    fd: i32,
    dirflags: i32,
    path: &str,
    oflags: i32,
    base: i64,
    inheriting: i64,
    fdflags: i32,
    opened: i32,
) -> wasmtime::Result<Option<i32>> {
    set_fuel(caller);
    let t = match open_target(caller, fd, dirflags, path).await? {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        Err(e) => return Ok(Some(e)),
    };
    let mut s = Scratch::new(&[t.name.as_str()], 0);
    let (np, nl) = s.at[0];
    // The special-file check (`special`) on the name the open will use.
    let nofollow = dirflags & !FOLLOW;
    if special_refused(caller, &mut s, t.fd, nofollow).await {
        release(caller, &t).await;
        return Ok(Some(ERRNO_PERM));
    }
    let wasi = &mut caller.data_mut().wasi;
    let mut mem = GuestMemory::Unshared(&mut s.buf);
    let open = glue::path_open(
        wasi,
        &mut mem,
        t.fd,
        nofollow,
        np,
        nl,
        oflags,
        base,
        inheriting,
        fdflags,
        RESULT_AT as i32,
    );
    let watched = special::watched(open).await;
    let r = match watched.result {
        Ok(r) => r,
        Err(e) => {
            release(caller, &t).await;
            return Err(e);
        }
    };
    release(caller, &t).await;
    if r != 0 {
        return Ok(Some(super::p1::refusal(r, watched.interrupted)));
    }
    let new = s.result();
    let Some(mem) = super::p1::guest_memory(caller) else {
        return Ok(Some(ERRNO_FAULT));
    };
    let p = opened as u32 as usize;
    match mem.data_mut(&mut *caller).get_mut(p..p.saturating_add(4)) {
        Some(slot) => slot.copy_from_slice(&new.to_le_bytes()),
        None => {
            let mut s = Scratch::new(&[], 0);
            let _ = glue::fd_close(&mut caller.data_mut().wasi, &mut s.mem(), new as i32).await;
            return Ok(Some(ERRNO_FAULT));
        }
    }
    Ok(Some(super::p1::p1_postcheck(caller, opened).await))
}

/// Whether the first string of `s`, under `fd` (following as `flags` say),
/// is a special file (`special`): what wasmtime-wasi would open blocking.
async fn special_refused(
    caller: &mut Caller<'_, State>,
    s: &mut Scratch,
    fd: i32,
    flags: i32,
) -> bool {
    if !special::precheck() {
        return false;
    }
    let Ok(flags) = types::Lookupflags::try_from(flags) else {
        return false;
    };
    let name = s.str(0);
    let wasi = &mut caller.data_mut().wasi;
    let st =
        P1::path_filestat_get(wasi, &mut s.mem(), types::Fd::from(fd as u32), flags, name).await;
    matches!(st, Ok(st) if !special::p1_allowed(st.filetype)
        && st.filetype != types::Filetype::SymbolicLink)
}

/// `path` under `dirfd` opened as a directory (restricted like every
/// directory handle), to be changed through as `.`.
async fn dir_itself(
    caller: &mut Caller<'_, State>,
    dirfd: i32,
    path: &str,
) -> wasmtime::Result<Result<Target, i32>> {
    sweep_preopens(caller);
    Ok(open_dir(caller, dirfd, path).await?.map(|fd| Target {
        fd,
        owned: true,
        name: ".".to_string(),
    }))
}

/// Opens `path` under `dirfd` as a directory, following symlinks, and
/// restricts the new handle (`protect`); its fd, or the errno.
async fn open_dir(
    caller: &mut Caller<'_, State>,
    dirfd: i32,
    path: &str,
) -> wasmtime::Result<Result<i32, i32>> {
    set_fuel(caller);
    let mut s = Scratch::new(&[path], 0);
    let (pp, pl) = s.at[0];
    let wasi = &mut caller.data_mut().wasi;
    let r = glue::path_open(
        wasi,
        &mut s.mem(),
        dirfd,
        FOLLOW,
        pp,
        pl,
        O_DIRECTORY,
        0,
        0,
        0,
        RESULT_AT as i32,
    )
    .await?;
    if r != 0 {
        return Ok(Err(r));
    }
    restrict_all(caller);
    Ok(Ok(s.result() as i32))
}

/// `path_filestat_set_times` under the guard; `None`: go on unchanged.
#[allow(clippy::too_many_arguments)]
pub(super) async fn set_times(
    caller: &mut Caller<'_, State>,
    fd: i32,
    flags: i32,
    path: &str,
    atim: i64,
    mtim: i64,
    fst_flags: i32,
) -> wasmtime::Result<Option<i32>> {
    set_fuel(caller);
    if !caller.data().common.guard.active() {
        return Ok(None);
    }
    let path = &*protect::slashes(path);
    // A final symlink is followed hop by hop (a link into `.git` reaches
    // `.git`'s read-only handle); a path ending in `.`, `..` or `/` (the
    // host follows a final symlink before a trailing slash, even unfollowed)
    // is opened itself and its times set through it as `.`.
    let t = if protect::split(path).is_none() || path.ends_with('/') {
        match dir_itself(caller, fd, path).await? {
            Ok(t) => t,
            Err(e) => return Ok(Some(e)),
        }
    } else {
        match open_target(caller, fd, flags, path).await? {
            // A last link's target ending in `/`: as a trailing slash.
            Ok(Some(t)) if t.name.ends_with('/') => {
                let itself = dir_itself(caller, t.fd, &t.name).await?;
                release(caller, &t).await;
                match itself {
                    Ok(t) => t,
                    Err(e) => return Ok(Some(e)),
                }
            }
            Ok(Some(t)) => t,
            Ok(None) => return Ok(None),
            Err(e) => return Ok(Some(e)),
        }
    };
    // Through a target, its last name is not a symlink to follow.
    let flags = flags & !FOLLOW;
    let mut s = Scratch::new(&[t.name.as_str()], 0);
    let (np, nl) = s.at[0];
    // The special-file check (`special`): wasmtime-wasi sets times through
    // a blocking open of the path.
    if special_refused(caller, &mut s, t.fd, flags).await {
        release(caller, &t).await;
        return Ok(Some(ERRNO_PERM));
    }
    let wasi = &mut caller.data_mut().wasi;
    let mut mem = GuestMemory::Unshared(&mut s.buf);
    let set =
        glue::path_filestat_set_times(wasi, &mut mem, t.fd, flags, np, nl, atim, mtim, fst_flags);
    let watched = special::watched(set).await;
    release(caller, &t).await;
    Ok(Some(super::p1::refusal(
        watched.result?,
        watched.interrupted,
    )))
}

/// Whether `fd_filestat_set_times` on `fd` is refused (`Guard::refuses_times`):
/// `fd` is a regular file opened without write access, while something is
/// protected. Flags the call itself rejects are left to it (`einval` comes
/// first, as in wasmtime-wasi).
async fn times_refused(caller: &mut Caller<'_, State>, fd: i32, fst_flags: i32) -> bool {
    const ATIM: i32 = 1;
    const ATIM_NOW: i32 = 2;
    const MTIM: i32 = 4;
    const MTIM_NOW: i32 = 8;
    let both = |a: i32, b: i32| fst_flags & a != 0 && fst_flags & b != 0;
    if !caller.data().common.guard.active() || both(ATIM, ATIM_NOW) || both(MTIM, MTIM_NOW) {
        return false;
    }
    // `fd_fdstat_get` reads no guest memory; its rights show the open mode.
    let mut s = Scratch::new(&[], 0);
    let st = P1::fd_fdstat_get(
        &mut caller.data_mut().wasi,
        &mut s.mem(),
        types::Fd::from(fd as u32),
    )
    .await;
    matches!(st, Ok(st) if st.fs_filetype == types::Filetype::RegularFile
        && !st.fs_rights_base.contains(types::Rights::FD_WRITE))
}

/// Registers the guarded changes: `path_create_directory`,
/// `path_remove_directory`, `path_unlink_file`, `fd_filestat_set_times`,
/// `path_symlink`, `path_rename`, `path_link`.
pub(super) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    const M: &str = "wasi_snapshot_preview1";
    macro_rules! one_path {
        ($name:literal, $func:ident) => {
            linker.func_wrap_async(
                M,
                $name,
                |mut caller: Caller<'_, State>, (fd, path, len): (i32, i32, i32)| {
                    Box::new(async move {
                        super::inline_io::before_file_op(&mut caller).await?;
                        let path_s = match guest_str(&mut caller, path, len) {
                            Ok(p) => p,
                            Err(e) => return Ok(e),
                        };
                        let t = match change_target(&mut caller, fd, &path_s).await? {
                            Ok(Some(t)) => t,
                            Ok(None) => return super::p1::call_p1!(caller, $func(fd, path, len)),
                            Err(e) => return Ok(e),
                        };
                        let mut s = Scratch::new(&[t.name.as_str()], 0);
                        let (np, nl) = s.at[0];
                        let r =
                            glue::$func(&mut caller.data_mut().wasi, &mut s.mem(), t.fd, np, nl)
                                .await;
                        release(&mut caller, &t).await;
                        r
                    })
                },
            )?;
        };
    }
    one_path!("path_create_directory", path_create_directory);
    one_path!("path_remove_directory", path_remove_directory);
    one_path!("path_unlink_file", path_unlink_file);
    linker.func_wrap_async(
        M,
        "fd_filestat_set_times",
        |mut caller: Caller<'_, State>, (fd, atim, mtim, fst_flags): (i32, i64, i64, i32)| {
            Box::new(async move {
                super::inline_io::before_file_op(&mut caller).await?;
                if times_refused(&mut caller, fd, fst_flags).await {
                    return Ok(ERRNO_PERM);
                }
                super::p1::call_p1!(caller, fd_filestat_set_times(fd, atim, mtim, fst_flags))
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "path_symlink",
        |mut caller: Caller<'_, State>,
         (old, old_len, fd, new, new_len): (i32, i32, i32, i32, i32)| {
            Box::new(async move {
                super::inline_io::before_file_op(&mut caller).await?;
                let (old_s, new_s) = match two_strs(&mut caller, (old, old_len), (new, new_len)) {
                    Ok(ab) => ab,
                    Err(e) => return Ok(e),
                };
                let t = match change_target(&mut caller, fd, &new_s).await? {
                    Ok(Some(t)) => t,
                    Ok(None) => {
                        return super::p1::call_p1!(
                            caller,
                            path_symlink(old, old_len, fd, new, new_len)
                        );
                    }
                    Err(e) => return Ok(e),
                };
                let mut s = Scratch::new(&[old_s.as_str(), t.name.as_str()], 0);
                let ((op, ol), (np, nl)) = (s.at[0], s.at[1]);
                let r = glue::path_symlink(
                    &mut caller.data_mut().wasi,
                    &mut s.mem(),
                    op,
                    ol,
                    t.fd,
                    np,
                    nl,
                )
                .await;
                release(&mut caller, &t).await;
                r
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "path_rename",
        |mut caller: Caller<'_, State>,
         (fd, old, old_len, new_fd, new, new_len): (i32, i32, i32, i32, i32, i32)| {
            Box::new(async move {
                super::inline_io::before_file_op(&mut caller).await?;
                let (old_s, new_s) = match two_strs(&mut caller, (old, old_len), (new, new_len)) {
                    Ok(ab) => ab,
                    Err(e) => return Ok(e),
                };
                let (a, b) = match two_targets(&mut caller, fd, &old_s, new_fd, &new_s).await? {
                    Ok(Some(ab)) => ab,
                    Ok(None) => {
                        return super::p1::call_p1!(
                            caller,
                            path_rename(fd, old, old_len, new_fd, new, new_len)
                        );
                    }
                    Err(e) => return Ok(e),
                };
                let mut s = Scratch::new(&[a.name.as_str(), b.name.as_str()], 0);
                let ((op, ol), (np, nl)) = (s.at[0], s.at[1]);
                let r = glue::path_rename(
                    &mut caller.data_mut().wasi,
                    &mut s.mem(),
                    a.fd,
                    op,
                    ol,
                    b.fd,
                    np,
                    nl,
                )
                .await;
                release(&mut caller, &a).await;
                release(&mut caller, &b).await;
                r
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "path_link",
        |mut caller: Caller<'_, State>,
         (old_fd, old_flags, old, old_len, new_fd, new, new_len): (
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
        )| {
            Box::new(async move {
                super::inline_io::before_file_op(&mut caller).await?;
                let (old_s, new_s) = match two_strs(&mut caller, (old, old_len), (new, new_len)) {
                    Ok(ab) => ab,
                    Err(e) => return Ok(e),
                };
                let (a, b) = match two_targets(&mut caller, old_fd, &old_s, new_fd, &new_s).await? {
                    Ok(Some(ab)) => ab,
                    Ok(None) => {
                        return super::p1::call_p1!(
                            caller,
                            path_link(old_fd, old_flags, old, old_len, new_fd, new, new_len)
                        );
                    }
                    Err(e) => return Ok(e),
                };
                let mut s = Scratch::new(&[a.name.as_str(), b.name.as_str()], 0);
                let ((op, ol), (np, nl)) = (s.at[0], s.at[1]);
                let r = glue::path_link(
                    &mut caller.data_mut().wasi,
                    &mut s.mem(),
                    a.fd,
                    old_flags,
                    op,
                    ol,
                    b.fd,
                    np,
                    nl,
                )
                .await;
                release(&mut caller, &a).await;
                release(&mut caller, &b).await;
                r
            })
        },
    )?;
    Ok(())
}

/// Both ends of a rename or link. `Ok(None)` when either goes on unchanged
/// (the host then refuses a final `.` or `..`).
async fn two_targets(
    caller: &mut Caller<'_, State>,
    fd_a: i32,
    a: &str,
    fd_b: i32,
    b: &str,
) -> wasmtime::Result<Result<Option<(Target, Target)>, i32>> {
    let ta = match change_target(caller, fd_a, a).await? {
        Ok(Some(t)) => t,
        other => return Ok(other.map(|_| None)),
    };
    match change_target(caller, fd_b, b).await? {
        Ok(Some(tb)) => Ok(Ok(Some((ta, tb)))),
        other => {
            release(caller, &ta).await;
            Ok(other.map(|_| None))
        }
    }
}
