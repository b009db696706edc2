//! What is made of a run's records for the operator, and what clears them
//! away: `report` (the static HTML report built from `logs/`), `digest`
//! (what happened since the last digest, for a person), `metrics` (the
//! Prometheus textfile of the last run), `runs`, `show` and `status` (what
//! those commands print) and `retention` (old run folders and `done/` task files
//! removed). They read `records`; none writes one.

pub mod digest;
pub mod metrics;
pub mod report;
pub mod retention;
pub mod runs;
pub mod show;
pub mod status;
