//! `eval`: the suite's configs (with `--set` and `--matrix`), the task
//! dependencies of each variant, the runs, and the table or JSON.

use std::io::Write;
use std::path::Path;

use super::cli::Command;
use tokio_util::sync::CancellationToken;

use super::cli::Cli;
use super::config_error;
use super::exit;
use super::run::{batch_options, watch_signals};
use harness_agent::deps::{TaskDeps, system_clock};
use harness_config::Config;
use harness_display::Progress;
use harness_drain::UsageError;

/// The suite must hold task files; each variant's config must load.
/// `Err` is the exit code (2).
fn eval_configs(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    opts: &harness_lab::eval::EvalOptions,
    progress: &Progress,
) -> Result<Vec<Variant>, u8> {
    match harness_inbox::list(&opts.dir) {
        Ok(tasks) if !tasks.is_empty() => {}
        Ok(_) => {
            progress.eprintln(&format!(
                "agent-harness: no *.md task files in {}",
                opts.dir.display()
            ));
            return Err(exit::USAGE);
        }
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            return Err(exit::USAGE);
        }
    }
    let variants = harness_lab::eval::variants(opts).map_err(|e| {
        progress.eprintln(&format!("agent-harness: {e}"));
        exit::USAGE
    })?;
    variants
        .into_iter()
        .map(|set| match Config::load_with(path, env, &set) {
            Ok(c) => Ok((set, c)),
            Err(e) => Err(config_error(progress, &e)),
        })
        .collect()
}

/// The task dependencies of each variant, each endpoint checked first: `Err` is the exit
/// code (75 when one does not answer, so nothing is run).
async fn eval_deps(
    configs: &[Variant],
    cancel: &CancellationToken,
    progress: &Progress,
) -> Result<Vec<TaskDeps>, u8> {
    let mut all: Vec<TaskDeps> = Vec::new();
    for (_, cfg) in configs {
        let mut deps = TaskDeps::new(cfg, system_clock(), cancel.clone()).map_err(|e| {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            exit::USAGE
        })?;
        // One process, one budget: the first variant's `[budget]` for all.
        if let Some(first) = all.first() {
            deps = deps.sharing(first.budget.clone());
        }
        if let Err(why) = deps.endpoint.ping().await {
            if why.untrusted {
                progress.eprintln(&format!(
                    "agent-harness: setup fault, nothing was run: {why}"
                ));
                return Err(exit::USAGE);
            }
            progress.eprintln(&format!(
                "agent-harness: the endpoint is unreachable, nothing was run: {why}"
            ));
            return Err(exit::TEMPFAIL);
        }
        all.push(deps);
    }
    Ok(all)
}

/// `eval DIR`: the suite once per variant of the config, then the table
/// (or the JSON report). Records go to `<logs>/eval/<eval_id>/v<k>/`.
pub(super) async fn eval_command(
    cli: &Cli,
    cfg: &Config,
    env: &dyn Fn(&str) -> Option<String>,
    progress: &Progress,
    out: &mut dyn Write,
) -> u8 {
    let Command::Eval {
        dir,
        repeat,
        sets,
        matrix,
        live_writes,
        json,
        min_pass_rate,
        ..
    } = &cli.command
    else {
        return exit::USAGE;
    };
    let opts = harness_lab::eval::EvalOptions {
        batch: batch_options(cfg, &cli.command, progress, None),
        dir: dir.clone(),
        repeat: *repeat,
        sets: sets.clone(),
        matrix: matrix.clone(),
        live_writes: *live_writes,
    };
    let configs = match eval_configs(&cfg.path, env, &opts, progress) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let cancel = CancellationToken::new();
    tokio::spawn(watch_signals(cancel.clone()));
    let all_deps = match eval_deps(&configs, &cancel, progress).await {
        Ok(all) => all,
        Err(code) => return code,
    };
    let eval_dir = match harness_lab::eval::create_eval_dir(&cfg.paths.logs, (system_clock())()) {
        Ok(d) => d,
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            return exit::FAILED;
        }
    };
    let budget = all_deps.first().map(|d| d.budget.clone());
    let paused = || budget.as_ref().and_then(|b| harness_drain::paused(b));
    let variants = match run_variants(&configs, &all_deps, &opts, &eval_dir, &paused).await {
        Ok(v) => v,
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            return if e.downcast_ref::<UsageError>().is_some() {
                exit::USAGE
            } else {
                exit::FAILED
            };
        }
    };
    let report = harness_records::Report {
        eval_id: eval_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        repeat: opts.repeat,
        comparison: harness_lab::eval::comparison(&opts, &variants),
        variants,
    };
    harness_lab::eval::write_report(&eval_dir, &report, *json, out);
    let stopped = match paused() {
        Some(why) => Some(format!("stopped by a budget limit: {why}")),
        None => cancel
            .is_cancelled()
            .then(|| "stopped by a signal".to_string()),
    };
    finish(&report, stopped, *min_pass_rate, progress)
}

