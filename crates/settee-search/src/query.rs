//! A Nouveau query: its arguments as CouchDB 3.4 reads and checks them
//! ([`SearchArgs`]), and its answer from an index's searcher — hits in
//! sort order after the bookmark, `counts`, `ranges` — shaped as
//! CouchDB's Nouveau answers.
//!
//! Invariants:
//! - Every sort ends with `_id` (added unless the sort already ends with
//!   it), so hits have a total order and a bookmark (the last hit's
//!   `order`) names exactly where the next page starts.
//! - The hit collector keeps at most `2 × limit` candidates per segment
//!   whatever `limit` asks (it is also capped at the index's document
//!   count), so memory follows the answer, not the request.
//! - Sort values are compared within a segment by their dictionary
//!   ordinals and converted to strings only for the hits kept.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use base64::Engine as _;
use serde_json::{json, Map, Value};
use settee_core::erl::{term, Style};
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::{Column, StrColumn};
use tantivy::{DocAddress, DocId, Score, SegmentOrdinal, SegmentReader};

use crate::error::{Result, SearchError};
use crate::fields::Kind;
use crate::index::{path_of, Meta, SearchIndex};

/// `limit` when none is given.
pub const DEFAULT_LIMIT: usize = 25;

/// `top_n` when none is given.
pub const DEFAULT_TOP_N: usize = 10;

/// One labelled range of `ranges`.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeSpec {
    pub label: String,
    pub min: f64,
    pub min_inclusive: bool,
    pub max: f64,
    pub max_inclusive: bool,
}

/// A query's arguments, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchArgs {
    pub q: String,
    pub limit: usize,
    pub top_n: usize,
    pub sort: Option<Vec<String>>,
    pub counts: Option<Vec<String>>,
    pub ranges: Option<Vec<(String, Vec<RangeSpec>)>>,
    pub update: bool,
    pub bookmark: Option<String>,
    pub include_docs: bool,
    /// Only the hits of this partition (a partitioned index's).
    pub partition: Option<String>,
}

fn invalid(key: &str, shown: String) -> SearchError {
    SearchError::QueryParse(format!("Invalid value for {key}: {shown}"))
}

/// A query-string value as Erlang prints a string (`"abc"`).
fn shown_str(s: &str) -> String {
    format!("{s:?}")
}

fn positive(key: &str, v: i64) -> Result<usize> {
    if v > 0 {
        Ok(usize::try_from(v).unwrap_or(usize::MAX))
    } else {
        Err(SearchError::QueryParse(format!(
            "{key} parameter must be greater than zero"
        )))
    }
}

fn int_text(key: &str, s: &str) -> Result<usize> {
    let v = s
        .parse::<i64>()
        .map_err(|_| SearchError::QueryParse(format!("{key} parameter must be an integer")))?;
    positive(key, v)
}

fn int_json(key: &str, v: &Value) -> Result<usize> {
    match v.as_i64() {
        Some(i) if v.is_i64() || v.is_u64() => positive(key, i),
        _ => Err(invalid(key, term(v, Style::Readable))),
    }
}

fn strings(name: &str, v: &Value) -> Result<Vec<String>> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| {
                i.as_str().map(str::to_string).ok_or_else(|| {
                    SearchError::QueryParser(format!(
                        "all items in {name} parameter must be strings"
                    ))
                })
            })
            .collect(),
        _ => Err(SearchError::QueryParser(format!(
            "{name} parameter must be a list of strings"
        ))),
    }
}

fn sort_of(v: &Value) -> Result<Vec<String>> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        // CouchDB 3.4 names `counts` here.
        other => strings("counts", other),
    }
}

