//! Changes by path for preview 3 (create, link, rename, remove): protected
//! paths and their ancestors kept as they are.

use wasmtime::component::{Accessor, LinkerInstance, Resource};
use wasmtime_wasi::filesystem::Descriptor;
use wasmtime_wasi::p3::bindings::filesystem::types::{
    DescriptorFlags, DescriptorType, ErrorCode, HostDescriptorWithStore, NewTimestamp, OpenFlags,
    PathFlags,
};

use super::opens::{guard_of, restrict};
use super::{Fs, Host, borrow, code, fs_of};
use crate::backend::wasm::component::CState;
use crate::backend::wasm::guard_path::{self, PathFs, Target};
use crate::backend::wasm::protect::Guard;

pub(super) fn add_changes(fs: &mut LinkerInstance<'_, CState>) -> wasmtime::Result<()> {
    macro_rules! one_path {
        ($name:literal, $method:ident) => {
            fs.func_wrap_concurrent(
                $name,
                |acc: &Accessor<CState>, (fd, path): (Resource<Descriptor>, String)| {
                    Box::pin(async move {
                        let guard = guard_of(acc);
                        let fs = fs_of(acc);
                        let mut pfs = P3Fs(&fs);
                        let t = match guard_path::change_target(&mut pfs, &guard, fd.rep(), &path)
                            .await?
                        {
                            Ok(t) => t,
                            Err(e) => return Ok((Err(e),)),
                        };
                        let (dir, name) = at(&t, fd, path);
                        let r = <Host as HostDescriptorWithStore<CState>>::$method(&fs, dir, name)
                            .await;
                        finish(&mut pfs, t.as_ref(), None, r)
                    })
                },
            )?;
        };
    }
    one_path!(
        "[method]descriptor.create-directory-at",
        create_directory_at
    );
    one_path!(
        "[method]descriptor.remove-directory-at",
        remove_directory_at
    );
    one_path!("[method]descriptor.unlink-file-at", unlink_file_at);
    // Times through a descriptor: not through a file opened for reading
    // (`Guard::refuses_times`).
    fs.func_wrap_concurrent(
        "[method]descriptor.set-times",
        |acc: &Accessor<CState>,
         (fd, atim, mtim): (Resource<Descriptor>, NewTimestamp, NewTimestamp)| {
            Box::pin(async move {
                let refused = acc.with(|mut a| {
                    let s = a.get();
                    let guard = s.common.guard.clone();
                    matches!(s.table.get(&fd), Ok(d) if guard.refuses_times(d))
                });
                if refused {
                    return Ok((Err(ErrorCode::NotPermitted),));
                }
                let fs = fs_of(acc);
                match <Host as HostDescriptorWithStore<CState>>::set_times(&fs, fd, atim, mtim)
                    .await
                {
                    Ok(()) => Ok((Ok(()),)),
                    Err(e) => Ok((Err(code(e)?),)),
                }
            })
        },
    )?;
    fs.func_wrap_concurrent(
        "[method]descriptor.symlink-at",
        |acc: &Accessor<CState>, (fd, old, new): (Resource<Descriptor>, String, String)| {
            Box::pin(async move {
                let guard = guard_of(acc);
                let fs = fs_of(acc);
                let mut pfs = P3Fs(&fs);
                let t = match guard_path::change_target(&mut pfs, &guard, fd.rep(), &new).await? {
                    Ok(t) => t,
                    Err(e) => return Ok((Err(e),)),
                };
                let (dir, name) = at(&t, fd, new);
                let r = <Host as HostDescriptorWithStore<CState>>::symlink_at(&fs, dir, old, name)
                    .await;
                finish(&mut pfs, t.as_ref(), None, r)
            })
        },
    )?;
    fs.func_wrap_concurrent(
        "[method]descriptor.rename-at",
        |acc: &Accessor<CState>,
         (fd, old, new_fd, new): (Resource<Descriptor>, String, Resource<Descriptor>, String)| {
            Box::pin(async move {
                let guard = guard_of(acc);
                let fs = fs_of(acc);
                let mut pfs = P3Fs(&fs);
                let two = match two_ends(&mut pfs, &guard, (fd, old), (new_fd, new)).await? {
                    Ok(two) => two,
                    Err(e) => return Ok((Err(e),)),
                };
                let ((dir_a, old), (dir_b, new)) = (two.a.clone_at(), two.b.clone_at());
                let r = <Host as HostDescriptorWithStore<CState>>::rename_at(
                    &fs, dir_a, old, dir_b, new,
                )
                .await;
                two.finish(&mut pfs, r)
            })
        },
    )?;
    fs.func_wrap_concurrent(
        "[method]descriptor.link-at",
        |acc: &Accessor<CState>,
         (fd, old_flags, old, new_fd, new): (
            Resource<Descriptor>,
            PathFlags,
            String,
            Resource<Descriptor>,
            String,
        )| {
            Box::pin(async move {
                let guard = guard_of(acc);
                let fs = fs_of(acc);
                let mut pfs = P3Fs(&fs);
                let two = match two_ends(&mut pfs, &guard, (fd, old), (new_fd, new)).await? {
                    Ok(two) => two,
                    Err(e) => return Ok((Err(e),)),
                };
                let ((dir_a, old), (dir_b, new)) = (two.a.clone_at(), two.b.clone_at());
                let r = <Host as HostDescriptorWithStore<CState>>::link_at(
                    &fs, dir_a, old_flags, old, dir_b, new,
                )
                .await;
                two.finish(&mut pfs, r)
            })
        },
    )?;
    Ok(())
}

