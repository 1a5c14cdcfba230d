//! Settee's performance targets (issue 4 and the views issue), checked
//! against result rows.
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
    // Views: 10× CouchDB's figure, the better of two side-by-side runs of
    // `settee bench --url $S --vs $C view_build view_update view_query`
    // (100k docs, 2026-11-24, a busy shared machine: CouchDB's figures
    // varied by up to 1.8× between them). The side-by-side ratio of one
    // run is the real verdict; these minimums only follow from it.
    Goal {
        row: "view_build_map",
        min: 84_000.0,
        unit: "docs/s",
        couchdb: 8_400.0,
    },
    Goal {
        row: "view_build_sum",
        min: 56_000.0,
        unit: "docs/s",
        couchdb: 5_600.0,
    },
    Goal {
        row: "view_query_key_1",
        min: 5_400.0,
        unit: "ops/s",
        couchdb: 540.0,
    },
    Goal {
        row: "view_query_key_32",
        min: 5_600.0,
        unit: "ops/s",
        couchdb: 560.0,
    },
    Goal {
        row: "view_query_range_1",
        min: 3_400.0,
        unit: "ops/s",
        couchdb: 340.0,
    },
    Goal {
        row: "view_query_range_32",
        min: 4_300.0,
        unit: "ops/s",
        couchdb: 430.0,
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
