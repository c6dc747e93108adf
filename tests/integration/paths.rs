//! The path layer (docs/src/attacks.md F cases 1-4, 6, 7, 9, 10; case 5, the swap race,
//! is in the contract suite): every denied case next to its
//! allowed twin, and accesses made through the capability handle.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toolhost::{AllowedDirSpec, PathError, Sandbox, SandboxConfig};

use crate::util::*;

fn setup() -> (Tmp, Sandbox) {
    let t = Tmp::new();
    t.write("f.txt", "inside");
    t.write("sub/g.txt", "inside-g");
    let sb = t.sandbox(SandboxConfig::default());
    (t, sb)
}

fn outside(sb: &Sandbox, p: &str) {
    match sb.resolve_path(p, None) {
        Err(PathError::Outside(shown)) => assert_eq!(shown, p),
        other => panic!("{p:?} should be outside, got {other:?}"),
    }
    assert!(!sb.validate_file_path(p), "{p:?}");
}

/// Reads a resolved path through the capability handle.
fn read_via_handle(sb: &Sandbox, p: &str) -> std::io::Result<String> {
    let r = sb
        .resolve_path(p, None)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut s = String::new();
    sb.dirs()
        .dir_of(&r)
        .open(r.relative())?
        .read_to_string(&mut s)?;
    Ok(s)
}

#[test]
fn attack_01_dotdot_forms_are_refused() {
    let (_t, sb) = setup();
    for p in [
        "../../etc/passwd",
        "a/../../x",
        "./.././..",
        "sub/../..",
        "..",
    ] {
        outside(&sb, p);
    }
    // Allowed twin: `..` that stays inside.
    assert_eq!(read_via_handle(&sb, "sub/../f.txt").unwrap(), "inside");
    assert_eq!(read_via_handle(&sb, "./sub/./g.txt").unwrap(), "inside-g");
}

#[test]
fn attack_02_absolute_and_foreign_forms() {
    let (t, sb) = setup();
    outside(&sb, "/etc/passwd");
    outside(&sb, "//etc");
    outside(&sb, &t.outside().join("secret.txt").to_string_lossy());
    assert!(matches!(
        sb.resolve_path("file:///etc/passwd", None),
        Err(PathError::Url(_))
    ));
    // Windows forms are plain (missing) names here, and stay inside.
    for p in [r"C:\Windows\win.ini", r"\\?\C:\"] {
        let r = sb.resolve_path(p, None).expect(p);
        assert!(r.host_path().starts_with(t.ws()), "{p}");
        assert!(read_via_handle(&sb, p).is_err());
    }
    // Allowed twin: an absolute path inside.
    let abs = t.ws().join("f.txt");
    let r = sb.resolve_path(&abs, None).unwrap();
    assert_eq!(r.host_path(), abs);
    assert_eq!(r.relative(), Path::new("f.txt"));
    assert!(sb.validate_file_path(&abs));
}

#[test]
fn attack_03_symlinks_pointing_out() {
    let (t, sb) = setup();
    std::os::unix::fs::symlink("/etc", t.ws().join("l")).unwrap();
    std::os::unix::fs::symlink("../../..", t.ws().join("up")).unwrap();
    std::os::unix::fs::symlink(t.outside(), t.ws().join("abs_out")).unwrap();
    for p in [
        "l/passwd",
        "up/etc/passwd",
        "abs_out/secret.txt",
        "l",
        "abs_out",
    ] {
        outside(&sb, p);
    }
    // Opening through the handle is refused as well, even without resolve().
    let dir = &sb.allowed_dirs()[0];
    assert!(dir.dir().open("abs_out/secret.txt").is_err());
    // Allowed twin: a symlink that stays inside resolves to its target.
    std::os::unix::fs::symlink("sub", t.ws().join("in")).unwrap();
    let r = sb.resolve_path("in/g.txt", None).unwrap();
    assert_eq!(r.relative(), Path::new("sub/g.txt"));
    assert_eq!(read_via_handle(&sb, "in/g.txt").unwrap(), "inside-g");
}

#[tokio::test]
async fn attack_04_symlink_made_by_one_call_followed_by_the_next() {
    let (t, sb) = setup();
    let made = sh(
        &sb,
        &format!("ln -s {} esc && ln -s sub ok", t.outside().display()),
    )
    .await;
    assert!(made.success(), "{made:?}");
    outside(&sb, "esc/secret.txt");
    let r = sb
        .run(toolhost::RunRequest::new(["cat", "secret.txt"]).cwd("esc"))
        .await;
    assert_eq!(r.outcome.kind, toolhost::OutcomeKind::CwdOutside, "{r:?}");
    assert!(!r.stdout.contains(CANARY));
    // Allowed twin: the inside link works as a path and as a cwd.
    assert_eq!(read_via_handle(&sb, "ok/g.txt").unwrap(), "inside-g");
    let r = sb
        .run(toolhost::RunRequest::new(["cat", "g.txt"]).cwd("ok"))
        .await;
    assert_eq!(r.stdout, "inside-g", "{r:?}");
}

