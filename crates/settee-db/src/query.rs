//! Read helpers for the HTTP API that combine several [`crate::Reader`]
//! calls (revs_diff, bulk_get). Pure functions over a snapshot reader.

use settee_core::rev::Rev;

use crate::error::Result;
use crate::reader::Reader;

/// What `_revs_diff` reports for one document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevsDiff {
    /// The asked revisions the document does not have, in asking order.
    pub missing: Vec<Rev>,
    /// Leaves older than some missing revision: candidates for its parent
    /// (CouchDB's rule), so the sender can send only the newer part.
    pub possible_ancestors: Vec<Rev>,
}

/// `_revs_diff` for one document: None when every revision is present.
pub fn revs_diff(reader: &Reader, id: &str, revs: &[Rev]) -> Result<Option<RevsDiff>> {
    let tree = reader.rev_tree(id)?;
    let mut missing: Vec<Rev> = Vec::new();
    for rev in revs {
        let present = tree.as_ref().is_some_and(|t| t.contains(rev));
        if !present && !missing.contains(rev) {
            missing.push(rev.clone());
        }
    }
    if missing.is_empty() {
        return Ok(None);
    }
    let possible_ancestors = match &tree {
        Some(t) => t
            .leaves()
            .into_iter()
            .filter(|leaf| missing.iter().any(|m| leaf.rev.pos < m.pos))
            .map(|leaf| leaf.rev)
            .collect(),
        None => Vec::new(),
    };
    Ok(Some(RevsDiff {
        missing,
        possible_ancestors,
    }))
}
