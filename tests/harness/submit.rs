//! `submit FILE…` (docs/tasks.md, "Submitting a task"): each file checked as
//! `check` would — one problem and nothing is placed — then placed in the inbox
//! whole, under a temporary name and a rename that never overwrites.

use crate::common::*;

#[tokio::test]
async fn submit_places_checked_tasks_whole_and_never_over_another() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .build()
        .await;
    let drafts = s.root().join("drafts");
    std::fs::create_dir(&drafts).unwrap();
    std::fs::write(
        drafts.join("weekly.md"),
        "+++\nmax_turns = 3\n+++\nSummarise the week.",
    )
    .unwrap();
    std::fs::write(drafts.join("bad.md"), "+++\nmax_turns = 0\n+++\nNo turns.").unwrap();

    // One bad file: nothing is placed.
    let out = bin(&s)
        .args(["submit", "drafts/weekly.md", "drafts/bad.md"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_contains(stderr(&out), "drafts/bad.md:2: frontmatter: max_turns");
    assert!(stderr(&out).contains("nothing was placed"));
    assert!(s.inbox().is_empty());

    let out = bin(&s)
        .args(["submit", "drafts/weekly.md"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_contains(stdout(&out), "tasks/inbox/weekly.md");
    assert_eq!(s.inbox(), ["weekly.md"]);
    assert_eq!(
        std::fs::read_to_string(s.root().join("tasks/inbox/weekly.md")).unwrap(),
        "+++\nmax_turns = 3\n+++\nSummarise the week."
    );
    let hidden: Vec<_> = std::fs::read_dir(s.root().join("tasks/inbox"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "no temporary file is left: {hidden:?}");

    // The same name again: refused, the first one kept.
    std::fs::write(drafts.join("weekly.md"), "Another week.").unwrap();
    let out = bin(&s)
        .args(["submit", "drafts/weekly.md"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_contains(stderr(&out), "already in the inbox");
    assert_eq!(
        std::fs::read_to_string(s.root().join("tasks/inbox/weekly.md")).unwrap(),
        "+++\nmax_turns = 3\n+++\nSummarise the week."
    );
    // Only NAME.md files run: a .txt is refused before anything is read.
    std::fs::write(drafts.join("notes.txt"), "x").unwrap();
    let out = bin(&s)
        .args(["submit", "drafts/notes.txt"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_contains(stderr(&out), "only NAME.md files run");
}

#[tokio::test]
async fn submit_places_a_file_no_wider_than_0640_whatever_the_source_or_umask() {
    use std::os::unix::fs::PermissionsExt;
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .build()
        .await;
    let drafts = s.root().join("drafts");
    std::fs::create_dir(&drafts).unwrap();
    for (name, mode) in [("open.md", 0o666), ("private.md", 0o600)] {
        let path = drafts.join(name);
        std::fs::write(&path, "Summarise the week.").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    let out = bin(&s)
        .args(["submit", "drafts/open.md", "drafts/private.md"])
        .output()
        .unwrap();

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

#[tokio::test]
async fn submit_never_reads_through_a_link_nor_anything_but_a_regular_file() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .build()
        .await;
    let drafts = s.root().join("drafts");
    std::fs::create_dir(&drafts).unwrap();
    let secret = s.root().join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET-CANARY-5521").unwrap();
    std::os::unix::fs::symlink(&secret, drafts.join("shadow.md")).unwrap();
    std::fs::write(drafts.join("real.md"), "Do it.").unwrap();
    std::os::unix::fs::symlink(drafts.join("real.md"), drafts.join("alias.md")).unwrap();
    std::fs::create_dir(drafts.join("folder.md")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(drafts.join("fifo.md"))
        .status()
        .unwrap();
    assert!(fifo.success());

    for (source, what) in [
        ("drafts/shadow.md", "a symbolic link"),
        ("drafts/alias.md", "a symbolic link"),
        ("drafts/folder.md", "not a regular file (a folder)"),
        ("drafts/fifo.md", "not a regular file (a FIFO)"),
    ] {
        let out = bin(&s).args(["submit", source]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{source}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("{source}: {what}")) && err.contains("nothing was placed"),
            "{source}: {err}"
        );
        assert!(s.inbox().is_empty(), "{source}: {:?}", s.inbox());
    }
    assert!(
        stderr(
            &bin(&s)
                .args(["submit", "drafts/shadow.md"])
                .output()
                .unwrap()
        )
        .contains("never reads through a link"),
    );
    // The file itself is placed.
    let out = bin(&s).args(["submit", "drafts/real.md"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.inbox(), ["real.md"]);
}

#[tokio::test]
async fn submit_name_files_a_task_under_that_name_and_reads_stdin_only_with_it() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .build()
        .await;
    std::fs::write(s.root().join("draft.md"), "Summarise the week.").unwrap();

    let out = bin(&s)
        .args(["submit", "--name", "weekly", "draft.md"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.inbox(), ["weekly.md"]);

    let out = bin(&s)
        .args(["submit", "--name", "piped.md", "-"])
        .write_stdin("+++\nmax_turns = 2\n+++\nFrom a pipe.")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.inbox(), ["piped.md", "weekly.md"]);
    assert_eq!(
        std::fs::read_to_string(s.root().join("tasks/inbox/piped.md")).unwrap(),
        "+++\nmax_turns = 2\n+++\nFrom a pipe."
    );

    let out = bin(&s)
        .args(["submit", "-"])
        .write_stdin("No name.")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--name"), "{}", stderr(&out));
    let out = bin(&s)
        .args(["submit", "--name", "two", "draft.md", "draft.md"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(s.inbox(), ["piped.md", "weekly.md"]);
}
