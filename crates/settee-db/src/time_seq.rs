//! When a database's changes were made: a bounded map from wall-clock
//! time to update sequence, so that "every change older than T" can be
//! read as "every change up to sequence S" (what the automatic purge of
//! deleted documents asks; CouchDB's development branch keeps a similar
//! `time_seq`).
//!
//! Invariant: an entry `(t, s)` is recorded only once every change up to
//! `s` was made, and `t` is a whole second no earlier than the moment it
//! was recorded (the clock rounded up). So every change up to `s` is at
//! least as old as `t`, and [`TimeSeq::seq_at_or_before`] never names a
//! change younger than the time it is asked for — it may name an older
//! sequence than the exact one (resolution is lost as entries are thinned
//! out), which only delays what depends on it, never hastens it.
//!
//! The map holds at most [`TimeSeq::MAX`] entries: when full, the interior
//! entry whose removal costs the least resolution relative to its age goes,
//! so recent times keep fine resolution and old ones coarse.
//!
//! Pure: no clock (the writer passes the time in).

use serde::{Deserialize, Serialize};

/// Time (whole seconds since the epoch) → update sequence, ascending in both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeSeq {
    entries: Vec<(u64, u64)>,
}

impl TimeSeq {
    /// Most entries kept.
    pub const MAX: usize = 240;

    /// The map of a database that has no record yet: everything up to
    /// `seq` was made before `now` (a database from before the map
    /// existed, or a new one with `seq` 0).
    pub fn seeded(now: u64, seq: u64) -> TimeSeq {
        TimeSeq {
            entries: vec![(now, seq)],
        }
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> &[(u64, u64)] {
        &self.entries
    }

    /// Records that every change up to `seq` was made by `now` (whole
    /// seconds, rounded up). Returns whether an entry was added (a later
    /// second than the last entry's, and a new sequence): the caller then
    /// stores the map. Otherwise a higher `seq` raises the last entry's in
    /// place (its changes were made by its time too, which is no earlier
    /// than `now`), and storing can wait for the next entry.
    pub fn record(&mut self, now: u64, seq: u64) -> bool {
        match self.entries.last_mut() {
            Some((t, s)) if now <= *t => {
                *s = (*s).max(seq);
                false
            }
            Some((_, s)) if seq <= *s => false,
            _ => {
                self.entries.push((now, seq));
                while self.entries.len() > Self::MAX {
                    self.thin(now);
                }
                true
            }
        }
    }

    /// Drops the interior entry whose loss widens the gap around it least
    /// relative to its age.
    fn thin(&mut self, now: u64) {
        let e = &self.entries;
        let mut best = 1;
        let mut best_cost = f64::INFINITY;
        for i in 1..e.len() - 1 {
            let gap = (e[i + 1].0 - e[i - 1].0) as f64;
            let age = now.saturating_sub(e[i].0).max(1) as f64;
            let cost = gap / age;
            if cost < best_cost {
                best_cost = cost;
                best = i;
            }
        }
        self.entries.remove(best);
    }

    /// The highest sequence all of whose changes were made at or before
    /// `time`; None when no recorded time is that old.
    pub fn seq_at_or_before(&self, time: u64) -> Option<u64> {
        let n = self.entries.partition_point(|&(t, _)| t <= time);
        n.checked_sub(1).map(|i| self.entries[i].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn answers_the_newest_entry_not_after_the_time() {
        let mut ts = TimeSeq::default();
        assert_eq!(ts.seq_at_or_before(100), None);
        assert!(ts.record(10, 5));
        assert!(!ts.record(10, 7), "same second: raised in place");
        assert!(!ts.record(11, 7), "no new change");
        assert!(!ts.record(9, 8), "a clock gone back: raised in place");
        assert!(ts.record(12, 9));
        assert_eq!(ts.seq_at_or_before(9), None);
        assert_eq!(ts.seq_at_or_before(10), Some(8));
        assert_eq!(ts.seq_at_or_before(11), Some(8));
        assert_eq!(ts.seq_at_or_before(12), Some(9));
        assert_eq!(ts.seq_at_or_before(u64::MAX), Some(9));
    }

    #[test]
    fn stays_bounded_and_keeps_recent_resolution() {
        let mut ts = TimeSeq::seeded(0, 0);
        for t in 1..=100_000u64 {
            ts.record(t, t);
        }
        assert_eq!(ts.entries().len(), TimeSeq::MAX);
        assert_eq!(ts.entries()[0], (0, 0), "the oldest entry stays");
        assert_eq!(ts.entries().last(), Some(&(100_000, 100_000)));
        // The last minute is still to within a few seconds.
        let recent = ts.seq_at_or_before(100_000 - 30).unwrap();
        assert!(recent >= 100_000 - 40, "{recent}");
    }

    proptest! {
        /// Whatever is thinned out, the answer for a time never names a
        /// change made after that time.
        #[test]
        fn never_names_a_younger_change(
            steps in proptest::collection::vec((-3i64..50, 0u64..20), 1..2000),
            probes in proptest::collection::vec(0u64..100_000, 1..50),
        ) {
            let mut ts = TimeSeq::default();
            // made[s] = the time change s was made (ceil), in a model.
            let mut made: Vec<u64> = vec![0];
            let (mut now, mut seq) = (0u64, 0u64);
            // The clock may go back a little.
            for (dt, ds) in steps {
                now = now.saturating_add_signed(dt);
                for _ in 0..ds {
                    seq += 1;
                    made.push(now);
                }
                ts.record(now, seq);
                prop_assert!(ts.entries().len() <= TimeSeq::MAX);
            }
            for p in probes {
                if let Some(s) = ts.seq_at_or_before(p) {
                    let newest = made[..=s as usize].iter().max().copied().unwrap_or(0);
                    prop_assert!(newest <= p, "seq {} made at {} > {}", s, newest, p);
                }
            }
        }
    }
}
