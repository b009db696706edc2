//! `run`, `run-task` and `exec`: the drain under signal handling, its last
//! line, its exit code, the metrics textfile that records both, and what
//! goes to stdout (`--json` lines, the answer); and the one place the
//! [`BatchOptions`] of every command that runs tasks are filled in.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::cli::Command;
use super::exit::{self, Exit};
use harness_agent::deps::{TaskDeps, system_clock};
use harness_config::Config;
use harness_display::{Printer, Progress};
use harness_drain::exec::ExecOptions;
use harness_drain::{
    self as drain, BatchOptions, NameError, OnEnd, OnLocked, RunEnd, RunOptions, RunOutcome,
};
use harness_outputs::metrics;
use harness_state::{Channel, RunLock};
use harness_traces::Traces;

use super::remember;
use harness_notify::Notifier;

/// `run`, `run-task` or `exec`, as the command line says.
pub(super) async fn command(cfg: &Config, command: &Command, progress: Progress) -> u8 {
    match command {
        Command::Run { json, .. } => {
            let on_end = json.then(|| summary_lines(progress.clone()));
            let opts = RunOptions {
                batch: batch_options(cfg, command, &progress, on_end),
                ..RunOptions::default()
            };
            run_command(cfg, opts, progress).await
        }
        Command::RunTask {
            name, recurring, ..
        } => {
            let answer = TaskAnswer::default();
            let opts = RunOptions {
                batch: batch_options(cfg, command, &progress, Some(answer.keeper())),
                only: Some(name.clone()),
                recurring: *recurring,
            };
            let code = run_command(cfg, opts, progress.clone()).await;
            answer.print(&progress);
            code
        }
        Command::Exec {
            prompt,
            agent,
            tools,
            name,
            output,
            max_turns,
            model,
            quiet,
            ..
        } => {
            let text = match task_text(prompt) {
                Ok(text) => text,
                Err(e) => {
                    progress.eprintln(&format!("agent-harness: {e}"));
                    return exit::USAGE;
                }
            };
            let answer = TaskAnswer::default();
            let opts = ExecOptions {
                batch: batch_options(cfg, command, &progress, Some(answer.keeper())),
                name: name.clone(),
                text,
                agent: agent.clone(),
                tools: tools.clone(),
                max_turns: *max_turns,
            };
            // `--model`: the name every chat request of this run sends.
            let mut with_model = None;
            if let Some(m) = model {
                let mut own = cfg.clone();
                own.endpoint.model = Some(m.clone());
                with_model = Some(own);
            }
            let cfg = with_model.as_ref().unwrap_or(cfg);
            let code = exec_command(cfg, &opts, progress.clone()).await;
            // `-q` hides the log's lines, a failure's too: one line says
            // the task did not succeed and where its story is.
            if *quiet && code != exit::OK {
                progress.eprintln(&format!(
                    "agent-harness: exec {name} did not succeed (exit {code}); \
                     `agent-harness show {name}` tells why"
                ));
            }
            match output {
                Some(path) => answer.write_to(path, cfg, &progress, code),
                None => {
                    answer.print(&progress);
                    code
                }
            }
        }
        _ => exit::USAGE,
    }
}

/// How a command that runs tasks runs its batch and who is told, read from
/// its flags in this one place: the traces started once, from `[traces]`
/// (a replay's only with `--traces`; every eval variant's go to the first
/// config's collector), the live lines (never over a replay's report), and
/// `on_end`, told of each task. `run`'s `on_locked` is `run_inbox`'s.
pub(super) fn batch_options(
    cfg: &Config,
    command: &Command,
    progress: &Progress,
    on_end: Option<OnEnd>,
) -> BatchOptions {
    let at_once = |asked: &Option<u16>| asked.map_or(cfg.limits.concurrency, usize::from);
    let (dry_run, concurrency, traced, live) = match command {
        Command::Run {
            dry_run,
            concurrency,
            ..
        } => (*dry_run, at_once(concurrency), true, true),
        Command::RunTask { dry_run, .. } | Command::Exec { dry_run, .. } => {
            (*dry_run, 1, true, true)
        }
        Command::Eval { concurrency, .. } => (false, at_once(concurrency), true, true),
        Command::Replay { traces, .. } => (false, 1, *traces, false),
        _ => (false, 1, false, false),
    };
    BatchOptions {
        dry_run,
        concurrency,
        progress: if live {
            progress.clone()
        } else {
            Progress::hidden()
        },
        on_end,
        traces: traced.then(|| Traces::start(cfg)).flatten(),
        on_locked: None,
        before_unlock: None,
    }
}

