//! What runs a task again (docs/operating.md, "The morning after"): where a
//! run's task file is now, as the folders say, and so which command takes it
//! back — `requeue` from `failed/`, `rerun` from `done/`, with the word that
//! moves that very file — or that nothing need be done (it is still in the
//! inbox; a recurring task's next slot runs it). One answer for every
//! command that tells the operator where a run's task is and what to do
//! about it (`show`); each renders it in its own words.

use std::cell::OnceCell;
use std::path::PathBuf;

use super::requeue::{self, Filed, Source};
use harness_base::text::{shell_operand, shell_word};
use harness_config::Paths;
use harness_inbox as inbox;

/// Where a run's task file is, and what runs it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Again {
    /// Its file is in `failed/`: `agent-harness requeue WORD`.
    Requeue(Back),
    /// Its file is in `done/`: `agent-harness rerun WORD`.
    Rerun(Back),
    /// Its file (here) is still in the inbox: the next run takes it.
    Waiting(PathBuf),
    /// A recurring task whose file is here: its next slot runs it, and
    /// `agent-harness run-task --recurring NAME` runs it now.
    Recurring { name: String, file: PathBuf },
    /// Its file is in none of the task folders (pruned, moved by hand, or
    /// the task was run by `exec`): only its records keep its text.
    Gone,
}

/// A filed file, and what moves it back into the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Back {
    pub file: PathBuf,
    /// The word `requeue` or `rerun` takes to move this very file: the
    /// task's name when it is the newest file of that name there, else
    /// its run id. `None`: no word moves it (its name was shortened to
    /// fit); it is moved by hand.
    pub word: Option<String>,
    /// The run's other tasks filed there, which its run id moves too.
    pub with: Vec<String>,
}

/// Where task `task` of run `run_id` is now and what runs it again: the
/// run's own file in `failed/` or `done/` first, else wherever a file of
/// that name is now (the inbox before `failed/` and `done/`).
/// `recurring`: the run was a recurring task's. Only folder listings are
/// read.
pub fn again(paths: &Paths, task: &str, run_id: &str, recurring: bool) -> Again {
    Look::new(paths).again(task, run_id, recurring)
}

/// The task folders as one look sees them: `failed/` and `done/` each
/// listed at most once however many runs are asked about (a digest asks
/// of 50), the inbox's and the recurring folder's names looked up by name.
pub(crate) struct Look<'p> {
    paths: &'p Paths,
    failed: OnceCell<Vec<Filed>>,
    done: OnceCell<Vec<Filed>>,
}

impl<'p> Look<'p> {
    pub(crate) fn new(paths: &'p Paths) -> Look<'p> {
        Look {
            paths,
            failed: OnceCell::new(),
            done: OnceCell::new(),
        }
    }

    /// `source`'s files, listed on the first ask.
    fn filed(&self, source: Source) -> &[Filed] {
        let cell = match source {
            Source::Failed => &self.failed,
            Source::Done => &self.done,
        };
        cell.get_or_init(|| requeue::listed(self.paths, source))
    }

    /// [`again`], answered from this look.
    pub(crate) fn again(&self, task: &str, run_id: &str, recurring: bool) -> Again {
        let paths = self.paths;
        if inbox::check_task_name(task).is_err() {
            return Again::Gone;
        }
        for source in [Source::Failed, Source::Done] {
            if let Some(file) = inbox::filed_as(source.dir(paths), run_id, task) {
                return self.back(source, file);
            }
        }
        let file = |dir: &std::path::Path| dir.join(format!("{task}.md"));
        // A task file is a regular file under its own name (a link there
        // never runs).
        let at = |dir: &std::path::Path| {
            std::fs::symlink_metadata(file(dir)).is_ok_and(|m| m.file_type().is_file())
        };
        if recurring && at(&paths.recurring) {
            Again::Recurring {
                name: task.to_string(),
                file: file(&paths.recurring),
            }
        } else if at(&paths.inbox) {
            Again::Waiting(file(&paths.inbox))
        } else if let Some((source, newest)) = [Source::Failed, Source::Done]
            .into_iter()
            .find_map(|source| Some((source, self.newest_of(source, task)?)))
        {
            self.back(source, newest)
        } else {
            Again::Gone
        }
    }

    /// The filed file `file` of `source`'s folder, with the word that moves it.
    fn back(&self, source: Source, file: PathBuf) -> Again {
        let (word, with) = match requeue::word_among(self.filed(source), &file) {
            Some((word, with)) => (Some(word), with),
            None => (None, Vec::new()),
        };
        let back = Back { file, word, with };
        match source {
            Source::Failed => Again::Requeue(back),
            Source::Done => Again::Rerun(back),
        }
    }

    /// The newest file of task `task` filed in `source`'s folder.
    fn newest_of(&self, source: Source, task: &str) -> Option<PathBuf> {
        self.filed(source)
            .iter()
            .filter(|f| f.task == task)
            .max_by(|a, b| {
                harness_records::run_order(&a.run_id).cmp(&harness_records::run_order(&b.run_id))
            })
            .map(|f| f.path.clone())
    }
}

/// What runs a task again, said for the operator with `agent-harness` as
/// the program ([`Again::said`] names another).
impl std::fmt::Display for Again {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.said("agent-harness"))
    }
}

