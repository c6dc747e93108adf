//! Fuzzes the shell tool's argument policy: whatever argv, command string and
//! allowlist the input spells, only an allowlisted bare name may run (see
//! tests/integration/invariants.rs, which the property tests run on stable too).
#![no_main]

#[path = "../../tests/integration/invariants.rs"]
mod invariants;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    invariants::check_shell(data);
});