#[test]
fn attack_06_trailing_slash_and_dot_after_a_symlink() {
    let (t, sb) = setup();
    std::os::unix::fs::symlink("/etc", t.ws().join("l")).unwrap();
    for p in ["l/", "l/.", "l/..", "l/./passwd"] {
        outside(&sb, p);
    }
    std::os::unix::fs::symlink("sub", t.ws().join("in")).unwrap();
    for p in ["in/", "in/.", "in/.."] {
        let r = sb.resolve_path(p, None).expect(p);
        assert!(r.host_path().starts_with(t.ws()), "{p}");
    }
    assert_eq!(
        sb.resolve_path("in/..", None).unwrap().relative(),
        Path::new("")
    );
}

#[test]
fn attack_07_prefix_confusion() {
    let t = Tmp::new();
    std::fs::create_dir_all(t.root.join("proj")).unwrap();
    std::fs::create_dir_all(t.root.join("proj-evil")).unwrap();
    std::fs::write(t.root.join("proj-evil/x"), CANARY).unwrap();
    std::fs::write(t.root.join("proj/x"), "inside").unwrap();
    let sb = Sandbox::new([t.root.join("proj")], SandboxConfig::default()).unwrap();
    outside(&sb, &t.root.join("proj-evil/x").to_string_lossy());
    outside(&sb, "../proj-evil/x");
    assert!(sb.validate_file_path(t.root.join("proj/x")));
}

#[test]
fn attack_09_odd_paths_fail_cleanly() {
    let (t, sb) = setup();
    assert!(matches!(sb.resolve_path("a\0b", None), Err(PathError::Nul)));
    assert!(matches!(sb.resolve_path("", None), Err(PathError::Empty)));
    // Invalid UTF-8: a valid (missing) name inside.
    let bad = std::ffi::OsStr::from_bytes(b"bad\xff\xfe");
    let r = sb.resolve_path(bad, None).unwrap();
    assert!(r.host_path().starts_with(t.ws()));
    // Fullwidth dots are not dots.
    let r = sb
        .resolve_path("\u{ff0e}\u{ff0e}/etc/passwd", None)
        .unwrap();
    assert!(r.host_path().starts_with(t.ws()));
    // Very long paths.
    let start = std::time::Instant::now();
    for long in ["a/".repeat(3000), "x".repeat(5000)] {
        match sb.resolve_path(&long, None) {
            Ok(r) => assert!(r.host_path().starts_with(t.ws())),
            Err(PathError::Io { reason, .. }) => {
                assert!(reason.contains("too long"), "{reason}")
            }
            Err(e) => panic!("{e}"),
        }
    }
    // Symlink loops: a clean error, quickly.
    std::os::unix::fs::symlink("loop_b", t.ws().join("loop_a")).unwrap();
    std::os::unix::fs::symlink("loop_a", t.ws().join("loop_b")).unwrap();
    let mut chain_prev = "loop_a".to_string();
    for i in 0..40 {
        let name = format!("chain{i}");
        std::os::unix::fs::symlink(&chain_prev, t.ws().join(&name)).unwrap();
        chain_prev = name;
    }
    for p in ["loop_a/x", "loop_a", &format!("{chain_prev}/x")] {
        match sb.resolve_path(p, None) {
            Err(PathError::Io { .. }) | Err(PathError::Outside(_)) => {}
            other => panic!("{p}: {other:?}"),
        }
    }
    assert!(start.elapsed() < Duration::from_secs(5));
    // Allowed twin: the same machinery resolves a normal path.
    assert!(sb.validate_file_path("f.txt"));
}

#[tokio::test]
async fn attack_10_special_files_never_block() {
    let (t, sb) = setup();
    let fifo = t.ws().join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink("/dev/zero", t.ws().join("zero")).unwrap();
    // Resolving opens nothing, so a FIFO cannot block it.
    assert!(sb.resolve_path("fifo", None).is_ok());
    outside(&sb, "zero");
    // A tool reading the FIFO is ended by the timeout, on time.
    let sb = t.sandbox(config_timeout(1.0));
    let r = run(&sb, &["cat", "fifo"]).await;
    assert!(r.timed_out, "{r:?}");
    assert!(r.duration < Duration::from_secs(4), "{:?}", r.duration);
}

