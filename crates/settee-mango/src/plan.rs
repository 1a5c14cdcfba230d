//! Choosing the index a `_find` reads, and the key range it reads there —
//! CouchDB's rules: a json index is usable when each of its fields is one
//! every matching document has (or a sort field), its fields begin with
//! the sort's, and it is not partial (unless named by `use_index`); the
//! best has the longest prefix of fields with ranges, then the fewest
//! fields, then the first design document and name. `_all_docs` serves
//! the rest, with CouchDB's warning; a sort no index serves is refused.
//!
//! Invariant: the chosen range is a superset of the rows that can match;
//! the executor filters every row with the full selector.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::defs::{IndexDef, Kind};
use crate::error::{MangoError, Result};
use crate::request::{Dir, FindRequest};
use crate::select::{all_fields, normalize, required_fields, FieldRange, Ranges};

/// The key above every key the planner compares with (CouchDB's
/// `<MAX>`): an object sorts after every other type.
pub fn max_key() -> Value {
    json!({"\u{fff0}\u{fff0}": "<MAX>"})
}

pub const NO_INDEX_WARNING: &str =
    "No matching index found, create an index to optimize query time.";

/// Why an index was or was not chosen (for `_explain`).
#[derive(Debug, Clone)]
pub struct Candidate {
    pub def: IndexDef,
    pub usable: bool,
    pub reason: &'static str,
    pub ranking: usize,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub index: IndexDef,
    pub norm: Value,
    /// Json index: key arrays; `_all_docs`: ids (as JSON strings).
    pub start_key: Option<Value>,
    pub end_key: Option<Value>,
    /// Json index: the key ranges read, in reading order (start, end) —
    /// CouchDB's one range, or (beyond CouchDB) one per value or branch
    /// of an `$in` or `$or` on the first field that is not one value.
    pub ranges: Vec<(Value, Value)>,
    pub descending: bool,
    /// The chosen index's first field has conditions that cannot all hold:
    /// CouchDB answers `{"docs": []}` and nothing else.
    pub unsatisfiable: bool,
    /// The range read holds no document (an `_id` bounded above by a
    /// non-string, which sorts below every id).
    pub reads_nothing: bool,
    /// The requested fields are all in the index: documents not read.
    pub covering: bool,
    pub warnings: Vec<String>,
    pub candidates: Vec<Candidate>,
}

fn columns(d: &IndexDef) -> Vec<&str> {
    d.fields.iter().map(|(f, _)| f.as_str()).collect()
}

/// Leading fields with a range (CouchDB's composite prefix: every leading
/// field with bounds or `$exists: true`).
fn prefix(d: &IndexDef, ranges: &Ranges<'_>) -> usize {
    d.fields
        .iter()
        .take_while(|(f, _)| ranges.bounded(f))
        .count()
}

/// Every index as unusable for a sort none serves (`_explain` then shows
/// no index, where `_find` refuses).
pub fn unusable_for_sort(defs: &[IndexDef]) -> Vec<Candidate> {
    defs.iter()
        .rev()
        .map(|d| Candidate {
            def: d.clone(),
            usable: false,
            reason: if d.kind == Kind::Special {
                "field_mismatch"
            } else {
                "sort_order_mismatch"
            },
            ranking: 1,
        })
        .collect()
}

