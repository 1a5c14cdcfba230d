//! `GET /_node/{node}/_prometheus`: the node's statistics in Prometheus'
//! text format, as CouchDB 3.4's `couch_prometheus` renders them.
//!
//! The input is the very tree `/_node/{node}/_stats` answers (so the two
//! never disagree) plus `_system`'s uptime and memory. CouchDB's naming
//! rules are kept: every name starts `couchdb_`; a leading `couchdb`
//! group is dropped; a counter's name ends in `_total`; request methods
//! and status codes are one metric each with a `method` or `code` label;
//! `auth_cache_hits` becomes `auth_cache_requests_total` (hits plus
//! misses); `open_databases`, `open_os_files` and
//! `httpd.clients_requesting_changes` are gauges; a histogram (in
//! milliseconds) becomes a summary in seconds with `_sum` and `_count`;
//! the uptime is `couchdb_uptime_seconds`. Settee has no Erlang VM: in
//! place of CouchDB's `couchdb_erlang_*` metrics it reports its own
//! memory by part as `couchdb_memory_bytes{memory_type="…"}` (the parts
//! `_system` lists). Unlike CouchDB, a `# HELP` line is not preceded by an
//! empty line nor ended by a carriage return.
//!
//! Invariant: pure (a function of its inputs), every metric name and
//! label value is written from a fixed set of characters (`[a-z0-9_]` for
//! names; label values escaped as the format requires), and each metric
//! has exactly one `# TYPE` line, before its first sample.

use std::fmt::Write as _;

use serde_json::Value;

/// The `Content-Type` CouchDB sends with it.
pub const CONTENT_TYPE: &str = "text/plain; version=2.0";

/// The text of a scrape: `stats` is `_stats`' tree, `memory` `_system`'s
/// memory parts in bytes.
pub fn render(stats: &Value, uptime_secs: u64, memory: &[(String, u64)]) -> String {
    let mut leaves = Vec::new();
    collect(stats, &mut Vec::new(), &mut leaves);
    leaves.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Out::default();
    let find = |path: &[&str]| -> Option<f64> {
        leaves
            .iter()
            .find(|(p, _)| p.iter().map(String::as_str).eq(path.iter().copied()))
            .and_then(|(_, info)| info["value"].as_f64())
    };
    for (path, info) in &leaves {
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        let value = info["value"].as_f64();
        let desc = info["desc"].as_str().unwrap_or("");
        match p.as_slice() {
            ["couchdb", "httpd_request_methods", m] => out.sample(
                "httpd_request_methods",
                "counter",
                "number of HTTP requests by method",
                Some(("method", m)),
                value.unwrap_or(0.0),
            ),
            ["couchdb", "httpd_status_codes", c] => out.sample(
                "httpd_status_codes",
                "counter",
                "number of HTTP responses by status code",
                Some(("code", c)),
                value.unwrap_or(0.0),
            ),
            ["couchdb", "auth_cache_hits"] => out.sample(
                "auth_cache_requests_total",
                "counter",
                "number of authentication cache requests",
                None,
                value.unwrap_or(0.0) + find(&["couchdb", "auth_cache_misses"]).unwrap_or(0.0),
            ),
            ["couchdb", "open_databases"]
            | ["couchdb", "open_os_files"]
            | ["couchdb", "httpd", "clients_requesting_changes"] => {
                out.sample(&name(&p[1..]), "gauge", desc, None, value.unwrap_or(0.0))
            }
            _ => {
                let p = p.strip_prefix(&["couchdb"]).unwrap_or(&p);
                match info["type"].as_str() {
                    Some("counter") => {
                        let mut n = name(p);
                        if !n.ends_with("_total") {
                            n.push_str("_total");
                        }
                        out.sample(&n, "counter", desc, None, value.unwrap_or(0.0));
                    }
                    Some("gauge") => {
                        out.sample(&name(p), "gauge", desc, None, value.unwrap_or(0.0))
                    }
                    Some("histogram") => out.summary(&name(p), desc, &info["value"]),
                    _ => {}
                }
            }
        }
    }
    out.sample(
        "uptime_seconds",
        "counter",
        "couchdb uptime",
        None,
        uptime_secs as f64,
    );
    for (part, bytes) in memory {
        out.sample(
            "memory_bytes",
            "gauge",
            "memory (in bytes) held by the process (rss) and by its parts",
            Some(("memory_type", part)),
            *bytes as f64,
        );
    }
    out.text
}

