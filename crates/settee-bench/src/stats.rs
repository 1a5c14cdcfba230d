//! Statistics over request samples: exact nearest-rank percentiles, the
//! JMeter-like summary of a run, and a log-linear histogram for timelines.
//!
//! Percentile definition (nearest rank): for `n` values sorted ascending,
//! the p-th percentile is the value at rank `ceil(p/100 * n)` (1-based),
//! clamped to `1..=n`; p = 0 is the minimum. No interpolation: every
//! reported latency is one that was actually observed.

use serde::Serialize;

use crate::cpu::Measured;

/// One request (or operation) as the load driver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Start, in microseconds since the measured phase began.
    pub at_us: u64,
    /// Latency in microseconds (saturating).
    pub latency_us: u32,
    /// Documents (or operations) this request completed; 0 when it failed.
    pub items: u32,
    pub ok: bool,
}

/// The 1-based nearest rank of percentile `p` among `n` values.
fn rank(p: f64, n: usize) -> usize {
    let p = p.clamp(0.0, 100.0);
    let r = (p / 100.0 * n as f64).ceil() as usize;
    r.clamp(1, n)
}

/// Percentile `p` (0..=100) of `values` (any order), nearest rank; `None`
/// when empty. Reorders `values` (selection, O(n)).
pub fn percentile(values: &mut [u32], p: f64) -> Option<u32> {
    if values.is_empty() {
        return None;
    }
    let i = rank(p, values.len()) - 1;
    let (_, v, _) = values.select_nth_unstable(i);
    Some(*v)
}

/// The JMeter-like line of a run. Latencies in milliseconds; throughput in
/// items (documents or operations) per second of wall time.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub samples: u64,
    pub errors: u64,
    pub items: u64,
    pub elapsed_s: f64,
    pub throughput: f64,
    pub mean_ms: f64,
    pub median_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub client_cpu_s: f64,
    /// Client CPU as a share of one core over the wall time (200% = 2 cores).
    pub client_cpu_pct: f64,
}

impl Summary {
    /// Summarises `samples` measured over `measured`.
    pub fn of(samples: &[Sample], measured: Measured) -> Summary {
        let wall = measured.wall.as_secs_f64();
        let mut lat: Vec<u32> = samples.iter().map(|s| s.latency_us).collect();
        let items: u64 = samples.iter().map(|s| u64::from(s.items)).sum();
        let errors = samples.iter().filter(|s| !s.ok).count() as u64;
        let ms = |v: Option<u32>| v.map_or(0.0, |us| f64::from(us) / 1000.0);
        let mean_ms = if lat.is_empty() {
            0.0
        } else {
            lat.iter().map(|&v| f64::from(v)).sum::<f64>() / lat.len() as f64 / 1000.0
        };
        let cpu = measured.cpu.as_secs_f64();
        Summary {
            samples: samples.len() as u64,
            errors,
            items,
            elapsed_s: wall,
            throughput: if wall > 0.0 { items as f64 / wall } else { 0.0 },
            mean_ms,
            median_ms: ms(percentile(&mut lat, 50.0)),
            p90_ms: ms(percentile(&mut lat, 90.0)),
            p99_ms: ms(percentile(&mut lat, 99.0)),
            min_ms: ms(percentile(&mut lat, 0.0)),
            max_ms: ms(percentile(&mut lat, 100.0)),
            client_cpu_s: cpu,
            client_cpu_pct: if wall > 0.0 { cpu / wall * 100.0 } else { 0.0 },
        }
    }
}

/// Sub-buckets per power of two: values are kept within 1/16 (6.25%).
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;

/// A log-linear histogram of u32 values (e.g. microseconds): exact below
/// 16, then 16 buckets per power of two, so any value it reports is within
/// 6.25% below the true one. Fixed size (33 × 16 counters); merging and
/// recording are O(1).
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; 33 * SUB],
            total: 0,
        }
    }
}

impl Histogram {
    fn index(v: u32) -> usize {
        if v < SUB as u32 {
            return v as usize;
        }
        let msb = 31 - v.leading_zeros(); // >= SUB_BITS
        let shift = msb - SUB_BITS;
        let sub = ((v >> shift) as usize) & (SUB - 1);
        (shift as usize + 1) * SUB + sub
    }

    /// The smallest value that falls into bucket `i`.
    fn lower(i: usize) -> u32 {
        if i < SUB {
            return i as u32;
        }
        let shift = (i / SUB - 1) as u32;
        let sub = (i % SUB) as u32;
        (SUB as u32 + sub) << shift
    }