pub fn choose(defs: &[IndexDef], req: &FindRequest) -> Result<Plan> {
    if req.sort.windows(2).any(|w| w[0].1 != w[1].1) {
        return Err(MangoError::invalid(
            "unsupported_mixed_sort",
            "Sorts currently only support a single direction for all fields.",
        ));
    }
    let descending = req.sort.first().is_some_and(|(_, d)| *d == Dir::Desc);
    let norm = normalize(&req.selector_json);
    let ranges = Ranges::new(&norm);
    let required = required_fields(&norm);
    let sort_fields: Vec<&str> = req.sort.iter().map(|(f, _)| f.as_str()).collect();
    let named = |d: &IndexDef| {
        req.use_index.as_ref().is_some_and(|u| {
            d.ddoc.as_deref() == Some(u.ddoc.as_str())
                && u.name.as_ref().is_none_or(|n| *n == d.name)
        })
    };
    let usable_reason = |d: &IndexDef| -> Option<&'static str> {
        // A partition's query reads partitioned indexes; a global one,
        // global indexes.
        if d.kind != Kind::Special && d.partitioned != req.partition.is_some() {
            return Some("scope_mismatch");
        }
        match d.kind {
            Kind::Text => text_unusable(d, req, &norm, named(d)),
            Kind::Special => {
                let ok =
                    sort_fields.is_empty() || (sort_fields == ["_id"] && required.contains("_id"));
                (!ok).then_some("sort_order_mismatch")
            }
            Kind::Json => {
                let cols = columns(d);
                if cols
                    .iter()
                    .any(|c| !required.contains(*c) && !sort_fields.contains(c))
                {
                    return Some("field_mismatch");
                }
                if !sort_fields.is_empty() && !sort_served(&cols, &sort_fields, &ranges) {
                    return Some("sort_order_mismatch");
                }
                if d.partial.is_some() && !named(d) {
                    return Some("is_partial");
                }
                None
            }
        }
    };
    let mut warnings = Vec::new();
    let mut chosen: Option<&IndexDef> = None;
    let texts: Vec<&IndexDef> = defs
        .iter()
        .filter(|d| d.kind == Kind::Text && usable_reason(d).is_none())
        .collect();
    if req.text.is_some() {
        // Only a text index answers `$text`.
        let named_text = texts.iter().find(|d| named(d)).copied();
        chosen = match (named_text, texts.as_slice()) {
            (Some(t), _) => Some(t),
            (None, [one]) => Some(*one),
            (None, []) => {
                return Err(MangoError::NoUsableIndex(
                    "No text index exists for this query: a `$text` selector needs one."
                        .to_string(),
                ))
            }
            (None, _) => return Err(multiple_text_indexes()),
        };
    } else if let Some(u) = &req.use_index {
        chosen = defs.iter().find(|d| named(d) && usable_reason(d).is_none());
        if chosen.is_none() {
            if !req.allow_fallback {
                return Err(MangoError::invalid(
                    "invalid_index",
                    format!(
                        "{} specified by `use_index` could not be found or it is not suitable.",
                        u.display()
                    ),
                ));
            }
            warnings.push(match &u.name {
                None => format!(
                    "{} was not used because it does not contain a valid index for this query.",
                    u.ddoc
                ),
                Some(_) => format!(
                    "{} was not used because it is not a valid index for this query.",
                    u.display()
                ),
            });
        }
    }
    let mut usable: Vec<&IndexDef> = defs
        .iter()
        .filter(|d| d.kind == Kind::Json && usable_reason(d).is_none())
        .collect();
    usable.sort_by(|a, b| {
        prefix(b, &ranges)
            .cmp(&prefix(a, &ranges))
            .then(a.fields.len().cmp(&b.fields.len()))
            .then(a.ddoc.cmp(&b.ddoc))
            .then(a.name.cmp(&b.name))
    });
    if chosen.is_none() {
        chosen = usable.first().copied();
    }
    if chosen.is_none() {
        // CouchDB's order: json indexes, then text indexes, then
        // `_all_docs`; of several text indexes none is preferred.
        chosen = match texts.as_slice() {
            [] => None,
            [one] => Some(*one),
            _ => return Err(multiple_text_indexes()),
        };
    }
    if chosen.is_none() {
        let all_docs = defs.iter().find(|d| d.kind == Kind::Special);
        match all_docs {
            Some(a) if usable_reason(a).is_none() => {
                if !req.allow_fallback
                    && req.use_index.is_none()
                    && !is_empty_combinator(&req.selector_json)
                {
                    return Err(MangoError::invalid(
                        "invalid_index",
                        "You must specify an index with the `use_index` parameter.",
                    ));
                }
                chosen = Some(a);
            }
            _ => {
                return Err(MangoError::NoUsableIndex(format!(
                    "No {}index exists for this sort, try indexing by the sort fields.",
                    if req.partition.is_some() {
                        "partitioned "
                    } else {
                        ""
                    }
                )))
            }
        }
    }
    let index = chosen.cloned().unwrap_or_else(IndexDef::all_docs);
    if index.kind == Kind::Special {
        warnings.push(NO_INDEX_WARNING.to_string());
    }
    let candidates = candidates(defs, &index, &usable, &usable_reason, &named, req, &ranges);
    let mut key_ranges = match index.kind {
        Kind::Json => json_ranges(&index, &ranges),
        Kind::Special | Kind::Text => Vec::new(),
    };
    if descending {
        key_ranges.reverse();
        for (s, e) in &mut key_ranges {
            std::mem::swap(s, e);
        }
    }
    let first_column = match index.kind {
        Kind::Json => index.fields.first().map(|(f, _)| f.as_str()),
        Kind::Special => Some("_id"),
        Kind::Text => None,
    };
    let unsatisfiable = first_column.is_some() && ranges.empty_field() == first_column;
    let mut reads_nothing = false;
    let (start_key, end_key) = match index.kind {
        Kind::Text => (None, None),
        Kind::Json => {
            let (s, e) = key_range(&field_ranges(&index, &ranges));
            (Some(s), Some(e))
        }
        Kind::Special => {
            let r = ranges.of("_id");
            // Ids are strings, above every other value in the order
            // `_id` is compared in: a non-string upper bound admits none.
            reads_nothing = r.high.as_ref().is_some_and(|h| !h.is_string());
            (
                r.low.filter(Value::is_string),
                r.high.filter(Value::is_string),
            )
        }
    };
    let (start_key, end_key) = if descending {
        (end_key, start_key)
    } else {
        (start_key, end_key)
    };
    let covering = index.kind == Kind::Json
        && req.fields.as_ref().is_some_and(|f| {
            let cols: BTreeSet<&str> = columns(&index).into_iter().collect();
            let mut mentioned = BTreeSet::new();
            all_fields(&norm, &mut mentioned);
            f.iter().all(|x| x == "_id" || cols.contains(x.as_str()))
                && mentioned
                    .iter()
                    .all(|x| x == "_id" || cols.contains(x.as_str()))
        });
    Ok(Plan {
        index,
        norm,
        start_key,
        end_key,
        ranges: key_ranges,
        descending,
        unsatisfiable,
        reads_nothing,
        covering,
        warnings,
        candidates,
    })
}

