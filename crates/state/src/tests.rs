//! Unit tests of `state`: the attempt counts.

use super::*;

fn run(id: &str) -> RunRef {
    RunRef {
        id: id.into(),
        dev: 1,
        ino: 2,
    }
}

#[test]
fn attempts_round_trip_and_vanish_when_empty() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = Attempts::load(dir.path());
    assert_eq!(a.get("x"), 0);
    let file = Some(FileRef {
        dev: 1,
        ino: 7,
        changed: 5,
    });
    a.begin("x", run("20260409T061500Z"), file);
    a.begin("x", run("20260409T071500Z-2"), file);
    a.save(dir.path()).unwrap();
    let mut read = Attempts::load(dir.path());
    assert_eq!(read.get("x"), 2);
    assert_eq!(
        read.runs("x"),
        [run("20260409T061500Z"), run("20260409T071500Z-2")]
    );
    // The same name, another file: its attempts are not this file's.
    assert!(read.of_file("x", file).is_some());
    assert!(
        read.of_file(
            "x",
            Some(FileRef {
                dev: 1,
                ino: 7,
                changed: 6
            })
        )
        .is_none(),
        "a file made anew in a freed inode is another file"
    );
    assert_eq!(read.get("x"), 0);
    a.clear("x");
    a.save(dir.path()).unwrap();
    assert!(!dir.path().join(ATTEMPTS_FILE).exists());
}

#[test]
fn attempts_written_by_an_older_version_or_another_hand_are_read_with_care() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(ATTEMPTS_FILE);
    std::fs::write(
        &file,
        r#"{"old": 2, "new": {"attempts": 1, "runs": [{"id": "../../etc", "dev": 1, "ino": 2}, {"id": "20260409T061500Z", "dev": 1, "ino": 3}]}}"#,
    )
    .unwrap();
    let a = Attempts::load(dir.path());
    assert_eq!((a.get("old"), a.runs("old").len()), (2, 0));
    assert_eq!(
        a.runs("new"),
        [RunRef {
            id: "20260409T061500Z".into(),
            dev: 1,
            ino: 3
        }],
        "a path is never a run"
    );
    // A FIFO, a link to a device or garbage: read as nothing, at once.
    std::fs::remove_file(&file).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &file,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    assert_eq!(Attempts::load(dir.path()), Attempts::default());
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &file).unwrap();
    assert_eq!(Attempts::load(dir.path()), Attempts::default());
    // Saved through a new file: the planted link is replaced, its target untouched.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "victim").unwrap();
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&victim, &file).unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join(format!("{ATTEMPTS_FILE}.tmp"))).unwrap();
    let mut a = Attempts::default();
    a.begin("t", run("20260409T061500Z"), None);
    a.save(dir.path()).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim");
    assert_eq!(Attempts::load(dir.path()).get("t"), 1);
}
