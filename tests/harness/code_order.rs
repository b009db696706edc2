//! `link/code-order.txt`, the code layout `build.rs` hands the linker: names
//! the linker can match (lines starting with `#` are comments to it), in the
//! order `scripts/code-order` promises.

use std::collections::HashSet;

fn names() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/link/code-order.txt");
    std::fs::read_to_string(path)
        .expect("link/code-order.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// One symbol a line, as the binary's symbol table spells it: not
/// demangled, no profiler's marks (callgrind's `name'2` recursion depth,
/// `0x…` addresses, `(below main)`), none twice.
#[test]
fn every_line_is_one_symbol_name() {
    let names = names();
    assert!(names.len() >= 1000, "{} names", names.len());
    let mut seen = HashSet::new();
    for name in &names {
        assert!(!name.is_empty(), "an empty line");
        assert!(
            !name.contains(char::is_whitespace) && !name.contains('\''),
            "not a symbol name: {name:?}"
        );
        assert!(
            !name.starts_with("0x") && !name.starts_with('('),
            "{name:?}"
        );
        assert!(!name.contains("::"), "demangled: {name:?}");
        assert!(seen.insert(name), "twice: {name:?}");
    }
    assert!(seen.contains(&"main".to_string()));
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("_ZN13agent_harness4main17h"))
    );
}

/// `--help`'s code first (its help text's writer), what only a run uses
/// (a task's pipeline, named as its crate `harness-drain` spells it: a list
/// written before the rooms were crates fails here) after all of it.
#[test]
fn what_help_runs_comes_before_what_only_a_run_runs() {
    let names = names();
    let last_help = names
        .iter()
        .rposition(|n| n.contains("help_template12HelpTemplate"))
        .expect("clap's help writer is in the list");
    let first_task = names
        .iter()
        .position(|n| n.starts_with("_ZN13harness_drain8pipeline5Batch12process_task"))
        .expect("a task's pipeline is in the list");
    assert!(last_help < first_task, "{last_help} vs {first_task}");
}
