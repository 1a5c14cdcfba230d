//! Collects the measurements and prints them: medians per engine, their
//! ratio to RocksDB, bytes written to storage per operation, and every run
//! (Markdown tables).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::scenarios::Sizes;
use crate::stores::EngineKind;

/// One measured workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Metric {
    Lightning,
    RandomIds,
    Durable1,
    DurableN,
    PointReads,
    Scan,
}

impl Metric {
    pub const ALL: [Metric; 6] = [
        Metric::Lightning,
        Metric::RandomIds,
        Metric::Durable1,
        Metric::DurableN,
        Metric::PointReads,
        Metric::Scan,
    ];

    pub fn label(self, s: &Sizes) -> String {
        let secs = s.durable_for.as_secs_f64();
        match self {
            Metric::Lightning => format!(
                "lightning: {} docs, monotonic ids, batches of {} (docs/s)",
                s.docs, s.batch
            ),
            Metric::RandomIds => format!(
                "random 16-hex ids: {} docs, batches of {} (docs/s)",
                s.docs, s.batch
            ),
            Metric::Durable1 => format!("durable single-doc puts, 1 writer, {secs} s (docs/s)"),
            Metric::DurableN => format!(
                "durable single-doc puts, {} writers, {secs} s (docs/s)",
                s.threads
            ),
            Metric::PointReads => {
                format!("point reads: {} random gets, 1 thread (reads/s)", s.reads)
            }
            Metric::Scan => format!("_all_docs include_docs over {} docs (docs/s)", s.docs),
        }
    }
}

/// Every measurement, by workload and engine, in run order.
#[derive(Debug, Default)]
pub struct Results {
    /// Operations per second.
    runs: BTreeMap<(Metric, usize), Vec<f64>>,
    /// Bytes sent to storage per operation.
    written: BTreeMap<(Metric, usize), Vec<f64>>,
}

fn engine_index(kind: EngineKind) -> usize {
    EngineKind::ALL
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(usize::MAX)
}

/// Median (mean of the middle two for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

fn fmt_rate(x: f64) -> String {
    // Thousands separators keep big rates readable.
    let s = format!("{:.0}", x);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Results {
    pub fn add(&mut self, metric: Metric, kind: EngineKind, rate: f64, bytes_per_op: f64) {
        self.runs
            .entry((metric, engine_index(kind)))
            .or_default()
            .push(rate);
        self.written
            .entry((metric, engine_index(kind)))
            .or_default()
            .push(bytes_per_op);
    }

    /// Median bytes sent to storage per document, for the write workloads.
    pub fn written_table(&self, engines: &[EngineKind], sizes: &Sizes) -> String {
        let mut out = table_header(engines);
        for m in [
            Metric::Lightning,
            Metric::RandomIds,
            Metric::Durable1,
            Metric::DurableN,
        ] {
            let _ = write!(
                out,
                "| {} |",
                m.label(sizes).replace("(docs/s)", "(bytes/doc)")
            );
            for k in engines {
                match self
                    .written
                    .get(&(m, engine_index(*k)))
                    .and_then(|v| median(v))
                {
                    Some(b) => {
                        let _ = write!(out, " {} |", fmt_rate(b));
                    }
                    None => out.push_str(" – |"),
                }
            }
            out.push('\n');
        }
        out
    }

    fn median_of(&self, metric: Metric, kind: EngineKind) -> Option<f64> {
        self.runs
            .get(&(metric, engine_index(kind)))
            .and_then(|v| median(v))
    }

    /// Medians with the ratio to RocksDB (`1.00×` = as fast as RocksDB).
    pub fn medians_table(&self, engines: &[EngineKind], sizes: &Sizes) -> String {
        let mut out = table_header(engines);
        for m in Metric::ALL {
            let base = self.median_of(m, EngineKind::Rocks);
            let _ = write!(out, "| {} |", m.label(sizes));
            for k in engines {
                match (self.median_of(m, *k), base) {
                    (Some(v), Some(b)) if b > 0.0 => {
                        let _ = write!(out, " {} ({:.2}×) |", fmt_rate(v), v / b);
                    }
                    (Some(v), _) => {
                        let _ = write!(out, " {} |", fmt_rate(v));
                    }
                    (None, _) => out.push_str(" – |"),
                }
            }
            out.push('\n');
        }
        out
    }

    /// Median over runs of each run's ratio to RocksDB in the same run. The
    /// engines of one run ran back to back, so this cancels most of the
    /// machine's run-to-run drift that the medians table still carries.
    pub fn paired_ratios_table(&self, engines: &[EngineKind], sizes: &Sizes) -> String {
        let mut out = table_header(engines);
        for m in Metric::ALL {
            let base = self.runs.get(&(m, engine_index(EngineKind::Rocks)));
            let _ = write!(out, "| {} |", m.label(sizes));
            for k in engines {
                let ratios: Vec<f64> = match (self.runs.get(&(m, engine_index(*k))), base) {
                    (Some(v), Some(b)) => v
                        .iter()
                        .zip(b)
                        .filter(|(_, b)| **b > 0.0)
                        .map(|(v, b)| v / b)
                        .collect(),
                    _ => Vec::new(),
                };
                match median(&ratios) {
                    Some(r) => {
                        let _ = write!(out, " {r:.2}× |");
                    }
                    None => out.push_str(" – |"),
                }
            }
            out.push('\n');
        }
        out
    }

    /// Every run's value, to show the spread behind each median.
    pub fn runs_table(&self, engines: &[EngineKind], sizes: &Sizes) -> String {
        let mut out = String::from(
            "| workload | engine | runs (in order) | min–max spread |\n|---|---|---|---:|\n",
        );
        for m in Metric::ALL {
            for k in engines {
                let Some(v) = self.runs.get(&(m, engine_index(*k))) else {
                    continue;
                };
                let list: Vec<String> = v.iter().map(|x| fmt_rate(*x)).collect();
                let (lo, hi) = v
                    .iter()
                    .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
                let spread = median(v)
                    .filter(|md| *md > 0.0)
                    .map_or(0.0, |md| (hi - lo) / md * 100.0);
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {:.0}% |",
                    m.label(sizes),
                    k.name(),
                    list.join(", "),
                    spread
                );
            }
        }
        out
    }
}

/// The header and alignment rows of a table with one column per engine.
fn table_header(engines: &[EngineKind]) -> String {
    let mut out = String::from("| workload |");
    for k in engines {
        let _ = write!(out, " {} |", k.name());
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(engines.len()));
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_formatting() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(fmt_rate(1234567.4), "1,234,567");
        assert_eq!(fmt_rate(999.0), "999");
        let mut r = Results::default();
        for (rocks, lmdb) in [(10.0, 20.0), (1.0, 1.0), (4.0, 2.0)] {
            r.add(Metric::Scan, EngineKind::Rocks, rocks, 0.0);
            r.add(Metric::Scan, EngineKind::Lmdb, lmdb, 0.0);
        }
        let s = Sizes {
            docs: 1,
            batch: 1,
            reads: 1,
            durable_for: std::time::Duration::from_secs(1),
            threads: 2,
        };
        let engines = [EngineKind::Rocks, EngineKind::Lmdb];
        assert!(r
            .medians_table(&engines, &s)
            .contains("| 4 (1.00×) | 2 (0.50×) |"));
        assert!(r
            .paired_ratios_table(&engines, &s)
            .contains("| 1.00× | 1.00× |"));
    }
}
