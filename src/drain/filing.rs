//! Where a finished task goes and what its summary says about it: a pure
//! decision over the outcome and the attempt count (a recurring task's
//! file never moves; its retries are its slot's).

use super::*;

/// Where a finished task's file goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Disposition {
    Done,
    Failed,
    /// Stays in the inbox (retryable, interrupted, or a dry run).
    Keep,
}

/// Where a finished task goes and what its summary says about it: a pure
/// decision over the outcome and the attempt count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Filing {
    pub(super) disposition: Disposition,
    pub(super) status: Status,
    pub(super) retryable: bool,
    /// Added to the summary's error.
    pub(super) note: Option<String>,
}

pub(super) fn file_outcome(
    stop: StopReason,
    retryable: bool,
    attempt: u32,
    max_attempts: u32,
    file: bool,
) -> Filing {
    let status = match stop {
        StopReason::FinalAnswer => Status::Succeeded,
        StopReason::Interrupted | StopReason::SetupFault => Status::Interrupted,
        _ => Status::Failed,
    };
    let filing = |disposition, retryable, note| Filing {
        disposition,
        status,
        retryable,
        note,
    };
    match stop {
        _ if !file => filing(Disposition::Keep, retryable, None),
        StopReason::FinalAnswer => filing(Disposition::Done, false, None),
        StopReason::Interrupted | StopReason::SetupFault => filing(Disposition::Keep, true, None),
        _ if retryable && attempt < max_attempts => filing(
            Disposition::Keep,
            true,
            Some(format!(
                "left in the inbox to be tried again (attempt {attempt} of {max_attempts})"
            )),
        ),
        _ if retryable => filing(
            Disposition::Failed,
            false,
            Some(format!("gave up after {attempt} attempts (max_attempts)")),
        ),
        _ => filing(Disposition::Failed, false, None),
    }
}

/// A recurring task's file never moves; its retries are its slot's.
pub(super) fn slot_filing(
    filing: &mut Filing,
    slot: &super::Slot,
    attempt: u32,
    max_attempts: u32,
) {
    filing.disposition = Disposition::Keep;
    if filing.note.is_some() {
        filing.note = Some(if filing.retryable {
            format!(
                "the slot {} stays due, to be tried again at the next run (attempt {} of {max_attempts})",
                slot.at.to_rfc3339(),
                attempt
            )
        } else {
            format!(
                "gave up on the slot {} after {} attempts (max_attempts)",
                slot.at.to_rfc3339(),
                attempt
            )
        });
    }
}
