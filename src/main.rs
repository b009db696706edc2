//! The `agent-harness` binary: parse the command line, set up diagnostics
//! on stderr, run the command, exit with its code.

use std::process::ExitCode;

use agent_harness::display::Progress;
use clap::Parser;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

fn main() -> ExitCode {
    let cli = agent_harness::app::cli::Cli::parse();
    // `target=level` pairs and a default level: parsed without a regex
    // engine, which is why this is not an `EnvFilter`. One that does not
    // parse leaves the default.
    let filter = std::env::var("AGENT_HARNESS_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| {
            Targets::new()
                .with_target("agent_harness", tracing::Level::INFO)
                .with_target("rmcp", tracing_subscriber::filter::LevelFilter::OFF)
                .with_default(tracing::Level::WARN)
        });
    let terminal = agent_harness::display::stderr_is_terminal()
        && std::env::var("TERM").map_or(true, |t| t != "dumb");
    let ansi = terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let progress = if terminal {
        Progress::live()
    } else {
        Progress::hidden()
    };
    tracing_subscriber::fmt()
        .with_writer(progress.clone())
        .with_ansi(ansi)
        .with_target(false)
        .finish()
        .with(filter)
        .init();
    // rmcp is off: its warnings quote whatever an MCP server sent (any
    // number of lines, megabytes each); the harness says what matters.
    // A panic is a bug: one line through the log (and its redaction), and
    // the task it happened in ends as `internal_error` while the run goes on.
    std::panic::set_hook(Box::new(|info| {
        tracing::error!("internal error (a bug; please report it): {info}");
    }));
    ExitCode::from(agent_harness::app::main(cli, progress))
}
