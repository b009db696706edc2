//! Durations as the whole milliseconds records and logs hold.

use std::time::Duration;

/// `d` in whole milliseconds; `u64::MAX` for a duration longer than that
/// (never a wrapped number).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_are_whole_and_saturate() {
        assert_eq!(millis(Duration::from_micros(1_999)), 1);
        assert_eq!(millis(Duration::from_secs(3)), 3_000);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
