//! `eval.json` (docs/resume-replay-eval.md, "Eval"): the report of one eval,
//! every field name in it, written by `eval` beside its variants' records and
//! read back by `report` — as untrusted input, like every record (typed fields,
//! a cap).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::capped::{Record, read_record};
use super::{ListedRun, Listing, read_summaries_in};
use harness_base::folder::Folder;

/// `eval.json` is read up to this size.
pub const MAX_EVAL_BYTES: u64 = 2 << 20;

/// The report, as `eval.json` and `eval --json` carry it
/// (docs/resume-replay-eval.md, "Eval").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub eval_id: String,
    pub repeat: u32,
    pub variants: Vec<VariantReport>,
    /// With a two-value `--matrix`: the variants compared pair by pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantReport {
    pub set: BTreeMap<String, String>,
    pub tasks: Vec<TaskRow>,
    pub totals: Totals,
    /// Each task's runs, passed or not, in the order they started (the
    /// repeat index): what a paired comparison pairs. Not in the JSON.
    #[serde(skip)]
    pub outcomes: BTreeMap<String, Vec<bool>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRow {
    pub task: String,
    pub runs: u32,
    pub passes: u32,
    pub pass_rate: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    /// pass^k: 1 when every one of the task's k runs passed, else 0.
    #[serde(default)]
    pub pass_hat_k: u32,
    pub median_turns: u32,
    pub median_tokens: u64,
    pub median_wall_ms: u64,
    pub stop_reasons: BTreeMap<String, u32>,
    /// The most common missed expectation or failure of the runs that did
    /// not pass (`answer_matches`, `tools_called: webfetch`, `max_turns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_failure: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub runs: u32,
    pub passes: u32,
    pub pass_rate: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    /// The share of tasks whose every run passed.
    #[serde(default)]
    pub pass_hat_k: f64,
}

/// A against B over the same tasks and repeat indices
/// (docs/resume-replay-eval.md, "Eval").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The `--matrix` key and its two values, A then B.
    pub key: String,
    pub a: String,
    pub b: String,
    /// Pairs compared; those A passed and B did not; the other way round.
    pub pairs: u32,
    pub a_only: u32,
    pub b_only: u32,
    /// Pass rate of A minus that of B, with its 95 % interval (Newcombe's
    /// hybrid score interval for paired proportions).
    pub difference: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    /// The exact two-sided McNemar p-value on the discordant pairs.
    pub p_value: f64,
    /// `KEY=A better`, `KEY=B better`, or `no difference found at 95 %`.
    pub verdict: String,
}

/// One eval under `logs/eval/`, read back for the report.
#[derive(Debug)]
pub struct ListedEval {
    /// `logs/eval/<eval_id>`, for messages.
    pub dir: PathBuf,
    /// The folder's name (never a field of its `eval.json`).
    pub id: String,
    /// `Err` says why its `eval.json` could not be read.
    pub report: Result<Report, String>,
    /// The runs of each variant folder (`v1`, `v2`, …), in variant order,
    /// with the opened variant folder they were listed from.
    pub variants: Vec<(Folder, Vec<ListedRun>)>,
    /// What was skipped in it, one line each (a link, a run without a
    /// readable summary).
    pub skipped: Vec<String>,
}

/// The evals under `logs/eval/`, newest first, at most `limit` of them:
/// the opened `eval` folder and the names of the evals' folders (real
/// ones). Nothing is read yet: each eval is read by [`read_eval`] when its
/// turn comes, one at a time.
pub fn list_evals(logs: &Path, limit: usize) -> Option<(Folder, Vec<String>)> {
    let root = Folder::open_root(logs).and_then(|l| l.sub("eval")).ok()?;
    // A link here is named by the listing of `logs/` already.
    let mut ids: Vec<String> = root
        .folders_and_links()
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, real)| *real)
        .map(|(name, _)| name)
        .collect();
    ids.sort_by(|a, b| b.cmp(a));
    ids.truncate(limit);
    Some((root, ids))
}

/// Reads eval `id` of the opened `eval` folder: its `eval.json` (capped,
/// typed) and the runs of its variant folders, walked like `logs/` at
/// `now`.
pub fn read_eval(
    root: &Folder,
    logs: &Path,
    id: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<ListedEval> {
    let folder = root.sub(id).ok()?;
    let dir = logs.join("eval").join(id);
    let report = match read_record(&folder, "eval.json", MAX_EVAL_BYTES) {
        Record::Text(text) => {
            serde_json::from_str(&text).map_err(|e| format!("{}/eval.json: {e}", dir.display()))
        }
        Record::Absent => Err(format!("{}/eval.json is missing", dir.display())),
        Record::Refused(why) => Err(format!("{}: {why}", dir.display())),
    };
    let mut names = Vec::new();
    let mut skipped = Vec::new();
    for (n, real) in folder.folders_and_links().unwrap_or_default() {
        match (real, variant_number(&n)) {
            (true, Some(_)) => names.push(n),
            (false, Some(_)) => skipped.push(format!(
                "{}: a symbolic link, not followed",
                dir.join(&n).display()
            )),
            _ => {}
        }
    }
    names.sort_by_key(|n| variant_number(n));
    let mut variants = Vec::new();
    for n in names {
        let Ok(v) = folder.sub(&n) else { continue };
        let listing = read_summaries_in(&v, &dir.join(&n), now);
        skipped.extend(listing.skipped);
        skipped.extend(listing.ahead.iter().map(|d| Listing::ahead_line(d, now)));
        skipped.extend(listing.incomplete.iter().map(|u| {
            format!(
                "{}: no readable summary.json (killed, or not a run)",
                u.dir.display()
            )
        }));
        variants.push((v, listing.runs));
    }
    Some(ListedEval {
        dir,
        id: id.to_string(),
        report,
        variants,
        skipped,
    })
}

/// `v3` → 3.
fn variant_number(name: &str) -> Option<u32> {
    name.strip_prefix('v')?.parse().ok()
}
