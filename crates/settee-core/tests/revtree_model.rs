//! Model-based property tests for [`RevTree`].
//!
//! **The model.** A document's history is a *set of root-to-leaf paths*
//! (`Vec<Rev>`, oldest first), one per leaf, plus the `deleted` / `has_body`
//! flags of every revision. Nothing in the model is a tree: the parent of a
//! revision is "the element before it in some path", the leaves are the
//! revisions that precede nothing, and after every operation the path set is
//! re-derived from scratch (`normalize`). The operations are:
//! - `add(parent, rev)`: the path of `parent` extended by `rev` joins the set
//!   (`add(None, 1-x)`: the path `[1-x]` joins the set);
//! - `merge_path(p)`: `p` (reversed) joins the set; paths that share
//!   revisions fuse, and a stemmed root gains the ancestors `p` supplies;
//! - `stem(limit)`: a revision survives when it is among the newest
//!   `max(limit, 1)` revisions of some leaf's path; each path keeps its longest
//!   surviving suffix (CouchDB's `couch_key_tree:stem`, which keeps an
//!   ancestor for every leaf once one leaf needs it);
//! - `purge_leaf(l)`: the path ending in `l` leaves the set.
//!
//! Hashes come from a four-element alphabet (with `a` a byte prefix of `ab`),
//! so shared prefixes, duplicate revisions and hash ties are common.
//!
//! **Invariants checked after every operation**: `check()` is Ok; the same
//! revisions with the same flags; the same leaves (rev, deleted, has_body) in
//! the same winner order; the winner, computed independently (non-deleted,
//! then higher generation, then higher hash bytes); `path(leaf)` equals the
//! model path for every leaf; `is_leaf`, `revs_info` and `non_leaf_bodies`;
//! the same errors from `add`/`merge_path`; `merge_path`'s return value
//! ("the newest revision was new") and its idempotence (merging the same path
//! again, or any sub-path of an existing path, returns false and changes
//! nothing); `stem` never removes a leaf, keeps every leaf's newest `limit`
//! revisions, removes exactly the revisions in no leaf's window, and is
//! idempotent; `purge_leaf` removes exactly the leaf and the ancestors no
//! other leaf shares (and nothing for a non-leaf).
//!
//! A merged path that contradicts the tree (it gives an existing revision a
//! different parent) has no meaning in the path-set model; such merges are
//! applied to a scratch copy and checked only for weak invariants.
//!
//! Further properties: merging one set of paths in any order gives the same
//! leaves, winner and structure (what replication relies on); replicas that
//! exchange their leaf paths converge, including honest replicas that edit
//! with [`Rev::next`]; `Rev::next` is deterministic and injective on its
//! inputs.

use std::collections::{BTreeMap, BTreeSet};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use settee_core::rev::Rev;
use settee_core::revtree::{RevStatus, RevTree, TreeError};

/// The hash alphabet: small, with a byte-prefix pair to exercise byte order.
const HASHES: [&str; 4] = ["a", "ab", "b", "c"];

fn rev(pos: u64, h: usize) -> Rev {
    Rev::new(pos, HASHES[h % HASHES.len()])
}

fn r(s: &str) -> Rev {
    s.parse().unwrap()
}

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Flags {
    deleted: bool,
    has_body: bool,
}

/// A document history as a set of maximal root-to-leaf paths (oldest first).
#[derive(Debug, Clone, Default)]
struct Model {
    paths: BTreeSet<Vec<Rev>>,
    flags: BTreeMap<Rev, Flags>,
}

/// True when leaf `a` beats leaf `b`: non-deleted first, then the higher
/// generation, then the higher hash bytes.
fn beats(a: (&Rev, bool), b: (&Rev, bool)) -> bool {
    let (ra, da) = a;
    let (rb, db) = b;
    if da != db {
        return !da;
    }
    if ra.pos != rb.pos {
        return ra.pos > rb.pos;
    }
    // The model compares the hashes' text, independently of RevHash's Ord.
    ra.hash.to_string().as_bytes() > rb.hash.to_string().as_bytes()
}

/// Re-derives the maximal paths of a set of (possibly overlapping, possibly
/// partial) paths. Panics if two paths disagree on a revision's parent: the
/// model only describes consistent histories.
fn normalize(raw: impl IntoIterator<Item = Vec<Rev>>) -> BTreeSet<Vec<Rev>> {
    let mut pred: BTreeMap<Rev, Rev> = BTreeMap::new();
    let mut has_child: BTreeSet<Rev> = BTreeSet::new();
    let mut all: BTreeSet<Rev> = BTreeSet::new();
    for p in raw {
        for w in p.windows(2) {
            if let Some(old) = pred.insert(w[1].clone(), w[0].clone()) {
                assert_eq!(old, w[0], "model fed an inconsistent history");
            }
            has_child.insert(w[0].clone());
        }
        all.extend(p);
    }
    all.difference(&has_child)
        .map(|leaf| {
            let mut path = vec![leaf.clone()];
            while let Some(p) = pred.get(path.last().unwrap()) {
                path.push(p.clone());
            }
            path.reverse();
            path
        })
        .collect()
}

