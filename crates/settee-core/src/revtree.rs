//! Revision trees: the history of one document as a forest of revisions.
//!
//! A tree is a set of nodes, each a revision with an optional parent. Leaves
//! (nodes without children) are the document's current versions: one winner
//! and any number of conflicts.
//!
//! Invariants, checked by [`RevTree::check`] and kept by every method here:
//! - no revision appears twice;
//! - a node's parent has generation `pos - 1` (so the parent relation is acyclic);
//! - roots are either generation 1 or the survivors of stemming.
//!
//! The winner is deterministic: non-deleted beats deleted, then the higher
//! generation, then the higher hash (byte order) — CouchDB's rule, so every
//! node agrees on the winner without coordination.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::rev::{Rev, RevHash};

/// One revision in a tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub rev: Rev,
    /// Index of the parent in [`RevTree::nodes`]; None for a root.
    pub parent: Option<u32>,
    /// The revision is a deletion (tombstone).
    pub deleted: bool,
    /// The revision's body is stored (false for history-only revisions
    /// received via replication and for bodies dropped by compaction).
    pub has_body: bool,
}

/// A leaf of the tree: a current version of the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf {
    pub rev: Rev,
    pub deleted: bool,
    pub has_body: bool,
}

/// Status of a revision in a `revs_info` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevStatus {
    Available,
    Missing,
    Deleted,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TreeError {
    #[error("revision {0} already exists")]
    Exists(String),
    #[error("parent revision {0} is not in the tree")]
    MissingParent(String),
    #[error("revision path is not consecutive")]
    BadPath,
    #[error("corrupt revision tree: {0}")]
    Corrupt(&'static str),
}

/// The revision forest of one document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevTree {
    nodes: Vec<Node>,
}

