//! Trying a failed request again: one mechanism, each caller with its own
//! numbers. Waits double from `base` up to `cap`, each drawn between half
//! and all of that (clients that failed together do not come back
//! together), and are raised to what a server's `Retry-After` asks; at
//! most `max_retries`, none that would start after the caller's deadline,
//! and a wait the caller's cancellation cuts short.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How a call retries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// The first backoff; each retry doubles it.
    pub base: Duration,
    /// No single wait is longer (unless the server's `Retry-After` says so).
    pub cap: Duration,
    /// Retries after the first attempt of one call.
    pub max_retries: u32,
}

impl Default for RetryPolicy {
    /// A model call's: 1 s doubling to 30 s, 5 retries.
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(30),
            max_retries: 5,
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `n` (1-based): exponential with jitter in
    /// [50 %, 100 %], raised to the server's `Retry-After` when it asks for more.
    pub fn delay(&self, n: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << (n.saturating_sub(1)).min(16))
            .min(self.cap);
        let jittered = exp.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0));
        retry_after.map_or(jittered, |ra| ra.max(jittered))
    }

    /// The retries of one call, none of them to start after `deadline`.
    pub fn start(self, deadline: Instant) -> Backoff {
        Backoff {
            policy: self,
            retries: 0,
            deadline,
        }
    }
}

/// How one attempt of a call ended.
#[derive(Debug)]
pub enum Attempted<T, E> {
    /// What the call comes to: no further attempt.
    Done(Result<T, E>),
    /// A failure another attempt may mend, and the server's `Retry-After`.
    Again(E, Option<Duration>),
}

/// Why a call is not tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// Every retry the policy allows was made: `failures` attempts failed.
    Spent { failures: u32 },
    /// The next retry would start after the deadline (or later than a
    /// clock can tell).
    PastDeadline,
    /// The wait was cancelled.
    Cancelled,
}

/// The retries of one call so far.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: RetryPolicy,
    retries: u32,
    deadline: Instant,
}

impl Backoff {
    /// The retries granted so far: the attempt under way is number
    /// `retries() + 1`.
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// After a failed attempt: the wait before the next one, which is
    /// granted and counted; or why there is none.
    pub fn next(&mut self, retry_after: Option<Duration>) -> Result<Duration, GiveUp> {
        let n = self.retries.saturating_add(1);
        if n > self.policy.max_retries {
            return Err(GiveUp::Spent { failures: n });
        }
        let wait = self.policy.delay(n, retry_after, fastrand::f64());
        // A server may ask for any wait: past the deadline (or past what a
        // clock can hold) there is no retry.
        if Instant::now()
            .checked_add(wait)
            .is_none_or(|resume| resume >= self.deadline)
        {
            return Err(GiveUp::PastDeadline);
        }
        self.retries = n;
        Ok(wait)
    }

    /// A call: `attempt` made until it is done, or no retry is left (then
    /// its last failure).
    pub async fn run<T, E, F>(mut self, mut attempt: impl FnMut() -> F) -> Result<T, E>
    where
        F: Future<Output = Attempted<T, E>>,
    {
        loop {
            match attempt().await {
                Attempted::Done(result) => return result,
                Attempted::Again(failed, retry_after) => {
                    if self.wait(retry_after, None).await.is_err() {
                        return Err(failed);
                    }
                }
            }
        }
    }

    /// [`Backoff::next`], and its wait waited.
    pub async fn wait(
        &mut self,
        retry_after: Option<Duration>,
        cancel: Option<&CancellationToken>,
    ) -> Result<Duration, GiveUp> {
        let wait = self.next(retry_after)?;
        pause(wait, cancel).await?;
        Ok(wait)
    }
}

/// Sleeps `wait`, unless `cancel` fires first.
pub async fn pause(wait: Duration, cancel: Option<&CancellationToken>) -> Result<(), GiveUp> {
    let Some(cancel) = cancel else {
        tokio::time::sleep(wait).await;
        return Ok(());
    };
    tokio::select! {
        () = cancel.cancelled() => Err(GiveUp::Cancelled),
        () = tokio::time::sleep(wait) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_caps_and_honours_retry_after() {
        let p = RetryPolicy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(30),
            max_retries: 5,
        };
        assert_eq!(p.delay(1, None, 1.0), Duration::from_secs(1));
        assert_eq!(p.delay(3, None, 1.0), Duration::from_secs(4));
        assert_eq!(p.delay(3, None, 0.0), Duration::from_secs(2));
        assert_eq!(p.delay(10, None, 1.0), Duration::from_secs(30));
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(7)), 1.0),
            Duration::from_secs(7)
        );
        assert_eq!(
            p.delay(4, Some(Duration::from_secs(1)), 1.0),
            Duration::from_secs(8)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_retries_as_often_as_allowed_and_never_past_its_deadline() {
        let p = RetryPolicy {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(1),
            max_retries: 2,
        };
        let mut b = p.start(Instant::now() + Duration::from_secs(60));
        let first = b.wait(None, None).await.unwrap();
        assert!(first >= Duration::from_millis(250) && first <= Duration::from_millis(500));
        let second = b.wait(None, None).await.unwrap();
        assert!(second >= Duration::from_millis(500) && second <= Duration::from_secs(1));
        assert_eq!(b.retries(), 2);
        assert_eq!(b.next(None), Err(GiveUp::Spent { failures: 3 }));

        let mut b = p.start(Instant::now() + Duration::from_secs(5));
        assert_eq!(
            b.next(Some(Duration::from_secs(5))),
            Err(GiveUp::PastDeadline)
        );
        assert_eq!(b.next(Some(Duration::MAX)), Err(GiveUp::PastDeadline));
        assert_eq!(b.retries(), 0, "a refused retry is not counted");
        assert_eq!(
            b.next(Some(Duration::from_secs(4))),
            Ok(Duration::from_secs(4))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_ends_with_its_answer_or_its_last_failure() {
        let p = RetryPolicy {
            base: Duration::from_millis(300),
            cap: Duration::from_millis(300),
            max_retries: 1,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut tries = 0;
        let failed: Result<(), u32> = p
            .start(deadline)
            .run(|| {
                tries += 1;
                std::future::ready(Attempted::Again(tries, None))
            })
            .await;
        assert_eq!(failed, Err(2), "the first attempt and one retry");
        let mut tries = 0;
        let done: Result<u32, u32> = p
            .start(deadline)
            .run(|| {
                tries += 1;
                std::future::ready(match tries {
                    1 => Attempted::Again(tries, Some(Duration::from_secs(2))),
                    _ => Attempted::Done(Ok(tries)),
                })
            })
            .await;
        assert_eq!(done, Ok(2));
        let t0 = Instant::now();
        let refused: Result<(), &str> = p
            .start(deadline)
            .run(|| std::future::ready(Attempted::Done(Err("final"))))
            .await;
        assert_eq!((refused, t0.elapsed()), (Err("final"), Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_wait_ends_at_once() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let mut b = RetryPolicy::default().start(Instant::now() + Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(b.wait(None, Some(&cancel)).await, Err(GiveUp::Cancelled));
        assert_eq!(t0.elapsed(), Duration::ZERO);
    }
}