impl Model {
    fn from_paths<'a>(paths: impl IntoIterator<Item = &'a (Vec<Rev>, bool)>) -> Model {
        let mut m = Model::default();
        for (p, deleted) in paths {
            assert!(m.consistent(p));
            m.merge(p, *deleted, true).unwrap();
        }
        m
    }

    fn revs(&self) -> BTreeSet<Rev> {
        self.paths.iter().flatten().cloned().collect()
    }

    fn contains(&self, r: &Rev) -> bool {
        self.paths.iter().any(|p| p.contains(r))
    }

    /// The revision before `r` in some path.
    fn pred(&self, r: &Rev) -> Option<Rev> {
        self.paths.iter().find_map(|p| {
            let i = p.iter().position(|x| x == r)?;
            (i > 0).then(|| p[i - 1].clone())
        })
    }

    /// `r` and its ancestors, oldest first.
    fn ancestry(&self, r: &Rev) -> Vec<Rev> {
        self.paths
            .iter()
            .find_map(|p| p.iter().position(|x| x == r).map(|i| p[..=i].to_vec()))
            .unwrap_or_default()
    }

    fn leaf_path(&self, leaf: &Rev) -> Option<&Vec<Rev>> {
        self.paths.iter().find(|p| p.last() == Some(leaf))
    }

    fn is_leaf(&self, r: &Rev) -> bool {
        self.leaf_path(r).is_some()
    }

    fn leaf_revs(&self) -> Vec<Rev> {
        self.paths
            .iter()
            .map(|p| p.last().unwrap().clone())
            .collect()
    }

    /// Leaves as (rev, deleted, has_body), best first (insertion sort on `beats`).
    fn leaves(&self) -> Vec<(Rev, bool, bool)> {
        let mut out: Vec<(Rev, bool, bool)> = Vec::new();
        for leaf in self.leaf_revs() {
            let f = self.flags[&leaf];
            let at = out
                .iter()
                .position(|(r, d, _)| beats((&leaf, f.deleted), (r, *d)))
                .unwrap_or(out.len());
            out.insert(at, (leaf, f.deleted, f.has_body));
        }
        out
    }

    fn winner(&self) -> Option<(Rev, bool)> {
        let mut best: Option<(Rev, bool)> = None;
        for leaf in self.leaf_revs() {
            let d = self.flags[&leaf].deleted;
            if best
                .as_ref()
                .is_none_or(|(b, bd)| beats((&leaf, d), (b, *bd)))
            {
                best = Some((leaf, d));
            }
        }
        best
    }

    fn prune_flags(&mut self) {
        let revs = self.revs();
        self.flags.retain(|r, _| revs.contains(r));
    }

    fn add(
        &mut self,
        parent: Option<&Rev>,
        rev: &Rev,
        deleted: bool,
        has_body: bool,
    ) -> Result<(), TreeError> {
        if self.contains(rev) {
            return Err(TreeError::Exists(rev.to_string()));
        }
        let mut path = match parent {
            Some(p) => {
                if !self.contains(p) {
                    return Err(TreeError::MissingParent(p.to_string()));
                }
                if p.pos.checked_add(1) != Some(rev.pos) {
                    return Err(TreeError::BadPath);
                }
                self.ancestry(p)
            }
            None if rev.pos == 1 => Vec::new(),
            None => return Err(TreeError::BadPath),
        };
        path.push(rev.clone());
        let mut raw: Vec<Vec<Rev>> = self.paths.iter().cloned().collect();
        raw.push(path);
        self.paths = normalize(raw);
        self.flags.insert(rev.clone(), Flags { deleted, has_body });
        Ok(())
    }

    /// A newest-first path is consistent with the history when it gives no
    /// present revision a parent other than the one it has.
    fn consistent(&self, newest_first: &[Rev]) -> bool {
        newest_first
            .windows(2)
            .all(|w| self.pred(&w[0]).is_none_or(|p| p == w[1]))
    }

    fn merge(
        &mut self,
        newest_first: &[Rev],
        deleted: bool,
        has_body: bool,
    ) -> Result<bool, TreeError> {
        let Some(newest) = newest_first.first() else {
            return Err(TreeError::BadPath);
        };
        let consecutive = newest_first
            .iter()
            .enumerate()
            .all(|(i, r)| r.pos >= 1 && newest.pos.checked_sub(i as u64) == Some(r.pos));
        if !consecutive {
            return Err(TreeError::BadPath);
        }
        let was_new = !self.contains(newest);
        for (i, r) in newest_first.iter().enumerate() {
            if !self.contains(r) {
                let f = if i == 0 {
                    Flags { deleted, has_body }
                } else {
                    Flags {
                        deleted: false,
                        has_body: false,
                    }
                };
                self.flags.insert(r.clone(), f);
            }
        }
        let mut raw: Vec<Vec<Rev>> = self.paths.iter().cloned().collect();
        raw.push(newest_first.iter().rev().cloned().collect());
        self.paths = normalize(raw);
        Ok(was_new)
    }

    /// Returns the removed revisions.
    fn stem(&mut self, limit: usize) -> BTreeSet<Rev> {
        let limit = limit.max(1);
        let survivors: BTreeSet<Rev> = self
            .paths
            .iter()
            .flat_map(|p| p[p.len().saturating_sub(limit)..].iter().cloned())
            .collect();
        let removed: BTreeSet<Rev> = self.revs().difference(&survivors).cloned().collect();
        let raw: Vec<Vec<Rev>> = self
            .paths
            .iter()
            .map(|p| {
                let start = p
                    .iter()
                    .rposition(|r| !survivors.contains(r))
                    .map_or(0, |i| i + 1);
                p[start..].to_vec()
            })
            .collect();
        self.paths = normalize(raw);
        self.prune_flags();
        removed
    }

    /// Returns the removed revisions (none when `leaf` is not a leaf).
    fn purge(&mut self, leaf: &Rev) -> BTreeSet<Rev> {
        let Some(path) = self.leaf_path(leaf).cloned() else {
            return BTreeSet::new();
        };
        self.paths.remove(&path);
        let remaining = self.revs();
        self.prune_flags();
        path.into_iter()
            .filter(|r| !remaining.contains(r))
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Comparing a RevTree with the model
// ---------------------------------------------------------------------------

fn node_revs(nodes: &[settee_core::revtree::Node]) -> BTreeSet<Rev> {
    nodes.iter().map(|n| n.rev.clone()).collect()
}

fn tree_path(tree: &RevTree, leaf: &Rev) -> Option<Vec<Rev>> {
    tree.path(leaf)
        .map(|p| p.into_iter().map(|n| n.rev.clone()).collect())
}

/// The tree's structure: every revision with its parent's revision.
fn structure(tree: &RevTree) -> BTreeMap<Rev, Option<Rev>> {
    let nodes = tree.nodes();
    nodes
        .iter()
        .map(|n| {
            (
                n.rev.clone(),
                n.parent.map(|p| nodes[p as usize].rev.clone()),
            )
        })
        .collect()
}

fn tree_leaves(tree: &RevTree) -> Vec<(Rev, bool, bool)> {
    tree.leaves()
        .into_iter()
        .map(|l| (l.rev, l.deleted, l.has_body))
        .collect()
}

fn assert_agrees(tree: &RevTree, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(tree.check(), Ok(()));
    prop_assert_eq!(tree.is_empty(), model.paths.is_empty());
    prop_assert_eq!(node_revs(tree.nodes()), model.revs());
    prop_assert_eq!(tree.len(), model.flags.len());
    for n in tree.nodes() {
        prop_assert_eq!(
            Some(&Flags {
                deleted: n.deleted,
                has_body: n.has_body
            }),
            model.flags.get(&n.rev),
            "{}",
            n.rev
        );
        prop_assert_eq!(
            tree.is_leaf(&n.rev),
            model.is_leaf(&n.rev),
            "is_leaf {}",
            n.rev
        );
    }
    prop_assert_eq!(tree_leaves(tree), model.leaves());
    prop_assert_eq!(tree.winner().map(|w| (w.rev, w.deleted)), model.winner());
    for p in &model.paths {
        let leaf = p.last().unwrap();
        let expected: Vec<Rev> = p.iter().rev().cloned().collect();
        prop_assert_eq!(tree_path(tree, leaf), Some(expected), "path of {}", leaf);
        let info = tree.revs_info(leaf).unwrap();
        let expected_info: Vec<(Rev, RevStatus)> = p
            .iter()
            .rev()
            .map(|r| {
                let f = model.flags[r];
                let s = if f.deleted {
                    RevStatus::Deleted
                } else if f.has_body {
                    RevStatus::Available
                } else {
                    RevStatus::Missing
                };
                (r.clone(), s)
            })
            .collect();
        prop_assert_eq!(info, expected_info);
    }
    let bodies: BTreeSet<Rev> = tree.non_leaf_bodies().into_iter().collect();
    let expected_bodies: BTreeSet<Rev> = model
        .flags
        .iter()
        .filter(|(r, f)| f.has_body && !model.is_leaf(r))
        .map(|(r, _)| r.clone())
        .collect();
    prop_assert_eq!(bodies, expected_bodies);
    Ok(())
}

// ---------------------------------------------------------------------------
// Operation sequences
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    /// (1) A new edit on a current leaf.
    Edit {
        leaf: Index,
        hash: usize,
        deleted: bool,
    },
    /// (2) A new root, usually generation 1 (otherwise BadPath).
    NewRoot {
        pos: u64,
        hash: usize,
        deleted: bool,
    },
    /// `add` with arbitrary arguments: exercises every error.
    AddAny {
        parent: Option<(u64, usize)>,
        child: (u64, usize),
        deleted: bool,
    },
    /// (3) Merge a path built on an existing revision: a piece of its
    /// ancestry, new revisions on top, and (when it reaches a stemmed root)
    /// new ancestors below.
    MergeExtend {
        anchor: Index,
        keep: usize,
        above: Vec<usize>,
        below: Vec<usize>,
        deleted: bool,
        has_body: bool,
    },
    /// (3) Merge an arbitrary consecutive path.
    MergeRandom {
        top: u64,
        hashes: Vec<usize>,
        deleted: bool,
        has_body: bool,
    },
    /// Merge a window of an existing leaf path: must change nothing.
    Remerge {
        leaf: Index,
        skip: Index,
        len: Index,
    },
    /// (4) Stem with a small limit (0 behaves as 1).
    Stem { limit: usize },
    /// (5) Purge a current leaf.
    Purge { leaf: Index },
    /// Purge an arbitrary revision (usually not a leaf: must do nothing).
    PurgeAny { pos: u64, hash: usize },
}

