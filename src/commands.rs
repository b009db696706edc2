//! The commands (SPEC §2): each reads the config, does its work, and
//! returns the process exit code. `main.rs` calls [`main`].

use std::io::Write;
use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, Command};
use crate::config::{Config, ConfigError};
use crate::endpoint::Endpoint;
use crate::harness::{Harness, system_clock};
use crate::progress::Progress;
use crate::records::read_summaries;
use crate::run::{NameError, RunOptions, RunOutcome, UsageError};
use crate::tools::Toolbox;
use crate::{config, lock, records, run, smoke};

/// Exit codes (SPEC §2).
pub mod exit {
    pub const OK: u8 = 0;
    pub const FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const TEMPFAIL: u8 = 75;
}

/// Runs a parsed command line and returns the process exit code;
/// `progress` is the live display the binary set up (also its log writer).
pub fn main(cli: Cli, progress: Progress) -> u8 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Blocking threads parse noteworx answers as they stream; the
        // systemd unit's TasksMax= leaves room for this many.
        .max_blocking_threads(64)
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agent-harness: cannot start the async runtime: {e}");
            return exit::FAILED;
        }
    };
    let env = |k: &str| std::env::var(k).ok();
    let code = runtime.block_on(dispatch(cli, &env, progress));
    // Work a server could still be holding up (a body streaming to a
    // parser) never delays the exit: the records are written by now.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    code
}

async fn dispatch(
    cli: Cli,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    progress: Progress,
) -> u8 {
    let logs_only = matches!(cli.command, Command::Runs { .. } | Command::Report { .. });
    let cfg = match load_config(&cli, env) {
        Ok(c) => c,
        Err(e) if logs_only && !cli.config.exists() => {
            // Without a config they read ./logs.
            tracing::debug!(error = %e, "no config; reading ./logs");
            return logs_command(Path::new("logs"), &cli.command);
        }
        Err(e) => return config_error(&e),
    };
    progress.redact_with(cfg.redactor());
    let stdout = || Redacting {
        inner: std::io::stdout(),
        redactor: cfg.redactor(),
    };
    match &cli.command {
        Command::Run {
            concurrency,
            dry_run,
        } => {
            let opts = RunOptions {
                dry_run: *dry_run,
                concurrency: concurrency
                    .map(usize::from)
                    .unwrap_or(cfg.limits.concurrency),
                only: None,
                progress: progress.clone(),
            };
            run_command(&cfg, opts, progress).await
        }
        Command::RunTask { name, dry_run } => {
            let opts = RunOptions {
                dry_run: *dry_run,
                concurrency: 1,
                only: Some(name.clone()),
                progress: progress.clone(),
            };
            run_command(&cfg, opts, progress).await
        }
        Command::Check => check_command(&cfg),
        Command::Replay {
            run_dir,
            from_turn,
            live_writes,
        } => {
            let opts = crate::replay::ReplayOptions {
                run_dir: run_dir.clone(),
                from_turn: *from_turn,
                live_writes: *live_writes,
            };
            replay_exit(crate::replay::replay(&cfg, &opts, &mut stdout()).await)
        }
        Command::Eval { .. } => eval_command(&cli, &cfg, env, &progress, &mut stdout()).await,
        Command::Runs { .. } | Command::Report { .. } => {
            logs_command(&cfg.paths.logs, &cli.command)
        }
        Command::TestRunpod => match Endpoint::new(&cfg.endpoint) {
            Ok(ep) => smoke_exit(smoke::test_endpoint(&cfg, &ep, &mut stdout()).await),
            Err(e) => {
                progress.eprintln(&format!("agent-harness: {e:#}"));
                exit::FAILED
            }
        },
    }
}

