//! A run's error in the harness's own words (docs/operating.md, "Notify"):
//! what every message made for a person — the failure webhook and mail,
//! the ping's lines, the digest — says of a task that did not succeed.
//! Where a summary's error would quote the model (a value off the schema,
//! a repeated block or call, a missed expectation) or the server (which
//! may quote the request, and so the model), it says what happened
//! instead; any other error is given whole, for the caller to redact,
//! clip and escape.

use std::borrow::Cow;

use harness_agent::StopReason;

use super::Summary;

impl Summary {
    /// The error, in the harness's own words when the error would quote
    /// the model or the server; `None` when the summary has no error and
    /// its stop reason quotes nothing.
    pub fn error_in_own_words(&self) -> Option<Cow<'_, str>> {
        let instead = match self.stop_reason {
            StopReason::InvalidAnswer => "the answer did not match the output schema",
            StopReason::Repetition => "a reply repeated one block until max_tokens",
            StopReason::LoopDetected => "the model kept repeating the same call",
            StopReason::ExpectationFailed => "the answer missed its [expect] checks",
            // The diagnosis is the harness's; the server's words after it
            // are left out.
            StopReason::SetupFault => {
                return self
                    .error
                    .as_deref()
                    .map(|e| Cow::Borrowed(harness_config::setup::in_own_words(e)));
            }
            StopReason::EndpointError => {
                let status = self.error.as_deref().and_then(http_status);
                return Some(Cow::Owned(match status {
                    Some(status) => format!(
                        "the endpoint's answer ended the task (HTTP {status}; its summary.json has the server's words)"
                    ),
                    None => "the endpoint's answer ended the task (its summary.json has the server's words)".into(),
                }));
            }
            _ => return self.error.as_deref().map(Cow::Borrowed),
        };
        Some(Cow::Owned(format!(
            "{instead} (its summary.json says more)"
        )))
    }
}

/// The status in an error's first `HTTP NNN`.
fn http_status(error: &str) -> Option<u16> {
    let at = error.find("HTTP ")? + 5;
    let digits = error.get(at..at + 3)?;
    digits.parse().ok().filter(|n| (100..600).contains(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(reason: StopReason, error: &str) -> Summary {
        let at = chrono::DateTime::parse_from_rfc3339("2026-04-09T06:15:00Z")
            .unwrap()
            .to_utc();
        let mut s = Summary::blank("t", "20260409T061500Z", at);
        s.stop_reason = reason;
        s.error = Some(error.into());
        s
    }

    #[test]
    fn an_errors_http_status_is_read_from_its_words() {
        assert_eq!(
            http_status("the endpoint rejected the request (HTTP 400): x"),
            Some(400)
        );
        assert_eq!(http_status("HTTP 9999"), None);
        assert_eq!(http_status("no status"), None);
    }

    #[test]
    fn an_error_that_quotes_the_model_or_the_server_is_never_repeated() {
        for reason in [
            StopReason::InvalidAnswer,
            StopReason::Repetition,
            StopReason::LoopDetected,
            StopReason::ExpectationFailed,
            StopReason::EndpointError,
        ] {
            let s = failed(reason, "HTTP 400: the model said QUOTED-ANSWER");
            let words = s.error_in_own_words().unwrap();
            assert!(!words.contains("QUOTED-ANSWER"), "{reason:?}: {words}");
        }
        assert_eq!(
            failed(StopReason::EndpointError, "rejected (HTTP 429): slow down")
                .error_in_own_words()
                .as_deref(),
            Some(
                "the endpoint's answer ended the task (HTTP 429; its summary.json has the server's words)"
            )
        );
        assert_eq!(
            failed(StopReason::MaxTurns, "ran out of turns\nafter 8")
                .error_in_own_words()
                .as_deref(),
            Some("ran out of turns\nafter 8")
        );
    }
}
