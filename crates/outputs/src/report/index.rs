//! The report's `index.html` (docs/operating.md, "Report"): the runs listed,
//! newest first, with their totals and each failed run's error, filters made of
//! CSS (they work from `file://` and with JavaScript off), and the evals.

use std::collections::BTreeSet;

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::evals::{self, EvalEntry};
use super::head;
use harness_records::{Status, Summary};

/// The filters' radios (`(id, group)`) and the CSS that makes them work:
/// radios sit right before the table (the `~` selectors need siblings);
/// their labels, in the filter lines, are what a reader clicks.
fn filter_rules(tasks: usize, statuses: &[&str]) -> (Vec<(String, &'static str)>, String) {
    let mut css =
        String::from(".filters+.filters{margin-top:0} input.f{position:absolute;opacity:0}\n");
    let mut radios = vec![("task-all".to_string(), "task")];
    for i in 0..tasks {
        css.push_str(&format!(
            "#task-{i}:checked~table tbody tr:not(.t{i}){{display:none}}\n"
        ));
        radios.push((format!("task-{i}"), "task"));
    }
    radios.push(("status-all".to_string(), "status"));
    for st in statuses {
        css.push_str(&format!(
            "#status-{st}:checked~table tbody tr:not(.s-{st}){{display:none}}\n"
        ));
        radios.push((format!("status-{st}"), "status"));
    }
    for (id, _) in &radios {
        css.push_str(&format!(
            "#{id}:checked~.filters label[for={id}]{{font-weight:700;text-decoration:underline}}\n"
        ));
    }
    (radios, css)
}

/// An answer's first line, clipped, for its cell (maud escapes it).
fn answer_line(answer: Option<&str>) -> String {
    answer
        .and_then(|a| a.lines().map(str::trim).find(|l| !l.is_empty()))
        .map(|l| harness_base::text::clip(l, 80))
        .unwrap_or_default()
}

/// The totals of the runs listed: how many, how they ended, tokens, time.
fn totals_line(pages: &[(&Summary, String)]) -> String {
    let count = |st: Status| pages.iter().filter(|(s, _)| s.status == st).count();
    let tokens: u64 = pages
        .iter()
        .map(|(s, _)| s.total_tokens)
        .fold(0, u64::saturating_add);
    let wall: u64 = pages
        .iter()
        .map(|(s, _)| s.wall_ms)
        .fold(0, u64::saturating_add);
    format!(
        "{} run(s), newest first: {} succeeded, {} failed, {} interrupted; {tokens} tokens; {:.1}s in all.",
        pages.len(),
        count(Status::Succeeded),
        count(Status::Failed),
        count(Status::Interrupted),
        wall as f64 / 1000.0
    )
}

/// The runs table with its CSS-only filters: a radio per task and per
/// status, each hiding the rows it does not match.
pub(super) fn index_page(pages: &[(&Summary, String)], evals: &[EvalEntry]) -> Markup {
    let tasks: Vec<&str> = pages
        .iter()
        .map(|(s, _)| s.task.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let task_class = |t: &str| format!("t{}", tasks.iter().position(|x| *x == t).unwrap_or(0));
    let statuses = ["succeeded", "failed", "interrupted"];
    let (radios, css) = filter_rules(tasks.len(), &statuses);
    html! {
        (DOCTYPE)
        html lang="en" {
            (head("agent-harness runs"))
            body {
                h1 { "agent-harness runs" }
                p.meta { (totals_line(pages)) }
                style { (PreEscaped(css)) }
                @for (id, group) in &radios {
                    @if id.ends_with("-all") {
                        input.f type="radio" name=(group) id=(id) checked;
                    } @else {
                        input.f type="radio" name=(group) id=(id);
                    }
                }
                div.filters {
                    "Task: "
                    label for="task-all" { "all" } " "
                    @for (i, t) in tasks.iter().enumerate() {
                        label for=(format!("task-{i}")) { (t) } " "
                    }
                }
                div.filters {
                    "Status: "
                    label for="status-all" { "all" } " "
                    @for st in statuses {
                        label for=(format!("status-{st}")) { (st) } " "
                    }
                }
                table {
                    thead { tr { th { "Task" } th { "Run" } th { "Status" } th { "Stop reason" } th { "Turns" } th { "Tool errors" } th { "Tokens" } th { "Wall" } th { "Started" } th { "Answer" } th { "Error" } } }
                    tbody {
                        @for (s, page) in pages {
                            tr class=(format!("{} s-{}", task_class(&s.task), s.status.as_str())) {
                                td { (s.task) @if let Some(slot) = &s.slot { br; small { "slot " (slot) } } }
                                td { a href=(format!("runs/{page}")) { (s.run_id) } }
                                td class=(s.status.as_str()) { (s.status.as_str()) @if s.replay_of.is_some() { " (replay)" } @else if s.dry_run { " (dry)" } }
                                td { (s.stop_reason.as_str()) }
                                td { (s.turns) }
                                td class=(if s.tool_errors > 0 { "failed" } else { "" }) { (s.tool_errors) }
                                td { (s.total_tokens) }
                                td { (format!("{:.1}s", s.wall_ms as f64 / 1000.0)) }
                                td { (s.started_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)) }
                                td.answer { (answer_line(s.final_answer.as_deref())) }
                                td.failed { @if s.status != Status::Succeeded { (harness_base::text::clip(s.error.as_deref().unwrap_or(""), 300)) } }
                            }
                        }
                    }
                }
                (evals::evals_section(evals))
            }
        }
    }
}
