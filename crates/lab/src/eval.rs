//! `eval DIR` (docs/resume-replay-eval.md, "Eval"): every task file in DIR, run
//! N times against the configured endpoint (per variant of the config), and how
//! often each passed — with a 95 % Wilson interval, because three runs prove
//! little. Each variant is a batch as its [`BatchOptions`] ask; files are read,
//! never moved; write tools are dry-run unless asked.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Utc};

use super::stats::{Arm, compare, median, most_common, round3, wilson};
use harness_agent::deps::TaskDeps;
use harness_config::Config;
use harness_drain::{BatchOptions, TaskEnd, run_tasks};
use harness_inbox as inbox;
use harness_records::{Comparison, Report, Status, Summary, TaskRow, Totals, VariantReport};

/// What `eval` was asked: the batch (every variant's traces to the first
/// config's collector), and the suite.
#[derive(Debug, Clone, Default)]
pub struct EvalOptions {
    pub batch: BatchOptions,
    pub dir: PathBuf,
    pub repeat: u32,
    /// `--set KEY=VALUE`, for every variant.
    pub sets: Vec<(String, String)>,
    /// `--matrix KEY=V1,V2,…`: one variant per combination of values.
    pub matrix: Vec<(String, Vec<String>)>,
    /// `--live-writes`: write tools change things (else they are dry-run).
    pub live_writes: bool,
}

/// The config overrides of each variant: the `--set` pairs, then one value
/// of each `--matrix` key, for every combination.
pub fn variants(opts: &EvalOptions) -> Result<Vec<Vec<(String, String)>>, String> {
    // Counted before anything is built: 22 two-value keys would be 4 million.
    let count = opts
        .matrix
        .iter()
        .try_fold(1usize, |n, (_, values)| n.checked_mul(values.len().max(1)))
        .filter(|n| *n <= MAX_VARIANTS);
    if count.is_none() {
        return Err(format!(
            "--matrix makes more than {MAX_VARIANTS} variants (the product of its value counts: {}); run fewer keys at once",
            opts.matrix
                .iter()
                .map(|(_, v)| v.len().to_string())
                .collect::<Vec<_>>()
                .join(" × ")
        ));
    }
    let mut all = vec![opts.sets.clone()];
    for (key, values) in &opts.matrix {
        all = all
            .into_iter()
            .flat_map(|base| {
                values.iter().map(move |v| {
                    let mut set = base.clone();
                    set.push((key.clone(), v.clone()));
                    set
                })
            })
            .collect();
    }
    Ok(all)
}

/// The most variants one eval runs (docs/resume-replay-eval.md, "Eval").
pub(crate) const MAX_VARIANTS: usize = 64;

/// A variant's settings as records show them: secret values as `***`.
pub(crate) fn shown_settings(set: &[(String, String)]) -> BTreeMap<String, String> {
    set.iter()
        .map(|(k, v)| {
            let shown = if harness_config::is_secret_setting(k, v) {
                "***".to_string()
            } else {
                v.clone()
            };
            (k.clone(), shown)
        })
        .collect()
}

/// One row per task (in name order) from the summaries of its runs.
pub fn rows(summaries: &[Summary], broken: &BTreeMap<String, u32>, repeat: u32) -> Vec<TaskRow> {
    let mut by_task: BTreeMap<&str, Vec<&Summary>> = BTreeMap::new();
    for s in summaries {
        by_task.entry(&s.task).or_default().push(s);
    }
    let mut names: Vec<&str> = by_task.keys().copied().collect();
    names.extend(
        broken
            .keys()
            .map(String::as_str)
            .filter(|t| !by_task.contains_key(t)),
    );
    names.sort_unstable();
    names
        .into_iter()
        .map(|task| {
            let runs = by_task.get(task).cloned().unwrap_or_default();
            let lost = broken.get(task).copied().unwrap_or(0);
            row(task, &runs, lost, repeat)
        })
        .collect()
}

