//! The opened folder against what another user could plant: links at
//! every name it writes, moves and locks, FIFOs and devices where it
//! reads, a tree deeper than a descriptor per level allows.

use super::*;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::Path;

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
}

/// A folder on another file system than the test's temporary folders,
/// when this machine has one (`/dev/shm` is tmpfs).
fn other_file_system(than: &Path) -> Option<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let dev = |p: &Path| std::fs::metadata(p).ok().map(|m| m.dev());
    (dev(shm).is_some() && dev(shm) != dev(than))
        .then(|| tempfile::tempdir_in(shm).ok())
        .flatten()
}

#[test]
fn remove_tree_removes_a_tree_and_never_what_a_link_in_it_points_to() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep.txt"), "keep").unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir_all(run.join("a/b")).unwrap();
    std::fs::write(run.join("a/b/f.txt"), "x").unwrap();
    std::os::unix::fs::symlink(outside.path(), run.join("a/link")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("top-link")).unwrap();
    let folder = Folder::open(dir.path()).unwrap();

    folder.remove_tree("run").unwrap();
    folder.remove_tree("top-link").unwrap();

    assert!(!run.exists());
    assert!(std::fs::symlink_metadata(dir.path().join("top-link")).is_err());
    assert_eq!(
        std::fs::read_to_string(outside.path().join("keep.txt")).unwrap(),
        "keep"
    );
    assert!(folder.remove_tree("..").is_err());
}

#[test]
fn an_opened_folder_keeps_its_writes_and_reads_when_its_path_is_swapped_for_a_link() {
    let root = tempfile::tempdir().unwrap();
    let a = root.path().join("a");
    let victim = root.path().join("victim");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(a.join("r.txt"), "mine").unwrap();
    std::fs::write(victim.join("r.txt"), "theirs").unwrap();
    let folder = Folder::open(&a).unwrap();
    // Swapped after it was opened: `a` is now a link to `victim`.
    std::fs::rename(&a, root.path().join("a.old")).unwrap();
    std::os::unix::fs::symlink(&victim, &a).unwrap();

    folder.replace("page.html", b"report", 0o600).unwrap();
    assert_eq!(folder.read("r.txt", 100).unwrap(), b"mine");

    assert_eq!(
        std::fs::read(root.path().join("a.old/page.html")).unwrap(),
        b"report"
    );
    assert!(
        !victim.join("page.html").exists(),
        "nothing landed through the link"
    );
    assert!(
        Folder::open(&a).is_err(),
        "the link itself is not opened as a folder"
    );
    assert!(matches!(
        folder.read("../victim/r.txt", 100),
        Err(FileError::Io(_))
    ));
}

#[test]
fn a_tree_deeper_than_the_bound_is_left_and_said_never_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let folder = Folder::open(dir.path()).unwrap();
    // 20,000 levels: far past what a recursion per level could hold.
    let mut at = folder.create_sub("deep", 0o700).unwrap();
    for _ in 0..20_000 {
        at = at.create_sub("d", 0o700).unwrap();
    }
    at.create_file("leaf", 0o600).unwrap();
    drop(at);
    let e = folder.remove_tree("deep").unwrap_err();
    assert!(e.to_string().contains("more than 64 folders deep"), "{e}");
    assert!(folder.has("deep"), "what could not be removed stays");

    // Within the bound, everything goes.
    let mut at = folder.create_sub("shallow", 0o700).unwrap();
    for i in 0..MAX_TREE_DEPTH {
        at.create_file(&format!("f{i}"), 0o600).unwrap();
        at = at.create_sub("d", 0o700).unwrap();
    }
    drop(at);
    folder.remove_tree("shallow").unwrap();
    assert!(!folder.has("shallow"));
    // The test's own clean-up of the deep one: `rm` walks without a bound.
    let rm = std::process::Command::new("rm")
        .arg("-rf")
        .arg(dir.path().join("deep"))
        .status()
        .unwrap();
    assert!(rm.success());
}

