//! Running a `_find`: reading the chosen index's range in order, matching
//! each document with the selector, then skip, limit, bookmark and the
//! requested fields; the answer CouchDB gives (`docs`, `bookmark`,
//! `warning`, `execution_stats`).
//!
//! Invariants:
//! - Every returned document matched the full selector (ranges only
//!   narrow what is read).
//! - Design documents are never returned (an `_all_docs` scan counts those
//!   the selector rejects as examined, as CouchDB does).
//! - Memory is bounded by the answer: rows are visited one at a time and
//!   the scan stops once `skip + limit` documents matched.

use std::time::Instant;

use serde_json::{json, Map, Value};
use settee_core::collate::collate;
use settee_core::fields::{insert, project};
use settee_core::selector::split_field_path;
use settee_db::{Database, DocRead, IdRange};
use settee_views::args::{Update, ViewArgs};
use settee_views::registry::Views;

use crate::defs::{doc_value, Kind};
use crate::error::Result;
use crate::plan::{is_empty_combinator, Plan};
use crate::request::{Bookmark, FindRequest};
use crate::sparse::Members;

/// Documents read per result past which CouchDB warns.
pub use settee_core::fields::{SCAN_RATIO_WARNING, SCAN_WARNING};

#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub keys: u64,
    pub docs: u64,
    pub results: u64,
}

/// A `_find` answer.
#[derive(Debug)]
pub struct Found {
    pub docs: Vec<Value>,
    pub bookmark: Option<Bookmark>,
    /// A text index's bookmark (opaque, settee-search's).
    pub text_bookmark: Option<String>,
    pub stats: Stats,
    pub elapsed_ms: f64,
}

/// A document made of an index row (covering queries): its id and the
/// indexed fields.
fn from_key(plan: &Plan, id: &str, key: &Value) -> Value {
    let mut m = Map::new();
    m.insert("_id".into(), Value::String(id.to_string()));
    if let Value::Array(vals) = key {
        for ((f, _), v) in plan.index.fields.iter().zip(vals) {
            insert(&mut m, &split_field_path(f), v.clone());
        }
    }
    Value::Object(m)
}

struct Collector<'a> {
    req: &'a FindRequest,
    /// What the selector reads of a document.
    members: Members,
    skip: u64,
    docs: Vec<Value>,
    last: Option<Bookmark>,
    stats: Stats,
}

impl Collector<'_> {
    /// Takes one matching candidate; false once the answer is complete.
    fn offer(&mut self, doc: Value, key: Value, id: &str) -> bool {
        if !self.req.selector.matches(&doc) {
            return true;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return true;
        }
        if self.req.limit == 0 {
            return false;
        }
        self.docs.push(project(doc, self.req.fields.as_deref()));
        self.last = Some(Bookmark {
            key,
            id: id.to_string(),
        });
        self.stats.results += 1;
        (self.docs.len() as u64) < self.req.limit
    }

    /// Takes one stored candidate, built whole only when its members the
    /// selector reads match; false once the answer is complete.
    fn offer_stored(&mut self, d: &DocRead, key: Value, id: &str) -> Result<bool> {
        if !self.req.selector.matches(&self.members.of_doc(d)?) {
            return Ok(true);
        }
        Ok(self.offer(doc_value(d)?, key, id))
    }
}

/// Runs a planned `_find`. Blocking.
pub fn run(views: &Views, db: &Database, req: &FindRequest, plan: &Plan) -> Result<Found> {
    let started = Instant::now();
    let mut c = Collector {
        req,
        members: Members::of(&plan.norm),
        skip: req.skip,
        docs: Vec::new(),
        last: None,
        stats: Stats::default(),
    };
    let nothing = plan.unsatisfiable || plan.reads_nothing;
    if !is_empty_combinator(&req.selector_json) && !nothing {
        match plan.index.kind {
            Kind::Special => all_docs(db, req, plan, &mut c)?,
            Kind::Json => json_index(views, db, req, plan, &mut c)?,
            // Run by `text_find`.
            Kind::Text => {}
        }
    }
    Ok(Found {
        docs: c.docs,
        bookmark: c.last,
        text_bookmark: None,
        stats: c.stats,
        elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
    })
}

