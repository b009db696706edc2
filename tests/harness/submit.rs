//! `submit FILE…` (docs/tasks.md, "Submitting a task"): each file checked as
//! `check` would — one problem and nothing is placed — then placed in the inbox
//! whole, under a temporary name and a rename that never overwrites.

use std::path::PathBuf;
use std::process::Output;

use crate::common::*;

/// A checked task with frontmatter.
const WEEKLY: &str = "+++\nmax_turns = 3\n+++\nSummarise the week.";

/// A project whose endpoint nobody answers: `submit` never asks it.
async fn project() -> Scene {
    offline().build().await
}

/// The project's `drafts` folder, holding `files` (name, text).
fn drafts(s: &Scene, files: &[(&str, &str)]) -> PathBuf {
    let drafts = s.root().join("drafts");
    std::fs::create_dir_all(&drafts).unwrap();
    for (name, text) in files {
        std::fs::write(drafts.join(name), text).unwrap();
    }
    drafts
}

/// `submit` with `args`.
fn submit(s: &Scene, args: &[&str]) -> Output {
    bin(s).arg("submit").args(args).output().unwrap()
}

/// `submit` with `args`, `stdin` on its standard input.
fn submit_stdin(s: &Scene, args: &[&str], stdin: &str) -> Output {
    bin(s)
        .arg("submit")
        .args(args)
        .write_stdin(stdin)
        .output()
        .unwrap()
}

/// The text of the inbox's `name`.
fn placed(s: &Scene, name: &str) -> String {
    std::fs::read_to_string(s.root().join("tasks/inbox").join(name)).unwrap()
}

#[tokio::test]
async fn submit_places_nothing_when_one_file_is_bad() {
    let s = project().await;
    let bad = "+++\nmax_turns = 0\n+++\nNo turns.";
    drafts(&s, &[("weekly.md", WEEKLY), ("bad.md", bad)]);

    let out = submit(&s, &["drafts/weekly.md", "drafts/bad.md"]);

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_contains(stderr(&out), "drafts/bad.md:2: frontmatter: max_turns");
    assert_contains(stderr(&out), "nothing was placed");
    assert!(s.inbox().is_empty());
}

#[tokio::test]
async fn submit_places_a_checked_task_whole() {
    let s = project().await;
    drafts(&s, &[("weekly.md", WEEKLY)]);

    let out = submit(&s, &["drafts/weekly.md"]);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_contains(stdout(&out), "tasks/inbox/weekly.md");
    assert_eq!(s.inbox(), ["weekly.md"]);
    assert_eq!(placed(&s, "weekly.md"), WEEKLY);
    let hidden: Vec<_> = std::fs::read_dir(s.root().join("tasks/inbox"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "no temporary file is left: {hidden:?}");
}

#[tokio::test]
async fn submit_never_places_over_another() {
    let s = project().await;
    let drafts = drafts(&s, &[("weekly.md", WEEKLY)]);
    assert_eq!(submit(&s, &["drafts/weekly.md"]).status.code(), Some(0));
    std::fs::write(drafts.join("weekly.md"), "Another week.").unwrap();

    // The same name again: refused, the first one kept.
    let out = submit(&s, &["drafts/weekly.md"]);

    assert_eq!(out.status.code(), Some(1));
    assert_contains(stderr(&out), "already in the inbox");
    assert_eq!(placed(&s, "weekly.md"), WEEKLY);
}

#[tokio::test]
async fn submit_refuses_a_file_not_named_name_md_before_reading_it() {
    let s = project().await;
    drafts(&s, &[("notes.txt", "x")]);

    let out = submit(&s, &["drafts/notes.txt"]);

    assert_eq!(out.status.code(), Some(1));
    assert_contains(stderr(&out), "only NAME.md files run");
}

#[tokio::test]
async fn submit_places_a_file_no_wider_than_0640_whatever_the_source_or_umask() {
    use std::os::unix::fs::PermissionsExt;
    let s = project().await;
    let drafts = drafts(&s, &[]);
    for (name, mode) in [("open.md", 0o666), ("private.md", 0o600)] {
        let path = drafts.join(name);
        std::fs::write(&path, "Summarise the week.").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    let out = submit(&s, &["drafts/open.md", "drafts/private.md"]);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for name in ["open.md", "private.md"] {
        let placed = std::fs::metadata(s.root().join("tasks/inbox").join(name)).unwrap();
        assert_eq!(
            placed.permissions().mode() & 0o7777,
            0o640,
            "{name}: owner read-write, the unit's group read, nobody else"
        );
    }
}

/// Drafts no task is read from: `shadow.md` a link to a secret, `alias.md`
/// a link to `real.md`, `folder.md` a folder, `fifo.md` a FIFO.
fn drafts_that_are_no_regular_file(s: &Scene) {
    let drafts = drafts(s, &[("real.md", "Do it.")]);
    let secret = s.root().join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET-CANARY-5521").unwrap();
    std::os::unix::fs::symlink(&secret, drafts.join("shadow.md")).unwrap();
    std::os::unix::fs::symlink(drafts.join("real.md"), drafts.join("alias.md")).unwrap();
    std::fs::create_dir(drafts.join("folder.md")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(drafts.join("fifo.md"))
        .status()
        .unwrap();
    assert!(fifo.success());
}

#[tokio::test]
async fn submit_never_reads_through_a_link_nor_anything_but_a_regular_file() {
    let s = project().await;
    drafts_that_are_no_regular_file(&s);

    for (source, what) in [
        ("drafts/shadow.md", "a symbolic link"),
        ("drafts/alias.md", "a symbolic link"),
        ("drafts/folder.md", "not a regular file (a folder)"),
        ("drafts/fifo.md", "not a regular file (a FIFO)"),
    ] {
        let out = submit(&s, &[source]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{source}: {err}");
        assert_contains(&err, &format!("{source}: {what}"));
        assert_contains(&err, "nothing was placed");
        assert!(s.inbox().is_empty(), "{source}: {:?}", s.inbox());
    }
    let out = submit(&s, &["drafts/shadow.md"]);
    assert_contains(stderr(&out), "never reads through a link");
}

#[tokio::test]
async fn submit_places_the_file_a_refused_link_points_at() {
    let s = project().await;
    drafts_that_are_no_regular_file(&s);
    assert_eq!(submit(&s, &["drafts/alias.md"]).status.code(), Some(1));

    // The file itself is placed.
    let out = submit(&s, &["drafts/real.md"]);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.inbox(), ["real.md"]);
}

#[tokio::test]
async fn submit_name_files_a_task_under_that_name_from_a_file_or_stdin() {
    let s = project().await;
    std::fs::write(s.root().join("draft.md"), "Summarise the week.").unwrap();

    let out = submit(&s, &["--name", "weekly", "draft.md"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.inbox(), ["weekly.md"]);

    let piped = "+++\nmax_turns = 2\n+++\nFrom a pipe.";
    let out = submit_stdin(&s, &["--name", "piped.md", "-"], piped);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.inbox(), ["piped.md", "weekly.md"]);
    assert_eq!(placed(&s, "piped.md"), piped);
}

#[tokio::test]
async fn submit_reads_stdin_only_with_a_name_and_names_one_file_at_most() {
    let s = project().await;
    std::fs::write(s.root().join("draft.md"), "Summarise the week.").unwrap();

    let out = submit_stdin(&s, &["-"], "No name.");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_contains(stderr(&out), "--name");

    let out = submit(&s, &["--name", "two", "draft.md", "draft.md"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(s.inbox().is_empty(), "{:?}", s.inbox());
}
