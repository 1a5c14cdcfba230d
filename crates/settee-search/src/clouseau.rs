//! Clouseau-style search (`/db/_design/{ddoc}/_search/{index}`, the API
//! of CouchDB's search service that Mango text indexes use): a query's
//! arguments as CouchDB reads and checks them ([`ClouseauArgs`]), and its
//! answer — `total_rows`, `bookmark`, `rows` (`id`, `order`, `fields`,
//! `highlights`, `doc`), `counts`, `ranges`, or `groups` — from an
//! index's searcher.
//!
//! Invariants:
//! - The search itself (sort, bookmark, facets) is the one
//!   [`crate::query::execute`] both flavors run; this module reads the
//!   arguments, builds the sort keys and drilldown, and shapes answers.
//! - Every sort ends with `_id`, so `order` ends with the document's id
//!   (where Clouseau puts a Lucene document number) and a bookmark names
//!   exactly where the next page starts.
//! - Grouping keeps, per group, at most `2 × limit` candidates per segment
//!   and at most [`GROUPS_MAX`] groups in all; highlighting reads only the
//!   hits of the page.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use base64::Engine as _;
use serde_json::{json, Map, Value};
use settee_core::erl::{term, Style};
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::StrColumn;
use tantivy::query::{BooleanQuery, Occur as TOccur, Query, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::{DocAddress, DocId, Score, SegmentOrdinal, SegmentReader, Term};

use crate::error::{Result, SearchError};
use crate::fields::Kind;
use crate::index::{path_of, Meta, SearchIndex};
use crate::lucene::{Bound, Node, Occur};
use crate::query::{
    answered, b64, cmp_keys, cmp_vals, columns, execute, seg_key, Col, Found, OrderVal, RangeSpec,
    SegVal, SortKey,
};

/// `limit` when none is given (a partitioned database: [`LIMIT_PARTITIONED`]).
pub const DEFAULT_LIMIT: i64 = 25;
/// Largest `limit` (CouchDB's `max_limit`).
pub const MAX_LIMIT: i64 = 200;
/// `limit` of a partitioned database: default and largest.
pub const LIMIT_PARTITIONED: i64 = 2000;
/// `group_limit` when none is given, and its largest value.
pub const DEFAULT_GROUP_LIMIT: usize = 10;
pub const MAX_GROUP_LIMIT: usize = 200;
/// Most distinct groups a grouped query keeps track of.
pub const GROUPS_MAX: usize = 100_000;
/// Fragment size of highlights when `highlight_size` is not given.
pub const FRAGMENT_SIZE: usize = 100;

/// A `_search` query's arguments, read (checked further by
/// [`ClouseauArgs::check`] once the database and index are known).
#[derive(Debug, Clone, PartialEq)]
pub struct ClouseauArgs {
    pub q: Option<String>,
    pub limit: Option<Value>,
    pub sort: Option<Value>,
    pub bookmark: Option<String>,
    pub include_docs: bool,
    pub include_fields: Option<Value>,
    pub counts: Option<Value>,
    pub ranges: Option<Value>,
    pub drilldown: Vec<Value>,
    pub group_field: Option<String>,
    pub group_sort: Option<Value>,
    pub group_limit: Option<usize>,
    pub highlight_fields: Option<Value>,
    pub highlight_pre_tag: Option<Value>,
    pub highlight_post_tag: Option<Value>,
    pub highlight_number: usize,
    pub highlight_size: usize,
    pub update: bool,
    pub partition: Option<String>,
}

impl Default for ClouseauArgs {
    fn default() -> Self {
        ClouseauArgs {
            q: None,
            limit: None,
            sort: None,
            bookmark: None,
            include_docs: false,
            include_fields: None,
            counts: None,
            ranges: None,
            drilldown: Vec::new(),
            group_field: None,
            group_sort: None,
            group_limit: None,
            highlight_fields: None,
            highlight_pre_tag: None,
            highlight_post_tag: None,
            highlight_number: 1,
            highlight_size: 0,
            update: true,
            partition: None,
        }
    }
}

fn qp(msg: String) -> SearchError {
    SearchError::QueryParse(msg)
}

fn bad(msg: impl Into<String>) -> SearchError {
    SearchError::BadRequest(msg.into())
}

fn decode(s: &str) -> Result<Value> {
    serde_json::from_str(s).map_err(|_| bad("invalid UTF-8 JSON"))
}

/// An integer argument of a JSON body (or a JSON-decoded query value)
/// as CouchDB's `parse_int_param` reads it: a string is no integer.
fn int_of(name: &str, v: &Value) -> Result<i64> {
    match v {
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.as_i64().unwrap_or(i64::MAX)),
        other => Err(qp(format!(
            "Invalid value for {name}: {}",
            term(other, Style::Readable)
        ))),
    }
}

/// An integer argument of the query string (its text).
fn int_text(name: &str, s: &str) -> Result<i64> {
    s.parse::<i64>()
        .map_err(|_| qp(format!("Invalid value for {name}: {s:?}")))
}

fn positive(name: &str, v: &Value, max: Option<usize>) -> Result<usize> {
    positive_int(name, int_of(name, v)?, max)
}

