//! Partitioned databases on the wire: the id rules of writes to one
//! (`PARTITION:ID`), and `/db/_partition/{p}/…` — the partition's info,
//! and its `_all_docs`, views, `_find`, `_explain` and design functions.
//!
//! Invariants:
//! - With `[couchdb] max_partition_size` set, a write to a partition whose
//!   documents already take more bytes than that is refused (403
//!   `partition_overflow`, per document in `_bulk_docs`); deletions
//!   always pass, as in CouchDB. The size is one scan of the partition's
//!   ids per partition written (see [`size_verdicts`]).
//! - Every write path checks ids with [`check_write_id`] (or
//!   [`check_bulk_ids`] for a whole `_bulk_docs`), so a partitioned
//!   database only ever holds design, local and partitioned ids.
//! - A request under `/_partition/{p}/` is routed anew without that
//!   prefix, with [`Req::partition`] set: the handlers it reaches confine
//!   their reads to the partition (the ids `p:` to `p;`, or the
//!   partition's rows of a partitioned index) and check their permissions
//!   as for any request. Only the endpoints CouchDB serves under a
//!   partition are routed (others are 404 `missing`).

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;
use settee_core::name::{
    validate_doc_id, validate_partition, validate_partitioned_doc_id, DocKind,
};
use settee_db::Database;

use super::Routed;
use crate::auth::require_db_reader;
use crate::error::{ApiError, ApiResult};
use crate::render::json_value;
use crate::request::Req;
use crate::state::App;

/// Checks the id of a document written to `db`: CouchDB's id rules and,
/// in a partitioned database, its partition rules.
pub fn check_write_id(db: &Database, id: &str) -> ApiResult<DocKind> {
    Ok(if db.partitioned() {
        validate_partitioned_doc_id(id)?
    } else {
        validate_doc_id(id)?
    })
}

/// The `_id` of a document of a `_bulk_docs` body, read without the rest.
#[derive(Deserialize)]
struct IdOnly<'a> {
    #[serde(rename = "_id", borrow, default)]
    id: Option<std::borrow::Cow<'a, str>>,
}

/// In a partitioned database, one document of a `_bulk_docs` without a
/// partitioned id (none at all: a generated one has no partition) fails
/// the whole request, as in CouchDB. Ids that are not strings, and
/// bodies that are not objects, are left to the parse that follows.
pub fn check_bulk_ids(db: &Database, docs: &[&str]) -> ApiResult<()> {
    if !db.partitioned() {
        return Ok(());
    }
    for raw in docs {
        match serde_json::from_str::<IdOnly<'_>>(raw) {
            Ok(IdOnly { id: Some(id) }) => {
                validate_partitioned_doc_id(&id)?;
            }
            Ok(IdOnly { id: None }) => {
                return Err(settee_core::name::NameError::NotPartitioned.into())
            }
            Err(_) => {}
        }
    }
    Ok(())
}

/// Whether CouchDB serves `rest` (after `/db/_partition/{p}`) in a
/// partition.
fn served(rest: &[&str]) -> bool {
    matches!(
        rest,
        ["_all_docs" | "_find" | "_explain"]
            | ["_design", _, "_view", _]
            | ["_design", _, "_view", _, "queries"]
            | ["_design", _, "_nouveau" | "_search", _]
            | ["_design", _, "_show" | "_list" | "_update" | "_rewrite", ..]
    )
}

/// CouchDB's refusal of a write to a full partition.
fn overflow(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "partition_overflow",
        format!("Partition limit exceeded due to update on '{id}'"),
    )
}

/// The bytes per partition past which writes to `db` are refused: the
/// `max_partition_size` of a partitioned database, if one is set.
pub fn size_limit(req: &Req, db: &Database) -> Option<u64> {
    let limit = req.settings.max_partition_size;
    (db.partitioned() && limit > 0).then_some(limit)
}

/// Whether each of `docs` (`(id, deleted)`) may be written under a limit
/// of `limit` bytes per partition ([`size_limit`]): each partition written
/// is measured once, before the write.
pub async fn size_verdicts(
    db: &Database,
    docs: Vec<(String, bool)>,
    limit: u64,
) -> ApiResult<Vec<ApiResult<()>>> {
    let reader = db.reader()?;
    tokio::task::spawn_blocking(move || {
        let mut sizes: std::collections::HashMap<String, u64> = Default::default();
        docs.iter()
            .map(|(id, deleted)| {
                let Some(p) = settee_core::name::partition_of(id).filter(|_| !deleted) else {
                    return Ok(Ok(()));
                };
                let size = match sizes.get(p) {
                    Some(s) => *s,
                    None => {
                        let (lo, hi) = settee_core::name::partition_range(p);
                        let s = reader.count_range(&lo, &hi)?.live_bytes;
                        sizes.insert(p.to_string(), s);
                        s
                    }
                };
                Ok(if size > limit {
                    Err(overflow(id))
                } else {
                    Ok(())
                })
            })
            .collect::<ApiResult<Vec<_>>>()
    })
    .await?
}

/// `/db/_partition[/{p}[/…]]`.
pub async fn handle(app: &App, req: &mut Req, name: &str, rest: &[&str]) -> ApiResult<Routed> {
    let db = app.db(name)?;
    let (partition, rest) = match rest {
        [] | [""] => return Err(ApiError::bad_request("invalid_partition_req")),
        [p, rest @ ..] => (*p, rest),
    };
    if !db.partitioned() {
        return Err(ApiError::bad_request("database is not partitioned"));
    }
    validate_partition(partition)?;
    if rest.is_empty() {
        return info(req, &db, partition).await.map(Routed::Answer);
    }
    if !served(rest) {
        return Err(ApiError::not_found("missing"));
    }
    req.partition = Some(partition.to_string());
    let segs = std::iter::once(name)
        .chain(rest.iter().copied())
        .map(str::to_string)
        .collect();
    let query = req.query.pairs().to_vec();
    super::rewrite::route_again(req, segs, query)
}

/// `GET /db/_partition/{p}`: the partition's document counts and sizes
/// (one scan of its ids).
async fn info(req: &Req, db: &Database, partition: &str) -> ApiResult<Response> {
    if req.method != Method::GET {
        return Err(ApiError::method_not_allowed("GET"));
    }
    require_db_reader(req)?;
    let (lo, hi) = settee_core::name::partition_range(partition);
    let reader = db.reader()?;
    let c = tokio::task::spawn_blocking(move || reader.count_range(&lo, &hi)).await??;
    Ok(json_value(
        StatusCode::OK,
        &json!({
            "db_name": db.name(),
            "sizes": {"active": c.bytes, "external": c.live_bytes},
            "partition": partition,
            "doc_count": c.live,
            "doc_del_count": c.deleted,
        }),
    ))
}
