//! A mutex lock that a panic does not spoil. Where a panic is caught and
//! the program goes on (one unit of work failing alone), a lock that
//! panicked while held must not turn every later lock into a panic too:
//! the values kept under these locks are whole between statements.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `m` locked, even when a thread panicked while it held it.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_held_by_a_thread_that_panicked_still_locks() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let held = m.clone();
        let _ = std::thread::spawn(move || {
            let _guard = lock(&held);
            panic!("while holding the lock");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }
}