#[test]
fn nested_read_only_dir_is_the_most_specific() {
    let t = Tmp::new();
    std::fs::create_dir(t.ws().join("ro")).unwrap();
    let sb = Sandbox::new(
        [
            toolhost::AllowedDirSpec::read_write(t.ws()),
            toolhost::AllowedDirSpec::read_only(t.ws().join("ro")),
        ],
        SandboxConfig::default(),
    )
    .unwrap();
    let r = sb.resolve_path("ro/new.txt", None).unwrap();
    assert!(r.read_only());
    assert_eq!(r.root_index(), 1);
    assert_eq!(r.relative(), Path::new("new.txt"));
    let r = sb.resolve_path("rw.txt", None).unwrap();
    assert!(!r.read_only());
    // base_dir must itself be inside.
    let r = sb.resolve_path("x", Some(&t.ws().join("ro"))).unwrap();
    assert!(r.read_only());
    assert!(matches!(
        sb.resolve_path("x", Some(&t.outside())),
        Err(PathError::Outside(_))
    ));
    // Missing components must be plain names.
    assert!(sb.resolve_path("missing/../../x", None).is_err());
}

/// A dangling symlink in a writable dir that points into a read-only one
/// is refused: taken as a missing name, it resolved as writable, and an
/// open for writing of the result created the file in the read-only dir.
/// Its twins: a missing plain name resolves, and so does the link once its
/// target exists (to the target, read-only).
#[cfg(unix)]
#[test]
fn a_dangling_symlink_is_not_a_missing_name() {
    let t = Tmp::new();
    std::fs::create_dir(t.ws().join("ro")).unwrap();
    std::os::unix::fs::symlink("ro/newfile", t.ws().join("dl")).unwrap();
    let sb = Sandbox::new(
        [
            toolhost::AllowedDirSpec::read_write(t.ws()),
            toolhost::AllowedDirSpec::read_only(t.ws().join("ro")),
        ],
        SandboxConfig::default(),
    )
    .unwrap();
    std::fs::create_dir(t.ws().join("sub")).unwrap();
    std::os::unix::fs::symlink("../ro/newfile", t.ws().join("sub/dang")).unwrap();
    for p in [
        "dl",
        "./dl",
        "dl/x",
        "dl/",
        "./dl/",
        "sub/dang",
        "sub/dang/",
        "./sub/dang/",
        "sub/../dl/",
        "sub/dang/.",
        "sub//dang//",
    ] {
        match sb.resolve_path(p, None) {
            Err(PathError::Io { reason, .. }) if reason.contains("symlink") => {}
            Err(PathError::NotFound(_)) if p.ends_with("/x") => {}
            other => panic!("{p}: {other:?}"),
        }
        assert!(!sb.validate_file_path(p), "{p}");
    }
    let r = sb.resolve_path("new.txt", None).unwrap();
    assert!(!r.read_only());
    std::fs::write(t.ws().join("ro/newfile"), "x").unwrap();
    let r = sb.resolve_path("dl", None).unwrap();
    assert!(r.read_only(), "{r:?}");
    assert_eq!(
        r.host_path(),
        t.ws().join("ro/newfile").canonicalize().unwrap()
    );
}

#[test]
fn sandbox_dirs_must_exist_and_none_at_all_reaches_nothing() {
    let t = Tmp::new();
    let e = Sandbox::new([t.root.join("nope")], SandboxConfig::default()).unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    // No dir at all: a sandbox with no file system, where every path is
    // outside; its twin with the workspace resolves the same path.
    std::fs::write(t.ws().join("f"), "x").unwrap();
    let none = Sandbox::new(Vec::<PathBuf>::new(), SandboxConfig::default()).unwrap();
    for p in [PathBuf::from("f"), t.ws().join("f"), PathBuf::from("/")] {
        assert!(
            matches!(none.resolve_path(&p, None), Err(PathError::Outside(_))),
            "{p:?}"
        );
    }
    let some = t.sandbox(SandboxConfig::default());
    assert!(some.resolve_path("f", None).is_ok());
}

#[test]
fn a_guest_path_is_how_agents_name_a_mapped_dir() {
    let t = Tmp::new();
    std::fs::create_dir(t.ws().join("sub")).unwrap();
    std::fs::write(t.ws().join("sub/f"), "x").unwrap();
    let ws = std::fs::canonicalize(t.ws()).unwrap();
    let sb = Sandbox::new(
        [AllowedDirSpec::read_write(t.ws()).at("/data")],
        SandboxConfig::default(),
    )
    .unwrap();
    let d = &sb.allowed_dirs()[0];
    assert_eq!(
        (d.path(), d.guest_path(), d.is_mapped()),
        (ws.as_path(), Path::new("/data"), true)
    );
    let r = sb.resolve_path("/data/sub/f", None).unwrap();
    assert_eq!(r.guest_path(), Path::new("/data/sub/f"));
    assert_eq!(r.host_path(), ws.join("sub/f"));
    assert_eq!(
        sb.resolve_path("sub/f", None).unwrap().guest_path(),
        Path::new("/data/sub/f")
    );
    // The host path is not a name the agent can use for it any more.
    assert!(matches!(
        sb.resolve_path(ws.join("sub/f"), None),
        Err(PathError::Outside(_))
    ));
    // Unmapped (and mapped to its own path): the host path, as before.
    for spec in [
        AllowedDirSpec::read_write(t.ws()),
        AllowedDirSpec::read_write(t.ws()).at(&ws),
    ] {
        let sb = Sandbox::new([spec], SandboxConfig::default()).unwrap();
        assert!(!sb.allowed_dirs()[0].is_mapped());
        let r = sb.resolve_path(ws.join("sub/f"), None).unwrap();
        assert_eq!(r.guest_path(), r.host_path());
    }
}

