//! What a task must achieve (docs/tasks.md, "Expectations"): the `[expect]`
//! table of a task file, and the verdicts once the task has ended. A final
//! answer alone is not success when a task says what success is.
//!
//! The evidence is gathered from the task's event stream, like the records.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::{Outcome, StopReason, TaskEvent};
use harness_inbox::{Expect, answer_pattern};

/// One expectation's verdict, as `summary.json` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub check: String,
    pub ok: bool,
    pub detail: String,
}

/// How a `tools_called` verdict's detail names the tools that never ran
/// without error: `never ran without error: webfetch; ran: none`.
pub(crate) const NEVER_RAN: &str = "never ran without error: ";

/// The tools a missed `tools_called` verdict names, from its detail.
pub fn tools_never_ran(v: &Verdict) -> Option<&str> {
    let rest = v.detail.strip_prefix(NEVER_RAN)?;
    (v.check == "tools_called").then(|| rest.split(';').next().unwrap_or(rest))
}

/// The outcome judged by its verdicts: a final answer that misses an
/// expectation is not a success (`expectation_failed`).
pub fn judged(mut outcome: Outcome, verdicts: &[Verdict]) -> Outcome {
    let missed: Vec<String> = verdicts
        .iter()
        .filter(|v| !v.ok)
        .map(|v| format!("{} ({})", v.check, v.detail))
        .collect();
    if outcome.stop == StopReason::FinalAnswer && !missed.is_empty() {
        outcome.stop = StopReason::ExpectationFailed;
        outcome.error = Some(format!("missed expectations: {}", missed.join("; ")));
    }
    outcome
}

/// The verdict on every expectation the table sets, in the table's order.
pub fn verdicts(expect: &Expect, evidence: &Evidence, outcome: &Outcome) -> Vec<Verdict> {
    let mut out = Vec::new();
    if let Some(tools) = &expect.tools_called {
        out.push(tools_verdict(tools, evidence));
    }
    if let Some(pattern) = &expect.answer_matches {
        out.push(answer_verdict(pattern, outcome.final_answer.as_deref()));
    }
    if let Some(n) = expect.attachments {
        let made = evidence.attachments;
        out.push(verdict(
            "attachments",
            made == n,
            format!("{made} created, expected {n}"),
        ));
    }
    if let Some(n) = expect.max_turns_used {
        let used = outcome.stats.turns;
        out.push(verdict(
            "max_turns_used",
            used <= n,
            format!("{used} turn(s) used, at most {n} expected"),
        ));
    }
    out
}

fn tools_verdict(tools: &[String], evidence: &Evidence) -> Verdict {
    let missing: Vec<&str> = tools
        .iter()
        .map(String::as_str)
        .filter(|t| !evidence.ran_ok.contains(*t))
        .collect();
    let ran: Vec<&str> = evidence.ran_ok.iter().map(String::as_str).collect();
    let ran = if ran.is_empty() {
        "none".to_string()
    } else {
        ran.join(", ")
    };
    let detail = match missing.as_slice() {
        [] => format!("ran without error: {ran}"),
        m => format!("{NEVER_RAN}{}; ran: {ran}", m.join(", ")),
    };
    verdict("tools_called", missing.is_empty(), detail)
}

fn verdict(check: &str, ok: bool, detail: String) -> Verdict {
    Verdict {
        check: check.to_string(),
        ok,
        detail,
    }
}

fn answer_verdict(pattern: &str, answer: Option<&str>) -> Verdict {
    let shown = harness_base::text::clip(pattern, 80);
    match (answer_pattern(pattern), answer) {
        (Err(e), _) => verdict("answer_matches", false, e),
        (Ok(_), None) => verdict("answer_matches", false, "there is no final answer".into()),
        (Ok(re), Some(a)) if re.is_match(a) => verdict(
            "answer_matches",
            true,
            format!("the answer matches {shown}"),
        ),
        (Ok(_), Some(_)) => verdict(
            "answer_matches",
            false,
            format!("the answer does not match {shown}"),
        ),
    }
}

/// What a task did that expectations look at, read from its events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    /// Tools that ran without error at least once.
    pub ran_ok: BTreeSet<String>,
    /// Attachments created (or, in a dry run, that would have been).
    pub attachments: u32,
    /// The arguments of each attachment a dry run would have made: the
    /// same one asked for again is a duplicate, as a live run finds it.
    intents: BTreeSet<String>,
}

