//! Filing a finished task: its file moved out of the inbox under a name
//! that says which run it was (`<run_id>-<name>.md`, fitted to 255 bytes),
//! never over another, and that name read back.

use std::io;
use std::path::Path;

use anyhow::Context;

use super::*;

/// The longest file name most file systems take.
pub const MAX_FILE_NAME: usize = 255;

/// `prefix + name + suffix`, with `name` shortened when the whole would pass
/// 255 bytes: cut at a character boundary, then `~` and 8 hex digits of a
/// hash of the full name, so two long names stay apart (SPEC §12.5).
pub fn fit_file_name(prefix: &str, name: &str, suffix: &str) -> String {
    if prefix.len() + name.len() + suffix.len() <= MAX_FILE_NAME {
        return format!("{prefix}{name}{suffix}");
    }
    let tag = format!("~{:08x}", short_hash(name));
    let room = MAX_FILE_NAME.saturating_sub(prefix.len() + tag.len() + suffix.len());
    format!("{prefix}{}{tag}{suffix}", prefix_bytes(name, room))
}

/// Moves a finished task file to `dir/<run_id>-<name>.md` by atomic rename,
/// creating `dir` when missing. A clash never overwrites: `-2`, `-3`, … are
/// added. Callers hold the run lock, so nobody else writes to `dir`. A
/// symbolic link moves as the link; its target is never touched.
pub fn move_task(from: &Path, dir: &Path, run_id: &str, name: &str) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let prefix = format!("{run_id}-");
    let target = (1..10_000)
        .map(|n| {
            let suffix = if n == 1 {
                ".md".to_string()
            } else {
                format!("-{n}.md")
            };
            dir.join(fit_file_name(&prefix, name, &suffix))
        })
        .find(|p| std::fs::symlink_metadata(p).is_err())
        .context("no free file name")?;
    match std::fs::rename(from, &target) {
        Ok(()) => Ok(target),
        Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
            move_across_devices(from, &target, run_id)?;
            Ok(target)
        }
        Err(e) => {
            Err(e).with_context(|| format!("moving {} to {}", from.display(), target.display()))
        }
    }
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

/// A move between file systems: a copy under a temporary name, renamed into
/// place, then the original removed, so the target never appears half-written.
/// A link is made anew pointing where it pointed; a FIFO or device becomes an
/// empty file (its contents are never read).
fn move_across_devices(from: &Path, target: &Path, run_id: &str) -> anyhow::Result<()> {
    let dir = target.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".agent-harness-move-{run_id}.tmp"));
    let kind = std::fs::symlink_metadata(from)
        .with_context(|| format!("reading {}", from.display()))?
        .file_type();
    if kind.is_symlink() {
        let points_to = std::fs::read_link(from)?;
        std::os::unix::fs::symlink(&points_to, &tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
    } else if kind.is_file() {
        std::fs::copy(from, &tmp)
            .with_context(|| format!("copying {} to {}", from.display(), tmp.display()))?;
    } else {
        std::fs::write(&tmp, "").with_context(|| format!("creating {}", tmp.display()))?;
    }
    std::fs::rename(&tmp, target).with_context(|| format!("renaming into {}", target.display()))?;
    std::fs::remove_file(from).with_context(|| format!("removing {}", from.display()))
}
