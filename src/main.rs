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
    // `exec -q`: only the answer; on stderr, only errors.
    let quiet = matches!(
        cli.command,
        agent_harness::app::cli::Command::Exec { quiet: true, .. }
    );
    let level = if quiet {
        tracing::Level::ERROR
    } else {
        tracing::Level::INFO
    };
    // `target=level` pairs and a default level: parsed without a regex
    // engine, which is why this is not an `EnvFilter`. One that does not
    // parse leaves the default.
    let filter = std::env::var("AGENT_HARNESS_LOG")
        .ok()
        .and_then(|v| rooms_named(&v).parse::<Targets>().ok())
        .unwrap_or_else(|| {
            Targets::new()
                .with_target("agent_harness", level)
                .with_target(ROOMS, level)
                .with_target("rmcp", tracing_subscriber::filter::LevelFilter::OFF)
                .with_default(tracing::Level::WARN)
        });
    let terminal = agent_harness::display::stderr_is_terminal()
        && std::env::var("TERM").map_or(true, |t| t != "dumb");
    let ansi = terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let progress = if terminal && !quiet {
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

/// Where the rooms log from: each room is a crate `harness_<room>`, and a
/// target matches every target it begins.
const ROOMS: &str = "harness_";

/// `AGENT_HARNESS_LOG` as written, with `agent_harness` also naming the
/// rooms' crates: `agent_harness=debug` turns on every room, and
/// `agent_harness::drain=debug` the `harness_drain` crate.
fn rooms_named(spec: &str) -> String {
    spec.split(',')
        .flat_map(|directive| {
            let room = directive
                .strip_prefix("agent_harness::")
                .map(|rest| format!("{ROOMS}{rest}"))
                .or_else(|| {
                    let level = directive.strip_prefix("agent_harness")?;
                    (level.is_empty() || level.starts_with(['=', '[']))
                        .then(|| format!("{ROOMS}{level}"))
                });
            std::iter::once(directive.to_string()).chain(room)
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::rooms_named;

    #[test]
    fn agent_harness_in_the_log_filter_names_the_rooms_crates_too() {
        assert_eq!(
            rooms_named("agent_harness=debug"),
            "agent_harness=debug,harness_=debug"
        );
        assert_eq!(
            rooms_named("warn,agent_harness::drain=trace,rmcp=off"),
            "warn,agent_harness::drain=trace,harness_drain=trace,rmcp=off"
        );
        assert_eq!(rooms_named("agent_harness"), "agent_harness,harness_");
        assert_eq!(
            rooms_named("agent_harness[task]=debug"),
            "agent_harness[task]=debug,harness_[task]=debug"
        );
        assert_eq!(
            rooms_named("agent_harness_x=debug"),
            "agent_harness_x=debug"
        );
        assert_eq!(
            rooms_named("agent_harnessing=info"),
            "agent_harnessing=info"
        );
    }
}
