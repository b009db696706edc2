//! The digest (docs/operating.md, "Digest and mail"): what happened since
//! the last one, made of the records for a person reading it the morning
//! after — failures first, each with the command that runs it again, then
//! the answers, then each recurring task whose outcome changed against its
//! previous run; runs that ended as their task's previous run did are
//! folded into one count, and a task's earlier failures alike its newest
//! into another (`place`); the folders of the logs that could not be read; the
//! period's spend (`spend`). A mailed digest also says how the run that
//! sends it ended ([`Digest::sent_by`]). Dry runs and replays changed
//! nothing, and are left out. [`due`] says when the day's digest goes out;
//! `text` writes it for a person.
//!
//! The records are hostile input (docs/untrusted-input.md): they come from
//! `records`' listing, which reads each summary capped and never follows a
//! link; every field taken from one is redacted, then clipped, then
//! escaped ([`Making::line`]), an error is said in the harness's own words
//! (`Summary::error_in_own_words`), no path is built from a summary's
//! fields, and each list is capped, the rest counted. The mark of the last
//! digest is `state`'s ([`harness_state::LastDigest`]).

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveTime, TimeZone, Utc};
use serde::Serialize;

use harness_base::text::{MAX_ERROR_CHARS, clip, printable};
use harness_base::zone::Zone;
use harness_config::{Redactor, TimeOfDay};
use harness_records::{ListedRun, Listing, Status, Summary};
use harness_state::{SpendToday, day_of};

mod place;
mod spend;
mod text;

pub use spend::Spend;
use spend::spend;

/// Runs a section names; the rest are counted.
const MAX_LISTED: usize = 50;
/// Characters of an answer's first line.
const MAX_ANSWER_CHARS: usize = 200;
/// Lines of what the sending run said that the digest keeps.
const MAX_SAID_LINES: usize = 10;
/// Characters of a line naming a folder that was not read.
const MAX_PATH_CHARS: usize = 500;

/// What the digest covers: the runs that finished after `since`, up to
/// `until`, their times said in `zone`.
#[derive(Debug, Clone)]
pub struct Period {
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub zone: Zone,
}

impl Period {
    /// Where a digest starts when none went out yet: the day before `until`.
    pub fn day_before(until: DateTime<Utc>) -> DateTime<Utc> {
        until - chrono::TimeDelta::days(1)
    }
}

/// The digest, as `digest --json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Digest {
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub timezone: String,
    /// The zone times are said in.
    #[serde(skip)]
    zone: Zone,
    /// The run that mails it: how it ended (a printed digest has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent_by: Option<SentBy>,
    /// Runs that did not succeed, oldest first.
    pub failures: Vec<FailedRun>,
    pub more_failures: usize,
    /// Runs that succeeded with an answer unlike their task's previous one.
    pub answers: Vec<SucceededRun>,
    pub more_answers: usize,
    /// Recurring tasks whose outcome changed against their previous run.
    pub changes: Vec<Change>,
    pub more_changes: usize,
    /// Runs that ended as their task's previous run did (outcome and
    /// answer), folded into this count.
    pub unchanged: usize,
    /// Failures before their task's newest failure in the period that
    /// ended alike it (stop reason and answer): folded into it, counted.
    pub earlier_failures: usize,
    /// Folders of the logs that were not read (this user may not, a link,
    /// dated ahead of the clock, the logs folder itself broken), one line
    /// each: their runs are missing from the digest.
    pub unread: Vec<String>,
    pub more_unread: usize,
    pub spend: Spend,
}

/// How the run that mails the digest ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SentBy {
    pub exit_code: u8,
    /// What it said of itself (its last status lines).
    pub said: Vec<String>,
}

/// A run that did not succeed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailedRun {
    pub task: String,
    pub run_id: String,
    pub finished_at: DateTime<Utc>,
    pub status: Status,
    pub stop_reason: String,
    /// Its error in the harness's own words, on one line.
    pub error: Option<String>,
    /// The command that runs it again, or where its file is.
    pub run_again: String,
}

/// A run that succeeded, and its answer's first line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SucceededRun {
    pub task: String,
    pub run_id: String,
    pub finished_at: DateTime<Utc>,
    pub first_line: String,
}

/// A recurring task whose outcome changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    pub task: String,
    pub run_id: String,
    pub finished_at: DateTime<Utc>,
    pub change: Changed,
}

/// Which way a recurring task's outcome changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Changed {
    /// It failed last time and succeeded now.
    Fixed,
    /// It succeeded last time and failed now.
    Broken,
}

