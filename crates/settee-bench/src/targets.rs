//! Settee's performance targets (issue 4), checked against result rows.
//! Each target names a row and a minimum throughput; a server is only
//! judged against them when it says it is Settee (its `GET /` welcome).

use serde::Serialize;

use crate::scenarios::Outcome;

/// One target.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Goal {
    pub row: &'static str,
    pub min: f64,
    pub unit: &'static str,
    /// CouchDB 3.4.3 on this machine class, for scale.
    pub couchdb: f64,
}

pub const GOALS: &[Goal] = &[
    Goal {
        row: "bulk_doc_1000",
        min: 500_000.0,
        unit: "docs/s",
        couchdb: 24_000.0,
    },
    Goal {
        row: "benchbulk",
        min: 600_000.0,
        unit: "docs/s",
        couchdb: 29_000.0,
    },
    Goal {
        row: "single_doc_insert",
        min: 4_000.0,
        unit: "docs/s",
        couchdb: 423.0,
    },
    Goal {
        row: "batch_ok_doc_insert",
        min: 15_000.0,
        unit: "docs/s",
        couchdb: 906.0,
    },
    Goal {
        row: "concurrent_writers_32",
        min: 20_000.0,
        unit: "docs/s",
        couchdb: 1_500.0,
    },
    Goal {
        row: "all_docs_page_2000",
        min: 400_000.0,
        unit: "docs/s",
        couchdb: 25_000.0,
    },
    Goal {
        row: "random_reads_1",
        min: 15_000.0,
        unit: "ops/s",
        couchdb: 1_000.0,
    },
    Goal {
        row: "random_reads_32",
        min: 60_000.0,
        unit: "ops/s",
        couchdb: 1_400.0,
    },
    Goal {
        row: "copy",
        min: 200_000.0,
        unit: "docs/s",
        couchdb: 10_000.0,
    },
];

/// A target checked against a server's results.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub goal: Goal,
    pub server: String,
    pub measured: Option<f64>,
    pub met: Option<bool>,
}

/// Verdicts for `server` over `results` (rows not run: measured None).
pub fn check(server: &str, results: &[Outcome]) -> Vec<Verdict> {
    GOALS
        .iter()
        .map(|g| {
            let measured = results
                .iter()
                .find(|o| o.server == server && o.name == g.row)
                .map(|o| o.summary.throughput);
            Verdict {
                goal: *g,
                server: server.to_string(),
                measured,
                met: measured.map(|m| m >= g.min),
            }
        })
        .collect()
}