fn row(task: &str, runs: &[&Summary], lost: u32, repeat: u32) -> TaskRow {
    let n = u32::try_from(runs.len())
        .unwrap_or(u32::MAX)
        .saturating_add(lost);
    let passes = u32::try_from(
        runs.iter()
            .filter(|s| s.status == Status::Succeeded)
            .count(),
    )
    .unwrap_or(u32::MAX);
    let (low, high) = wilson(passes, n);
    let mut stop_reasons = BTreeMap::new();
    for s in runs {
        *stop_reasons
            .entry(s.stop_reason.as_str().to_string())
            .or_insert(0) += 1;
    }
    if lost > 0 {
        stop_reasons.insert("not_recorded".to_string(), lost);
    }
    let failures = runs
        .iter()
        .filter(|s| s.status != Status::Succeeded)
        .flat_map(|s| failure_labels(s))
        .chain((0..lost).map(|_| "not_recorded".to_string()));
    TaskRow {
        task: task.to_string(),
        runs: n,
        passes,
        pass_rate: round3(if n == 0 {
            0.0
        } else {
            f64::from(passes) / f64::from(n)
        }),
        ci_low: round3(low),
        ci_high: round3(high),
        // Every one of its k runs passed: fewer runs than k is not k passes.
        pass_hat_k: u32::from(n >= repeat.max(1) && passes == n),
        median_turns: median(runs.iter().map(|s| s.turns).collect()),
        median_tokens: median(runs.iter().map(|s| s.total_tokens).collect()),
        median_wall_ms: median(runs.iter().map(|s| s.wall_ms).collect()),
        stop_reasons,
        top_failure: most_common(failures),
    }
}

/// Why a run did not pass, by name: each missed expectation
/// (`tools_called: webfetch`, `answer_matches`), else its stop reason.
fn failure_labels(s: &Summary) -> Vec<String> {
    let missed: Vec<String> = s
        .expectations
        .iter()
        .flatten()
        .filter(|v| !v.ok)
        .map(|v| match harness_agent::expect::tools_never_ran(v) {
            Some(tools) => format!("tools_called: {tools}"),
            None => v.check.clone(),
        })
        .collect();
    if s.stop_reason == harness_agent::StopReason::ExpectationFailed && !missed.is_empty() {
        missed
    } else {
        vec![s.stop_reason.as_str().to_string()]
    }
}

/// Each task's runs, passed or not, in the order they started: run ids
/// are start times, so their order is the repeat index. A run lost
/// without a summary counts as not passed, after the others.
fn outcomes(summaries: &[Summary], broken: &BTreeMap<String, u32>) -> BTreeMap<String, Vec<bool>> {
    let mut by_task: BTreeMap<String, Vec<&Summary>> = BTreeMap::new();
    for s in summaries {
        by_task.entry(s.task.clone()).or_default().push(s);
    }
    let mut out: BTreeMap<String, Vec<bool>> = by_task
        .into_iter()
        .map(|(task, mut runs)| {
            runs.sort_by(|a, b| {
                harness_records::run_order(&a.run_id).cmp(&harness_records::run_order(&b.run_id))
            });
            let passed = runs.iter().map(|s| s.status == Status::Succeeded).collect();
            (task, passed)
        })
        .collect();
    for (task, lost) in broken {
        out.entry(task.clone())
            .or_default()
            .extend((0..*lost).map(|_| false));
    }
    out
}

fn totals(rows: &[TaskRow]) -> Totals {
    let runs = rows.iter().map(|r| r.runs).sum();
    let passes = rows.iter().map(|r| r.passes).sum();
    let reliable: u32 = rows.iter().map(|r| r.pass_hat_k).sum();
    let (low, high) = wilson(passes, runs);
    Totals {
        runs,
        passes,
        pass_rate: round3(if runs == 0 {
            0.0
        } else {
            f64::from(passes) / f64::from(runs)
        }),
        ci_low: round3(low),
        ci_high: round3(high),
        pass_hat_k: round3(if rows.is_empty() {
            0.0
        } else {
            f64::from(reliable) / rows.len() as f64
        }),
    }
}

/// The paired comparison of a two-value `--matrix`
/// (docs/resume-replay-eval.md, "Eval"): its two variants, pair by pair; `None`
/// for any other matrix.
pub fn comparison(opts: &EvalOptions, variants: &[VariantReport]) -> Option<Comparison> {
    let [(key, values)] = opts.matrix.as_slice() else {
        return None;
    };
    let ([va, vb], [a, b]) = (values.as_slice(), variants) else {
        return None;
    };
    // A secret-looking value is named as every record names it: `***`.
    let shown = |v: &str| {
        if harness_config::is_secret_setting(key, v) {
            "***".to_string()
        } else {
            v.to_string()
        }
    };
    let (va, vb) = (shown(va), shown(vb));
    Some(compare(
        key,
        Arm {
            value: &va,
            report: a,
        },
        Arm {
            value: &vb,
            report: b,
        },
    ))
}

/// The labels of a variant's traces: its eval and its own name, the
/// folders of `logs` (`<eval>/<variant>`).
fn variant_labels(logs: &Path) -> Vec<(&'static str, String)> {
    let name = |p: Option<&Path>| {
        let name = p.and_then(Path::file_name).unwrap_or_default();
        name.to_string_lossy().into_owned()
    };
    vec![
        ("agent_harness.eval_id", name(logs.parent())),
        ("agent_harness.eval_variant", name(Some(logs))),
    ]
}

