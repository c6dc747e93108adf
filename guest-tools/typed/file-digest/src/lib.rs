//! `file-digest`: a typed tool (the `toolhost:tool` world) that reads files
//! through the sandbox's preopened dirs and returns their size and SHA-256.
//! A path outside the allowed dirs is an error result, as the guest cannot
//! see anything else.

wit_bindgen::generate!({ path: "../../../wit", world: "tool" });

use std::io::Read;

use exports::toolhost::tool::typed_tool::{Guest, Info};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

struct FileDigest;

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "paths": {
      "type": "array",
      "items": {"type": "string"},
      "minItems": 1,
      "maxItems": 1000,
      "description": "Files to hash: absolute, or relative to the sandbox's working directory"
    }
  },
  "required": ["paths"],
  "additionalProperties": false
}"#;

fn digest(path: &str) -> Result<(u64, String), String> {
    let mut f = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| format!("{path}: {e}"))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        h.update(&buf[..n]);
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((total, hex))
}

impl Guest for FileDigest {
    fn describe() -> Info {
        Info {
            name: "file-digest".into(),
            description: "Return the size in bytes and the SHA-256 digest of each given file inside the sandbox.".into(),
            input_schema: SCHEMA.into(),
        }
    }

    fn call(input: String) -> Result<String, String> {
        let input: Value =
            serde_json::from_str(&input).map_err(|e| format!("input is not JSON: {e}"))?;
        let obj = input.as_object().ok_or("input must be a JSON object")?;
        if let Some(k) = obj.keys().find(|k| *k != "paths") {
            return Err(format!("unknown field {k:?} (expected \"paths\")"));
        }
        let paths = obj
            .get("paths")
            .ok_or("missing field \"paths\"")?
            .as_array()
            .ok_or("\"paths\" must be an array of strings")?;
        if paths.is_empty() || paths.len() > 1000 {
            return Err("\"paths\" must hold 1 to 1000 paths".into());
        }
        let mut files = Vec::with_capacity(paths.len());
        for p in paths {
            let p = p.as_str().ok_or("\"paths\" must be an array of strings")?;
            let (bytes, sha256) = digest(p)?;
            files.push(json!({"path": p, "bytes": bytes, "sha256": sha256}));
        }
        Ok(json!({ "files": files }).to_string())
    }
}

export!(FileDigest);
