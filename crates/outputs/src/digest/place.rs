//! Where each run of the digest's period goes (docs/operating.md, "Digest
//! and mail"): one task's runs, oldest first, each said as a change against
//! the run before it (a recurring task), then named — an answer, or a
//! failure with what to do about it — or folded into a count: ended as its
//! previous run did, or failed alike its task's newest failure, which is
//! named.

use harness_records::{ListedRun, Status, Summary};

use super::{
    Change, Changed, Digest, FailedRun, MAX_ERROR_CHARS, Making, Period, SucceededRun, first_line,
    in_period, names,
};

/// Where a run of the period goes in the digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A success with an answer unlike its previous run's.
    Answer,
    /// A failure named with what to do about it.
    Failure,
    /// It ended as its task's previous run did.
    Unchanged,
    /// A failure alike its task's newest failure, which is named.
    EarlierFailure,
}

impl Digest {
    /// One task's runs, oldest first: each run of the period is said as
    /// a change against the run before it (a recurring task), then placed
    /// ([`place`]) and listed or counted.
    /// A failure goes to `failed` with the run whose "run it again" is
    /// still to be asked (only for the failures that will be listed).
    pub(super) fn add_task<'r>(
        &mut self,
        runs: &[&'r ListedRun],
        making: &Making<'_>,
        failed: &mut Vec<(FailedRun, Option<&'r ListedRun>)>,
    ) {
        let newest_failure = newest_failure(runs, making.period);
        for (n, run) in runs.iter().enumerate() {
            let s = &run.summary;
            if !in_period(s, making.period) {
                continue;
            }
            let previous = n.checked_sub(1).map(|p| &runs[p].summary);
            if let Some(change) = change(run, previous, making) {
                self.changes.push(change);
            }
            let newest = newest_failure.map(|i| (&runs[i].summary, i == n));
            match place(s, previous, newest) {
                Place::Unchanged => self.unchanged += 1,
                Place::EarlierFailure => self.earlier_failures += 1,
                Place::Answer => self.answers.push(answer(run, making)),
                Place::Failure => failed.push(failure(run, &runs[n + 1..], making)),
            }
        }
    }
}

/// Where run `s` goes, against its task's `previous` run and its task's
/// newest failure in the period (`newest`: that summary, and whether it
/// is `s`). The newest failure is always named; an earlier one alike it
/// is folded into it, one that ended as its own previous run is counted
/// unchanged, any other named too.
fn place(s: &Summary, previous: Option<&Summary>, newest: Option<(&Summary, bool)>) -> Place {
    let as_before = previous.is_some_and(|p| same(p, s));
    if s.status == Status::Succeeded {
        return if as_before {
            Place::Unchanged
        } else {
            Place::Answer
        };
    }
    match newest {
        Some((newest, false)) if same(newest, s) => Place::EarlierFailure,
        Some((_, false)) if as_before => Place::Unchanged,
        _ => Place::Failure,
    }
}

/// The index of the newest run of `runs` (oldest first) in the period
/// that did not succeed.
fn newest_failure(runs: &[&ListedRun], period: &Period) -> Option<usize> {
    runs.iter()
        .rposition(|r| in_period(&r.summary, period) && r.summary.status != Status::Succeeded)
}

/// A recurring task's run whose outcome changed against `previous`.
fn change(run: &ListedRun, previous: Option<&Summary>, making: &Making<'_>) -> Option<Change> {
    let s = &run.summary;
    if !s.recurring {
        return None;
    }
    let change = changed(previous?, s)?;
    let (task, run_id) = names(run, making);
    Some(Change {
        task,
        run_id,
        finished_at: s.finished_at,
        change,
    })
}

/// A run that succeeded, said by its answer's first line.
fn answer(run: &ListedRun, making: &Making<'_>) -> SucceededRun {
    let s = &run.summary;
    let (task, run_id) = names(run, making);
    SucceededRun {
        task,
        run_id,
        finished_at: s.finished_at,
        first_line: first_line(s.final_answer.as_deref(), making),
    }
}

/// A run that did not succeed, with what to do about it (`later`: the
/// runs of its task after it) — or, when that is to run it again, the run
/// to ask [`run_again`] of once it is known to be listed.
fn failure<'r>(
    run: &'r ListedRun,
    later: &[&ListedRun],
    making: &Making<'_>,
) -> (FailedRun, Option<&'r ListedRun>) {
    let s = &run.summary;
    let (task, run_id) = names(run, making);
    // Nothing to do when a later run of its task succeeded.
    let since = later
        .iter()
        .find(|r| r.summary.status == Status::Succeeded)
        .map(|later| {
            format!(
                "nothing to do: it succeeded since, in run {}",
                making.line(&later.summary.run_id, 64)
            )
        });
    let ask = since.is_none().then_some(run);
    let failure = FailedRun {
        task,
        run_id,
        finished_at: s.finished_at,
        status: s.status,
        stop_reason: s.stop_reason.as_str().to_string(),
        error: s
            .error_in_own_words()
            .map(|e| making.line(&e, MAX_ERROR_CHARS)),
        run_again: since.unwrap_or_default(),
    };
    (failure, ask)
}

/// How a recurring task's outcome changed from `previous` to `now`.
fn changed(previous: &Summary, now: &Summary) -> Option<Changed> {
    match (previous.status, now.status) {
        (Status::Failed, Status::Succeeded) => Some(Changed::Fixed),
        (Status::Succeeded, Status::Failed) => Some(Changed::Broken),
        _ => None,
    }
}

/// Two runs ended alike: the same outcome and the same answer.
fn same(a: &Summary, b: &Summary) -> bool {
    a.status == b.status && a.stop_reason == b.stop_reason && a.final_answer == b.final_answer
}
