//! The crate's one lock-poison policy: a thread that panicked while holding a lock (a pool
//! thread, a caller's box) does not take the lock from the others. Every mutex of hull-box
//! guards plain bookkeeping (pools, caches) that stays consistent between statements, so the
//! data a panic left is as usable as before it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, whether or not a panicked holder poisoned it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