fn positive_int(name: &str, i: i64, max: Option<usize>) -> Result<usize> {
    if let Some(max) = max {
        if i > max as i64 {
            return Err(qp(format!(
                "Value for {name} is too large, must not exceed {max}"
            )));
        }
    }
    if i <= 0 {
        return Err(qp(format!("{name} must be greater than zero")));
    }
    Ok(usize::try_from(i).unwrap_or(usize::MAX))
}

fn bool_text(name: &str, v: &str) -> Result<bool> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(qp(format!("Invalid value for {name}: {v:?}"))),
    }
}

impl ClouseauArgs {
    /// The arguments of `GET …/_search/{index}` (its query string).
    pub fn from_query<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> Result<ClouseauArgs> {
        let mut a = ClouseauArgs::default();
        for (k, v) in pairs {
            match k {
                "q" | "query" => a.q = Some(v.to_string()),
                "partition" => a.partition = Some(v.to_string()),
                "bookmark" => a.bookmark = Some(v.to_string()),
                "sort" => a.sort = Some(decode(v)?),
                "limit" => a.limit = Some(decode(v)?),
                "stale" if v == "ok" => a.update = false,
                "stale" => return Err(qp("stale only available as stale=ok".into())),
                "update" => a.update = bool_text(k, v)?,
                "include_docs" => a.include_docs = bool_text(k, v)?,
                "group_field" | "group_by" => a.group_field = Some(v.to_string()),
                "group_sort" => a.group_sort = Some(decode(v)?),
                "group_limit" => {
                    a.group_limit = Some(positive_int(k, int_text(k, v)?, Some(MAX_GROUP_LIMIT))?)
                }
                "include_fields" => a.include_fields = Some(decode(v)?),
                "counts" => a.counts = Some(decode(v)?),
                "ranges" => a.ranges = Some(decode(v)?),
                "drilldown" => match decode(v)? {
                    Value::Array(items) if items.first().is_some_and(Value::is_array) => {
                        a.drilldown = items
                    }
                    one => a.drilldown.push(one),
                },
                "highlight_fields" => a.highlight_fields = Some(decode(v)?),
                "highlight_pre_tag" => a.highlight_pre_tag = Some(decode(v)?),
                "highlight_post_tag" => a.highlight_post_tag = Some(decode(v)?),
                "highlight_number" => a.highlight_number = positive_int(k, int_text(k, v)?, None)?,
                "highlight_size" => a.highlight_size = positive_int(k, int_text(k, v)?, None)?,
                _ => {}
            }
        }
        Ok(a)
    }

    /// The arguments of `POST …/_search/{index}` (its JSON body; the query
    /// string's `partition` too).
    pub fn from_body(body: &Map<String, Value>, partition: Option<&str>) -> Result<ClouseauArgs> {
        let mut a = ClouseauArgs {
            partition: partition.map(str::to_string),
            ..ClouseauArgs::default()
        };
        for (k, v) in body {
            match k.as_str() {
                "q" | "query" => match v {
                    Value::String(s) => a.q = Some(s.clone()),
                    other => a.q = Some(other.to_string()),
                },
                "partition" => {
                    let p = v
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string());
                    if a.partition.as_ref().is_some_and(|old| *old != p) {
                        return Err(bad("Multiple conflicting values for `partition` provided"));
                    }
                    a.partition = Some(p);
                }
                "bookmark" => a.bookmark = v.as_str().map(str::to_string),
                "sort" => a.sort = Some(v.clone()),
                "limit" => a.limit = Some(v.clone()),
                "stale" if v == "ok" => a.update = false,
                "update" => match v {
                    Value::Bool(b) => a.update = *b,
                    other => {
                        return Err(qp(format!(
                            "Invalid value for update: {}",
                            term(other, Style::Readable)
                        )))
                    }
                },
                "include_docs" => {
                    if let Value::Bool(b) = v {
                        a.include_docs = *b;
                    }
                }
                "group_field" | "group_by" => {
                    a.group_field = Some(
                        v.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string()),
                    )
                }
                "group_sort" => a.group_sort = Some(v.clone()),
                "group_limit" => a.group_limit = Some(positive(k, v, Some(MAX_GROUP_LIMIT))?),
                "include_fields" => a.include_fields = Some(v.clone()),
                "counts" => a.counts = Some(v.clone()),
                "ranges" => a.ranges = Some(v.clone()),
                "drilldown" => match v {
                    Value::Array(items) if items.first().is_some_and(Value::is_array) => {
                        a.drilldown = items.clone()
                    }
                    one => a.drilldown.push(one.clone()),
                },
                "highlight_fields" => a.highlight_fields = Some(v.clone()),
                "highlight_pre_tag" => a.highlight_pre_tag = Some(v.clone()),
                "highlight_post_tag" => a.highlight_post_tag = Some(v.clone()),
                "highlight_number" => a.highlight_number = positive(k, v, None)?,
                "highlight_size" => a.highlight_size = positive(k, v, None)?,
                _ => {}
            }
        }
        Ok(a)
    }

    /// CouchDB's checks that need the database and the design document:
    /// `q` given, `partition` where (and only where) the index is
    /// partitioned, `limit` in range, no facets or groups with a
    /// partition. The limit to use.
    pub fn check(&self, db_partitioned: bool, index_partitioned: bool) -> Result<usize> {
        if self.q.is_none() {
            return Err(qp("Query must include a 'q' or 'query' argument".into()));
        }
        let has_partition = self.partition.is_some();
        if !db_partitioned && has_partition {
            return Err(bad("`partition` not supported on this index"));
        }
        match (index_partitioned, has_partition) {
            (true, false) => {
                return Err(bad(
                    "`partition` parameter is mandatory for queries to this index.",
                ))
            }
            (false, true) => return Err(bad("`partition` not supported on this index")),
            _ => {}
        }
        let (default, max) = if db_partitioned {
            (LIMIT_PARTITIONED, LIMIT_PARTITIONED)
        } else {
            (DEFAULT_LIMIT, MAX_LIMIT)
        };
        let limit = match &self.limit {
            None => default,
            Some(v) => int_of("limit", v)?,
        };
        if limit > max {
            return Err(qp(format!(
                "Value for limit is too large, must not exceed {max}"
            )));
        }
        if limit < 0 {
            return Err(qp("limit must be greater than or equal to zero".into()));
        }
        if has_partition
            && (self.counts.is_some()
                || !self.drilldown.is_empty()
                || self.ranges.is_some()
                || self.group_sort.is_some()
                || self.group_field.is_some()
                || self.group_limit.is_some())
        {
            return Err(bad("`partition` and any of `drilldown`, `ranges`, `group_field`, `group_sort`, `group_limit` or `group_by` are incompatible"));
        }
        Ok(usize::try_from(limit).unwrap_or(0))
    }
}

