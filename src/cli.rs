//! The command line (SPEC §2): clap derive structs only.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Runs unattended LLM agent tasks from an inbox folder against llama-server
/// or a RunPod endpoint, and records every run.
#[derive(Debug, Parser)]
#[command(name = "agent-harness", version, about, long_about = None)]
pub struct Cli {
    /// The config file. Relative paths inside it resolve against its folder.
    #[arg(long, global = true, env = "AGENT_HARNESS_CONFIG", default_value = crate::config::DEFAULT_CONFIG_FILE)]
    pub config: PathBuf,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Drain the inbox: every *.md in it, oldest file name first.
    Run {
        /// Run up to N tasks at once (default: `[limits] concurrency`).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
        concurrency: Option<u16>,
        /// Run the loop but turn every write tool into a logged intent; move no files, count no attempts.
        #[arg(long)]
        dry_run: bool,
    },
    /// Run one inbox entry: NAME is the file name without .md.
    RunTask {
        /// The task's file name without .md (no path separators, no ..).
        name: String,
        /// As for run: write tools become logged intents, the file stays put.
        #[arg(long)]
        dry_run: bool,
    },
    /// Smoke-test the endpoint: reachability, one completion, one tool-call round trip.
    TestRunpod,
    /// Validate the config and every inbox task without calling anything.
    Check,
    /// List recent runs from the logs folder, newest first.
    Runs {
        /// Only runs of this task.
        #[arg(long, value_name = "NAME")]
        task: Option<String>,
        /// At most N runs.
        #[arg(long, value_name = "N", default_value_t = 20)]
        limit: usize,
        /// Print a JSON array of summaries instead of a table.
        #[arg(long)]
        json: bool,
    },
}