/// Both ends of a rename or link: where each goes, and the targets to
/// release after the change.
pub(super) struct TwoEnds {
    pub(super) targets: Option<(Target, Target)>,
    pub(super) a: End,
    pub(super) b: End,
}

/// One end of a change: the handle and the name it goes through.
pub(super) struct End(u32, String);

impl End {
    pub(super) fn clone_at(&self) -> (Resource<Descriptor>, String) {
        (borrow(self.0), self.1.clone())
    }
}

impl TwoEnds {
    pub(super) fn finish(
        &self,
        pfs: &mut P3Fs<'_>,
        r: wasmtime_wasi::p3::filesystem::FilesystemResult<()>,
    ) -> wasmtime::Result<(Result<(), ErrorCode>,)> {
        let (a, b) = match &self.targets {
            Some((a, b)) => (Some(a), Some(b)),
            None => (None, None),
        };
        finish(pfs, a, b, r)
    }
}

/// The checked ends of a rename or link (`guard_path::two_targets`).
pub(super) async fn two_ends(
    pfs: &mut P3Fs<'_>,
    guard: &Guard,
    (fd_a, a): (Resource<Descriptor>, String),
    (fd_b, b): (Resource<Descriptor>, String),
) -> wasmtime::Result<Result<TwoEnds, ErrorCode>> {
    let targets =
        match guard_path::two_targets(pfs, guard, (fd_a.rep(), &a), (fd_b.rep(), &b)).await? {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
    let (end_a, end_b) = match &targets {
        Some((ta, tb)) => (End(ta.rep, ta.name.clone()), End(tb.rep, tb.name.clone())),
        None => (End(fd_a.rep(), a), End(fd_b.rep(), b)),
    };
    Ok(Ok(TwoEnds {
        targets,
        a: end_a,
        b: end_b,
    }))
}

/// Where a change goes: through the checked target, or unchanged.
pub(super) fn at(
    t: &Option<Target>,
    fd: Resource<Descriptor>,
    path: String,
) -> (Resource<Descriptor>, String) {
    at_ref(t.as_ref(), fd, path)
}

pub(super) fn at_ref(
    t: Option<&Target>,
    fd: Resource<Descriptor>,
    path: String,
) -> (Resource<Descriptor>, String) {
    match t {
        Some(t) => (borrow(t.rep), t.name.clone()),
        None => (fd, path),
    }
}

/// Releases the targets and gives the guest the change's result.
pub(super) fn finish(
    pfs: &mut P3Fs<'_>,
    a: Option<&Target>,
    b: Option<&Target>,
    r: wasmtime_wasi::p3::filesystem::FilesystemResult<()>,
) -> wasmtime::Result<(Result<(), ErrorCode>,)> {
    for t in [a, b].into_iter().flatten() {
        guard_path::release(pfs, t)?;
    }
    match r {
        Ok(()) => Ok((Ok(()),)),
        Err(e) => Ok((Err(code(e)?),)),
    }
}

/// The walk's directory operations through wasmtime-wasi's p3 functions.
pub(super) struct P3Fs<'a>(pub(super) &'a Fs);

impl PathFs for P3Fs<'_> {
    type Code = ErrorCode;

    fn not_permitted() -> ErrorCode {
        ErrorCode::NotPermitted
    }

    fn too_many_hops() -> ErrorCode {
        ErrorCode::Loop
    }

    async fn open_dir(
        &mut self,
        guard: &Guard,
        dir: u32,
        path: &str,
    ) -> wasmtime::Result<Result<u32, ErrorCode>> {
        let opened = <Host as HostDescriptorWithStore<CState>>::open_at(
            self.0,
            borrow(dir),
            PathFlags::SYMLINK_FOLLOW,
            path.to_string(),
            OpenFlags::DIRECTORY,
            DescriptorFlags::READ,
        )
        .await;
        match opened {
            Ok(r) => {
                let rep = r.rep();
                self.0.with(|mut a| restrict(a.get().table, guard, rep));
                Ok(Ok(rep))
            }
            Err(e) => Ok(Err(code(e)?)),
        }
    }

    async fn is_symlink(&mut self, dir: u32, name: &str) -> bool {
        let st = <Host as HostDescriptorWithStore<CState>>::stat_at(
            self.0,
            borrow(dir),
            PathFlags::empty(),
            name.to_string(),
        )
        .await;
        matches!(st, Ok(st) if matches!(st.type_, DescriptorType::SymbolicLink))
    }

    async fn readlink(
        &mut self,
        dir: u32,
        name: &str,
    ) -> wasmtime::Result<Result<String, ErrorCode>> {
        let r = <Host as HostDescriptorWithStore<CState>>::readlink_at(
            self.0,
            borrow(dir),
            name.to_string(),
        )
        .await;
        match r {
            Ok(l) => Ok(Ok(l)),
            Err(e) => Ok(Err(code(e)?)),
        }
    }

    fn named(&mut self, guard: &Guard, dir: u32, name: &str) -> bool {
        self.0.with(|mut a| match a.get().table.get(&borrow(dir)) {
            Ok(Descriptor::Dir(d)) => guard.named(&d.dir, name),
            Ok(Descriptor::File(_)) => false,
            Err(_) => true,
        })
    }

    fn close(&mut self, rep: u32) -> wasmtime::Result<()> {
        self.0.with(|mut a| {
            a.get()
                .table
                .delete(Resource::<Descriptor>::new_own(rep))
                .map(|_| ())
                .map_err(wasmtime::Error::from)
        })
    }
}