/// A list of strings, or Clouseau's refusal naming `what`.
fn string_list(v: &Value, what: &str) -> Result<Vec<String>> {
    let refuse = || bad(format!("{v} is not a valid {what} query"));
    let Value::Array(items) = v else {
        return Err(refuse());
    };
    items
        .iter()
        .map(|i| i.as_str().map(str::to_string).ok_or_else(refuse))
        .collect()
}

/// Clouseau's sort field syntax: `[-+]name[<type>]`.
fn sort_field(s: &str) -> Option<(bool, &str, Option<&str>)> {
    let (desc, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (name, ty) = match rest.split_once('<') {
        Some((n, t)) => (n, Some(t.strip_suffix('>')?)),
        None => (rest, None),
    };
    let word = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_alphanumeric() || c == '_');
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
    {
        return None;
    }
    if ty.is_some_and(|t| !word(t)) {
        return None;
    }
    Some((desc, name, ty))
}

/// The sort keys of a `sort` (or `group_sort`), `_id` last.
fn sort_keys(sort: Option<&Value>, meta: &Meta) -> Result<Vec<SortKey>> {
    let items: Vec<String> = match sort {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) if s == "relevance" => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(v @ Value::Array(_)) => string_list(v, "sort")?,
        Some(other) => return Err(bad(format!("{other} is not a valid sort query"))),
    };
    let mut keys = Vec::with_capacity(items.len() + 1);
    if items.is_empty() {
        keys.push(SortKey::Score);
    }
    for s in &items {
        match s.as_str() {
            // Lucene's score order is best first; `<score>` reverses it.
            "-<score>" => keys.push(SortKey::Score),
            "<score>" => keys.push(SortKey::ScoreAsc),
            "<doc>" => keys.push(SortKey::Id { desc: false }),
            "-<doc>" => keys.push(SortKey::Id { desc: true }),
            _ => {
                let Some((desc, name, ty)) = sort_field(s) else {
                    return Err(bad(format!("Unrecognized sort parameter: {s}")));
                };
                let path = path_of(name);
                let known = meta.types.get(name);
                keys.push(match ty {
                    Some("string") => SortKey::Str {
                        path: format!("o.{path}"),
                        desc,
                    },
                    Some("number") | None => {
                        match known {
                            Some(k) if k.contains(&Kind::Double) => {}
                            Some(k) if k.contains(&Kind::Text) || k.contains(&Kind::String) => {
                                return Err(bad("cannot sort string field as numeric field"))
                            }
                            _ => {}
                        }
                        SortKey::Double {
                            path: format!("d.{path}"),
                            desc,
                        }
                    }
                    Some(t) => return Err(bad(format!("Unrecognized type: {t}"))),
                });
            }
        }
    }
    if !matches!(keys.last(), Some(SortKey::Id { .. })) {
        keys.push(SortKey::Id { desc: false });
    }
    Ok(keys)
}

/// An `order` as Clouseau answers it: the sort values, then (our
/// tie-breaker) the document id.
fn order_json(vals: &[OrderVal]) -> Value {
    let num = |v: f64| serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number);
    Value::Array(
        vals.iter()
            .map(|v| match v {
                OrderVal::Float(f) => num(f64::from(*f)),
                OrderVal::Double(d) => num(*d),
                OrderVal::Str(s) => Value::String(s.clone()),
                OrderVal::Null => Value::Null,
            })
            .collect(),
    )
}

fn pack_bookmark(vals: &[OrderVal]) -> String {
    b64().encode(
        Value::Array(vec![Value::Array(
            vals.iter().map(OrderVal::to_json).collect(),
        )])
        .to_string(),
    )
}

