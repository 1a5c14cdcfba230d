//! A bandwidth limit shared by replications (the cluster's shard moves):
//! a schedule of when the next byte may go, so `take(n)` waits until the
//! bytes taken before it would have gone at the rate.
//!
//! Invariants: over any interval the bytes let through exceed `rate × time`
//! by at most one [`Throttle::take`]'s bytes plus [`BURST`] worth of
//! time; a rate of 0 means no limit (nothing waits); the rate can change at
//! any time and applies from the next take.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Idle time that may be spent at once afterwards (a burst).
pub const BURST: Duration = Duration::from_millis(250);

#[derive(Debug)]
pub struct Throttle {
    rate: AtomicU64,
    next: Mutex<Instant>,
}

impl Throttle {
    /// A limit of `bytes_per_s` (0: none).
    pub fn new(bytes_per_s: u64) -> Throttle {
        Throttle {
            rate: AtomicU64::new(bytes_per_s),
            next: Mutex::new(Instant::now()),
        }
    }

    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    pub fn set_rate(&self, bytes_per_s: u64) {
        self.rate.store(bytes_per_s, Ordering::Relaxed);
    }

    /// How long `bytes` must wait now (and books them).
    pub fn book(&self, bytes: u64) -> Duration {
        let rate = self.rate();
        if rate == 0 || bytes == 0 {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let mut next = self.next.lock();
        let start = (*next).max(now.checked_sub(BURST).unwrap_or(now));
        *next = start + Duration::from_secs_f64(bytes as f64 / rate as f64);
        next.saturating_duration_since(now)
    }

    /// Waits until `bytes` may go.
    pub async fn take(&self, bytes: u64) {
        let wait = self.book(bytes);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_limit_never_waits() {
        let t = Throttle::new(0);
        assert!((0..100).all(|_| t.book(1 << 30).is_zero()));
    }

    #[test]
    fn bookings_add_up_to_the_rate() {
        let t = Throttle::new(1000);
        // The first burst's worth passes at once; after it, each booking
        // waits for every byte before it.
        let waits: Vec<Duration> = (0..10).map(|_| t.book(500)).collect();
        let last = waits.last().copied().unwrap_or_default();
        // 5000 bytes at 1000 B/s is 5 s; a burst of 0.25 s may be spent.
        assert!(last >= Duration::from_millis(4700), "{waits:?}");
        assert!(last <= Duration::from_millis(5001), "{waits:?}");
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        t.set_rate(0);
        assert!(t.book(500).is_zero());
    }

    #[tokio::test]
    async fn take_waits_its_booking() {
        let t = Throttle::new(10_000);
        let t0 = Instant::now();
        for _ in 0..5 {
            t.take(1000).await;
        }
        // 5000 bytes at 10 kB/s: 0.5 s, less the burst.
        assert!(
            t0.elapsed() >= Duration::from_millis(200),
            "{:?}",
            t0.elapsed()
        );
    }
}
