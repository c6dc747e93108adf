//! Property tests of the two invariants the fuzz targets check (see
//! `invariants.rs` and `fuzz/`), on stable, in the normal test command: file
//! operations on arbitrary paths change nothing outside the read-write allowed
//! dir, and the shell policy lets only allowlisted bare names run.

use proptest::prelude::*;

use crate::invariants::{PathFixture, check_shell};

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn file_operations_never_touch_anything_outside(data in proptest::collection::vec(any::<u8>(), 0..48)) {
        // One fixture per case: operations may rearrange the workspace.
        let f = PathFixture::new();
        f.check(&data);
    }

    #[test]
    fn the_shell_policy_only_lets_allowlisted_bare_names_run(data in proptest::collection::vec(any::<u8>(), 0..24)) {
        check_shell(&data);
    }
}

/// The path fixture is not vacuous: the same operations do change the
/// workspace (writes land) while the outside stays as it was.
#[test]
fn the_path_fixture_sees_writes_inside() {
    let f = PathFixture::new();
    // op 0 (write), relative, one component "x.txt" (index 14).
    f.check(&[0, 0, 1, 14]);
    let ws = f.ws();
    assert_eq!(std::fs::read_to_string(ws.join("x.txt")).unwrap(), "PWNED");
    // A write through the symlink that leads out is refused, and the check
    // would have caught it: prove the snapshot sees a change made outside.
    f.check(&[0, 0, 2, 5, 13]);
    std::fs::write(f.outside().join("canary.txt"), "changed").unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.check(&[6, 0, 1, 3])));
    assert!(caught.is_err(), "a change outside went unnoticed");
}
