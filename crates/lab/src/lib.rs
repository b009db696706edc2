//! Studies of the agent that call the engine and never change it, each a
//! batch of the drain's: `eval` (variants × tasks × repeats, pass@k and
//! pass^k), its statistics, and `replay` (a recorded run again): both in
//! docs/resume-replay-eval.md.

pub mod eval;
pub mod replay;
pub mod stats;
