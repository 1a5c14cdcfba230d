//! Run-time choice of page and batch sizes.
//!
//! The seed measurement (CouchDB 1.0, `_all_docs` pages): 50 docs/page took
//! 61 min, 200 took 18 min, 2000 took 5 min — per-request overhead
//! dominates small pages — while through a TLS tunnel writes stalled unless
//! batches were ≤ 25 docs. [`Sizer`] therefore
//! - grows the size (×2) while the measured items/s still improves by at
//!   least `GAIN_MIN` and a request stays under its latency target,
//! - settles when growth stops paying (and steps back if it got worse),
//! - halves on a request-size limit (413) or a stall (timeout), and then
//!   never grows past the size that failed (a sticky ceiling).
//!
//! Invariant: `min ≤ size() ≤ ceiling ≤ max`, always.

use std::time::Duration;

/// Growth must raise throughput by this factor to continue.
const GAIN_MIN: f64 = 1.10;
/// A settled size steps back when throughput falls below this share of the best.
const LOSS_MAX: f64 = 0.75;

/// An adaptive (or fixed) size.
#[derive(Debug, Clone)]
pub struct Sizer {
    size: usize,
    min: usize,
    ceiling: usize,
    growing: bool,
    fixed: bool,
    best_rate: f64,
    latency_target: Duration,
    bytes_max: usize,
}

impl Sizer {
    /// Adaptive, starting at `initial`, within `min..=max`.
    pub fn adaptive(
        initial: usize,
        min: usize,
        max: usize,
        latency_target: Duration,
        bytes_max: usize,
    ) -> Sizer {
        let min = min.max(1);
        let max = max.max(min);
        Sizer {
            size: initial.clamp(min, max),
            min,
            ceiling: max,
            growing: true,
            fixed: false,
            best_rate: 0.0,
            latency_target,
            bytes_max,
        }
    }

    /// Fixed at `size` (the user chose it); still halves on 413/stalls,
    /// since a request that cannot succeed must shrink to make progress.
    pub fn fixed(size: usize) -> Sizer {
        let size = size.max(1);
        Sizer {
            size,
            min: 1,
            ceiling: size,
            growing: false,
            fixed: true,
            best_rate: 0.0,
            latency_target: Duration::MAX,
            bytes_max: usize::MAX,
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Records one request that carried `items` items of `bytes` bytes in
    /// `elapsed`. Partial requests (`items < size()`, the end of the data)
    /// say nothing about the size and are ignored.
    pub fn observe(&mut self, items: usize, bytes: usize, elapsed: Duration) {
        if self.fixed || items < self.size || items == 0 {
            return;
        }
        if bytes > self.bytes_max && self.size > self.min {
            // Large documents: keep requests bounded in memory and time.
            self.size = (self.size / 2).max(self.min);
            self.ceiling = self.size;
            self.growing = false;
            return;
        }
        let rate = items as f64 / elapsed.as_secs_f64().max(1e-6);
        if self.growing {
            if rate >= self.best_rate * GAIN_MIN {
                self.best_rate = rate;
                if elapsed < self.latency_target && self.size < self.ceiling {
                    self.size = (self.size * 2).min(self.ceiling);
                } else {
                    self.growing = false;
                }
            } else {
                self.growing = false;
                if rate < self.best_rate * LOSS_MAX {
                    self.size = (self.size / 2).max(self.min);
                }
            }
        } else {
            self.best_rate = self.best_rate.max(rate);
        }
    }

    /// The last request was too large (413) or stalled (timeout): halve and
    /// never grow past the new size again. Returns false when already at
    /// the minimum (the caller must give up on that request).
    pub fn shrink(&mut self) -> bool {
        if self.size <= self.min {
            return false;
        }
        self.size = (self.size / 2).max(self.min);
        self.ceiling = self.size;
        self.growing = false;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A server with 20 ms per request plus 10 µs per item: throughput
    /// keeps rising with size, so the sizer grows to the latency target.
    #[test]
    fn grows_while_throughput_improves() {
        let mut s = Sizer::adaptive(100, 10, 10_000, ms(1000), usize::MAX);
        for _ in 0..20 {
            let n = s.size();
            s.observe(n, n * 100, ms(20) + Duration::from_micros(10 * n as u64));
        }
        assert!(s.size() >= 3200, "size {}", s.size());
        assert!(s.size() <= 10_000);
    }

    #[test]
    fn settles_when_growth_stops_paying() {
        // Pure per-item cost: doubling never helps.
        let mut s = Sizer::adaptive(100, 10, 10_000, ms(1000), usize::MAX);
        for _ in 0..10 {
            let n = s.size();
            s.observe(n, 0, Duration::from_micros(100 * n as u64));
        }
        assert!(s.size() <= 200, "size {}", s.size());
    }

    #[test]
    fn shrinks_on_stall_and_keeps_the_ceiling() {
        let mut s = Sizer::adaptive(400, 1, 10_000, ms(1000), usize::MAX);
        assert!(s.shrink());
        assert!(s.shrink());
        assert_eq!(s.size(), 100);
        for _ in 0..10 {
            let n = s.size();
            s.observe(n, 0, ms(1));
        }
        assert_eq!(s.size(), 100);
        let mut one = Sizer::fixed(1);
        assert!(!one.shrink());
    }

    #[test]
    fn bytes_bound_halves() {
        let mut s = Sizer::adaptive(1000, 1, 10_000, ms(1000), 1 << 20);
        s.observe(1000, 4 << 20, ms(10));
        assert_eq!(s.size(), 500);
    }

    #[test]
    fn partial_pages_are_ignored() {
        let mut s = Sizer::adaptive(1000, 1, 10_000, ms(1000), usize::MAX);
        s.observe(10, 10, ms(1));
        assert_eq!(s.size(), 1000);
    }
}
