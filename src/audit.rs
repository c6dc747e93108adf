//! The audit log: one JSON line per tool call, hash-chained.
//!
//! Invariant: each record carries `prev`, the `hash` of the record before it
//! (64 zeros for the first), and its own `hash`: SHA-256 of the record's JSON
//! without the `hash` field, keys sorted (serde_json's map order), so that
//! changing, removing, inserting or reordering any line breaks the chain at
//! that line ([`verify`]). Each line is exactly the record's canonical JSON
//! (sorted keys, no whitespace, serde_json's escapes), so an edit that keeps
//! the parsed record but changes its bytes (a duplicated key, whitespace, an
//! escape) is found too, as is a line that is not UTF-8. Removing lines at
//! the *end* leaves a shorter valid chain: keep the last hash elsewhere to
//! detect that.
//!
//! Many writers, one chain: every append takes an exclusive lock on the file
//! (`flock`; on Windows `LockFileEx` of one byte far past any real end, since
//! a Windows lock of the data itself would stop other handles reading it: see
//! `lock`), chains from the file's real last
//! record (read back from the file when another writer appended since), writes
//! the whole line and unlocks. Threads share one handle; processes (several
//! `toolhost mcp` sessions with one `audit_log`) each hold their own. Records never
//! hold file contents, stdin or output, only their sizes and SHA-256, and
//! arguments that look like secrets are redacted.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// The `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Why the audit log could not be opened or a chain does not verify.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The log file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The chain is broken at a line (1-based).
    #[error("{path}: line {line}: {reason}")]
    Broken {
        /// The log file.
        path: PathBuf,
        /// The first line that does not verify.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// Another writer left the log's last record broken; it is not extended.
    #[error("{path}: the last record {reason}; not extended (see `toolhost audit verify`)")]
    BrokenEnd {
        /// The log file.
        path: PathBuf,
        /// What is wrong with the last record.
        reason: String,
    },
}

/// An open audit log, appended to by many calls at once.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    state: Mutex<Tail>,
    /// Why the last append failed, while it does (see [`AuditLog::failure`]).
    failed: Mutex<Option<String>>,
}

/// The file, and what this handle last knew of its end.
#[derive(Debug)]
struct Tail {
    file: File,
    /// The file's length and modification time after our last read or write
    /// of its end: another writer changes one of them.
    seen: Option<(u64, Option<std::time::SystemTime>)>,
    /// The hash of the record that ends there.
    last: String,
}

