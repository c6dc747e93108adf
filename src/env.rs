//! Child environments: built from an allowlist, with a deny list that always wins.
//!
//! Invariant: no name matched by [`is_denied`] reaches a tool, whatever the
//! allowlist says, and `PATH` is always set for native tools
//! ([`build_env_from`]); a wasm guest gets only what it is given
//! ([`given_env_from`]). Names are compared case-insensitively
//! (`http_proxy` and `HTTP_PROXY` are the same rule), because Windows treats them
//! so and because proxies are honoured in both cases by common tools.

use std::ffi::{OsStr, OsString};

/// Names always stripped from a child's environment (the seed module's list).
pub const DENIED_NAMES: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "OPENROUTER_API_KEY",
    "AUTONOMA_LLM_API_KEY",
    "AUTONOMA_REST_API_TOKEN",
    "TELEGRAM_BOT_TOKEN",
    "DISCORD_BOT_TOKEN",
    "GMAIL_APP_PASSWORD",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GITHUB_TOKEN",
    "GITLAB_TOKEN",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "PS1",
    "LD_PRELOAD",
    "DYLD_INSERT_LIBRARIES",
    "COR_ENABLE_PROFILING",
    "DOTNET_STARTUP_HOOKS",
];

/// Name patterns always stripped, on top of [`DENIED_NAMES`]: secrets by naming
/// convention, every dynamic-loader variable, and bash exported functions.
pub const DENIED_PATTERNS: &[&str] = &[
    "*_API_KEY",
    "*_TOKEN",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "LD_*",
    "DYLD_*",
    "BASH_FUNC_*",
    // .NET's profiler and start-up hooks: a DLL of the caller's choice, loaded
    // by every .NET program (Windows's LD_PRELOAD).
    "COR_PROFILER*",
    "CORECLR_*",
];

/// Names stripped while the network is off.
pub const DENIED_WITHOUT_NETWORK: &[&str] = &["NO_PROXY"];

/// `PATH` given to tools when the host has none.
#[cfg(not(windows))]
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// `PATH` given to tools when the host has none.
#[cfg(windows)]
pub const DEFAULT_PATH: &str = r"C:\Windows\System32;C:\Windows";