impl RevTree {
    /// A tree holding a single root revision.
    pub fn with_root(rev: Rev, deleted: bool, has_body: bool) -> RevTree {
        RevTree {
            nodes: vec![Node {
                rev,
                parent: None,
                deleted,
                has_body,
            }],
        }
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn find(&self, rev: &Rev) -> Option<usize> {
        self.nodes.iter().position(|n| n.rev == *rev)
    }

    pub fn contains(&self, rev: &Rev) -> bool {
        self.find(rev).is_some()
    }

    fn child_flags(&self) -> Vec<bool> {
        let mut has_child = vec![false; self.nodes.len()];
        for n in &self.nodes {
            if let Some(p) = n.parent {
                has_child[p as usize] = true;
            }
        }
        has_child
    }

    /// Indices of all leaves, in node order.
    fn leaf_indices(&self) -> Vec<usize> {
        let has_child = self.child_flags();
        (0..self.nodes.len()).filter(|&i| !has_child[i]).collect()
    }

    /// All leaves, winner first, then the others in descending winner order.
    pub fn leaves(&self) -> Vec<Leaf> {
        if let [only] = self.nodes.as_slice() {
            // The common case (a new document) needs no child analysis.
            return vec![Leaf {
                rev: only.rev.clone(),
                deleted: only.deleted,
                has_body: only.has_body,
            }];
        }
        let mut leaves: Vec<Leaf> = self
            .leaf_indices()
            .into_iter()
            .map(|i| {
                let n = &self.nodes[i];
                Leaf {
                    rev: n.rev.clone(),
                    deleted: n.deleted,
                    has_body: n.has_body,
                }
            })
            .collect();
        leaves.sort_by(|a, b| winner_key(b.deleted, &b.rev).cmp(&winner_key(a.deleted, &a.rev)));
        leaves
    }

    pub fn is_leaf(&self, rev: &Rev) -> bool {
        match self.find(rev) {
            Some(i) => !self.nodes.iter().any(|n| n.parent == Some(i as u32)),
            None => false,
        }
    }

    /// The winning leaf, or None for an empty tree.
    pub fn winner(&self) -> Option<Leaf> {
        self.winner_node().map(|n| Leaf {
            rev: n.rev.clone(),
            deleted: n.deleted,
            has_body: n.has_body,
        })
    }

    /// The winning leaf's node: the first of [`RevTree::leaves`], found
    /// without collecting and sorting them (the writer asks several times
    /// per document).
    pub fn winner_node(&self) -> Option<&Node> {
        if let [only] = self.nodes.as_slice() {
            return Some(only);
        }
        let has_child = self.child_flags();
        self.nodes
            .iter()
            .zip(has_child)
            .filter(|(_, has_child)| !has_child)
            // Strictly greater replaces: among equal keys the first stays,
            // as in the stable sort of `leaves`.
            .fold(None, |best: Option<&Node>, (n, _)| match best {
                Some(b) if winner_key(n.deleted, &n.rev) <= winner_key(b.deleted, &b.rev) => {
                    Some(b)
                }
                _ => Some(n),
            })
    }

    /// Revisions from `rev` back to its root, newest first.
    pub fn path(&self, rev: &Rev) -> Option<Vec<&Node>> {
        let mut i = self.find(rev)?;
        let mut out = vec![&self.nodes[i]];
        while let Some(p) = self.nodes[i].parent {
            i = p as usize;
            out.push(&self.nodes[i]);
        }
        Some(out)
    }

    /// `revs_info` for `rev`: each ancestor with its status, newest first.
    pub fn revs_info(&self, rev: &Rev) -> Option<Vec<(Rev, RevStatus)>> {
        let path = self.path(rev)?;
        Some(
            path.into_iter()
                .map(|n| (n.rev.clone(), status(n)))
                .collect(),
        )
    }

    /// Adds `rev` as a child of `parent` (or as a new root). The caller has
    /// checked that `parent` is a leaf; this only keeps the tree well formed.
    pub fn add(
        &mut self,
        parent: Option<&Rev>,
        rev: Rev,
        deleted: bool,
        has_body: bool,
    ) -> Result<(), TreeError> {
        if self.contains(&rev) {
            return Err(TreeError::Exists(rev.to_string()));
        }
        let parent_idx = match parent {
            Some(p) => {
                let i = self
                    .find(p)
                    .ok_or_else(|| TreeError::MissingParent(p.to_string()))?;
                if p.pos.checked_add(1) != Some(rev.pos) {
                    return Err(TreeError::BadPath);
                }
                Some(i as u32)
            }
            None if rev.pos == 1 => None,
            None => return Err(TreeError::BadPath),
        };
        self.nodes.push(Node {
            rev,
            parent: parent_idx,
            deleted,
            has_body,
        });
        Ok(())
    }

    /// Merges a revision path (newest first, consecutive generations) as
    /// the replicator delivers it with `new_edits=false`. Returns true when
    /// the newest revision was not present.
    ///
    /// The newest revision of the path already in the tree is the anchor:
    /// revisions newer than it are added as its descendants; older ones are
    /// only used to give a stemmed root back its ancestors, and only while
    /// they agree with the tree. Revisions already present keep their flags;
    /// a path that contradicts an existing parent changes nothing below the
    /// anchor (and so never creates a leaf nobody wrote).
    pub fn merge_path(
        &mut self,
        path: &[Rev],
        deleted: bool,
        has_body: bool,
    ) -> Result<bool, TreeError> {
        let (Some(newest), Some(oldest)) = (path.first(), path.last()) else {
            return Err(TreeError::BadPath);
        };
        let consecutive = path
            .iter()
            .enumerate()
            .all(|(i, r)| r.pos.checked_add(i as u64) == Some(newest.pos));
        if !consecutive || oldest.pos == 0 {
            return Err(TreeError::BadPath);
        }
        let anchor = path.iter().position(|r| self.contains(r));
        let mut prev = match anchor {
            None => None,
            Some(a) => {
                let idx = self
                    .find(&path[a])
                    .ok_or(TreeError::Corrupt("anchor vanished"))?;
                self.extend_root(idx, &path[a + 1..]);
                Some(idx as u32)
            }
        };
        let first_new = anchor.unwrap_or(path.len());
        for (i, rev) in path[..first_new].iter().enumerate().rev() {
            let is_leaf = i == 0;
            self.nodes.push(Node {
                rev: rev.clone(),
                parent: prev,
                deleted: is_leaf && deleted,
                has_body: is_leaf && has_body,
            });
            prev = Some((self.nodes.len() - 1) as u32);
        }
        Ok(anchor != Some(0))
    }

    /// Walks up from node `idx` along `older` (its claimed ancestors, newest
    /// first) while the tree agrees; where the walk reaches a stemmed root,
    /// the remaining ancestors are attached above it.
    fn extend_root(&mut self, mut idx: usize, older: &[Rev]) {
        for rev in older {
            match self.nodes[idx].parent {
                Some(p) if self.nodes[p as usize].rev == *rev => idx = p as usize,
                Some(_) => return,
                None => {
                    let parent = match self.find(rev) {
                        Some(i) => i,
                        None => {
                            self.nodes.push(Node {
                                rev: rev.clone(),
                                parent: None,
                                deleted: false,
                                has_body: false,
                            });
                            self.nodes.len() - 1
                        }
                    };
                    self.nodes[idx].parent = Some(parent as u32);
                    idx = parent;
                }
            }
        }
    }

    /// Stems to `limit` (CouchDB's `revs_limit`), as CouchDB does: a
    /// revision survives if it is among the newest `limit` of some leaf's
    /// path. (So a leaf on a longer branch may keep more than `limit`
    /// ancestors when a shorter branch keeps their common ancestor.)
    /// Returns the removed nodes.
    pub fn stem(&mut self, limit: usize) -> Vec<Node> {
        let limit = limit.max(1);
        if self.nodes.len() <= limit {
            return Vec::new();
        }
        let mut keep = vec![false; self.nodes.len()];
        for leaf in self.leaf_indices() {
            let mut i = Some(leaf);
            let mut depth = 0;
            while let Some(idx) = i {
                if depth == limit {
                    break;
                }
                keep[idx] = true;
                depth += 1;
                i = self.nodes[idx].parent.map(|p| p as usize);
            }
        }
        self.retain(&keep)
    }

    /// Removes `rev` (which must be a leaf) and every ancestor that no other
    /// leaf shares — CouchDB's purge. Returns the removed nodes, empty if
    /// `rev` is not a leaf.
    pub fn purge_leaf(&mut self, rev: &Rev) -> Vec<Node> {
        if !self.is_leaf(rev) {
            return Vec::new();
        }
        let Some(start) = self.find(rev) else {
            return Vec::new();
        };
        let mut keep = vec![true; self.nodes.len()];
        let mut child_count = vec![0usize; self.nodes.len()];
        for n in &self.nodes {
            if let Some(p) = n.parent {
                child_count[p as usize] += 1;
            }
        }
        let mut i = Some(start);
        while let Some(idx) = i {
            keep[idx] = false;
            let parent = self.nodes[idx].parent.map(|p| p as usize);
            i = match parent {
                Some(p) => {
                    child_count[p] -= 1;
                    (child_count[p] == 0).then_some(p)
                }
                None => None,
            };
        }
        self.retain(&keep)
    }

    /// Marks the body of `rev` as dropped (compaction).
    pub fn drop_body(&mut self, rev: &Rev) {
        if let Some(i) = self.find(rev) {
            self.nodes[i].has_body = false;
        }
    }

    /// Non-leaf revisions that still have a stored body (what compaction drops).
    pub fn non_leaf_bodies(&self) -> Vec<Rev> {
        let has_child = self.child_flags();
        self.nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| has_child[*i] && n.has_body)
            .map(|(_, n)| n.rev.clone())
            .collect()
    }

