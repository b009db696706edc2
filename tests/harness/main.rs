//! Integration tests: whole tasks against in-process fake servers, driving
//! the same library code the binary runs, plus a few binary-level tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod agent_loop;
mod check;
mod cli;
mod counting;
mod eval;
mod eval_decides;
mod hostile;
mod ignored_entries;
mod inbox_runs;
mod left_alone;
mod left_alone_ii;
mod mcp;
mod mcp_hostile;
mod mcp_hostile_ii;
mod noteworx_tools;
mod notify;
mod profiles;
mod real_stack;
mod records_hostile;
mod recurring;
mod replay;
mod report;
mod resume;
mod runpod;
mod shared_ground;
mod show;
mod signals;
mod small_models;
mod submit;
mod test_runpod;
mod webfetch;
mod wrong_service;
