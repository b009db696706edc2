//! The evals in the report (docs/operating.md, "Report"): a page per eval under
//! `logs/eval/` with its table, its paired comparison, and a link to the page
//! of every run it made; the index lists them. `eval.json` and the runs are
//! read as untrusted input, like every record.

use maud::{DOCTYPE, Markup, html};

use super::{head, page_name, safe_name, write_run_page};
use harness_base::folder::Folder;
use harness_base::text::printable;
use harness_records::{self as records, Comparison, ListedEval, Report, VariantReport};

/// An eval as the index lists it: what its page says in one row.
pub(super) struct EvalEntry {
    pub(super) id: String,
    pub(super) page: String,
    /// Each variant's passes, runs and pass rate; `None` when its
    /// `eval.json` could not be read.
    pub(super) totals: Option<Vec<(u32, u32, f64)>>,
    pub(super) verdict: Option<String>,
    pub(super) runs: usize,
}

/// Writes a page for each of the newest `limit` evals under `logs/eval/`
/// into `dir` (`evals/` of the report), with the pages of their runs, one
/// eval read at a time; returns what the index lists of them. An eval
/// whose id lies more than an hour after `now` is none: named, not read.
pub(super) fn write_evals(
    logs: &std::path::Path,
    limit: usize,
    now: chrono::DateTime<chrono::Utc>,
    dir: &Folder,
    warn: &mut dyn FnMut(String),
) -> Vec<EvalEntry> {
    let Some((root, ids)) = records::list_evals(logs, limit) else {
        return Vec::new();
    };
    let mut names = std::collections::BTreeSet::new();
    let mut entries = Vec::new();
    for id in &ids {
        if records::run_time(id).is_some_and(|t| records::ahead_of_clock(t, now)) {
            let line = records::Listing::ahead_line(&logs.join("eval").join(id), now);
            warn(format!("report: skipped {}", printable(&line)));
            continue;
        }
        if let Some(e) = records::read_eval(&root, logs, id, now) {
            entries.extend(write_eval(&e, dir, &mut names, warn));
        }
    }
    entries
}

/// One eval's page and the pages of its runs.
fn write_eval(
    e: &ListedEval,
    dir: &Folder,
    names: &mut std::collections::BTreeSet<String>,
    warn: &mut dyn FnMut(String),
) -> Option<EvalEntry> {
    for why in &e.skipped {
        warn(format!("report: skipped {}", printable(why)));
    }
    let tag = safe_name(&e.id);
    let mut links: Vec<Vec<(String, String, String)>> = Vec::new();
    for (k, (folder, runs)) in e.variants.iter().enumerate() {
        let mut pages = Vec::new();
        for run in runs {
            let name = format!("{tag}-v{}-{}", k + 1, page_name(&run.dir));
            if let Some(name) = write_run_page(folder, run, name, names, dir, warn) {
                pages.push((
                    name,
                    format!("{} {}", run.summary.task, run.summary.run_id),
                    run.summary.status.as_str().to_string(),
                ));
            }
        }
        links.push(pages);
    }
    if let Err(why) = &e.report {
        warn(format!("report: {}", printable(why)));
    }
    let report = e.report.as_ref().ok();
    let page = format!("{tag}.html");
    names.insert(page.clone());
    let html = eval_page(&e.id, report, e.report.as_ref().err(), &links);
    if let Err(err) = dir.replace(&page, html.into_string().as_bytes(), 0o600) {
        warn(format!(
            "report: skipped {}: {err}",
            printable(&e.dir.display().to_string())
        ));
        return None;
    }
    Some(EvalEntry {
        id: e.id.clone(),
        page,
        totals: report.map(|r| {
            r.variants
                .iter()
                .map(|v| (v.totals.passes, v.totals.runs, v.totals.pass_rate))
                .collect()
        }),
        verdict: report
            .and_then(|r| r.comparison.as_ref())
            .map(|c| c.verdict.clone()),
        runs: links.iter().map(Vec::len).sum(),
    })
}