#[test]
fn bad_guest_paths_are_refused_when_the_sandbox_is_built() {
    let t = Tmp::new();
    std::fs::create_dir(t.ws().join("a")).unwrap();
    for (guest, why) in [
        ("data", "not absolute"),
        ("/data/", "ends with `/`"),
        ("/a/../b", "`..`"),
        ("/a/./b", "`.`"),
        ("//a", "empty"),
        ("", "not absolute"),
    ] {
        let e = Sandbox::new(
            [AllowedDirSpec::read_write(t.ws()).at(guest)],
            SandboxConfig::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("guest path") && e.contains(why),
            "{guest:?}: {e}"
        );
    }
    // Two dirs seen at one path; the same dir twice is fine.
    let e = Sandbox::new(
        [
            AllowedDirSpec::read_write(t.ws()).at("/w"),
            AllowedDirSpec::read_only(t.ws().join("a")).at("/w"),
        ],
        SandboxConfig::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("would both be seen at /w"), "{e}");
    // One dir at two places: refused (a tool would write through the
    // read-write one what the read-only one shows).
    let e = Sandbox::new(
        [
            AllowedDirSpec::read_write(t.ws()).at("/w"),
            AllowedDirSpec::read_only(t.ws()).at("/r"),
        ],
        SandboxConfig::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("seen at /w and at /r"), "{e}");
    Sandbox::new(
        [
            AllowedDirSpec::read_write(t.ws()).at("/w"),
            AllowedDirSpec::read_only(t.ws()).at("/w"),
        ],
        SandboxConfig::default(),
    )
    .unwrap();
}

#[test]
fn the_cli_spelling_of_a_guest_path_parses() {
    let p = |s: &str| AllowedDirSpec::parse(s);
    assert_eq!(p("/h"), AllowedDirSpec::read_write("/h"));
    assert_eq!(p("/h:ro"), AllowedDirSpec::read_only("/h"));
    assert_eq!(p("/h::/"), AllowedDirSpec::read_write("/h").at("/"));
    assert_eq!(p("/h::/g:ro"), AllowedDirSpec::read_only("/h").at("/g"));
    assert_eq!(p("/h::/g:rw"), AllowedDirSpec::read_write("/h").at("/g"));
}

/// The file tools never move or delete a dir that holds an allowed dir
/// nested in a writable one, protected paths or not: a symlink put in its
/// place would redirect where the docker backend's engine mounts the nested
/// dir (under gVisor nothing inside the container could tell). Allowed
/// twin: a sibling dir moves.
#[test]
fn the_file_tools_never_move_a_dir_that_holds_an_allowed_dir() {
    let t = Tmp::new();
    std::fs::create_dir_all(t.ws().join("a/b")).unwrap();
    std::fs::create_dir_all(t.ws().join("c")).unwrap();
    let dirs = [
        toolhost::AllowedDirSpec::read_write(t.ws()),
        toolhost::AllowedDirSpec::read_only(t.ws().join("a/b")),
    ];
    let sb = Sandbox::new(dirs, config()).unwrap();
    for protected in [
        toolhost::protected::ProtectedPaths::default_list(),
        toolhost::protected::ProtectedPaths::default(),
    ] {
        let policy = toolhost::tools::fs::FsPolicy {
            max_file_size: Some(1 << 20),
            max_read_bytes: 1 << 20,
            denied_extensions: Vec::new(),
            protected,
        };
        let empty = policy.protected.is_empty();
        for (from, to) in [("a", "moved"), ("a/b", "moved")] {
            let e = toolhost::tools::fs::rename(sb.dirs(), &policy, from, to, false)
                .expect_err(&format!("{from} moved (protected empty: {empty})"));
            assert!(e.message.contains("allowed dir"), "{}", e.message);
        }
        assert!(t.ws().join("a/b").is_dir());
        toolhost::tools::fs::rename(sb.dirs(), &policy, "c", "d", false).unwrap();
        toolhost::tools::fs::rename(sb.dirs(), &policy, "d", "c", false).unwrap();
    }
}