/// The config: `runs` and `report` read only the logs folder, and a replay
/// without `--from-turn` contacts nothing, so none of them needs a secret.
fn load_config(cli: &Cli, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let offline = matches!(
        cli.command,
        Command::Runs { .. }
            | Command::Report { .. }
            | Command::Replay {
                from_turn: None,
                ..
            }
    );
    let mut cfg = if offline {
        Config::load_offline(&cli.config, env)
    } else {
        Config::load(&cli.config, env)
    }?;
    // Every line printed while an eval runs is redacted of its secret values.
    if let Command::Eval { sets, matrix, .. } = &cli.command {
        let pairs: Vec<(String, String)> = sets
            .iter()
            .cloned()
            .chain(
                matrix
                    .iter()
                    .flat_map(|(k, vs)| vs.iter().map(move |v| (k.clone(), v.clone()))),
            )
            .collect();
        cfg.setting_secrets = config::setting_secrets(&pairs);
    }
    Ok(cfg)
}

/// One eval variant: its `KEY=VALUE` overrides and the config they give.
type Variant = (Vec<(String, String)>, Config);

/// The suite must hold task files; each variant's config must load.
/// `Err` is the exit code (2).
fn eval_configs(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    opts: &crate::eval::EvalOptions,
    progress: &Progress,
) -> Result<Vec<Variant>, u8> {
    match crate::inbox::list(&opts.dir) {
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
    let variants = crate::eval::variants(opts).map_err(|e| {
        progress.eprintln(&format!("agent-harness: {e}"));
        exit::USAGE
    })?;
    variants
        .into_iter()
        .map(|set| match Config::load_with(path, env, &set) {
            Ok(c) => Ok((set, c)),
            Err(e) => Err(config_error(&e)),
        })
        .collect()
}

/// A harness per variant, each endpoint checked first: `Err` is the exit
/// code (75 when one does not answer, so nothing is run).
async fn eval_harnesses(
    configs: &[Variant],
    cancel: &CancellationToken,
    progress: &Progress,
) -> Result<Vec<Harness>, u8> {
    let mut harnesses = Vec::new();
    for (_, cfg) in configs {
        let h = Harness::new(cfg, system_clock(), cancel.clone()).map_err(|e| {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            exit::USAGE
        })?;
        if let Err(why) = h.endpoint.ping().await {
            progress.eprintln(&format!(
                "agent-harness: the endpoint is unreachable, nothing was run: {why}"
            ));
            return Err(exit::TEMPFAIL);
        }
        harnesses.push(h);
    }
    Ok(harnesses)
}

/// `eval DIR`: the suite once per variant of the config, then the table
/// (or the JSON report). Records go to `<logs>/eval/<eval_id>/v<k>/`.
async fn eval_command(
    cli: &Cli,
    cfg: &Config,
    env: &dyn Fn(&str) -> Option<String>,
    progress: &Progress,
    out: &mut dyn Write,
) -> u8 {
    let Command::Eval {
        dir,
        repeat,
        concurrency,
        sets,
        matrix,
        live_writes,
        json,
    } = &cli.command
    else {
        return exit::USAGE;
    };
    let opts = crate::eval::EvalOptions {
        dir: dir.clone(),
        repeat: *repeat,
        concurrency: concurrency.map_or(cfg.limits.concurrency, usize::from),
        sets: sets.clone(),
        matrix: matrix.clone(),
        live_writes: *live_writes,
        progress: progress.clone(),
    };
    let configs = match eval_configs(&cli.config, env, &opts, progress) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let cancel = CancellationToken::new();
    tokio::spawn(watch_signals(cancel.clone()));
    let harnesses = match eval_harnesses(&configs, &cancel, progress).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let eval_dir = match crate::eval::create_eval_dir(&cfg.paths.logs, (system_clock())()) {
        Ok(d) => d,
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            return exit::FAILED;
        }
    };
    let mut variants = Vec::new();
    for (k, ((set, cfg), h)) in configs.iter().zip(&harnesses).enumerate() {
        let logs = eval_dir.join(format!("v{}", k + 1));
        match crate::eval::run_variant(cfg, h, &opts, set, &logs).await {
            Ok(v) => variants.push(v),
            Err(e) => {
                progress.eprintln(&format!("agent-harness: {e:#}"));
                return if e.downcast_ref::<UsageError>().is_some() {
                    exit::USAGE
                } else {
                    exit::FAILED
                };
            }
        }
    }
    let report = crate::eval::Report {
        eval_id: eval_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        repeat: opts.repeat,
        variants,
    };
    crate::eval::write_report(&eval_dir, &report, *json, out);
    exit::OK
}

