//! agent-harness: a one-shot batch runner for unattended LLM agent tasks.
//!
//! # Rooms, lowest first
//!
//! Each room is a library crate (`crates/<room>`); a room depends only on
//! rooms in layers below its own, never one beside it: Cargo refuses a
//! cycle, and `scripts/check-structure` a dependency beside or above.
//!
//! 1. [`base`] — text, outbound HTTP (the client, its failures in words,
//!    the retry policy), capped bodies, lenient fields, regular-file reads,
//!    JSON Schemas, locks and times: helpers that know nothing of the
//!    product.
//! 2. [`config`] — the TOML file → one resolved [`config::Config`]; secrets
//!    read once; which answers mean the setup is wrong.
//! 3. [`state`] — the files beside the inbox: attempt counts, recurring
//!    slots, the day's spend, the run lock; one safe reader and writer.
//!    [`wire`] — the chat wire format and reading a reply.
//! 4. [`endpoint`] — the chat client (`openai`, `runpod`) with retries and
//!    recorded answers. [`inbox`] — task files: listing, `+++` frontmatter,
//!    moving. [`tools`] — the tool catalog, validation, dispatch, and the
//!    webfetch and noteworx bodies.
//! 5. [`agent`] — the bounded tool-calling loop, its context window, what a
//!    task must achieve, and the [`agent::TaskEvent`] stream.
//! 6. [`records`] — a run's files, written and read. [`display`] — the
//!    live lines on a terminal, and the one writer to stdout and stderr.
//! 7. [`outputs`] — what is made of the records for the operator: the
//!    HTML report, the metrics textfile; and retention. [`traces`] — each
//!    task's OpenTelemetry trace, closed as its summary says, sent to a
//!    collector.
//! 8. [`drain`] — the engine: the lock, the folders, the inbox and the
//!    recurring tasks drained, one task from file to records.
//! 9. [`lab`] — studies that call the engine: `eval`, its statistics,
//!    `replay`. [`notify`] — telling someone how a run ended: the ping,
//!    the failure report, the mail and the day's digest.
//! 10. [`app`] — the commands: the only room that prints and knows exit
//!     codes.
//!
//! `main.rs` only parses, sets up tracing (deciding whether stderr gets live
//! lines) and calls [`app::main`].

// Layer 1
pub use harness_base as base;
// Layer 2
pub use harness_config as config;
// Layer 3
pub use harness_state as state;
pub use harness_wire as wire;
// Layer 4
pub use harness_endpoint as endpoint;
pub use harness_inbox as inbox;
pub use harness_tools as tools;
// Layer 5
pub use harness_agent as agent;
// Layer 6
pub use harness_display as display;
pub use harness_records as records;
// Layer 7
pub use harness_outputs as outputs;
pub use harness_traces as traces;
// Layer 8
pub use harness_drain as drain;
// Layer 9
pub use harness_lab as lab;
pub use harness_notify as notify;
// Layer 10
pub use harness_app as app;
