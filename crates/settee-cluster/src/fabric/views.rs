//! A view query on a clustered database: the design document read from
//! its home shard (and spread to every shard when it changed, see
//! [`super::design`]), the same query sent to one live copy of every
//! shard, and their rows merged as one index would have answered.
//!
//! - Map rows: merged in the view's order (the row key's encoding that the
//!   index itself sorts by, so collation, `descending`, equal keys ordered
//!   by document id and `"collation": "raw"` are a single node's), or with
//!   `keys` key by key in the keys' order; `skip` and `limit` applied to
//!   the merge (each shard asked for `skip + limit` rows, skipping none);
//!   `total_rows` and `offset` the shards' sums (as CouchDB's cluster).
//! - Reductions: each shard reduces its part (grouped as asked), and the
//!   parts of one group are reduced once more ([`Rereduce`], the view's
//!   own function with `rereduce` set); groups merged by key in the
//!   view's order.
//! - `include_docs` of a row that names another document (`{"_id": …}`)
//!   reads that document from its own shard.
//!
//! Invariants: the options are checked by the shards (a refusal is
//! relayed, so errors are a single node's); no shard is asked for more
//! than `skip + limit` rows; `_approx_count_distinct` is not reduced across
//! shards (its shards' answers are estimates, not sketches): 501.

use std::cmp::Ordering;
use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::{json, Map, Value};
use settee_index::keycodec::{encode_key, encode_loose_key, encode_row_key, Collation};
use settee_views::{IndexSpec, ViewArgs, ViewKind};

use super::call::Call;
use super::{FabricRequest, FabricResponse};
use crate::coordinator::Coordinator;
use crate::layout::{Range, ShardMap};
use crate::seq::{encode, ShardSeq};

/// Most linked documents one answer reads from other shards at once.
const LINKED_CONCURRENCY: usize = 16;

/// The reduce function of a view run over the reductions of each shard:
/// the HTTP layer's views registry does it (it runs JavaScript).
pub trait Rereduce: Send + Sync {
    /// `values` (each shard's reduction of one group, in shard order)
    /// reduced once more by view `view` of design document `ddoc`.
    fn rereduce(
        &self,
        ddoc: &Value,
        partitioned: bool,
        view: &str,
        values: Vec<Value>,
    ) -> Result<Value, String>;
}

/// One shard's reduction of a group, with where it sorts.
struct Part {
    /// Which of the `keys` it answers (0 without `keys`).
    key_no: usize,
    sort: Vec<u8>,
    /// The key's encoding without tie-breaks: equal for one group.
    loose: Vec<u8>,
    shard: usize,
    row: Value,
}

/// One shard's row, with the shard it came from.
struct Row {
    shard: usize,
    sort: Vec<u8>,
    row: Value,
}

/// `GET`/`POST /db/_design/{ddoc}/_view/{view}`.
pub async fn view(
    c: &Arc<Coordinator>,
    req: &FabricRequest,
    ddoc_name: &str,
    view_name: &str,
) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    if !matches!(req.method, Method::GET | Method::HEAD | Method::POST) {
        return super::dbs::method_not_allowed("GET,POST,HEAD");
    }
    let ddoc_id = format!("_design/{ddoc_name}");
    let ddoc = match super::design::current(c, &map, &ddoc_id, &req.user).await {
        Ok(d) => d,
        Err(e) => return e,
    };
    let body: Option<Map<String, Value>> = if req.method == Method::POST {
        match serde_json::from_slice(&req.body) {
            Ok(Value::Object(m)) => Some(m),
            _ => return super::dbs::first_range(c, req, &map).await,
        }
    } else {
        None
    };
    let pairs = req.query.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let (Ok(args), Ok(spec)) = (
        ViewArgs::from_request(pairs, body.as_ref()),
        IndexSpec::from_ddoc_in(&ddoc, map.partitioned()),
    ) else {
        return super::dbs::first_range(c, req, &map).await;
    };
    let Some(def) = spec.view(view_name) else {
        return super::dbs::first_range(c, req, &map).await;
    };
    let kind = if def.reduce.is_some() {
        ViewKind::Reduce
    } else {
        ViewKind::Map
    };
    if args.validate(kind, spec.partitioned).is_err() {
        return super::dbs::first_range(c, req, &map).await;
    }
    let reduces = args.reduces(kind);
    if reduces && def.reduce_source.as_deref().map(str::trim) == Some("_approx_count_distinct") {
        return FabricResponse::not_implemented("_approx_count_distinct across shards");
    }
    let collation = def.collation;
    let call = shard_call(req, body.as_ref(), &args);
    let ranges = map.ranges();
    let answers = match c.ask_each_shard(&map, &req.user, |_, _| call.clone()).await {
        Ok(a) => a,
        Err(e) => return e,
    };
    let pages: Vec<Value> = answers.iter().map(|a| a.json()).collect();
    let seqs: Vec<ShardSeq> = answers
        .iter()
        .zip(&pages)
        .zip(&ranges)
        .map(|((a, page), &range)| ShardSeq {
            range,
            node: a.node.clone(),
            seq: crate::seq::number(&page["update_seq"]),
        })
        .collect();
    let mut rows = if reduces {
        let grouped = args.group_level().is_some();
        match reduce_rows(
            c, &ddoc, &spec, view_name, &args, &pages, collation, grouped,
        )
        .await
        {
            Ok(r) => r,
            Err(e) => return e,
        }
    } else {
        map_rows(&map, &ranges, &args, &pages, collation)
    };
    let skip = usize::try_from(args.skip).unwrap_or(usize::MAX);
    rows = rows.into_iter().skip(skip).collect();
    rows.truncate(usize::try_from(args.limit).unwrap_or(usize::MAX));
    if args.include_docs && !reduces {
        linked_docs(c, &map, &ranges, req, &args, &mut rows).await;
    }
    let mut out = Map::new();
    if !reduces {
        let sum = |k: &str| -> u64 { pages.iter().filter_map(|p| p[k].as_u64()).sum() };
        out.insert("total_rows".into(), json!(sum("total_rows")));
        out.insert(
            "offset".into(),
            json!(sum("offset").saturating_add(args.skip)),
        );
    }
    if args.update_seq {
        out.insert("update_seq".into(), json!(encode(&seqs)));
    }
    out.insert(
        "rows".into(),
        Value::Array(rows.into_iter().map(|r| r.row).collect()),
    );
    FabricResponse::json(StatusCode::OK, &Value::Object(out))
}