/// `replay`: 0 the same requests and stop reason, 1 different (or the
/// replay could not be recorded), 2 not a readable run.
pub fn replay_exit(end: crate::replay::ReplayEnd) -> u8 {
    use crate::replay::ReplayEnd;
    match end {
        ReplayEnd::Matched => exit::OK,
        ReplayEnd::Differed | ReplayEnd::NotRecorded => exit::FAILED,
        ReplayEnd::Unreadable => exit::USAGE,
    }
}

/// `test-runpod`: 0 only when every step passed.
pub fn smoke_exit(passed: bool) -> u8 {
    if passed { exit::OK } else { exit::FAILED }
}

fn config_error(e: &ConfigError) -> u8 {
    eprintln!("agent-harness: configuration error: {e}");
    exit::USAGE
}

async fn run_command(cfg: &Config, opts: RunOptions, progress: Progress) -> u8 {
    let cancel = CancellationToken::new();
    let harness = match Harness::new(cfg, system_clock(), cancel.clone()) {
        Ok(h) => h,
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            return exit::USAGE;
        }
    };
    tokio::spawn(watch_signals(cancel));
    let started = std::time::Instant::now();
    match run::run(cfg, &harness, &opts).await {
        Ok(outcome) => {
            match &outcome {
                RunOutcome::Locked { wanted } => progress.eprintln(&format!(
                    "agent-harness: another run holds the lock {}; {}",
                    lock::RunLock::path(&cfg.paths.state_dir()).display(),
                    match wanted {
                        Some(name) => format!("task {name:?} did not run: try again when it ends"),
                        None => "nothing to do".into(),
                    }
                )),
                RunOutcome::Unreachable(why) => progress.eprintln(&format!(
                    "agent-harness: the endpoint is unreachable, no task was touched: {why}"
                )),
                RunOutcome::Finished(tally) => progress.finish(&tally.describe(started.elapsed())),
            }
            outcome.exit_code()
        }
        Err(e)
            if e.downcast_ref::<UsageError>().is_some()
                || e.downcast_ref::<NameError>().is_some() =>
        {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            exit::USAGE
        }
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            exit::FAILED
        }
    }
}

/// First SIGINT / SIGTERM: stop starting work and cancel what runs. Second: leave now.
async fn watch_signals(cancel: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot install signal handlers");
        return;
    };
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    tracing::warn!("signal received: finishing records and leaving running tasks in the inbox");
    cancel.cancel();
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    eprintln!("agent-harness: second signal, exiting at once");
    std::process::exit(i32::from(exit::TEMPFAIL));
}

/// A writer that redacts every secret from what passes through it.
struct Redacting<W> {
    inner: W,
    redactor: config::Redactor,
}

impl<W: Write> Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.inner
            .write_all(self.redactor.redact_str(&text).as_bytes())?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn check_command(cfg: &Config) -> u8 {
    let offered = Toolbox::offered_by(cfg);
    match run::check_inbox(cfg, &offered, (system_clock())().date_naive()) {
        Ok(report) => {
            for line in report
                .config_problems
                .iter()
                .chain(&report.problems)
                .chain(&report.config_warnings)
                .chain(&report.warnings)
            {
                println!("{}", crate::text::printable(line));
            }
            let config = match (report.config_problems.len(), report.config_warnings.len()) {
                (0, 0) => "config ok".to_string(),
                (0, w) => format!("config ok with {w} warning(s)"),
                (n, _) => format!("{n} config problem(s)"),
            };
            println!(
                "{}: {config}; {} task file(s), {} with problems, {} with warnings",
                cfg.path.display(),
                report.tasks,
                report.problems.len(),
                report.warnings.len()
            );
            if !report.config_problems.is_empty() {
                exit::USAGE
            } else if report.problems.is_empty() {
                exit::OK
            } else {
                exit::FAILED
            }
        }
        Err(e) => {
            eprintln!("agent-harness: {e:#}");
            exit::FAILED
        }
    }
}