fn hash_idx() -> impl Strategy<Value = usize> {
    0..HASHES.len()
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<Index>(), hash_idx(), prop::bool::weighted(0.2))
            .prop_map(|(leaf, hash, deleted)| Op::Edit { leaf, hash, deleted }),
        2 => (prop_oneof![4 => Just(1u64), 1 => 2u64..4], hash_idx(), prop::bool::weighted(0.2))
            .prop_map(|(pos, hash, deleted)| Op::NewRoot { pos, hash, deleted }),
        1 => (proptest::option::of((1u64..6, hash_idx())), (1u64..7, hash_idx()), any::<bool>())
            .prop_map(|(parent, child, deleted)| Op::AddAny { parent, child, deleted }),
        4 => (
            any::<Index>(),
            1usize..5,
            vec(hash_idx(), 0..4),
            vec(hash_idx(), 0..3),
            prop::bool::weighted(0.3),
            any::<bool>(),
        )
            .prop_map(|(anchor, keep, above, below, deleted, has_body)| Op::MergeExtend {
                anchor, keep, above, below, deleted, has_body,
            }),
        3 => (1u64..7, vec(hash_idx(), 1..7), prop::bool::weighted(0.3), any::<bool>())
            .prop_map(|(top, hashes, deleted, has_body)| Op::MergeRandom {
                top, hashes, deleted, has_body,
            }),
        1 => (any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(leaf, skip, len)| Op::Remerge { leaf, skip, len }),
        2 => (0usize..5).prop_map(|limit| Op::Stem { limit }),
        2 => any::<Index>().prop_map(|leaf| Op::Purge { leaf }),
        1 => (1u64..6, hash_idx()).prop_map(|(pos, hash)| Op::PurgeAny { pos, hash }),
    ]
}

