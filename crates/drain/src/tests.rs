//! Unit tests of `drain`.

use std::time::Duration;

use super::Tally;
use super::filing::{Disposition, file_outcome};
use harness_agent::{Outcome, StopReason};
use harness_records::Status;

#[test]
fn filing_sends_each_outcome_where_it_belongs() {
    use Disposition::*;
    let f = |stop, retryable, attempt, dry: bool| {
        let mut outcome = Outcome::failed(stop, String::new());
        outcome.retryable = retryable;
        let f = file_outcome(&outcome, attempt, 3, !dry, None);
        (f.disposition, f.status, f.retryable, f.note)
    };
    assert_eq!(
        f(StopReason::FinalAnswer, false, 1, false),
        (Done, Status::Succeeded, false, None)
    );
    assert_eq!(
        f(StopReason::Interrupted, true, 2, false),
        (Keep, Status::Interrupted, true, None)
    );
    assert_eq!(
        f(StopReason::EndpointError, true, 2, false),
        (
            Keep,
            Status::Failed,
            true,
            Some("left in the inbox to be tried again (attempt 2 of 3)".into())
        )
    );
    assert_eq!(
        f(StopReason::EndpointError, true, 3, false),
        (
            Failed,
            Status::Failed,
            false,
            Some("gave up after 3 attempts (max_attempts)".into())
        )
    );
    for stop in [
        StopReason::EndpointError,
        StopReason::MaxTurns,
        StopReason::InvalidTask,
        StopReason::InternalError,
        StopReason::LoopDetected,
    ] {
        assert_eq!(
            f(stop, false, 1, false),
            (Failed, Status::Failed, false, None),
            "{stop:?}"
        );
    }
    // A dry run files nothing and says whether a real run would retry.
    assert_eq!(
        f(StopReason::FinalAnswer, false, 1, true),
        (Keep, Status::Succeeded, false, None)
    );
    assert_eq!(
        f(StopReason::EndpointError, true, 9, true),
        (Keep, Status::Failed, true, None)
    );
    assert_eq!(
        f(StopReason::MaxTurns, false, 1, true),
        (Keep, Status::Failed, false, None)
    );
}

#[test]
fn the_tally_names_only_what_happened() {
    let t = Tally {
        succeeded: 3,
        ..Tally::default()
    };
    assert_eq!(
        t.describe(Duration::from_millis(41_230)),
        "3 succeeded in 41.2s"
    );
    let t = Tally {
        succeeded: 1,
        failed: 2,
        retry_later: 1,
        interrupted: 1,
        not_started: 1,
        setup_fault: None,
        budget_exhausted: None,
        problems: vec!["color.txt in the inbox will never run".into()],
    };
    assert_eq!(
        t.describe(Duration::from_secs(2)),
        "1 succeeded, 2 failed, 3 left in the inbox for a later run in 2.0s\nproblem: color.txt in the inbox will never run"
    );
    let t = Tally {
        not_started: 2,
        budget_exhausted: Some("[budget] tokens_per_run = 10 reached".into()),
        ..Tally::default()
    };
    assert_eq!(
        t.describe(Duration::from_secs(1)),
        "0 succeeded, 2 left in the inbox for a later run in 1.0s\nbudget: [budget] tokens_per_run = 10 reached; what is left waits in the inbox, nothing was filed for it"
    );
}