impl Again {
    /// What runs the task again, said for the operator: the exact command,
    /// run as `program` (`agent-harness --config /srv/agent/agent.toml`
    /// when the config is not the one every shell finds), or that none is
    /// needed.
    pub fn said(&self, program: &str) -> String {
        match self {
            Again::Requeue(back) => back_line(program, "requeue", "failed", back),
            Again::Rerun(back) => back_line(program, "rerun", "done", back),
            Again::Waiting(_) => "still in the inbox: the next run takes it".into(),
            Again::Recurring { name, .. } => format!(
                "a recurring task: its next slot runs it (now: {program} run-task --recurring {})",
                shell_operand(name)
            ),
            Again::Gone => "its file is in no task folder (pruned, moved by hand, or run by exec): submit its task.md from the records again".into(),
        }
    }
}

/// `PROGRAM COMMAND WORD` that moves `back`'s file into the inbox, and what
/// else it moves.
fn back_line(program: &str, command: &str, folder: &str, back: &Back) -> String {
    match &back.word {
        None => format!(
            "its file's name was shortened to fit, so {command} leaves it: move {} into the inbox by hand",
            shell_word(&back.file.display().to_string())
        ),
        Some(word) if back.with.is_empty() => {
            format!("{program} {command} {}", shell_operand(word))
        }
        Some(word) => format!(
            "{program} {command} {} (it moves the run's other {folder}/ task(s) too: {})",
            shell_operand(word),
            back.with.join(", ")
        ),
    }
}

/// What runs task TASK of run RUN_ID again, as `show` says it, for the
/// digest (printed or mailed), run as `program` ([`program`]).
pub fn again_in<'a>(
    paths: &'a Paths,
    program: &'a str,
) -> impl Fn(&str, &str, bool) -> String + 'a {
    // One look at the task folders for the whole digest: each folder is
    // listed once, not once a failure.
    let look = Look::new(paths);
    move |task, run_id, recurring| look.again(task, run_id, recurring).said(program)
}

