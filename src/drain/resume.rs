//! Resume, don't restart (SPEC §18): a task that did not finish goes on
//! from the records of its newest run folder that holds a whole turn. The
//! model calls recorded there are answered from them, in order; the tool
//! results recorded there likewise; a call of the last recorded turn with
//! no recorded result runs (a write sent but not recorded is sent again,
//! and the attachment rule keeps it single); then the loop goes on live.
//!
//! Before anything goes live, the recorded part is run once in memory with
//! the current config and nothing live behind it: when a request it builds
//! differs from the recorded one (a changed prompt, tools, model or limit),
//! the task starts fresh and says why.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, NaiveDate, Utc};

use super::Mode;
use crate::agent::deps::TaskDeps;
use crate::agent::{TaskSpec, run_task};
use crate::base::folder::Folder;
use crate::endpoint::recorded::{Mismatch, RecordedAttempt, Recording};
use crate::records::{
    PartialRun, Status, read_partial, read_partial_lines, recorded_attempt, recorded_counts,
    recorded_results, recorded_window,
};
use crate::state::RunRef;
use crate::tools::{RecordedResults, ToolOutput};

/// The records a task can go on from: its resume point.
#[derive(Debug)]
pub(super) struct ResumePoint {
    pub(super) run_id: String,
    /// The recorded model calls to answer, up to the last that got a reply.
    attempts: Vec<RecordedAttempt>,
    counts: Vec<(u32, u64)>,
    window: Option<u32>,
    results: HashMap<(u32, String), ToolOutput>,
    /// The turn after the last recorded reply: its tools run live.
    live_from_turn: u32,
    /// Wall time the task used in the runs before.
    pub(super) wall_before: Duration,
    /// The date its prompts were built with.
    pub(super) today: NaiveDate,
    /// Write calls recorded as intents with no recorded result.
    pub(super) resent: Vec<String>,
    /// The run those records went on from, when they did.
    resumed_from: Option<String>,
}

/// How a task started with respect to earlier records: what it went on
/// from, or why it could not.
#[derive(Debug, Default, Clone)]
pub(super) struct Resumption {
    pub(super) from: Option<String>,
    pub(super) turns: u32,
    pub(super) refused: Option<String>,
    pub(super) wall_before: Duration,
    /// The tokens and time of the runs before, for the metrics.
    pub(super) earlier: crate::records::Earlier,
}

/// The records task `name` goes on from, if any: of the runs the state
/// beside the inbox names as its attempts since it last settled (`runs`,
/// oldest first; never `own`), the newest that holds a whole turn, when
/// the runs since the task last ended say it did not finish. A run folder
/// no state names — planted in `logs/`, or left by an earlier task of the
/// same name — is never gone on from, nor one put in the place of a named
/// one (another folder on disk). `unsettled`: an attempt of this task
/// was counted and never settled (the process died after a summary was
/// written, before the file moved).
pub(super) fn find(
    mode: &Mode,
    name: &str,
    runs: &[RunRef],
    own: &str,
    unsettled: bool,
    now: DateTime<Utc>,
) -> Option<ResumePoint> {
    let task_dir = crate::inbox::fit_file_name("", name, "");
    let folder = Folder::open_root(&mode.logs).ok()?.sub(&task_dir).ok()?;
    let slot = mode.slot.as_ref().map(|s| s.at.to_rfc3339());
    let named = runs
        .iter()
        .rev()
        .filter(|r| r.id != own && crate::records::run_time(&r.id).is_some());
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
            Some(older) if older.attempts.len() > found.attempts.len() => {
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
            crate::base::text::printable(&format!("{} [{}] of turn {}", i.name, i.call_id, i.turn))
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
        attempts: kept.iter().map(recorded_attempt).collect(),
        counts: recorded_counts(kept),
        window: recorded_window(kept),
        results: recorded_results(&tools),
        live_from_turn: last_turn.saturating_add(1),
        wall_before,
        today: start.today,
        resent,
        resumed_from: start
            .resumed_from
            .clone()
            .filter(|r| crate::records::run_time(r).is_some()),
    })
}

impl ResumePoint {
    /// The task's dependencies answering from these records, then live
    /// where the records end (the records move into them).
    pub(super) fn into_deps(self, deps: &TaskDeps) -> (TaskDeps, Arc<Mutex<Recording>>) {
        let live_from_turn = Some(self.live_from_turn);
        answering(
            deps,
            self.attempts,
            self.counts,
            self.window,
            self.results,
            live_from_turn,
        )
    }

    /// Runs the recorded part once in memory, nothing live behind it:
    /// `Err` says why the records cannot be gone on from with this config.
    pub(super) async fn check(&self, deps: &TaskDeps, spec: &TaskSpec) -> Result<u32, String> {
        let (probe, recording) = answering(
            deps,
            self.attempts.clone(),
            self.counts.clone(),
            self.window,
            self.results.clone(),
            None,
        );
        run_task(&probe, spec, &mut |_| {}).await;
        let r = crate::base::sync::lock(&recording);
        match r.mismatches.first() {
            None => Ok(r.answered_turns()),
            Some(m) => Err(refusal(m)),
        }
    }
}