fn ranges_of(v: &Value) -> Result<Vec<(String, Vec<RangeSpec>)>> {
    let Value::Object(m) = v else {
        return Err(invalid("ranges", term(v, Style::Readable)));
    };
    let mut out = Vec::new();
    for (field, list) in m {
        let Value::Array(items) = list else {
            return Err(SearchError::QueryParse(
                "range values must be lists of objects".into(),
            ));
        };
        let mut specs = Vec::new();
        for item in items {
            let Value::Object(r) = item else {
                return Err(SearchError::QueryParser(
                    "all values in ranges parameter must be objects".into(),
                ));
            };
            let bad = |what: &str| SearchError::BadRequest(format!("ranges: {what}"));
            let label = r
                .get("label")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("label must be a string"))?;
            let num = |k: &str, open: f64| match r.get(k) {
                None | Some(Value::Null) => Ok(open),
                Some(v) => v
                    .as_f64()
                    .ok_or_else(|| bad(&format!("{k} must be a number"))),
            };
            let flag = |k: &str| match r.get(k) {
                None | Some(Value::Null) => Ok(true),
                Some(Value::Bool(b)) => Ok(*b),
                Some(_) => Err(bad(&format!("{k} must be a boolean"))),
            };
            specs.push(RangeSpec {
                label: label.to_string(),
                min: num("min", f64::NEG_INFINITY)?,
                min_inclusive: flag("min_inclusive")?,
                max: num("max", f64::INFINITY)?,
                max_inclusive: flag("max_inclusive")?,
            });
        }
        out.push((field.clone(), specs));
    }
    Ok(out)
}

fn json_text(key: &str, s: &str) -> Result<Value> {
    serde_json::from_str(s).map_err(|_| {
        let _ = key;
        SearchError::BadRequest("invalid UTF-8 JSON".into())
    })
}

impl SearchArgs {
    fn new(q: Option<String>) -> Result<SearchArgs> {
        Ok(SearchArgs {
            q: q.ok_or_else(|| SearchError::QueryParse("q parameter is mandatory".into()))?,
            limit: DEFAULT_LIMIT,
            top_n: DEFAULT_TOP_N,
            sort: None,
            counts: None,
            ranges: None,
            update: true,
            bookmark: None,
            include_docs: false,
            partition: None,
        })
    }

    /// The arguments of `GET …/_nouveau/{index}` (its query string).
    pub fn from_query<'a>(
        pairs: impl Iterator<Item = (&'a str, &'a str)> + Clone,
    ) -> Result<SearchArgs> {
        let q = pairs
            .clone()
            .find(|(k, _)| *k == "q")
            .map(|(_, v)| v.to_string());
        let mut a = SearchArgs::new(q)?;
        let flag = |k: &str, v: &str| match v {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(invalid(k, shown_str(v))),
        };
        for (k, v) in pairs {
            match k {
                "limit" => a.limit = int_text(k, v)?,
                "top_n" => a.top_n = int_text(k, v)?,
                "sort" => a.sort = Some(sort_of(&json_text(k, v)?)?),
                "counts" => a.counts = Some(strings("counts", &json_text(k, v)?)?),
                "ranges" => a.ranges = Some(ranges_of(&json_text(k, v)?)?),
                "update" => a.update = flag(k, v)?,
                "include_docs" => a.include_docs = flag(k, v)?,
                "bookmark" => a.bookmark = Some(v.to_string()),
                "partition" => a.partition = Some(v.to_string()),
                _ => {}
            }
        }
        Ok(a)
    }

    /// The arguments of `POST …/_nouveau/{index}` (its JSON body).
    pub fn from_body(body: &Map<String, Value>) -> Result<SearchArgs> {
        let q = match body.get("q") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => return Err(invalid("query", term(other, Style::Readable))),
        };
        let mut a = SearchArgs::new(q)?;
        let flag = |k: &str, v: &Value| match v {
            Value::Bool(b) => Ok(*b),
            other => Err(invalid(k, term(other, Style::Readable))),
        };
        for (k, v) in body {
            if v.is_null() && k != "q" {
                continue;
            }
            match k.as_str() {
                "limit" => a.limit = int_json(k, v)?,
                "top_n" => a.top_n = int_json(k, v)?,
                "sort" => a.sort = Some(sort_of(v)?),
                "counts" => a.counts = Some(strings("counts", v)?),
                "ranges" => a.ranges = Some(ranges_of(v)?),
                "update" => a.update = flag(k, v)?,
                "include_docs" => a.include_docs = flag(k, v)?,
                "bookmark" => match v {
                    Value::String(s) => a.bookmark = Some(s.clone()),
                    other => return Err(invalid(k, term(other, Style::Readable))),
                },
                _ => {}
            }
        }
        Ok(a)
    }
}

/// One key of a sort.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SortKey {
    /// Relevance, highest first.
    Score,
    /// Relevance, lowest first (Clouseau's `<score>`).
    ScoreAsc,
    Double {
        path: String,
        desc: bool,
    },
    Str {
        path: String,
        desc: bool,
    },
    Id {
        desc: bool,
    },
    /// A field the index has no sortable values of: every hit ties.
    Unknown,
}