    /// Keeps the nodes whose flag is set, re-indexing parents; children of a
    /// removed node become roots. Returns the removed nodes.
    fn retain(&mut self, keep: &[bool]) -> Vec<Node> {
        if keep.iter().all(|&k| k) {
            return Vec::new();
        }
        let mut new_index = vec![None; self.nodes.len()];
        let mut next = 0u32;
        for (i, &k) in keep.iter().enumerate() {
            if k {
                new_index[i] = Some(next);
                next += 1;
            }
        }
        let old = std::mem::take(&mut self.nodes);
        let mut removed = Vec::new();
        for (i, mut n) in old.into_iter().enumerate() {
            if keep[i] {
                n.parent = n.parent.and_then(|p| new_index[p as usize]);
                self.nodes.push(n);
            } else {
                removed.push(n);
            }
        }
        removed
    }

    /// Verifies the structural invariants (used after decoding a stored tree).
    pub fn check(&self) -> Result<(), TreeError> {
        let mut seen = std::collections::HashSet::with_capacity(self.nodes.len());
        for n in &self.nodes {
            if !seen.insert(&n.rev) {
                return Err(TreeError::Corrupt("duplicate revision"));
            }
            if n.rev.pos == 0 {
                return Err(TreeError::Corrupt("generation 0"));
            }
            if let Some(p) = n.parent {
                let parent = self
                    .nodes
                    .get(p as usize)
                    .ok_or(TreeError::Corrupt("dangling parent"))?;
                if parent.rev.pos + 1 != n.rev.pos {
                    return Err(TreeError::Corrupt("parent generation mismatch"));
                }
            }
        }
        Ok(())
    }
}

fn status(n: &Node) -> RevStatus {
    if n.deleted {
        RevStatus::Deleted
    } else if n.has_body {
        RevStatus::Available
    } else {
        RevStatus::Missing
    }
}

