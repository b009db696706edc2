//! Model calls answered from a recording: the endpoint's seam of answering from
//! records (`records::answering` builds the [`Recording`], for `replay` and for
//! a task resuming from its records: docs/resume-replay-eval.md, "Replay" and
//! "Resume"). Each call the harness makes is matched, in order, with a recorded
//! call — one or more attempts — and every attempt's request is compared with
//! the one recorded (ignoring `seed`); a difference is kept as a [`Mismatch`].
//! The recorded answers go through the same judging and retry rules as live
//! ones, so a replay tests the harness with no model and no network in it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use super::errors::{AttemptError, Failure, ServerError, parse_chat};
use super::exchange::{JobInfo, RawAttempt};
use super::runpod;
use harness_base::http::RawBody;
use harness_base::redact::Redactor;
use harness_base::sync::lock;

/// The most memory one recorded request may take as a tree to be compared.
const MAX_REQUEST_TREE_BYTES: usize = 256 << 20;

/// One recorded HTTP attempt.
#[derive(Debug, Clone)]
pub struct RecordedAttempt {
    /// The turn it belonged to.
    pub turn: u32,
    /// 1 for the first attempt of a call.
    pub attempt: u32,
    /// The body sent, as recorded: text until it is compared.
    pub request: Box<serde_json::value::RawValue>,
    pub http_status: Option<u16>,
    pub response: Option<RawBody>,
    pub error: Option<String>,
    pub failure: Option<Failure>,
    pub retry_after: Option<Duration>,
    pub job: Option<JobInfo>,
}

/// A request that differed from the recorded one.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub turn: u32,
    pub recorded: Option<Value>,
    pub sent: Option<Value>,
    /// Why, when it is not a difference of bodies (an attempt too many or too few).
    pub note: String,
}

/// The recorded model calls of a run, shared by the endpoint that answers
/// them and the handle that reads the mismatches afterwards.
#[derive(Debug)]
pub struct Recording {
    calls: VecDeque<VecDeque<RecordedAttempt>>,
    /// From this turn on, calls go to the live endpoint (`--from-turn`).
    live_from_turn: Option<u32>,
    /// Once every recorded call is answered, calls go to the live
    /// endpoint: a task resuming from its records.
    then_live: bool,
    /// The turns whose model calls were answered from the recording.
    answered_turns: std::collections::BTreeSet<u32>,
    /// The context window the recorded run managed.
    pub(super) window: Option<u32>,
    /// The exact prompt counts the recorded run made, by turn, in order.
    counts: VecDeque<(u32, u64)>,
    pub(super) mismatches: Vec<Mismatch>,
}

/// Where a prompt count comes from in a replay.
pub enum Count {
    Recorded(u64),
    /// The turn runs live (`--from-turn`): ask the server.
    Live,
    /// The recorded run did not count here.
    None,
}

impl Recording {
    /// The recorded `attempts` grouped into calls (a call starts at
    /// attempt 1), answered in order; from turn `live_from_turn` on, and
    /// with `then_live` once every recorded call is answered, the endpoint
    /// is asked. Otherwise a call past the recording is not sent.
    pub fn new(
        attempts: Vec<RecordedAttempt>,
        counts: Vec<(u32, u64)>,
        window: Option<u32>,
        live_from_turn: Option<u32>,
        then_live: bool,
    ) -> Arc<Mutex<Recording>> {
        let mut calls: VecDeque<VecDeque<RecordedAttempt>> = VecDeque::new();
        for a in attempts {
            match calls.back_mut() {
                Some(call) if a.attempt > 1 => call.push_back(a),
                _ => calls.push_back(VecDeque::from([a])),
            }
        }
        Arc::new(Mutex::new(Recording {
            calls,
            live_from_turn,
            then_live,
            answered_turns: Default::default(),
            window,
            counts: counts.into(),
            mismatches: Vec::new(),
        }))
    }

    /// The requests that differed from the recorded ones so far, taken.
    pub fn take_mismatches(&mut self) -> Vec<Mismatch> {
        std::mem::take(&mut self.mismatches)
    }

    /// How many turns were answered from the recording.
    pub fn answered_turns(&self) -> u32 {
        u32::try_from(self.answered_turns.len()).unwrap_or(u32::MAX)
    }

    /// Whether the next call goes to the live endpoint.
    fn live_next(&self) -> bool {
        self.live_from_turn.is_some() || self.then_live
    }

    /// The next prompt count of the call about to be made: the recorded
    /// one for its turn, in order.
    pub(crate) fn next_count(&mut self) -> Count {
        let turn = self.calls.front().and_then(|c| c.front()).map(|a| a.turn);
        match turn {
            Some(t) if self.live_from_turn.is_some_and(|n| t >= n) => Count::Live,
            None if self.live_next() => Count::Live,
            Some(t) if self.counts.front().is_some_and(|(ct, _)| *ct == t) => self
                .counts
                .pop_front()
                .map_or(Count::None, |(_, n)| Count::Recorded(n)),
            _ => Count::None,
        }
    }

    /// The next call is answered from the recording.
    fn next_is_recorded(&self) -> bool {
        let live_now = |turn: u32| self.live_from_turn.is_some_and(|n| turn >= n);
        self.calls
            .front()
            .is_some_and(|call| !call.front().is_some_and(|a| live_now(a.turn)))
    }