/// The hash of a record: SHA-256 of its JSON without `hash`, keys sorted.
fn record_hash(record: &Map<String, Value>) -> String {
    let mut m = record.clone();
    m.remove("hash");
    let bytes = serde_json::to_vec(&Value::Object(m)).unwrap_or_default();
    hex(&Sha256::digest(&bytes))
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl AuditLog {
    /// Opens (or creates, mode 0600) the log at `path` for appending. An
    /// existing log is verified first, and the chain continues from its last
    /// record; a broken one is refused rather than extended.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, AuditError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| AuditError::Io {
            path: path.clone(),
            source,
        };
        let last = if path.exists() {
            verify(&path)?.1
        } else {
            GENESIS.to_string()
        };
        let mut opts = OpenOptions::new();
        opts.read(true).append(true).create(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(0o600);
        }
        let file = opts.open(&path).map_err(io)?;
        // Whatever was appended between the check and the open is read back
        // (under the lock) by the first append.
        Ok(AuditLog {
            path,
            state: Mutex::new(Tail {
                file,
                seen: None,
                last,
            }),
            failed: Mutex::new(None),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why the log cannot take records, if the last append failed and it
    /// still cannot: the log is tried again by appending a record that says
    /// calls were refused meanwhile (`"event": "audit_resumed"`), so it is
    /// taken back only once a record really went in. Callers refuse to run
    /// calls that would go unrecorded while this is `Some`.
    pub fn failure(&self) -> Option<String> {
        let failed = self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        failed.as_ref()?;
        let mut m = Map::new();
        m.insert("event".into(), json!("audit_resumed"));
        m.insert("time".into(), json!(now_rfc3339()));
        m.insert(
            "note".into(),
            json!("calls were refused while the log could not be written"),
        );
        self.append(m).err().map(|e| e.to_string())
    }

    /// Appends one record (a JSON object; `prev`, `hash` and `seq` are set
    /// here) and returns its hash. Records are written whole, in order.
    pub fn append(&self, record: Map<String, Value>) -> Result<String, AuditError> {
        let r = self.append_locked(record);
        *self.failed.lock().unwrap_or_else(|e| e.into_inner()) =
            r.as_ref().err().map(ToString::to_string);
        r
    }

    fn append_locked(&self, mut record: Map<String, Value>) -> Result<String, AuditError> {
        let mut tail = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let io = |source| AuditError::Io {
            path: self.path.clone(),
            source,
        };
        lock(&tail.file).map_err(io)?;
        let r = (|| {
            let meta = tail.file.metadata().map_err(io)?;
            let len = meta.len();
            if tail.seen != Some((len, meta.modified().ok())) {
                // Another writer appended (or this is our first append):
                // chain from the record that really ends the file.
                tail.last = last_record_hash(&mut tail.file, len).map_err(|e| match e {
                    LastRecord::Io(source) => io(source),
                    LastRecord::Broken(reason) => AuditError::BrokenEnd {
                        path: self.path.clone(),
                        reason,
                    },
                })?;
            }
            record.insert("prev".into(), Value::String(tail.last.clone()));
            record.remove("hash");
            let hash = record_hash(&record);
            record.insert("hash".into(), Value::String(hash.clone()));
            let mut line = serde_json::to_vec(&Value::Object(record)).unwrap_or_default();
            line.push(b'\n');
            if let Err(e) = tail.file.write_all(&line).and_then(|()| tail.file.flush()) {
                // A part written (a full disk) is taken back: the log keeps
                // ending with a whole record.
                let _ = tail.file.set_len(len);
                return Err(io(e));
            }
            let meta = tail.file.metadata().map_err(io)?;
            tail.seen = Some((meta.len(), meta.modified().ok()));
            tail.last = hash.clone();
            Ok(hash)
        })();
        let unlocked = unlock(&tail.file).map_err(io);
        let hash = r?;
        unlocked?;
        Ok(hash)
    }
}

/// Takes the log's writer lock (blocking). On Unix an exclusive `flock` of
/// the file. On Windows byte locks are mandatory: a lock of the records would
/// make every other handle's reads and writes of them fail, so the lock is
/// one byte at 2^62 (`crate::sys::file_lock`), which no record reaches, and writers
/// still exclude each other.
#[cfg(not(windows))]
fn lock(file: &File) -> std::io::Result<()> {
    file.lock()
}

#[cfg(not(windows))]
fn unlock(file: &File) -> std::io::Result<()> {
    file.unlock()
}

#[cfg(windows)]
fn lock(file: &File) -> std::io::Result<()> {
    crate::sys::file_lock::lock_writer_byte(file)
}

#[cfg(windows)]
fn unlock(file: &File) -> std::io::Result<()> {
    crate::sys::file_lock::unlock_writer_byte(file)
}

/// Why the last record could not be read.
enum LastRecord {
    Io(std::io::Error),
    Broken(String),
}

/// The hash of the record that ends a log of `len` bytes (the genesis hash
/// for an empty one), checked against the record's content. Reads backwards
/// from the end, a block at a time, until the line's start.
fn last_record_hash(file: &mut File, len: u64) -> Result<String, LastRecord> {
    use std::io::{Read, Seek, SeekFrom};
    if len == 0 {
        return Ok(GENESIS.to_string());
    }
    const BLOCK: u64 = 64 * 1024;
    let mut buf: Vec<u8> = Vec::new();
    let mut start = len;
    loop {
        let from = start.saturating_sub(BLOCK);
        let mut block = vec![0u8; (start - from) as usize];
        file.seek(SeekFrom::Start(from)).map_err(LastRecord::Io)?;
        file.read_exact(&mut block).map_err(LastRecord::Io)?;
        block.extend_from_slice(&buf);
        buf = block;
        start = from;
        if buf.last() != Some(&b'\n') {
            return Err(LastRecord::Broken("is incomplete (no newline)".into()));
        }
        let body = &buf[..buf.len() - 1];
        if let Some(nl) = body.iter().rposition(|&b| b == b'\n') {
            return check_line(&body[nl + 1..])
                .map(|(hash, _)| hash)
                .map_err(LastRecord::Broken);
        }
        if start == 0 {
            return check_line(body)
                .map(|(hash, _)| hash)
                .map_err(LastRecord::Broken);
        }
    }
}

/// The hash and `prev` of one log line's record, if the line is exactly a
/// record as toolhost writes it and its hash matches its content.
fn check_line(line: &[u8]) -> Result<(String, String), String> {
    let Ok(text) = std::str::from_utf8(line) else {
        return Err("is not UTF-8 (it was changed)".into());
    };
    let Ok(Value::Object(record)) = serde_json::from_str::<Value>(text) else {
        return Err("is not a JSON object".into());
    };
    let canonical = serde_json::to_vec(&Value::Object(record.clone())).unwrap_or_default();
    if canonical != line {
        return Err(
            "is not in the form toolhost writes (a duplicated key, reordered keys, whitespace or an escape was changed)"
                .into(),
        );
    }
    let claimed = record.get("hash").and_then(Value::as_str).unwrap_or("");
    let actual = record_hash(&record);
    if claimed != actual {
        return Err("does not match its hash (it was changed)".into());
    }
    let prev = record.get("prev").and_then(Value::as_str).unwrap_or("");
    Ok((actual, prev.to_owned()))
}

/// Checks a log's chain. Returns the number of records and the last hash.
/// A line that is not UTF-8, not a JSON object, not in canonical form, that
/// does not match its hash or does not chain to the line before is reported
/// with its number (1-based); so is an incomplete last line.
pub fn verify(path: &Path) -> Result<(usize, String), AuditError> {
    let file = File::open(path).map_err(|source| AuditError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let broken = |line: usize, reason: String| AuditError::Broken {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let mut prev = GENESIS.to_string();
    let mut n = 0;
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        let got = reader
            .read_until(b'\n', &mut line)
            .map_err(|source| AuditError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        if got == 0 {
            break;
        }
        let no = n + 1;
        if line.pop() != Some(b'\n') {
            return Err(broken(no, "is incomplete (no newline)".into()));
        }
        let (hash, claimed_prev) =
            check_line(&line).map_err(|r| broken(no, format!("the record {r}")))?;
        if claimed_prev != prev {
            return Err(broken(
                no,
                "its `prev` is not the previous record's hash (a line was removed, inserted or reordered)".into(),
            ));
        }
        prev = hash;
        n += 1;
    }
    Ok((n, prev))
}

/// Whether an argument looks like a secret: a known token prefix, or
/// `NAME=value` / `--name=value` where the name says key, token, secret or
/// password.
fn secretish(s: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "sk-",
        "sk_live_",
        "rk_live_",
        "ghp_",
        "gho_",
        "ghs_",
        "ghu_",
        "github_pat_",
        "glpat-",
        "xoxb-",
        "xoxp-",
        "xapp-",
        "AKIA",
        "ASIA",
        "AIza",
        "eyJ",
    ];
    if PREFIXES
        .iter()
        .any(|p| s.starts_with(p) && s.len() >= p.len() + 12)
    {
        return true;
    }
    if let Some((name, value)) = s.split_once('=') {
        let name = name.trim_start_matches('-').to_ascii_uppercase();
        return !value.is_empty()
            && [
                "KEY",
                "TOKEN",
                "SECRET",
                "PASSWORD",
                "PASSWD",
                "CREDENTIAL",
                "AUTH",
            ]
            .iter()
            .any(|w| name.contains(w));
    }
    false
}

/// Longest argument string written to the log as is; longer ones are logged
/// as their size and SHA-256.
pub const MAX_LOGGED_STRING: usize = 4096;

/// The arguments of a call as the log keeps them: file contents, stdin and
/// strings over [`MAX_LOGGED_STRING`] replaced by their size and hash,
/// secret-looking strings redacted (also the value after a
/// `--password`-style flag).
pub fn redact_args(args: &Value) -> Value {
    let Value::Object(m) = args else {
        return redact_value(args, false);
    };
    let mut out = Map::new();
    for (k, v) in m {
        let kept = match (k.as_str(), v) {
            ("content" | "stdin", Value::String(s)) => json!({
                "bytes": s.len(),
                "sha256": hex(&Sha256::digest(s.as_bytes())),
            }),
            _ => redact_value(v, false),
        };
        out.insert(k.clone(), kept);
    }
    Value::Object(out)
}

fn redact_value(v: &Value, after_flag: bool) -> Value {
    match v {
        Value::String(s) if after_flag || secretish(s) => Value::String("[redacted]".into()),
        // A log line stays small whatever the call carried.
        Value::String(s) if s.len() > MAX_LOGGED_STRING => json!({
            "bytes": s.len(),
            "sha256": hex(&Sha256::digest(s.as_bytes())),
        }),
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            let mut flag = false;
            for i in items {
                out.push(redact_value(i, flag));
                flag = i.as_str().is_some_and(|s| {
                    let n = s.trim_start_matches('-').to_ascii_lowercase();
                    s.starts_with('-')
                        && !s.contains('=')
                        && [
                            "password", "passwd", "token", "secret", "key", "api-key", "apikey",
                        ]
                        .iter()
                        .any(|w| n == *w || n.ends_with(&format!("-{w}")))
                });
            }
            Value::Array(out)
        }
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), redact_value(v, false)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Now as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    rfc3339(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

/// A time since the Unix epoch as RFC 3339 UTC with milliseconds.
pub fn rfc3339(now: std::time::Duration) -> String {
    let secs = now.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_secrets_and_contents() {
        let args = json!({
            "args": ["curl", "-H", "Authorization=Bearer x", "--token", "abc", "OPENAI_API_KEY=sk-123", "ghp_0123456789abcdefghij", "plain"],
            "content": "file body",
            "path": "notes.txt",
        });
        let r = redact_args(&args);
        assert_eq!(
            r["args"],
            json!([
                "curl",
                "-H",
                "[redacted]",
                "--token",
                "[redacted]",
                "[redacted]",
                "[redacted]",
                "plain"
            ])
        );
        assert_eq!(r["content"]["bytes"], 9);
        assert_eq!(r["path"], "notes.txt");
        assert!(!r.to_string().contains("file body"));
    }

    #[test]
    fn dates() {
        use std::time::Duration;
        assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(Duration::from_millis(951_827_696_789)),
            "2000-02-29T12:34:56.789Z"
        );
        assert_eq!(
            rfc3339(Duration::from_secs(1_795_996_799)),
            "2026-11-29T23:59:59.000Z"
        );
    }
}