/// Applies a merge to both sides and checks the merge-specific properties.
fn check_merge(
    tree: &mut RevTree,
    model: &mut Model,
    path: &[Rev],
    deleted: bool,
    has_body: bool,
) -> Result<(), TestCaseError> {
    if !model.consistent(path) {
        return check_contradicting_merge(tree, model, path, deleted, has_body);
    }
    let expected = model.merge(path, deleted, has_body);
    prop_assert_eq!(tree.merge_path(path, deleted, has_body), expected);
    // Idempotence: the same path again (even with other flags) changes nothing.
    let before = tree.clone();
    prop_assert_eq!(tree.merge_path(path, deleted, has_body), Ok(false));
    prop_assert_eq!(&*tree, &before);
    prop_assert_eq!(tree.merge_path(path, !deleted, !has_body), Ok(false));
    prop_assert_eq!(&*tree, &before);
    Ok(())
}

/// A path that gives a present revision another parent has no meaning in the
/// path-set model. Apply it to a copy and check what must hold anyway.
fn check_contradicting_merge(
    tree: &RevTree,
    model: &Model,
    path: &[Rev],
    deleted: bool,
    has_body: bool,
) -> Result<(), TestCaseError> {
    let mut copy = tree.clone();
    let newest_was_new = !model.contains(&path[0]);
    prop_assert_eq!(copy.merge_path(path, deleted, has_body), Ok(newest_was_new));
    prop_assert_eq!(copy.check(), Ok(()));
    // The newest revision is always stored; the contradicting older part of
    // the path is ignored, so no leaf appears that nobody wrote.
    prop_assert!(copy.contains(&path[0]));
    for leaf in copy.leaves() {
        prop_assert!(leaf.rev == path[0] || model.leaf_revs().contains(&leaf.rev));
    }
    for old in model.revs() {
        prop_assert!(copy.contains(&old));
    }
    for leaf in model.leaf_revs() {
        prop_assert!(copy.is_leaf(&leaf) || path.contains(&leaf));
    }
    let again = copy.clone();
    prop_assert_eq!(copy.merge_path(path, deleted, has_body), Ok(false));
    prop_assert_eq!(copy, again);
    Ok(())
}

