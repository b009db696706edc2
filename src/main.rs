//! The `agent-harness` binary: parse the command line, set up diagnostics
//! on stderr, run the command, exit with its code.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = agent_harness::cli::Cli::parse();
    let filter = EnvFilter::try_from_env("AGENT_HARNESS_LOG")
        .unwrap_or_else(|_| EnvFilter::new("agent_harness=info,warn"));
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .init();
    ExitCode::from(agent_harness::main(cli))
}
