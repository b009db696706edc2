//! `digest [--since WHEN] [--json]` (docs/operating.md, "Digest and mail"):
//! what happened since the last mailed digest (the day before, when none
//! went out yet), or since WHEN, printed. Printing it moves no mark: only a
//! mailed digest does, so a look at a prompt never takes anything out of
//! the next morning's mail. Reads the records as `runs` does (the folders
//! it could not read are said on stderr and in the digest), and the state
//! beside the inbox; none of the config's secrets.

use std::io::Write;

use super::exit;
use harness_agent::deps::system_clock;
use harness_base::text::{printable, printable_json};
use harness_config::Config;
use harness_display::Progress;
use harness_drain::{again_in, program};
use harness_outputs::digest::{Digest, Period};
use harness_records::Listing;
use harness_state::{LastDigest, SpendToday};

/// The digest of `listing` (the logs as `runs` reads them, its skipped
/// and unreadable folders said already) since `since` or the last mailed
/// digest, printed as text or JSON.
pub(super) fn digest_command(
    cfg: &Config,
    listing: &Listing,
    since: Option<&str>,
    json: bool,
    progress: &Progress,
) -> u8 {
    let now = (system_clock())();
    let state_dir = cfg.paths.state_dir();
    let since = match since {
        Some(text) => match harness_base::time::since(text, now, &cfg.timezone) {
            Ok(at) => at,
            Err(why) => {
                progress.eprintln(&format!("agent-harness: --since: {why}"));
                return exit::USAGE;
            }
        },
        None => LastDigest::read(&state_dir, now).unwrap_or(Period::day_before(now)),
    };
    let period = Period {
        since,
        until: now,
        zone: cfg.timezone.clone(),
    };
    // Without a daily limit the ledger holds nothing to say: not read. One
    // that cannot be read or trusted counts nothing, as a run counts it,
    // and is said: its "0 tokens" is not the day's.
    let ledger = cfg.budget.daily().then(|| {
        let (spent, why) = SpendToday::in_ledger(&state_dir, cfg.budget, now, &cfg.timezone);
        if let Some(why) = why {
            progress.eprintln(&format!(
                "agent-harness: digest: the budget ledger: {}",
                printable(&why)
            ));
        }
        spent
    });
    let digest = Digest::of(
        listing,
        &period,
        ledger,
        &cfg.redactor(),
        &again_in(&cfg.paths, &program(cfg)),
    );
    let mut out = progress.stdout();
    let written = if json {
        let text = serde_json::to_string_pretty(&digest).unwrap_or_default();
        writeln!(out, "{}", printable_json(&text))
    } else {
        write!(out, "{}", digest.text())
    }
    .and_then(|()| out.flush());
    exit::of_listing(written, listing.unreadable.is_empty(), progress)
}