fn multiple_text_indexes() -> MangoError {
    MangoError::invalid(
        "multiple_text_indexes",
        "You must specify an index with the `use_index` parameter.",
    )
}

/// Why text index `d` cannot answer `req` (None: it can): CouchDB's
/// rules — not for the empty selector, not partial unless named, and an
/// index of listed fields only for selectors on those fields.
fn text_unusable(
    d: &IndexDef,
    req: &FindRequest,
    norm: &Value,
    named: bool,
) -> Option<&'static str> {
    if req.text.is_none() && req.selector_json.as_object().is_some_and(|m| m.is_empty()) {
        return Some("empty_selector");
    }
    if d.partial.is_some() && !named {
        return Some("is_partial");
    }
    if let Some(cols) = d.text_columns() {
        let names: BTreeSet<&str> = cols
            .iter()
            .filter_map(|c| c.rsplit_once(':').map(|(n, _)| n))
            .collect();
        let mut mentioned = BTreeSet::new();
        all_fields(norm, &mut mentioned);
        if mentioned.iter().any(|f| !names.contains(f.as_str())) {
            return Some("field_mismatch");
        }
    }
    None
}

/// The indexes not chosen, as `_explain` lists them: the unusable ones
/// (last in rank), then the usable ones best first.
#[allow(clippy::too_many_arguments)]
fn candidates(
    defs: &[IndexDef],
    chosen: &IndexDef,
    usable: &[&IndexDef],
    usable_reason: &dyn Fn(&IndexDef) -> Option<&'static str>,
    named: &dyn Fn(&IndexDef) -> bool,
    req: &FindRequest,
    ranges: &Ranges<'_>,
) -> Vec<Candidate> {
    let is_chosen = |d: &IndexDef| d.ddoc == chosen.ddoc && d.name == chosen.name;
    let mut winners: Vec<Candidate> = Vec::new();
    for d in usable.iter().filter(|d| !is_chosen(d)) {
        let excluded = req.use_index.is_some() && !named(d);
        let same =
            prefix(d, ranges) == prefix(chosen, ranges) && d.fields.len() == chosen.fields.len();
        winners.push(Candidate {
            def: (*d).clone(),
            usable: true,
            reason: if excluded {
                "excluded_by_user"
            } else if same && chosen.kind == Kind::Json {
                "alphabetically_comes_after"
            } else {
                "less_overlap"
            },
            ranking: 0,
        });
    }
    if let Some(a) = defs
        .iter()
        .find(|d| d.kind == Kind::Special && !is_chosen(d) && usable_reason(d).is_none())
    {
        let excluded = named(chosen);
        let c = Candidate {
            def: a.clone(),
            usable: true,
            reason: if excluded {
                "excluded_by_user"
            } else {
                "unfavored_type"
            },
            ranking: 0,
        };
        if excluded {
            winners.insert(0, c);
        } else {
            winners.push(c);
        }
    }
    for (i, c) in winners.iter_mut().enumerate() {
        c.ranking = i + 1;
    }
    let last = winners.len() + 1;
    let mut out: Vec<Candidate> = defs
        .iter()
        .rev()
        .filter(|d| !is_chosen(d))
        .filter_map(|d| {
            usable_reason(d).map(|r| Candidate {
                def: d.clone(),
                usable: false,
                reason: if d.kind == Kind::Special {
                    "field_mismatch"
                } else {
                    r
                },
                ranking: last,
            })
        })
        .collect();
    out.extend(winners);
    out
}