fn unpack(bookmark: &str, keys: usize) -> Result<Option<Vec<OrderVal>>> {
    let invalid = || bad("Invalid bookmark");
    let bytes = b64()
        .decode(bookmark.trim_end_matches('='))
        .map_err(|_| invalid())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    let Some(Value::Array(items)) = v.as_array().and_then(|a| a.first()).cloned() else {
        return if v == json!([]) {
            Ok(None)
        } else {
            Err(invalid())
        };
    };
    let vals: Option<Vec<OrderVal>> = items.iter().map(OrderVal::from_json).collect();
    match vals {
        Some(v) if v.len() == keys => Ok(Some(v)),
        Some(_) => Err(bad("sort order not compatible with given bookmark")),
        None => Err(invalid()),
    }
}

/// The ranges of `ranges`: `{field: {label: "[a TO b]"}}`, each a
/// numeric range in the query syntax.
fn ranges_of(v: &Value) -> Result<Vec<(String, Vec<RangeSpec>)>> {
    let Value::Object(fields) = v else {
        return Err(bad("invalid ranges query"));
    };
    let mut out = Vec::new();
    for (field, labels) in fields {
        let Value::Object(labels) = labels else {
            return Err(bad(format!("{v} is not a valid ranges query")));
        };
        let mut specs = Vec::new();
        for (label, q) in labels {
            let Value::String(q) = q else {
                return Err(bad("invalid ranges query"));
            };
            let malformed = || bad(format!("{q} was not a well-formed range specification"));
            let node = crate::lucene::parse(q).map_err(|_| malformed())?;
            let Node::Range { lower, upper, .. } = node else {
                return Err(malformed());
            };
            let end = |b: &Bound, open: f64| -> Result<(f64, bool)> {
                match b {
                    Bound::Open => Ok((open, true)),
                    Bound::Included(s) | Bound::Excluded(s) => {
                        let n = crate::index::parse_number(s)
                            .filter(|_| crate::index::is_number(s))
                            .ok_or_else(malformed)?;
                        Ok((n, matches!(b, Bound::Included(_))))
                    }
                }
            };
            let (min, min_inclusive) = end(&lower, f64::NEG_INFINITY)?;
            let (max, max_inclusive) = end(&upper, f64::INFINITY)?;
            specs.push(RangeSpec {
                label: label.clone(),
                min,
                min_inclusive,
                max,
                max_inclusive,
            });
        }
        out.push((field.clone(), specs));
    }
    Ok(out)
}

/// `query` AND each drilldown: `[field, value, …]`, any of the values.
fn drilldown(index: &SearchIndex, query: Box<dyn Query>, dd: &[Value]) -> Result<Box<dyn Query>> {
    if dd.is_empty() {
        return Ok(query);
    }
    let Some(fs) = index.f.fs else {
        return Ok(query);
    };
    let mut must: Vec<(TOccur, Box<dyn Query>)> = vec![(TOccur::Must, query)];
    for d in dd {
        let Value::Array(items) = d else {
            return Err(bad(format!("invalid drilldown query {d}")));
        };
        let mut strs = Vec::with_capacity(items.len());
        for i in items {
            match i {
                Value::String(s) => strs.push(s.as_str()),
                other => return Err(bad(format!("{d} contains non-string element {other}"))),
            }
        }
        let Some((dim, values)) = strs.split_first() else {
            return Err(bad(format!("invalid drilldown query {d}")));
        };
        let any: Vec<(TOccur, Box<dyn Query>)> = values
            .iter()
            .map(|v| {
                let mut t = Term::from_field_json_path(fs, &path_of(dim), false);
                t.append_type_and_str(v);
                let q: Box<dyn Query> = Box::new(TermQuery::new(t, IndexRecordOption::Basic));
                (TOccur::Should, q)
            })
            .collect();
        if any.is_empty() {
            continue;
        }
        // Scored 0: a drilldown filters, as Lucene's does.
        must.push((
            TOccur::Must,
            Box::new(tantivy::query::BoostQuery::new(
                Box::new(BooleanQuery::new(any)),
                0.0,
            )),
        ));
    }
    Ok(Box::new(BooleanQuery::new(must)))
}

/// The options of highlighting.
struct Highlight {
    fields: Vec<String>,
    pre: String,
    post: String,
    number: usize,
    size: usize,
}

/// The terms of `node` (positive clauses only, of any field: Lucene's
/// highlighter, given no field, ignores fields), as (exact tokens,
/// prefixes); each term analyzed as its own field's.
fn query_terms(index: &SearchIndex, node: &Node, out: &mut (Vec<String>, Vec<String>)) {
    let of = |f: &Option<String>| f.clone().unwrap_or_else(|| "default".into());
    match node {
        Node::Bool(clauses) => {
            for (o, n) in clauses {
                if *o != Occur::MustNot {
                    query_terms(index, n, out);
                }
            }
        }
        Node::Boost(n, _) => query_terms(index, n, out),
        Node::Term { field: f, text } | Node::Phrase { field: f, text, .. } => {
            out.0.extend(index.analyze_text(&of(f), text));
        }
        Node::Fuzzy { text, .. } => out.0.push(text.to_lowercase()),
        Node::Prefix { text, .. } if !text.is_empty() => out.1.push(text.to_lowercase()),
        _ => {}
    }
}