/// The sort keys of a request's `sort`, `_id` last.
fn sort_keys(sort: Option<&[String]>, meta: &Meta) -> Result<Vec<SortKey>> {
    let Some(sort) = sort.filter(|s| !s.is_empty()) else {
        return Ok(vec![SortKey::Score, SortKey::Id { desc: false }]);
    };
    let mut keys = Vec::with_capacity(sort.len() + 1);
    for s in sort {
        if s == "relevance" || s == "<score>" || s == "-<score>" {
            keys.push(SortKey::Score);
            continue;
        }
        let not_valid = || SearchError::BadRequest(format!("{s} is not a valid sort parameter"));
        let (desc, rest) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, &s[..]),
        };
        let (name, ty) = match rest.split_once('<') {
            Some((n, t)) => (n, Some(t.strip_suffix('>').ok_or_else(not_valid)?)),
            None => (rest, None),
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
        {
            return Err(not_valid());
        }
        if name == "_id" {
            keys.push(SortKey::Id { desc });
            continue;
        }
        let known = meta.types.get(name);
        let kind = match ty {
            Some("double" | "number") => Kind::Double,
            Some("string") => Kind::String,
            Some(_) => return Err(not_valid()),
            None => match known {
                Some(k) if k.contains(&Kind::Double) => Kind::Double,
                Some(k) if k.contains(&Kind::String) => Kind::String,
                Some(_) => {
                    return Err(SearchError::BadRequest(format!(
                        "can't sort on field {name}"
                    )))
                }
                None => {
                    keys.push(SortKey::Unknown);
                    continue;
                }
            },
        };
        let path = path_of(name);
        keys.push(match kind {
            Kind::Double => SortKey::Double {
                path: format!("d.{path}"),
                desc,
            },
            _ => SortKey::Str {
                path: format!("s.{path}"),
                desc,
            },
        });
    }
    if !matches!(keys.last(), Some(SortKey::Id { .. })) {
        keys.push(SortKey::Id { desc: false });
    }
    Ok(keys)
}

/// A sort value as answered and bookmarked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OrderVal {
    Float(f32),
    Double(f64),
    Str(String),
    Null,
}

impl OrderVal {
    pub(crate) fn to_json(&self) -> Value {
        let num = |v: f64| serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number);
        match self {
            OrderVal::Float(f) => json!({"@type": "float", "value": num(f64::from(*f))}),
            OrderVal::Double(d) => json!({"@type": "double", "value": num(*d)}),
            OrderVal::Str(s) => json!({"@type": "string", "value": s}),
            OrderVal::Null => json!({"@type": "null", "value": null}),
        }
    }

    pub(crate) fn from_json(v: &Value) -> Option<OrderVal> {
        let value = v.get("value");
        Some(match v.get("@type")?.as_str()? {
            "float" => OrderVal::Float(value?.as_f64()? as f32),
            "double" | "long" | "int" => OrderVal::Double(value?.as_f64()?),
            "string" => OrderVal::Str(value?.as_str()?.to_string()),
            "null" => OrderVal::Null,
            _ => return None,
        })
    }
}

/// A sort value inside one segment: numbers as they are, strings as
/// `2 × ordinal + 1` (0: no value; an even number: between two terms).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub(crate) enum SegVal {
    Num(f64),
    Ord(u64),
    None,
}

fn cmp_seg(a: &SegVal, b: &SegVal) -> Ordering {
    match (a, b) {
        (SegVal::Num(x), SegVal::Num(y)) => x.total_cmp(y),
        (SegVal::Ord(x), SegVal::Ord(y)) => x.cmp(y),
        _ => Ordering::Equal,
    }
}

/// `o`, an ascending comparison of two values of key `k`, in `k`'s order.
fn directed(k: &SortKey, o: Ordering) -> Ordering {
    match k {
        SortKey::Score => o.reverse(),
        SortKey::ScoreAsc => o,
        SortKey::Double { desc, .. } | SortKey::Str { desc, .. } | SortKey::Id { desc } => {
            if *desc {
                o.reverse()
            } else {
                o
            }
        }
        SortKey::Unknown => Ordering::Equal,
    }
}

