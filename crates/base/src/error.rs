//! An error's chain of causes (`source()`), walked in one place. The
//! innermost cause is most often the one that says what happened
//! (`Connection refused (os error 111)` under `error sending request`).

use std::error::Error;

/// `e`, then each of its causes in turn, the innermost last.
pub fn causes<'a>(e: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(e), |e: &&'a (dyn Error + 'static)| (*e).source())
}

/// The innermost cause of `e`: the last error of its chain; `None` when
/// `e` has no cause.
pub(crate) fn innermost_cause<'a>(
    e: &'a (dyn Error + 'static),
) -> Option<&'a (dyn Error + 'static)> {
    causes(e).skip(1).last()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn the_innermost_cause_is_the_last_of_the_chain() {
        let inner = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = Outer(inner);
        let words: Vec<String> = causes(&e).map(|c| c.to_string()).collect();
        assert_eq!(words, ["outer", "connection refused"]);
        assert_eq!(
            innermost_cause(&e).map(|c| c.to_string()).as_deref(),
            Some("connection refused")
        );
        let alone = std::io::Error::other("alone");
        assert!(innermost_cause(&alone).is_none());
    }
}