fn eval_page(
    id: &str,
    report: Option<&Report>,
    unreadable: Option<&String>,
    links: &[Vec<(String, String, String)>],
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(&format!("eval {id}")))
            body {
                p { a href="../index.html" { "All runs" } }
                h1 { "eval " (id) }
                @if let Some(why) = unreadable { p.mark { "Its eval.json could not be read: " (why) } }
                @if let Some(r) = report {
                    p.meta { (r.repeat) " run(s) of each task per variant, " (r.variants.len()) " variant(s)." }
                    @if let Some(c) = &r.comparison { (comparison(c)) }
                    @for (k, v) in r.variants.iter().enumerate() {
                        (variant_table(k, v))
                    }
                }
                h2 { "Runs" }
                @for (k, pages) in links.iter().enumerate() {
                    h3 { "Variant " (k + 1) }
                    ul {
                        @for (page, label, status) in pages {
                            li { a href=(page) { (label) } " " span class=(status.as_str()) { (status) } }
                        }
                    }
                }
            }
        }
    }
}

fn comparison(c: &Comparison) -> Markup {
    html! {
        h2 { "A against B" }
        p {
            strong { (c.verdict) }
            " — " (c.key) "=" (c.a) " (A) against " (c.key) "=" (c.b) " (B) over " (c.pairs) " pair(s) of the same task and repeat: "
            "A alone passed " (c.a_only) ", B alone " (c.b_only) "; difference in pass rate (A − B) "
            (format!("{:+.3}", c.difference)) ", 95 % CI " (format!("{:+.3} to {:+.3}", c.ci_low, c.ci_high))
            " (Newcombe's paired score interval); exact McNemar p = " (format!("{:.4}", c.p_value)) "."
        }
    }
}

fn variant_table(k: usize, v: &VariantReport) -> Markup {
    let name: Vec<String> = v.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let t = &v.totals;
    html! {
        h2 { "Variant " (k + 1) @if !name.is_empty() { ": " (name.join(" ")) } }
        table {
            thead { tr { th { "Task" } th { "Passes" } th { "Rate" } th { "95 % CI" } th { "pass^k" } th { "Turns" } th { "Tokens" } th { "Stop reasons" } th { "Mostly fails on" } } }
            tbody {
                @for r in &v.tasks {
                    tr {
                        td { (r.task) }
                        td { (r.passes) "/" (r.runs) }
                        td class=(if r.passes == r.runs { "succeeded" } else { "failed" }) { (format!("{:.3}", r.pass_rate)) }
                        td { (format!("{:.3}–{:.3}", r.ci_low, r.ci_high)) }
                        td { (r.pass_hat_k) }
                        td { (r.median_turns) }
                        td { (r.median_tokens) }
                        td { (r.stop_reasons.iter().map(|(s, n)| format!("{s} {n}")).collect::<Vec<_>>().join(", ")) }
                        td { (r.top_failure.as_deref().unwrap_or("-")) }
                    }
                }
                tr {
                    th { "Total" }
                    th { (t.passes) "/" (t.runs) }
                    th { (format!("{:.3}", t.pass_rate)) }
                    th { (format!("{:.3}–{:.3}", t.ci_low, t.ci_high)) }
                    th { (format!("{:.3}", t.pass_hat_k)) }
                    th {} th {} th {} th {}
                }
            }
        }
    }
}

/// The index's list of evals: each one's totals per variant and verdict.
pub(super) fn evals_section(evals: &[EvalEntry]) -> Markup {
    html! {
        @if !evals.is_empty() {
            h2 { "Evals" }
            table {
                thead { tr { th { "Eval" } th { "Runs" } th { "Pass rate by variant" } th { "Verdict" } } }
                tbody {
                    @for e in evals {
                        tr {
                            td { a href=(format!("evals/{}", e.page)) { (e.id) } }
                            td { (e.runs) }
                            td {
                                @if let Some(totals) = &e.totals {
                                    (totals.iter().map(|(p, n, r)| format!("{p}/{n} ({r:.3})")).collect::<Vec<_>>().join(" · "))
                                } @else { "(eval.json unreadable)" }
                            }
                            td { (e.verdict.as_deref().unwrap_or("-")) }
                        }
                    }
                }
            }
        }
    }
}
