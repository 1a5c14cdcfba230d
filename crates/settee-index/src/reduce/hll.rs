//! The HyperLogLog sketch behind `_approx_count_distinct`.
//!
//! 2^11 registers of one byte, like CouchDB's (`hyper` with precision 11):
//! a 64-bit hash picks a register with its top 11 bits, and the register
//! keeps the largest rank (leading zeros + 1) of the remaining 53 bits.
//! Sketches merge by register-wise maximum, so union is associative,
//! commutative and idempotent, and the sketch of a set does not depend on
//! insertion order. The estimate is Otmar Ertl's "improved raw estimator"
//! (*New cardinality estimation algorithms for HyperLogLog sketches*,
//! 2017, arXiv:1702.01284), which is unbiased across the whole range
//! without empirical bias tables; its relative standard error is about
//! 1.04 / sqrt(2048) = 2.3 %, and small counts come out exact or nearly so.

/// Bits of the hash that select a register.
pub const HLL_PRECISION_BITS: u32 = 11;
/// Registers in a sketch.
pub const HLL_REGISTERS: usize = 1 << HLL_PRECISION_BITS;
/// Bits left for the rank, and the largest rank (`Q + 1`).
const Q: u32 = 64 - HLL_PRECISION_BITS;
const RANK_MAX: u8 = Q as u8 + 1;

#[derive(Clone, PartialEq, Eq)]
pub struct HyperLogLog {
    registers: Box<[u8; HLL_REGISTERS]>,
}

impl std::fmt::Debug for HyperLogLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let used = self.registers.iter().filter(|&&r| r != 0).count();
        f.debug_struct("HyperLogLog")
            .field("registers_used", &used)
            .field("estimate", &self.estimate())
            .finish()
    }
}

impl Default for HyperLogLog {
    fn default() -> Self {
        Self::new()
    }
}

impl HyperLogLog {
    pub fn new() -> Self {
        HyperLogLog {
            registers: Box::new([0; HLL_REGISTERS]),
        }
    }

    /// A sketch from stored registers; `None` if a register is above the
    /// largest possible rank.
    pub fn from_registers(registers: [u8; HLL_REGISTERS]) -> Option<Self> {
        registers
            .iter()
            .all(|&r| r <= RANK_MAX)
            .then(|| HyperLogLog {
                registers: Box::new(registers),
            })
    }

    pub fn registers(&self) -> &[u8; HLL_REGISTERS] {
        &self.registers
    }

    pub fn insert_hash(&mut self, hash: u64) {
        let index = (hash >> Q) as usize;
        let rest = hash << HLL_PRECISION_BITS;
        // All-zero remaining bits get the largest rank.
        let rank = (rest.leading_zeros() + 1).min(u32::from(RANK_MAX)) as u8;
        let register = &mut self.registers[index];
        *register = (*register).max(rank);
    }

    pub fn union(&mut self, other: &HyperLogLog) {
        for (mine, theirs) in self.registers.iter_mut().zip(other.registers.iter()) {
            *mine = (*mine).max(*theirs);
        }
    }

    /// The estimated number of distinct hashes inserted.
    pub fn estimate(&self) -> f64 {
        let m = HLL_REGISTERS as f64;
        let mut counts = [0u32; RANK_MAX as usize + 1];
        for &r in self.registers.iter() {
            counts[usize::from(r)] += 1;
        }
        if counts[0] as usize == HLL_REGISTERS {
            return 0.0;
        }
        let mut z = m * tau(1.0 - f64::from(counts[RANK_MAX as usize]) / m);
        for k in (1..RANK_MAX as usize).rev() {
            z = 0.5 * (z + f64::from(counts[k]));
        }
        z += m * sigma(f64::from(counts[0]) / m);
        let alpha_inf = 0.5 / std::f64::consts::LN_2;
        alpha_inf * m * m / z
    }
}

/// `sigma(x) = x + sum_{k>=1} x^(2^k) 2^(k-1)`, for the share of empty
/// registers.
fn sigma(x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut x, mut y, mut z) = (x, 1.0, x);
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if z == previous {
            return z;
        }
    }
}

/// `tau(x) = (1 - x - sum_{k>=1} (1 - x^(2^-k))^2 2^-k) / 3`, for the
/// share of saturated registers.
fn tau(x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut x, mut y, mut z) = (x, 1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if z == previous {
            return z / 3.0;
        }
    }
}