/// A fragment being cut: its byte range, the ranges of its hits, and the
/// distinct terms hit.
type Fragment = (usize, usize, Vec<(usize, usize)>, Vec<String>);

/// The best fragments of `text` for the terms, highlighted.
fn fragments(
    index: &SearchIndex,
    h: &Highlight,
    field: &str,
    text: &str,
    terms: &(Vec<String>, Vec<String>),
) -> Vec<String> {
    let tokens = index.analyze_offsets(field, text);
    let hit = |t: &str| {
        terms.0.iter().any(|x| x == t) || terms.1.iter().any(|p| t.starts_with(p.as_str()))
    };
    let size = if h.size > 0 { h.size } else { FRAGMENT_SIZE };
    // Fragments cut at token boundaries every `size` bytes of text.
    let mut frags: Vec<Fragment> = vec![(0, text.len(), Vec::new(), Vec::new())];
    let mut n = 1;
    for (from, to, t) in &tokens {
        if *to >= size * n && *from > 0 {
            n += 1;
            if let Some(last) = frags.last_mut() {
                last.1 = *from;
            }
            frags.push((*from, text.len(), Vec::new(), Vec::new()));
        }
        if hit(t) {
            let last = frags.last_mut().expect("one fragment");
            last.2.push((*from, *to));
            if !last.3.contains(t) {
                last.3.push(t.clone());
            }
        }
    }
    let mut scored: Vec<(usize, usize, String)> = frags
        .into_iter()
        .enumerate()
        .filter(|(_, f)| !f.3.is_empty())
        .map(|(i, (from, to, marks, uniq))| {
            let mut s = String::new();
            let mut at = from;
            for (a, b) in marks {
                s.push_str(&text[at..a]);
                s.push_str(&h.pre);
                s.push_str(&text[a..b]);
                s.push_str(&h.post);
                at = b;
            }
            s.push_str(&text[at..to]);
            (uniq.len(), i, s)
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().take(h.number).map(|f| f.2).collect()
}

/// One hit as a row: `id`, `order`, `fields` (those of `include`, when
/// given), `highlights`.
fn row(
    index: &SearchIndex,
    searcher: &tantivy::Searcher,
    vals: &[OrderVal],
    addr: DocAddress,
    include: Option<&[String]>,
    hl: Option<(&Highlight, &Node)>,
) -> Result<(Map<String, Value>, String)> {
    use tantivy::schema::Value as _;
    let doc: tantivy::TantivyDocument = searcher.doc(addr)?;
    let id = doc
        .get_first(index.f.id)
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let stored: Map<String, Value> = doc
        .get_first(index.f.stored)
        .and_then(|v| v.as_str().and_then(|s| serde_json::from_str(s).ok()))
        .unwrap_or_default();
    let fields: Map<String, Value> = match include {
        Some(names) => stored
            .iter()
            .filter(|(k, _)| names.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        None => stored.clone(),
    };
    let mut out = Map::new();
    out.insert("id".into(), Value::String(id.clone()));
    out.insert("order".into(), order_json(vals));
    out.insert("fields".into(), Value::Object(fields));
    if let Some((h, node)) = hl {
        let mut hs = Map::new();
        let mut terms = (Vec::new(), Vec::new());
        query_terms(index, node, &mut terms);
        for f in &h.fields {
            let texts: Vec<&str> = match stored.get(f) {
                Some(Value::String(s)) => vec![s.as_str()],
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            let frags: Vec<Value> = texts
                .iter()
                .flat_map(|t| fragments(index, h, f, t, &terms))
                .map(Value::String)
                .collect();
            hs.insert(f.clone(), Value::Array(frags));
        }
        out.insert("highlights".into(), Value::Object(hs));
    }
    Ok((out, id))
}

/// A grouped query's collector: per group value, the best group-sort key
/// and the first hits in doc-sort order.
struct GroupCollector {
    path: String,
    doc_keys: Vec<SortKey>,
    group_keys: Vec<SortKey>,
    limit: usize,
}

/// A group in one segment: its best group-sort key, its candidates, and
/// its number of matches.
type SegGroup = (Vec<SegVal>, Vec<(Vec<SegVal>, DocId)>, u64);

struct GroupSeg {
    segment: SegmentOrdinal,
    col: Option<StrColumn>,
    doc_cols: Vec<Col>,
    group_cols: Vec<Col>,
    doc_keys: Vec<SortKey>,
    group_keys: Vec<SortKey>,
    limit: usize,
    total: u64,
    /// group ordinal + 1 (0: no value) → (best group key, hits, matches).
    groups: HashMap<u64, SegGroup>,
    overflow: bool,
}

/// One segment's groups, by value.
struct GroupFruit {
    total: u64,
    overflow: bool,
    groups: Vec<Group>,
}

/// A group across segments: best group-sort key, hits, matches.
type Merged = (Vec<OrderVal>, Vec<(Vec<OrderVal>, DocAddress)>, u64);

/// A group: its value, best group-sort key, first hits, and matches.
type Group = (
    Option<String>,
    Vec<OrderVal>,
    Vec<(Vec<OrderVal>, DocAddress)>,
    u64,
);

impl Collector for GroupCollector {
    type Fruit = Vec<GroupFruit>;
    type Child = GroupSeg;

    fn for_segment(
        &self,
        segment: SegmentOrdinal,
        reader: &SegmentReader,
    ) -> tantivy::Result<GroupSeg> {
        Ok(GroupSeg {
            segment,
            col: reader.fast_fields().str(&self.path)?,
            doc_cols: columns(reader, &self.doc_keys)?,
            group_cols: columns(reader, &self.group_keys)?,
            doc_keys: self.doc_keys.clone(),
            group_keys: self.group_keys.clone(),
            limit: self.limit,
            total: 0,
            groups: HashMap::new(),
            overflow: false,
        })
    }

    fn requires_scoring(&self) -> bool {
        self.doc_keys
            .iter()
            .chain(&self.group_keys)
            .any(|k| matches!(k, SortKey::Score | SortKey::ScoreAsc))
    }

    fn merge_fruits(&self, fruits: Vec<Vec<GroupFruit>>) -> tantivy::Result<Vec<GroupFruit>> {
        Ok(fruits.into_iter().flatten().collect())
    }
}

impl SegmentCollector for GroupSeg {
    type Fruit = Vec<GroupFruit>;

    fn collect(&mut self, doc: DocId, score: Score) {
        self.total += 1;
        let g = self
            .col
            .as_ref()
            .and_then(|c| c.term_ords(doc).next())
            .map_or(0, |o| o + 1);
        if !self.groups.contains_key(&g) && self.groups.len() >= GROUPS_MAX {
            self.overflow = true;
            return;
        }
        let gk = seg_key(&self.group_cols, doc, score);
        let dk = seg_key(&self.doc_cols, doc, score);
        let entry = self
            .groups
            .entry(g)
            .or_insert_with(|| (gk.clone(), Vec::new(), 0));
        entry.2 += 1;
        if cmp_keys(&self.group_keys, &gk, &entry.0) == Ordering::Less {
            entry.0 = gk;
        }
        entry.1.push((dk, doc));
        if entry.1.len() >= self.limit.saturating_mul(2).max(16) {
            let keys = &self.doc_keys;
            entry.1.sort_by(|a, b| cmp_keys(keys, &a.0, &b.0));
            entry.1.truncate(self.limit);
        }
    }

    fn harvest(self) -> Vec<GroupFruit> {
        let mut buf = String::new();
        let mut groups = Vec::with_capacity(self.groups.len());
        for (g, (gk, mut hits, n)) in self.groups {
            let keys = &self.doc_keys;
            hits.sort_by(|a, b| cmp_keys(keys, &a.0, &b.0));
            hits.truncate(self.limit);
            let name = match (&self.col, g) {
                (Some(c), g) if g > 0 => {
                    buf.clear();
                    match c.ord_to_str(g - 1, &mut buf) {
                        Ok(true) => Some(buf.clone()),
                        _ => None,
                    }
                }
                _ => None,
            };
            let gvals = answered(&gk, &self.group_cols, &mut buf);
            let hits = hits
                .iter()
                .map(|(k, d)| {
                    (
                        answered(k, &self.doc_cols, &mut buf),
                        DocAddress::new(self.segment, *d),
                    )
                })
                .collect();
            groups.push((name, gvals, hits, n));
        }
        vec![GroupFruit {
            total: self.total,
            overflow: self.overflow,
            groups,
        }]
    }
}

/// The field of `group_field`, as Clouseau accepts it.
fn group_field(s: &str) -> Result<String> {
    match sort_field(s) {
        Some((_, name, None | Some("string"))) => Ok(name.to_string()),
        Some((_, _, Some("number"))) => Err(bad(
            "Group by number not supported. Group by string terms only.",
        )),
        Some(_) => Err(bad(format!("Unrecognized group_field value: {s}"))),
        None => Err(bad(format!("Unrecognized group_field parameter: {s}"))),
    }
}

/// The answer of a `_search` query on `index` (at `meta`) with `limit`
/// hits: every member CouchDB answers but the rows' `doc`s, which the
/// caller adds (the ids of the rows in answer order are returned, with a
/// pointer to each row).
pub fn run(
    index: &SearchIndex,
    args: &ClouseauArgs,
    limit: usize,
    meta: &Meta,
) -> Result<(Value, Vec<String>)> {
    let q = args.q.as_deref().unwrap_or("*:*");
    let node = crate::lucene::parse(q).map_err(|e| bad(e.to_string()))?;
    let mut query = index.compile(&node, meta)?;
    if let Some(p) = &args.partition {
        query = index.in_partition(query, p);
    }
    query = drilldown(index, query, &args.drilldown)?;
    let keys = sort_keys(args.sort.as_ref(), meta)?;
    let include = match &args.include_fields {
        None | Some(Value::Null) => None,
        Some(v) => Some(string_list(v, "include_fields")?),
    };
    let tag = |v: &Option<Value>, default: &str| -> Result<String> {
        match v {
            None | Some(Value::Null) => Ok(default.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(bad(format!("{other} is not a valid highlight tag"))),
        }
    };
    let highlight = match &args.highlight_fields {
        None | Some(Value::Null) => None,
        Some(v) => Some(Highlight {
            fields: string_list(v, "highlight_fields")?,
            pre: tag(&args.highlight_pre_tag, "<em>")?,
            post: tag(&args.highlight_post_tag, "</em>")?,
            number: args.highlight_number,
            size: args.highlight_size,
        }),
    };
    let hl = highlight.as_ref().map(|h| (h, &node));
    let searcher = index.searcher();
    if let Some(g) = &args.group_field {
        let field = group_field(g)?;
        let group_keys = sort_keys(args.group_sort.as_ref(), meta)?;
        let group_limit = args.group_limit.unwrap_or(DEFAULT_GROUP_LIMIT);
        let collector = GroupCollector {
            path: format!("o.{}", path_of(&field)),
            doc_keys: keys.clone(),
            group_keys: group_keys.clone(),
            limit: limit.max(1),
        };
        let fruits = searcher.search(&*query, &collector)?;
        let mut total = 0;
        let mut merged: BTreeMap<Option<String>, Merged> = BTreeMap::new();
        for f in fruits {
            total += f.total;
            if f.overflow {
                return Err(bad(format!(
                    "group_field {field} has more than {GROUPS_MAX} values among the matches"
                )));
            }
            for (name, gk, hits, n) in f.groups {
                match merged.get_mut(&name) {
                    None => {
                        merged.insert(name, (gk, hits, n));
                    }
                    Some(e) => {
                        if cmp_vals(&group_keys, &gk, &e.0) == Ordering::Less {
                            e.0 = gk;
                        }
                        e.1.extend(hits);
                        e.2 += n;
                    }
                }
            }
        }
        let mut groups: Vec<_> = merged.into_iter().collect();
        groups.sort_by(|a, b| cmp_vals(&group_keys, &a.1 .0, &b.1 .0).then_with(|| a.0.cmp(&b.0)));
        groups.truncate(group_limit);
        let mut ids = Vec::new();
        let mut out_groups = Vec::with_capacity(groups.len());
        for (name, (_, mut hits, n)) in groups {
            hits.sort_by(|a, b| cmp_vals(&keys, &a.0, &b.0));
            hits.truncate(limit);
            let mut rows = Vec::with_capacity(hits.len());
            for (vals, addr) in &hits {
                let (r, id) = row(index, &searcher, vals, *addr, include.as_deref(), hl)?;
                rows.push(Value::Object(r));
                ids.push(id);
            }
            out_groups.push(json!({"by": name, "total_rows": n, "rows": rows}));
        }
        return Ok((json!({"total_rows": total, "groups": out_groups}), ids));
    }
    let counts = match &args.counts {
        None | Some(Value::Null) => None,
        Some(v) => Some(string_list(v, "counts")?),
    };
    if let Some(names) = &counts {
        if !meta.facets.is_empty() {
            for n in names {
                if !meta.facets.contains(n) {
                    return Err(bad(format!("dimension \"{n}\" was not indexed")));
                }
            }
        }
    }
    let ranges = match &args.ranges {
        None | Some(Value::Null) => None,
        Some(v) => Some(ranges_of(v)?),
    };
    let after = match &args.bookmark {
        Some(b) if !b.is_empty() => unpack(b, keys.len())?,
        _ => None,
    };
    let count_names = counts.clone().unwrap_or_default();
    let range_specs = ranges.clone().unwrap_or_default();
    let Found {
        total,
        hits,
        counts: count_sums,
        ranges: range_sums,
    } = execute(
        &searcher,
        &*query,
        &keys,
        limit,
        after,
        count_names
            .iter()
            .map(|n| format!("fs.{}", path_of(n)))
            .collect(),
        range_specs
            .iter()
            .map(|(n, r)| (format!("fd.{}", path_of(n)), r.clone()))
            .collect(),
    )?;
    let mut rows = Vec::with_capacity(hits.len());
    let mut ids = Vec::with_capacity(hits.len());
    for (vals, addr) in &hits {
        let (r, id) = row(index, &searcher, vals, *addr, include.as_deref(), hl)?;
        rows.push(Value::Object(r));
        ids.push(id);
    }
    // A page with no hits keeps the bookmark it was given.
    let bookmark = match (hits.last(), &args.bookmark) {
        (Some((vals, _)), _) => pack_bookmark(vals),
        (None, Some(b)) if !b.is_empty() => b.clone(),
        (None, _) => b64().encode("[]"),
    };
    let mut out = Map::new();
    out.insert("total_rows".into(), json!(total));
    out.insert("bookmark".into(), Value::String(bookmark));
    out.insert("rows".into(), Value::Array(rows));
    // No facet in the whole index: Clouseau answers no `counts`.
    if let (Some(names), false) = (&counts, meta.facets.is_empty()) {
        let mut m = Map::new();
        for (name, c) in names.iter().zip(count_sums) {
            let mut top: Vec<(String, u64)> = c.into_iter().collect();
            top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let labels: Map<String, Value> = top.into_iter().map(|(k, n)| (k, json!(n))).collect();
            m.insert(name.clone(), Value::Object(labels));
        }
        out.insert("counts".into(), Value::Object(m));
    }
    if let Some(ranges) = &ranges {
        let mut m = Map::new();
        for ((name, specs), sums) in ranges.iter().zip(range_sums) {
            let mut labels = Map::new();
            for (spec, n) in specs.iter().zip(sums) {
                labels.insert(spec.label.clone(), json!(n));
            }
            m.insert(name.clone(), Value::Object(labels));
        }
        out.insert("ranges".into(), Value::Object(m));
    }
    Ok((Value::Object(out), ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(q: &str) -> Result<ClouseauArgs> {
        let pairs: Vec<(String, String)> = q
            .split('&')
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k.to_string(), v.to_string())
            })
            .collect();
        ClouseauArgs::from_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    fn msg<T: std::fmt::Debug>(r: Result<T>) -> String {
        match r {
            Err(SearchError::QueryParse(m)) => format!("qp {m}"),
            Err(SearchError::BadRequest(m)) => format!("bad {m}"),
            Err(e) => format!("{e}"),
            Ok(v) => format!("ok {v:?}"),
        }
    }

    #[test]
    fn arguments_are_checked_as_couchdb_checks_them() {
        assert_eq!(
            msg(get("limit=2").unwrap().check(false, false)),
            "qp Query must include a 'q' or 'query' argument"
        );
        assert_eq!(
            msg(get("q=a&limit=201").unwrap().check(false, false)),
            "qp Value for limit is too large, must not exceed 200"
        );
        assert_eq!(msg(get("q=a&limit=0").unwrap().check(false, false)), "ok 0");
        assert_eq!(msg(get("q=a").unwrap().check(false, false)), "ok 25");
        assert_eq!(msg(get("q=a").unwrap().check(true, false)), "ok 2000");
        assert_eq!(
            msg(get("q=a&limit=-1").unwrap().check(false, false)),
            "qp limit must be greater than or equal to zero"
        );
        assert_eq!(
            msg(get("q=a&stale=no")),
            "qp stale only available as stale=ok"
        );
        assert_eq!(
            msg(get("q=a&include_docs=yes")),
            "qp Invalid value for include_docs: \"yes\""
        );
        assert_eq!(
            msg(get("q=a&group_limit=0")),
            "qp group_limit must be greater than zero"
        );
        assert_eq!(
            msg(get("q=a&partition=p").unwrap().check(false, false)),
            "bad `partition` not supported on this index"
        );
        assert_eq!(
            msg(get("q=a").unwrap().check(true, true)),
            "bad `partition` parameter is mandatory for queries to this index."
        );
        assert!(msg(get("q=a&partition=p&counts=[\"x\"]")
            .unwrap()
            .check(true, true))
        .contains("are incompatible"));
        let a = get("query=a&drilldown=[\"t\",\"x\"]&drilldown=[\"u\",\"y\"]&stale=ok").unwrap();
        assert_eq!(a.q.as_deref(), Some("a"));
        assert_eq!(a.drilldown.len(), 2);
        assert!(!a.update);
        let body = json!({"q": "a", "limit": "5"});
        assert_eq!(
            msg(ClouseauArgs::from_body(body.as_object().unwrap(), None)
                .unwrap()
                .check(false, false)),
            "qp Invalid value for limit: <<\"5\">>"
        );
    }

    #[test]
    fn sorts_are_read_as_clouseau_reads_them() {
        let mut meta = Meta::default();
        meta.types.insert("n".into(), [Kind::Double].into());
        meta.types.insert("t".into(), [Kind::Text].into());
        let keys = |v: Value| sort_keys(Some(&v), &meta);
        assert_eq!(
            keys(json!("-n")).unwrap(),
            vec![
                SortKey::Double {
                    path: "d.n".into(),
                    desc: true
                },
                SortKey::Id { desc: false }
            ]
        );
        assert_eq!(
            keys(json!(["t<string>", "-<doc>"])).unwrap(),
            vec![
                SortKey::Str {
                    path: "o.t".into(),
                    desc: false
                },
                SortKey::Id { desc: true }
            ]
        );
        assert_eq!(
            msg(keys(json!("t"))),
            "bad cannot sort string field as numeric field"
        );
        assert_eq!(msg(keys(json!("n<int>"))), "bad Unrecognized type: int");
        assert_eq!(
            msg(keys(json!("a b"))),
            "bad Unrecognized sort parameter: a b"
        );
        assert_eq!(keys(json!("relevance")).unwrap()[0], SortKey::Score);
        assert_eq!(
            msg(group_field("n<number>")),
            "bad Group by number not supported. Group by string terms only."
        );
    }

    #[test]
    fn ranges_are_lucene_ranges() {
        let r = ranges_of(&json!({"price": {"cheap": "[0 TO 100]", "dear": "{100 TO Infinity}"}}))
            .unwrap();
        assert_eq!(r[0].1.len(), 2);
        assert_eq!(r[0].1[0].label, "cheap");
        assert!(r[0].1[0].min_inclusive && r[0].1[0].max == 100.0);
        assert!(!r[0].1[1].min_inclusive && r[0].1[1].max == f64::INFINITY);
        assert_eq!(
            msg(ranges_of(&json!({"p": {"x": "cheap"}}))),
            "bad cheap was not a well-formed range specification"
        );
    }
}