/// `GET /db/_design/{ddoc}/_info`: one copy of every shard's, summed
/// (sizes, pending updates, waiting clients), running when any runs, the
/// update sequence opaque.
pub async fn info(c: &Arc<Coordinator>, req: &FabricRequest, ddoc_name: &str) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    if !matches!(req.method, Method::GET | Method::HEAD) {
        return super::dbs::method_not_allowed("GET");
    }
    let ddoc_id = format!("_design/{ddoc_name}");
    if let Err(e) = super::design::current(c, &map, &ddoc_id, &req.user).await {
        return e;
    }
    let call = Call::relay(
        Method::GET,
        &req.segments[1..],
        &req.query,
        &req.headers,
        bytes::Bytes::new(),
    );
    let answers = match c.ask_each_shard(&map, &req.user, |_, _| call.clone()).await {
        Ok(a) => a,
        Err(e) => return e,
    };
    let mut first: Option<Value> = None;
    let (mut sizes, mut pending, mut waiting) = ([0u64; 3], 0u64, 0u64);
    let (mut running, mut compacting) = (false, false);
    let mut seqs = Vec::new();
    for (a, range) in answers.iter().zip(map.ranges()) {
        let v = a.json();
        let vi = &v["view_index"];
        for (k, name) in ["file", "external", "active"].iter().enumerate() {
            sizes[k] += vi["sizes"][name].as_u64().unwrap_or(0);
        }
        pending += vi["updates_pending"]["total"].as_u64().unwrap_or(0);
        waiting += vi["waiting_clients"].as_u64().unwrap_or(0);
        running |= vi["updater_running"] == Value::Bool(true);
        compacting |= vi["compact_running"] == Value::Bool(true);
        seqs.push(ShardSeq {
            range,
            node: a.node.clone(),
            seq: crate::seq::number(&vi["update_seq"]),
        });
        first.get_or_insert(v);
    }
    let mut out = first.unwrap_or_else(|| json!({"name": ddoc_name, "view_index": {}}));
    let vi = &mut out["view_index"];
    vi["sizes"] = json!({"file": sizes[0], "external": sizes[1], "active": sizes[2]});
    vi["updates_pending"] = json!({"minimum": pending, "preferred": pending, "total": pending});
    vi["waiting_clients"] = json!(waiting);
    vi["updater_running"] = json!(running);
    vi["compact_running"] = json!(compacting);
    vi["update_seq"] = json!(encode(&seqs));
    FabricResponse::json(StatusCode::OK, &out)
}