/// Whether an index's order is the sort's: the sort fields follow the
/// index's first fields, those before them each held to one value.
fn sort_served(cols: &[&str], sort: &[&str], ranges: &Ranges<'_>) -> bool {
    (0..cols.len()).any(|k| {
        cols.len() >= k + sort.len()
            && cols[k..k + sort.len()] == *sort
            && cols[..k].iter().all(|c| ranges.of(c).eq)
    })
}

/// `{"$and": []}` and friends: CouchDB answers them with no documents.
pub fn is_empty_combinator(sel: &Value) -> bool {
    sel.as_object().is_some_and(|m| {
        m.len() == 1
            && m.iter().all(|(k, v)| {
                matches!(k.as_str(), "$and" | "$or" | "$nor")
                    && v.as_array().is_some_and(Vec::is_empty)
            })
    })
}

fn field_ranges(index: &IndexDef, ranges: &Ranges<'_>) -> Vec<FieldRange> {
    index.fields.iter().map(|(f, _)| ranges.of(f)).collect()
}

/// The key ranges read in a json index, ascending: CouchDB's one range,
/// or one per alternative of the first field (after fields held to one
/// value) whose conditions allow several.
fn json_ranges(index: &IndexDef, by_field: &Ranges<'_>) -> Vec<(Value, Value)> {
    let ranges = field_ranges(index, by_field);
    for (i, (f, _)) in index.fields.iter().enumerate() {
        if let Some(alts) = by_field.alternatives(f) {
            return alts
                .into_iter()
                .map(|alt| {
                    let mut rs = ranges.clone();
                    rs[i] = alt;
                    key_range(&rs)
                })
                .collect();
        }
        if !ranges[i].eq {
            break;
        }
    }
    vec![key_range(&ranges)]
}

/// CouchDB's key range over a json index's fields, from each field's range.
fn key_range(ranges: &[FieldRange]) -> (Value, Value) {
    let mut start = Vec::new();
    for r in ranges {
        match &r.low {
            Some(l) => start.push(l.clone()),
            None => break,
        }
        if !r.eq {
            break;
        }
    }
    let mut end = Vec::new();
    let mut closed = false;
    for r in ranges {
        match &r.high {
            Some(h) => end.push(h.clone()),
            None => {
                end.push(max_key());
                closed = true;
                break;
            }
        }
        if !r.eq {
            end.push(max_key());
            closed = true;
            break;
        }
    }
    if !closed {
        end.push(max_key());
    }
    (Value::Array(start), Value::Array(end))
}