/// Whether two variable names are the same variable: on Windows without
/// regard to ASCII case (`Path` is `PATH` there), elsewhere byte for byte.
pub fn same_name(a: &str, b: &str) -> bool {
    if cfg!(windows) {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

fn matches_pattern(upper: &str, pattern: &str) -> bool {
    match (pattern.strip_prefix('*'), pattern.strip_suffix('*')) {
        (Some(rest), _) if rest.ends_with('*') => upper.contains(&rest[..rest.len() - 1]),
        (Some(suffix), _) => upper.ends_with(suffix),
        (None, Some(prefix)) => upper.starts_with(prefix),
        (None, None) => upper == pattern,
    }
}

/// Whether `name` may never be passed to a tool.
pub fn is_denied(name: &str, allow_network: bool) -> bool {
    let upper = name.to_ascii_uppercase();
    DENIED_NAMES.contains(&upper.as_str())
        || DENIED_PATTERNS.iter().any(|p| matches_pattern(&upper, p))
        || (!allow_network && DENIED_WITHOUT_NETWORK.contains(&upper.as_str()))
}

/// Builds a child environment from `host` (usually `std::env::vars_os()`).
///
/// Keeps each allowlisted name the host has, drops every denied name, and sets
/// `PATH` (from the host, else [`DEFAULT_PATH`]) even when it is not allowlisted.
/// Names that are not valid UTF-8 are dropped. The result is sorted by name.
pub fn build_env_from<I, K, V>(
    host: I,
    allowlist: &[String],
    allow_network: bool,
) -> Vec<(OsString, OsString)>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let host: Vec<(OsString, OsString)> = host
        .into_iter()
        .map(|(k, v)| (k.as_ref().to_os_string(), v.as_ref().to_os_string()))
        .collect();
    let mut out = given_env_from(host.iter().map(|(k, v)| (k, v)), allowlist, allow_network);
    let path = host
        .iter()
        .find(|(k, _)| k.to_str().is_some_and(|k| same_name(k, "PATH")))
        .map(|(_, v)| v.clone());
    out.retain(|(k, _)| !k.to_str().is_some_and(|k| same_name(k, "PATH")));
    out.push((
        "PATH".into(),
        path.filter(|p| !p.is_empty())
            .unwrap_or_else(|| DEFAULT_PATH.into()),
    ));
    out.sort();
    out
}

/// The variables of `host` a tool is given: each allowlisted name the host
/// has, minus every denied name, and nothing else (no `PATH` unless it is
/// allowlisted). What a wasm guest gets. Sorted by name.
pub fn given_env_from<I, K, V>(
    host: I,
    allowlist: &[String],
    allow_network: bool,
) -> Vec<(OsString, OsString)>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let mut out: Vec<(OsString, OsString)> = Vec::new();
    for (k, v) in host {
        let Some(name) = k.as_ref().to_str() else {
            continue;
        };
        if is_denied(name, allow_network) || !allowlist.iter().any(|a| same_name(a, name)) {
            continue;
        }
        if !out
            .iter()
            .any(|(n, _)| n.to_str().is_some_and(|n| same_name(n, name)))
        {
            out.push((name.into(), v.as_ref().to_os_string()));
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn every_deny_listed_name_is_stripped_even_when_allowlisted() {
        let mut host: Vec<(String, String)> = DENIED_NAMES
            .iter()
            .map(|n| (n.to_string(), format!("CANARY-{n}")))
            .collect();
        host.extend(
            DENIED_NAMES
                .iter()
                .map(|n| (n.to_ascii_lowercase(), "CANARY-lower".to_string())),
        );
        let mut allow: Vec<String> = host.iter().map(|(k, _)| k.clone()).collect();
        allow.push("HOME".into());
        host.push(("HOME".into(), "/home/x".into()));
        let env = build_env_from(host, &allow, true);
        for (k, v) in &env {
            assert!(
                !v.to_string_lossy().contains("CANARY"),
                "{k:?} leaked into the env"
            );
        }
        assert!(env.iter().any(|(k, _)| k == "HOME"));
    }

    #[test]
    fn patterns_strip_secrets_by_convention() {
        for name in [
            "OPENAI_API_KEY",
            "MY_TOKEN",
            "CLIENT_SECRET_ID",
            "DB_PASSWORD",
            "LD_LIBRARY_PATH",
            "LD_AUDIT",
            "DYLD_LIBRARY_PATH",
            "BASH_FUNC_ls%%",
            "ftp_password",
        ] {
            assert!(is_denied(name, true), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "LANG",
            "TOKENIZERS_PARALLELISM",
            "TZ",
            "KEY",
        ] {
            assert!(!is_denied(name, false), "{name}");
        }
    }

    #[test]
    fn no_proxy_goes_only_while_network_is_off() {
        let host = [("NO_PROXY", "x"), ("no_proxy", "y")];
        let allow = s(&["NO_PROXY", "no_proxy"]);
        assert_eq!(build_env_from(host, &allow, false).len(), 1); // PATH only
        // Windows has one variable by both names.
        let both = if cfg!(windows) { 2 } else { 3 };
        assert_eq!(build_env_from(host, &allow, true).len(), both);
        // Proxies themselves go whatever the network setting.
        let host = [
            ("HTTPS_PROXY", "x"),
            ("http_proxy", "y"),
            ("all_proxy", "z"),
        ];
        let allow = s(&["HTTPS_PROXY", "http_proxy", "all_proxy"]);
        assert_eq!(build_env_from(host, &allow, true).len(), 1);
    }

    #[test]
    fn only_allowlisted_names_pass_and_path_is_always_set() {
        let host = [("HOME", "/h"), ("FOO", "bar"), ("PATH", "/p")];
        let env = build_env_from(host, &s(&["HOME"]), false);
        assert_eq!(
            env,
            vec![("HOME".into(), "/h".into()), ("PATH".into(), "/p".into())]
        );
        let env = build_env_from([("FOO", "bar")], &s(&["FOO"]), false);
        assert_eq!(
            env,
            vec![
                ("FOO".into(), "bar".into()),
                ("PATH".into(), DEFAULT_PATH.into())
            ]
        );
    }

    #[test]
    fn a_guest_is_given_only_allowlisted_names_and_no_path_seed() {
        let host = [
            ("HOME", "/h"),
            ("FOO", "bar"),
            ("PATH", "/p"),
            ("GITHUB_TOKEN", "t"),
        ];
        assert_eq!(given_env_from(host, &s(&[]), false), vec![]);
        assert_eq!(
            given_env_from(host, &s(&["HOME", "GITHUB_TOKEN"]), false),
            vec![("HOME".into(), "/h".into())]
        );
        assert_eq!(
            given_env_from(host, &s(&["PATH"]), false),
            vec![("PATH".into(), "/p".into())]
        );
        // The native environment of the same host and list has the seed.
        assert_eq!(
            build_env_from(host, &s(&[]), false),
            vec![("PATH".into(), "/p".into())]
        );
    }
}
