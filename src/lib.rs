//! agent-harness: a one-shot batch runner for unattended LLM agent tasks.
//!
//! # Layout
//!
//! A task travels through the modules in this order:
//!
//! - [`cli`] — the command line (clap structs only); [`commands`] — what each does.
//! - [`config`] — the TOML file → one resolved [`config::Config`]; secrets read once.
//! - [`harness`] — what every task of a run shares: clients, clock, stop signal.
//! - [`lock`] — the single-instance lock held for a whole run; [`folders`] —
//!   the folders a run needs, checked and created, each named by its key.
//! - [`inbox`] — listing, parsing (`+++` frontmatter + body), moving task
//!   files, and attempt counts.
//! - [`run`] — drains the inbox — per task: records, loop, summary, move.
//! - [`agent`] — the bounded tool-calling loop, its context budget, and the
//!   [`agent::TaskEvent`] stream it reports every step to.
//! - [`chat`] — the typed chat-completions wire format and request building.
//! - [`reply`] — reading a reply — thinking, text-form tool calls, cut-offs.
//! - [`endpoint`] — the chat client (`openai` and `runpod` kinds) with retries.
//! - [`tools`] — the seven tools — schemas, validation, dispatch — with
//!   [`tools::noteworx`] and [`tools::webfetch`] bodies; [`noteworx`] is its HTTP client.
//! - [`records`] — the task's events as `conversation.jsonl`, `tools.jsonl`,
//!   `run.log`; `summary.json`.
//! - [`progress`] — the live lines on a terminal, and the log writer beside them.
//! - [`setup`] — which answers mean the setup is wrong (a refused key, a
//!   wrong route) and what the operator is told.
//! - [`smoke`] — `test-runpod`; [`replay`] — a recorded run again, no network;
//!   [`expect`] — what a task must achieve; [`eval`] — pass rates of a suite;
//!   [`report`] — the static HTML report; [`metrics`] — the Prometheus textfile;
//!   [`schema`] — JSON Schemas final answers must match.
//! - [`text`], [`http`], [`lenient`], [`file`] — small helpers: characters
//!   and lines; capped bodies; reading server fields without building what
//!   is not kept; reading a named local file only when it is a regular one.
//!
//! `main.rs` only parses, sets up tracing (deciding whether stderr gets live
//! lines) and calls [`commands::main`].

pub mod agent;
pub mod chat;
pub mod cli;
pub mod commands;
pub mod config;
pub mod endpoint;
pub mod eval;
pub mod expect;
pub mod file;
pub mod folders;
pub mod harness;
pub mod http;
pub mod inbox;
pub mod lenient;
pub mod lock;
pub mod metrics;
pub mod noteworx;
pub mod progress;
pub mod records;
pub mod replay;
pub mod reply;
pub mod report;
pub mod run;
pub mod schema;
pub mod setup;
pub mod smoke;
pub mod text;
pub mod tools;
