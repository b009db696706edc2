//! Answering from records: the reply or the tool result for a step of a
//! task, from a run's records or live. `replay` and a task resuming
//! from its records (docs/resume-replay-eval.md, "Replay" and "Resume") both
//! turn a run's recorded lines into [`Answers`], say when the task goes live
//! ([`GoLive`]) and run the loop with the dependencies [`Answers::deps`] gives:
//! their endpoint answers each model call from the recorded attempts, judged
//! and retried as live ones are (`endpoint::recorded`), and their tools each
//! call from the recorded results (`tools::RecordedResults`); both are built
//! here and nowhere else. Afterwards [`Answered`] says how many turns the
//! records answered and where the first request differed from the recorded one
//! ([`Difference`]: in one line for resume's refusal, as a diff for replay's
//! report).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::{RecordedLine, ToolLine};
use harness_agent::deps::TaskDeps;
use harness_base::http::{RawBody, parse_tree};
use harness_base::sync::lock;
use harness_base::text::{clip, printable};
use harness_endpoint::recorded::{Mismatch, RecordedAttempt, Recording};
use harness_tools::{RecordedResults, ToolOutput};

/// The most memory the recorded tool details of a run may take as trees.
const MAX_DETAIL_TREE_BYTES: usize = 64 << 20;
/// The most lines of diff a [`Difference`] shows; the rest are counted.
const MAX_DIFF_LINES: usize = 200;
/// Each line of diff shown is cut to this many characters.
const MAX_DIFF_LINE_CHARS: usize = 1000;

/// A run's recorded model calls and tool results, as the endpoint and the
/// tools answer with them.
#[derive(Debug, Clone)]
pub struct Answers {
    attempts: Vec<RecordedAttempt>,
    /// The exact prompt counts the recorded run made, by turn.
    counts: Vec<(u32, u64)>,
    /// The context window the recorded run managed (it may have come from
    /// the server, which is not asked while the records answer).
    window: Option<u32>,
    /// The results of the tools the recorded run ran, by turn and call id.
    results: HashMap<(u32, String), ToolOutput>,
}

/// When a task answered from records goes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoLive {
    /// Never: a model call past the records is not sent, and a tool call
    /// with no recorded result gets an error result (a replay; the check
    /// made before a resume).
    Never,
    /// From this turn on, the endpoint and the tools answer
    /// (`replay --from-turn`).
    FromTurn(u32),
    /// Once every recorded call is answered; a call of a recorded turn with
    /// no recorded result runs (a resumed task: the process died before the
    /// result was written), and the tools of the turn after the last
    /// recorded one run.
    AfterRecords,
}

impl Answers {
    /// The answers of recorded attempt lines (in order) and tool lines.
    pub fn new(attempts: &[RecordedLine], tools: &[ToolLine]) -> Answers {
        Answers {
            attempts: attempts.iter().map(recorded_attempt).collect(),
            counts: recorded_counts(attempts),
            window: recorded_window(attempts),
            results: recorded_results(tools),
        }
    }

    /// How many recorded attempts of model calls there are to answer.
    pub fn attempts(&self) -> usize {
        self.attempts.len()
    }

    /// How many recorded tool results there are to answer.
    pub fn results(&self) -> usize {
        self.results.len()
    }

    /// The turn after the last recorded call: with [`GoLive::AfterRecords`],
    /// its tools run.
    pub fn first_live_turn(&self) -> u32 {
        self.attempts.last().map_or(0, |a| a.turn).saturating_add(1)
    }

    /// `deps` with their endpoint and tools answering from these records
    /// until `live` says otherwise, and the handle that reads afterwards
    /// what the records answered.
    pub fn deps(self, deps: &TaskDeps, live: GoLive) -> (TaskDeps, Answered) {
        let (calls_live_from, then_live, tools_live_from, missing_run_live) = match live {
            GoLive::Never => (None, false, None, false),
            GoLive::FromTurn(n) => (Some(n), false, Some(n), false),
            GoLive::AfterRecords => (None, true, Some(self.first_live_turn()), true),
        };
        let recording = Recording::new(
            self.attempts,
            self.counts,
            self.window,
            calls_live_from,
            then_live,
        );
        let results = RecordedResults::new(self.results, tools_live_from, missing_run_live);
        let answering = deps.answering_from(recording.clone(), results);
        (answering, Answered(recording))
    }
}

/// What the records answered in a run of the loop [`Answers::deps`] made.
#[derive(Debug, Clone)]
pub struct Answered(Arc<Mutex<Recording>>);

impl Answered {
    /// How many turns were answered from the records.
    pub fn turns(&self) -> u32 {
        lock(&self.0).answered_turns()
    }

    /// The first request that differed from the recorded one, with how
    /// many did in all; taken, so asked once.
    pub fn difference(&self) -> Option<Difference> {
        let mut all = lock(&self.0).take_mismatches().into_iter();
        let first = all.next()?;
        Some(Difference {
            first,
            in_all: all.len().saturating_add(1),
        })
    }
}