fn run_ops(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut tree = RevTree::default();
    let mut model = Model::default();
    for op in ops {
        match op {
            Op::Edit {
                leaf,
                hash,
                deleted,
            } => {
                let leaves = model.leaf_revs();
                if leaves.is_empty() {
                    continue;
                }
                let parent = leaves[leaf.index(leaves.len())].clone();
                let child = rev(parent.pos + 1, *hash);
                let expected = model.add(Some(&parent), &child, *deleted, true);
                prop_assert_eq!(tree.add(Some(&parent), child, *deleted, true), expected);
            }
            Op::NewRoot { pos, hash, deleted } => {
                let root = rev(*pos, *hash);
                let expected = model.add(None, &root, *deleted, true);
                prop_assert_eq!(tree.add(None, root, *deleted, true), expected);
            }
            Op::AddAny {
                parent,
                child,
                deleted,
            } => {
                let parent = parent.map(|(p, h)| rev(p, h));
                let child = rev(child.0, child.1);
                let expected = model.add(parent.as_ref(), &child, *deleted, true);
                prop_assert_eq!(tree.add(parent.as_ref(), child, *deleted, true), expected);
            }
            Op::MergeExtend {
                anchor,
                keep,
                above,
                below,
                deleted,
                has_body,
            } => {
                let revs: Vec<Rev> = model.revs().into_iter().collect();
                if revs.is_empty() {
                    continue;
                }
                let anchor = &revs[anchor.index(revs.len())];
                let ancestry = model.ancestry(anchor);
                let from = ancestry.len().saturating_sub(*keep);
                // Oldest first: new ancestors, the kept ancestry, new revisions.
                let mut oldest_first: Vec<Rev> = Vec::new();
                let root_pos = ancestry[from].pos;
                if from == 0 {
                    let n = below.len().min(root_pos as usize - 1);
                    for (k, h) in below[..n].iter().enumerate() {
                        oldest_first.push(rev(root_pos - (n - k) as u64, *h));
                    }
                }
                oldest_first.extend_from_slice(&ancestry[from..]);
                for (k, h) in above.iter().enumerate() {
                    oldest_first.push(rev(anchor.pos + 1 + k as u64, *h));
                }
                let path: Vec<Rev> = oldest_first.into_iter().rev().collect();
                check_merge(&mut tree, &mut model, &path, *deleted, *has_body)?;
            }
            Op::MergeRandom {
                top,
                hashes,
                deleted,
                has_body,
            } => {
                let n = hashes.len().min(*top as usize);
                let path: Vec<Rev> = hashes[..n]
                    .iter()
                    .enumerate()
                    .map(|(i, h)| rev(top - i as u64, *h))
                    .collect();
                check_merge(&mut tree, &mut model, &path, *deleted, *has_body)?;
            }
            Op::Remerge { leaf, skip, len } => {
                let leaves = model.leaf_revs();
                if leaves.is_empty() {
                    continue;
                }
                let leaf = &leaves[leaf.index(leaves.len())];
                let full = tree_path(&tree, leaf).unwrap();
                let skip = skip.index(full.len());
                let len = 1 + len.index(full.len() - skip);
                let window = &full[skip..skip + len];
                let before = tree.clone();
                prop_assert_eq!(tree.merge_path(window, false, true), Ok(false));
                prop_assert_eq!(&tree, &before);
            }
            Op::Stem { limit } => {
                let old_leaves = model.leaf_revs();
                let old_paths = model.paths.clone();
                let expected = model.stem(*limit);
                let removed = tree.stem(*limit);
                prop_assert_eq!(node_revs(&removed), expected);
                prop_assert_eq!(removed.len(), node_revs(&removed).len());
                let keep = (*limit).max(1);
                for p in &old_paths {
                    let leaf = p.last().unwrap();
                    prop_assert!(tree.is_leaf(leaf), "stem removed leaf {}", leaf);
                    // The newest `limit` revisions of every leaf survive, in order.
                    let window: Vec<Rev> = p.iter().rev().take(keep).cloned().collect();
                    let now = tree_path(&tree, leaf).unwrap();
                    prop_assert_eq!(now.into_iter().take(keep).collect::<Vec<_>>(), window);
                }
                prop_assert_eq!(tree.leaves().len(), old_leaves.len());
                let before = tree.clone();
                prop_assert!(tree.stem(*limit).is_empty(), "stem is not idempotent");
                prop_assert_eq!(&tree, &before);
            }
            Op::Purge { leaf } => {
                let leaves = model.leaf_revs();
                if leaves.is_empty() {
                    continue;
                }
                let leaf = leaves[leaf.index(leaves.len())].clone();
                let expected = model.purge(&leaf);
                prop_assert!(expected.contains(&leaf));
                prop_assert_eq!(node_revs(&tree.purge_leaf(&leaf)), expected);
                prop_assert!(!tree.contains(&leaf));
            }
            Op::PurgeAny { pos, hash } => {
                let target = rev(*pos, *hash);
                let before = tree.clone();
                let expected = model.purge(&target);
                let removed = tree.purge_leaf(&target);
                prop_assert_eq!(node_revs(&removed), expected.clone());
                if expected.is_empty() {
                    prop_assert_eq!(&tree, &before);
                }
            }
        }
        assert_agrees(&tree, &model)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Consistent path sets (for order independence and convergence)
// ---------------------------------------------------------------------------

/// Generations in the universe of consistent histories.
const GENS: usize = 6;

/// A fixed forest of possible revisions: `HASHES.len()` revisions per
/// generation, each (beyond generation 1) with a fixed parent in the previous
/// generation and a fixed deleted flag, as if hashes derived from ancestry.
#[derive(Debug, Clone)]
struct Universe {
    parent: Vec<Vec<usize>>,
    deleted: Vec<Vec<bool>>,
}

impl Universe {
    /// The path ending at (generation index `g`, hash `h`) going back `len`
    /// revisions (at most to generation 1), newest first, with its deleted flag.
    fn path(&self, g: usize, h: usize, len: usize) -> (Vec<Rev>, bool) {
        let deleted = self.deleted[g][h];
        let mut out = vec![rev(g as u64 + 1, h)];
        let (mut g, mut h) = (g, h);
        while out.len() < len && g > 0 {
            h = self.parent[g][h];
            g -= 1;
            out.push(rev(g as u64 + 1, h));
        }
        (out, deleted)
    }
}

fn path_set() -> impl Strategy<Value = Vec<(Vec<Rev>, bool)>> {
    let universe = (
        vec(vec(hash_idx(), HASHES.len()), GENS),
        vec(vec(prop::bool::weighted(0.25), HASHES.len()), GENS),
    )
        .prop_map(|(parent, deleted)| Universe { parent, deleted });
    (universe, vec((0..GENS, hash_idx(), 1..=GENS), 1..10)).prop_map(|(u, picks)| {
        picks
            .into_iter()
            .map(|(g, h, len)| u.path(g, h, len))
            .collect()
    })
}

fn merge_all(paths: &[(Vec<Rev>, bool)]) -> Result<RevTree, TestCaseError> {
    let mut t = RevTree::default();
    for (p, deleted) in paths {
        prop_assert!(t.merge_path(p, *deleted, true).is_ok());
    }
    Ok(t)
}

/// Every leaf's path, newest first, with the leaf's deleted flag: what a
/// replicator would send.
fn leaf_paths(tree: &RevTree) -> Vec<(Vec<Rev>, bool)> {
    tree.leaves()
        .into_iter()
        .map(|l| (tree_path(tree, &l.rev).unwrap(), l.deleted))
        .collect()
}

fn assert_same_history(a: &RevTree, b: &RevTree) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.leaves(), b.leaves());
    prop_assert_eq!(a.winner(), b.winner());
    prop_assert_eq!(structure(a), structure(b));
    for l in a.leaves() {
        prop_assert_eq!(tree_path(a, &l.rev), tree_path(b, &l.rev));
    }
    Ok(())
}

