//! `report` (docs/operating.md, "Report"): a static HTML report of recent runs,
//! built from the records alone. `index.html` lists the runs, newest first,
//! with task and status filters made of CSS (they work from `file://` and with
//! JavaScript off); one page per run shows the prompt, each turn (thinking and
//! tool results folded in `<details>`), the summary, and the answer or the
//! failure.
//!
//! A run's content can hold any markup: every text goes through maud's
//! escaping, and nothing on a page loads from anywhere.

mod evals;
mod index;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context;
use maud::{DOCTYPE, Markup, PreEscaped, html};

use harness_base::folder::Folder;
use harness_base::text::{printable, short_hash};
use harness_records::{self as records, RecordedLine, RecordedRun, Status, Summary, ToolLine};
use harness_wire::reply::strip_thinking;

/// What `report` was asked.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    pub out: PathBuf,
    pub task: Option<String>,
    pub limit: usize,
}

/// The style of every page: small, readable, no web fonts, no images.
const STYLE: &str = "
body{font:15px/1.45 system-ui,sans-serif;margin:1.5rem auto;max-width:72rem;padding:0 1rem;color:#1d1d1f}
h1{font-size:1.5rem;margin:.2rem 0} h2{font-size:1.15rem;margin:1.4rem 0 .4rem}
table{border-collapse:collapse;width:100%} th,td{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #ddd;vertical-align:top}
th{background:#f5f5f7} pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f9;padding:.6rem;border-radius:4px;margin:.3rem 0}
.succeeded{color:#0a7a2f} .failed{color:#b3261e} .interrupted{color:#9a6700}
td.succeeded,td.failed,td.interrupted{font-weight:600}
details{margin:.4rem 0;border:1px solid #e3e3e8;border-radius:4px;padding:.2rem .6rem} summary{cursor:pointer}
.meta{color:#555;font-size:.9rem} .mark{background:#fff4ce;padding:0 .3rem;border-radius:3px;font-size:.85rem}
.turn{border-left:3px solid #d0d0d8;padding-left:.8rem;margin:1rem 0}
.filters{margin:.6rem 0} .filters label{cursor:pointer;margin-right:.6rem;color:#0b57d0}
";

/// What `report` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub index: PathBuf,
    pub runs: usize,
    pub evals: usize,
    /// Folders under `logs` this user may not read: their runs are missing.
    pub unreadable: Vec<PathBuf>,
}

/// Writes `index.html`, a page per run and a page per eval (with the pages
/// of its runs) under `opts.out`. Each run is the folder
/// the listing walked (docs/untrusted-input.md); a folder that cannot be read
/// or a page that cannot be written is skipped with a line given to `warn`
/// (already made printable), and the rest of the report is still written. A
/// folder dated more than an hour after `now` is no run
/// (docs/untrusted-input.md): named, skipped.
pub fn write(
    logs: &Path,
    opts: &ReportOptions,
    now: chrono::DateTime<chrono::Utc>,
    warn: &mut dyn FnMut(String),
) -> anyhow::Result<Written> {
    let mut listing = records::read_summaries(logs, now);
    if listing.unreadable.iter().any(|p| p == logs) {
        return Err(records::Unreadable(logs.to_path_buf()).into());
    }
    if let Some(t) = &opts.task {
        listing.runs.retain(|r| &r.summary.task == t);
    }
    listing.runs.truncate(opts.limit);
    for why in &listing.skipped {
        warn(format!("report: skipped {}", printable(why)));
    }
    for dir in &listing.ahead {
        let line = records::Listing::ahead_line(dir, now);
        warn(format!("report: skipped {}", printable(&line)));
    }
    for unfinished in &listing.incomplete {
        warn(format!(
            "report: skipped {}: no readable summary.json (a run still going, killed, or not a run)",
            printable(&unfinished.dir.display().to_string())
        ));
    }
    // The output folder is opened once, its last step not through a link
    // (`logs/report` could have been planted), and every page is written
    // inside the opened folders, whatever is renamed meanwhile.
    let (out, runs_dir) = output_folders(&opts.out)?;
    let root = Folder::open_root(logs).with_context(|| format!("opening {}", logs.display()))?;
    let mut pages = Vec::new();
    let mut names = BTreeSet::new();
    for run in &listing.runs {
        let name = page_name(&run.dir);
        if let Some(name) = write_run_page(&root, run, name, &mut names, &runs_dir, warn) {
            pages.push((&run.summary, name));
        }
    }
    // Evals are listed whole, one read at a time; a task filter is about runs.
    let evals = if opts.task.is_none() {
        let evals_dir = out
            .sub_or_create("evals", 0o700)
            .with_context(|| format!("{}: cannot make it", opts.out.join("evals").display()))?;
        evals::write_evals(logs, opts.limit, now, &evals_dir, warn)
    } else {
        Vec::new()
    };
    out.replace(
        "index.html",
        index::index_page(&pages, &evals).into_string().as_bytes(),
        0o600,
    )
    .with_context(|| format!("writing {}", opts.out.join("index.html").display()))?;
    Ok(Written {
        index: opts.out.join("index.html"),
        runs: pages.len(),
        evals: evals.len(),
        unreadable: listing.unreadable,
    })
}

/// `out` and `out/runs`, made when missing (0700) and opened: `out`'s
/// parent as the operator named it, then each step without following a
/// link, so a link planted at `logs/report` or `report/runs` is refused.
fn output_folders(out: &Path) -> anyhow::Result<(Folder, Folder)> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let name = out
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} does not name a folder", out.display()))?;
    let refused = |e: std::io::Error, dir: &Path| {
        if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_symlink()) {
            anyhow::anyhow!(
                "{} is a symbolic link: the report is written only into a real folder",
                dir.display()
            )
        } else {
            anyhow::Error::new(e).context(dir.display().to_string())
        }
    };
    let out_folder = Folder::open_root(&parent)
        .and_then(|p| p.sub_or_create(name, 0o700))
        .map_err(|e| refused(e, out))?;
    let runs = out_folder
        .sub_or_create("runs", 0o700)
        .map_err(|e| refused(e, &out.join("runs")))?;
    Ok((out_folder, runs))
}

/// Writes the page of listed run `run` (its folder opened from `root`)
/// into `dir` as `name`, or, when another page took that name (`a--b/c`
/// and `a/b--c` make the same), as `name` with a hash of the run's whole
/// path; returns the name written. A run that cannot be read gets a page
/// saying why; a page that cannot be written is skipped, each with a line
/// given to `warn`.
pub(super) fn write_run_page(
    root: &Folder,
    run: &records::ListedRun,
    name: String,
    names: &mut BTreeSet<String>,
    dir: &Folder,
    warn: &mut dyn FnMut(String),
) -> Option<String> {
    let mut name = name;
    if !names.insert(name.clone()) {
        let whole = run.dir.display().to_string();
        name = format!(
            "{}-{:08x}.html",
            name.trim_end_matches(".html"),
            short_hash(&whole)
        );
        names.insert(name.clone());
    }
    let page = match records::read_listed(root, run) {
        Ok(recorded) => run_page(&recorded),
        Err(why) => {
            warn(format!("report: {}", printable(&why)));
            unreadable_page(&run.summary, &why)
        }
    };
    match dir.replace(&name, page.into_string().as_bytes(), 0o600) {
        Ok(()) => Some(name),
        Err(e) => {
            warn(format!(
                "report: skipped {}: {e}",
                printable(&run.dir.display().to_string())
            ));
            None
        }
    }
}

/// `<task>--<run>.html` from the walked folder's names, made safe for a
/// file name and a link.
pub(super) fn page_name(dir: &Path) -> String {
    let part = |p: Option<&std::ffi::OsStr>| {
        safe_name(&p.map(|n| n.to_string_lossy()).unwrap_or_default())
    };
    let task = part(dir.parent().and_then(Path::file_name));
    format!("{task}--{}.html", part(dir.file_name()))
}

/// A folder's name fit for a file name and a link: ASCII letters, digits,
/// `-` and `_`, at most 80 of them; a name that had to change gets a hash
/// of itself.
pub(super) fn safe_name(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    if safe == name && !safe.is_empty() {
        safe
    } else {
        format!("{safe}-{:08x}", short_hash(name))
    }
}

pub(super) fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) }
            style { (PreEscaped(STYLE)) }
        }
    }
}

