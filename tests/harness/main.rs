//! Integration tests: whole tasks against in-process fake servers, driving
//! the same library code the binary runs, plus a few binary-level tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test may print what it saw (libtest captures it); the product never does.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// Test helpers are `pub` to share them between modules, not an API.
#![allow(unreachable_pub)]

mod common;

mod agent_loop;
mod answers;
mod budget;
mod call_budgets;
mod check;
mod cli;
mod counting;
mod digest;
mod eval;
mod eval_decides;
mod exec;
mod first_hour;
mod folders;
mod forged_turns_and_secrets;
mod ignored_entries;
mod inbox_runs;
mod isolation;
mod json_calls;
mod mail;
mod mcp;
mod mcp_deaths;
mod mcp_hostile;
mod mcp_listing;
mod mcp_secrets;
mod names;
mod names_and_files;
mod noteworx_tools;
mod notify;
mod numbers_and_sizes;
mod profiles;
mod real_stack;
mod records_hostile;
mod recurring;
mod replay;
mod report;
mod resume;
mod runpod;
mod setup_faults;
mod shared_ground;
mod show;
mod signals;
mod small_models;
mod status;
mod structure;
mod submit;
mod test_runpod;
mod tls;
mod traces;
mod upkeep;
mod webfetch;
mod wrong_service;