/// The query each shard answers: the client's, reading from the start of
/// the window (no `skip`, `skip + limit` rows).
fn shard_call(req: &FabricRequest, body: Option<&Map<String, Value>>, args: &ViewArgs) -> Call {
    let window = (args.limit != u64::MAX).then(|| args.limit.saturating_add(args.skip));
    let mut query: Vec<(String, String)> = req
        .query
        .iter()
        .filter(|(k, _)| k != "skip" && k != "limit")
        .cloned()
        .collect();
    let mut call = Call::relay(
        req.method.clone(),
        &req.segments[1..],
        &[],
        &req.headers,
        bytes::Bytes::new(),
    );
    match body {
        Some(b) => {
            let mut b = b.clone();
            b.remove("skip");
            b.remove("limit");
            if let Some(w) = window {
                b.insert("limit".into(), json!(w));
            }
            call.body = bytes::Bytes::from(serde_json::to_vec(&b).unwrap_or_default());
        }
        None => {
            if let Some(w) = window {
                query.push(("limit".into(), w.to_string()));
            }
        }
    }
    call.query = query;
    call
}

/// The order of two rows as the merge reads them.
fn order(a: &[u8], b: &[u8], descending: bool) -> Ordering {
    if descending {
        b.cmp(a)
    } else {
        a.cmp(b)
    }
}

/// Each shard's rows with the keys' index each belongs to (`keys`
/// queries: a shard answers key by key in the keys' order, each key's rows
/// in order; a key given twice is answered twice).
fn by_key(
    rows: Vec<Value>,
    keys: &[Value],
    collation: Collation,
    descending: bool,
    once: bool,
) -> Vec<(usize, Value)> {
    let loose: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| encode_loose_key(k, collation))
        .collect();
    let mut out = Vec::with_capacity(rows.len());
    let mut at = 0usize;
    let mut last: Option<Vec<u8>> = None;
    for row in rows {
        let lk = encode_loose_key(&row["key"], collation);
        let sort = encode_row_key(&row["key"], row["id"].as_str().unwrap_or(""), collation);
        // Still the same key's rows while in order; else the next equal key.
        let same = at < keys.len()
            && loose[at] == lk
            && !once
            && last
                .as_ref()
                .is_none_or(|l| order(l, &sort, descending) == Ordering::Less);
        if !same {
            let start = if last.is_some() { at + 1 } else { at };
            let Some(j) = (start..keys.len()).find(|&j| loose[j] == lk) else {
                continue;
            };
            at = j;
        }
        last = Some(sort);
        out.push((at, row));
    }
    out
}

/// The keys in the order a shard answers them (`descending` reads the
/// list from its end, as a single node does).
fn in_order(keys: &[Value], descending: bool) -> Vec<Value> {
    let mut k = keys.to_vec();
    if descending {
        k.reverse();
    }
    k
}

/// The map rows of every shard merged (see the module doc).
fn map_rows(
    map: &ShardMap,
    ranges: &[Range],
    args: &ViewArgs,
    pages: &[Value],
    collation: Collation,
) -> Vec<Row> {
    let mut rows: Vec<(usize, Row)> = Vec::new();
    for (shard, page) in pages.iter().enumerate() {
        let got = page["rows"].as_array().cloned().unwrap_or_default();
        // A design document indexed (`include_design`) counts at home only.
        let got: Vec<Value> = got
            .into_iter()
            .filter(|r| !super::design::foreign(map, ranges[shard], r["id"].as_str().unwrap_or("")))
            .collect();
        let keyed: Vec<(usize, Value)> = match &args.keys {
            Some(keys) => by_key(
                got,
                &in_order(keys, args.descending),
                collation,
                args.descending,
                false,
            ),
            None => got.into_iter().map(|r| (0, r)).collect(),
        };
        for (k, row) in keyed {
            let sort = encode_row_key(&row["key"], row["id"].as_str().unwrap_or(""), collation);
            rows.push((k, Row { shard, sort, row }));
        }
    }
    rows.sort_by(|(ka, a), (kb, b)| ka.cmp(kb).then(order(&a.sort, &b.sort, args.descending)));
    rows.into_iter().map(|(_, r)| r).collect()
}

