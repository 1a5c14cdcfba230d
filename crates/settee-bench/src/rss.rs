//! Peak resident memory of a server on this machine: the process listening
//! on a loopback target's port (found through `/proc`, as `settee stress`
//! does) and all its descendants, so that a server whose work runs in
//! child processes (CouchDB's `couchjs` view servers) is counted whole.
//!
//! Invariants: sampling is read-only and bounded (one `/proc` scan every
//! [`EVERY`]); a target that is not on loopback, or a process we cannot
//! see, means "unknown" (`None`), never an error.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use settee_stress::procwatch::{listener_pid, rss_kib};

use crate::client::Target;

/// Time between samples.
const EVERY: Duration = Duration::from_millis(100);

/// The pid of the server behind `target`, when it listens on loopback here.
pub fn server_pid(target: &Target) -> Option<u32> {
    target
        .addr
        .ip()
        .is_loopback()
        .then(|| listener_pid(target.addr.port()))
        .flatten()
}

/// The parent pid in the text of `/proc/PID/stat` (the field after the
/// state, which follows the parenthesised command name).
fn stat_ppid(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `root` and every descendant of it among `(pid, ppid)` pairs.
fn tree(root: u32, parents: &[(u32, u32)]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for &(pid, ppid) in parents {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = vec![root];
    let mut i = 0;
    // Bounded by the number of pairs: each pid has one parent.
    while i < out.len() && out.len() <= parents.len() + 1 {
        if let Some(c) = children.get(&out[i]) {
            out.extend(c.iter().copied().filter(|&p| p != root));
        }
        i += 1;
    }
    out
}

/// Summed VmRSS in KiB of `root` and its descendants; `None` when `root`
/// is gone or unreadable.
pub fn tree_rss_kib(root: u32) -> Option<u64> {
    let own = rss_kib(root)?;
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            Some((pid, stat_ppid(&stat)?))
        })
        .collect();
    let rest: u64 = tree(root, &parents)
        .iter()
        .skip(1)
        .filter_map(|&p| rss_kib(p))
        .sum();
    Some(own + rest)
}

/// A background thread sampling a process tree's RSS until [`PeakRss::finish`].
#[derive(Debug)]
pub struct PeakRss {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Option<u64>>,
}

impl PeakRss {
    pub fn start(pid: u32) -> PeakRss {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = tree_rss_kib(pid);
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(EVERY);
                peak = peak.max(tree_rss_kib(pid));
            }
            peak
        });
        PeakRss { stop, thread }
    }

    /// The highest sample in KiB (`None` if the process could not be read).
    pub fn finish(self) -> Option<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ppid_and_walks_the_tree() {
        assert_eq!(stat_ppid("42 (beam.smp) S 7 42 42 0"), Some(7));
        assert_eq!(stat_ppid("9 (a) b) c) R 3 9"), Some(3));
        assert_eq!(stat_ppid("garbage"), None);
        let pairs = [(1, 0), (10, 1), (11, 10), (12, 11), (20, 1), (30, 12)];
        let mut t = tree(10, &pairs);
        t.sort_unstable();
        assert_eq!(t, [10, 11, 12, 30]);
        assert_eq!(tree(99, &pairs), [99]);
    }

    #[test]
    fn samples_this_process() {
        let me = std::process::id();
        assert!(tree_rss_kib(me).is_some_and(|k| k > 0));
        let peak = PeakRss::start(me).finish();
        assert!(peak.is_some_and(|k| k > 0));
    }
}