impl Evidence {
    pub fn on(&mut self, event: &TaskEvent<'_>) {
        let TaskEvent::ToolAnswered(a) = event else {
            return;
        };
        if !a.executed || a.is_error {
            return;
        }
        self.ran_ok.insert(a.name.clone());
        if a.name != harness_tools::ToolName::NoteworxCreateAttachment.as_str() {
            return;
        }
        let detail = |key: &str| a.detail.as_ref().and_then(|d| d.get(key)).is_some();
        let duplicate = detail("duplicate_of")
            || (detail("dry_run")
                && !self
                    .intents
                    .insert(harness_wire::chat::canonical_arguments(&a.arguments)));
        if !duplicate {
            self.attachments += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Answer, Stats, StopReason};

    fn outcome(answer: Option<&str>, turns: u32) -> Outcome {
        Outcome {
            stop: StopReason::FinalAnswer,
            final_answer: answer.map(str::to_string),
            error: None,
            retryable: false,
            stats: Stats {
                turns,
                ..Stats::default()
            },
            result: None,
        }
    }

    fn answered(
        name: &str,
        executed: bool,
        is_error: bool,
        detail: Option<serde_json::Value>,
    ) -> Answer {
        Answer {
            turn: 1,
            call_id: "c".into(),
            name: name.into(),
            arguments: "{}".into(),
            text: String::new(),
            undefanged: String::new(),
            is_error,
            duration_ms: 0,
            original_chars: 0,
            returned_chars: 0,
            executed,
            recovered: false,
            repeat: 1,
            detail,
            over_limit: false,
            setup_fault: None,
            recorded: false,
            read_on: None,
        }
    }

    #[test]
    fn a_missed_tools_called_verdict_names_its_tools() {
        let tools = ["webfetch".to_string(), "noteworx_read_note".to_string()];
        let v = tools_verdict(&tools, &Evidence::default());
        assert_eq!(tools_never_ran(&v), Some("webfetch, noteworx_read_note"));
        let other = verdict("answer_matches", false, format!("{NEVER_RAN}x"));
        assert_eq!(tools_never_ran(&other), None);
    }

    #[test]
    fn evidence_counts_only_calls_that_ran_without_error() {
        let mut e = Evidence::default();
        for a in [
            answered("noteworx_read_note", true, false, None),
            answered("webfetch", true, true, None),
            answered("noteworx_list_notes", false, true, None),
            answered("noteworx_create_attachment", true, false, None),
            answered(
                "noteworx_create_attachment",
                true,
                false,
                Some(serde_json::json!({"duplicate_of": "4"})),
            ),
        ] {
            e.on(&TaskEvent::ToolAnswered(&a));
        }
        assert_eq!(
            e.ran_ok.iter().map(String::as_str).collect::<Vec<_>>(),
            ["noteworx_create_attachment", "noteworx_read_note"]
        );
        assert_eq!(e.attachments, 1, "a duplicate is not a new attachment");
    }

    #[test]
    fn a_dry_run_attachment_asked_for_twice_is_counted_once() {
        let mut e = Evidence::default();
        let intent = |args: &str| Answer {
            arguments: args.into(),
            ..answered(
                "noteworx_create_attachment",
                true,
                false,
                Some(serde_json::json!({"dry_run": true})),
            )
        };
        for a in [
            intent(r#"{"slug": "a", "filename": "x.md", "content": "one"}"#),
            intent(r#"{"content":"one","filename":"x.md","slug":"a"}"#),
            intent(r#"{"slug": "a", "filename": "x.md", "content": "two"}"#),
        ] {
            e.on(&TaskEvent::ToolAnswered(&a));
        }
        assert_eq!(
            e.attachments, 2,
            "the same one again, keys reordered, is not new"
        );
    }

    #[test]
    fn every_expectation_passes_and_fails_for_its_own_reason() {
        let expect = Expect {
            tools_called: Some(vec!["noteworx_read_note".into(), "webfetch".into()]),
            answer_matches: Some("(?i)five methods".into()),
            attachments: Some(1),
            max_turns_used: Some(3),
        };
        let mut e = Evidence::default();
        e.ran_ok.insert("noteworx_read_note".into());
        e.ran_ok.insert("webfetch".into());
        e.attachments = 1;
        let all = verdicts(&expect, &e, &outcome(Some("I found Five Methods."), 3));
        assert!(all.iter().all(|v| v.ok), "{all:?}");
        assert_eq!(
            all.iter().map(|v| v.check.as_str()).collect::<Vec<_>>(),
            [
                "tools_called",
                "answer_matches",
                "attachments",
                "max_turns_used"
            ]
        );

        e.ran_ok.remove("webfetch");
        e.attachments = 2;
        let bad = verdicts(&expect, &e, &outcome(Some("four"), 4));
        assert!(bad.iter().all(|v| !v.ok), "{bad:?}");
        assert_eq!(
            bad[0].detail,
            "never ran without error: webfetch; ran: noteworx_read_note"
        );
        assert_eq!(bad[1].detail, "the answer does not match (?i)five methods");
        assert_eq!(bad[2].detail, "2 created, expected 1");
        assert_eq!(bad[3].detail, "4 turn(s) used, at most 3 expected");
        let none = verdicts(&expect, &e, &outcome(None, 1));
        assert_eq!(none[1].detail, "there is no final answer");
    }
}
