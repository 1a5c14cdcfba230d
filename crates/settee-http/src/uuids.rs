//! Identifier generation (`/_uuids` and ids of documents POSTed without
//! `_id`), with CouchDB's four algorithms (`random`, `sequential`, `utc_random`,
//! `utc_id` with `[uuids] utc_id_suffix`).
//!
//! Invariants: `sequential` ids from one generator strictly increase (a
//! random 26-hex-digit prefix plus a 6-hex-digit counter advanced by a
//! random step; a new prefix when the counter would overflow), which keeps
//! inserts into the id-ordered storage append-like. The timestamps of
//! `utc_id` and `utc_random` ids from one generator strictly increase too,
//! as CouchDB's do: each is the clock's microseconds, or one past the last
//! one given when the clock has not moved on (or went back), so two ids
//! of one microsecond never collide.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rand::Rng;

use crate::config::UuidAlgorithm;

const COUNTER_MAX: u32 = 0xff_f000;

#[derive(Debug)]
pub struct Uuids {
    seq: Mutex<(String, u32)>,
    /// The last timestamp a `utc_*` id was given.
    last_us: AtomicU64,
}

impl Default for Uuids {
    fn default() -> Self {
        Uuids {
            seq: Mutex::new((random_hex(13), rand::rng().random_range(0..0x1000))),
            last_us: AtomicU64::new(0),
        }
    }
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::rng().fill(&mut b[..]);
    hex::encode(b)
}

/// Microseconds since the epoch, in 14 hex digits' worth.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
        & 0x00ff_ffff_ffff_ffff
}

impl Uuids {
    /// A timestamp past every one given before: now, or one past the last.
    fn tick(&self) -> u64 {
        let now = now_us();
        let prev = self
            .last_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(now.max(last + 1) & 0x00ff_ffff_ffff_ffff)
            })
            .unwrap_or(0);
        now.max(prev + 1) & 0x00ff_ffff_ffff_ffff
    }

    /// The next id; `suffix` is `[uuids] utc_id_suffix` (used by `utc_id`).
    pub fn next(&self, algo: UuidAlgorithm, suffix: &str) -> String {
        match algo {
            UuidAlgorithm::UtcId => format!("{:014x}{suffix}", self.tick()),
            UuidAlgorithm::Random => random_hex(16),
            UuidAlgorithm::UtcRandom => format!("{:014x}{}", self.tick(), &random_hex(9)),
            UuidAlgorithm::Sequential => {
                let mut g = self.seq.lock();
                let step = rand::rng().random_range(1..0xff);
                if g.1 + step >= COUNTER_MAX {
                    *g = (random_hex(13), rand::rng().random_range(0..0x1000));
                } else {
                    g.1 += step;
                }
                format!("{}{:06x}", g.0, g.1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_order() {
        let u = Uuids::default();
        let mut last = String::new();
        for _ in 0..100_000 {
            let id = u.next(UuidAlgorithm::Sequential, "");
            assert_eq!(id.len(), 32);
            if id[..26] == last.get(..26).unwrap_or("")[..] {
                assert!(id > last);
            }
            last = id;
        }
        assert_eq!(u.next(UuidAlgorithm::Random, "").len(), 32);
        assert_eq!(u.next(UuidAlgorithm::UtcRandom, "").len(), 32);
        let id = u.next(UuidAlgorithm::UtcId, "-node1");
        assert_eq!(id.len(), 14 + 6);
        assert!(id.ends_with("-node1"));
    }

    #[test]
    fn utc_ids_strictly_increase_even_within_a_microsecond() {
        let u = Uuids::default();
        for algo in [UuidAlgorithm::UtcId, UuidAlgorithm::UtcRandom] {
            let mut last = String::new();
            for _ in 0..100_000 {
                let id = u.next(algo, "");
                assert!(
                    id[..14] > *last.get(..14).unwrap_or(""),
                    "{id} after {last}"
                );
                last = id;
            }
        }
        // From several threads at once: no two ids alike.
        let ids: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..20_000)
                            .map(|_| u.next(UuidAlgorithm::UtcId, ""))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
    }
}
