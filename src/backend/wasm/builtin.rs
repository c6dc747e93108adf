//! The built-in WASI tools, carried in the binary.
//!
//! build.rs builds `guest-tools/` (the command modules for wasm32-wasip1, the
//! typed tools for wasm32-wasip2) and lists them in `$OUT_DIR/builtin_tools.rs`
//! by name, sorted, with their bytes. An installed or copied binary therefore
//! has them with no source tree. They are compiled through the same disk
//! cache as any other tool, keyed by their bytes.

#![deny(unsafe_code)]

include!(concat!(env!("OUT_DIR"), "/builtin_tools.rs"));

/// The bytes of the built-in tool `name`.
pub fn get(name: &str) -> Option<&'static [u8]> {
    TOOLS
        .binary_search_by(|(n, _)| (*n).cmp(name))
        .ok()
        .map(|i| TOOLS[i].1)
}

/// Every built-in tool, by name, sorted: its name and bytes.
pub fn all() -> impl Iterator<Item = (&'static str, &'static [u8])> {
    TOOLS.iter().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_collection_is_sorted_named_and_wasm() {
        assert!(TOOLS.len() >= 10, "{} built-in tools", TOOLS.len());
        for w in TOOLS.windows(2) {
            assert!(w[0].0 < w[1].0, "{} before {}", w[0].0, w[1].0);
        }
        for (name, bytes) in all() {
            assert!(crate::backend::wasm::registry::valid_name(name), "{name}");
            assert_eq!(get(name), Some(bytes));
            assert!(bytes.starts_with(b"\0asm"), "{name} is not wasm");
        }
        assert_eq!(get("no-such-tool"), None);
    }
}