/// `runs` or `report`: both read only the logs folder.
fn logs_command(logs: &Path, command: &Command) -> u8 {
    match command {
        Command::Report { out, task, limit } => {
            let opts = crate::report::ReportOptions {
                out: out.clone().unwrap_or_else(|| logs.join("report")),
                task: task.clone(),
                limit: *limit,
            };
            match crate::report::write(logs, &opts) {
                Ok((index, pages)) => {
                    let shown = std::fs::canonicalize(&index).unwrap_or(index);
                    println!("report of {pages} run(s): file://{}", shown.display());
                    exit::OK
                }
                Err(e) => {
                    eprintln!("agent-harness: {e:#}");
                    exit::FAILED
                }
            }
        }
        _ => runs_command(logs, command),
    }
}

fn runs_command(logs: &Path, command: &Command) -> u8 {
    let Command::Runs { task, limit, json } = command else {
        return exit::USAGE;
    };
    let listing = read_summaries(logs);
    let mut summaries = listing.summaries();
    let mut incomplete = listing.incomplete;
    if let Some(t) = task {
        summaries.retain(|s| &s.task == t);
        incomplete.retain(|dir| dir.parent().and_then(Path::file_name) == Some(t.as_ref()));
    }
    if !incomplete.is_empty() {
        let dirs: Vec<String> = incomplete.iter().map(|d| d.display().to_string()).collect();
        eprintln!(
            "agent-harness: {} run folder(s) without a readable summary.json (still running, killed mid-run, or not a run): {}",
            dirs.len(),
            crate::text::printable(&dirs.join(", "))
        );
    }
    for why in &listing.skipped {
        eprintln!("agent-harness: skipped {}", crate::text::printable(why));
    }
    summaries.truncate(*limit);
    let mut out = std::io::stdout().lock();
    let written = if *json {
        serde_json::to_string_pretty(&summaries)
            .map_err(std::io::Error::other)
            .and_then(|s| writeln!(out, "{s}"))
    } else {
        write!(out, "{}", runs_table(&summaries))
    };
    match written {
        Ok(()) => exit::OK,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::OK,
        Err(e) => {
            eprintln!("agent-harness: {e}");
            exit::FAILED
        }
    }
}

/// The `runs` table: task, run id, status, stop reason, turns, tokens, wall time.
pub fn runs_table(summaries: &[records::Summary]) -> String {
    let header: Vec<String> = [
        "TASK",
        "RUN ID",
        "STATUS",
        "STOP REASON",
        "TURNS",
        "TOOL ERR",
        "TOKENS",
        "WALL",
    ]
    .map(String::from)
    .to_vec();
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            let status = s.status.as_str().to_string();
            let cell = |t: &str| crate::text::printable(t).into_owned();
            vec![
                cell(&s.task),
                cell(&s.run_id),
                match (&s.replay_of, s.dry_run) {
                    (Some(_), _) => format!("{status} (replay)"),
                    (None, true) => format!("{status} (dry)"),
                    (None, false) => status,
                },
                s.stop_reason.as_str().to_string(),
                s.turns.to_string(),
                s.tool_errors.to_string(),
                s.total_tokens.to_string(),
                format!("{:.1}s", s.wall_ms as f64 / 1000.0),
            ]
        })
        .collect();
    let mut out = crate::text::table(&header, &rows);
    if rows.is_empty() {
        out.push_str("(no runs recorded)\n");
    }
    out
}
