//! The commands (docs/operating.md, "Commands"): each reads the config, does
//! its work, and returns the process exit code; those that run tasks fill their
//! shared options in one place (`run::batch_options`). `main.rs` calls
//! [`main`].

// The one room that prints: every other reports through values, tracing
// or the display it is handed. It prints through `display`'s one writer
// (`Progress::eprintln`, `Progress::stdout`), which redacts every secret;
// the print macros are denied here too, and `std::io::stdout`/`stderr`
// disallowed (clippy.toml).

mod check;
pub mod cli;
mod digest;
mod eval;
pub mod exit;
mod init;
mod logs;
mod manual;
mod remember;
mod run;
mod show;
pub mod smoke;
mod status;
mod submit;
mod upkeep;

use check::check_command;
use eval::eval_command;
pub use exit::{replay_exit, smoke_exit};
use logs::logs_command;
pub use run::run_inbox;
use upkeep::{prune_command, requeue_command};

use crate::cli::{Cli, Command};
use harness_config as config;
use harness_config::{Config, ConfigError};
use harness_display::Progress;
use harness_endpoint::Endpoint;

/// Runs a parsed command line and returns the process exit code;
/// `progress` is the live display the binary set up (also its log writer).
pub fn main(cli: Cli, progress: Progress) -> u8 {
    // Only the commands that run tasks (or call the endpoint) need worker
    // threads; the others do their work on this one.
    let mut builder = match cli.command {
        Command::Run { .. }
        | Command::RunTask { .. }
        | Command::Exec { .. }
        | Command::Eval { .. }
        | Command::Replay { .. }
        | Command::TestRunpod => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = match builder
        .enable_all()
        // Blocking threads parse noteworx answers as they stream; the
        // systemd unit's TasksMax= leaves room for this many.
        .max_blocking_threads(64)
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            progress.eprintln(&format!(
                "agent-harness: cannot start the async runtime: {e}"
            ));
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
    // Made from the command line alone: no config is read.
    if let Command::Completions { .. } | Command::Man = &cli.command {
        return manual::print(&cli.command, &progress);
    }
    if let Command::Init {
        dir,
        openai,
        runpod,
    } = &cli.command
    {
        let endpoint = match (openai, runpod) {
            (Some(url), _) => init::ChosenEndpoint::Openai(url),
            (None, Some(id)) => init::ChosenEndpoint::Runpod(id),
            (None, None) => return exit::USAGE,
        };
        return init::init_command(dir.as_deref(), &endpoint, env, &progress);
    }
    let cfg = match load_config(&cli, env) {
        Ok(c) => c,
        Err(e) => {
            let code = config_error(&progress, &e);
            stopped_at_config(&cli, env, &e, code);
            return code;
        }
    };
    progress.redact_with(cfg.redactor());
    match &cli.command {
        Command::Run { .. } | Command::RunTask { .. } | Command::Exec { .. } => {
            run::command(&cfg, &cli.command, progress).await
        }
        Command::Check => check_command(&cfg, &progress),
        Command::Init { .. } => exit::USAGE,
        Command::Prune { dry_run } => prune_command(&cfg, *dry_run, &progress),
        Command::Requeue { target, all_failed } => {
            requeue_command(&cfg, target.as_deref(), *all_failed, &progress)
        }
        Command::Rerun { target } => upkeep::rerun_command(&cfg, target, &progress),
        Command::Status { json, utc } => status::status_command(&cfg, *json, *utc, &progress),
        Command::Replay { .. } => replay_command(&cfg, &cli.command, &progress).await,
        Command::Eval { .. } => {
            eval_command(&cli, &cfg, env, &progress, &mut progress.stdout()).await
        }
        Command::Runs { .. } | Command::Report { .. } | Command::Digest { .. } => {
            logs_command(&cfg, &cli.command, &progress)
        }
        Command::Show { which, json, utc } => {
            let zone = logs::zone_of(&cfg, *utc);
            show::show_command(&cfg, which.as_deref(), *json, &zone, &progress)
        }
        Command::Submit { files, name } => {
            submit::submit_command(&cfg, files, name.as_deref(), &progress)
        }
        Command::Completions { .. } | Command::Man => manual::print(&cli.command, &progress),
        Command::TestRunpod => match Endpoint::new(&cfg.endpoint, &cfg.tls.trust)
            .map(|ep| ep.redacting(cfg.redactor()))
        {
            Ok(ep) => {
                tokio::spawn(run::exit_on_signal());
                smoke_exit(smoke::test_endpoint(&cfg, &ep, &mut progress.stdout()).await)
            }
            Err(e) => {
                progress.eprintln(&format!("agent-harness: {e:#}"));
                exit::FAILED
            }
        },
    }
}

/// `replay RUN_DIR`: the recorded run again, its first difference printed.
async fn replay_command(cfg: &Config, command: &Command, progress: &Progress) -> u8 {
    let Command::Replay {
        run_dir,
        from_turn,
        live_writes,
        traces,
    } = command
    else {
        return exit::USAGE;
    };
    if *traces && cfg.traces.is_none() {
        progress.eprintln(
            "agent-harness: --traces: the config sets no [traces] endpoint to send the trace to",
        );
        return exit::USAGE;
    }
    let opts = harness_lab::replay::ReplayOptions {
        batch: run::batch_options(cfg, command, progress, None),
        run_dir: run_dir.clone(),
        from_turn: *from_turn,
        live_writes: *live_writes,
    };
    tokio::spawn(run::exit_on_signal());
    let end = harness_lab::replay::replay(cfg, &opts, &mut progress.stdout()).await;
    if let Some(traces) = &opts.batch.traces {
        traces.finish(None).await;
    }
    replay_exit(end)
}

/// The config: `runs`, `show`, `report` and `digest` read only the logs
/// folder and the state beside the inbox, `status` only the state beside
/// the inbox and the records, `submit` only checks task files,
/// `requeue`, `rerun` and `prune` only move and remove files, and a
/// replay without `--from-turn` contacts nothing, so none of them needs a
/// secret (an operator's shell without the service's key runs them).
fn load_config(cli: &Cli, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let offline = matches!(
        cli.command,
        Command::Runs { .. }
            | Command::Report { .. }
            | Command::Show { .. }
            | Command::Status { .. }
            | Command::Digest { .. }
            | Command::Submit { .. }
            | Command::Requeue { .. }
            | Command::Rerun { .. }
            | Command::Prune { .. }
            | Command::Replay {
                from_turn: None,
                traces: false,
                ..
            }
    );
    let path = config_path(cli, env)?;
    let mut cfg = if offline {
        Config::load_offline(&path, env)
    } else {
        Config::load(&path, env)
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

/// The config file to read: `--config`, `AGENT_HARNESS_CONFIG`, then the
/// first of `./agent.toml`, the user's and the system's that exists.
fn config_path(
    cli: &Cli,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<std::path::PathBuf, ConfigError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| std::path::PathBuf::from("."));
    let home = env("HOME")
        .filter(|h| !h.is_empty())
        .map(std::path::PathBuf::from);
    config::locate(&config::Lookup {
        flag: cli.config.as_deref(),
        env,
        cwd: &cwd,
        home: home.as_deref(),
        exists: &|p: &std::path::Path| p.exists(),
        judge: &|p: &std::path::Path| harness_base::owner::check_file(p),
    })
}

/// A `run` or `run-task` (not a dry run) whose config does not load
/// (a secret it names is not set, say) is kept as the last run when the
/// config loads without its secrets: the paths are known, and `status`
/// must not show the last run that got going as the last run.
fn stopped_at_config(cli: &Cli, env: &dyn Fn(&str) -> Option<String>, e: &ConfigError, code: u8) {
    let only = match &cli.command {
        Command::Run { dry_run: false, .. } => None,
        Command::RunTask {
            name,
            dry_run: false,
            ..
        } => Some(name.as_str()),
        _ => return,
    };
    let Ok(cfg) = config_path(cli, env).and_then(|path| Config::load_offline(&path, env)) else {
        return;
    };
    let at = (harness_agent::deps::system_clock())();
    remember::stopped_early(&cfg, only, at, code, &format!("configuration error: {e}"));
}

/// A config that does not load. Before the first one loads no secret has
/// been read, and the printer redacts nothing yet; after (an eval's
/// variant), it redacts the first one's.
fn config_error(progress: &Progress, e: &ConfigError) -> u8 {
    progress.eprintln(&format!("agent-harness: configuration error: {e}"));
    exit::USAGE
}
