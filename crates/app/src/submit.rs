//! `submit FILE…` (docs/tasks.md, "Submitting a task"): each task file checked
//! as `check` would — any problem, and nothing is placed — then placed in the
//! inbox under its own name, whole: written under an exclusive temporary name
//! in the inbox folder, flushed, and renamed into place, never over a task
//! already there. The `.path` unit never sees half a file. A source is read
//! only when it is a regular file, never through a link, and the placed file is
//! mode 0640 (group-readable, for the unit's group). `--name NAME` places
//! the one file given as `NAME.md`, and with `-` the task is read from
//! stdin (which has no name of its own, so `--name` is required).

use std::io::Write;
use std::path::Path;

use super::exit;
use harness_agent::deps::system_clock;
use harness_base::file::{FileError, Links, read_regular};
use harness_base::text::printable;
use harness_config::Config;
use harness_display::Progress;
use harness_tools::Toolbox;

/// A placed task's mode, whatever the source's or the umask: the owner
/// (the service user) reads and writes it, the unit's group reads it,
/// nobody else.
const PLACED_MODE: u32 = 0o640;

pub(super) fn submit_command(
    cfg: &Config,
    files: &[std::path::PathBuf],
    name: Option<&str>,
    progress: &Progress,
) -> u8 {
    if let Some(problem) = usage_problem(files, name) {
        progress.eprintln(&format!("agent-harness: {problem}"));
        return exit::USAGE;
    }
    let offered = Toolbox::offered_by(cfg);
    let today = (system_clock())().date_naive();
    let mut checked = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        match checked_file(cfg, &offered, file, name, today) {
            Ok((name, bytes, warnings)) => {
                for w in warnings {
                    progress.eprintln(&format!("agent-harness: {}", printable(&w)));
                }
                checked.push((file, name, bytes));
            }
            Err(problem) => problems.push(problem),
        }
    }
    if !problems.is_empty() {
        for p in &problems {
            progress.eprintln(&format!("agent-harness: {}", printable(p)));
        }
        progress.eprintln("agent-harness: nothing was placed in the inbox");
        return exit::FAILED;
    }
    if let Err(e) = harness_drain::folders::check_inbox(&cfg.paths.inbox) {
        progress.eprintln(&format!("agent-harness: {e}"));
        return exit::USAGE;
    }
    let inbox = match harness_state::task_folder(&cfg.paths, &cfg.paths.inbox) {
        Ok(folder) => folder,
        Err(e) => {
            progress.eprintln(&format!(
                "agent-harness: [paths] inbox: {}: {e}",
                cfg.paths.inbox.display()
            ));
            return exit::USAGE;
        }
    };
    let mut code = exit::OK;
    let mut out = progress.stdout();
    for (file, name, bytes) in checked {
        let target = format!("{name}.md");
        let to = cfg.paths.inbox.join(&target);
        match inbox.place(target.as_ref(), &bytes, PLACED_MODE) {
            Ok(()) => {
                // A reader that went away does not undo a placing.
                let _ = writeln!(
                    out,
                    "{} → {}",
                    printable(&file.display().to_string()),
                    printable(&to.display().to_string())
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                progress.eprintln(&format!(
                    "agent-harness: {}: a task of that name is already in the inbox ({}); it was not placed",
                    printable(&file.display().to_string()),
                    to.display()
                ));
                code = exit::FAILED;
            }
            Err(e) => {
                progress.eprintln(&format!("agent-harness: placing {}: {e}", to.display()));
                code = exit::FAILED;
            }
        }
    }
    code
}

/// What makes `submit`'s arguments no request: `-` without `--name`, or
/// `--name` with more than one FILE.
fn usage_problem(files: &[std::path::PathBuf], name: Option<&str>) -> Option<&'static str> {
    if name.is_none() && files.iter().any(|f| f.as_os_str() == "-") {
        return Some(
            "submit -: a task read from stdin has no file name: give it one with --name NAME",
        );
    }
    if name.is_some() && files.len() != 1 {
        return Some("submit --name NAME places one task: give one FILE (or - for stdin)");
    }
    None
}

/// A task file's name (its file name without `.md`), its bytes, and its
/// warnings — or its problem, naming the file.
fn checked_file(
    cfg: &Config,
    offered: &[harness_tools::Tool],
    file: &Path,
    named: Option<&str>,
    today: chrono::NaiveDate,
) -> Result<(String, Vec<u8>, Vec<String>), String> {
    let shown = file.display();
    let name = match named {
        Some(n) => n,
        None => file
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".md"))
            .ok_or_else(|| format!("{shown}: only NAME.md files run (lower-case .md)"))?,
    };
    harness_inbox::check_task_name(name).map_err(|e| format!("{shown}: {e}"))?;
    if file.as_os_str() == "-" {
        let bytes = stdin_bytes()?;
        let read = harness_inbox::task_from_bytes(bytes.clone());
        let warnings = harness_drain::check_task(cfg, offered, name, file, read, today)?;
        return Ok((name.to_string(), bytes, warnings));
    }
    // Never through a link: a link planted where the operator runs
    // `submit` would turn whatever it points at (another run's records, a
    // key) into a task the model reads.
    let bytes =
        read_regular(file, harness_inbox::MAX_TASK_BYTES, Links::Refuse).map_err(|e| match e {
            FileError::TooLarge { len, cap } => {
                format!("{shown}: the task file is {len} bytes; the limit is {cap} (1 MiB)")
            }
            FileError::NotRegular("a symbolic link") => format!(
                "{shown}: a symbolic link; submit never reads through a link: name the file itself"
            ),
            e => format!("{shown}: {e}"),
        })?;
    let read = harness_inbox::task_from_bytes(bytes.clone());
    let warnings = harness_drain::check_task(cfg, offered, name, file, read, today)?;
    Ok((name.to_string(), bytes, warnings))
}

/// `submit --name NAME -`: the task on stdin, at most a task file's size.
fn stdin_bytes() -> Result<Vec<u8>, String> {
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return Err(
            "-: stdin is a terminal: pipe the task in (submit --name NAME - < file)".into(),
        );
    }
    let cap = harness_inbox::MAX_TASK_BYTES;
    super::run::stdin_task()
        .map_err(|e| format!("-: reading the task from stdin: {e}"))?
        .ok_or_else(|| {
            format!("-: the task on stdin is over {cap} bytes; the limit is {cap} (1 MiB)")
        })
}