/// An honest edit: `Rev::next` of a leaf with one of a few bodies.
#[derive(Debug, Clone)]
struct HonestEdit {
    leaf: Index,
    deleted: bool,
    body: usize,
}

const BODIES: [&[u8]; 3] = [b"{}", b"{\"a\":1}", b"{\"a\":2}"];

fn honest_edit() -> impl Strategy<Value = HonestEdit> {
    (any::<Index>(), prop::bool::weighted(0.2), 0..BODIES.len()).prop_map(
        |(leaf, deleted, body)| HonestEdit {
            leaf,
            deleted,
            body,
        },
    )
}

fn apply_honest(tree: &mut RevTree, edits: &[HonestEdit]) -> Result<(), TestCaseError> {
    for e in edits {
        let leaves = tree.leaves();
        let parent = leaves[e.leaf.index(leaves.len())].rev.clone();
        let child = Rev::next(Some(&parent), e.deleted, BODIES[e.body]);
        prop_assert_eq!(child.pos, parent.pos + 1);
        prop_assert_eq!(tree.add(Some(&parent), child, e.deleted, true), Ok(()));
    }
    Ok(())
}

/// Inputs of `Rev::next` from small domains, so equal inputs are common.
fn next_input() -> impl Strategy<Value = (Option<Rev>, bool, Vec<u8>)> {
    let parent = proptest::option::of((1u64..4, prop::sample::select(vec!["a", "ab", "b", "ba"])))
        .prop_map(|p| p.map(|(pos, h)| Rev::new(pos, h)));
    let body =
        prop::sample::select(vec![&b""[..], b"a", b"ab", b"b", b"{}"]).prop_map(<[u8]>::to_vec);
    (parent, any::<bool>(), body)
}

