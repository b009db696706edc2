//! Filing a finished task: its file moved out of the inbox under a name
//! that says which run it was (`<run_id>-<name>.md`, fitted to 255 bytes),
//! never over another, and that name read back.

use std::io;
use std::path::{Path, PathBuf};

use anyhow::Context;

use harness_base::text::{prefix_bytes, short_hash};
use harness_config::Paths;
use harness_state as state;

/// The longest file name most file systems take.
pub const MAX_FILE_NAME: usize = 255;

/// `prefix + name + suffix`, with `name` shortened when the whole would pass
/// 255 bytes: cut at a character boundary, then `~` and 8 hex digits of a
/// hash of the full name, so two long names stay apart
/// (docs/tasks.md, "Task files").
pub fn fit_file_name(prefix: &str, name: &str, suffix: &str) -> String {
    if prefix.len() + name.len() + suffix.len() <= MAX_FILE_NAME {
        return format!("{prefix}{name}{suffix}");
    }
    let tag = format!("~{:08x}", short_hash(name));
    let room = MAX_FILE_NAME.saturating_sub(prefix.len() + tag.len() + suffix.len());
    format!("{prefix}{}{tag}{suffix}", prefix_bytes(name, room))
}

/// Moves a finished task file out of the inbox to
/// `dir/<run_id>-<name>.md`, creating `dir` when missing. It never lands
/// over another file (a clash adds `-2`, `-3`, …) and nothing is followed
/// ([`harness_base::folder::Folder::move_to`]): a symbolic link moves as the
/// link, its target never touched, across file systems too.
pub fn move_task(
    paths: &Paths,
    from: &Path,
    dir: &Path,
    run_id: &str,
    name: &str,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (Some(inbox), Some(file)) = (from.parent(), from.file_name()) else {
        anyhow::bail!("{} is not a file in a folder", from.display());
    };
    let inbox =
        state::task_folder(paths, inbox).with_context(|| format!("opening {}", inbox.display()))?;
    let into =
        state::task_folder(paths, dir).with_context(|| format!("opening {}", dir.display()))?;
    let prefix = format!("{run_id}-");
    for n in 1..10_000 {
        let suffix = if n == 1 {
            ".md".to_string()
        } else {
            format!("-{n}.md")
        };
        let target = fit_file_name(&prefix, name, &suffix);
        match inbox.move_to(file, &into, target.as_ref()) {
            Ok(()) => return Ok(dir.join(target)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "moving {} to {}",
                        from.display(),
                        dir.join(&target).display()
                    )
                });
            }
        }
    }
    anyhow::bail!("no free file name in {}", dir.display())
}

/// Where [`move_task`] filed task `name` of run `run_id` in `dir`, when it
/// is still there (a clash suffix `-2`, `-3`, … included).
pub fn filed_as(dir: &Path, run_id: &str, name: &str) -> Option<PathBuf> {
    let prefix = format!("{run_id}-");
    (1..=20)
        .map(|n| match n {
            1 => ".md".to_string(),
            n => format!("-{n}.md"),
        })
        .map(|suffix| dir.join(fit_file_name(&prefix, name, &suffix)))
        .find(|p| std::fs::symlink_metadata(p).is_ok())
}

/// The readings of a filed task's file name, `<run_id>-<name>.md` as
/// [`move_task`] wrote it: the run id is `YYYYMMDDTHHMMSSZ`, perhaps with a
/// clash suffix `-N`, so `20260409T061500Z-2-x.md` is read both as run
/// `…Z-2` of `x` and as run `…Z` of `2-x` (the caller knows which run
/// folders exist). Not a filed name: no reading.
pub fn filed_readings(file_name: &str) -> Vec<(String, String)> {
    let Some(stem) = file_name.strip_suffix(".md") else {
        return Vec::new();
    };
    let is_stamp = |s: &str| {
        s.len() == 16
            && s.bytes().enumerate().all(|(i, b)| match i {
                8 => b == b'T',
                15 => b == b'Z',
                _ => b.is_ascii_digit(),
            })
    };
    let Some((stamp, rest)) = stem.split_at_checked(16).filter(|(s, _)| is_stamp(s)) else {
        return Vec::new();
    };
    let Some(rest) = rest.strip_prefix('-') else {
        return Vec::new();
    };
    let mut readings = Vec::new();
    if let Some((n, name)) = rest.split_once('-')
        && !n.is_empty()
        && n.len() <= 4
        && n.bytes().all(|b| b.is_ascii_digit())
        && !name.is_empty()
    {
        readings.push((format!("{stamp}-{n}"), name.to_string()));
    }
    if !rest.is_empty() {
        readings.push((stamp.to_string(), rest.to_string()));
    }
    readings
}
