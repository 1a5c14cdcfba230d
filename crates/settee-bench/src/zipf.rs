//! Zipfian key choice for YCSB-style workloads.
//!
//! `Zipf::new(n, theta)` draws ranks `0..n` with P(rank r) proportional to
//! `1 / (r + 1)^theta` (YCSB uses theta = 0.99), exactly, by inverting a
//! precomputed cumulative distribution (binary search). Items are bounded
//! (`ITEMS_MAX`) so the table stays small. [`scramble`] spreads popular
//! ranks over the key space as YCSB's ScrambledZipfianGenerator does (FNV
//! hash modulo n), so hot keys are not neighbours.

use rand::Rng;

/// YCSB's default skew.
pub const THETA: f64 = 0.99;
/// Most items a generator may cover (8 bytes of table each).
pub const ITEMS_MAX: u64 = 10_000_000;

/// A zipfian distribution over ranks `0..n` (0 is the most popular).
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// `None` when `n` is 0 or above [`ITEMS_MAX`] or theta is not positive.
    pub fn new(n: u64, theta: f64) -> Option<Zipf> {
        if n == 0 || n > ITEMS_MAX || theta.is_nan() || theta <= 0.0 {
            return None;
        }
        let mut cdf = Vec::with_capacity(n as usize);
        let mut acc = 0.0;
        for r in 1..=n {
            acc += 1.0 / (r as f64).powf(theta);
            cdf.push(acc);
        }
        let total = acc;
        cdf.iter_mut().for_each(|c| *c /= total);
        Some(Zipf { cdf })
    }

    pub fn items(&self) -> u64 {
        self.cdf.len() as u64
    }

    /// Probability of rank `r`.
    pub fn probability(&self, r: u64) -> f64 {
        let r = r as usize;
        match r {
            0 => self.cdf[0],
            _ if r < self.cdf.len() => self.cdf[r] - self.cdf[r - 1],
            _ => 0.0,
        }
    }

    /// A rank in `0..items()`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let u: f64 = rng.random();
        let i = self.cdf.partition_point(|&c| c < u);
        i.min(self.cdf.len() - 1) as u64
    }
}

/// FNV-1a of `rank` modulo `n` (YCSB's scrambled zipfian); `n` > 0.
pub fn scramble(rank: u64, n: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in rank.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h % n.max(1)
}

/// A stateless 64-bit mix (splitmix64) for per-operation randomness.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn rejects_bad_parameters() {
        assert!(Zipf::new(0, THETA).is_none());
        assert!(Zipf::new(ITEMS_MAX + 1, THETA).is_none());
        assert!(Zipf::new(10, 0.0).is_none());
        assert!(Zipf::new(10, f64::NAN).is_none());
        assert_eq!(Zipf::new(1, THETA).unwrap().items(), 1);
    }

    #[test]
    fn rank_frequencies_follow_the_power_law() {
        let n = 1000;
        let z = Zipf::new(n, THETA).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        let draws = 2_000_000;
        let mut freq = vec![0u64; n as usize];
        for _ in 0..draws {
            let r = z.sample(&mut rng);
            assert!(r < n, "bounded");
            freq[r as usize] += 1;
        }
        // Rank 1 vs rank k (1-based): f1 / fk = k^theta.
        for k in [2u64, 5, 10, 20] {
            let want = (k as f64).powf(THETA);
            let got = freq[0] as f64 / freq[(k - 1) as usize] as f64;
            assert!((got / want - 1.0).abs() < 0.05, "k={k}: {got} vs {want}");
        }
        // Rank 1's share equals 1 / H(n, theta).
        let h: f64 = (1..=n).map(|r| 1.0 / (r as f64).powf(THETA)).sum();
        let share = freq[0] as f64 / draws as f64;
        assert!((share * h - 1.0).abs() < 0.02, "{share} vs {}", 1.0 / h);
        assert!((z.probability(0) * h - 1.0).abs() < 1e-9);
        // The tail is used but rare.
        assert!(freq[(n - 1) as usize] > 0);
        let probs: f64 = (0..n).map(|r| z.probability(r)).sum();
        assert!((probs - 1.0).abs() < 1e-9);
        assert_eq!(z.probability(n), 0.0);
    }

    #[test]
    fn scramble_stays_in_range_and_spreads() {
        let n = 97;
        let hits: std::collections::HashSet<u64> = (0..1000).map(|r| scramble(r, n)).collect();
        assert!(hits.iter().all(|&k| k < n));
        assert!(hits.len() > 80, "{}", hits.len());
        assert_ne!(scramble(0, 1000), scramble(1, 1000));
        assert_ne!(mix(1), mix(2));
    }
}

/// A tiny deterministic generator (splitmix64) for per-operation choices:
/// seeded from (worker, operation number), no shared state.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl rand::RngCore for SplitMix {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}
