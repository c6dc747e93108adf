//! Preview-2 changes by path, made through a fresh handle on the parent
//! (`protect` has the rule and why).

use wasmtime::StoreContextMut;
use wasmtime::component::{LinkerInstance, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DescriptorType, ErrorCode, Host as FsTypesHost, HostDescriptor, OpenFlags,
    PathFlags,
};

use super::component::CState;
use super::protect::{self, Guard};

/// Symlink hops an open for writing follows (Linux's limit is 40).
const MAX_HOPS: usize = 40;

/// The handle a change goes through and the final name it names there.
pub(super) struct Target {
    rep: u32,
    /// Opened here (dropped by `release`), or the guest's own handle.
    owned: bool,
    pub(super) name: String,
}

impl Target {
    pub(super) fn dir(&self) -> Resource<Descriptor> {
        Resource::new_borrow(self.rep)
    }
}

type Checked = wasmtime::Result<Result<Option<Target>, ErrorCode>>;

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

pub(super) fn release(view: &mut WasiFilesystemCtxView<'_>, t: &Target) -> wasmtime::Result<()> {
    if t.owned {
        HostDescriptor::drop(view, Resource::<Descriptor>::new_own(t.rep))?;
    }
    Ok(())
}

/// Opens the parent of `path` under `dir` (following symlinks, as the change
/// itself would) and checks the final name. `Ok(None)`: go on unchanged.
async fn target(
    view: &mut WasiFilesystemCtxView<'_>,
    guard: &Guard,
    dir: u32,
    path: &str,
) -> Checked {
    let Some((parent, name)) = protect::split(path) else {
        return Ok(Ok(None));
    };
    let (rep, owned) = match parent {
        None => (dir, false),
        Some(p) => {
            let opened = HostDescriptor::open_at(
                view,
                Resource::new_borrow(dir),
                PathFlags::SYMLINK_FOLLOW,
                p.to_string(),
                OpenFlags::DIRECTORY,
                DescriptorFlags::READ,
            )
            .await;
            match opened {
                Ok(r) => {
                    restrict(view, guard, &r);
                    (r.rep(), true)
                }
                Err(e) => return Ok(Err(view.convert_error_code(e)?)),
            }
        }
    };
    let t = Target {
        rep,
        owned,
        name: name.to_string(),
    };
    let named = match view.table.get(&t.dir()) {
        Ok(Descriptor::Dir(d)) => guard.named(&d.dir, name.trim_end_matches('/')),
        // Not a directory: the change fails on its own.
        Ok(Descriptor::File(_)) => false,
        Err(_) => true,
    };
    if named {
        release(view, &t)?;
        return Ok(Err(ErrorCode::NotPermitted));
    }
    Ok(Ok(Some(t)))
}

/// The target of a change whose final name is not followed.
pub(super) async fn change_target(
    view: &mut WasiFilesystemCtxView<'_>,
    guard: &Guard,
    dir: u32,
    path: &str,
) -> Checked {
    if !guard.active() {
        return Ok(Ok(None));
    }
    target(view, guard, dir, path).await
}

/// The target of an open for writing: a final symlink followed hop by hop
/// (when `flags` follows), so that the last name is opened without following.
pub(super) async fn open_target(
    view: &mut WasiFilesystemCtxView<'_>,
    guard: &Guard,
    dir: u32,
    flags: PathFlags,
    path: &str,
) -> Checked {
    let mut t = match change_target(view, guard, dir, path).await? {
        Ok(Some(t)) => t,
        other => return Ok(other),
    };
    if !flags.contains(PathFlags::SYMLINK_FOLLOW) {
        return Ok(Ok(Some(t)));
    }
    for _ in 0..MAX_HOPS {
        let st = HostDescriptor::stat_at(view, t.dir(), PathFlags::empty(), t.name.clone()).await;
        if !matches!(st, Ok(st) if st.type_ == DescriptorType::SymbolicLink) {
            return Ok(Ok(Some(t)));
        }
        let link = match HostDescriptor::readlink_at(view, t.dir(), t.name.clone()).await {
            Ok(l) => l,
            Err(e) => {
                release(view, &t)?;
                return Ok(Err(view.convert_error_code(e)?));
            }
        };
        let next = match target(view, guard, t.rep, &link).await? {
            Ok(Some(n)) => n,
            // An absolute target, or one ending in `.` or `..`: not a file
            // this open could create or write inside the sandbox.
            Ok(None) => {
                release(view, &t)?;
                return Ok(Err(ErrorCode::NotPermitted));
            }
            Err(e) => {
                release(view, &t)?;
                return Ok(Err(e));
            }
        };
        if next.rep == t.rep {
            t = Target {
                owned: t.owned,
                ..next
            };
        } else {
            release(view, &t)?;
            t = next;
        }
    }
    release(view, &t)?;
    Ok(Err(ErrorCode::Loop))
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

/// Registers the guarded path changes: `create-directory-at`,
/// `remove-directory-at`, `unlink-file-at`, `symlink-at`, `rename-at`,
/// `link-at`.
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
                        let r = HostDescriptor::$method(&mut view, t.dir(), t.name.clone()).await;
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
                let r = HostDescriptor::symlink_at(&mut view, t.dir(), old, t.name.clone()).await;
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
                let (a, b) = match two_targets(&mut view, &guard, fd.rep(), &old, new_fd.rep(), &new).await? {
                    Ok(Some(ab)) => ab,
                    Ok(None) => {
                        let r = HostDescriptor::rename_at(&mut view, fd, old, new_fd, new).await;
                        return done(&mut view, r);
                    }
                    Err(e) => return Ok((Err(e),)),
                };
                let r = HostDescriptor::rename_at(&mut view, a.dir(), a.name.clone(), b.dir(), b.name.clone()).await;
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
                    match two_targets(&mut view, &guard, fd.rep(), &old, new_fd.rep(), &new).await?
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
                    a.dir(),
                    old_flags,
                    a.name.clone(),
                    b.dir(),
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

/// Both ends of a rename or link; `Ok(None)` when either goes on unchanged.
async fn two_targets(
    view: &mut WasiFilesystemCtxView<'_>,
    guard: &Guard,
    fd_a: u32,
    a: &str,
    fd_b: u32,
    b: &str,
) -> wasmtime::Result<Result<Option<(Target, Target)>, ErrorCode>> {
    let ta = match change_target(view, guard, fd_a, a).await? {
        Ok(Some(t)) => t,
        other => return Ok(other.map(|_| None)),
    };
    match change_target(view, guard, fd_b, b).await? {
        Ok(Some(tb)) => Ok(Ok(Some((ta, tb)))),
        other => {
            release(view, &ta)?;
            Ok(other.map(|_| None))
        }
    }
}
