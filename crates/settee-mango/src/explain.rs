//! `POST /db/_explain`: the plan of a `_find` as CouchDB describes it —
//! the chosen index, why each other one was not chosen, the normalised
//! selector, the options and the view arguments.
//!
//! Invariant: describes exactly the [`Plan`] `_find` would run.

use serde_json::{json, Map, Value};

use crate::defs::Kind;
use crate::plan::{is_empty_combinator, max_key, Candidate, Plan};
use crate::request::FindRequest;
use crate::select::{hints, normalize};

/// `<MAX>` where the plan has its maximum key.
fn show_key(v: &Value) -> Value {
    if *v == max_key() {
        return Value::String("<MAX>".into());
    }
    match v {
        Value::Array(items) => Value::Array(items.iter().map(show_key).collect()),
        other => other.clone(),
    }
}

/// The explanation of a query no index can sort: no index, every index a
/// candidate that cannot serve it.
pub fn describe_unsortable(
    dbname: &str,
    partitioned: bool,
    req: &FindRequest,
    candidates: &[Candidate],
) -> Value {
    let mut sort = Map::new();
    for (f, d) in &req.sort {
        sort.insert(f.clone(), Value::String(d.as_str().into()));
    }
    json!({
        "dbname": dbname,
        "index": null,
        "partitioned": partitioned,
        "selector": normalize(&req.selector_json),
        "opts": opts(req, sort),
        "limit": req.limit,
        "skip": req.skip,
        "fields": fields(req),
        "index_candidates": candidates.iter().map(|c| candidate(c, req)).collect::<Vec<_>>(),
        "selector_hints": hints_json(&normalize(&req.selector_json)),
    })
}

fn hints_json(norm: &Value) -> Value {
    let (indexable, unindexable) = hints(norm);
    json!([{
        "type": "json",
        "indexable_fields": indexable,
        "unindexable_fields": unindexable,
    }])
}

fn fields(req: &FindRequest) -> Vec<Value> {
    req.fields
        .iter()
        .flatten()
        .map(|f| Value::String(f.clone()))
        .collect()
}

/// Whether an index holds every requested field (CouchDB reports it for
/// every json candidate, usable or not).
fn holds_fields(c: &Candidate, req: &FindRequest) -> bool {
    req.fields.as_ref().is_some_and(|f| {
        !f.is_empty()
            && f.iter()
                .all(|x| x == "_id" || c.def.fields.iter().any(|(col, _)| col == x))
    })
}

fn candidate(c: &Candidate, req: &FindRequest) -> Value {
    let covering = if c.def.kind != Kind::Json {
        Value::Null
    } else {
        Value::Bool(holds_fields(c, req))
    };
    json!({
        "index": c.def.to_json(),
        "analysis": {
            "usable": c.usable,
            "reasons": [{"name": c.reason}],
            "ranking": c.ranking,
            "covering": covering,
        }
    })
}

fn opts(req: &FindRequest, sort: Map<String, Value>) -> Value {
    json!({
        "use_index": req.use_index_given,
        "bookmark": req.bookmark_given.clone().unwrap_or_else(|| "nil".into()),
        "limit": req.limit,
        "skip": req.skip,
        "sort": sort,
        "fields": fields(req),
        "partition": req.partition.clone().unwrap_or_default(),
        "r": req.r,
        "conflicts": req.conflicts,
        "stale": req.given.2,
        "update": req.given.0,
        "stable": req.given.1,
        "execution_stats": req.execution_stats,
        "allow_fallback": req.allow_fallback,
    })
}

/// The explanation of a planned query in a database (`partitioned`: a
/// partitioned one).
pub fn describe(dbname: &str, partitioned: bool, req: &FindRequest, plan: &Plan) -> Value {
    let fields: Vec<Value> = req
        .fields
        .iter()
        .flatten()
        .map(|f| Value::String(f.clone()))
        .collect();
    let mut sort = Map::new();
    for (f, d) in &req.sort {
        sort.insert(f.clone(), Value::String(d.as_str().into()));
    }
    let max = || Value::String("<MAX>".into());
    let (start, end) = match plan.index.kind {
        Kind::Text => (Value::Null, Value::Null),
        _ if is_empty_combinator(&req.selector_json) => (Value::Null, Value::Null),
        Kind::Special if plan.descending => (
            plan.start_key.clone().unwrap_or_else(max),
            plan.end_key.clone().unwrap_or(Value::Null),
        ),
        Kind::Special => (
            plan.start_key.clone().unwrap_or(Value::Null),
            plan.end_key.clone().unwrap_or_else(max),
        ),
        Kind::Json => (
            plan.start_key.as_ref().map_or(Value::Null, show_key),
            plan.end_key.as_ref().map_or(Value::Null, show_key),
        ),
    };
    let candidates: Vec<Value> = plan.candidates.iter().map(|c| candidate(c, req)).collect();
    let mut out = json!({
        "dbname": dbname,
        "index": plan.index.to_json(),
        "partitioned": partitioned,
        "selector": plan.norm,
        "opts": opts(req, sort),
        "limit": req.limit,
        "skip": req.skip,
        "fields": fields,
        "mrargs": {
            "include_docs": req.r == 1 && !plan.covering,
            "view_type": "map",
            "reduce": false,
            "partition": req.partition,
            "start_key": start,
            "end_key": end,
            "direction": if plan.descending { "rev" } else { "fwd" },
            "stable": req.stable,
            "update": req.update,
            "conflicts": if req.conflicts { Value::Bool(true) } else { Value::String("undefined".into()) },
        },
        "covering": plan.covering,
        "index_candidates": candidates,
        "selector_hints": hints_json(&plan.norm),
    });
    // Beyond CouchDB: the key ranges really read, when they are not
    // mrargs' one range (an `$in` or `$or` read as several).
    if plan.index.kind == Kind::Json && plan.ranges.len() != 1 {
        let ranges: Vec<Value> = plan
            .ranges
            .iter()
            .map(|(s, e)| json!({"start_key": show_key(s), "end_key": show_key(e)}))
            .collect();
        out["ranges"] = Value::Array(ranges);
    }
    out
}

/// The explanation of a query planned on a text index: CouchDB's members
/// of a text cursor (`query`, the selector as the index reads it;
/// `partition`; `sort`) in place of a view's `mrargs`.
pub fn describe_text(
    dbname: &str,
    partitioned: bool,
    req: &FindRequest,
    plan: &Plan,
) -> crate::error::Result<Value> {
    let text_sort = crate::text_find::text_sort(req, &plan.norm)?;
    let mut sort = Map::new();
    for (f, d) in &req.sort {
        sort.insert(f.clone(), Value::String(d.as_str().into()));
    }
    let mut selector = plan.norm.clone();
    if let (Some(t), Value::Object(m)) = (&req.text, &mut selector) {
        m.insert("$default".into(), json!({"$text": t}));
    }
    let candidates: Vec<Value> = plan.candidates.iter().map(|c| candidate(c, req)).collect();
    Ok(json!({
        "dbname": dbname,
        "index": plan.index.to_json(),
        "partitioned": partitioned,
        "selector": selector,
        "opts": opts(req, sort),
        "limit": req.limit,
        "skip": req.skip,
        "fields": fields(req),
        "query": crate::text_find::query_of(req, plan).to_lucene(),
        "partition": req.partition.clone().map_or(Value::Null, Value::String),
        "sort": crate::text_find::sort_json(&text_sort),
        "index_candidates": candidates,
        "selector_hints": hints_json(&plan.norm),
    }))
}