pub(super) fn unreadable_page(s: &Summary, why: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(&format!("{} {}", s.task, s.run_id)))
            body {
                p { a href="../index.html" { "All runs" } }
                h1 { (s.task) }
                p { "The records of this run could not be read: " (why) }
            }
        }
    }
}

/// One run: prompt, turns, summary, outcome.
pub(super) fn run_page(run: &RecordedRun) -> Markup {
    let s = &run.summary;
    let texts = run
        .attempts
        .first()
        .map(|l| records::request_texts(&l.request, 2))
        .unwrap_or_default();
    let message = |i: usize| texts.get(i).cloned().flatten();
    let task_text = message(1).or_else(|| run.task_text.clone());
    let elided = elided_before(&run.attempts);
    // Where the records a resumed run went on from end
    // (docs/resume-replay-eval.md, "Resume").
    let first_live = s
        .resumed_from
        .as_ref()
        .and_then(|_| run.attempts.iter().find(|l| !l.resumed))
        .map(|l| l.turn);
    // Each turn's calls, grouped once: the page is linear in the records.
    let mut calls: BTreeMap<u32, Vec<&ToolLine>> = BTreeMap::new();
    for c in &run.tools {
        calls.entry(c.turn).or_default().push(c);
    }
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(&format!("{} {}", s.task, s.run_id)))
            body {
                p { a href="../index.html" { "All runs" } }
                h1 { (s.task) }
                p class=(s.status.as_str()) {
                    (s.status.as_str()) " — " (s.stop_reason.as_str())
                    @if let Some(of) = &s.replay_of { " (a replay of " (of) ")" }
                }
                p.meta { "run " (s.run_id) ", " (s.turns) " turn(s), " (s.tool_calls) " tool call(s), "
                    @if s.tool_errors > 0 { span.failed { (s.tool_errors) " tool error(s)" } ", " }
                    (s.total_tokens) " tokens, " (format!("{:.1}s", s.wall_ms as f64 / 1000.0)) }
                @for why in &run.not_loaded {
                    p.mark { "Not shown: " (why) }
                }
                @if let Some(system) = message(0) {
                    details { summary { "System prompt" } pre { (system) } }
                }
                h2 { "Task" }
                pre { (task_text.unwrap_or_else(|| "(not recorded)".into())) }
                @if let Some(from) = &s.resumed_from {
                    p.mark { "Resumed from run " (from) ": " (s.resumed_turns) " turn(s) answered from its records, no request sent and no tool run for them." }
                }
                @if let Some(why) = &s.resume_refused {
                    p.mark { "Not resumed from " (why) "; the task started fresh." }
                }
                @for turn in turns(&run.attempts) {
                    @if first_live == Some(turn.turn) {
                        p.mark { "The records of run " (s.resumed_from.as_deref().unwrap_or("")) " end here: from turn " (turn.turn) " on, the model was asked live." }
                    }
                    (turn_section(&turn, calls.get(&turn.turn).map_or(&[][..], Vec::as_slice), &elided))
                }
                (outcome_section(s))
            }
        }
    }
}

