//! Fuzzes path resolution through the file tools: whatever operations and
//! paths the input spells, nothing outside the read-write allowed dir changes
//! and every accepted path stays inside (see tests/integration/invariants.rs,
//! which the property tests run on stable too).
#![no_main]

#[path = "../../tests/integration/invariants.rs"]
mod invariants;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A fresh fixture per input: operations may rearrange the workspace.
    let f = invariants::PathFixture::new();
    f.check(data);
});
