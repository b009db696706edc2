//! Studies of the agent that call the engine and never change it: `eval`
//! (variants × tasks × repeats, pass@k and pass^k, SPEC §14), its
//! statistics, and `replay` (a recorded run again, SPEC §13).

pub mod eval;
pub mod replay;
pub mod stats;
