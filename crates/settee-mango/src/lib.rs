//! `settee-mango`: CouchDB's declarative queries — `POST /db/_find`,
//! `_explain` and the `_index` API — over Settee's indexes.
//!
//! Module map: [`request`] validates a `_find` body; [`select`] analyses a
//! selector for the planner; [`defs`] reads and writes index definitions
//! (query-language design documents; [`text_def`] checks a text index's);
//! [`plan`] chooses the index and key range; [`find`] runs the plan
//! (matching [`sparse`] documents first), [`text_find`] runs it on a text
//! index; [`explain`] describes it; [`erl`] renders values as CouchDB's
//! error reasons print them.
//!
//! Invariant: nothing here knows the storage engine, JavaScript or
//! tantivy: json indexes are settee-views indexes (mapped natively
//! there), text indexes settee-search's, `_all_docs` is read through
//! settee-db.

pub mod defs;
pub use settee_core::erl;
pub mod error;
pub mod explain;
pub mod find;
pub mod plan;
pub mod request;
pub mod select;
pub mod sparse;
pub mod text_def;
pub mod text_find;

use serde_json::{Map, Value};
use settee_db::Database;
use settee_search::Search;
use settee_views::registry::Views;

use crate::error::Result;
use crate::request::FindRequest;

/// `POST /db/_find` (`partition`: of `/db/_partition/P/_find`). Blocking.
pub fn find(
    views: &Views,
    search: &Search,
    db: &Database,
    body: &Map<String, Value>,
    partition: Option<&str>,
) -> Result<Value> {
    let req = parse_in(db, body, partition, true)?;
    let defs = defs::list(db)?;
    let bad_bookmark = |s: &str| {
        error::MangoError::invalid(
            "invalid_bookmark",
            format!("Invalid bookmark value: \"{s}\""),
        )
    };
    if let Some(s) = &req.bookmark_invalid {
        if !defs.iter().any(|d| d.kind == defs::Kind::Text) {
            return Err(bad_bookmark(s));
        }
    }
    let plan = plan::choose(&defs, &req)?;
    if plan.index.kind == defs::Kind::Text {
        // Its bookmarks are the text index's own (checked there).
        let found = text_find::run(search, db, &req, &plan)?;
        return Ok(find::answer(&req, &plan, found));
    }
    if let Some(s) = &req.bookmark_invalid {
        return Err(bad_bookmark(s));
    }
    let found = find::run(views, db, &req, &plan)?;
    Ok(find::answer(&req, &plan, found))
}

/// `POST /db/_explain` (`partition`: of `/db/_partition/P/_explain`).
/// Blocking.
pub fn explain(db: &Database, body: &Map<String, Value>, partition: Option<&str>) -> Result<Value> {
    let req = parse_in(db, body, partition, false)?;
    let defs = defs::list(db)?;
    match plan::choose(&defs, &req) {
        Ok(plan) if plan.index.kind == defs::Kind::Text => {
            explain::describe_text(db.name(), db.partitioned(), &req, &plan)
        }
        Ok(plan) => Ok(explain::describe(db.name(), db.partitioned(), &req, &plan)),
        Err(error::MangoError::NoUsableIndex(_)) => Ok(explain::describe_unsortable(
            db.name(),
            db.partitioned(),
            &req,
            &plan::unusable_for_sort(&defs),
        )),
        Err(e) => Err(e),
    }
}

/// A request's body read in its database and partition: the path's
/// partition, else the body's `partition` (only a partitioned database
/// has partitions); a body naming another partition than the path is
/// CouchDB's 500 `bad_partition`. `_find` (`finding`) refuses a body's
/// partition in an unpartitioned database; `_explain` ignores it.
fn parse_in(
    db: &Database,
    body: &Map<String, Value>,
    partition: Option<&str>,
    finding: bool,
) -> Result<FindRequest> {
    let mut req = FindRequest::parse(body)?;
    if let (Some(p), Some(b)) = (partition, req.partition.as_deref()) {
        if p != b {
            return Err(error::MangoError::Server {
                error: "unknown_error",
                reason: format!(
                    "Unknown Error: mango_httpd :: {{bad_partition,{}}}",
                    erl::term(&Value::String(b.to_string()), erl::Style::Bytes)
                ),
            });
        }
    }
    if let Some(p) = partition {
        req.partition = Some(p.to_string());
    }
    if !db.partitioned() && req.partition.is_some() {
        // `_explain` plans it anyway: no index of the database is a
        // partitioned one, so the plan reads `_all_docs`.
        if finding {
            return Err(error::MangoError::invalid(
                "bad_request",
                "partition specified on non-partitioned db",
            ));
        }
    }
    if let Some(p) = &req.partition {
        settee_core::name::validate_partition(p)
            .map_err(|e| error::MangoError::invalid("illegal_partition", e.to_string()))?;
    }
    Ok(req)
}
