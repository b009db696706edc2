//! The one sink a running task reports to: each event goes, in order, to
//! its records, its live line, its `[expect]` evidence, the count of what
//! was answered from records, and its trace.

use chrono::{DateTime, Utc};

use super::resume::Replayed;
use harness_agent::TaskEvent;
use harness_agent::expect::Evidence;
use harness_display::TaskProgress;
use harness_records::RunRecord;
use harness_traces::TaskTrace;

/// What watches a running task, the loop's one sink: each event goes, in
/// order, to its records, its live line, its `[expect]` evidence, the
/// count of what was answered from records, and its trace.
pub(super) struct Observers<'a> {
    pub(super) rec: &'a mut RunRecord,
    pub(super) live: TaskProgress,
    pub(super) evidence: Evidence,
    pub(super) replayed: Replayed,
    pub(super) trace: Option<&'a mut TaskTrace>,
}

impl Observers<'_> {
    /// One event of the task, at `now` on the run's clock.
    pub(super) fn on(&mut self, now: DateTime<Utc>, event: &TaskEvent<'_>) {
        self.rec.record(now, event);
        self.live.on(event);
        self.evidence.on(event);
        self.replayed.on(event);
        if let Some(trace) = self.trace.as_deref_mut() {
            trace.on(now, event);
        }
    }
}
