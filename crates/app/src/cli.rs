//! The command line (docs/operating.md, "Commands"): clap derive structs only.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use harness_records::Status;

/// Runs unattended LLM agent tasks from an inbox folder against llama-server
/// or a RunPod endpoint, and records every run.
#[derive(Debug, Parser)]
#[command(name = "agent-harness", version, about, long_about = None)]
pub struct Cli {
    /// The config file (else AGENT_HARNESS_CONFIG, ./agent.toml,
    /// ~/.config/agent-harness/agent.toml, /etc/agent-harness/agent.toml).
    /// Relative paths inside it resolve against its folder.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a project in DIR (default: here): agent.toml, the task folders, the example task.
    #[command(group = clap::ArgGroup::new("endpoint").required(true))]
    Init {
        /// The folder to start it in (created when missing).
        dir: Option<PathBuf>,
        /// An OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 (llama-server).
        #[arg(long, value_name = "URL", group = "endpoint")]
        openai: Option<String>,
        /// A RunPod serverless endpoint's id (the key is read from RUNPOD_API_KEY).
        #[arg(long, value_name = "ENDPOINT_ID", group = "endpoint")]
        runpod: Option<String>,
    },
    /// Drain the inbox: every *.md in it, oldest file name first.
    Run {
        /// Run up to N tasks at once (default: `[limits] concurrency`).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
        concurrency: Option<u16>,
        /// Run the loop but turn every write tool into a logged intent; move no files, count no attempts.
        #[arg(long)]
        dry_run: bool,
        /// Print each task's summary as one JSON line on stdout as the task ends.
        #[arg(long)]
        json: bool,
    },
    /// Run one inbox entry and print its answer: NAME is the file name without .md.
    RunTask {
        /// The task's file name, with or without .md (no path separators, no ..).
        #[arg(value_parser = task_name)]
        name: String,
        /// As for run: write tools become logged intents, the file stays put.
        #[arg(long)]
        dry_run: bool,
        /// NAME is a recurring task: run it now, its slots left as they are.
        #[arg(long)]
        recurring: bool,
    },
    /// Run one task given here and print its answer: no inbox file, no lock, records under logs/<NAME>/.
    Exec {
        /// The task's text (frontmatter allowed), or - to read it from stdin.
        prompt: String,
        /// Run it as this [agents.NAME] profile.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
        /// Offer only these tools (comma-separated).
        #[arg(long, value_name = "A,B", value_delimiter = ',')]
        tools: Option<Vec<String>>,
        /// The task's name, for its records (with or without .md).
        #[arg(long, value_name = "NAME", default_value = "exec", value_parser = task_name)]
        name: String,
        /// Write tools become logged intents.
        #[arg(long)]
        dry_run: bool,
        /// Print only the answer: no progress or log lines on stderr unless it fails.
        #[arg(short, long)]
        quiet: bool,
        /// Write the answer to FILE instead of stdout. With no answer, FILE is left as it was: the exit code says the run failed.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// At most N turns for this run (over `[limits] max_turns` and the frontmatter).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        max_turns: Option<u32>,
        /// Send this model name in the chat requests (over `[openai] model`).
        #[arg(long, value_name = "NAME", value_parser = clap::builder::NonEmptyStringValueParser::new())]
        model: Option<String>,
    },
    /// Move a failed task back into the inbox, its attempt count reset.
    #[command(group = clap::ArgGroup::new("which").required(true))]
    Requeue {
        /// A task name (its newest failed file) or a run id (YYYYMMDDTHHMMSSZ).
        #[arg(group = "which", value_parser = task_name)]
        target: Option<String>,
        /// Every failed task (the newest file of each).
        #[arg(long, group = "which")]
        all_failed: bool,
    },
    /// Move a task that succeeded back into the inbox to run again, its attempt count reset.
    Rerun {
        /// A task name (its newest file in done/) or a run id (YYYYMMDDTHHMMSSZ).
        #[arg(value_parser = task_name)]
        target: String,
    },
    /// How things stand, on one screen: a run going now, the inbox, failed/, the last run,
    /// today's spend, the recurring slots, notifications and traces.
    Status {
        /// Print it as one JSON object instead.
        #[arg(long)]
        json: bool,
        /// Print times in UTC (default: `[schedule] timezone`).
        #[arg(long)]
        utc: bool,
    },
    /// Remove run folders and done/ files past [retention], as each run does at its end.
    Prune {
        /// Print what would be removed; remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Smoke-test the endpoint: reachability, one completion, one tool-call round trip.
    #[command(visible_alias = "test-endpoint")]
    TestRunpod,
    /// Validate the config and every inbox task without calling anything.
    Check,
    /// Re-run a recorded run with recorded replies and tool results; report the first request that differs.
    Replay {
        /// The run folder: logs/<task>/<run_id>.
        run_dir: PathBuf,
        /// Answer turns before N from the recording, then go on live against the configured endpoint and tools.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        from_turn: Option<u32>,
        /// With --from-turn: let write tools change things (default: dry-run intents).
        #[arg(long, requires = "from_turn")]
        live_writes: bool,
        /// Send the replayed task's trace to `[traces] endpoint` (a replay sends none by default).
        #[arg(long)]
        traces: bool,
    },
    /// Run every task file of DIR N times against the endpoint and report how often each passed.
    Eval {
        /// A folder of *.md task files (read, never moved).
        dir: PathBuf,
        /// Runs of each task per variant.
        #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
        repeat: u32,
        /// Run up to N tasks at once (default: `[limits] concurrency`).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
        concurrency: Option<u16>,
        /// Override one config key for the whole eval, e.g. model.temperature=0.3 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = key_value)]
        sets: Vec<(String, String)>,
        /// Run the suite once per value, e.g. model.replay_thinking=strip,keep (repeatable: every combination).
        #[arg(long, value_name = "KEY=V1,V2,…", value_parser = key_values)]
        matrix: Vec<(String, Vec<String>)>,
        /// Let write tools change things (default: dry-run intents).
        #[arg(long)]
        live_writes: bool,
        /// Print the report as one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// Exit 1 when the pass rate of any variant is below R (0 to 1).
        #[arg(long, value_name = "R", value_parser = rate)]
        min_pass_rate: Option<f64>,
    },
    /// Write a static HTML report of recent runs (index.html and a page per run).
    Report {
        /// Where to write it (default: <logs>/report).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Only runs of this task (with or without .md).
        #[arg(long, value_name = "NAME", value_parser = task_name)]
        task: Option<String>,
        /// At most N runs, newest first.
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: usize,
    },
    /// Show one run: what it did, where its file went, and its answer (default: the newest run).
    Show {
        /// A task name (its newest run), a run id (YYYYMMDDTHHMMSSZ), or NAME/RUN_ID.
        #[arg(value_parser = task_name)]
        which: Option<String>,
        /// Print the run's summary as JSON instead.
        #[arg(long)]
        json: bool,
        /// Print times in UTC (default: `[schedule] timezone`).
        #[arg(long)]
        utc: bool,
    },
    /// Check task files and place them in the inbox, each whole under its own name.
    Submit {
        /// Task files (*.md) to place in the inbox; - reads one from stdin (with --name).
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Place the one FILE given as NAME.md.
        #[arg(long, value_name = "NAME", value_parser = task_name)]
        name: Option<String>,
    },
    /// List recent runs from the logs folder, newest first.
    #[command(visible_alias = "list")]
    Runs {
        /// Only runs of this task.
        #[arg(long, value_name = "NAME", value_parser = task_name)]
        task: Option<String>,
        /// Only runs that started at or after WHEN: an age (90m, 12h, 3d, 2w), a date
        /// (2026-11-26: its midnight in `[schedule] timezone`, --utc or not) or an RFC 3339 time.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Only runs that ended so (repeatable).
        #[arg(long = "status", value_name = "STATUS", value_parser = status_value())]
        statuses: Vec<Status>,
        /// At most N runs.
        #[arg(long, value_name = "N", default_value_t = 20)]
        limit: usize,
        /// Print a JSON array instead of a table: the tasks running now
        /// (`"status": "running"`), then the summaries.
        #[arg(long)]
        json: bool,
        /// Print times in UTC (default: `[schedule] timezone`); --since's date is
        /// still its midnight there.
        #[arg(long)]
        utc: bool,
    },
    /// What happened since the last mailed digest: failures (and how to run each again), answers, changes, the period's spend.
    Digest {
        /// From this moment instead: an age (12h, 3d), a date (2026-11-26) or an RFC 3339 time.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Print the digest as one JSON object instead.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script (bash, zsh, fish) on stdout.
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print the man page (roff) on stdout.
    #[command(hide = true)]
    Man,
}

/// The shells `completions` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// A task name as typed: `NAME` or `NAME.md`.
fn task_name(s: &str) -> Result<String, String> {
    Ok(harness_inbox::task_name_of(s).to_string())
}

/// A run's status as its summary names it (`succeeded`, `failed`,
/// `interrupted`); another is refused naming those.
fn status_value() -> impl clap::builder::TypedValueParser<Value = Status> {
    use clap::builder::TypedValueParser;
    use strum::IntoEnumIterator;
    clap::builder::PossibleValuesParser::new(Status::iter().map(Status::as_str))
        .try_map(|s| s.parse::<Status>())
}

/// `KEY=VALUE`.
fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

/// A pass rate: a number from 0 to 1.
fn rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "{s:?} is not a pass rate from 0 to 1 (0.8 is 80 %)"
        )),
    }
}

/// `KEY=V1,V2,…`.
fn key_values(s: &str) -> Result<(String, Vec<String>), String> {
    let (k, v) = key_value(s)?;
    let values: Vec<String> = v.split(',').map(|x| x.trim().to_string()).collect();
    if values.iter().any(String::is_empty) {
        return Err(format!(
            "{s:?}: every value between the commas must be given"
        ));
    }
    Ok((k, values))
}