/// The reductions of every shard merged and reduced once more.
#[allow(clippy::too_many_arguments)]
async fn reduce_rows(
    c: &Arc<Coordinator>,
    ddoc: &Value,
    spec: &IndexSpec,
    view_name: &str,
    args: &ViewArgs,
    pages: &[Value],
    collation: Collation,
    grouped: bool,
) -> Result<Vec<Row>, FabricResponse> {
    let mut parts: Vec<Part> = Vec::new();
    for (shard, page) in pages.iter().enumerate() {
        let got = page["rows"].as_array().cloned().unwrap_or_default();
        let keyed: Vec<(usize, Value)> = match &args.keys {
            Some(keys) => by_key(
                got,
                &in_order(keys, args.descending),
                collation,
                args.descending,
                true,
            ),
            None => got.into_iter().map(|r| (0, r)).collect(),
        };
        for (key_no, row) in keyed {
            if row.get("error").is_some() {
                // A shard's reduction that overflowed: reported as it is.
                return Err(FabricResponse::json(
                    StatusCode::OK,
                    &json!({"rows": [row]}),
                ));
            }
            parts.push(Part {
                key_no,
                sort: encode_key(&row["key"], collation),
                loose: encode_loose_key(&row["key"], collation),
                shard,
                row,
            });
        }
    }
    parts.sort_by(|a, b| {
        a.key_no
            .cmp(&b.key_no)
            .then(order(&a.sort, &b.sort, args.descending))
            .then(a.shard.cmp(&b.shard))
    });
    // Each group's values in shard order.
    let mut groups: Vec<(Part, Vec<Value>)> = Vec::new();
    for mut p in parts {
        let value = p.row["value"].take();
        match groups.last_mut() {
            Some((g, values)) if g.key_no == p.key_no && (!grouped || g.loose == p.loose) => {
                values.push(value)
            }
            _ => groups.push((p, vec![value])),
        }
    }
    let Some(hook) = c.rereduce() else {
        return Err(FabricResponse::not_implemented("reduce across shards"));
    };
    let mut out = Vec::with_capacity(groups.len());
    for (first, values) in groups {
        let (sort, key) = (first.sort, first.row["key"].clone());
        let value = if values.len() == 1 && !is_js(spec, view_name) {
            values.into_iter().next().unwrap_or(Value::Null)
        } else {
            let (hook, ddoc, view, partitioned) = (
                Arc::clone(&hook),
                ddoc.clone(),
                view_name.to_string(),
                spec.partitioned,
            );
            let done = tokio::task::spawn_blocking(move || {
                hook.rereduce(&ddoc, partitioned, &view, values)
            })
            .await;
            let failed = |reason: String| {
                FabricResponse::error(StatusCode::INTERNAL_SERVER_ERROR, "reduce_error", reason)
            };
            match done {
                Ok(Ok(v)) => v,
                Ok(Err(reason)) => return Err(failed(reason)),
                Err(e) => return Err(failed(e.to_string())),
            }
        };
        let key = if grouped { key } else { Value::Null };
        out.push(Row {
            shard: 0,
            sort,
            row: json!({"key": key, "value": value}),
        });
    }
    Ok(out)
}

/// Whether the view's reduce is JavaScript (which always ends with a
/// rereduce, as CouchDB's does, even of one value).
fn is_js(spec: &IndexSpec, view: &str) -> bool {
    spec.view(view)
        .is_some_and(|d| d.reduce == Some(settee_views::spec::Reduce::Js))
}

/// `include_docs` rows whose value names another document (`_id`, and
/// `_rev` if given): that document read from its own shard when it is not
/// the shard that emitted the row (which read it, or found none, locally).
async fn linked_docs(
    c: &Arc<Coordinator>,
    map: &Arc<ShardMap>,
    ranges: &[Range],
    req: &FabricRequest,
    args: &ViewArgs,
    rows: &mut [Row],
) {
    use futures_util::StreamExt;
    let wanted: Vec<(usize, String, Option<String>)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let id = r.row["value"].get("_id")?.as_str()?.to_string();
            let home = map.shard_of(&id)?.0;
            (home != ranges[r.shard]).then(|| {
                let rev = r.row["value"].get("_rev").and_then(Value::as_str);
                (i, id, rev.map(str::to_string))
            })
        })
        .collect();
    let reads = futures_util::stream::iter(wanted.into_iter().map(|(i, id, rev)| {
        let (c, map, user) = (Arc::clone(c), Arc::clone(map), req.user.clone());
        let mut query = Vec::new();
        if let Some(rev) = rev {
            query.push(("rev".to_string(), rev));
        }
        if args.conflicts {
            query.push(("conflicts".to_string(), "true".to_string()));
        }
        if args.attachments {
            query.push(("attachments".to_string(), "true".to_string()));
        }
        async move {
            let (range, _) = map.shard_of(&id)?;
            let mut call = Call::get(&[]);
            call.rest = super::design::path_of(&id);
            call.query = query;
            call.headers.insert(
                http::header::ACCEPT,
                http::HeaderValue::from_static("application/json"),
            );
            let got = c.fan_out(&map, range, call, &user, 1, false).await;
            let doc = got.best().filter(|a| a.ok()).map(|a| a.json());
            Some((i, doc.unwrap_or(Value::Null)))
        }
    }))
    .buffer_unordered(LINKED_CONCURRENCY)
    .collect::<Vec<_>>()
    .await;
    for (i, doc) in reads.into_iter().flatten() {
        rows[i].row["doc"] = doc;
    }
}
