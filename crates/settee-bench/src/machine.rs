//! The machine a run happened on (cores, memory, kernel, load average), read
//! from /proc so every recorded figure carries its context.

use serde::Serialize;

/// A snapshot of the machine.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub mem_total_gib: f64,
    pub kernel: String,
    pub loadavg: String,
}

impl Machine {
    pub fn now() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let mem_kib: f64 = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        Machine {
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            mem_total_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            loadavg: loadavg(),
        }
    }
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
