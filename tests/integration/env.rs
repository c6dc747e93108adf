//! Environment and secrets (docs/src/attacks.md 12-14, 16), through the real CLI with
//! canaries planted in its own environment.

use crate::util::*;

const DENIED: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "OPENROUTER_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "GITHUB_TOKEN",
    "HTTP_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "NO_PROXY",
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "PS1",
    // LD_PRELOAD itself is not planted here: it would act on toolhost's own
    // loader. The env unit tests cover it; these names are inert for ld.so.
    "LD_AUDIT_CANARY",
    "DYLD_INSERT_LIBRARIES",
    "MY_SERVICE_TOKEN",
];

fn canary_env() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = DENIED
        .iter()
        .map(|n| (n.to_string(), format!("{CANARY}-{n}")))
        .collect();
    env.push(("UNLISTED_VAR".into(), format!("{CANARY}-unlisted")));
    env.push(("VISIBLE_VAR".into(), "visible-value".into()));
    env
}

fn run_with_canaries(t: &Tmp, extra: &[&str], argv: &[&str]) -> std::process::Output {
    let env = canary_env();
    let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut args = vec!["run"];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(argv);
    toolhost(&t.ws(), &args, &env_ref)
}

#[test]
fn attack_12_only_allowlisted_names_reach_the_tool() {
    let t = Tmp::new();
    let out = run_with_canaries(&t, &["--env-allow", "VISIBLE_VAR"], &["env"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!stdout.contains(CANARY), "{stdout}");
    let allowed = [
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TZ",
        "TMPDIR",
        "VISIBLE_VAR",
    ];
    for line in stdout.lines() {
        let name = line.split('=').next().unwrap();
        assert!(allowed.contains(&name), "unexpected variable {name}");
    }
    // Allowed twin: the allowlisted variable is there, and PATH always is.
    assert!(
        stdout.lines().any(|l| l == "VISIBLE_VAR=visible-value"),
        "{stdout}"
    );
    assert!(stdout.lines().any(|l| l.starts_with("PATH=")));
}

#[test]
fn attack_13_deny_listed_names_smuggled_through_the_allowlist() {
    let t = Tmp::new();
    let mut extra = Vec::new();
    for n in DENIED {
        extra.push("--env-allow");
        extra.push(n);
    }
    extra.extend(["--env-allow", "VISIBLE_VAR"]);
    let out = run_with_canaries(&t, &extra, &["env"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(CANARY), "{stdout}");
    assert!(stdout.contains("VISIBLE_VAR=visible-value"));
    // Same through a config file's env_allowlist, network on (NO_PROXY then passes,
    // but the proxies themselves never do).
    let list: Vec<String> = DENIED.iter().map(|n| format!("{n:?}")).collect();
    std::fs::write(
        t.root.join("cfg.toml"),
        format!(
            "allow_network = true\nenv_allowlist = [\"PATH\", {}]\n",
            list.join(", ")
        ),
    )
    .unwrap();
    let cfg = t.root.join("cfg.toml");
    let out = run_with_canaries(&t, &["--config", cfg.to_str().unwrap()], &["env"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let leaked: Vec<&str> = stdout.lines().filter(|l| l.contains(CANARY)).collect();
    assert_eq!(leaked, [format!("NO_PROXY={CANARY}-NO_PROXY")], "{stdout}");
}

#[test]
fn attack_14_proc_environ_of_ancestors_shows_no_canary() {
    let t = Tmp::new();
    let script = "pp=$(cut -d' ' -f4 /proc/$PPID/stat); \
                  for f in /proc/$PPID/environ /proc/$pp/environ /proc/1/environ \
                           /proc/self/root/proc/$pp/environ; do \
                     cat $f 2>/dev/null | tr '\\0' '\\n'; done; \
                  tr '\\0' '\\n' < /proc/self/environ";
    let out = run_with_canaries(&t, &["--env-allow", "VISIBLE_VAR"], &["sh", "-c", script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(CANARY), "{stdout}");
    // Positive control 1: the tool could read its own environ with the same code.
    assert!(stdout.contains("VISIBLE_VAR=visible-value"), "{stdout}");
    // Positive control 2: without toolhost, a child does read its parent's canary.
    let wrapped = std::process::Command::new("sh")
        .args(["-c", "sh -c \"tr '\\\\0' '\\\\n' < /proc/\\$PPID/environ\""])
        .env("PLAIN_CANARY", CANARY)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&wrapped.stdout).contains(CANARY),
        "the /proc technique works outside the sandbox"
    );
}

#[test]
fn attack_16_error_messages_carry_no_secrets_or_outside_paths() {
    let t = Tmp::new();
    std::os::unix::fs::symlink(t.outside(), t.ws().join("link")).unwrap();
    let outside = t.outside().to_string_lossy().into_owned();
    for argv in [
        vec!["--json", "--cwd", "link", "--", "true"],
        vec!["--json", "--", "no-such-program-zz"],
        vec!["--json", "--", "./link/secret.txt"],
    ] {
        let env = canary_env();
        let env_ref: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut args = vec!["run"];
        args.extend(argv.iter().copied());
        let out = toolhost(&t.ws(), &args, &env_ref);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains(CANARY), "{all}");
        assert!(!all.contains(&outside), "{all}");
        assert!(all.contains("\"outcome\""), "{all}");
    }
}

/// Review finding: the environment of the process that started toolhost (the
/// agent loop) was readable by the tool. The tool's Landlock domain stops it.
#[test]
fn attack_14_the_agent_loops_environment_is_not_readable() {
    let t = Tmp::new();
    let script = "th=$(cut -d' ' -f4 /proc/$PPID/stat); loop=$(cut -d' ' -f4 /proc/$th/stat); \
                  cat /proc/$loop/environ 2>/dev/null | tr '\\0' '\\n'; echo loop=$loop";
    let out = std::process::Command::new("sh")
        // Not `exec`: the shell must stay alive as toolhost's parent.
        .args([
            "-c",
            "env -u PARENT_ONLY_CANARY \"$0\" run -- sh -c \"$1\"; :",
            toolhost_bin().to_str().unwrap(),
            script,
        ])
        .env("PARENT_ONLY_CANARY", CANARY)
        .current_dir(t.ws())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("loop="), "{stdout}");
    assert!(!stdout.contains(CANARY), "{stdout}");
    // Positive control: the same shape without toolhost reads the canary.
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "env -u PARENT_ONLY_CANARY sh -c 'tr \"\\0\" \"\\n\" < /proc/$PPID/environ'; :",
        ])
        .env("PARENT_ONLY_CANARY", CANARY)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(CANARY),
        "control failed"
    );
}