async fn run_command(cfg: &Config, opts: RunOptions, progress: Progress) -> u8 {
    let cancel = CancellationToken::new();
    let harness = match TaskDeps::new(cfg, system_clock(), cancel.clone()) {
        Ok(deps) => deps,
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            remember::no_deps(cfg, &opts, &format!("{e:#}"));
            return exit::USAGE;
        }
    };
    tokio::spawn(watch_signals(cancel));
    let started = std::time::Instant::now();
    let ran = run_inbox(cfg, &harness, &opts).await;
    harness.shutdown().await;
    match ran {
        Ok(outcome) => {
            match &outcome {
                RunOutcome::Locked { wanted } => progress.eprintln(&format!(
                    "agent-harness: another run holds the lock {}; {}",
                    RunLock::path(&cfg.paths.state_dir()).display(),
                    match wanted {
                        Some(name) => format!("task {name:?} did not run: try again when it ends"),
                        None => "nothing to do".into(),
                    }
                )),
                RunOutcome::Unreachable { why, left } => progress.eprintln(&format!(
                    "agent-harness: the endpoint is unreachable, no task was touched ({left} left in the inbox): {why}"
                )),
                RunOutcome::Finished(tally) => {
                    progress.finish(&tally.describe(started.elapsed()));
                    // Paused for a budget: what was reached and when it
                    // resets is the log's last line too.
                    if let Some(why) = &tally.budget_exhausted
                        && outcome.exit_code() == exit::TEMPFAIL
                        && !progress.is_live()
                    {
                        tracing::warn!(
                            "budget: {why}; what is left waits in the inbox, nothing was filed for it"
                        );
                    }
                }
            }
            outcome.exit_code()
        }
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            exit::run_error(&e)
        }
    }
}

/// Drains the inbox as `opts` says and, unless it is a dry run, writes the
/// metrics textfile with the run's exit code and keeps how the run ended
/// beside the inbox for `status`, then tells `[notify]` (a `run` only:
/// `run-task` is a person at a prompt, not the timer) — the metrics first,
/// so a notification cut short by a kill loses nothing (they are written
/// again when a notification failed); how the traces and notifications
/// went is kept beside the inbox too. The run that found the lock taken
/// writes no metrics (the run holding it will), nor does a `run-task` name
/// typed wrong at a prompt: that is no run of the unattended setup.
pub async fn run_inbox(
    cfg: &Config,
    deps: &TaskDeps,
    opts: &RunOptions,
) -> anyhow::Result<RunOutcome> {
    let notifier = (!opts.batch.dry_run && opts.only.is_none())
        .then(|| Notifier::new(cfg))
        .flatten();
    let mut opts = opts.clone();
    if let Some(n) = &notifier {
        let starts = n.clone();
        opts.batch.on_locked = Some(OnLocked(Arc::new(move || starts.start())));
        // The digest's mark is taken while the run still holds the lock.
        let (claims, clock) = (n.clone(), deps.clock.clone());
        opts.batch.before_unlock = Some(OnLocked(Arc::new(move || claims.claim_digest(clock()))));
    }
    let end = drain::run(cfg, deps, &opts).await;
    // The last traces go before anything reads the run's end: at most
    // `[traces] flush_secs`.
    let lost_traces = match &opts.batch.traces {
        Some(traces) => Some(traces.finish(Some(&deps.cancel)).await),
        None => None,
    };
    let code = match &end.result {
        Ok(RunOutcome::Locked { .. }) => None,
        Err(e) if e.downcast_ref::<NameError>().is_some() => None,
        Ok(outcome) => Some(outcome.exit_code()),
        Err(e) => Some(exit::run_error(e)),
    };
    let metrics = code
        .filter(|_| !opts.batch.dry_run)
        .and_then(|code| Metrics::of(cfg, &end, code, notifier.is_some(), lost_traces));
    let written = notifier.as_ref().map_or(0, Notifier::failures);
    if let Some(m) = &metrics {
        m.write(written);
    }
    // What `status` reads the morning after (docs/operating.md, "The
    // morning after"), kept beside the inbox as the metrics are.
    if let Some(code) = code.filter(|_| !opts.batch.dry_run) {
        remember::last_run(cfg, opts.only.as_deref(), &end, code);
    }
    if let (Some(lost), Some(_)) = (lost_traces, code) {
        let sent = !end.summaries.is_empty();
        remember::delivered(
            cfg,
            Channel::Traces,
            (deps.clock)(),
            remember::traces(lost, sent),
        );
    }
    if let Some(n) = &notifier {
        match code {
            Some(code) => {
                n.end(exit::ending(code), &end, (deps.clock)(), &deps.cancel)
                    .await
            }
            None => n.log(&end, &deps.cancel).await,
        }
        if let Some(m) = &metrics
            && n.failures() != written
        {
            m.write(n.failures());
        }
        let outcome = remember::notifications(n.attempts(), n.failures(), n.last_error());
        remember::delivered(cfg, Channel::Notify, (deps.clock)(), outcome);
    }
    end.result
}