    /// The recorded attempts of the next call, or `None` when the call goes live.
    pub(crate) fn next_call(&mut self) -> Answerer {
        if self.next_is_recorded() {
            let call = self.calls.pop_front().unwrap_or_default();
            let turn = call.front().map_or(0, |a| a.turn);
            self.answered_turns.insert(turn);
            Answerer::Recorded {
                turn,
                attempts: call,
            }
        } else if self.live_next() {
            Answerer::Live
        } else {
            Answerer::Exhausted
        }
    }
}

/// Where the attempts of one call come from.
#[derive(Debug)]
pub(crate) enum Answerer {
    Live,
    Recorded {
        turn: u32,
        attempts: VecDeque<RecordedAttempt>,
    },
    /// A replay with nothing left to answer.
    Exhausted,
}

/// `body` without its `seed` (top level, or inside RunPod's `input`).
fn without_seed(body: &Value) -> Value {
    let mut b = body.clone();
    if let Some(m) = b.as_object_mut() {
        m.remove("seed");
        if let Some(input) = m.get_mut("input").and_then(Value::as_object_mut) {
            input.remove("seed");
        }
    }
    b
}

/// The next recorded attempt of a call, judged as a live one would be;
/// a difference from the recorded request is noted in `recording`.
pub(crate) fn answer(
    recording: &Mutex<Recording>,
    turn: u32,
    attempts: &mut VecDeque<RecordedAttempt>,
    sent: &Value,
    runpod_kind: bool,
    redactor: &Redactor,
) -> RawAttempt {
    let mut rec = lock(recording);
    let Some(a) = attempts.pop_front() else {
        rec.mismatches.push(Mismatch {
            turn,
            recorded: None,
            sent: Some(sent.clone()),
            note: "the recorded call made fewer attempts than this one".into(),
        });
        return not_recorded("the recording has no further attempt for this call");
    };
    // A record is input too (docs/untrusted-input.md): its request becomes a tree only
    // within a budget, one at a time.
    let mut budget = MAX_REQUEST_TREE_BYTES;
    match harness_base::http::parse_tree(a.request.get(), &mut budget) {
        Some(recorded) => {
            let (recorded, now) = (without_seed(&recorded), without_seed(sent));
            if recorded != now {
                // The first difference is shown whole; the rest are counted.
                let shown = rec.mismatches.is_empty();
                rec.mismatches.push(Mismatch {
                    turn: a.turn,
                    recorded: shown.then_some(recorded),
                    sent: shown.then_some(now),
                    note: String::new(),
                });
            }
        }
        None => rec.mismatches.push(Mismatch {
            turn: a.turn,
            recorded: None,
            sent: None,
            note: format!(
                "the recorded request ({} bytes) was not compared: it is not JSON a tree can hold, or it would take over {} MiB",
                a.request.get().len(),
                MAX_REQUEST_TREE_BYTES >> 20
            ),
        }),
    }
    drop(rec);
    let result = judge(&a, runpod_kind, redactor);
    RawAttempt {
        http_status: a.http_status,
        response: a.response,
        job: a.job,
        result,
    }
}

/// A request the recording cannot answer: the task ends as `endpoint_error`.
pub(crate) fn not_recorded(why: &str) -> RawAttempt {
    RawAttempt {
        http_status: None,
        response: None,
        job: None,
        result: Err(AttemptError::NotRecorded(format!("replay: {why}"))),
    }
}

/// A recorded attempt's outcome, judged again from its status and body.
fn judge(
    a: &RecordedAttempt,
    runpod_kind: bool,
    redactor: &Redactor,
) -> Result<harness_wire::chat::ChatResponse, AttemptError> {
    let error = || a.error.clone().unwrap_or_default();
    match a.failure {
        None if runpod_kind => {
            match runpod::judge(a.response.as_ref(), &mut JobInfo::default(), redactor) {
                runpod::JobVerdict::Final(result) => result,
                runpod::JobVerdict::Pending(_) => {
                    Err(AttemptError::BadBody("replay: a pending job".into()))
                }
            }
        }
        None => parse_chat(a.response.as_ref()),
        Some(Failure::Status) => {
            let status = a.http_status.unwrap_or(500);
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let text = a.response.as_ref().and_then(RawBody::as_text);
            let err = ServerError::read(
                a.response.as_ref(),
                text.as_deref().unwrap_or(""),
                code,
                redactor,
            );
            Err(AttemptError::status(status, err, a.retry_after))
        }
        Some(Failure::Transport) => Err(AttemptError::Transport(error())),
        Some(Failure::JobFailed) => Err(AttemptError::JobFailed(error())),
        Some(Failure::JobEnded) => Err(AttemptError::JobEnded(error())),
        Some(Failure::BadBody) => Err(AttemptError::BadBody(error())),
        Some(Failure::NotJson) => Err(AttemptError::NotJson {
            status: a.http_status.unwrap_or(200),
            message: error(),
        }),
        Some(Failure::TooLarge) => Err(AttemptError::TooLarge(error())),
        Some(Failure::WallClock) => Err(AttemptError::WallClock),
        Some(Failure::Interrupted) => Err(AttemptError::Interrupted),
        Some(Failure::NotRecorded) => Err(AttemptError::NotRecorded(error())),
    }
}
