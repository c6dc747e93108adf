//! Preview-2 changes by path, made through a fresh handle on the parent
//! (`protect` has the rule and why; `guard_path` the walk).

use wasmtime::StoreContextMut;
use wasmtime::component::{LinkerInstance, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DescriptorType, ErrorCode, Host as FsTypesHost, HostDescriptor, NewTimestamp,
    OpenFlags, PathFlags,
};

use super::component::CState;
use super::guard_path::{PathFs, Target, change_target, release, two_targets};
use super::protect::Guard;

/// A directory handle just opened: read-only if inside a protected dir.
pub(super) fn restrict(
    view: &mut WasiFilesystemCtxView<'_>,
    guard: &Guard,
    r: &Resource<Descriptor>,
) {
    if let Ok(Descriptor::Dir(d)) = view.table.get_mut(r) {
        guard.restrict(d);
    }
}

impl PathFs for WasiFilesystemCtxView<'_> {
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
        let opened = HostDescriptor::open_at(
            self,
            Resource::new_borrow(dir),
            PathFlags::SYMLINK_FOLLOW,
            path.to_string(),
            OpenFlags::DIRECTORY,
            DescriptorFlags::READ,
        )
        .await;
        match opened {
            Ok(r) => {
                restrict(self, guard, &r);
                Ok(Ok(r.rep()))
            }
            Err(e) => Ok(Err(self.convert_error_code(e)?)),
        }
    }

    async fn is_symlink(&mut self, dir: u32, name: &str) -> bool {
        let st = HostDescriptor::stat_at(
            self,
            Resource::new_borrow(dir),
            PathFlags::empty(),
            name.to_string(),
        )
        .await;
        matches!(st, Ok(st) if st.type_ == DescriptorType::SymbolicLink)
    }

    async fn readlink(
        &mut self,
        dir: u32,
        name: &str,
    ) -> wasmtime::Result<Result<String, ErrorCode>> {
        match HostDescriptor::readlink_at(self, Resource::new_borrow(dir), name.to_string()).await {
            Ok(l) => Ok(Ok(l)),
            Err(e) => Ok(Err(self.convert_error_code(e)?)),
        }
    }

    fn named(&mut self, guard: &Guard, dir: u32, name: &str) -> bool {
        match self.table.get(&Resource::<Descriptor>::new_borrow(dir)) {
            Ok(Descriptor::Dir(d)) => guard.named(&d.dir, name),
            Ok(Descriptor::File(_)) => false,
            Err(_) => true,
        }
    }

    fn close(&mut self, rep: u32) -> wasmtime::Result<()> {
        HostDescriptor::drop(self, Resource::<Descriptor>::new_own(rep))
    }
}

fn borrow(t: &Target) -> Resource<Descriptor> {
    Resource::new_borrow(t.rep)
}

type Unit = (Result<(), ErrorCode>,);

fn done(
    view: &mut WasiFilesystemCtxView<'_>,
    r: wasmtime_wasi::p2::FsResult<()>,
) -> wasmtime::Result<Unit> {
    match r {
        Ok(()) => Ok((Ok(()),)),
        Err(e) => Ok((Err(view.convert_error_code(e)?),)),
    }
}