/// Runs the suite once for one variant; its records go under `logs`.
pub async fn run_variant(
    cfg: &Config,
    deps: &TaskDeps,
    opts: &EvalOptions,
    set: &[(String, String)],
    logs: &Path,
) -> anyhow::Result<VariantReport> {
    let entries = inbox::list(&opts.dir)?;
    let runs: Vec<inbox::InboxEntry> = (0..opts.repeat.max(1))
        .flat_map(|_| entries.iter().cloned())
        .collect();
    let mode = opts
        .batch
        .eval(cfg, logs, variant_labels(logs), opts.live_writes);
    let ends = run_tasks(cfg, deps, runs, &mode, opts.batch.concurrency).await;
    let mut summaries = Vec::new();
    let mut broken: BTreeMap<String, u32> = BTreeMap::new();
    // Ends come in the order the runs finished, not the order they started.
    for end in ends {
        match end {
            TaskEnd::Filed(s) => summaries.push(*s),
            TaskEnd::Broken { task } => *broken.entry(task).or_insert(0) += 1,
            TaskEnd::NotStarted => {}
        }
    }
    if let Some(fault) = summaries
        .iter()
        .find(|s| s.stop_reason == harness_agent::StopReason::SetupFault)
    {
        return Err(harness_drain::UsageError(format!(
            "setup fault, the eval stopped: {}",
            fault.error.as_deref().unwrap_or("")
        ))
        .into());
    }
    let tasks = rows(&summaries, &broken, opts.repeat);
    Ok(VariantReport {
        set: shown_settings(set),
        totals: totals(&tasks),
        tasks,
        outcomes: outcomes(&summaries, &broken),
    })
}

/// A variant as the table names it: its settings, `-` when it has none.
pub fn variant_name(set: &BTreeMap<String, String>) -> String {
    let v: Vec<String> = set.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if v.is_empty() {
        "-".to_string()
    } else {
        v.join(" ")
    }
}

/// The report as a table: one row per task and variant, then the totals.
pub fn table(report: &Report) -> String {
    let many = report.variants.len() > 1;
    let header = [
        "TASK",
        "VARIANT",
        "PASSES",
        "RATE",
        "95% CI",
        "TURNS",
        "TOKENS",
        "WALL",
        "PASS^K",
        "STOP REASONS",
        "MOSTLY FAILS ON",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut tasks: Vec<&str> = report
        .variants
        .iter()
        .flat_map(|v| v.tasks.iter().map(|t| t.task.as_str()))
        .collect();
    tasks.sort_unstable();
    tasks.dedup();
    for task in tasks {
        for v in &report.variants {
            if let Some(t) = v.tasks.iter().find(|t| t.task == task) {
                rows.push(task_cells(t, &variant_name(&v.set)));
            }
        }
    }
    for v in &report.variants {
        let t = &v.totals;
        rows.push(vec![
            "TOTAL".into(),
            variant_name(&v.set),
            format!("{}/{}", t.passes, t.runs),
            format!("{:.3}", t.pass_rate),
            format!("{:.3}–{:.3}", t.ci_low, t.ci_high),
            String::new(),
            String::new(),
            String::new(),
            format!("{:.3}", t.pass_hat_k),
            String::new(),
            String::new(),
        ]);
    }
    let skip = usize::from(!many);
    let keep = |cells: Vec<String>| -> Vec<String> {
        cells
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i != 1 || skip == 0)
            .map(|(_, c)| c)
            .collect()
    };
    let header = keep(header.iter().map(|h| h.to_string()).collect());
    let rows: Vec<Vec<String>> = rows.into_iter().map(keep).collect();
    harness_base::text::table(&header, &rows)
}

fn task_cells(t: &TaskRow, variant: &str) -> Vec<String> {
    let reasons: Vec<String> = t
        .stop_reasons
        .iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    vec![
        t.task.clone(),
        variant.to_string(),
        format!("{}/{}", t.passes, t.runs),
        format!("{:.3}", t.pass_rate),
        format!("{:.3}–{:.3}", t.ci_low, t.ci_high),
        t.median_turns.to_string(),
        t.median_tokens.to_string(),
        format!("{:.1}s", t.median_wall_ms as f64 / 1000.0),
        t.pass_hat_k.to_string(),
        reasons.join(", "),
        t.top_failure.clone().unwrap_or_else(|| "-".into()),
    ]
}