/// The Prometheus textfile of one run, when `[metrics] textfile` is set:
/// what the previous file carried is read once, so it may be written
/// again with this run's notification failures.
struct Metrics<'a> {
    path: &'a std::path::Path,
    end: &'a RunEnd,
    exit_code: u8,
    last_success: Option<f64>,
    /// The failed notifications the previous file counted, when `[notify]` is set.
    notify_before: Option<u64>,
    trace_export_failures: Option<u64>,
}

impl<'a> Metrics<'a> {
    fn of(
        cfg: &'a Config,
        end: &'a RunEnd,
        exit_code: u8,
        notified: bool,
        lost_traces: Option<u64>,
    ) -> Option<Metrics<'a>> {
        let path = cfg.metrics_textfile.as_deref()?;
        Some(Metrics {
            path,
            end,
            exit_code,
            last_success: metrics::last_success(path, end.started, end.duration, exit_code),
            notify_before: notified.then(|| metrics::notify_failures(path, 0)),
            trace_export_failures: lost_traces.map(|n| metrics::trace_export_failures(path, n)),
        })
    }

    /// Writes the file with this run's `notify_failures` so far.
    fn write(&self, notify_failures: u64) {
        let end = self.end;
        let text = metrics::render(&metrics::RunFacts {
            started: end.started,
            duration: end.duration,
            exit_code: self.exit_code,
            summaries: &end.summaries,
            last_success: self.last_success,
            ignored: end.ignored,
            servers_up: &end.servers_up,
            notify_failures: self
                .notify_before
                .map(|before| before.saturating_add(notify_failures)),
            trace_export_failures: self.trace_export_failures,
            budget: end.budget,
        });
        if let Err(e) = metrics::write(self.path, &text) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write the metrics textfile");
        }
    }
}

/// First SIGINT / SIGTERM: stop starting work and cancel what runs. Second: leave now.
pub(super) async fn watch_signals(cancel: CancellationToken) {
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
    // Not through the printer: the process leaves now, waiting on no lock
    // the live lines may hold; the line is a constant, so holds no secret.
    Printer::at_once("agent-harness: second signal, exiting at once");
    harness_tools::mcp::kill_all();
    #[expect(clippy::exit, reason = "a second signal ends the process now")]
    std::process::exit(i32::from(exit::TEMPFAIL));
}

/// For commands without an orderly stop (`test-runpod`, `replay`): a
/// signal kills the MCP servers they started, then the process (75).
pub(super) async fn exit_on_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return;
    };
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    harness_tools::mcp::kill_all();
    // As the second signal of a run: a constant line, straight out.
    Printer::at_once("agent-harness: stopped by a signal");
    #[expect(clippy::exit, reason = "a command without an orderly stop ends now")]
    std::process::exit(i32::from(exit::TEMPFAIL));
}