/// Every stat of the tree (an object with a `type`), by its path.
fn collect(v: &Value, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, Value)>) {
    let Value::Object(m) = v else { return };
    if m.contains_key("type") && m.contains_key("value") {
        out.push((path.clone(), v.clone()));
        return;
    }
    for (k, child) in m {
        path.push(k.clone());
        collect(child, path, out);
        path.pop();
    }
}

/// A path as a metric name's part: `_`-joined, other characters than
/// `[a-z0-9_]` replaced by `_`.
fn name(path: &[&str]) -> String {
    path.join("_")
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '_' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '_',
        })
        .collect()
}

#[derive(Default)]
struct Out {
    text: String,
    /// The last metric given a `# TYPE` line (samples of one metric are
    /// consecutive, since the stats are sorted by path).
    typed: Vec<String>,
}

impl Out {
    fn head(&mut self, metric: &str, kind: &str, desc: &str) {
        if self.typed.iter().any(|m| m == metric) {
            return;
        }
        self.typed.push(metric.to_string());
        let desc = desc.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP couchdb_{metric} {desc}");
        let _ = writeln!(self.text, "# TYPE couchdb_{metric} {kind}");
    }

    fn sample(
        &mut self,
        metric: &str,
        kind: &str,
        desc: &str,
        label: Option<(&str, &str)>,
        v: f64,
    ) {
        self.head(metric, kind, desc);
        match label {
            Some((k, lv)) => {
                let lv = lv
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = writeln!(self.text, "couchdb_{metric}{{{k}=\"{lv}\"}} {}", num(v));
            }
            None => {
                let _ = writeln!(self.text, "couchdb_{metric} {}", num(v));
            }
        }
    }

    /// CouchDB's histogram (`percentile: [[50, ms], …]`, `n`,
    /// `arithmetic_mean`) as a summary in seconds.
    fn summary(&mut self, base: &str, desc: &str, v: &Value) {
        let metric = format!("{base}_seconds");
        self.head(&metric, "summary", desc);
        for pair in v["percentile"].as_array().into_iter().flatten() {
            let (Some(p), Some(ms)) = (pair[0].as_u64(), pair[1].as_f64()) else {
                continue;
            };
            let q = match p {
                50 => "0.5",
                75 => "0.75",
                90 => "0.9",
                95 => "0.95",
                99 => "0.99",
                999 => "0.999",
                _ => continue,
            };
            let _ = writeln!(
                self.text,
                "couchdb_{metric}{{quantile=\"{q}\"}} {}",
                num(ms / 1000.0)
            );
        }
        let n = v["n"].as_f64().unwrap_or(0.0);
        let mean = v["arithmetic_mean"].as_f64().unwrap_or(0.0);
        let _ = writeln!(self.text, "couchdb_{metric}_sum {}", num(n * mean / 1000.0));
        let _ = writeln!(self.text, "couchdb_{metric}_count {}", num(n));
    }
}

