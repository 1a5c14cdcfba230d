//! Watching the server process from outside (Linux `/proc`): whether it is
//! alive, its resident memory over time, the process listening on a
//! loopback port, the panics in its stderr log; and this process's own
//! open-file limit.
//!
//! Invariants: sampling is read-only and bounded (one small file read per
//! sample, at most [`SAMPLES_MAX`] samples kept, thinned evenly beyond
//! that); a missing `/proc` entry means "unknown", never a crash, except
//! for [`alive`] on a pid that was alive before.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

/// Most RSS samples kept per run.
pub const SAMPLES_MAX: usize = 600;

/// VmRSS of `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some('Z') | Some('X'))
        }
        Err(_) => false,
    }
}

/// The soft limit on open files of `pid` (`/proc/PID/limits`).
pub fn open_files_limit(pid: u32) -> Option<u64> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// The process listening on loopback TCP `port` (scans `/proc/net/tcp*`
/// for the socket's inode, then `/proc/*/fd` for the process holding it).
pub fn listener_pid(port: u16) -> Option<u32> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address is HEX_IP:HEX_PORT; state 0A is LISTEN.
            let Some(local) = f.get(1) else { continue };
            let Some((_, p)) = local.rsplit_once(':') else {
                continue;
            };
            if u16::from_str_radix(p, 16).ok() == Some(port) && f.get(3) == Some(&"0A") {
                if let Some(inode) = f.get(9) {
                    inodes.push(format!("socket:[{inode}]"));
                }
            }
        }
    }
    if inodes.is_empty() {
        return None;
    }
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(link) = std::fs::read_link(fd.path()) {
                if inodes.iter().any(|i| Path::new(i) == link) {
                    return Some(pid);
                }
            }
        }
    }
    None
}

/// Lines of a server's stderr log that report a panic.
pub fn panics_in(log: &Path) -> std::io::Result<Vec<String>> {
    let text = std::fs::read(log)?;
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| l.contains("panicked") || l.contains("handler panicked"))
        .take(50)
        .map(str::to_string)
        .collect())
}

/// Raises this process's soft open-file limit to at least `want` (bounded
/// by the hard limit); returns the limit in force afterwards.
#[allow(unsafe_code)]
pub fn raise_open_files(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes a complete rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    if lim.rlim_cur >= want {
        return lim.rlim_cur;
    }
    let raised = libc::rlimit {
        rlim_cur: want.min(lim.rlim_max),
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit reads the struct we pass; raising the soft limit up
    // to the hard limit needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        raised.rlim_cur
    } else {
        lim.rlim_cur
    }
}

/// One RSS sample.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RssSample {
    /// Seconds since sampling began.
    pub at_s: f64,
    pub rss_kib: u64,
}

/// RSS figures of a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RssSummary {
    pub start_kib: u64,
    pub peak_kib: u64,
    pub end_kib: u64,
    pub samples: Vec<RssSample>,
    /// The process was seen gone (or a zombie) during the run.
    pub died: bool,
}

/// Kibibytes as MiB with one decimal (reports).
pub fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

impl RssSummary {
    /// The report lines about the server process: pid, liveness, RSS at
    /// start/peak/end and about `points` samples over time.
    pub fn render_server(&self, pid: Option<u32>, alive: Option<bool>, points: usize) -> String {
        let tl: Vec<String> = self
            .timeline(points)
            .iter()
            .map(|s| format!("{:.0}s:{}", s.at_s, mib(s.rss_kib)))
            .collect();
        format!(
            "  server pid {}: alive {}, RSS start {} MiB, peak {} MiB, end {} MiB\n  RSS over time (MiB): {}\n",
            pid.map_or("?".into(), |p| p.to_string()),
            alive.map_or("unknown".into(), |a| a.to_string()),
            mib(self.start_kib),
            mib(self.peak_kib),
            mib(self.end_kib),
            tl.join(" ")
        )
    }

    /// `samples` thinned to about `n` evenly spaced ones (for reports).
    pub fn timeline(&self, n: usize) -> Vec<RssSample> {
        if self.samples.len() <= n || n < 2 {
            return self.samples.clone();
        }
        let step = (self.samples.len() - 1) as f64 / (n - 1) as f64;
        (0..n)
            .map(|i| self.samples[((i as f64 * step).round() as usize).min(self.samples.len() - 1)])
            .collect()
    }
}

/// Samples a process's RSS on a background task until dropped or stopped.
#[derive(Debug)]
pub struct RssWatch {
    state: Arc<Mutex<RssSummary>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RssWatch {
    /// Starts sampling `pid` every `every`.
    pub fn start(pid: u32, every: Duration) -> RssWatch {
        let state = Arc::new(Mutex::new(RssSummary::default()));
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let st = state.clone();
        let task = tokio::spawn(async move {
            let began = Instant::now();
            let mut every_now = every;
            loop {
                let sample = rss_kib(pid);
                let dead = !alive(pid);
                {
                    let mut s = st.lock().unwrap_or_else(|e| e.into_inner());
                    if dead {
                        s.died = true;
                    }
                    if let Some(kib) = sample {
                        if s.samples.is_empty() {
                            s.start_kib = kib;
                        }
                        s.peak_kib = s.peak_kib.max(kib);
                        s.end_kib = kib;
                        s.samples.push(RssSample {
                            at_s: began.elapsed().as_secs_f64(),
                            rss_kib: kib,
                        });
                        if s.samples.len() >= SAMPLES_MAX {
                            // Keep every other sample and sample half as often.
                            let kept: Vec<RssSample> =
                                s.samples.iter().step_by(2).copied().collect();
                            s.samples = kept;
                            every_now *= 2;
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(every_now) => {}
                    _ = stopped.changed() => break,
                }
            }
        });
        RssWatch { state, stop, task }
    }

    /// The figures so far.
    pub fn snapshot(&self) -> RssSummary {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops sampling (after one last sample) and returns the figures.
    pub async fn finish(self, pid: u32) -> RssSummary {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(kib) = rss_kib(pid) {
            s.end_kib = kib;
            s.peak_kib = s.peak_kib.max(kib);
        } else {
            s.died = true;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let me = std::process::id();
        assert!(alive(me));
        assert!(rss_kib(me).is_some_and(|k| k > 0));
        assert!(open_files_limit(me).is_some());
        assert!(raise_open_files(16) >= 16);
    }

    #[test]
    fn finds_a_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(listener_pid(port), Some(std::process::id()));
    }

    #[test]
    fn thins_timelines() {
        let s = RssSummary {
            samples: (0..100)
                .map(|i| RssSample {
                    at_s: i as f64,
                    rss_kib: i,
                })
                .collect(),
            ..RssSummary::default()
        };
        let t = s.timeline(5);
        assert_eq!(
            t.iter().map(|x| x.rss_kib).collect::<Vec<_>>(),
            vec![0, 25, 50, 74, 99]
        );
    }
}