/// Dependencies whose endpoint and tools answer from recorded calls and
/// results; from `live_from_turn` on (and once the calls run out) they go
/// live, and a call of an earlier turn with no recorded result runs. With
/// `None`, nothing goes live: a call past the records is not sent and a
/// missing result is an error result.
fn answering(
    deps: &TaskDeps,
    attempts: Vec<RecordedAttempt>,
    counts: Vec<(u32, u64)>,
    window: Option<u32>,
    results: HashMap<(u32, String), ToolOutput>,
    live_from_turn: Option<u32>,
) -> (TaskDeps, Arc<Mutex<Recording>>) {
    let live = live_from_turn.is_some();
    let recording = Recording::resume(attempts, counts, window, live);
    let results = RecordedResults {
        results,
        live_from_turn,
        missing_run_live: live,
    };
    (deps.answering_from(recording.clone(), results), recording)
}

/// Why a recorded turn cannot be answered from the records, in one line.
fn refusal(m: &Mismatch) -> String {
    match (&m.recorded, &m.sent) {
        (Some(recorded), Some(sent)) => format!(
            "the request of turn {} differs from the recorded one at {} (a changed prompt, tools, model or limit)",
            m.turn,
            first_difference(recorded, sent)
        ),
        _ => format!(
            "turn {}: {}",
            m.turn,
            crate::base::text::printable(&crate::base::text::clip(&m.note, 200))
        ),
    }
}

/// The path of the first place two JSON values differ: `messages[0].content`.
pub(super) fn first_difference(a: &serde_json::Value, b: &serde_json::Value) -> String {
    use serde_json::Value;
    let mut path = String::new();
    let (mut a, mut b) = (a, b);
    loop {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                let Some(k) = keys.into_iter().find(|k| x.get(*k) != y.get(*k)) else {
                    break;
                };
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => {
                        path.push_str(&format!(".{}", crate::base::text::clip(k, 40)));
                        (a, b) = (p, q);
                    }
                    _ => {
                        path.push_str(&format!(".{}", crate::base::text::clip(k, 40)));
                        break;
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) => {
                let Some(i) = (0..x.len().max(y.len())).find(|i| x.get(*i) != y.get(*i)) else {
                    break;
                };
                path.push_str(&format!("[{i}]"));
                match (x.get(i), y.get(i)) {
                    (Some(p), Some(q)) => (a, b) = (p, q),
                    _ => break,
                }
            }
            _ => break,
        }
    }
    let path = path.trim_start_matches('.');
    crate::base::text::printable(if path.is_empty() { "the top" } else { path }).into_owned()
}

/// The turns a resumed task answered from its records.
pub(super) fn answered_turns(r: &Mutex<Recording>) -> u32 {
    crate::base::sync::lock(r).answered_turns()
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
    tokens: crate::records::Earlier,
    from_records: bool,
}

impl Replayed {
    pub(super) fn on(&mut self, event: &crate::agent::TaskEvent<'_>) {
        use crate::agent::TaskEvent;
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

    pub(super) fn earlier(&self, wall_before: Duration) -> crate::records::Earlier {
        crate::records::Earlier {
            wall_ms: crate::base::time::millis(wall_before),
            ..self.tokens
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{IntentLine, RecordedLine, StartLine, ToolLine};
    use chrono::TimeZone;
    use serde_json::json;

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
            found.attempts.len(),
            3,
            "the failed call of turn 3 is not kept"
        );
        assert_eq!(found.live_from_turn, 3);
        assert_eq!(found.results.len(), 2);
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
        assert_eq!(found_in(cut, now).unwrap().attempts.len(), 1);
        assert!(found_in(partial(vec![line(1, 1, Some("busy"))], vec![]), now).is_none());
        assert!(found_in(partial(vec![], vec![]), now).is_none());

        // A refused context, shrunk and sent again in the same turn: both kept.
        let shrunk = partial(vec![line(1, 1, Some("exceeds")), line(1, 1, None)], vec![]);
        assert_eq!(found_in(shrunk, now).unwrap().attempts.len(), 2);
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

    #[test]
    fn the_first_difference_is_named_by_its_path() {
        let a = json!({"model": "m", "messages": [{"role": "system", "content": "A"}, {"content": "T"}]});
        let b = json!({"model": "m", "messages": [{"role": "system", "content": "B"}, {"content": "T"}]});
        assert_eq!(first_difference(&a, &b), "messages[0].content");
        let c = json!({"model": "m", "messages": [{"role": "system", "content": "A"}]});
        assert_eq!(first_difference(&a, &c), "messages[1]");
        assert_eq!(first_difference(&json!({"t": 1}), &json!({"u": 1})), "t");
        assert_eq!(first_difference(&json!(1), &json!(2)), "the top");
    }
}
