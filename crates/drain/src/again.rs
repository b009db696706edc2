//! What runs a task again (docs/operating.md, "The morning after"): where a
//! run's task file is now, as the folders say, and so which command takes it
//! back — `requeue` from `failed/`, `rerun` from `done/` — or that nothing
//! need be done (it is still in the inbox; a recurring task's next slot runs
//! it). One answer for every command that tells the operator what to do about
//! a run (`show`, a digest); each renders it in its own words.

use harness_config::Paths;
use harness_inbox::{self as inbox, Place};

/// What runs a run's task again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Again {
    /// Its file is in `failed/`: `agent-harness requeue NAME`.
    Requeue(String),
    /// Its file is in `done/`: `agent-harness rerun NAME`.
    Rerun(String),
    /// Its file is still in the inbox: the next run takes it.
    Waiting(String),
    /// A recurring task whose file is there: its next slot runs it, and
    /// `agent-harness run-task --recurring NAME` runs it now.
    Recurring(String),
    /// Its file is in none of the task folders (pruned, moved by hand, or
    /// the task was run by `exec`): only its records keep its text.
    Gone(String),
}

/// What runs task `task` of run `run_id` again: the run's own file in
/// `failed/` or `done/` first, else wherever a file of that name is now
/// (the inbox before `failed/` and `done/`). `recurring`: the run was a
/// recurring task's. Only folder listings are read.
pub fn again(paths: &Paths, task: &str, run_id: &str, recurring: bool) -> Again {
    let name = task.to_string();
    if inbox::check_task_name(task).is_err() {
        return Again::Gone(name);
    }
    if inbox::filed_as(&paths.failed, run_id, task).is_some() {
        return Again::Requeue(name);
    }
    if inbox::filed_as(&paths.done, run_id, task).is_some() {
        return Again::Rerun(name);
    }
    let places = inbox::whereabouts(paths, task).places;
    let at = |place| places.contains(&place);
    if recurring && at(Place::Recurring) {
        Again::Recurring(name)
    } else if at(Place::Inbox) {
        Again::Waiting(name)
    } else if at(Place::Failed) {
        Again::Requeue(name)
    } else if at(Place::Done) {
        Again::Rerun(name)
    } else {
        Again::Gone(name)
    }
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
            Again::Requeue("doomed".into())
        );
        assert_eq!(again(&p, "fine", run, false), Again::Rerun("fine".into()));
        assert_eq!(
            again(&p, "later", run, false),
            Again::Waiting("later".into())
        );
        assert_eq!(
            again(&p, "daily", run, true),
            Again::Recurring("daily".into())
        );
        assert_eq!(
            again(&p, "nowhere", run, false),
            Again::Gone("nowhere".into())
        );
        assert_eq!(again(&p, "../x", run, false), Again::Gone("../x".into()));
    }

    #[test]
    fn an_earlier_runs_task_is_found_where_its_name_is_now() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        // Interrupted at 06:15, then failed for good at 07:15.
        std::fs::write(p.failed.join("20260409T071500Z-doomed.md"), "x").unwrap();
        assert_eq!(
            again(&p, "doomed", "20260409T061500Z", false),
            Again::Requeue("doomed".into())
        );
        // Back in the inbox (submitted again): the next run takes it.
        std::fs::write(p.inbox.join("doomed.md"), "x").unwrap();
        assert_eq!(
            again(&p, "doomed", "20260409T061500Z", false),
            Again::Waiting("doomed".into())
        );
    }
}