/// Orders two keys in sort order (Less: comes first).
pub(crate) fn cmp_keys(keys: &[SortKey], a: &[SegVal], b: &[SegVal]) -> Ordering {
    for ((k, x), y) in keys.iter().zip(a).zip(b) {
        let o = cmp_seg(x, y);
        let o = directed(k, o);
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// The position of string `s` among a column's terms, as a [`SegVal::Ord`].
pub(crate) fn seg_position(col: &StrColumn, s: &str) -> std::io::Result<u64> {
    let (mut lo, mut hi) = (0u64, col.num_terms() as u64);
    let mut buf = String::new();
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        buf.clear();
        col.ord_to_str(mid, &mut buf)?;
        match buf.as_str().cmp(s) {
            Ordering::Less => lo = mid + 1,
            Ordering::Equal => return Ok(2 * mid + 1),
            Ordering::Greater => hi = mid,
        }
    }
    Ok(2 * lo)
}

/// What a search collects: the hits after the bookmark in sort order, the
/// number of matches, and the facet counts asked for (by fast-field
/// column path).
struct HitCollector {
    keys: Vec<SortKey>,
    limit: usize,
    after: Option<Vec<OrderVal>>,
    counts: Vec<String>,
    ranges: Vec<(String, Vec<RangeSpec>)>,
}

/// A segment's share of the answer.
struct SegFruit {
    total: u64,
    /// (key values as answered, document address).
    hits: Vec<(Vec<OrderVal>, DocAddress)>,
    counts: Vec<HashMap<String, u64>>,
    ranges: Vec<Vec<u64>>,
}

/// A sort key's column in one segment.
pub(crate) enum Col {
    Score,
    Num(Option<Column<f64>>),
    Str(Option<StrColumn>),
    None,
}

struct SegCollector {
    keys: Vec<SortKey>,
    cols: Vec<Col>,
    segment: SegmentOrdinal,
    limit: usize,
    /// The bookmark's key in this segment's terms.
    after: Option<Vec<SegVal>>,
    total: u64,
    top: Vec<(Vec<SegVal>, DocId)>,
    count_cols: Vec<Option<StrColumn>>,
    counts: Vec<HashMap<u64, u64>>,
    range_cols: Vec<(Option<Column<f64>>, Vec<RangeSpec>)>,
    ranges: Vec<Vec<u64>>,
}

impl Collector for HitCollector {
    type Fruit = Vec<SegFruit>;
    type Child = SegCollector;

    fn for_segment(
        &self,
        segment: SegmentOrdinal,
        reader: &SegmentReader,
    ) -> tantivy::Result<SegCollector> {
        let ff = reader.fast_fields();
        let cols = columns(reader, &self.keys)?;
        let after = match &self.after {
            None => None,
            Some(vals) => Some(seg_after(vals, &cols)?),
        };
        let mut count_cols = Vec::new();
        for path in &self.counts {
            count_cols.push(ff.str(path)?);
        }
        let mut range_cols = Vec::new();
        for (path, specs) in &self.ranges {
            range_cols.push((ff.column_opt::<f64>(path)?, specs.clone()));
        }
        Ok(SegCollector {
            keys: self.keys.clone(),
            cols,
            segment,
            limit: self.limit,
            after,
            total: 0,
            top: Vec::new(),
            counts: vec![HashMap::new(); count_cols.len()],
            count_cols,
            ranges: self.ranges.iter().map(|(_, s)| vec![0; s.len()]).collect(),
            range_cols,
        })
    }

    fn requires_scoring(&self) -> bool {
        self.keys
            .iter()
            .any(|k| matches!(k, SortKey::Score | SortKey::ScoreAsc))
    }

    fn merge_fruits(&self, fruits: Vec<Vec<SegFruit>>) -> tantivy::Result<Vec<SegFruit>> {
        Ok(fruits.into_iter().flatten().collect())
    }
}

/// The columns of `keys` in one segment.
pub(crate) fn columns(reader: &SegmentReader, keys: &[SortKey]) -> tantivy::Result<Vec<Col>> {
    let ff = reader.fast_fields();
    let mut cols = Vec::with_capacity(keys.len());
    for k in keys {
        cols.push(match k {
            SortKey::Score | SortKey::ScoreAsc => Col::Score,
            SortKey::Double { path, .. } => Col::Num(ff.column_opt::<f64>(path)?),
            SortKey::Str { path, .. } => Col::Str(ff.str(path)?),
            SortKey::Id { .. } => Col::Str(ff.str("_id")?),
            SortKey::Unknown => Col::None,
        });
    }
    Ok(cols)
}

/// A bookmark's position in one segment's terms.
pub(crate) fn seg_after(vals: &[OrderVal], cols: &[Col]) -> std::io::Result<Vec<SegVal>> {
    let mut out = Vec::with_capacity(vals.len());
    for (v, col) in vals.iter().zip(cols) {
        out.push(match (v, col) {
            (OrderVal::Float(f), Col::Score) => SegVal::Num(f64::from(*f)),
            (OrderVal::Double(d), Col::Num(_)) => SegVal::Num(*d),
            (OrderVal::Str(s), Col::Str(Some(c))) => SegVal::Ord(seg_position(c, s)?),
            (OrderVal::Str(_), Col::Str(None)) => SegVal::Ord(1),
            (OrderVal::Null, Col::Str(_)) => SegVal::Ord(0),
            _ => SegVal::None,
        });
    }
    Ok(out)
}

/// A document's sort key in one segment.
pub(crate) fn seg_key(cols: &[Col], doc: DocId, score: Score) -> Vec<SegVal> {
    cols.iter()
        .map(|c| match c {
            Col::Score => SegVal::Num(f64::from(score)),
            // Lucene sorts a document without the value as 0.
            Col::Num(Some(col)) => SegVal::Num(col.first(doc).unwrap_or(0.0)),
            Col::Num(None) => SegVal::Num(0.0),
            Col::Str(Some(col)) => SegVal::Ord(col.term_ords(doc).next().map_or(0, |o| 2 * o + 1)),
            Col::Str(None) => SegVal::Ord(0),
            Col::None => SegVal::None,
        })
        .collect()
}

/// A segment's sort key as answered.
pub(crate) fn answered(key: &[SegVal], cols: &[Col], buf: &mut String) -> Vec<OrderVal> {
    let mut vals = Vec::with_capacity(key.len());
    for (v, col) in key.iter().zip(cols) {
        vals.push(match (v, col) {
            (SegVal::Num(f), Col::Score) => OrderVal::Float(*f as f32),
            (SegVal::Num(d), _) => OrderVal::Double(*d),
            (SegVal::Ord(0), _) => OrderVal::Null,
            (SegVal::Ord(o), Col::Str(Some(c))) => {
                buf.clear();
                match c.ord_to_str((o - 1) / 2, buf) {
                    Ok(true) => OrderVal::Str(buf.clone()),
                    _ => OrderVal::Null,
                }
            }
            _ => OrderVal::Null,
        });
    }
    vals
}

fn in_range(r: &RangeSpec, v: f64) -> bool {
    let lo = if r.min_inclusive {
        v >= r.min
    } else {
        v > r.min
    };
    let hi = if r.max_inclusive {
        v <= r.max
    } else {
        v < r.max
    };
    lo && hi
}

impl SegCollector {
    fn key(&self, doc: DocId, score: Score) -> Vec<SegVal> {
        seg_key(&self.cols, doc, score)
    }

    fn prune(&mut self) {
        let keys = &self.keys;
        self.top.sort_by(|a, b| cmp_keys(keys, &a.0, &b.0));
        self.top.truncate(self.limit);
    }
}

impl SegmentCollector for SegCollector {
    type Fruit = Vec<SegFruit>;

    fn collect(&mut self, doc: DocId, score: Score) {
        self.total += 1;
        for (i, col) in self.count_cols.iter().enumerate() {
            if let Some(col) = col {
                for ord in col.term_ords(doc) {
                    *self.counts[i].entry(ord).or_insert(0) += 1;
                }
            }
        }
        for (i, (col, specs)) in self.range_cols.iter().enumerate() {
            if let Some(col) = col {
                for (j, r) in specs.iter().enumerate() {
                    if col.values_for_doc(doc).any(|v| in_range(r, v)) {
                        self.ranges[i][j] += 1;
                    }
                }
            }
        }
        if self.limit == 0 {
            return;
        }
        let key = self.key(doc, score);
        if let Some(after) = &self.after {
            if cmp_keys(&self.keys, &key, after) != Ordering::Greater {
                return;
            }
        }
        self.top.push((key, doc));
        if self.top.len() >= self.limit.saturating_mul(2).max(16) {
            self.prune();
        }
    }

    fn harvest(mut self) -> Vec<SegFruit> {
        self.prune();
        let mut buf = String::new();
        let mut hits = Vec::with_capacity(self.top.len());
        for (key, doc) in &self.top {
            let vals = answered(key, &self.cols, &mut buf);
            hits.push((vals, DocAddress::new(self.segment, *doc)));
        }
        let mut counts = Vec::with_capacity(self.counts.len());
        for (i, c) in self.counts.iter().enumerate() {
            let mut named = HashMap::new();
            if let Some(col) = &self.count_cols[i] {
                for (ord, n) in c {
                    buf.clear();
                    if let Ok(true) = col.ord_to_str(*ord, &mut buf) {
                        named.insert(buf.clone(), *n);
                    }
                }
            }
            counts.push(named);
        }
        vec![SegFruit {
            total: self.total,
            hits,
            counts,
            ranges: self.ranges,
        }]
    }
}

/// Compares two answered keys in sort order.
pub(crate) fn cmp_vals(keys: &[SortKey], a: &[OrderVal], b: &[OrderVal]) -> Ordering {
    let seg = |v: &OrderVal| match v {
        OrderVal::Float(f) => SegVal::Num(f64::from(*f)),
        OrderVal::Double(d) => SegVal::Num(*d),
        _ => SegVal::None,
    };
    for ((k, x), y) in keys.iter().zip(a).zip(b) {
        let o = match (x, y) {
            (OrderVal::Str(p), OrderVal::Str(q)) => p.cmp(q),
            (OrderVal::Null, OrderVal::Str(_)) => Ordering::Less,
            (OrderVal::Str(_), OrderVal::Null) => Ordering::Greater,
            _ => cmp_seg(&seg(x), &seg(y)),
        };
        let o = directed(k, o);
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

pub(crate) fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// The bookmark's position: the `order` of the last hit of the page before.
pub(crate) fn unpack_bookmark(bookmark: &str, keys: usize) -> Result<Option<Vec<OrderVal>>> {
    let bad = || SearchError::BadRequest("Invalid bookmark".into());
    let bytes = b64()
        .decode(bookmark.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let Value::Array(orders) = v else {
        return Err(bad());
    };
    let Some(order) = orders.first() else {
        return Ok(None);
    };
    let Value::Array(items) = order else {
        return Err(bad());
    };
    let vals: Option<Vec<OrderVal>> = items.iter().map(OrderVal::from_json).collect();
    match vals {
        Some(v) if v.len() == keys => Ok(Some(v)),
        _ => Err(bad()),
    }
}

/// What a search found: the number of matches, the hits of the page in
/// sort order, and the counts of each `counts` column and `ranges` range.
pub(crate) struct Found {
    pub total: u64,
    pub hits: Vec<(Vec<OrderVal>, DocAddress)>,
    pub counts: Vec<HashMap<String, u64>>,
    pub ranges: Vec<Vec<u64>>,
}

/// Runs `query`: the first `limit` hits in the order of `keys` after
/// `after`, and the facets of the `counts` columns (string fast-field
/// paths) and `ranges` (number fast-field paths).
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute(
    searcher: &tantivy::Searcher,
    query: &dyn tantivy::query::Query,
    keys: &[SortKey],
    limit: usize,
    after: Option<Vec<OrderVal>>,
    counts: Vec<String>,
    ranges: Vec<(String, Vec<RangeSpec>)>,
) -> Result<Found> {
    let docs = usize::try_from(searcher.num_docs()).unwrap_or(usize::MAX);
    let limit = limit.min(docs);
    let collector = HitCollector {
        keys: keys.to_vec(),
        limit,
        after,
        counts: counts.clone(),
        ranges: ranges.clone(),
    };
    let fruits = searcher.search(query, &collector)?;
    let mut total = 0u64;
    let mut hits: Vec<(Vec<OrderVal>, DocAddress)> = Vec::new();
    let mut count_sums: Vec<HashMap<String, u64>> = vec![HashMap::new(); counts.len()];
    let mut range_sums: Vec<Vec<u64>> = ranges.iter().map(|(_, s)| vec![0; s.len()]).collect();
    for f in fruits {
        total += f.total;
        hits.extend(f.hits);
        for (sum, c) in count_sums.iter_mut().zip(f.counts) {
            for (k, n) in c {
                *sum.entry(k).or_insert(0) += n;
            }
        }
        for (sum, r) in range_sums.iter_mut().zip(f.ranges) {
            for (s, n) in sum.iter_mut().zip(r) {
                *s += n;
            }
        }
    }
    hits.sort_by(|a, b| cmp_vals(keys, &a.0, &b.0));
    hits.truncate(limit);
    Ok(Found {
        total,
        hits,
        counts: count_sums,
        ranges: range_sums,
    })
}

/// The answer of a query on `index` (at `meta`): the members CouchDB's
/// Nouveau answers but `update_latency` and the hits' `doc`s, which the
/// caller adds; and the ids of the hits in order.
pub fn run(
    index: &SearchIndex,
    args: &SearchArgs,
    meta: &Meta,
) -> Result<(Map<String, Value>, Vec<String>)> {
    let node = crate::lucene::parse(&args.q).map_err(|e| SearchError::BadRequest(e.to_string()))?;
    let mut query = index.compile(&node, meta)?;
    if let Some(p) = &args.partition {
        if !index.spec.partitioned {
            return Err(SearchError::BadRequest(
                "`partition` parameter is not supported in this design doc".into(),
            ));
        }
        query = index.in_partition(query, p);
    }
    let keys = sort_keys(args.sort.as_deref(), meta)?;
    let searcher = index.searcher();
    let after = match &args.bookmark {
        Some(b) if !b.is_empty() => unpack_bookmark(b, keys.len())?,
        _ => None,
    };
    let counts = args.counts.clone().unwrap_or_default();
    let ranges = args.ranges.clone().unwrap_or_default();
    let Found {
        total,
        hits,
        counts: count_sums,
        ranges: range_sums,
    } = execute(
        &searcher,
        &*query,
        &keys,
        args.limit,
        after,
        counts.iter().map(|n| format!("s.{}", path_of(n))).collect(),
        ranges
            .iter()
            .map(|(n, r)| (format!("d.{}", path_of(n)), r.clone()))
            .collect(),
    )?;
    let mut out_hits = Vec::with_capacity(hits.len());
    let mut ids = Vec::with_capacity(hits.len());
    let mut last_order: Option<Value> = None;
    for (vals, addr) in &hits {
        let doc: tantivy::TantivyDocument = searcher.doc(*addr)?;
        use tantivy::schema::Value as _;
        let id = doc
            .get_first(index.f.id)
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let fields: Value = doc
            .get_first(index.f.stored)
            .and_then(|v| v.as_str().and_then(|s| serde_json::from_str(s).ok()))
            .unwrap_or_else(|| json!({}));
        let order = Value::Array(vals.iter().map(OrderVal::to_json).collect());
        last_order = Some(order.clone());
        let mut hit = Map::new();
        hit.insert("fields".into(), fields);
        hit.insert("id".into(), Value::String(id.clone()));
        hit.insert("order".into(), order);
        out_hits.push(Value::Object(hit));
        ids.push(id);
    }
    // A page with no hits keeps the bookmark it was given.
    let bookmark = match (last_order, &args.bookmark) {
        (Some(order), _) => b64().encode(Value::Array(vec![order]).to_string()),
        (None, Some(b)) if !b.is_empty() => b.clone(),
        (None, _) => b64().encode("[]"),
    };
    let mut out = Map::new();
    out.insert("bookmark".into(), Value::String(bookmark));
    out.insert(
        "counts".into(),
        if args.counts.is_some() {
            let mut m = Map::new();
            for (name, c) in counts.iter().zip(count_sums) {
                let mut top: Vec<(String, u64)> = c.into_iter().collect();
                top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                top.truncate(args.top_n);
                let sorted: BTreeMap<String, u64> = top.into_iter().collect();
                m.insert(name.clone(), json!(sorted));
            }
            Value::Object(m)
        } else {
            Value::Null
        },
    );
    out.insert("hits".into(), Value::Array(out_hits));
    out.insert(
        "ranges".into(),
        if args.ranges.is_some() {
            let mut m = Map::new();
            for ((name, specs), sums) in ranges.iter().zip(range_sums) {
                let mut labels = BTreeMap::new();
                for (spec, n) in specs.iter().zip(sums) {
                    if n > 0 {
                        *labels.entry(spec.label.clone()).or_insert(0u64) += n;
                    }
                }
                m.insert(name.clone(), json!(labels));
            }
            Value::Object(m)
        } else {
            Value::Null
        },
    );
    out.insert("total_hits".into(), json!(total));
    out.insert("total_hits_relation".into(), json!("EQUAL_TO"));
    Ok((out, ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked_as_couchdb_checks_them() {
        let get = |q: &str| {
            let pairs: Vec<(String, String)> = form_pairs(q);
            SearchArgs::from_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        };
        let msg = |r: Result<SearchArgs>| match r {
            Err(SearchError::QueryParse(m)) => format!("400 {m}"),
            Err(SearchError::QueryParser(m)) => format!("500 {m}"),
            Err(SearchError::BadRequest(m)) => format!("bad {m}"),
            Err(e) => format!("{e}"),
            Ok(_) => "ok".into(),
        };
        assert_eq!(msg(get("limit=2")), "400 q parameter is mandatory");
        assert_eq!(
            msg(get("q=a&limit=x")),
            "400 limit parameter must be an integer"
        );
        assert_eq!(
            msg(get("q=a&limit=0")),
            "400 limit parameter must be greater than zero"
        );
        assert_eq!(
            msg(get("q=a&include_docs=yes")),
            "400 Invalid value for include_docs: \"yes\""
        );
        assert_eq!(
            msg(get("q=a&sort=[1]")),
            "500 all items in counts parameter must be strings"
        );
        assert_eq!(
            msg(get("q=a&counts=3")),
            "500 counts parameter must be a list of strings"
        );
        assert_eq!(
            msg(get("q=a&ranges={\"n\":3}")),
            "400 range values must be lists of objects"
        );
        assert_eq!(msg(get("q=a&sort=x")), "bad invalid UTF-8 JSON");
        let a = get("q=a&sort=\"-n\"&limit=3&update=false").unwrap();
        assert_eq!(a.sort, Some(vec!["-n".to_string()]));
        assert!(!a.update && a.limit == 3);
        let body = |v: Value| SearchArgs::from_body(v.as_object().unwrap());
        assert_eq!(
            msg(body(json!({"q": "a", "limit": "5"}))),
            "400 Invalid value for limit: <<\"5\">>"
        );
        assert_eq!(
            msg(body(json!({"q": "a", "limit": -1}))),
            "400 limit parameter must be greater than zero"
        );
        assert_eq!(
            msg(body(json!({"q": "a", "update": "no"}))),
            "400 Invalid value for update: <<\"no\">>"
        );
        assert!(body(json!({"q": "a", "sort": ["-n", "t<string>"], "counts": ["t"]})).is_ok());
    }

    fn form_pairs(q: &str) -> Vec<(String, String)> {
        q.split('&')
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    #[test]
    fn sorts_are_read_as_nouveau_reads_them() {
        let mut meta = Meta::default();
        meta.types.insert("n".into(), [Kind::Double].into());
        meta.types.insert("t".into(), [Kind::String].into());
        meta.types.insert("x".into(), [Kind::Text].into());
        let keys = |s: &[&str]| {
            sort_keys(
                Some(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
                &meta,
            )
        };
        assert_eq!(
            keys(&["-n"]).unwrap(),
            vec![
                SortKey::Double {
                    path: "d.n".into(),
                    desc: true
                },
                SortKey::Id { desc: false }
            ]
        );
        assert_eq!(
            keys(&["t<string>", "-_id"]).unwrap(),
            vec![
                SortKey::Str {
                    path: "s.t".into(),
                    desc: false
                },
                SortKey::Id { desc: true }
            ]
        );
        assert_eq!(keys(&["relevance"]).unwrap()[0], SortKey::Score);
        assert!(
            matches!(keys(&["x"]), Err(SearchError::BadRequest(m)) if m == "can't sort on field x")
        );
        assert!(matches!(keys(&["n<int>"]), Err(SearchError::BadRequest(_))));
        assert!(
            matches!(keys(&["a b"]), Err(SearchError::BadRequest(m)) if m == "a b is not a valid sort parameter")
        );
        assert_eq!(keys(&["nope"]).unwrap()[0], SortKey::Unknown);
    }

    #[test]
    fn bookmarks_round_trip() {
        let order = vec![OrderVal::Double(2.5), OrderVal::Str("doc1".into())];
        let packed = b64().encode(
            Value::Array(vec![Value::Array(
                order.iter().map(OrderVal::to_json).collect(),
            )])
            .to_string(),
        );
        assert_eq!(unpack_bookmark(&packed, 2).unwrap(), Some(order));
        assert_eq!(unpack_bookmark(&b64().encode("[]"), 2).unwrap(), None);
        assert!(unpack_bookmark("!!", 2).is_err());
        assert!(unpack_bookmark(&packed, 3).is_err());
    }
}