/// Each variant's runs, until a signal or a `[budget]` limit (`paused`)
/// stops the eval.
async fn run_variants(
    configs: &[Variant],
    all_deps: &[TaskDeps],
    opts: &harness_lab::eval::EvalOptions,
    eval_dir: &Path,
    paused: &dyn Fn() -> Option<String>,
) -> anyhow::Result<Vec<harness_records::VariantReport>> {
    let mut variants = Vec::new();
    let mut failed = None;
    for (k, ((set, cfg), deps)) in configs.iter().zip(all_deps).enumerate() {
        if deps.cancel.is_cancelled() || paused().is_some() {
            break;
        }
        let logs = eval_dir.join(format!("v{}", k + 1));
        let ran = harness_lab::eval::run_variant(cfg, deps, opts, set, &logs).await;
        deps.shutdown().await;
        match ran {
            Ok(report) => variants.push(report),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    // The last traces go before the report: at most `[traces] flush_secs`.
    if let Some(traces) = &opts.batch.traces {
        traces.finish(all_deps.first().map(|d| &d.cancel)).await;
    }
    failed.map_or(Ok(variants), Err)
}

/// The eval's exit code: 75 when a signal or a `[budget]` limit cut it
/// short (runs cut short count as failures: the figures are not the
/// suite's), else the gate's.
fn finish(
    report: &harness_records::Report,
    stopped: Option<String>,
    min_pass_rate: Option<f64>,
    progress: &Progress,
) -> u8 {
    if let Some(why) = stopped {
        progress.eprintln(&format!("agent-harness: the eval was {why}; its figures cover only the runs that ended, and decide nothing"));
        return exit::TEMPFAIL;
    }
    gate(report, min_pass_rate, progress)
}

/// `--min-pass-rate R` (docs/resume-replay-eval.md, "Eval"): exit 1 when a
/// variant's pass rate (its passes over its runs, unrounded) is below R, naming
/// each such variant.
fn gate(report: &harness_records::Report, min: Option<f64>, progress: &Progress) -> u8 {
    let Some(min) = min else {
        return exit::OK;
    };
    let mut code = exit::OK;
    for v in &report.variants {
        let t = &v.totals;
        let rate = if t.runs == 0 {
            0.0
        } else {
            f64::from(t.passes) / f64::from(t.runs)
        };
        if rate < min {
            let name = harness_lab::eval::variant_name(&v.set);
            progress.eprintln(&format!(
                "agent-harness: pass rate {}/{} = {rate:.4} is below --min-pass-rate {min}{}",
                t.passes,
                t.runs,
                if name == "-" {
                    String::new()
                } else {
                    format!(" ({name})")
                }
            ));
            code = exit::FAILED;
        }
    }
    code
}

/// One eval variant: its `KEY=VALUE` overrides and the config they give.
type Variant = (Vec<(String, String)>, Config);