/// For each elided call id, the turn before whose request it was elided.
fn elided_before(lines: &[RecordedLine]) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for l in lines {
        let ids = l
            .context
            .as_ref()
            .map(|c| c.elided_call_ids.clone())
            .unwrap_or_default();
        for id in ids {
            out.entry(id).or_insert(l.turn);
        }
    }
    out
}

/// One turn as the page shows it: its last attempt's answer and the count of tries.
struct TurnView<'a> {
    turn: u32,
    attempts: usize,
    latency_ms: u64,
    last: &'a RecordedLine,
}

fn turns(lines: &[RecordedLine]) -> Vec<TurnView<'_>> {
    let mut out: Vec<TurnView<'_>> = Vec::new();
    for l in lines {
        match out.last_mut() {
            Some(t) if t.turn == l.turn => {
                t.attempts += 1;
                t.latency_ms = t.latency_ms.saturating_add(l.latency_ms);
                t.last = l;
            }
            _ => out.push(TurnView {
                turn: l.turn,
                attempts: 1,
                latency_ms: l.latency_ms,
                last: l,
            }),
        }
    }
    out
}

fn turn_section(t: &TurnView<'_>, calls: &[&ToolLine], elided: &BTreeMap<String, u32>) -> Markup {
    let reply = records::reply_view(t.last.response.as_deref());
    let raw = reply.content.as_deref().unwrap_or("");
    let (words, mut thoughts) = strip_thinking(raw);
    if let Some(r) = reply
        .reasoning_content
        .as_deref()
        .filter(|r| !r.trim().is_empty())
    {
        thoughts.insert(0, r.trim().to_string());
    }
    let usage = (reply.prompt_tokens, reply.completion_tokens);
    html! {
        section.turn {
            h2 { "Turn " (t.turn) }
            p.meta {
                (usage.0) " prompt + " (usage.1) " completion tokens, " (t.latency_ms) " ms"
                @if t.attempts > 1 { ", " (t.attempts) " attempts" }
                @if t.last.resumed { ", " span.mark { "from the records" } }
                @if t.last.finish_reason.as_deref() == Some("length") { " " span.mark { "CUT at max_tokens" } }
                @if let Some(e) = &t.last.error { " — " span.failed { (e) } }
            }
            @if !thoughts.is_empty() {
                details.thinking { summary { "Thinking" } pre { (thoughts.join("\n\n")) } }
            }
            @if !words.trim().is_empty() { pre.words { (words.trim()) } }
            @for c in calls {
                details.call {
                    summary {
                        (c.name) " "
                        span.meta { (harness_base::text::clip(&c.arguments, 60)) } " "
                        span class=(if c.is_error { "failed" } else { "succeeded" }) { (if c.is_error { "error" } else { "ok" }) }
                        @if !c.executed { " " span.mark { "not run" } }
                        @if c.resumed { " " span.mark { "from the records" } }
                        @if c.original_chars > c.returned_chars { " " span.mark { "cut: " (c.returned_chars) " of " (c.original_chars) " characters" } }
                        @if let Some(turn) = elided.get(&c.call_id) { " " span.mark { "elided from the context before turn " (turn) } }
                    }
                    p.meta { "arguments" }
                    pre { (c.arguments) }
                    p.meta { "result" }
                    pre { (c.result) }
                }
            }
        }
    }
}