/// What the digest is made with: the period, the redactor every field
/// passes first, and what runs a failed task again.
struct Making<'a> {
    period: &'a Period,
    redactor: &'a Redactor,
    again: RunAgainFn<'a>,
}

/// The command that runs task TASK of run RUN_ID again (recurring or
/// not), said from where its file is now (the engine knows:
/// `drain::again`, a layer above).
pub type RunAgainFn<'a> = &'a dyn Fn(&str, &str, bool) -> String;

impl Making<'_> {
    /// `text` on one line for a person: redacted, then at most `max`
    /// characters (a secret is never cut before the redactor saw it
    /// whole), then control characters escaped (an escape is never cut
    /// in two).
    fn line(&self, text: &str, max: usize) -> String {
        self.redactor.line(text, max)
    }
}

impl Digest {
    /// The digest of the runs of `listing` (any order) over `period`, and
    /// the folders it could not read; `ledger` is the day's standing when
    /// a daily limit is set. Every field passes `redactor` first; `again`
    /// says what runs each failure again.
    pub fn of(
        listing: &Listing,
        period: &Period,
        ledger: Option<SpendToday>,
        redactor: &Redactor,
        again: RunAgainFn<'_>,
    ) -> Digest {
        let making = Making {
            period,
            redactor,
            again,
        };
        // A replay spends nothing of its own; a dry run spends, but moves nothing.
        let spent: Vec<&ListedRun> = listing
            .runs
            .iter()
            .filter(|r| r.summary.replay_of.is_none())
            .collect();
        let counted: Vec<&ListedRun> = spent
            .iter()
            .copied()
            .filter(|r| !r.summary.dry_run)
            .collect();
        let mut digest = Digest {
            since: period.since,
            until: period.until,
            timezone: period.zone.to_string(),
            zone: period.zone.clone(),
            sent_by: None,
            failures: Vec::new(),
            more_failures: 0,
            answers: Vec::new(),
            more_answers: 0,
            changes: Vec::new(),
            more_changes: 0,
            unchanged: 0,
            earlier_failures: 0,
            unread: unread(listing, &making),
            more_unread: 0,
            spend: spend(&spent, period, ledger),
        };
        let mut failed = Vec::new();
        for task_runs in by_task(&counted).values() {
            digest.add_task(task_runs, &making, &mut failed);
        }
        // Where a file is now is asked only of the failures listed: each
        // ask lists task folders, and a period may hold thousands.
        failed.sort_by(|(a, _), (b, _)| (a.finished_at, &a.task).cmp(&(b.finished_at, &b.task)));
        digest.more_failures = cap(&mut failed);
        digest.failures = failed
            .into_iter()
            .map(|(mut failure, ask)| {
                if let Some(run) = ask {
                    failure.run_again = run_again(&making, run);
                }
                failure
            })
            .collect();
        digest
            .answers
            .sort_by(|a, b| (a.finished_at, &a.task).cmp(&(b.finished_at, &b.task)));
        digest
            .changes
            .sort_by(|a, b| (a.finished_at, &a.task).cmp(&(b.finished_at, &b.task)));
        digest.more_answers = cap(&mut digest.answers);
        digest.more_changes = cap(&mut digest.changes);
        digest.more_unread = cap(&mut digest.unread);
        digest
    }

    /// The digest as the run that mails it sends it: its exit code and
    /// what it said of itself (`said`, its last status lines), redacted,
    /// then clipped.
    pub fn sent_by(mut self, exit_code: u8, said: &str, redactor: &Redactor) -> Digest {
        let said = redactor.redact_str(said);
        self.sent_by = Some(SentBy {
            exit_code,
            said: said
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(MAX_SAID_LINES)
                .map(|l| clipped_line(l, MAX_ERROR_CHARS))
                .collect(),
        });
        self
    }

    /// Nothing to report: nothing finished in the period, every folder was
    /// read, and the run that mails it (if any) exited 0.
    pub fn is_empty(&self) -> bool {
        self.failures.is_empty()
            && self.answers.is_empty()
            && self.changes.is_empty()
            && self.unchanged == 0
            && self.earlier_failures == 0
            && self.unread.is_empty()
            && self.sent_by.as_ref().is_none_or(|s| s.exit_code == 0)
    }
}

