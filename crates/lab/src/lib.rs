//! Studies of the agent that call the engine and never change it, each a
//! batch of the drain's: `eval` (variants × tasks × repeats, pass@k and
//! pass^k: README, Eval), its statistics, and `replay` (a recorded run
//! again: README, Replay).

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod eval;
pub mod replay;
pub mod stats;
