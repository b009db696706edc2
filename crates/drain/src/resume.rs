//! Resume, don't restart (docs/resume-replay-eval.md, "Resume"): a task that
//! did not finish goes on from the records of its newest run folder that holds
//! a whole turn. Here: which run that is (only one the state beside the inbox
//! names as the task's own), what of it is gone on from (the calls up to the
//! last whole one, the results of their turns but those the service refused for
//! the setup, the writes recorded as intents with no result), the wall time the
//! task already spent, and the earlier runs' share of its counts.
//!
//! The point is found once the task is prepared, and its spec resolved
//! with the date of the run it goes on from. The records answer through
//! `records::answering`: the model calls recorded there in order, the tool
//! results likewise; a call of the last recorded turn with no recorded
//! result runs (a write sent but not recorded is sent again, and the
//! attachment rule keeps it single); then the loop goes on live. Before
//! anything goes live, the recorded part is run once in memory with that
//! spec and nothing live behind it ([`ResumePoint::check`]): when a request
//! it builds differs from the recorded one (a changed prompt, tools, model
//! or limit), the task starts fresh and says why ([`Start`]).

use std::time::{Duration, SystemTime};

use chrono::{DateTime, NaiveDate, Utc};

use super::Mode;
use harness_agent::deps::TaskDeps;
use harness_agent::{TaskSpec, run_task};
use harness_base::folder::Folder;
use harness_records::{
    Answered, Answers, GoLive, PartialRun, RunRecord, Status, read_partial, read_partial_lines,
};
use harness_state::{AttemptCount, RunRef};

/// The records a task can go on from: its resume point.
#[derive(Debug)]
pub(super) struct ResumePoint {
    pub(super) run_id: String,
    /// The recorded model calls to answer, up to the last that got a reply,
    /// and the tool results of their turns.
    answers: Answers,
    /// Wall time the task used in the runs before.
    pub(super) wall_before: Duration,
    /// The date its prompts were built with.
    pub(super) today: NaiveDate,
    /// Write calls recorded as intents with no recorded result.
    pub(super) resent: Vec<String>,
    /// The run those records went on from, when they did.
    resumed_from: Option<String>,
}

/// How a task ran with respect to earlier records, for its summary: what
/// it went on from and the turns answered from there, or why it could not.
#[derive(Debug, Default, Clone)]
pub(super) struct Resumption {
    pub(super) from: Option<String>,
    pub(super) turns: u32,
    pub(super) refused: Option<String>,
    pub(super) wall_before: Duration,
    /// The tokens and time of the runs before, for the metrics.
    pub(super) earlier: harness_records::Earlier,
}

/// The records task `name` goes on from, if any: of the runs the state
/// beside the inbox names as its attempts since it last settled (`count`'s
/// runs, oldest first; never `own`), the newest that holds a whole turn,
/// when the runs since the task last ended say it did not finish. A run
/// folder no state names — planted in `logs/`, or left by an earlier task
/// of the same name — is never gone on from, nor one put in the place of a
/// named one (another folder on disk).
pub(super) fn find(
    mode: &Mode,
    name: &str,
    count: &AttemptCount,
    own: &str,
    now: DateTime<Utc>,
) -> Option<ResumePoint> {
    let runs = count.runs.as_slice();
    // An attempt of this task was counted and never settled: the process
    // died after a summary was written, before the file moved.
    let unsettled = count.previous > 0;
    let task_dir = harness_inbox::fit_file_name("", name, "");
    let folder = Folder::open_root(&mode.logs).ok()?.sub(&task_dir).ok()?;
    let slot = mode.slot.as_ref().map(|s| s.at.to_rfc3339());
    let named = runs
        .iter()
        .rev()
        .filter(|r| r.id != own && harness_records::run_time(&r.id).is_some());
    for (i, named) in named.enumerate() {
        let run_id = &named.id;
        // A named folder gone or put in its place: its records are not the
        // task's, and an older run is no truer — the task starts fresh.
        let run_folder = own_folder(&folder, named)?;
        let run = match read_partial(&run_folder, run_id) {
            Ok(run) => run,
            Err(why) => {
                tracing::warn!(run = %run_id, error = %why, "a run folder of this task cannot be read: the task starts fresh");
                return None;
            }
        };
        let Some(start) = &run.start else {
            if run.summary.is_some() {
                return None; // a finished run recorded before resume existed
            }
            continue; // killed before its first request
        };
        if start.dry_run || start.replay_of.is_some() {
            continue;
        }
        if !start.resumable || start.slot != slot {
            return None; // `exec`'s, or another slot of a recurring task
        }
        // A summary that says the task ended stops the search — but for the
        // newest run when its attempt never settled: the process died after
        // writing it, before the file moved.
        let unfinished = match &run.summary {
            None => true,
            Some(s) => {
                s.status == Status::Interrupted
                    || (s.status == Status::Failed && s.retryable)
                    || (unsettled && i == 0)
            }
        };
        if !unfinished {
            return None;
        }
        let mut run = run;
        if let Err(why) = read_partial_lines(&run_folder, &mut run) {
            tracing::warn!(run = %run_id, error = %why, "a run folder of this task cannot be read: the task starts fresh");
            return None;
        }
        if let Some(found) = found_in(run, now) {
            return Some(fuller_source(&folder, runs, found, now));
        }
    }
    None
}

