//! `status [--json] [--utc]` (docs/operating.md, "The morning after"): the
//! setup on one screen, as `drain::overview` finds it, with no network and
//! no secret: a run going now, the inbox, `failed/`, the last run, today's
//! spend, the recurring slots, notifications and traces. Times are in
//! `[schedule] timezone` (`--utc`: UTC; the JSON's are UTC); every name a
//! file or a record gives is printed escaped. What could not be read is said
//! on stderr, and the exit code is 1.

use std::io::Write;

use super::exit;
use super::logs::zone_of;
use harness_agent::deps::system_clock;
use harness_base::text::{printable, printable_json};
use harness_config::Config;
use harness_display::Progress;
use harness_drain::overview;
use harness_outputs::status::text;

/// `status`: prints the overview; exit 0, or 1 when something could not be read.
pub(super) fn status_command(cfg: &Config, json: bool, utc: bool, progress: &Progress) -> u8 {
    let seen = overview(cfg, (system_clock())());
    let mut out = progress.stdout();
    let written = if json {
        serde_json::to_string_pretty(&seen)
            .map_err(std::io::Error::other)
            .and_then(|s| writeln!(out, "{}", printable_json(&s)))
    } else {
        write!(out, "{}", text(&seen, &zone_of(cfg, utc)))
    }
    .and_then(|()| out.flush());
    for problem in &seen.problems {
        progress.eprintln(&format!(
            "agent-harness: status: cannot read {}",
            printable(problem)
        ));
    }
    match seen.problems.is_empty() {
        true => exit::of_listing(written, true, progress),
        false => exit::FAILED,
    }
}