/// The paired comparison in words: the counts, the difference with its
/// interval, the p-value, and the verdict line.
pub(crate) fn comparison_text(c: &Comparison) -> String {
    format!(
        "paired comparison, {key}={a} (A) against {key}={b} (B), over {pairs} pair(s) of the same task and repeat:\n\
         \x20 A passed and B did not: {ao}; B passed and A did not: {bo}\n\
         \x20 difference in pass rate (A − B): {d:+.3}, 95% CI {lo:+.3} to {hi:+.3} (Newcombe's paired score interval)\n\
         \x20 exact McNemar p = {p:.4}\n\
         {verdict}\n",
        key = c.key,
        a = c.a,
        b = c.b,
        pairs = c.pairs,
        ao = c.a_only,
        bo = c.b_only,
        d = c.difference,
        lo = c.ci_low,
        hi = c.ci_high,
        p = c.p_value,
        verdict = c.verdict,
    )
}

/// `<logs>/eval/<eval_id>/`, the eval id being the start time (a clash
/// gets `-2`, `-3`, …). Private, like every run folder.
pub fn create_eval_dir(logs: &Path, started: DateTime<Utc>) -> anyhow::Result<PathBuf> {
    let root = logs.join("eval");
    harness_records::create_private_dir(&root)
        .with_context(|| format!("creating {}", root.display()))?;
    let base = harness_records::run_id_for(started);
    for n in 1..1000 {
        let id = if n == 1 {
            base.clone()
        } else {
            format!("{base}-{n}")
        };
        let dir = root.join(&id);
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                harness_records::create_private_dir(&dir)?;
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    }
    anyhow::bail!("no free eval id under {}", root.display())
}

/// Writes `eval.json` beside the variants' records and prints the report:
/// the JSON with `--json`, else the table.
pub fn write_report(dir: &Path, report: &Report, json: bool, out: &mut dyn Write) {
    let text = serde_json::to_string_pretty(report).unwrap_or_default();
    if let Err(e) =
        harness_records::replace_private(dir, "eval.json", (text.clone() + "\n").as_bytes())
    {
        tracing::error!(error = %e, "cannot write eval.json");
    }
    let _ = if json {
        writeln!(out, "{text}")
    } else {
        write!(
            out,
            "eval {}: {} run(s) of each task per variant\n{}{}records: {}\n",
            report.eval_id,
            report.repeat,
            table(report),
            report
                .comparison
                .as_ref()
                .map(comparison_text)
                .unwrap_or_default(),
            dir.display()
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wilson_interval_matches_the_spec_example_and_the_edges() {
        let (low, high) = wilson(2, 3);
        assert_eq!((round3(low), round3(high)), (0.208, 0.939));
        let (low, high) = wilson(0, 10);
        assert_eq!(round3(low), 0.0);
        assert!((high - 0.2775).abs() < 1e-3, "{high}");
        let (low, high) = wilson(10, 10);
        assert!((low - 0.7225).abs() < 1e-3, "{low}");
        assert_eq!(high, 1.0);
        assert_eq!(wilson(0, 0), (0.0, 1.0));
        let (low, high) = wilson(50, 100);
        assert!((low - 0.4038).abs() < 1e-3 && (high - 0.5962).abs() < 1e-3);
    }

    #[test]
    fn variants_are_every_combination_of_the_matrix_on_top_of_the_sets() {
        let opts = EvalOptions {
            sets: vec![("model.temperature".into(), "0.3".into())],
            matrix: vec![
                (
                    "model.replay_thinking".into(),
                    vec!["strip".into(), "keep".into()],
                ),
                ("limits.max_turns".into(), vec!["4".into(), "6".into()]),
            ],
            ..EvalOptions::default()
        };
        let v = variants(&opts).unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(
            v[1],
            [
                ("model.temperature".to_string(), "0.3".to_string()),
                ("model.replay_thinking".to_string(), "strip".to_string()),
                ("limits.max_turns".to_string(), "6".to_string()),
            ]
        );
        assert_eq!(variants(&EvalOptions::default()).unwrap(), [Vec::new()]);
    }

    #[test]
    fn a_matrix_past_64_variants_is_refused_before_one_is_built() {
        let key = |i: usize| {
            (
                format!("model.extra.k{i}"),
                vec!["a".to_string(), "b".to_string()],
            )
        };
        let six = EvalOptions {
            matrix: (0..6).map(key).collect(),
            ..EvalOptions::default()
        };
        assert_eq!(variants(&six).unwrap().len(), 64);
        for keys in [7, 22, 200] {
            let opts = EvalOptions {
                matrix: (0..keys).map(key).collect(),
                ..EvalOptions::default()
            };
            let e = variants(&opts).unwrap_err();
            assert!(e.starts_with("--matrix makes more than 64 variants"), "{e}");
        }
    }

    #[test]
    fn medians_are_the_lower_middle_value() {
        assert_eq!(median(vec![3u32, 1, 2]), 2);
        assert_eq!(median(vec![4u32, 1, 3, 2]), 2);
        assert_eq!(median(Vec::<u32>::new()), 0);
    }
}