fn winner_key(deleted: bool, rev: &Rev) -> (bool, u64, &RevHash) {
    (!deleted, rev.pos, &rev.hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> Rev {
        s.parse().unwrap()
    }

    fn linear(n: u64) -> RevTree {
        let mut t = RevTree::default();
        for i in 1..=n {
            let parent = (i > 1).then(|| r(&format!("{}-h{}", i - 1, i - 1)));
            t.add(parent.as_ref(), r(&format!("{i}-h{i}")), false, true)
                .unwrap();
        }
        t
    }

    #[test]
    fn winner_prefers_live_then_longest_then_highest_hash() {
        let mut t = linear(2);
        t.add(Some(&r("1-h1")), r("2-zz"), false, true).unwrap();
        assert_eq!(t.winner().unwrap().rev, r("2-zz"));
        assert_eq!(t.leaves().len(), 2);
        t.add(Some(&r("2-zz")), r("3-del"), true, true).unwrap();
        // The longer branch is deleted, so the live generation-2 leaf wins.
        assert_eq!(t.winner().unwrap().rev, r("2-h2"));
        t.add(Some(&r("2-h2")), r("3-del2"), true, true).unwrap();
        // All deleted: longest, then highest hash.
        let w = t.winner().unwrap();
        assert!(w.deleted);
        assert_eq!(w.rev, r("3-del2"));
    }

    #[test]
    fn add_checks_parent_and_duplicates() {
        let mut t = linear(1);
        assert_eq!(
            t.add(None, r("1-h1"), false, true),
            Err(TreeError::Exists("1-h1".into()))
        );
        assert_eq!(
            t.add(Some(&r("1-nope")), r("2-a"), false, true),
            Err(TreeError::MissingParent("1-nope".into()))
        );
        assert_eq!(
            t.add(Some(&r("1-h1")), r("3-a"), false, true),
            Err(TreeError::BadPath)
        );
        assert_eq!(t.add(None, r("2-a"), false, true), Err(TreeError::BadPath));
    }

    #[test]
    fn stem_keeps_newest_revisions_per_leaf() {
        let mut t = linear(5);
        let removed = t.stem(2);
        assert_eq!(removed.len(), 3);
        assert_eq!(t.len(), 2);
        assert_eq!(t.path(&r("5-h5")).unwrap().len(), 2);
        t.check().unwrap();
        // Merging the full history back re-attaches the stemmed root.
        let path: Vec<Rev> = (1..=6).rev().map(|i| r(&format!("{i}-h{i}"))).collect();
        assert!(t.merge_path(&path, false, true).unwrap());
        assert_eq!(t.path(&r("6-h6")).unwrap().len(), 6);
        assert_eq!(t.leaves().len(), 1);
        t.check().unwrap();
    }

    #[test]
    fn merge_path_creates_conflicts_and_is_idempotent() {
        let mut t = linear(2);
        let path = [r("3-x"), r("2-x"), r("1-h1")];
        assert!(t.merge_path(&path, false, true).unwrap());
        assert!(!t.merge_path(&path, false, true).unwrap());
        let leaves = t.leaves();
        assert_eq!(leaves.len(), 2);
        assert_eq!(leaves[0].rev, r("3-x"));
        assert_eq!(
            t.merge_path(&[r("3-a"), r("1-a")], false, true),
            Err(TreeError::BadPath)
        );
        // A disjoint history becomes a second root.
        assert!(t.merge_path(&[r("2-q"), r("1-q")], false, true).unwrap());
        assert_eq!(t.leaves().len(), 3);
        assert_eq!(
            t.revs_info(&r("3-x")).unwrap()[1],
            (r("2-x"), RevStatus::Missing)
        );
        t.check().unwrap();
    }

    #[test]
    fn purge_removes_unshared_branch_only() {
        let mut t = linear(3);
        t.add(Some(&r("1-h1")), r("2-b"), false, true).unwrap();
        t.add(Some(&r("2-b")), r("3-b"), false, true).unwrap();
        assert!(t.purge_leaf(&r("2-b")).is_empty(), "not a leaf");
        let removed: Vec<Rev> = t.purge_leaf(&r("3-b")).into_iter().map(|n| n.rev).collect();
        assert_eq!(removed, vec![r("2-b"), r("3-b")]);
        assert_eq!(t.len(), 3);
        t.check().unwrap();
        let removed = t.purge_leaf(&r("3-h3"));
        assert_eq!(removed.len(), 3);
        assert!(t.is_empty());
    }

    #[test]
    fn compaction_candidates_are_non_leaf_bodies() {
        let mut t = linear(3);
        assert_eq!(t.non_leaf_bodies(), vec![r("1-h1"), r("2-h2")]);
        t.drop_body(&r("1-h1"));
        assert_eq!(t.non_leaf_bodies(), vec![r("2-h2")]);
        assert_eq!(t.revs_info(&r("3-h3")).unwrap()[2].1, RevStatus::Missing);
    }
}
