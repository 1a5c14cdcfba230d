//! Rendering results: the JMeter-like table per scenario (one line per
//! row and server, with the ratio to the first server when several ran),
//! the side-by-side summary with ratios, the targets table, and the JSON
//! document for machines. Tables are Markdown, so they paste into
//! bench/RESULTS.md as they are.

use std::fmt::Write as _;

use serde::Serialize;

use crate::machine::Machine;
use crate::scenarios::Outcome;
use crate::targets::Verdict;

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub command: String,
    pub quick: bool,
    pub machine_before: Machine,
    pub loadavg_after: String,
    /// Display names, first is the reference for ratios.
    pub servers: Vec<ServerInfo>,
    pub results: Vec<Outcome>,
    pub targets: Vec<Verdict>,
    pub skipped: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServerInfo {
    pub name: String,
    pub url: String,
    pub welcome: serde_json::Value,
}

/// Human-readable throughput.
pub fn rate(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 1000.0 {
        format!("{:.1}k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

pub const TABLE_HEAD: &str = "| row | server | samples | throughput | mean ms | median ms | p90 ms | p99 ms | min ms | max ms | errors | client CPU |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";

/// One table line.
pub fn line(o: &Outcome) -> String {
    let s = &o.summary;
    let errors = if o.errors_expected && s.errors > 0 {
        format!("{} (expected)", s.errors)
    } else {
        s.errors.to_string()
    };
    format!(
        "| {} | {} | {} | {} {}/s | {} | {} | {} | {} | {} | {} | {} | {:.2} s ({:.0}%) |\n",
        o.name,
        o.server,
        s.samples,
        rate(s.throughput),
        o.unit,
        ms(s.mean_ms),
        ms(s.median_ms),
        ms(s.p90_ms),
        ms(s.p99_ms),
        ms(s.min_ms),
        ms(s.max_ms),
        errors,
        s.client_cpu_s,
        s.client_cpu_pct
    )
}

/// The table of one scenario's rows (all servers).
pub fn scenario_table(rows: &[Outcome]) -> String {
    let mut out = String::from(TABLE_HEAD);
    rows.iter().for_each(|o| out.push_str(&line(o)));
    for o in rows {
        for m in &o.error_messages {
            let _ = writeln!(out, "  {} on {}: {m}", o.name, o.server);
        }
        if let Some(extra) = extra_line(o) {
            let _ = writeln!(out, "  {} on {}: {extra}", o.name, o.server);
        }
    }
    out
}

/// Scenario-specific figures worth a line (timelines left out).
fn extra_line(o: &Outcome) -> Option<String> {
    let parts: Vec<String> = o
        .extra
        .iter()
        .filter(|(k, _)| *k != "timeline")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// Side by side: one line per row, throughput per server and the ratio
/// of each server to the first.
pub fn comparison(servers: &[String], results: &[Outcome]) -> String {
    let mut out = String::from("| row |");
    for s in servers {
        let _ = write!(out, " {s} |");
    }
    for s in servers.iter().skip(1) {
        let _ = write!(out, " {} / {s} |", servers[0]);
    }
    out.push_str("\n|---|");
    for _ in 0..servers.len() * 2 - 1 {
        out.push_str("---:|");
    }
    out.push('\n');
    let mut names: Vec<&str> = Vec::new();
    for o in results {
        if !names.contains(&o.name.as_str()) && servers.contains(&o.server) {
            names.push(&o.name);
        }
    }
    for name in names {
        let get = |s: &str| {
            results
                .iter()
                .find(|o| o.name == name && o.server == s)
                .map(|o| (o.summary.throughput, o.unit, o.summary.p99_ms))
        };
        let _ = write!(out, "| {name} |");
        for s in servers {
            match get(s) {
                Some((t, unit, p99)) => {
                    let _ = write!(out, " {} {unit}/s (p99 {} ms) |", rate(t), ms(p99));
                }
                None => out.push_str(" — |"),
            }
        }
        let first = get(&servers[0]).map(|g| g.0);
        for s in servers.iter().skip(1) {
            match (first, get(s).map(|g| g.0)) {
                (Some(a), Some(b)) if b > 0.0 => {
                    let _ = write!(out, " ratio {:.1}× |", a / b);
                }
                _ => out.push_str(" ratio — |"),
            }
        }
        out.push('\n');
    }
    out
}

/// Each serial durable row's p50 as a multiple of the `fsync_floor`
/// row's p50 (one line per row and server); `None` when the floor was
/// not measured or no serial durable row ran.
pub fn floor_table(results: &[Outcome]) -> Option<String> {
    use crate::scenarios::fsync_floor::{SERIAL_DURABLE, SERVER};
    let floor = results
        .iter()
        .find(|o| o.name == "fsync_floor" && o.server == SERVER && o.summary.samples > 0)?;
    let f = floor.summary.median_ms;
    let rows: Vec<&Outcome> = results
        .iter()
        .filter(|o| SERIAL_DURABLE.contains(&o.name.as_str()) && o.summary.samples > 0)
        .collect();
    if rows.is_empty() || f <= 0.0 {
        return None;
    }
    let mut out = format!(
        "fsync floor: p50 {} ms, p99 {} ms ({} fdatasyncs)\n\n| row | server | p50 ms | × fsync floor p50 |\n|---|---|---:|---:|\n",
        ms(f),
        ms(floor.summary.p99_ms),
        floor.summary.samples
    );
    for o in rows {
        let p = o.summary.median_ms;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2}× |",
            o.name,
            o.server,
            ms(p),
            p / f
        );
    }
    Some(out)
}

/// The targets table.
pub fn targets_table(verdicts: &[Verdict]) -> String {
    let mut out = String::from("| target | server | measured | goal | CouchDB 3.4.3 | verdict |\n|---|---|---:|---:|---:|---|\n");
    for v in verdicts {
        let _ = writeln!(
            out,
            "| {} | {} | {} | ≥ {} {} | {} | {} |",
            v.goal.row,
            v.server,
            v.measured
                .map_or("not run".into(), |m| format!("{} {}", rate(m), v.goal.unit)),
            rate(v.goal.min),
            v.goal.unit,
            rate(v.goal.couchdb),
            match v.met {
                Some(true) => "met",
                Some(false) => "missed",
                None => "—",
            }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Summary;

    fn row(name: &str, server: &str, t: f64) -> Outcome {
        Outcome {
            name: name.into(),
            scenario: name.into(),
            server: server.into(),
            unit: "docs",
            errors_expected: false,
            summary: Summary {
                throughput: t,
                ..Summary::default()
            },
            error_messages: vec![],
            extra: Default::default(),
        }
    }

    #[test]
    fn comparison_prints_ratios() {
        let servers = vec!["a".to_string(), "b".to_string()];
        let rows = [
            row("x", "a", 3000.0),
            row("x", "b", 1000.0),
            row("y", "a", 5.0),
        ];
        let t = comparison(&servers, &rows);
        assert!(t.contains("ratio 3.0×"), "{t}");
        assert!(t.contains("| y | 5 docs/s"), "{t}");
        assert!(t.contains("ratio — |"), "{t}");
        assert_eq!(rate(512_345.0), "512k");
        assert_eq!(rate(4_321.0), "4.3k");
    }

    #[test]
    fn serial_durable_rows_are_multiples_of_the_floor() {
        let mut floor = row("fsync_floor", "disk", 5000.0);
        floor.summary.samples = 10;
        floor.summary.median_ms = 0.2;
        let mut put = row("single_doc_insert", "settee", 2000.0);
        put.summary.samples = 10;
        put.summary.median_ms = 0.5;
        assert!(floor_table(&[put.clone()]).is_none(), "no floor, no table");
        assert!(floor_table(&[floor.clone()]).is_none(), "no serial row");
        let t = floor_table(&[floor, put]).unwrap();
        assert!(
            t.contains("| single_doc_insert | settee | 0.500 | 2.50× |"),
            "{t}"
        );
    }
}