#[test]
fn a_move_never_overwrites_and_moves_a_link_as_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("t.md"), "task").unwrap();
    std::fs::write(b.join("t.md"), "already there").unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "secret").unwrap();
    symlink(&secret, a.join("l.md")).unwrap();
    let (fa, fb) = (Folder::open(&a).unwrap(), Folder::open(&b).unwrap());

    let e = fa
        .move_to("t.md".as_ref(), &fb, "t.md".as_ref())
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(
        std::fs::read_to_string(b.join("t.md")).unwrap(),
        "already there"
    );
    assert!(a.join("t.md").exists(), "nothing lost");

    fa.move_to("l.md".as_ref(), &fb, "l.md".as_ref()).unwrap();
    assert!(
        std::fs::symlink_metadata(b.join("l.md"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
}

#[test]
fn a_copy_across_file_systems_reads_no_link_and_writes_through_none() {
    let dir = tempfile::tempdir().unwrap();
    // The copy itself, on one file system or two: what it does is the same.
    let other = other_file_system(dir.path());
    let into_path = other
        .as_ref()
        .map_or(dir.path().join("into"), |o| o.path().to_path_buf());
    std::fs::create_dir_all(&into_path).unwrap();
    let from_path = dir.path().join("from");
    std::fs::create_dir_all(&from_path).unwrap();
    let (from, into) = (
        Folder::open(&from_path).unwrap(),
        Folder::open(&into_path).unwrap(),
    );
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "victim").unwrap();
    // Links planted where a predictable temporary name would be.
    for name in [
        ".agent-harness-move.tmp",
        ".agent-harness-move-20260409T061500Z.tmp",
    ] {
        symlink(&victim, into_path.join(name)).unwrap();
    }

    std::fs::write(from_path.join("t.md"), "the task").unwrap();
    from.copy_across("t.md".as_ref(), &into, "t.md".as_ref())
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(into_path.join("t.md")).unwrap(),
        "the task"
    );
    assert!(!from_path.join("t.md").exists());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim");

    // A link is made anew where it pointed; its target is never read.
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "secret").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    symlink(&secret, from_path.join("l.md")).unwrap();
    from.copy_across("l.md".as_ref(), &into, "l.md".as_ref())
        .unwrap();
    let moved = std::fs::symlink_metadata(into_path.join("l.md")).unwrap();
    assert!(moved.file_type().is_symlink());
    assert_eq!(std::fs::read_link(into_path.join("l.md")).unwrap(), secret);

    // A FIFO arrives empty, without a wait; a target that exists is kept.
    mkfifo(&from_path.join("f.md"));
    from.copy_across("f.md".as_ref(), &into, "f.md".as_ref())
        .unwrap();
    assert_eq!(std::fs::read(into_path.join("f.md")).unwrap(), b"");
    std::fs::write(from_path.join("t.md"), "second").unwrap();
    let e = from
        .copy_across("t.md".as_ref(), &into, "t.md".as_ref())
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(
        std::fs::read_to_string(into_path.join("t.md")).unwrap(),
        "the task"
    );
    assert_eq!(
        std::fs::read_to_string(from_path.join("t.md")).unwrap(),
        "second"
    );
    let left: Vec<_> = std::fs::read_dir(&into_path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| {
            n.ends_with(".tmp")
                && !n.starts_with(".agent-harness-move-2")
                && n != ".agent-harness-move.tmp"
        })
        .collect();
    assert!(left.is_empty(), "no temporary file is left: {left:?}");
}