/// Integers without a fraction, others as Rust prints them.
fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(v: u64, d: &str) -> Value {
        json!({"value": v, "type": "counter", "desc": d})
    }

    #[test]
    fn couchdb_names_labels_and_types() {
        let stats = json!({"couchdb": {
            "httpd": {"requests": c(14, "number of HTTP requests"), "bulk_requests": c(2, "number of bulk requests"),
                      "clients_requesting_changes": c(1, "number of clients for continuous _changes")},
            "database_reads": c(3, "number of times a document was read from a database"),
            "database_writes": c(4, "number of times a database was changed"),
            "open_databases": c(5, "number of open databases"),
            "auth_cache_hits": c(7, "number of authentication cache hits"),
            "auth_cache_misses": c(2, "number of authentication cache misses"),
            "httpd_request_methods": {"GET": c(10, "number of HTTP GET requests"), "PUT": c(4, "number of HTTP PUT requests")},
            "httpd_status_codes": {"200": c(9, "number of HTTP 200 OK responses"), "404": c(1, "number of HTTP 404 Not Found responses")},
            "request_time": {"type": "histogram", "desc": "length of a request inside CouchDB without MochiWeb",
                             "value": {"n": 4, "arithmetic_mean": 2.5, "percentile": [[50, 2.0], [99, 7.0]]}},
        }});
        let text = render(&stats, 42, &[("rss".into(), 1024)]);
        let want = "\
# HELP couchdb_auth_cache_requests_total number of authentication cache requests
# TYPE couchdb_auth_cache_requests_total counter
couchdb_auth_cache_requests_total 9
# HELP couchdb_auth_cache_misses_total number of authentication cache misses
# TYPE couchdb_auth_cache_misses_total counter
couchdb_auth_cache_misses_total 2
# HELP couchdb_database_reads_total number of times a document was read from a database
# TYPE couchdb_database_reads_total counter
couchdb_database_reads_total 3
# HELP couchdb_database_writes_total number of times a database was changed
# TYPE couchdb_database_writes_total counter
couchdb_database_writes_total 4
# HELP couchdb_httpd_bulk_requests_total number of bulk requests
# TYPE couchdb_httpd_bulk_requests_total counter
couchdb_httpd_bulk_requests_total 2
# HELP couchdb_httpd_clients_requesting_changes number of clients for continuous _changes
# TYPE couchdb_httpd_clients_requesting_changes gauge
couchdb_httpd_clients_requesting_changes 1
# HELP couchdb_httpd_requests_total number of HTTP requests
# TYPE couchdb_httpd_requests_total counter
couchdb_httpd_requests_total 14
# HELP couchdb_httpd_request_methods number of HTTP requests by method
# TYPE couchdb_httpd_request_methods counter
couchdb_httpd_request_methods{method=\"GET\"} 10
couchdb_httpd_request_methods{method=\"PUT\"} 4
# HELP couchdb_httpd_status_codes number of HTTP responses by status code
# TYPE couchdb_httpd_status_codes counter
couchdb_httpd_status_codes{code=\"200\"} 9
couchdb_httpd_status_codes{code=\"404\"} 1
# HELP couchdb_open_databases number of open databases
# TYPE couchdb_open_databases gauge
couchdb_open_databases 5
# HELP couchdb_request_time_seconds length of a request inside CouchDB without MochiWeb
# TYPE couchdb_request_time_seconds summary
couchdb_request_time_seconds{quantile=\"0.5\"} 0.002
couchdb_request_time_seconds{quantile=\"0.99\"} 0.007
couchdb_request_time_seconds_sum 0.01
couchdb_request_time_seconds_count 4
# HELP couchdb_uptime_seconds couchdb uptime
# TYPE couchdb_uptime_seconds counter
couchdb_uptime_seconds 42
# HELP couchdb_memory_bytes memory (in bytes) held by the process (rss) and by its parts
# TYPE couchdb_memory_bytes gauge
couchdb_memory_bytes{memory_type=\"rss\"} 1024
";
        assert_eq!(text, want);
    }

    #[test]
    fn every_metric_typed_once_before_its_samples() {
        let stats =
            json!({"couchdb": {"httpd_status_codes": {"200": c(1, "a"), "201": c(2, "b")}}});
        let text = render(&stats, 0, &[("rss".into(), 1), ("doc_cache".into(), 2)]);
        let mut seen = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let m = rest.split(' ').next().unwrap();
                assert!(seen.insert(m.to_string()), "{m} typed twice");
            } else if !line.starts_with('#') {
                let m = line.split(['{', ' ']).next().unwrap();
                assert!(seen.contains(m), "{m} sampled before its TYPE");
                assert!(m
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
            }
        }
    }
}