proptest! {
    // The main state machine is cheap: more cases. No regression files: a
    // failure prints its minimal input instead.
    #![proptest_config(ProptestConfig {
        cases: 1024,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random operation sequences agree with the path-set model at every step.
    #[test]
    fn operations_agree_with_path_set_model(ops in vec(op(), 1..48)) {
        run_ops(&ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Merging the same consistent paths in any order gives the same leaves,
    /// winner and structure, equal to the model's.
    #[test]
    fn merge_is_order_independent(
        (paths, shuffled) in path_set()
            .prop_flat_map(|p| (Just(p.clone()), Just(p).prop_shuffle())),
    ) {
        let a = merge_all(&paths)?;
        let b = merge_all(&shuffled)?;
        assert_agrees(&a, &Model::from_paths(&paths))?;
        assert_agrees(&b, &Model::from_paths(&shuffled))?;
        assert_same_history(&a, &b)?;
        // Everything is already present: a second round is a no-op.
        let mut again = a.clone();
        for (p, deleted) in &shuffled {
            prop_assert_eq!(again.merge_path(p, *deleted, true), Ok(false));
        }
        prop_assert_eq!(again, a);
    }

    /// Two replicas holding parts of one history converge once each merges
    /// the other's leaf paths, and a merge reports "new" exactly for the
    /// leaves the receiver lacked.
    #[test]
    fn replicas_converge(paths in path_set(), split in any::<Index>()) {
        let cut = split.index(paths.len() + 1);
        let (mut a, mut b) = (merge_all(&paths[..cut])?, merge_all(&paths[cut..])?);
        let (from_a, from_b) = (leaf_paths(&a), leaf_paths(&b));
        for (p, deleted) in &from_b {
            let new = !a.contains(&p[0]);
            prop_assert_eq!(a.merge_path(p, *deleted, true), Ok(new));
        }
        for (p, deleted) in &from_a {
            let new = !b.contains(&p[0]);
            prop_assert_eq!(b.merge_path(p, *deleted, true), Ok(new));
        }
        assert_same_history(&a, &b)?;
        let all = merge_all(&paths)?;
        prop_assert_eq!(structure(&a), structure(&all));
        prop_assert_eq!(a.leaves(), all.leaves());
    }

    /// Replicas editing with `Rev::next` from a common base produce
    /// consistent histories: identical edits get identical revisions, and
    /// exchanging leaf paths converges on the union.
    #[test]
    fn honest_replicas_converge(
        base in vec(honest_edit(), 0..6),
        edits_a in vec(honest_edit(), 0..6),
        edits_b in vec(honest_edit(), 0..6),
    ) {
        let root = Rev::next(None, false, b"{}");
        let mut common = RevTree::with_root(root, false, true);
        apply_honest(&mut common, &base)?;
        let (mut a, mut b) = (common.clone(), common.clone());
        apply_honest(&mut a, &edits_a)?;
        apply_honest(&mut b, &edits_b)?;
        // The same edits on the same base give the same tree.
        let mut a2 = common.clone();
        apply_honest(&mut a2, &edits_a)?;
        prop_assert_eq!(&a2, &a);
        let (from_a, from_b) = (leaf_paths(&a), leaf_paths(&b));
        let mut model = Model::default();
        for (p, d) in from_a.iter().chain(&from_b) {
            prop_assert!(model.consistent(p), "Rev::next produced contradicting ancestry");
            model.merge(p, *d, true).unwrap();
        }
        for (p, deleted) in &from_b {
            let new = !a.contains(&p[0]);
            prop_assert_eq!(a.merge_path(p, *deleted, true), Ok(new));
        }
        for (p, deleted) in &from_a {
            let new = !b.contains(&p[0]);
            prop_assert_eq!(b.merge_path(p, *deleted, true), Ok(new));
        }
        assert_same_history(&a, &b)?;
        prop_assert_eq!(node_revs(a.nodes()), model.revs());
        prop_assert_eq!(tree_leaves(&a).into_iter().map(|l| (l.0, l.1)).collect::<Vec<_>>(),
            model.leaves().into_iter().map(|l| (l.0, l.1)).collect::<Vec<_>>());
    }

    /// `Rev::next` is a pure function of its inputs, and distinct inputs give
    /// distinct revisions (the parent hash is length-prefixed, so no two
    /// (parent, body) splits of the same bytes collide).
    #[test]
    fn rev_next_is_deterministic_and_injective(a in next_input(), b in next_input()) {
        let ra = Rev::next(a.0.as_ref(), a.1, &a.2);
        prop_assert_eq!(&ra, &Rev::next(a.0.as_ref(), a.1, &a.2));
        prop_assert_eq!(ra.pos, a.0.as_ref().map_or(1, |p| p.pos + 1));
        let text = ra.hash.to_string();
        prop_assert_eq!(text.len(), 32);
        prop_assert!(text.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        prop_assert_eq!(ra.to_string().parse::<Rev>(), Ok(ra.clone()));
        let rb = Rev::next(b.0.as_ref(), b.1, &b.2);
        prop_assert_eq!(a == b, ra == rb, "{:?} -> {} / {:?} -> {}", a, ra, b, rb);
    }
}

// ---------------------------------------------------------------------------
// Deterministic checks of the model itself and of known discrepancies
// ---------------------------------------------------------------------------

/// The model reproduces answers worked out by hand from CouchDB semantics
/// (so the property tests compare against something meaningful).
#[test]
fn model_matches_hand_computed_examples() {
    let mut m = Model::default();
    m.add(None, &r("1-a"), false, true).unwrap();
    m.add(Some(&r("1-a")), &r("2-b"), false, true).unwrap();
    assert_eq!(
        m.merge(&[r("3-c"), r("2-x"), r("1-a")], false, true),
        Ok(true)
    );
    assert_eq!(m.winner(), Some((r("3-c"), false)));
    assert_eq!(m.leaf_revs().len(), 2);
    // A stemmed fragment, then the history that reattaches it.
    assert_eq!(m.merge(&[r("5-e"), r("4-d")], true, true), Ok(true));
    assert_eq!(m.leaf_revs().len(), 3);
    assert_eq!(m.merge(&[r("4-d"), r("3-c")], false, true), Ok(false));
    assert_eq!(m.leaf_revs(), vec![r("2-b"), r("5-e")]);
    assert_eq!(m.leaf_path(&r("5-e")).unwrap().len(), 5);
    // The deleted 5-e loses to the live 2-b.
    assert_eq!(m.winner(), Some((r("2-b"), false)));
    // Stem 4: 1-a survives for 2-b, so 5-e keeps all five revisions.
    assert_eq!(m.stem(4), BTreeSet::new());
    assert_eq!(m.leaf_path(&r("5-e")).unwrap().len(), 5);
    assert_eq!(m.stem(2), BTreeSet::from([r("2-x"), r("3-c")]));
    assert_eq!(m.leaf_path(&r("5-e")).unwrap(), &vec![r("4-d"), r("5-e")]);
    assert_eq!(m.leaf_path(&r("2-b")).unwrap(), &vec![r("1-a"), r("2-b")]);
    assert_eq!(m.purge(&r("4-d")), BTreeSet::new());
    assert_eq!(m.purge(&r("2-b")), BTreeSet::from([r("1-a"), r("2-b")]));
    assert_eq!(m.purge(&r("5-e")), BTreeSet::from([r("4-d"), r("5-e")]));
    assert!(m.paths.is_empty());
}

/// Byte order, not string-length order, breaks ties: "ab" > "a", "b" > "ab".
#[test]
fn winner_tie_break_uses_hash_bytes() {
    let mut t = RevTree::default();
    for h in ["a", "ab", "b"] {
        t.add(None, Rev::new(1, h), false, true).unwrap();
    }
    let order: Vec<String> = t
        .leaves()
        .into_iter()
        .map(|l| l.rev.hash.to_string())
        .collect();
    assert_eq!(order, ["b", "ab", "a"]);
    let mut m = Model::default();
    for h in ["ab", "a", "b"] {
        m.add(None, &Rev::new(1, h), false, true).unwrap();
    }
    assert_eq!(tree_leaves(&t), m.leaves());
}

/// Contract: every leaf of the merged tree was a leaf before or is the
/// newest revision of the merged path. A path that gives a present revision
/// another parent breaks it: the path's older part is created detached and
/// its newest created revision becomes a leaf no one wrote. Here the tree is
/// 1-a -> 2-b (2-b deleted); merging [2-b, 1-z] adds 1-z as a second root
/// with no child, i.e. a live, bodiless conflict that then wins over the
/// deleted 2-b. In CouchDB the path forms a separate branch ending in 2-b, so
/// 2-b stays the only leaf.
#[test]
fn merge_path_with_contradicting_parent_invents_no_leaf() {
    let mut t = RevTree::default();
    t.add(None, r("1-a"), false, true).unwrap();
    t.add(Some(&r("1-a")), r("2-b"), true, true).unwrap();
    assert_eq!(t.merge_path(&[r("2-b"), r("1-z")], false, true), Ok(false));
    let leaves: Vec<Rev> = t.leaves().into_iter().map(|l| l.rev).collect();
    assert_eq!(leaves, vec![r("2-b")]);
    assert_eq!(t.winner().map(|w| w.rev), Some(r("2-b")));
}

/// CouchDB's stemming rule: a revision survives if it is among the newest
/// `limit` of some leaf's path, so an ancestor kept for a short branch stays
/// attached for a longer sibling: tree 1-a -> 2-b, 1-a -> 2-x -> 3-y,
/// stem(2) keeps 1-a (for 2-b) and the path of 3-y stays [3-y, 2-x, 1-a].
#[test]
fn stem_keeps_an_ancestor_shared_with_a_shorter_branch() {
    let mut t = RevTree::default();
    t.add(None, r("1-a"), false, true).unwrap();
    t.add(Some(&r("1-a")), r("2-b"), false, true).unwrap();
    t.add(Some(&r("1-a")), r("2-x"), false, true).unwrap();
    t.add(Some(&r("2-x")), r("3-y"), false, true).unwrap();
    assert!(t.stem(2).is_empty());
    assert_eq!(
        tree_path(&t, &r("3-y")),
        Some(vec![r("3-y"), r("2-x"), r("1-a")])
    );
    assert_eq!(tree_path(&t, &r("2-b")), Some(vec![r("2-b"), r("1-a")]));
}

/// `merge_path` checks that generations are consecutive but not that they
/// stay >= 1, so it builds a generation-0 node that `check()` (run when a
/// stored tree is decoded) rejects as corrupt.
#[test]
fn merge_path_rejects_generation_zero() {
    let mut t = RevTree::default();
    assert_eq!(
        t.merge_path(&[r("1-a"), Rev::new(0, "z")], false, true),
        Err(TreeError::BadPath)
    );
    assert_eq!(t.check(), Ok(()));
}

/// `add` computes `parent.pos + 1` unchecked: for a parent at generation
/// u64::MAX it panics with overflow checks on, and without them (release)
/// accepts a generation-0 child, leaving a tree `check()` rejects.
#[test]
fn add_rejects_child_of_max_generation() {
    let top = Rev::new(u64::MAX, "a");
    let mut t = RevTree::default();
    assert_eq!(
        t.merge_path(std::slice::from_ref(&top), false, true),
        Ok(true)
    );
    assert_eq!(
        t.add(Some(&top), Rev::new(0, "b"), false, true),
        Err(TreeError::BadPath)
    );
    assert_eq!(t.check(), Ok(()));
}
