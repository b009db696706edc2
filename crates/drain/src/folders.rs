//! The folders a run uses (docs/configuration.md, `[paths]`). The inbox must
//! exist: a missing one is a typo or an unfinished install, and treating it as
//! an empty inbox would let a timer do nothing forever with exit 0. The other
//! folders are created when missing. Every problem names its config key, so the
//! operator knows which line of the config to fix.

use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::Access;

use harness_config::Config;

/// `path` as the operator should read it: absolute.
fn shown(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `[paths] inbox` exists, is a folder and this user may list it; `Err`
/// says what to fix.
pub fn check_inbox(inbox: &Path) -> Result<(), String> {
    let inbox = &shown(inbox);
    match std::fs::metadata(inbox) {
        Ok(m) if m.is_dir() && may(inbox, Access::READ_OK | Access::EXEC_OK) => Ok(()),
        Ok(m) if m.is_dir() => Err(format!(
            "[paths] inbox: {} cannot be read by this user",
            inbox.display()
        )),
        Ok(_) => Err(format!(
            "[paths] inbox: {} is not a folder",
            inbox.display()
        )),
        Err(_) if std::fs::symlink_metadata(inbox).is_ok() => Err(format!(
            "[paths] inbox: {} is a symbolic link to a folder that does not exist",
            inbox.display()
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
            "[paths] inbox: the folder {} does not exist; fix the path, or create it (mkdir -p '{}')",
            inbox.display(),
            inbox.display()
        )),
        Err(e) => Err(format!(
            "[paths] inbox: cannot read {}: {e}",
            inbox.display()
        )),
    }
}

/// Before a run: the inbox exists, and `done/`, `failed/` and the logs
/// folder exist or are created, and this user may write every folder a run
/// writes. `Err` names the key of each that fails.
pub(crate) fn prepare(cfg: &Config) -> Result<(), String> {
    check_inbox(&cfg.paths.inbox)?;
    for (key, dir) in [
        ("[paths] done", &cfg.paths.done),
        ("[paths] failed", &cfg.paths.failed),
        ("[paths] logs", &cfg.paths.logs),
    ] {
        std::fs::create_dir_all(dir).map_err(|e| {
            format!(
                "{key}: cannot create the folder {}: {e}",
                shown(dir).display()
            )
        })?;
    }
    // The metrics folder is not among them: a run that cannot write its
    // figures still does its tasks (and warns); `check` names it.
    let mut problems = clashes(cfg);
    problems.extend(linked(cfg));
    problems.extend(unwritable(cfg, false));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The inbox, `done/` and `failed/` must be three folders: a task filed in
/// one that is another would run again, or be taken for what it is not
/// (and retention prunes `done/`, never `failed/`).
pub(crate) fn clashes(cfg: &Config) -> Vec<String> {
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let keys = [
        ("[paths] inbox", &cfg.paths.inbox),
        ("[paths] done", &cfg.paths.done),
        ("[paths] failed", &cfg.paths.failed),
    ];
    let mut problems = Vec::new();
    for (i, (a, pa)) in keys.iter().enumerate() {
        for (b, pb) in &keys[i + 1..] {
            if real(pa) == real(pb) {
                problems.push(format!(
                    "{a} and {b} are the same folder {}: each must be a folder of its own",
                    shown(pa).display()
                ));
            }
        }
    }
    problems
}

/// A task folder in the folder holding the inbox that is a symbolic link:
/// nothing is followed there (docs/operating.md, "The folder beside the
/// inbox"; another user who may write there could point it anywhere), so
/// each must be a real folder, or be named in the config where it really
/// is.
pub fn linked(cfg: &Config) -> Vec<String> {
    let state = cfg.paths.state_dir();
    [
        ("[paths] inbox", &cfg.paths.inbox),
        ("[paths] done", &cfg.paths.done),
        ("[paths] failed", &cfg.paths.failed),
        ("[paths] recurring", &cfg.paths.recurring),
    ]
    .into_iter()
    .filter(|(_, dir)| dir.parent() == Some(state.as_path()))
    .filter(|(_, dir)| std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()))
    .map(|(key, dir)| {
        let target = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        format!(
            "{key}: {} is a symbolic link inside the folder that holds the inbox, where no link is followed: set {key} to {} itself, or link the folder that holds the inbox instead",
            shown(dir).display(),
            target.display()
        )
    })
    .collect()
}

/// Every folder a run writes to that this user could not write (or, when
/// missing, could not create), each named by its key, the metrics folder
/// too when asked. Nothing is created or written: `check` runs it as the
/// service user.
pub(crate) fn unwritable(cfg: &Config, with_metrics: bool) -> Vec<String> {
    let state = cfg.paths.state_dir();
    let metrics = cfg
        .metrics_textfile
        .as_ref()
        .filter(|_| with_metrics)
        .and_then(|f| f.parent().map(Path::to_path_buf));
    let mut folders = vec![
        ("[paths] inbox", cfg.paths.inbox.clone(), ""),
        (
            "[paths] inbox",
            state,
            " (the inbox's parent folder holds the run lock and the attempt counts)",
        ),
        ("[paths] done", cfg.paths.done.clone(), ""),
        ("[paths] failed", cfg.paths.failed.clone(), ""),
        ("[paths] logs", cfg.paths.logs.clone(), ""),
    ];
    if let Some(dir) = metrics {
        folders.push(("[metrics] textfile", dir, ""));
    }
    folders
        .into_iter()
        .filter_map(|(key, dir, why)| {
            let dir = shown(&dir);
            problem(&dir).map(|p| format!("{key}: {p}{why}"))
        })
        .collect()
}

/// Why this user could not write into `dir`, or create it.
fn problem(dir: &Path) -> Option<String> {
    let Some(at) = dir.ancestors().find(|a| std::fs::metadata(a).is_ok()) else {
        return Some(format!(
            "{} cannot be created: no part of it exists",
            dir.display()
        ));
    };
    let shown = dir.display();
    match (
        at == dir,
        at.is_dir(),
        may(at, Access::WRITE_OK | Access::EXEC_OK),
    ) {
        (true, false, _) => Some(format!("{shown} is not a folder")),
        (true, true, false) => Some(format!("{shown} is not writable by this user")),
        (false, false, _) => Some(format!(
            "{shown} cannot be created: {} is not a folder",
            at.display()
        )),
        (false, true, false) => Some(format!(
            "{shown} does not exist and cannot be created by this user ({} is not writable)",
            at.display()
        )),
        (_, true, true) => None,
    }
}

/// Whether this process (its effective ids) may do `what` to `path`:
/// permission bits, ACLs and read-only mounts, as the kernel judges them.
fn may(path: &Path, what: Access) -> bool {
    rustix::fs::accessat(rustix::fs::CWD, path, what, rustix::fs::AtFlags::EACCESS).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_inbox_is_named_with_its_key_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("inbx");
        let e = check_inbox(&missing).unwrap_err();
        assert!(e.starts_with("[paths] inbox: the folder "), "{e}");
        assert!(e.contains(&missing.display().to_string()), "{e}");
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(check_inbox(&file).unwrap_err().ends_with("is not a folder"));
        assert!(check_inbox(dir.path()).is_ok());
    }

    #[test]
    fn a_missing_folder_is_judged_by_what_is_in_its_way() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(problem(&dir.path().join("a/b/c")), None, "creatable");
        assert_eq!(problem(dir.path()), None);
        let file = dir.path().join("blocker");
        std::fs::write(&file, "x").unwrap();
        let p = problem(&file.join("done")).unwrap();
        assert!(
            p.ends_with("cannot be created: ") || p.contains("blocker is not a folder"),
            "{p}"
        );
        assert!(problem(&file).unwrap().ends_with("is not a folder"));
    }
}