/// The first request that differed from the recorded one (its bodies kept
/// whole, or why they were not compared), and how many differed in all.
#[derive(Debug)]
pub struct Difference {
    first: Mismatch,
    in_all: usize,
}

impl Difference {
    /// In one line, where the request differs (for a summary: why a task
    /// did not resume): `… at messages[0].content (…)`.
    pub fn in_one_line(&self) -> String {
        match (&self.first.recorded, &self.first.sent) {
            (Some(recorded), Some(sent)) => format!(
                "the request of turn {} differs from the recorded one at {} (a changed prompt, tools, model or limit)",
                self.first.turn,
                first_difference(recorded, sent)
            ),
            _ => format!(
                "turn {}: {}",
                self.first.turn,
                printable(&clip(&self.first.note, 200))
            ),
        }
    }

    /// In full, for a terminal: a line naming the turn and how many
    /// requests differed, then a unified diff of the two pretty-printed
    /// bodies (at most [`MAX_DIFF_LINES`] lines), or why they were not
    /// compared.
    pub fn in_full(&self) -> String {
        let mut out = format!(
            "turn {}: the request differs from the recorded one{}\n",
            self.first.turn,
            if self.in_all > 1 {
                format!(
                    " ({} difference(s) in all; the first is shown)",
                    self.in_all
                )
            } else {
                String::new()
            }
        );
        match (&self.first.recorded, &self.first.sent) {
            (Some(recorded), Some(sent)) => {
                let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default() + "\n";
                let (a, b) = (pretty(recorded), pretty(sent));
                // Myers' diff is quadratic on crafted input: past the deadline
                // it settles for a coarser (still correct) diff.
                let diff = similar::TextDiff::configure()
                    .timeout(Duration::from_secs(2))
                    .diff_lines(&a, &b)
                    .unified_diff()
                    .context_radius(3)
                    .header("recorded", "replayed")
                    .to_string();
                out.push_str(&capped(&diff, MAX_DIFF_LINES));
            }
            _ => out.push_str(&format!("{}\n", printable(&self.first.note))),
        }
        out
    }
}

/// The path of the first place two JSON values differ: `messages[0].content`.
fn first_difference(a: &Value, b: &Value) -> String {
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
                path.push_str(&format!(".{}", clip(k, 40)));
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => (a, b) = (p, q),
                    _ => break,
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
    printable(if path.is_empty() { "the top" } else { path }).into_owned()
}

/// The first `max` lines of `text`, each fit for a terminal, and a line
/// saying how many were left out.
fn capped(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut left_out = 0usize;
    for (i, line) in text.lines().enumerate() {
        if i < max {
            // A line of a recorded body can be megabytes long.
            out.push_str(&printable(&clip(line, MAX_DIFF_LINE_CHARS)));
            out.push('\n');
        } else {
            left_out += 1;
        }
    }
    if left_out > 0 {
        out.push_str(&format!(
            "… {left_out} more line(s) of diff left out (the first {max} are shown)\n"
        ));
    }
    out
}

/// A recorded attempt as the endpoint answers with it.
fn recorded_attempt(l: &RecordedLine) -> RecordedAttempt {
    RecordedAttempt {
        turn: l.turn,
        attempt: l.attempt,
        request: l.request.clone(),
        http_status: l.http_status,
        response: l.response.clone().map(RawBody::from),
        error: l.error.clone(),
        failure: l.failure(),
        retry_after: l.retry_after_ms.map(Duration::from_millis),
        job: l.runpod.clone(),
    }
}

/// The exact prompt counts of the recorded run, by turn.
fn recorded_counts(attempts: &[RecordedLine]) -> Vec<(u32, u64)> {
    attempts
        .iter()
        .filter_map(|l| Some((l.turn, l.context.as_ref()?)))
        .flat_map(|(turn, c)| c.counts.iter().map(move |n| (turn, *n)))
        .collect()
}

/// The context window the recorded run managed.
fn recorded_window(attempts: &[RecordedLine]) -> Option<u32> {
    attempts
        .iter()
        .find_map(|l| l.context.as_ref().and_then(|c| c.context_tokens))
}

/// The results of the tools a recorded run ran, by turn and call id; their
/// details become trees within one byte cap for the whole run
/// (docs/untrusted-input.md).
fn recorded_results(tools: &[ToolLine]) -> HashMap<(u32, String), ToolOutput> {
    let mut left = MAX_DETAIL_TREE_BYTES;
    tools
        .iter()
        .filter(|t| t.executed)
        .map(|t| {
            let output = ToolOutput {
                text: t.result.clone(),
                is_error: t.is_error,
                detail: t
                    .detail
                    .as_ref()
                    .and_then(|d| parse_tree(d.get(), &mut left)),
                setup_fault: None,
                read_on: t.read_on,
            };
            ((t.turn, t.call_id.clone()), output)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::first_difference;
    use serde_json::json;

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
