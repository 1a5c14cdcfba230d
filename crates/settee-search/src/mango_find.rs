//! One page of a Mango text index's hits for `_find`: the documents a
//! [`TextQuery`] finds, in the order of a sort on the index's leaves
//! (`name:number` by its numbers, `name:string` by its strings; else by
//! relevance), each with the bookmark that resumes after it.
//!
//! Invariants: a page holds at most [`PAGE_MAX`] hits; a bookmark is
//! opaque to clients (base64url of the hit's sort values, the document id
//! last), and one made for another sort is refused, never misread.

use base64::Engine as _;
use serde_json::Value;

use crate::error::{Result, SearchError};
use crate::index::{path_of, Meta, SearchIndex};
use crate::mango_query::TextQuery;
use crate::query::{b64, execute, OrderVal, SortKey};

/// Most hits of one page.
pub const PAGE_MAX: usize = 1000;

/// One sort field: the escaped leaf name (`age_3anumber`), whether it is
/// a number leaf (else a string leaf), and the direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextSort {
    pub field: String,
    pub number: bool,
    pub desc: bool,
}

/// One hit: the document id and the bookmark resuming after it.
#[derive(Debug, Clone)]
pub struct TextHit {
    pub id: String,
    pub bookmark: String,
}

/// What a page is asked for.
#[derive(Debug, Clone)]
pub struct TextPageRequest {
    pub query: TextQuery,
    pub sort: Vec<TextSort>,
    /// Only this partition's documents (a partitioned index).
    pub partition: Option<String>,
}

fn keys(sort: &[TextSort]) -> Vec<SortKey> {
    let mut keys: Vec<SortKey> = sort
        .iter()
        .map(|s| {
            let path = path_of(&s.field);
            if s.number {
                SortKey::Double {
                    path: format!("d.{path}"),
                    desc: s.desc,
                }
            } else {
                SortKey::Str {
                    path: format!("o.{path}"),
                    desc: s.desc,
                }
            }
        })
        .collect();
    if keys.is_empty() {
        keys.push(SortKey::Score);
    }
    keys.push(SortKey::Id { desc: false });
    keys
}

/// The sort values of bookmark `b` made for `sort` (None: not one).
fn decode(b: &str, sort: &[TextSort]) -> Option<Vec<OrderVal>> {
    let bytes = b64().decode(b.trim_end_matches('=')).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    let vals: Vec<OrderVal> = v
        .as_array()?
        .iter()
        .map(OrderVal::from_json)
        .collect::<Option<_>>()?;
    (vals.len() == keys(sort).len()).then_some(vals)
}

/// Whether `b` is a bookmark of a query sorted by `sort`.
pub fn bookmark_ok(b: &str, sort: &[TextSort]) -> bool {
    decode(b, sort).is_some()
}

fn encode(vals: &[OrderVal]) -> String {
    b64().encode(Value::Array(vals.iter().map(OrderVal::to_json).collect()).to_string())
}

/// The first `n` (at most [`PAGE_MAX`]) hits of `req` on `index` at
/// `meta` after bookmark `after`.
pub(crate) fn page(
    index: &SearchIndex,
    meta: &Meta,
    req: &TextPageRequest,
    after: Option<&str>,
    n: usize,
) -> Result<Vec<TextHit>> {
    use tantivy::schema::Value as _;
    let after = match after {
        None => None,
        Some(b) => Some(
            decode(b, &req.sort)
                .ok_or_else(|| SearchError::BadRequest("Invalid bookmark".into()))?,
        ),
    };
    let mut query = req.query.compile(index, meta)?;
    if let (Some(p), true) = (&req.partition, index.spec.partitioned) {
        query = index.in_partition(query, p);
    }
    let keys = keys(&req.sort);
    let searcher = index.searcher();
    let found = execute(
        &searcher,
        &*query,
        &keys,
        n.clamp(1, PAGE_MAX),
        after,
        Vec::new(),
        Vec::new(),
    )?;
    let mut out = Vec::with_capacity(found.hits.len());
    for (vals, addr) in &found.hits {
        let doc: tantivy::TantivyDocument = searcher.doc(*addr)?;
        let id = doc
            .get_first(index.f.id)
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        out.push(TextHit {
            id,
            bookmark: encode(vals),
        });
    }
    Ok(out)
}
