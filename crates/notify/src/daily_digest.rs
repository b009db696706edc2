//! The day's digest by mail (docs/operating.md, "Digest and mail"): whether
//! this run sends it, decided and marked pending while the run still holds
//! the lock ([`Notifier::claim_digest`]), so no two runs both send it; made
//! at the run's end from the records with how the run ended, mailed; its
//! mark kept as sent once the server accepted the mail, and given back when
//! it did not go — each only while the file still holds this run's mark. A
//! run killed in between leaves a pending mark that the next run past
//! `PENDING_FOR` counts as not sent.

use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};

use harness_base::sync::lock;
use harness_drain::RunEnd;
use harness_outputs::digest::{self, Digest, Period};
use harness_state::LastDigest;

use super::Notifier;
use super::bodies::status_lines;
use harness_drain::{again_in, program};

/// Whether this run sends the day's digest.
#[derive(Debug, Clone, Copy)]
pub(super) enum Claim {
    /// Not decided: the run never held the lock (it stopped before).
    Undecided,
    /// Not due, or its mark could not be kept.
    NotDue,
    /// Due, and the mark taken.
    Taken(DigestTurn),
}

/// The digest's mark this run took.
#[derive(Debug, Clone, Copy)]
pub(super) struct DigestTurn {
    /// When it was taken: the digest covers runs up to then.
    at: DateTime<Utc>,
    /// The mark before (`None`: no digest yet), given back when the mail
    /// does not go.
    previous: Option<DateTime<Utc>>,
}

impl Notifier {
    /// Whether this run sends the day's digest, decided at `now` while the
    /// run still holds the lock (`drain`'s `before_unlock`): a run after it
    /// finds the mark taken. The mail goes at [`Notifier::end`].
    pub fn claim_digest(&self, now: DateTime<Utc>) {
        let claim = match self.take_mark(now) {
            Some(turn) => Claim::Taken(turn),
            None => Claim::NotDue,
        };
        *lock(&self.0.digest) = claim;
    }

    /// The digest's turn of a run ending at `now`: as decided under the
    /// lock, or — a run that stopped before it held the lock — decided now.
    pub(super) fn digest_turn(&self, now: DateTime<Utc>) -> Option<DigestTurn> {
        let claim = *lock(&self.0.digest);
        match claim {
            Claim::Taken(turn) => Some(turn),
            Claim::NotDue => None,
            Claim::Undecided => self.take_mark(now),
        }
    }

    /// Whether the day's digest is due at `now` (docs/operating.md,
    /// "Digest and mail"), and if so its mark, taken: `None` when it is
    /// not due, or its mark cannot be kept (a warning and a count: a
    /// digest that cannot be marked would go out with every run).
    fn take_mark(&self, now: DateTime<Utc>) -> Option<DigestTurn> {
        self.0.mailer.as_ref()?;
        let cfg = &self.0.cfg;
        let state_dir = cfg.paths.state_dir();
        let standing = LastDigest::standing(&state_dir, now);
        let previous = standing.sent_at;
        if standing.sending || !digest::due(now, cfg.notify.digest_at, &cfg.timezone, previous) {
            return None;
        }
        if let Err(e) = LastDigest::take(&state_dir, now, previous) {
            self.0.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "the digest was not sent: the time it goes out cannot be kept beside the inbox ({e:#}), so every run would send it; the run's exit code stands"
            );
            return None;
        }
        Some(DigestTurn { at: now, previous })
    }

    /// A digest the mail server accepted keeps its mark as sent.
    fn keep_sent(&self, turn: DigestTurn) {
        match LastDigest::sent(&self.0.cfg.paths.state_dir(), turn.at) {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(
                    "the digest went out, but its mark is no longer this run's: it is left as it is"
                )
            }
            Err(e) => tracing::warn!(
                "the digest went out, but its mark could not be kept as sent ({e:#}): the next run may send this period again"
            ),
        }
    }

    /// A digest that did not go out (failed, or cut) gives its mark back,
    /// so the next run sends it — unless another run's mark is there now.
    pub(super) fn give_back(&self, turn: DigestTurn) {
        match LastDigest::give_back(&self.0.cfg.paths.state_dir(), turn.at, turn.previous) {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!("the digest's mark is no longer this run's: it is left as it is")
            }
            Err(e) => tracing::warn!(
                "the digest's mark could not be given back ({e:#}); the next digest starts from this run"
            ),
        }
    }

    /// The digest of what happened since the turn's previous mark (the
    /// day before when none went out yet) up to its own, with how this
    /// run ended (`code`, `end`), mailed; whether it went.
    pub(super) async fn send_digest(&self, turn: DigestTurn, code: u8, end: &RunEnd) -> bool {
        let cfg = &self.0.cfg;
        let period = Period {
            since: turn.previous.unwrap_or(Period::day_before(turn.at)),
            until: turn.at,
            zone: cfg.timezone.clone(),
        };
        let ledger = end.budget;
        let paths = cfg.paths.clone();
        let program = program(cfg);
        let redactor = self.0.redactor.clone();
        // The records are read off the runtime: a big logs folder holds
        // up nothing else, and the end's bound still cuts the wait.
        let built = tokio::task::spawn_blocking(move || {
            let listing = harness_records::read_summaries(&paths.logs, turn.at);
            Digest::of(
                &listing,
                &period,
                ledger,
                &redactor,
                &again_in(&paths, &program),
            )
        })
        .await;
        let digest = match built {
            Ok(digest) => {
                digest.sent_by(code, &status_lines(end, &self.0.redactor), &self.0.redactor)
            }
            Err(e) => {
                self.0.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "the digest could not be made; the run's exit code stands");
                return false;
            }
        };
        // Marked sent at once: a kill after this sends nothing twice.
        let sent = self.mail(&digest.subject(), &digest.text()).await;
        if sent {
            self.keep_sent(turn);
        }
        sent
    }
}