/// The folders of `listing` that were not read, one line each.
fn unread(listing: &Listing, making: &Making<'_>) -> Vec<String> {
    let now = making.period.until;
    let line = |text: &str| making.line(text, MAX_PATH_CHARS);
    listing
        .broken
        .iter()
        .map(|why| line(&format!("the logs folder: {why}")))
        .chain(listing.unreadable.iter().map(|dir| {
            line(&format!(
                "{}: this user may not read it (permission denied)",
                dir.display()
            ))
        }))
        .chain(listing.skipped.iter().map(|why| line(why)))
        .chain(
            listing
                .ahead
                .iter()
                .map(|dir| line(&Listing::ahead_line(dir, now))),
        )
        .collect()
}

/// Whether the day's digest is due at `now`: it is `at` or later that
/// day in `zone` (a time a clock change skips is the first minute after
/// it), and no digest went out since then.
pub fn due(now: DateTime<Utc>, at: TimeOfDay, zone: &Zone, last: Option<DateTime<Utc>>) -> bool {
    let Some(at) = NaiveTime::from_hms_opt(at.hour(), at.minute(), 0) else {
        return false;
    };
    let today = day_of(now, zone).and_time(at);
    let Some(due_at) = (0..=180)
        .filter_map(|m| today.checked_add_signed(chrono::TimeDelta::minutes(m)))
        .find_map(|local| zone.from_local_datetime(&local).earliest())
    else {
        return false;
    };
    let due_at = due_at.to_utc();
    now >= due_at && last.is_none_or(|last| last < due_at)
}

/// The command that runs a failed run's task again, as `making.again`
/// says from where its file is now, on one line as every field is. Asked
/// with the run folder's id; a summary naming another task than its
/// folder's is not asked about.
fn run_again(making: &Making<'_>, run: &ListedRun) -> String {
    if !own_task(run) {
        return "unknown: the summary's task is not the task of the folder it is in".into();
    }
    let s = &run.summary;
    making.line(
        &(making.again)(&s.task, &run.run_dir, s.recurring),
        MAX_ERROR_CHARS,
    )
}

/// Whether the summary names the task of the folder the listing found it in.
fn own_task(run: &ListedRun) -> bool {
    let task = &run.summary.task;
    harness_inbox::check_task_name(task).is_ok()
        && harness_inbox::fit_file_name("", task, "") == run.task_dir
}

/// The task and run id a run is said by: the run folder's id, and the
/// summary's task name only when it is its folder's — a summary cannot
/// pass itself off as another task's run.
fn names(run: &ListedRun, making: &Making<'_>) -> (String, String) {
    let task = if own_task(run) {
        making.line(&run.summary.task, 255)
    } else {
        format!(
            "{} (its summary names another task)",
            making.line(&run.task_dir, 255)
        )
    };
    (task, making.line(&run.run_dir, 64))
}

/// The runs grouped by the task folder they were found in, each oldest first.
fn by_task<'a>(runs: &[&'a ListedRun]) -> BTreeMap<&'a str, Vec<&'a ListedRun>> {
    let mut tasks: BTreeMap<&str, Vec<&ListedRun>> = BTreeMap::new();
    for run in runs {
        tasks.entry(run.task_dir.as_str()).or_default().push(run);
    }
    for runs in tasks.values_mut() {
        runs.sort_by(|a, b| {
            a.summary
                .started_at
                .cmp(&b.summary.started_at)
                .then_with(|| a.run_dir.cmp(&b.run_dir))
        });
    }
    tasks
}

/// A run finished in the period.
fn in_period(s: &Summary, period: &Period) -> bool {
    s.finished_at > period.since && s.finished_at <= period.until
}

/// Keeps the first [`MAX_LISTED`] of `items`; how many more there were.
fn cap<T>(items: &mut Vec<T>) -> usize {
    let more = items.len().saturating_sub(MAX_LISTED);
    items.truncate(MAX_LISTED);
    more
}

/// `text`, redacted already, at most `max` characters, then control
/// characters escaped (an escape is never cut in two).
fn clipped_line(text: &str, max: usize) -> String {
    printable(&clip(text, max)).into_owned()
}

/// An answer's first line that is not blank (the answer redacted whole
/// first: a secret may span lines).
fn first_line(answer: Option<&str>, making: &Making<'_>) -> String {
    let Some(answer) = answer else {
        return "(no answer)".into();
    };
    let answer = making.redactor.redact_str(answer);
    answer
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map_or_else(
            || "(no answer)".into(),
            |l| clipped_line(l, MAX_ANSWER_CHARS),
        )
}

#[cfg(test)]
mod tests;