fn outcome_section(s: &Summary) -> Markup {
    html! {
        h2 { "Summary" }
        table {
            tr { th { "status" } td class=(s.status.as_str()) { (s.status.as_str()) } }
            tr { th { "stop reason" } td { (s.stop_reason.as_str()) } }
            tr { th { "attempt" } td { (s.attempt) @if s.retryable { " (retryable)" } } }
            tr { th { "tokens" } td { (s.prompt_tokens) " prompt + " (s.completion_tokens) " completion" } }
            tr { th { "tool calls" } td { (s.tool_calls) " (" (s.tool_errors) " errors, " (s.calls_over_budget) " over a budget)" } }
            tr { th { "started" } td { (s.started_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)) } }
            tr { th { "finished" } td { (s.finished_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)) } }
        }
        @if let Some(verdicts) = &s.expectations {
            h2 { "Expectations" }
            ul { @for v in verdicts { li class=(if v.ok { "succeeded" } else { "failed" }) { (v.check) ": " (v.detail) } } }
        }
        @match (s.status, &s.final_answer, &s.error) {
            (Status::Succeeded, Some(a), _) => { h2 { "Final answer" } pre { (a) } }
            (_, answer, error) => {
                @if let Some(e) = error { h2 { "Failure" } pre.failed { (e) } }
                @if let Some(a) = answer { h2 { "Final answer" } pre { (a) } }
            }
        }
    }
}
