//! `couchdb.request_time` in `_stats`: how long requests took inside the
//! server (from the request's arrival at the router until its answer's
//! head is ready; a streamed body's sending is not counted), over the last
//! [`WINDOW_S`] seconds, as CouchDB's histogram statistics (milliseconds).
//!
//! Each second has a slot of log-spaced buckets (four per doubling, from
//! 1 µs to about 2.3 h), so recording is a few atomic additions and the
//! figures are within a bucket's width (about 19 %) of the exact ones,
//! except `min` and `max`, which are exact.
//!
//! Invariants: memory is fixed ([`WINDOW_S`] slots of [`BUCKETS`]
//! counters); a slot is reused for a new second only after it is cleared,
//! so no figure mixes in a request older than the window (a request
//! recorded while its slot is being cleared may be lost: these are
//! statistics, never a count anything depends on).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// The seconds the figures cover (CouchDB's `[stats] interval`, 10 s).
pub const WINDOW_S: u64 = 10;
/// Buckets per slot.
pub const BUCKETS: usize = 136;
const PER_DOUBLING: f64 = 4.0;

#[derive(Debug)]
struct Slot {
    second: AtomicU64,
    counts: Box<[AtomicU64]>,
    min_us: AtomicU64,
    max_us: AtomicU64,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            second: AtomicU64::new(0),
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            min_us: AtomicU64::new(u64::MAX),
            max_us: AtomicU64::new(0),
        }
    }
}

/// The histogram of the last [`WINDOW_S`] seconds.
#[derive(Debug)]
pub struct RequestTimes {
    slots: Box<[Slot]>,
}

impl Default for RequestTimes {
    fn default() -> Self {
        RequestTimes {
            slots: (0..WINDOW_S).map(|_| Slot::new()).collect(),
        }
    }
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The bucket of `us` microseconds.
fn bucket(us: u64) -> usize {
    if us <= 1 {
        return 0;
    }
    ((us as f64).log2() * PER_DOUBLING)
        .floor()
        .min((BUCKETS - 1) as f64) as usize
}

/// A bucket's lower bound and the value that stands for it (its geometric
/// middle), in microseconds.
fn bounds(i: usize) -> (f64, f64) {
    let lo = 2f64.powf(i as f64 / PER_DOUBLING);
    let hi = 2f64.powf((i + 1) as f64 / PER_DOUBLING);
    (lo, (lo * hi).sqrt())
}

impl RequestTimes {
    /// Records one request that took `took`.
    pub fn record(&self, took: Duration) {
        self.record_at(now_s(), took);
    }