/// The program as a command that runs again must name it: `agent-harness`
/// with the system's config, which every shell finds; else with
/// `--config` and the config's absolute path, so the line works from the
/// operator's shell in any folder.
pub fn program(cfg: &harness_config::Config) -> String {
    let path = std::path::absolute(&cfg.path).unwrap_or_else(|_| cfg.path.clone());
    if path == std::path::Path::new(harness_config::SYSTEM_CONFIG) {
        return "agent-harness".into();
    }
    format!(
        "agent-harness --config {}",
        harness_base::text::shell_word(&path.display().to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(root: &std::path::Path) -> Paths {
        let paths = Paths {
            inbox: root.join("inbox"),
            done: root.join("done"),
            failed: root.join("failed"),
            logs: root.join("logs"),
            recurring: root.join("recurring"),
        };
        for dir in [&paths.inbox, &paths.done, &paths.failed, &paths.recurring] {
            std::fs::create_dir_all(dir).unwrap();
        }
        paths
    }

    fn by_name(file: PathBuf, name: &str) -> Back {
        Back {
            file,
            word: Some(name.into()),
            with: Vec::new(),
        }
    }

    #[test]
    fn a_name_that_prints_escaped_is_named_by_its_run_id() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        let run = "20260409T061500Z";
        let name = "ls\u{2028}Subject: forged";
        std::fs::write(p.failed.join(format!("{run}-{name}.md")), "x").unwrap();
        let to_do = again(&p, name, run, false);
        assert_eq!(
            to_do,
            Again::Requeue(Back {
                file: p.failed.join(format!("{run}-{name}.md")),
                word: Some(run.into()),
                with: Vec::new(),
            })
        );
        assert_eq!(to_do.to_string(), format!("agent-harness requeue {run}"));
    }

    #[test]
    fn the_runs_own_file_says_which_command_takes_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        let run = "20260409T061500Z";
        std::fs::write(p.failed.join(format!("{run}-doomed.md")), "x").unwrap();
        std::fs::write(p.done.join(format!("{run}-fine.md")), "x").unwrap();
        std::fs::write(p.inbox.join("later.md"), "x").unwrap();
        std::fs::write(p.recurring.join("daily.md"), "x").unwrap();
        assert_eq!(
            again(&p, "doomed", run, false),
            Again::Requeue(by_name(p.failed.join(format!("{run}-doomed.md")), "doomed"))
        );
        assert_eq!(
            again(&p, "fine", run, false),
            Again::Rerun(by_name(p.done.join(format!("{run}-fine.md")), "fine"))
        );
        assert_eq!(
            again(&p, "later", run, false),
            Again::Waiting(p.inbox.join("later.md"))
        );
        assert_eq!(
            again(&p, "daily", run, true),
            Again::Recurring {
                name: "daily".into(),
                file: p.recurring.join("daily.md")
            }
        );
        assert_eq!(again(&p, "nowhere", run, false), Again::Gone);
        assert_eq!(again(&p, "../x", run, false), Again::Gone);
    }

    #[test]
    fn an_earlier_runs_task_is_found_where_its_name_is_now() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        // Interrupted at 06:15, then failed for good at 07:15.
        let failed = p.failed.join("20260409T071500Z-doomed.md");
        std::fs::write(&failed, "x").unwrap();
        assert_eq!(
            again(&p, "doomed", "20260409T061500Z", false),
            Again::Requeue(by_name(failed, "doomed"))
        );
        // Back in the inbox (submitted again): the next run takes it.
        std::fs::write(p.inbox.join("doomed.md"), "x").unwrap();
        assert_eq!(
            again(&p, "doomed", "20260409T061500Z", false),
            Again::Waiting(p.inbox.join("doomed.md"))
        );
    }

    /// `requeue NAME` moves the newest failed file of NAME: for an older
    /// run's, the word is its run id — which moves the run's other failed
    /// tasks too, and says so.
    #[test]
    fn an_older_runs_file_is_moved_by_its_run_id() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        let old = p.failed.join("20260408T061500Z-doomed.md");
        let new = p.failed.join("20260409T061500Z-doomed.md");
        for f in [&old, &new] {
            std::fs::write(f, "x").unwrap();
        }
        assert_eq!(
            again(&p, "doomed", "20260409T061500Z", false),
            Again::Requeue(by_name(new, "doomed"))
        );
        assert_eq!(
            again(&p, "doomed", "20260408T061500Z", false),
            Again::Requeue(Back {
                file: old.clone(),
                word: Some("20260408T061500Z".into()),
                with: Vec::new()
            })
        );
        std::fs::write(p.failed.join("20260408T061500Z-other.md"), "x").unwrap();
        assert_eq!(
            again(&p, "doomed", "20260408T061500Z", false),
            Again::Requeue(Back {
                file: old,
                word: Some("20260408T061500Z".into()),
                with: vec!["other".into()]
            })
        );
    }

    #[test]
    fn the_command_names_the_word_that_moves_this_runs_file() {
        let back = |word: Option<&str>, with: &[&str]| Back {
            file: "/t/failed/20260409T061500Z-my task.md".into(),
            word: word.map(String::from),
            with: with.iter().map(|w| w.to_string()).collect(),
        };
        assert_eq!(
            Again::Requeue(back(Some("my task"), &[])).to_string(),
            "agent-harness requeue 'my task'"
        );
        assert_eq!(
            Again::Rerun(back(Some("20260409T061500Z"), &["b", "c"])).to_string(),
            "agent-harness rerun 20260409T061500Z (it moves the run's other done/ task(s) too: b, c)"
        );
        assert_eq!(
            Again::Requeue(back(None, &[])).to_string(),
            "its file's name was shortened to fit, so requeue leaves it: move '/t/failed/20260409T061500Z-my task.md' into the inbox by hand"
        );
        // A name that reads as a flag is never printed as one: `requeue
        // --all-failed` would move every failed task.
        assert_eq!(
            Again::Requeue(back(Some("--all-failed"), &[])).to_string(),
            "agent-harness requeue -- --all-failed"
        );
        assert_eq!(
            Again::Recurring {
                name: "-x".into(),
                file: "/t/recurring/-x.md".into()
            }
            .to_string(),
            "a recurring task: its next slot runs it (now: agent-harness run-task --recurring -- -x)"
        );
    }
}