    pub fn record(&mut self, v: u32) {
        self.counts[Self::index(v)] += 1;
        self.total += 1;
    }

    pub fn len(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Nearest-rank percentile, as the lower bound of its bucket.
    pub fn percentile(&self, p: f64) -> Option<u32> {
        if self.total == 0 {
            return None;
        }
        let want = rank(p, self.total as usize) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Some(Self::lower(i));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The model: sort, take the nearest rank.
    fn model(values: &[u32], p: f64) -> Option<u32> {
        let mut v = values.to_vec();
        v.sort_unstable();
        if v.is_empty() {
            return None;
        }
        let r = ((p / 100.0) * v.len() as f64).ceil() as usize;
        Some(v[r.clamp(1, v.len()) - 1])
    }

    #[test]
    fn percentiles_match_sorted_model() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for case in 0..300 {
            let n = match case % 5 {
                0 => 1,
                1 => 2,
                _ => rng.random_range(1..500),
            };
            let values: Vec<u32> = (0..n)
                .map(|_| {
                    if case % 3 == 0 {
                        rng.random_range(0..4) // many duplicates
                    } else {
                        rng.random()
                    }
                })
                .collect();
            for p in [0.0, 0.1, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
                let mut work = values.clone();
                assert_eq!(percentile(&mut work, p), model(&values, p), "n={n} p={p}");
            }
        }
    }

    #[test]
    fn percentile_edge_cases() {
        assert_eq!(percentile(&mut [], 50.0), None);
        assert_eq!(percentile(&mut [5], 0.0), Some(5));
        assert_eq!(percentile(&mut [5], 100.0), Some(5));
        let mut v: Vec<u32> = (1..=100).rev().collect();
        assert_eq!(percentile(&mut v, 50.0), Some(50));
        assert_eq!(percentile(&mut v, 90.0), Some(90));
        assert_eq!(percentile(&mut v, 99.0), Some(99));
        assert_eq!(percentile(&mut v, 100.0), Some(100));
        assert_eq!(percentile(&mut v, 0.0), Some(1));
        // Out-of-range p is clamped.
        assert_eq!(percentile(&mut v, 150.0), Some(100));
        assert_eq!(percentile(&mut v, -3.0), Some(1));
        assert_eq!(percentile(&mut [u32::MAX, 0], 50.0), Some(0));
    }

    #[test]
    fn summary_counts_items_errors_and_latencies() {
        let s = |lat, items, ok| Sample {
            at_us: 0,
            latency_us: lat,
            items,
            ok,
        };
        let samples = [s(1000, 10, true), s(3000, 10, true), s(2000, 0, false)];
        let m = Measured {
            wall: std::time::Duration::from_secs(2),
            cpu: std::time::Duration::from_secs(1),
        };
        let sum = Summary::of(&samples, m);
        assert_eq!((sum.samples, sum.errors, sum.items), (3, 1, 20));
        assert_eq!(sum.throughput, 10.0);
        assert_eq!((sum.min_ms, sum.median_ms, sum.max_ms), (1.0, 2.0, 3.0));
        assert_eq!(sum.mean_ms, 2.0);
        assert_eq!(sum.client_cpu_pct, 50.0);
        let empty = Summary::of(&[], Measured::default());
        assert_eq!(
            (empty.samples, empty.throughput, empty.p99_ms),
            (0, 0.0, 0.0)
        );
    }

    #[test]
    fn histogram_is_within_a_sixteenth_of_the_model() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let values: Vec<u32> = (0..20_000)
            .map(|_| rng.random_range(0..2_000_000u32) >> rng.random_range(0..16))
            .collect();
        let mut h = Histogram::default();
        values.iter().for_each(|&v| h.record(v));
        assert_eq!(h.len(), values.len() as u64);
        for p in [0.0, 10.0, 50.0, 90.0, 99.0, 100.0] {
            let want = model(&values, p).unwrap();
            let got = h.percentile(p).unwrap();
            assert!(got <= want, "p{p}: {got} > {want}");
            assert!(
                f64::from(want - got) <= f64::from(want) / 16.0,
                "p{p}: {got} vs {want}"
            );
        }
        assert_eq!(Histogram::default().percentile(50.0), None);
        for v in [0, 1, 15, 16, 17, 31, 32, 1000, u32::MAX] {
            let i = Histogram::index(v);
            assert!(
                Histogram::lower(i) <= v && v - Histogram::lower(i) <= v / 16,
                "{v}"
            );
        }
    }
}