/// `run --json`: each task's summary as one JSON line on stdout, redacted,
/// as the task ends. A reader that went away stops nothing.
pub(super) fn summary_lines(progress: Progress) -> OnEnd {
    OnEnd(Arc::new(move |summary, _| {
        if let Ok(line) = serde_json::to_string(summary) {
            let mut out = progress.stdout();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }))
}

/// `run-task`'s answer: kept as the task ends, printed on stdout once the
/// run is over — the text of the final answer, or for a structured answer
/// the JSON `result.json` holds.
#[derive(Clone, Default)]
pub(super) struct TaskAnswer(Arc<Mutex<Option<String>>>);

impl TaskAnswer {
    pub(super) fn keeper(&self) -> OnEnd {
        let kept = self.0.clone();
        OnEnd(Arc::new(move |summary, result| {
            let text = match result {
                Some(value) => serde_json::to_string_pretty(value).ok(),
                None => summary.final_answer.clone(),
            };
            *harness_base::sync::lock(&kept) = text;
        }))
    }

    /// `exec -o FILE`: the answer (redacted, as on stdout) written to
    /// FILE whole — a new file, readable by its owner alone like the
    /// records, renamed over FILE — so a script never reads half an
    /// answer. A run with no answer leaves FILE as it was (a file the
    /// operator keeps is never removed), and the exit code says it failed
    /// (1, 75 or 2). A file that cannot be written fails the command.
    pub(super) fn write_to(
        &self,
        path: &std::path::Path,
        cfg: &Config,
        progress: &Progress,
        code: u8,
    ) -> u8 {
        let kept = harness_base::sync::lock(&self.0);
        let written = match kept.as_deref() {
            Some(text) => {
                let text = cfg.redactor().redact(format!("{}\n", text.trim_end()));
                in_folder_of(path, |folder, name| {
                    folder.replace(name, text.as_bytes(), 0o600)
                })
            }
            None => {
                progress.eprintln(&format!(
                    "agent-harness: no answer this run: {} left as it was",
                    path.display()
                ));
                Ok(())
            }
        };
        match written {
            Ok(()) => code,
            Err(e) => {
                progress.eprintln(&format!(
                    "agent-harness: writing the answer to {}: {e}",
                    path.display()
                ));
                if code == exit::OK { exit::FAILED } else { code }
            }
        }
    }

    pub(super) fn print(&self, progress: &Progress) {
        let kept = harness_base::sync::lock(&self.0);
        if let Some(text) = kept.as_deref() {
            let text = text.trim_end();
            // Redacted by the printer, whole lines at a time.
            let mut out = progress.stdout();
            // On a terminal, what the model wrote cannot move the cursor,
            // retitle the window or write the clipboard; a pipe gets it as is.
            let _ = if out.is_terminal() {
                let lines: Vec<String> = text
                    .split('\n')
                    .map(|l| harness_base::text::printable(l).into_owned())
                    .collect();
                writeln!(out, "{}", lines.join("\n"))
            } else {
                writeln!(out, "{text}")
            };
        }
    }
}

/// `exec`'s task text: the argument, or with `-` stdin — at most a task
/// file's size, UTF-8.
pub(super) fn task_text(prompt: &str) -> Result<String, String> {
    if prompt != "-" {
        return Ok(prompt.to_string());
    }
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return Err("`exec -` reads the task from stdin, which is a terminal: pipe the task in, or give it as the argument".into());
    }
    let cap = harness_inbox::MAX_TASK_BYTES;
    let bytes = stdin_task()
        .map_err(|e| format!("reading the task from stdin: {e}"))?
        .ok_or_else(|| format!("the task on stdin is over {cap} bytes"))?;
    String::from_utf8(bytes).map_err(|_| "the task on stdin is not valid UTF-8".to_string())
}

/// `f` on the folder holding `path` and the file's name in it.
fn in_folder_of(
    path: &std::path::Path,
    f: impl FnOnce(&harness_base::folder::Folder, &str) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    f(&harness_base::folder::Folder::open_root(dir)?, name)
}

/// `exec`: the one task under signal handling; its exit code is the task's.
pub(super) async fn exec_command(cfg: &Config, opts: &ExecOptions, progress: Progress) -> u8 {
    let cancel = CancellationToken::new();
    let deps = match TaskDeps::new(cfg, system_clock(), cancel.clone()) {
        Ok(d) => d,
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            return exit::USAGE;
        }
    };
    tokio::spawn(watch_signals(cancel));
    let ran = drain::exec::exec(cfg, &deps, opts).await;
    if let Some(traces) = &opts.batch.traces {
        traces.finish(Some(&deps.cancel)).await;
    }
    deps.shutdown().await;
    match ran {
        Ok(outcome) => {
            if let RunOutcome::Finished(t) = &outcome
                && let Some(why) = &t.budget_exhausted
            {
                progress.eprintln(&format!("agent-harness: budget: {why}; the task did not finish, and goes on from its records when run again"));
            }
            outcome.exit_code()
        }
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            exit::run_error(&e)
        }
    }
}

/// Stdin, when it holds at most a task file's size (`None`: more).
pub(super) fn stdin_task() -> std::io::Result<Option<Vec<u8>>> {
    let cap = harness_inbox::MAX_TASK_BYTES;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::io::stdin().lock(), cap + 1),
        &mut bytes,
    )?;
    Ok((bytes.len() as u64 <= cap).then_some(bytes))
}