/// The run folder `named`, opened, when it is the one the attempt wrote
/// (the same device and inode); one put in its place is not gone on from.
fn own_folder(task: &Folder, named: &RunRef) -> Option<Folder> {
    let folder = task.sub(&named.id).ok()?;
    if folder.identity().ok()? != (named.dev, named.ino) {
        tracing::warn!(run = %named.id, "the run folder under this name is not the one the task's attempt wrote (it was replaced): it is not gone on from");
        return None;
    }
    Some(folder)
}

/// A resumed run killed while it wrote the turns it answered from its
/// source can hold fewer of them than that source: the fuller records are
/// gone on from (following `resumed_from`, a few steps at most, and only
/// to runs the state names), with the time of the newer run.
fn fuller_source(
    folder: &Folder,
    runs: &[RunRef],
    mut found: ResumePoint,
    now: DateTime<Utc>,
) -> ResumePoint {
    for _ in 0..8 {
        let Some(source) = (found.resumed_from.as_ref())
            .and_then(|r| runs.iter().find(|n| &n.id == r))
            .and_then(|n| own_folder(folder, n).map(|f| (n.id.clone(), f)))
        else {
            break;
        };
        let (source, run_folder) = source;
        let older = read_partial(&run_folder, &source)
            .and_then(|mut run| read_partial_lines(&run_folder, &mut run).map(|()| run))
            .ok()
            .and_then(|run| found_in(run, now));
        match older {
            Some(older) if older.answers.attempts() > found.answers.attempts() => {
                found = ResumePoint {
                    wall_before: found.wall_before,
                    run_id: found.run_id,
                    ..older
                };
            }
            _ => break,
        }
    }
    found
}

/// What a run folder gives to go on from; `None` without a whole turn.
fn found_in(run: PartialRun, now: DateTime<Utc>) -> Option<ResumePoint> {
    let start = run.start.as_ref()?;
    // A call is whole when its last attempt got a reply; what follows the
    // last whole call (a call cut by the kill, a failed retryable call) is
    // asked again.
    let calls_end = {
        let mut end = None;
        for (i, l) in run.attempts.iter().enumerate() {
            let next_starts_call = run.attempts.get(i + 1).is_none_or(|n| n.attempt <= 1);
            if next_starts_call && l.failure().is_none() && l.response.is_some() {
                end = Some(i + 1);
            }
        }
        end?
    };
    let kept = &run.attempts[..calls_end];
    let last_turn = kept.last()?.turn;
    // A result the service refused for the setup (a notes token) is asked
    // again once the setup is fixed.
    let tools: Vec<_> = run
        .tools
        .iter()
        .filter(|t| t.turn <= last_turn && !t.setup_fault)
        .cloned()
        .collect();
    let answered: std::collections::HashSet<(u32, &str)> =
        tools.iter().map(|t| (t.turn, t.call_id.as_str())).collect();
    let resent = run
        .intents
        .iter()
        .filter(|i| i.turn <= last_turn && !answered.contains(&(i.turn, i.call_id.as_str())))
        .map(|i| {
            harness_base::text::printable(&format!("{} [{}] of turn {}", i.name, i.call_id, i.turn))
                .into_owned()
        })
        .collect();
    let wall_before = match &run.summary {
        Some(s) => Duration::from_millis(s.wall_ms),
        None => {
            let started: SystemTime = start.started_at.min(now).into();
            let ended = run.last_written.unwrap_or(started).min(now.into());
            Duration::from_millis(start.wall_ms_before)
                .saturating_add(ended.duration_since(started).unwrap_or_default())
        }
    };
    Some(ResumePoint {
        run_id: run.run_id.clone(),
        answers: Answers::new(kept, &tools),
        wall_before,
        today: start.today,
        resent,
        resumed_from: start
            .resumed_from
            .clone()
            .filter(|r| harness_records::run_time(r).is_some()),
    })
}