fn all_docs(db: &Database, req: &FindRequest, plan: &Plan, c: &mut Collector<'_>) -> Result<()> {
    let mut start = plan
        .start_key
        .as_ref()
        .and_then(Value::as_str)
        .map(str::to_string);
    let bookmark = req.bookmark.as_ref().map(|b| b.id.clone());
    if let Some(b) = &bookmark {
        start = Some(b.clone());
    }
    let mut range = IdRange {
        start,
        end: plan
            .end_key
            .as_ref()
            .and_then(Value::as_str)
            .map(str::to_string),
        inclusive_end: true,
        descending: plan.descending,
        ..IdRange::default()
    };
    if let Some(p) = &req.partition {
        // Only the partition's ids, `P:` to `P;` (no id is `P;` itself).
        let (lo, hi) = settee_core::name::partition_range(p);
        range.clamp(&lo, &hi);
    }
    let reader = db.reader()?;
    let mut failed = None;
    reader.all_docs(&range, true, req.conflicts, &mut |row| {
        if bookmark.as_deref() == Some(row.id.as_str()) {
            return true;
        }
        if row.id.starts_with("_design/") {
            // CouchDB counts a design document as examined when the
            // selector rejects it (one it matches is dropped uncounted).
            let matches = row
                .doc
                .as_ref()
                .and_then(|d| c.members.of_doc(d).ok())
                .is_some_and(|doc| req.selector.matches(&doc));
            if !matches {
                c.stats.keys += 1;
                c.stats.docs += 1;
            }
            return true;
        }
        let Some(d) = &row.doc else { return true };
        c.stats.keys += 1;
        c.stats.docs += 1;
        match c.offer_stored(d, Value::String(row.id.clone()), &row.id) {
            Ok(more) => more,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    })?;
    failed.map_or(Ok(()), Err)
}

fn json_index(
    views: &Views,
    db: &Database,
    req: &FindRequest,
    plan: &Plan,
    c: &mut Collector<'_>,
) -> Result<()> {
    let ddoc = plan.index.ddoc.clone().unwrap_or_default();
    let base = ViewArgs {
        inclusive_end: true,
        descending: plan.descending,
        include_docs: !plan.covering,
        conflicts: req.conflicts,
        reduce: Some(false),
        partition: req.partition.clone().filter(|_| plan.index.partitioned),
        update: if req.update {
            Update::True
        } else {
            Update::False
        },
        ..ViewArgs::default()
    };
    let queries = range_queries(plan, req.bookmark.as_ref(), &base);
    if queries.is_empty() {
        return Ok(());
    }
    let bookmark = req.bookmark.clone();
    let mut failed = None;
    views.each_row_of(db, &ddoc, &plan.index.name, &queries, &mut |row, doc| {
        let key: Value = serde_json::from_str(&row.key).unwrap_or(Value::Null);
        if bookmark
            .as_ref()
            .is_some_and(|b| b.id == row.id && collate(&b.key, &key).is_eq())
        {
            return Ok(true);
        }
        c.stats.keys += 1;
        if plan.covering {
            return Ok(c.offer(from_key(plan, &row.id, &key), key, &row.id));
        }
        let Some(d) = doc else { return Ok(true) };
        c.stats.docs += 1;
        c.offer_stored(&d, key, &row.id).or_else(|e| {
            failed = Some(e);
            Ok(false)
        })
    })?;
    failed.map_or(Ok(()), Err)
}

/// The view queries that read a plan's ranges in order, resuming after
/// the bookmark's row: ranges wholly before it are left out, the one
/// holding it starts there. Empty ranges (start past end) are left out.
fn range_queries(plan: &Plan, bookmark: Option<&Bookmark>, base: &ViewArgs) -> Vec<ViewArgs> {
    // Ordering of a before b in reading order.
    let before = |a: &Value, b: &Value| {
        let o = collate(a, b);
        if plan.descending {
            o.is_gt()
        } else {
            o.is_lt()
        }
    };
    let mut out = Vec::new();
    let mut resume = bookmark;
    for (start, end) in &plan.ranges {
        if before(end, start) {
            continue;
        }
        let mut args = base.clone();
        args.start_key = Some(start.clone());
        args.end_key = Some(end.clone());
        if let Some(b) = resume {
            if before(end, &b.key) {
                continue;
            }
            if !before(&b.key, start) {
                args.start_key = Some(b.key.clone());
                args.start_docid = Some(b.id.clone());
            }
            resume = None;
        }
        out.push(args);
    }
    out
}

/// The answer's JSON.
pub fn answer(req: &FindRequest, plan: &Plan, found: Found) -> Value {
    let mut out = Map::new();
    let empty = is_empty_combinator(&req.selector_json) || plan.unsatisfiable;
    out.insert("docs".into(), Value::Array(found.docs));
    if empty {
        return Value::Object(out);
    }
    let bookmark = match (found.text_bookmark, found.bookmark) {
        (Some(t), _) => t,
        (None, Some(b)) => b.encode(),
        (None, None) => "nil".to_string(),
    };
    out.insert("bookmark".into(), Value::String(bookmark));
    let mut warnings = plan.warnings.clone();
    let s = found.stats;
    // docs / results > 10, in exact arithmetic (10.5 warns).
    if (s.results == 0 && s.docs > SCAN_RATIO_WARNING)
        || (s.results > 0 && s.docs > SCAN_RATIO_WARNING * s.results)
    {
        warnings.push(SCAN_WARNING.to_string());
    }
    if !warnings.is_empty() {
        out.insert("warning".into(), Value::String(warnings.join("\n")));
    }
    if req.execution_stats {
        let (docs, quorum) = if req.r > 1 { (0, s.docs) } else { (s.docs, 0) };
        out.insert(
            "execution_stats".into(),
            json!({
                "total_keys_examined": s.keys,
                "total_docs_examined": docs,
                "total_quorum_docs_examined": quorum,
                "results_returned": s.results,
                "execution_time_ms": found.elapsed_ms,
            }),
        );
    }
    Value::Object(out)
}