/// Registers the guarded changes: `create-directory-at`,
/// `remove-directory-at`, `unlink-file-at`, `set-times`, `symlink-at`,
/// `rename-at`, `link-at`.
pub(super) fn add_to_linker(fs: &mut LinkerInstance<'_, CState>) -> wasmtime::Result<()> {
    macro_rules! one_path {
        ($name:literal, $method:ident) => {
            fs.func_wrap_async(
                $name,
                |mut store: StoreContextMut<'_, CState>,
                 (fd, path): (Resource<Descriptor>, String)| {
                    Box::new(async move {
                        let guard = store.data().common.guard.clone();
                        let mut view = store.data_mut().filesystem();
                        let t = match change_target(&mut view, &guard, fd.rep(), &path).await? {
                            Ok(Some(t)) => t,
                            Ok(None) => {
                                let r = HostDescriptor::$method(&mut view, fd, path).await;
                                return done(&mut view, r);
                            }
                            Err(e) => return Ok((Err(e),)),
                        };
                        let r =
                            HostDescriptor::$method(&mut view, borrow(&t), t.name.clone()).await;
                        release(&mut view, &t)?;
                        done(&mut view, r)
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
    fs.func_wrap_async(
        "[method]descriptor.set-times",
        |mut store: StoreContextMut<'_, CState>,
         (fd, atim, mtim): (Resource<Descriptor>, NewTimestamp, NewTimestamp)| {
            Box::new(async move {
                let guard = store.data().common.guard.clone();
                let mut view = store.data_mut().filesystem();
                if matches!(view.table.get(&fd), Ok(d) if guard.refuses_times(d)) {
                    return Ok((Err(ErrorCode::NotPermitted),));
                }
                let r = HostDescriptor::set_times(&mut view, fd, atim, mtim).await;
                done(&mut view, r)
            })
        },
    )?;
    fs.func_wrap_async(
        "[method]descriptor.symlink-at",
        |mut store: StoreContextMut<'_, CState>,
         (fd, old, new): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                let guard = store.data().common.guard.clone();
                let mut view = store.data_mut().filesystem();
                let t = match change_target(&mut view, &guard, fd.rep(), &new).await? {
                    Ok(Some(t)) => t,
                    Ok(None) => {
                        let r = HostDescriptor::symlink_at(&mut view, fd, old, new).await;
                        return done(&mut view, r);
                    }
                    Err(e) => return Ok((Err(e),)),
                };
                let r =
                    HostDescriptor::symlink_at(&mut view, borrow(&t), old, t.name.clone()).await;
                release(&mut view, &t)?;
                done(&mut view, r)
            })
        },
    )?;
    fs.func_wrap_async(
        "[method]descriptor.rename-at",
        |mut store: StoreContextMut<'_, CState>,
         (fd, old, new_fd, new): (Resource<Descriptor>, String, Resource<Descriptor>, String)| {
            Box::new(async move {
                let guard = store.data().common.guard.clone();
                let mut view = store.data_mut().filesystem();
                let (a, b) = match two_targets(&mut view, &guard, (fd.rep(), &old), (new_fd.rep(), &new)).await? {
                    Ok(Some(ab)) => ab,
                    Ok(None) => {
                        let r = HostDescriptor::rename_at(&mut view, fd, old, new_fd, new).await;
                        return done(&mut view, r);
                    }
                    Err(e) => return Ok((Err(e),)),
                };
                let r = HostDescriptor::rename_at(&mut view, borrow(&a), a.name.clone(), borrow(&b), b.name.clone()).await;
                release(&mut view, &a)?;
                release(&mut view, &b)?;
                done(&mut view, r)
            })
        },
    )?;
    fs.func_wrap_async(
        "[method]descriptor.link-at",
        |mut store: StoreContextMut<'_, CState>,
         (fd, old_flags, old, new_fd, new): (
            Resource<Descriptor>,
            PathFlags,
            String,
            Resource<Descriptor>,
            String,
        )| {
            Box::new(async move {
                let guard = store.data().common.guard.clone();
                let mut view = store.data_mut().filesystem();
                let (a, b) =
                    match two_targets(&mut view, &guard, (fd.rep(), &old), (new_fd.rep(), &new))
                        .await?
                    {
                        Ok(Some(ab)) => ab,
                        Ok(None) => {
                            let r =
                                HostDescriptor::link_at(&mut view, fd, old_flags, old, new_fd, new)
                                    .await;
                            return done(&mut view, r);
                        }
                        Err(e) => return Ok((Err(e),)),
                    };
                let r = HostDescriptor::link_at(
                    &mut view,
                    borrow(&a),
                    old_flags,
                    a.name.clone(),
                    borrow(&b),
                    b.name.clone(),
                )
                .await;
                release(&mut view, &a)?;
                release(&mut view, &b)?;
                done(&mut view, r)
            })
        },
    )?;
    Ok(())
}