impl ResumePoint {
    /// Runs the recorded part once in memory with `spec`, nothing live
    /// behind it: the task goes on from these records, or starts fresh and
    /// says why.
    pub(super) async fn check(self, deps: &TaskDeps, spec: &TaskSpec) -> Start {
        let (probe, answered) = self.answers.clone().deps(deps, GoLive::Never);
        run_task(&probe, spec, &mut |_| {}).await;
        match answered.difference() {
            None => Start::Resumed {
                turns: answered.turns(),
                point: self,
            },
            Some(difference) => {
                Start::Refused(format!("run {}: {}", self.run_id, difference.in_one_line()))
            }
        }
    }
}

/// How a placed task starts with respect to earlier records.
#[derive(Debug)]
pub(super) enum Start {
    /// No records to go on from.
    Fresh,
    /// Goes on from `point`, checked: its records answer `turns` turns whole.
    Resumed { point: ResumePoint, turns: u32 },
    /// It had records to go on from, refused: which run, and why.
    Refused(String),
}

impl Start {
    /// The records it goes on from, if any.
    pub(super) fn point(&self) -> Option<&ResumePoint> {
        match self {
            Start::Resumed { point, .. } => Some(point),
            _ => None,
        }
    }

    /// The turns its records answer whole, as the check found.
    pub(super) fn turns(&self) -> u32 {
        match self {
            Start::Resumed { turns, .. } => *turns,
            _ => 0,
        }
    }

    /// In `run.log`: why the records were refused, or the writes recorded
    /// as about to be sent, with no result, that run again.
    pub(super) fn note(&self, rec: &mut RunRecord, now: DateTime<Utc>) {
        if let Start::Refused(why) = self {
            let line = format!("not resumed from {why}; the task starts fresh");
            rec.log_line(now, &line);
            tracing::warn!(reason = %why, "not resumed; the task starts fresh");
        }
        for call in self
            .point()
            .map(|p| p.resent.as_slice())
            .unwrap_or_default()
        {
            rec.log_line(
                now,
                &format!(
                    "write call {call} was recorded as about to be sent, but not its result: it runs again with the recorded arguments (an attachment with the same name and text is found, not created twice)"
                ),
            );
        }
    }

    /// The task under way: its dependencies answering from the records it
    /// goes on from (they move into them), then live.
    pub(super) fn begin(self, deps: &TaskDeps) -> Resuming {
        let fresh = |refused| Resuming {
            deps: None,
            answered: None,
            from: None,
            refused,
            wall_before: Duration::ZERO,
        };
        match self {
            Start::Fresh => fresh(None),
            Start::Refused(why) => fresh(Some(why)),
            Start::Resumed { point, .. } => {
                let (from, wall_before) = (point.run_id.clone(), point.wall_before);
                let (deps, answered) = point.answers.deps(deps, GoLive::AfterRecords);
                Resuming {
                    deps: Some(deps),
                    answered: Some(answered),
                    from: Some(from),
                    refused: None,
                    wall_before,
                }
            }
        }
    }
}

/// A task under way with respect to earlier records.
pub(super) struct Resuming {
    /// Its dependencies, answering from the records it goes on from.
    pub(super) deps: Option<TaskDeps>,
    answered: Option<Answered>,
    from: Option<String>,
    refused: Option<String>,
    wall_before: Duration,
}

impl Resuming {
    /// What the task went on from, whole once it ran: `replayed` counted
    /// what its events say was answered from the records.
    pub(super) fn resumption(self, replayed: &Replayed) -> Resumption {
        Resumption {
            from: self.from,
            turns: self.answered.map_or(0, |a| a.turns()),
            refused: self.refused,
            wall_before: self.wall_before,
            earlier: replayed.earlier(self.wall_before),
        }
    }
}

/// What is left of a resumed task's wall clock; at least a second, so the
/// turns answered from the records (at once) are answered and the task
/// ends on its first live step, its counts whole.
pub(super) fn wall_left(max_wall: Duration, before: Duration) -> Duration {
    max_wall.saturating_sub(before).max(Duration::from_secs(1))
}

/// The tokens of the replies a task's events say were answered from the
/// records: with the earlier runs' time, what the metrics leave out.
#[derive(Debug, Default)]
pub(super) struct Replayed {
    tokens: harness_records::Earlier,
    from_records: bool,
}

impl Replayed {
    pub(super) fn on(&mut self, event: &harness_agent::TaskEvent<'_>) {
        use harness_agent::TaskEvent;
        match event {
            TaskEvent::Attempt(a) => self.from_records = a.attempt.recorded,
            TaskEvent::ReplyRead(r) if self.from_records => {
                let t = &mut self.tokens;
                t.prompt_tokens = t.prompt_tokens.saturating_add(r.usage.prompt_tokens);
                t.completion_tokens = t
                    .completion_tokens
                    .saturating_add(r.usage.completion_tokens);
            }
            _ => {}
        }
    }

