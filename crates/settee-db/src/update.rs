//! The pure part of a document update: given a document's current revision
//! tree and one edit, decide the new tree or the per-document failure.
//!
//! Invariants:
//! - `new_edits=true`: an edit must name a current leaf as its parent
//!   (or, for a document whose winner is deleted or that does not exist,
//!   no parent); anything else is a conflict. The new rev id is
//!   [`Rev::next_edit`] of parent, deleted flag and body — deterministic
//!   (CouchDB's own hash of the edit where it has one).
//! - `new_edits=false`: the given revision and its `_revisions` history are
//!   merged as they are; a revision already present changes nothing.
//! - The result tree is stemmed to `revs_limit`.

use settee_core::doc::{Doc, DocError};
use settee_core::rev::Rev;
use settee_core::revtree::{Node, RevTree};

use crate::error::DocFailure;

/// What an accepted edit does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// The tree changed: `rev` was added (its body must be stored) and the
    /// `stemmed` nodes were removed (their bodies must be deleted).
    Changed {
        tree: RevTree,
        rev: Rev,
        stemmed: Vec<Node>,
    },
    /// A replicated revision that is already present: nothing to write.
    Unchanged { rev: Rev },
}

/// Applies one edit to `existing` (None when the document does not exist).
pub fn apply(
    existing: Option<&RevTree>,
    doc: &Doc,
    new_edits: bool,
    revs_limit: usize,
) -> Result<Edit, DocFailure> {
    let (mut tree, rev) = if new_edits {
        new_edit(existing, doc)?
    } else {
        match replicated_edit(existing, doc)? {
            Some(changed) => changed,
            None => {
                return Ok(Edit::Unchanged {
                    rev: doc.rev.clone().unwrap_or_else(|| Rev::new(0, "")),
                })
            }
        }
    };
    let stemmed = tree.stem(revs_limit);
    Ok(Edit::Changed { tree, rev, stemmed })
}

fn new_edit(existing: Option<&RevTree>, doc: &Doc) -> Result<(RevTree, Rev), DocFailure> {
    let parent = match (existing, &doc.rev) {
        (None, None) => None,
        (None, Some(_)) => return Err(DocFailure::Conflict),
        (Some(tree), None) => match tree.winner() {
            // Re-creating a deleted document extends the deleted branch.
            Some(w) if w.deleted => Some(w.rev),
            Some(_) => return Err(DocFailure::Conflict),
            None => None,
        },
        (Some(tree), Some(rev)) if tree.is_leaf(rev) => Some(rev.clone()),
        (Some(_), Some(_)) => return Err(DocFailure::Conflict),
    };
    let rev = Rev::next_edit(parent.as_ref(), doc.deleted, doc.body.as_str());
    let mut tree = existing.cloned().unwrap_or_default();
    tree.add(parent.as_ref(), rev.clone(), doc.deleted, true)
        .map_err(|_| DocFailure::Conflict)?;
    Ok((tree, rev))
}

/// Merges a replicated revision; None when it was already present.
fn replicated_edit(
    existing: Option<&RevTree>,
    doc: &Doc,
) -> Result<Option<(RevTree, Rev)>, DocFailure> {
    let rev = doc.rev.clone().ok_or_else(|| {
        DocFailure::Bad(DocError::BadRequest("new_edits=false requires _rev".into()))
    })?;
    let path = doc.revisions.clone().unwrap_or_else(|| vec![rev.clone()]);
    let mut tree = existing.cloned().unwrap_or_default();
    let added = tree
        .merge_path(&path, doc.deleted, true)
        .map_err(|e| DocFailure::Bad(DocError::BadRequest(e.to_string())))?;
    Ok(added.then_some((tree, rev)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(v: serde_json::Value) -> Doc {
        Doc::from_json(v, || "id".into()).unwrap()
    }

    fn changed(e: Edit) -> (RevTree, Rev) {
        match e {
            Edit::Changed { tree, rev, .. } => (tree, rev),
            Edit::Unchanged { .. } => panic!("expected a change"),
        }
    }

    #[test]
    fn create_update_conflict() {
        let (t1, r1) = changed(apply(None, &doc(json!({"a":1})), true, 1000).unwrap());
        assert_eq!(r1.pos, 1);
        assert_eq!(
            apply(Some(&t1), &doc(json!({"a":2})), true, 1000),
            Err(DocFailure::Conflict)
        );
        assert_eq!(
            apply(None, &doc(json!({"_rev": r1.to_string()})), true, 1000),
            Err(DocFailure::Conflict)
        );
        let (t2, r2) = changed(
            apply(
                Some(&t1),
                &doc(json!({"_rev": r1.to_string(), "a":2})),
                true,
                1000,
            )
            .unwrap(),
        );
        assert_eq!(r2.pos, 2);
        // Editing a non-leaf is a conflict.
        assert_eq!(
            apply(Some(&t2), &doc(json!({"_rev": r1.to_string()})), true, 1000),
            Err(DocFailure::Conflict)
        );
    }

    #[test]
    fn recreate_after_delete_extends_tombstone() {
        let (t1, r1) = changed(apply(None, &doc(json!({})), true, 1000).unwrap());
        let del = doc(json!({"_rev": r1.to_string(), "_deleted": true}));
        let (t2, r2) = changed(apply(Some(&t1), &del, true, 1000).unwrap());
        assert!(t2.winner().unwrap().deleted);
        let (t3, r3) = changed(apply(Some(&t2), &doc(json!({"b":1})), true, 1000).unwrap());
        assert_eq!(r3.pos, r2.pos + 1);
        assert!(!t3.winner().unwrap().deleted);
    }

    #[test]
    fn same_edit_same_rev() {
        let a = changed(apply(None, &doc(json!({"x":1})), true, 1000).unwrap()).1;
        let b = changed(apply(None, &doc(json!({"x":1})), true, 1000).unwrap()).1;
        assert_eq!(a, b);
    }

    #[test]
    fn replicated_merge_and_idempotence() {
        let d = doc(json!({"_rev":"3-c","_revisions":{"start":3,"ids":["c","b","a"]}}));
        let (t, r) = changed(apply(None, &d, false, 1000).unwrap());
        assert_eq!(r, Rev::new(3, "c"));
        assert_eq!(t.len(), 3);
        assert_eq!(
            apply(Some(&t), &d, false, 1000),
            Ok(Edit::Unchanged {
                rev: Rev::new(3, "c")
            })
        );
        let other = doc(json!({"_rev":"3-z","_revisions":{"start":3,"ids":["z","b","a"]}}));
        let (t2, _) = changed(apply(Some(&t), &other, false, 1000).unwrap());
        assert_eq!(t2.leaves().len(), 2);
        assert_eq!(t2.winner().unwrap().rev, Rev::new(3, "z"));
        assert!(apply(None, &doc(json!({"a":1})), false, 1000).is_err());
    }

    #[test]
    fn stems_to_limit() {
        let d = doc(json!({"_rev":"5-e","_revisions":{"start":5,"ids":["e","d","c","b","a"]}}));
        match apply(None, &d, false, 2).unwrap() {
            Edit::Changed { tree, stemmed, .. } => {
                assert_eq!(tree.len(), 2);
                assert_eq!(stemmed.len(), 3);
            }
            Edit::Unchanged { .. } => panic!("expected a change"),
        }
    }
}
