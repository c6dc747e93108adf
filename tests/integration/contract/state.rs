//! toolhost's own state (41) and protected paths (44).

use super::*;

/// Case 41: toolhost's own state (the compile cache, the audit log) is never
/// writable by a call. A sandbox whose writable dir holds it, or lies inside
/// it, is refused with a message naming the dir and what moves the state;
/// with the cache beside the workspace (the allowed twin) the target writes
/// its workspace but neither rewrites a planted entry nor adds one.
pub(super) async fn planted_state_case(c: &Ctx) -> CaseResult {
    let ws = c.t.ws();
    let ws_s = ws.display().to_string();
    let refused = |f: &dyn Fn(&mut SandboxConfig), wants: &[&str]| -> CaseResult {
        let mut cfg = c.config();
        f(&mut cfg);
        let dirs = [
            toolhost::AllowedDirSpec::read_write(ws.clone()),
            toolhost::AllowedDirSpec::read_only(c.t.root.join("ro")),
        ];
        match Sandbox::new(dirs, cfg) {
            Ok(_) => Err(format!("built a sandbox that exposes state ({wants:?})")),
            Err(e) => {
                let e = e.to_string();
                ensure(wants.iter().all(|w| e.contains(w)), || e.clone())
            }
        }
    };
    let in_ws = ws.join(".cache/toolhost/wasm");
    refused(
        &|cfg| cfg.wasm.cache_dir = Some(in_ws.clone()),
        &[
            &ws_s,
            "contains toolhost's compile cache",
            "[wasm] cache_dir",
        ],
    )?;
    let root = c.t.root.clone();
    refused(
        &|cfg| cfg.wasm.cache_dir = Some(root.clone()),
        &[&ws_s, "is inside toolhost's compile cache"],
    )?;
    let log = ws.join("audit.jsonl");
    refused(
        &|cfg| cfg.audit_log = Some(log.clone()),
        &[&ws_s, "audit log", "audit_log"],
    )?;
    // Allowed twin: the cache beside the workspace, with an entry in it.
    let cache = c.t.root.join("cache");
    std::fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
    let entry = cache.join("planted.cwasm");
    std::fs::write(&entry, "ENTRY").map_err(|e| e.to_string())?;
    let sb = c.sandbox_with(|cfg| cfg.wasm.cache_dir = Some(cache.clone()));
    for p in [entry.clone(), cache.join("new.cwasm")] {
        let _ = c.write(&sb, &p.to_string_lossy()).await;
    }
    let now = std::fs::read_to_string(&entry).map_err(|e| e.to_string())?;
    ensure(now == "ENTRY", || {
        format!("the entry was rewritten: {now:?}")
    })?;
    ensure(!cache.join("new.cwasm").exists(), || {
        "an entry was planted in the cache".into()
    })?;
    c.write(&sb, "ok.txt").await?;
    let ok = std::fs::read_to_string(ws.join("ok.txt")).map_err(|e| e.to_string())?;
    // The probe writes as many x's as asked.
    let want = if c.target == Target::Wasm {
        "xxxxx"
    } else {
        "PWNED"
    };
    ensure(ok == want, || format!("control: {ok:?}"))
}

/// Everything under `dir` (names, types, modes, contents, link targets), as
/// one string to compare before and after.
pub(super) fn tree_digest(dir: &std::path::Path) -> String {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            out.push(format!("{}: unreadable", d.display()));
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            #[cfg(unix)]
            let mode = std::os::unix::fs::PermissionsExt::mode(&m.permissions());
            #[cfg(not(unix))]
            let mode = u32::from(m.permissions().readonly());
            let what = if m.file_type().is_symlink() {
                format!("link {:?}", std::fs::read_link(&p).ok())
            } else if m.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else {
                format!("file {:?}", std::fs::read(&p).ok())
            };
            out.push(format!("{} {mode:o} {what}", p.display()));
        }
    }
    out.sort();
    out.join("\n")
}

