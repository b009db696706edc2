//! The shape ARCHITECTURE.md promises beyond what Cargo holds is checked
//! by `scripts/check-structure` in CI; here its self-test plants one
//! breach of each rule (a room depending on one above or beside it, code
//! in the root package, a glob over the crate's own modules, a cycle
//! between sibling files, a print macro allowed or stdout reached past
//! `display`'s writer, a crate root that may print, an exit code outside
//! `app`, more than the room map in `lib.rs`, a file that does not say
//! what it is for, "budget" for anything but spend, a state file named
//! outside `state`, a tuple parameter, a citation of a document outside
//! the repository) and asserts each is caught.

use std::process::Command;

#[test]
fn every_planted_breach_of_the_layout_is_caught() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(format!("{root}/scripts/check-structure"))
        .arg("--self-test")
        .output()
        .expect("python3 runs scripts/check-structure");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("planted breaches caught"), "{stdout}");
}
