//! Opens and set-times for preview 3: special files refused, and protected
//! paths opened read-only.

use wasmtime::component::{Accessor, LinkerInstance, Resource};
use wasmtime_wasi::filesystem::Descriptor;
use wasmtime_wasi::p3::bindings::filesystem::types::{
    DescriptorFlags, DescriptorType, ErrorCode, HostDescriptorWithStore, NewTimestamp, OpenFlags,
    PathFlags,
};

use super::changes::P3Fs;
use super::{Fs, Host, borrow, code, fs_of};
use crate::backend::wasm::component::CState;
use crate::backend::wasm::guard_path::{self};
use crate::backend::wasm::protect::Guard;
use crate::backend::wasm::special;

pub(super) fn add_opens(fs: &mut LinkerInstance<'_, CState>) -> wasmtime::Result<()> {
    fs.func_wrap_concurrent(
        "[method]descriptor.open-at",
        |acc: &Accessor<CState>,
         (fd, path_flags, path, oflags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::pin(async move {
                if path.len() > crate::backend::wasm::MAX_GUEST_PATH {
                    return Ok((Err(ErrorCode::NameTooLong),));
                }
                let guard = guard_of(acc);
                let fs = fs_of(acc);
                let write = oflags.intersects(OpenFlags::CREATE | OpenFlags::TRUNCATE)
                    || flags.contains(DescriptorFlags::WRITE);
                if guard.active() && write {
                    let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
                    let mut pfs = P3Fs(&fs);
                    match guard_path::open_target(&mut pfs, &guard, fd.rep(), follow, &path).await?
                    {
                        Ok(Some(t)) => {
                            // The last name unfollowed (the only path flag).
                            let r = open_checked(
                                &fs,
                                &guard,
                                borrow(t.rep),
                                PathFlags::empty(),
                                t.name.clone(),
                                oflags,
                                flags,
                            )
                            .await;
                            guard_path::release(&mut pfs, &t)?;
                            return r;
                        }
                        Ok(None) => {}
                        Err(e) => return Ok((Err(e),)),
                    }
                }
                open_checked(&fs, &guard, fd, path_flags, path, oflags, flags).await
            })
        },
    )?;
    fs.func_wrap_concurrent(
        "[method]descriptor.set-times-at",
        |acc: &Accessor<CState>,
         (fd, path_flags, path, atim, mtim): (
            Resource<Descriptor>,
            PathFlags,
            String,
            NewTimestamp,
            NewTimestamp,
        )| {
            Box::pin(async move {
                if path.len() > crate::backend::wasm::MAX_GUEST_PATH {
                    return Ok((Err(ErrorCode::NameTooLong),));
                }
                let guard = guard_of(acc);
                let fs = fs_of(acc);
                let mut pfs = P3Fs(&fs);
                let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
                let t = match guard_path::times_target(&mut pfs, &guard, fd.rep(), follow, &path)
                    .await?
                {
                    Ok(t) => t,
                    Err(e) => return Ok((Err(e),)),
                };
                // Through a target, its last name is not a symlink to follow.
                let (dir, path, path_flags) = match &t {
                    Some(t) => (borrow(t.rep), t.name.clone(), PathFlags::empty()),
                    None => (fd, path, path_flags),
                };
                let r = if precheck(&fs, &dir, path_flags, &path).await {
                    let set = <Host as HostDescriptorWithStore<CState>>::set_times_at(
                        &fs, dir, path_flags, path, atim, mtim,
                    );
                    let watched = special::watched(set).await;
                    match watched.result {
                        Ok(()) => Ok(()),
                        Err(e) => Err(refusal(code(e)?, watched.interrupted)),
                    }
                } else {
                    Err(ErrorCode::NotPermitted)
                };
                if let Some(t) = &t {
                    guard_path::release(&mut pfs, t)?;
                }
                Ok((r,))
            })
        },
    )?;
    Ok(())
}

pub(super) fn guard_of(acc: &Accessor<CState>) -> Guard {
    acc.with(|mut a| a.get().common.guard.clone())
}

pub(super) type OpenReturn = (Result<Resource<Descriptor>, ErrorCode>,);

/// `open-at` with the special-file checks (`special`); a directory opened
/// inside a protected dir is made read-only (`protect`).
pub(super) async fn open_checked(
    fs: &Fs,
    guard: &Guard,
    fd: Resource<Descriptor>,
    path_flags: PathFlags,
    path: String,
    oflags: OpenFlags,
    flags: DescriptorFlags,
) -> wasmtime::Result<OpenReturn> {
    if !precheck(fs, &fd, path_flags, &path).await {
        return Ok((Err(ErrorCode::NotPermitted),));
    }
    let open =
        <Host as HostDescriptorWithStore<CState>>::open_at(fs, fd, path_flags, path, oflags, flags);
    let watched = special::watched(open).await;
    let new = match watched.result {
        Ok(new) => new,
        Err(e) => return Ok((Err(refusal(code(e)?, watched.interrupted)),)),
    };
    // What was opened must be a file or a directory (`special`).
    let ty = <Host as HostDescriptorWithStore<CState>>::get_type(fs, borrow(new.rep())).await;
    match ty {
        Ok(t) if p3_allowed(&t) => {
            if matches!(t, DescriptorType::Directory) && guard.active() {
                fs.with(|mut a| {
                    let view = a.get();
                    guard.sweep_once(view.table);
                    restrict(view.table, guard, new.rep());
                });
            }
            Ok((Ok(new),))
        }
        _ => {
            fs.with(|mut a| a.get().table.delete(new))?;
            Ok((Err(ErrorCode::NotPermitted),))
        }
    }
}

/// Whether a p3 descriptor type may be held by a guest.
pub(super) fn p3_allowed(t: &DescriptorType) -> bool {
    matches!(t, DescriptorType::RegularFile | DescriptorType::Directory)
}

/// Before a call that opens a path (`special`): false if `path` under `dir`
/// is a special file. A path that cannot be stat'ed goes on to the call,
/// which reports its own error.
pub(super) async fn precheck(
    fs: &Fs,
    dir: &Resource<Descriptor>,
    path_flags: PathFlags,
    path: &str,
) -> bool {
    if !special::precheck() {
        return true;
    }
    let st = <Host as HostDescriptorWithStore<CState>>::stat_at(
        fs,
        borrow(dir.rep()),
        path_flags,
        path.to_string(),
    )
    .await;
    match st {
        Ok(st) => p3_allowed(&st.type_) || matches!(st.type_, DescriptorType::SymbolicLink),
        Err(_) => true,
    }
}

/// An error code after a watched call: EINTR while the watchdog interrupted a
/// thread is the refusal of a special file.
pub(super) fn refusal(code: ErrorCode, interrupted: bool) -> ErrorCode {
    match code {
        ErrorCode::Interrupted if interrupted => ErrorCode::NotPermitted,
        code => code,
    }
}

/// The directory handle `rep` made read-only if inside a protected dir.
pub(super) fn restrict(table: &mut wasmtime::component::ResourceTable, guard: &Guard, rep: u32) {
    if let Ok(Descriptor::Dir(d)) = table.get_mut(&borrow(rep)) {
        guard.restrict(d);
    }
}
