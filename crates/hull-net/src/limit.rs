//! Rates one box may not exceed in what its gateway shares with the host: DNS answers per second
//! (each costs the gateway's CPU and may take a synthetic address) and connection-log lines per
//! second (the log is a file on the host's disk: a box making refused connections in a loop
//! would otherwise fill it). Token buckets: a burst is allowed, then a steady rate.

use std::time::Instant;

/// DNS queries one box may have answered: a burst of this many, then [`DNS_PER_S`] a second.
pub const DNS_BURST: u32 = 400;
pub const DNS_PER_S: u32 = 200;
/// Log records of one box: a burst of this many, then [`LOG_PER_S`] a second (past it they are
/// counted, and the count is written as one `suppressed` record when lines flow again).
pub const LOG_BURST: u32 = 1000;
pub const LOG_PER_S: u32 = 50;

/// A token bucket holding at most `burst` tokens, refilled at `per_s` a second.
#[derive(Debug, Clone)]
pub struct Bucket {
    per_s: u32,
    burst: u32,
    /// Thousandths of a token.
    milli: u64,
    /// What the last refill left over (microseconds times the rate, below one thousandth of a
    /// token): calls a few microseconds apart still add up.
    rest: u64,
    last: Instant,
}

impl Bucket {
    /// A full bucket.
    pub fn new(per_s: u32, burst: u32, now: Instant) -> Bucket {
        Bucket {
            per_s,
            burst,
            milli: u64::from(burst) * 1000,
            rest: 0,
            last: now,
        }
    }

    /// Takes a token if there is one at `now`.
    pub fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last);
        self.last = self.last.max(now);
        let owed = u64::try_from(elapsed.as_micros())
            .unwrap_or(u64::MAX)
            .saturating_mul(u64::from(self.per_s))
            .saturating_add(self.rest);
        self.rest = owed % 1000;
        self.milli = self
            .milli
            .saturating_add(owed / 1000)
            .min(u64::from(self.burst) * 1000);
        if self.milli >= 1000 {
            self.milli -= 1000;
            true
        } else {
            false
        }
    }

    /// The steady rate, for the log's words.
    pub fn per_s(&self) -> u32 {
        self.per_s
    }
}

#[cfg(test)]
mod tests {
    use super::Bucket;
    use std::time::{Duration, Instant};

    #[test]
    fn a_burst_then_the_steady_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(10, 5, t0);
        assert_eq!((0..8).filter(|_| b.take(t0)).count(), 5);
        // 100 ms at 10/s: one more token, not two.
        let t1 = t0 + Duration::from_millis(100);
        assert!(b.take(t1));
        assert!(!b.take(t1));
        // Refills add up over small steps (no fraction lost: 100 calls 1 ms apart, and 5000
        // calls 20 us apart at 10/s, each too short alone for a thousandth of a token), and
        // never pass the burst.
        let mut t = t1;
        for _ in 0..100 {
            t += Duration::from_micros(1000);
            let _ = b.take(t);
        }
        let mut c = Bucket::new(10, 1, t0);
        assert!(c.take(t0));
        let mut u = t0;
        let mut got = 0;
        for _ in 0..5000 {
            u += Duration::from_micros(20);
            got += usize::from(c.take(u));
        }
        assert_eq!(got, 1, "0.1 s at 10/s is one token");
        t += Duration::from_millis(100);
        assert!(b.take(t));
        let later = t + Duration::from_secs(3600);
        assert_eq!((0..10).filter(|_| b.take(later)).count(), 5);
        // A clock read out of order takes nothing back.
        assert!(!b.take(t0));
    }
}