    fn record_at(&self, second: u64, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let slot = &self.slots[(second % WINDOW_S) as usize];
        let seen = slot.second.load(Ordering::Acquire);
        if seen != second
            && slot
                .second
                .compare_exchange(seen, second, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            for c in slot.counts.iter() {
                c.store(0, Ordering::Relaxed);
            }
            slot.min_us.store(u64::MAX, Ordering::Relaxed);
            slot.max_us.store(0, Ordering::Relaxed);
        }
        slot.counts[bucket(us)].fetch_add(1, Ordering::Relaxed);
        slot.min_us.fetch_min(us, Ordering::Relaxed);
        slot.max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// `_stats`' `couchdb.request_time` entry.
    pub fn stat(&self) -> Value {
        json!({
            "value": self.summary_at(now_s()),
            "type": "histogram",
            "desc": "length of a request inside CouchDB without MochiWeb",
        })
    }

    fn summary_at(&self, now: u64) -> Value {
        let mut counts = vec![0u64; BUCKETS];
        let (mut min_us, mut max_us) = (u64::MAX, 0u64);
        for s in self.slots.iter() {
            let second = s.second.load(Ordering::Acquire);
            if second + WINDOW_S <= now || second > now {
                continue;
            }
            for (total, c) in counts.iter_mut().zip(s.counts.iter()) {
                *total += c.load(Ordering::Relaxed);
            }
            min_us = min_us.min(s.min_us.load(Ordering::Relaxed));
            max_us = max_us.max(s.max_us.load(Ordering::Relaxed));
        }
        summarize(&counts, min_us, max_us)
    }
}

/// CouchDB's histogram figures (milliseconds) from bucket counts.
fn summarize(counts: &[u64], min_us: u64, max_us: u64) -> Value {
    let n: u64 = counts.iter().sum();
    if n == 0 {
        return json!({
            "n": 0, "min": 0, "max": 0, "arithmetic_mean": 0, "geometric_mean": 0,
            "harmonic_mean": 0, "median": 0, "variance": 0, "standard_deviation": 0,
            "skewness": 0, "kurtosis": 0,
            "percentile": [[50, 0], [75, 0], [90, 0], [95, 0], [99, 0], [999, 0]],
            "histogram": [[0, 0]],
        });
    }
    let (min, max) = (min_us as f64 / 1000.0, max_us as f64 / 1000.0);
    // Each bucket's stand-in value, kept within the exact extremes.
    let value = |i: usize| (bounds(i).1 / 1000.0).clamp(min, max);
    let nf = n as f64;
    let (mut sum, mut log_sum, mut inv_sum) = (0.0, 0.0, 0.0);
    for (i, &c) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
        let v = value(i).max(1e-6);
        sum += v * c as f64;
        log_sum += v.ln() * c as f64;
        inv_sum += c as f64 / v;
    }
    let mean = sum / nf;
    let (mut m2, mut m3, mut m4) = (0.0, 0.0, 0.0);
    for (i, &c) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
        let d = value(i) - mean;
        m2 += d * d * c as f64;
        m3 += d * d * d * c as f64;
        m4 += d * d * d * d * c as f64;
    }
    let variance = if n > 1 { m2 / (nf - 1.0) } else { 0.0 };
    let sd = variance.sqrt();
    let pop2 = m2 / nf;
    let (skewness, kurtosis) = if pop2 > 0.0 {
        ((m3 / nf) / pop2.powf(1.5), (m4 / nf) / (pop2 * pop2) - 3.0)
    } else {
        (0.0, 0.0)
    };
    let at = |p: f64| {
        let rank = (p * nf).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return value(i);
            }
        }
        max
    };
    let histogram: Vec<Value> = counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(i, c)| json!([value(i), c]))
        .collect();
    json!({
        "n": n,
        "min": min,
        "max": max,
        "arithmetic_mean": mean,
        "geometric_mean": (log_sum / nf).exp(),
        "harmonic_mean": nf / inv_sum,
        "median": at(0.5),
        "variance": variance,
        "standard_deviation": sd,
        "skewness": skewness,
        "kurtosis": kurtosis,
        "percentile": [
            [50, at(0.5)], [75, at(0.75)], [90, at(0.9)],
            [95, at(0.95)], [99, at(0.99)], [999, at(0.999)]
        ],
        "histogram": histogram,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &Value, k: &str) -> f64 {
        v[k].as_f64().unwrap_or(f64::NAN)
    }

    #[test]
    fn empty_is_zeros() {
        let t = RequestTimes::default();
        let v = t.summary_at(1000);
        assert_eq!(v["n"], json!(0));
        assert_eq!(v["percentile"][4], json!([99, 0]));
    }

    #[test]
    fn figures_are_within_a_bucket_of_the_exact_ones() {
        let t = RequestTimes::default();
        // 1..=1000 ms, one request each.
        for k in 1..=1000u64 {
            t.record_at(500, Duration::from_millis(k));
        }
        let v = t.summary_at(505);
        assert_eq!(v["n"], json!(1000));
        assert_eq!((ms(&v, "min"), ms(&v, "max")), (1.0, 1000.0));
        let near = |got: f64, want: f64| (got / want - 1.0).abs() < 0.2;
        assert!(near(ms(&v, "median"), 500.0), "{v}");
        assert!(near(ms(&v, "arithmetic_mean"), 500.5), "{v}");
        assert!(
            near(v["percentile"][4][1].as_f64().unwrap_or(0.0), 990.0),
            "{v}"
        );
        assert!(near(ms(&v, "standard_deviation"), 288.8), "{v}");
        let g = ms(&v, "geometric_mean");
        let h = ms(&v, "harmonic_mean");
        assert!(h < g && g < ms(&v, "arithmetic_mean"), "{v}");
        let total: u64 = v["histogram"]
            .as_array()
            .map(|a| a.iter().filter_map(|p| p[1].as_u64()).sum())
            .unwrap_or(0);
        assert_eq!(total, 1000);
    }

    #[test]
    fn only_the_window_counts() {
        let t = RequestTimes::default();
        t.record_at(100, Duration::from_millis(50));
        t.record_at(105, Duration::from_millis(5));
        assert_eq!(t.summary_at(109)["n"], json!(2));
        // 100 has left the window; its slot is reused by 110.
        assert_eq!(t.summary_at(110)["n"], json!(1));
        t.record_at(110, Duration::from_millis(7));
        let v = t.summary_at(110);
        assert_eq!(v["n"], json!(2));
        assert_eq!(ms(&v, "max"), 7.0);
        assert_eq!(t.summary_at(200)["n"], json!(0));
    }

    #[test]
    fn extremes_fall_in_the_first_and_last_buckets() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert!(bucket(1000) < bucket(1200));
    }
}