    pub(super) fn earlier(&self, wall_before: Duration) -> harness_records::Earlier {
        harness_records::Earlier {
            wall_ms: harness_base::time::millis(wall_before),
            ..self.tokens
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use harness_records::{IntentLine, RecordedLine, StartLine, ToolLine};

    fn line(turn: u32, attempt: u32, failure: Option<&str>) -> RecordedLine {
        let raw = |s: &str| serde_json::value::RawValue::from_string(s.to_string()).unwrap();
        RecordedLine {
            turn,
            attempt,
            latency_ms: 5,
            request: raw("{}"),
            http_status: Some(if failure.is_some() { 503 } else { 200 }),
            response: failure.is_none().then(|| raw("{\"choices\":[]}")),
            error: failure.map(str::to_string),
            error_kind: failure.map(|_| "status".to_string()),
            finish_reason: None,
            retry_after_ms: None,
            runpod: None,
            context: None,
            resumed: false,
        }
    }

    fn tool(turn: u32, id: &str) -> ToolLine {
        ToolLine {
            turn,
            call_id: id.into(),
            name: "noteworx_create_attachment".into(),
            arguments: "{}".into(),
            result: "ok".into(),
            is_error: false,
            duration_ms: 1,
            original_chars: 2,
            returned_chars: 2,
            executed: true,
            recovered: false,
            repeat: 1,
            detail: None,
            resumed: false,
            setup_fault: false,
            read_on: None,
        }
    }

    fn partial(attempts: Vec<RecordedLine>, tools: Vec<ToolLine>) -> PartialRun {
        let at = chrono::Utc.with_ymd_and_hms(2026, 4, 9, 6, 0, 0).unwrap();
        PartialRun {
            run_id: "20260409T060000Z".into(),
            start: Some(StartLine {
                task: "t".into(),
                run_id: "20260409T060000Z".into(),
                started_at: at,
                dry_run: false,
                replay_of: None,
                resumable: true,
                today: at.date_naive(),
                slot: None,
                resumed_from: None,
                wall_ms_before: 1000,
            }),
            attempts,
            tools,
            last_written: Some((at + chrono::Duration::seconds(30)).into()),
            ..PartialRun::default()
        }
    }

    #[test]
    fn what_follows_the_last_reply_is_asked_again() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 4, 9, 7, 0, 0).unwrap();
        // Turn 2 was retried and answered; turn 3's call failed for good.
        let run = partial(
            vec![
                line(1, 1, None),
                line(2, 1, Some("busy")),
                line(2, 2, None),
                line(3, 1, Some("busy")),
                line(3, 2, Some("busy")),
            ],
            vec![tool(1, "a"), tool(2, "b")],
        );
        let mut run = run;
        run.intents = vec![intent(2, "b"), intent(2, "c"), intent(3, "d")];
        let found = found_in(run, now).unwrap();
        assert_eq!(
            found.answers.attempts(),
            3,
            "the failed call of turn 3 is not kept"
        );
        assert_eq!(found.answers.first_live_turn(), 3);
        assert_eq!(found.answers.results(), 2);
        assert_eq!(found.resent, ["noteworx_create_attachment [c] of turn 2"]);
        assert_eq!(
            found.wall_before,
            Duration::from_secs(31),
            "1 s before, 30 s in the killed run"
        );

        // A call cut by the kill on its first attempt, and a run with no reply at all.
        let cut = partial(
            vec![line(1, 1, None), line(2, 1, Some("interrupted"))],
            vec![],
        );
        assert_eq!(found_in(cut, now).unwrap().answers.attempts(), 1);
        assert!(found_in(partial(vec![line(1, 1, Some("busy"))], vec![]), now).is_none());
        assert!(found_in(partial(vec![], vec![]), now).is_none());

        // A refused context, shrunk and sent again in the same turn: both kept.
        let shrunk = partial(vec![line(1, 1, Some("exceeds")), line(1, 1, None)], vec![]);
        assert_eq!(found_in(shrunk, now).unwrap().answers.attempts(), 2);
    }

    #[test]
    fn a_crafted_start_cannot_overflow_the_wall_time() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 4, 9, 7, 0, 0).unwrap();
        let mut run = partial(vec![line(1, 1, None)], vec![]);
        if let Some(s) = &mut run.start {
            s.wall_ms_before = u64::MAX;
            s.started_at = now + chrono::Duration::days(400);
        }
        run.last_written = Some(std::time::UNIX_EPOCH);
        let found = found_in(run, now).unwrap();
        assert_eq!(found.wall_before, Duration::from_millis(u64::MAX));
    }

    fn intent(turn: u32, id: &str) -> IntentLine {
        IntentLine {
            turn,
            call_id: id.into(),
            name: "noteworx_create_attachment".into(),
            arguments: "{}".into(),
            at: chrono::DateTime::UNIX_EPOCH,
        }
    }
}
