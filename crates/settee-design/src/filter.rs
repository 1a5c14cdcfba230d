//! JavaScript changes filters: `filters.NAME(doc, req)` of a design
//! document, and `_view` (a change passes when a view's map function emits
//! for it).
//!
//! Owns [`ChangesFilter`]. Invariants (checked against CouchDB 3.4.3):
//! - Loading makes CouchDB's checks, with its answers: the design document
//!   exists (`not_found` `missing`) and is not deleted (`deleted`), and has
//!   the member (`missing json key: NAME`, `json_mismatch`). The function
//!   itself is compiled only when the first change is judged, as in CouchDB
//!   (a feed with nothing to filter never fails).
//! - A change is judged by its winning revision, or with `style=all_docs`
//!   by each leaf; a change passes when any judged revision does, and the
//!   row then lists only the revisions that passed.
//! - A batch of changes is one JavaScript call (or more: one per
//!   [`CALL_BYTES_MAX`] of documents, so that memory stays bounded
//!   whatever the batch); an exception fails it (and the feed), as in
//!   CouchDB.
//! - Judging blocks the calling thread until JavaScript answers: call it
//!   where a storage scan may block (the blocking pool), not on an async
//!   runtime's thread.

use std::sync::Arc;

use serde_json::{Map, Value};
use settee_core::name::DESIGN_PREFIX;
use settee_db::{ChangeRow, GetOptions, Reader};
use settee_js::{DesignDoc, JsEngine};

use crate::docs::leaf_text;
use crate::{Design, DesignError};

/// Bytes of documents sent to JavaScript in one call (a larger document
/// goes alone).
const CALL_BYTES_MAX: usize = 1 << 20;

/// Which function of the design document filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterKind {
    /// `filters.NAME(doc, req)`.
    Function,
    /// The map function of `views.NAME`: a change passes if it emits.
    View,
}

/// A loaded changes filter.
pub struct ChangesFilter {
    js: Arc<JsEngine>,
    ddoc: DesignDoc,
    kind: FilterKind,
    name: String,
    /// The request object (`filters` functions only), as JSON.
    req: Value,
}

impl std::fmt::Debug for ChangesFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangesFilter")
            .field("ddoc", &self.ddoc.id())
            .field("kind", &self.kind)
            .field("name", &self.name)
            .finish()
    }
}

impl Design {
    /// Loads `filters.NAME` of `_design/DDOC` for a changes feed;
    /// `req` is CouchDB's request object as the filter's second argument.
    pub fn changes_filter(
        &self,
        reader: &Reader,
        ddoc: &str,
        name: &str,
        req: Value,
    ) -> Result<ChangesFilter, DesignError> {
        self.load_filter(reader, ddoc, FilterKind::Function, name, req)
    }

    /// Loads the `_view` filter `views.NAME` of `_design/DDOC`.
    pub fn view_filter(
        &self,
        reader: &Reader,
        ddoc: &str,
        view: &str,
    ) -> Result<ChangesFilter, DesignError> {
        self.load_filter(reader, ddoc, FilterKind::View, view, Value::Null)
    }

    fn load_filter(
        &self,
        reader: &Reader,
        ddoc: &str,
        kind: FilterKind,
        name: &str,
        req: Value,
    ) -> Result<ChangesFilter, DesignError> {
        let id = format!("{DESIGN_PREFIX}{ddoc}");
        let doc = reader.get(&id, &GetOptions::default())?;
        let mut body = doc.body.to_map();
        let member = match kind {
            FilterKind::Function => "filters",
            FilterKind::View => "views",
        };
        check_member(&body, &[member, name])?;
        body.insert("_id".into(), Value::String(doc.id.clone()));
        body.insert("_rev".into(), Value::String(doc.rev.to_string()));
        let compiled = DesignDoc::new(&Value::Object(body)).map_err(DesignError::Filter)?;
        Ok(ChangesFilter {
            js: self.js.clone(),
            ddoc: compiled,
            kind,
            name: name.to_string(),
            req,
        })
    }
}

/// CouchDB's lookup of the member `path` leads to in a design document:
/// `missing json key: KEY` for an absent member, `json_mismatch` when a
/// member on the way is not an object.
pub(crate) fn check_member(doc: &Map<String, Value>, path: &[&str]) -> Result<(), DesignError> {
    let mut obj = doc;
    for (i, key) in path.iter().enumerate() {
        let Some(found) = obj.get(*key) else {
            return Err(DesignError::Missing(format!("missing json key: {key}")));
        };
        if i + 1 < path.len() {
            obj = found
                .as_object()
                .ok_or_else(|| DesignError::Missing("json_mismatch".into()))?;
        }
    }
    Ok(())
}

impl ChangesFilter {
    pub fn kind(&self) -> FilterKind {
        self.kind
    }

    /// Judges a batch of changes: for each row, one verdict per judged
    /// revision — the winner's alone, or with `all_leaves` one per leaf in
    /// the row's order. Blocks until JavaScript answers (see the module doc).
    pub fn judge(
        &self,
        reader: &Reader,
        rows: &[ChangeRow],
        all_leaves: bool,
    ) -> Result<Vec<Vec<bool>>, DesignError> {
        let mut verdicts = Vec::with_capacity(rows.len());
        let mut docs = Vec::with_capacity(rows.len());
        let mut bytes = 0;
        let mut counts = Vec::with_capacity(rows.len());
        for row in rows {
            let leaves = if all_leaves {
                &row.leaves[..]
            } else {
                &row.leaves[..row.leaves.len().min(1)]
            };
            for (rev, deleted) in leaves {
                let opts = GetOptions {
                    rev: Some(rev.clone()),
                    ..GetOptions::default()
                };
                let body = match reader.get(&row.id, &opts) {
                    Ok(d) => d.body,
                    Err(settee_db::Error::NotFound(_)) => settee_core::doc::Body::empty(),
                    Err(e) => return Err(e.into()),
                };
                let text = leaf_text(&row.id, rev, *deleted, &body);
                if bytes + text.len() > CALL_BYTES_MAX && !docs.is_empty() {
                    verdicts.extend(self.call(&docs)?);
                    docs.clear();
                    bytes = 0;
                }
                bytes += text.len();
                docs.push(text);
            }
            counts.push(leaves.len());
        }
        if !docs.is_empty() {
            verdicts.extend(self.call(&docs)?);
        }
        let mut verdicts = verdicts.into_iter();
        Ok(counts
            .into_iter()
            .map(|n| verdicts.by_ref().take(n).collect())
            .collect())
    }

    /// One JavaScript call over documents (JSON text).
    fn call(&self, docs: &[String]) -> Result<Vec<bool>, DesignError> {
        match self.kind {
            FilterKind::Function => self.js.filter(&self.ddoc, &self.name, docs, &self.req),
            FilterKind::View => self.js.filter_view(&self.ddoc, &self.name, docs),
        }
        .map_err(DesignError::Filter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn design_members_are_found_or_named_missing() {
        let doc: Map<String, Value> =
            serde_json::from_str(r#"{"filters":{"f":"function(){}"},"views":null}"#).unwrap();
        assert!(check_member(&doc, &["filters", "f"]).is_ok());
        let reason = |r: Result<(), DesignError>| match r {
            Err(DesignError::Missing(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            reason(check_member(&doc, &["filters", "g"])),
            "missing json key: g"
        );
        assert_eq!(reason(check_member(&doc, &["views", "v"])), "json_mismatch");
        assert_eq!(
            reason(check_member(&doc, &["lists", "v"])),
            "missing json key: lists"
        );
    }
}
