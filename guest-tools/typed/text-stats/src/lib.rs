//! `text-stats`: a typed tool (the `toolhost:tool` world) that counts the
//! lines, words, characters and bytes of a text, and optionally its most
//! frequent words. Pure computation: it touches no file.

wit_bindgen::generate!({ path: "../../../wit", world: "tool" });

use exports::toolhost::tool::typed_tool::{Guest, Info};
use serde_json::{Value, json};

struct TextStats;

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "text": {"type": "string", "description": "The text to measure"},
    "top": {"type": "integer", "minimum": 0, "maximum": 100, "description": "How many of the most frequent words to list (default 0)"}
  },
  "required": ["text"],
  "additionalProperties": false
}"#;

impl Guest for TextStats {
    fn describe() -> Info {
        Info {
            name: "text-stats".into(),
            description: "Count the lines, words, characters and bytes of a text, and list its most frequent words.".into(),
            input_schema: SCHEMA.into(),
        }
    }

    fn call(input: String) -> Result<String, String> {
        let input: Value =
            serde_json::from_str(&input).map_err(|e| format!("input is not JSON: {e}"))?;
        let obj = input.as_object().ok_or("input must be a JSON object")?;
        if let Some(k) = obj.keys().find(|k| *k != "text" && *k != "top") {
            return Err(format!(
                "unknown field {k:?} (expected \"text\" and \"top\")"
            ));
        }
        let text = obj
            .get("text")
            .ok_or("missing field \"text\"")?
            .as_str()
            .ok_or("\"text\" must be a string")?;
        let top = match obj.get("top") {
            None => 0,
            Some(v) => v
                .as_u64()
                .filter(|n| *n <= 100)
                .ok_or("\"top\" must be an integer from 0 to 100")? as usize,
        };
        let lines =
            text.matches('\n').count() + usize::from(!text.is_empty() && !text.ends_with('\n'));
        let words: Vec<&str> = text.split_whitespace().collect();
        let mut freq: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
        if top > 0 {
            for w in &words {
                let w: String = w
                    .trim_matches(|c: char| !c.is_alphanumeric())
                    .to_lowercase();
                if !w.is_empty() {
                    *freq.entry(w).or_default() += 1;
                }
            }
        }
        let mut ranked: Vec<(String, u64)> = freq.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked.truncate(top);
        let result = json!({
            "lines": lines,
            "words": words.len(),
            "chars": text.chars().count(),
            "bytes": text.len(),
            "top": ranked.into_iter().map(|(w, n)| json!({"word": w, "count": n})).collect::<Vec<_>>(),
        });
        Ok(result.to_string())
    }
}

export!(TextStats);