/// Case 44: code planted for the host to run later. The workspace is a git
/// repository (its `.git` writable by the tool's uid); a call tries to write
/// a hook, to move the executable sample hook into place, to append to
/// `.git/config`, to replace `.git` (moved away, a `gitdir:` file in its
/// place), to reach `.git` through a symlink, and to hard-link `.git/config`
/// out. Everything under `.git` must be unchanged (names, modes, contents).
/// Allowed twins: the same writes into a `notgit` dir land, and with
/// `protected_paths = []` the first attack does reach `.git`.
pub(super) async fn protected_paths_case(c: &Ctx) -> CaseResult {
    let ws = c.t.ws();
    let git = ws.join(".git");
    // No repository yet: a `.git` made by the call does not survive it
    // (refused by name, or moved aside after the call where no mount can
    // hold a name that did not exist).
    {
        let sb = c.sandbox();
        match c.target {
            Target::Direct | Target::Docker(_) => {
                let r = c
                    .run(
                        &sb,
                        "mkdir -p .git/hooks && printf x > .git/hooks/pre-commit",
                        &[],
                    )
                    .await;
                ensure(r.stderr.contains("is a protected path"), || {
                    format!("{r:?}")
                })?;
                let aside = std::fs::read_dir(&ws)
                    .map_err(|e| e.to_string())?
                    .flatten()
                    .map(|e| e.path())
                    .find(|p| {
                        p.file_name().is_some_and(|n| {
                            n.to_string_lossy().starts_with(".git.toolhost-refused-")
                        })
                    })
                    .ok_or("the created .git was not moved aside")?;
                ensure(aside.join("hooks/pre-commit").exists(), || {
                    format!("{} lacks the hook", aside.display())
                })?;
                std::fs::remove_dir_all(&aside).map_err(|e| e.to_string())?;
            }
            Target::Wasm => {
                // Windows reads these names as `.git` too.
                let spellings: &[&str] = if cfg!(windows) {
                    &[
                        ".git",
                        ".GIT",
                        ".git.",
                        ".git ",
                        r"sub\..\.git",
                        ".git::$INDEX_ALLOCATION",
                    ]
                } else {
                    &[".git"]
                };
                std::fs::create_dir_all(ws.join("sub")).map_err(|e| e.to_string())?;
                for name in spellings {
                    let r = c.run(&sb, "", &["mkdir", name]).await;
                    ensure(r.stdout.contains("ERR"), || format!("mkdir {name}: {r:?}"))?;
                }
            }
            Target::Files => {
                let r = toolhost::tools::fs::mkdir(sb.dirs(), &files_policy(), ".git");
                ensure(
                    matches!(&r, Err(e) if e.rule.as_deref() == Some("sandbox.protected")),
                    || format!("{r:?}"),
                )?;
            }
            Target::Shell => {}
        }
        ensure(!git.exists(), || ".git survived the call".into())?;
    }
    for d in [git.join("hooks"), git.join("objects"), git.join("refs")] {
        std::fs::create_dir_all(&d).map_err(|e| e.to_string())?;
    }
    let files = [
        ("HEAD", "ref: refs/heads/main\n", 0o666),
        ("config", "[core]\n\tbare = false\n", 0o666),
        ("hooks/pre-commit.sample", "#!/bin/sh\nexit 0\n", 0o777),
    ];
    for (name, text, _mode) in files {
        let p = git.join(name);
        std::fs::write(&p, text).map_err(|e| e.to_string())?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(_mode))
                .map_err(|e| e.to_string())?;
        }
    }
    #[cfg(unix)]
    for d in [
        &git,
        &git.join("hooks"),
        &git.join("objects"),
        &git.join("refs"),
    ] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777))
            .map_err(|e| e.to_string())?;
    }
    symlink(".git", &ws.join("lg")).map_err(|e| e.to_string())?;
    // Wine follows no link a Windows call made: there the attack through
    // `lg` cannot reach `.git` whatever the guard does, and is not counted.
    let link_followed = std::fs::metadata(ws.join("lg/hooks")).is_ok();
    if !link_followed {
        println!("case 44: the host does not follow the link lg -> .git (Wine): not tried");
    }
    let before = tree_digest(&git);
    let sb = c.sandbox();
    let mut refusals = Vec::new();
    match c.target {
        Target::Direct | Target::Docker(_) => {
            let script = "\
                printf 'x' > .git/hooks/pre-commit; echo \"write=$?\"; \
                chmod 755 .git/hooks/pre-commit.sample; echo \"chmod=$?\"; \
                mv .git/hooks/pre-commit.sample .git/hooks/pre-commit; echo \"mv=$?\"; \
                printf '[core]\\n\\tfsmonitor = touch ran\\n' >> .git/config; echo \"config=$?\"; \
                mv .git .git-old; echo \"mvgit=$?\"; \
                rm -rf .git; echo \"rm=$?\"; \
                printf x > lg/hooks/post-checkout; echo \"link=$?\"; \
                ln .git/config cfg && printf X >> cfg; echo \"hardlink=$?\"; \
                mkdir -p notgit/hooks && printf ok > notgit/hooks/pre-commit && printf ok > notgit/config; echo \"twin=$?\"";
            let r = c.run(&sb, script, &[]).await;
            ensure(r.stdout.contains("twin=0"), || format!("twin: {r:?}"))?;
            for step in ["write", "mv", "config", "mvgit", "link", "hardlink"] {
                ensure(!r.stdout.contains(&format!("{step}=0")), || {
                    format!("{step} succeeded: {r:?}")
                })?;
            }
            refusals.push(r.stdout.clone());
        }
        Target::Wasm => {
            // Windows: the same attacks by its other names for `.git`
            // (case, trailing dot, stream, `\`, the 8.3 short name).
            #[cfg(windows)]
            let short = short_name(&git).unwrap_or_else(|| ".git".into());
            #[cfg(windows)]
            let (short_hook, short_moved) = (format!("{short}/hooks/pre-commit"), short.clone());
            #[cfg(windows)]
            let windows: Vec<Vec<&str>> = vec![
                vec!["write", r".git\hooks\pre-commit", "5"],
                vec!["write", ".GIT/Hooks/pre-commit", "5"],
                vec!["write", ".git./hooks/pre-commit", "5"],
                vec!["append", r"sub\..\.git\config", "X"],
                vec!["rename", ".git.", ".git-old"],
                vec!["rename", ".GIT", ".git-old"],
                vec!["rename", ".git::$INDEX_ALLOCATION", ".git-old"],
                vec!["write", &short_hook, "5"],
                vec!["rename", &short_moved, ".git-old"],
                vec!["rm", &short_moved],
            ];
            #[cfg(windows)]
            println!("case 44 on wasm: the 8.3 name of .git is {short:?}");
            #[cfg(not(windows))]
            let windows: Vec<Vec<&str>> = Vec::new();
            for args in windows.iter().map(Vec::as_slice).chain([
                &["write", ".git/hooks/pre-commit", "5"][..],
                &[
                    "rename",
                    ".git/hooks/pre-commit.sample",
                    ".git/hooks/pre-commit",
                ],
                &["append", ".git/config", "X"],
                &["rename", ".git", ".git-old"],
                &["rm", ".git/HEAD"],
                &["mkdir", ".git/hooks/sub"],
                &["write", "lg/hooks/post-checkout", "5"],
                &["link", ".git/config", "cfg"],
                &["symlink", "x", ".git/hooks/l"],
            ]) {
                if !link_followed && args[1].starts_with("lg/") {
                    continue;
                }
                let r = c.run(&sb, "", args).await;
                ensure(!r.success() && r.stdout.contains("ERR"), || {
                    format!("{args:?}: {r:?}")
                })?;
                refusals.push(r.stdout.clone());
            }
            for args in [
                &["mkdir", "notgit"][..],
                &["mkdir", "notgit/hooks"],
                &["write", "notgit/hooks/pre-commit", "5"],
                &["write", "notgit/config", "5"],
            ] {
                let r = c.run(&sb, "", args).await;
                ensure(r.success(), || format!("twin {args:?}: {r:?}"))?;
            }
        }
        Target::Files => {
            use toolhost::tools::fs;
            let (dirs, p) = (sb.dirs(), files_policy());
            let mut tries: Vec<(&str, Result<String, fs::FsError>)> = vec![
                (
                    "write",
                    fs::write(dirs, &p, ".git/hooks/pre-commit", b"x", false),
                ),
                ("append", fs::write(dirs, &p, ".git/config", b"X", true)),
                (
                    "case",
                    fs::write(dirs, &p, ".GIT/Hooks/pre-commit", b"x", false),
                ),
                (
                    "move in",
                    fs::rename(
                        dirs,
                        &p,
                        ".git/hooks/pre-commit.sample",
                        ".git/hooks/pre-commit",
                        false,
                    ),
                ),
                ("move .git", fs::rename(dirs, &p, ".git", "git-old", false)),
                ("delete", fs::delete(dirs, &p, ".git/config", false)),
                ("mkdir", fs::mkdir(dirs, &p, ".git/hooks/sub")),
            ];
            if link_followed {
                tries.push((
                    "via link",
                    fs::write(dirs, &p, "lg/hooks/post-checkout", b"x", false),
                ));
            }
            // Windows: `.git` by its other names (the 8.3 short name, a
            // trailing dot, a stream, `\`).
            #[cfg(windows)]
            let tries = {
                let mut tries = tries;
                let short = short_name(&git).unwrap_or_else(|| ".git".into());
                println!("case 44 on the file tools: the 8.3 name of .git is {short:?}");
                let hook = format!("{short}/hooks/pre-commit");
                tries.extend([
                    ("short write", fs::write(dirs, &p, &hook, b"x", false)),
                    ("short move", fs::rename(dirs, &p, &short, "git-old", false)),
                    ("short delete", fs::delete(dirs, &p, &short, true)),
                    ("dot move", fs::rename(dirs, &p, ".git.", "git-old", false)),
                    (
                        "stream move",
                        fs::rename(dirs, &p, ".git::$INDEX_ALLOCATION", "git-old", false),
                    ),
                    (
                        "backslash",
                        fs::write(dirs, &p, r"sub\..\.git\config", b"X", true),
                    ),
                ]);
                tries
            };
            for (what, r) in tries {
                match r {
                    Err(e) if e.rule.as_deref() == Some("sandbox.protected") => {
                        refusals.push(e.message)
                    }
                    other => return Err(format!("{what}: {other:?}")),
                }
            }
            fs::write(dirs, &p, "notgit/hooks/pre-commit", b"ok", false).map_err(|e| e.message)?;
            fs::write(dirs, &p, "notgit/config", b"ok", false).map_err(|e| e.message)?;
        }
        Target::Shell => return Err("not a shell-policy case".into()),
    }
    ensure(tree_digest(&git) == before, || {
        format!(
            "{} changed: {refusals:?}\nnow:\n{}",
            git.display(),
            tree_digest(&git)
        )
    })?;
    ensure(!ws.join("ran").exists() && !ws.join("cfg").exists(), || {
        "a planted file is there".into()
    })?;
    let twin =
        std::fs::read_to_string(ws.join("notgit/hooks/pre-commit")).map_err(|e| e.to_string())?;
    ensure(twin == "ok" || twin == "xxxxx", || {
        format!("twin: {twin:?}")
    })?;
    // The same first attack with nothing protected reaches `.git`: what
    // refused it above is the protection.
    let open = c.sandbox_with(|cfg| cfg.protected_paths.clear());
    let hook = git.join("hooks/pre-commit");
    match c.target {
        Target::Files => {
            toolhost::tools::fs::write(
                open.dirs(),
                &toolhost::tools::fs::FsPolicy {
                    protected: Default::default(),
                    ..files_policy()
                },
                ".git/hooks/pre-commit",
                b"x",
                false,
            )
            .map_err(|e| e.message)?;
        }
        _ => {
            let r = c
                .run(
                    &open,
                    "printf x > .git/hooks/pre-commit",
                    &["write", ".git/hooks/pre-commit", "1"],
                )
                .await;
            ensure(r.success(), || format!("unprotected write: {r:?}"))?;
        }
    }
    ensure(hook.exists(), || {
        "the unprotected write did not land".into()
    })
}
