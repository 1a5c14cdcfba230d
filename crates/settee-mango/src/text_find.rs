//! Running a `_find` on a text index: the selector (and `$text`)
//! translated by `settee_search::mango_query`, the index's hits read page
//! by page in the sort's order (text sorts: `field:string`,
//! `field:number`, or the type the selector compares the field with),
//! every hit's document matched with the full selector, then skip, limit,
//! fields and the bookmark (the last returned hit's, opaque).
//!
//! Invariants:
//! - Every returned document matched the full selector (the index query
//!   is a superset of it); `$text` is the one clause only the index
//!   decides.
//! - Memory is bounded by the answer and one page of hits
//!   ([`settee_search::mango_find::PAGE_MAX`]).

use std::time::Instant;

use serde_json::Value;
use settee_core::fields::project;
use settee_core::selector::split_field_path;
use settee_db::{Database, GetOptions};
use settee_search::mango_find::{bookmark_ok, TextPageRequest, TextSort, PAGE_MAX};
use settee_search::mango_query::{translate, TextQuery};
use settee_search::mango_text::leaf_name;
use settee_search::{Search, SearchError};

use crate::defs::doc_value;
use crate::error::{MangoError, Result};
use crate::find::{Found, Stats};
use crate::plan::{is_empty_combinator, Plan};
use crate::request::{Dir, FindRequest};

/// Hits asked of the index per page at least.
const PAGE_MIN: usize = 25;

/// A search failure as Mango reports it.
pub fn search_error(e: SearchError) -> MangoError {
    match e {
        SearchError::NotFound(r) => MangoError::NotFound(r),
        SearchError::Db(d) => MangoError::Db(d),
        SearchError::BadRequest(m) | SearchError::QueryParse(m) => {
            MangoError::invalid("text_search_error", m)
        }
        other => MangoError::Server {
            error: "text_search_error",
            reason: other.to_string(),
        },
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SortType {
    Str,
    Num,
}

/// The types the selector compares `field` with (CouchDB's sort type
/// inference: a condition `{field: {"$op": string or number}}`).
fn sort_types(norm: &Value, field: &str, out: &mut Vec<SortType>) {
    match norm {
        Value::Object(m) => {
            for (k, v) in m {
                if k == field {
                    if let Value::Object(ops) = v {
                        for (op, arg) in ops {
                            if op.starts_with('$') {
                                match arg {
                                    Value::String(_) => out.push(SortType::Str),
                                    Value::Number(_) => out.push(SortType::Num),
                                    _ => {}
                                }
                            }
                        }
                    }
                } else if k.starts_with('$') {
                    sort_types(v, field, out);
                }
            }
        }
        Value::Array(items) => {
            for i in items {
                sort_types(i, field, out);
            }
        }
        _ => {}
    }
}

/// The index's sort of a request's `sort` (`field:string`,
/// `field:number`, or a field whose type the selector gives).
pub fn text_sort(req: &FindRequest, norm: &Value) -> Result<Vec<TextSort>> {
    req.sort
        .iter()
        .map(|(f, dir)| {
            let (path, number) = if let Some(p) = f.strip_suffix(":string") {
                (p.to_string(), false)
            } else if let Some(p) = f.strip_suffix(":number") {
                (p.to_string(), true)
            } else {
                let mut types = Vec::new();
                sort_types(norm, f, &mut types);
                types.sort_by_key(|t| *t == SortType::Num);
                types.dedup();
                match types.as_slice() {
                    [SortType::Str] => (f.clone(), false),
                    [SortType::Num] => (f.clone(), true),
                    _ => {
                        return Err(MangoError::invalid(
                            "text_sort_error",
                            format!(
                                "Unspecified or ambiguous sort type. Try appending :number or :string to the sort field. {f}"
                            ),
                        ))
                    }
                }
            };
            let ty = if number { "number" } else { "string" };
            Ok(TextSort {
                field: leaf_name(&split_field_path(&path), ty),
                number,
                desc: *dir == Dir::Desc,
            })
        })
        .collect()
}

/// The sort as `_explain` shows it: `relevance`, or the sort fields
/// (`-` first when descending, `<string>`/`<number>` after).
pub fn sort_json(sort: &[TextSort]) -> Value {
    if sort.is_empty() {
        return Value::String("relevance".into());
    }
    Value::Array(
        sort.iter()
            .map(|s| {
                Value::String(format!(
                    "{}{}<{}>",
                    if s.desc { "-" } else { "" },
                    s.field,
                    if s.number { "number" } else { "string" }
                ))
            })
            .collect(),
    )
}

/// The index query of a request on text index `plan.index`.
pub fn query_of(req: &FindRequest, plan: &Plan) -> TextQuery {
    translate(
        &req.selector_json,
        req.text.as_deref(),
        plan.index.text_lengths(),
    )
}

/// Runs a `_find` planned on a text index. Blocking.
pub fn run(search: &Search, db: &Database, req: &FindRequest, plan: &Plan) -> Result<Found> {
    let started = Instant::now();
    let sort = text_sort(req, &plan.norm)?;
    // "nil" is the bookmark of no page (what an empty answer gives).
    let given = req.bookmark_given.clone().filter(|b| b != "nil");
    if let Some(b) = &given {
        if !bookmark_ok(b, &sort) {
            return Err(MangoError::invalid(
                "invalid_bookmark",
                format!("Invalid bookmark value: \"{b}\""),
            ));
        }
    }
    let mut found = Found {
        docs: Vec::new(),
        bookmark: None,
        text_bookmark: None,
        stats: Stats::default(),
        elapsed_ms: 0.0,
    };
    if req.limit == 0 || is_empty_combinator(&req.selector_json) {
        found.elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
        return Ok(found);
    }
    let page_req = TextPageRequest {
        query: query_of(req, plan),
        sort,
        partition: req.partition.clone(),
    };
    let ddoc = plan.index.ddoc.clone().unwrap_or_default();
    let want = req.skip.saturating_add(req.limit);
    let page_n = usize::try_from(want)
        .unwrap_or(PAGE_MAX)
        .clamp(PAGE_MIN, PAGE_MAX);
    let opts = GetOptions {
        conflicts: req.conflicts,
        ..GetOptions::default()
    };
    let mut after = given;
    let mut skip = req.skip;
    let mut first = true;
    'pages: loop {
        let hits = search
            .mango_page(
                db,
                &ddoc,
                &plan.index.name,
                &page_req,
                after.as_deref(),
                page_n,
                first && req.update,
            )
            .map_err(search_error)?;
        first = false;
        let n = hits.len();
        // A snapshot at least as new as the index read.
        let reader = db.reader()?;
        for hit in hits {
            found.stats.keys += 1;
            after = Some(hit.bookmark.clone());
            let d = match reader.get(&hit.id, &opts) {
                Ok(d) if !d.deleted => d,
                Ok(_) | Err(settee_db::Error::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            found.stats.docs += 1;
            let doc = doc_value(&d)?;
            if !req.selector.matches(&doc) {
                continue;
            }
            if skip > 0 {
                skip -= 1;
                continue;
            }
            found.docs.push(project(doc, req.fields.as_deref()));
            found.text_bookmark = Some(hit.bookmark);
            found.stats.results += 1;
            if found.docs.len() as u64 >= req.limit {
                break 'pages;
            }
        }
        if n < page_n {
            break;
        }
    }
    found.elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    Ok(found)
}