#[test]
fn a_lock_or_a_state_file_is_never_opened_through_a_link_a_fifo_or_a_device() {
    let dir = tempfile::tempdir().unwrap();
    let folder = Folder::open(dir.path()).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    symlink(&elsewhere, dir.path().join(".lock")).unwrap();
    let e = folder.open_lock(".lock").unwrap_err();
    assert!(e.to_string().contains("a symbolic link"), "{e}");
    assert!(!elsewhere.exists(), "no file was created through the link");
    mkfifo(&dir.path().join(".fifo-lock"));
    assert!(
        folder
            .open_lock(".fifo-lock")
            .unwrap_err()
            .to_string()
            .contains("FIFO")
    );
    assert!(folder.open_lock(".lock-ok").is_ok());

    mkfifo(&dir.path().join("state.json"));
    symlink("/dev/zero", dir.path().join("zero.json")).unwrap();
    assert!(matches!(
        folder.read("state.json", 1 << 20),
        Err(FileError::NotRegular("a FIFO"))
    ));
    assert!(matches!(
        folder.read("zero.json", 1 << 20),
        Err(FileError::NotRegular("a symbolic link"))
    ));
    assert!(matches!(
        folder.read("missing.json", 1 << 20),
        Err(FileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound
    ));
    std::fs::write(dir.path().join("big.json"), vec![b' '; 2048]).unwrap();
    assert!(matches!(
        folder.read("big.json", 1024),
        Err(FileError::TooLarge {
            len: 2048,
            cap: 1024
        })
    ));
}

#[test]
#[ignore = "needs scripts/test: root, to give a file to another user"]
fn a_file_another_user_put_here_is_not_read_as_ones_own() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test gives a file to another user: run it as root (scripts/test in CI does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let folder = Folder::open(dir.path()).unwrap();
    std::fs::write(dir.path().join("mine.json"), "{}").unwrap();
    assert_eq!(folder.read_own("mine.json", 1024).unwrap(), b"{}");
    std::fs::write(dir.path().join("theirs.json"), "{}").unwrap();
    std::os::unix::fs::chown(dir.path().join("theirs.json"), Some(65534), None).unwrap();
    let refused = folder.read_own("theirs.json", 1024).unwrap_err();
    assert!(
        matches!(&refused, FileError::Io(e) if Foreign::of(e).is_some_and(|f| f.uid == 65534)),
        "{refused}"
    );
    assert!(refused.to_string().contains("belongs to user 65534"));
    // `read` takes any owner's.
    assert_eq!(folder.read("theirs.json", 1024).unwrap(), b"{}");
}

#[test]
fn a_tail_is_the_last_bytes_of_a_regular_file_and_never_a_fifo_or_a_link() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("log"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(dir.path().join("short"), "ab").unwrap();
    mkfifo(&dir.path().join("fifo"));
    symlink(dir.path().join("log"), dir.path().join("link")).unwrap();
    let folder = Folder::open(dir.path()).unwrap();
    let tail = |name: &str, max: u64| {
        let t = folder.read_tail(name, max).unwrap();
        (String::from_utf8(t.bytes).unwrap(), t.cut)
    };
    assert_eq!(tail("log", 6), ("three\n".into(), true));
    assert_eq!(tail("short", 6), ("ab".into(), false));
    // Exactly as long as the tail read: whole, not cut.
    assert_eq!(tail("log", 14), ("one\ntwo\nthree\n".into(), false));
    assert_eq!(tail("log", 13), ("ne\ntwo\nthree\n".into(), true));
    assert!(matches!(
        folder.read_tail("fifo", 6),
        Err(FileError::NotRegular("a FIFO"))
    ));
    assert!(matches!(
        folder.read_tail("link", 6),
        Err(FileError::NotRegular("a symbolic link"))
    ));
    assert!(
        matches!(folder.read_tail("absent", 6), Err(FileError::Io(e)) if e.kind() == io::ErrorKind::NotFound)
    );
}

#[test]
fn a_files_identity_is_looked_at_without_opening_or_following_it() {
    let dir = tempfile::tempdir().unwrap();
    let folder = Folder::open(dir.path()).unwrap();
    assert!(
        matches!(folder.file_identity("lock"), Err(FileError::Io(e)) if e.kind() == io::ErrorKind::NotFound),
        "nothing is created"
    );
    assert!(!dir.path().join("lock").exists());
    std::fs::write(dir.path().join("lock"), "").unwrap();
    let st = std::fs::metadata(dir.path().join("lock")).unwrap();
    assert_eq!(folder.file_identity("lock").unwrap(), (st.dev(), st.ino()));
    mkfifo(&dir.path().join("fifo"));
    assert!(matches!(
        folder.file_identity("fifo"),
        Err(FileError::NotRegular("a FIFO"))
    ));
    symlink(dir.path().join("lock"), dir.path().join("link")).unwrap();
    assert!(matches!(
        folder.file_identity("link"),
        Err(FileError::NotRegular("a symbolic link"))
    ));
}
