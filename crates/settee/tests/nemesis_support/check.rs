//! The nemesis's checker, run once the faults are healed.
//!
//! - [`settled`]: the cluster has healed: the decider says `balanced` with
//!   no move in flight and nothing under-replicated, every shard has `n`
//!   copies on distinct members of the cluster, the members' counts differ
//!   by at most one, and every copy of a shard holds the same leaves.
//! - [`verify`]: against the clients' history: every acknowledged revision
//!   is in its document's revision tree (a quorum-acknowledged one missing
//!   is a lost write); a document whose last edit the client knows was a
//!   deletion is deleted (no deleted document returns); one whose last
//!   edit was an update answers that revision.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::load::History;
use super::members::Members;
use crate::cluster_support::try_leaves;

/// What [`verify`] found.
#[derive(Debug, Default)]
pub struct Verdict {
    pub docs: usize,
    pub revisions_checked: usize,
    pub lost_quorum: Vec<String>,
    pub lost_other: Vec<String>,
    pub resurrected: Vec<String>,
    pub wrong_winner: Vec<String>,
    pub uncertain: usize,
}

impl Verdict {
    pub fn clean(&self) -> bool {
        self.lost_quorum.is_empty()
            && self.lost_other.is_empty()
            && self.resurrected.is_empty()
            && self.wrong_winner.is_empty()
    }
}

/// `Err(why)` until the cluster has healed (see the module doc); then the
/// number of shards whose copies were compared.
pub fn settled(m: &Members, db: &str, n: usize, secret: &str) -> Result<usize, String> {
    let members = m.members();
    let via = m.server(*members.first().ok_or("no member")?);
    let st = via.admin("GET", "/_cluster/rebalance", None);
    if st.status != 200 {
        return Err(format!("rebalance status {}", st.status));
    }
    let st = st.json();
    if st["state"] != json!("balanced")
        || st["in_flight"].as_array().is_some_and(|a| !a.is_empty())
        || st["under_replicated"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    {
        return Err(format!("decider: {st}"));
    }
    let shards = via.admin("GET", &format!("/{db}/_shards"), None);
    if shards.status != 200 {
        return Err(format!("_shards {}", shards.status));
    }
    let shards = shards.json();
    let names: BTreeSet<String> = members.iter().map(|i| m.slots[*i].name.clone()).collect();
    let mut counts: BTreeMap<String, usize> = names.iter().map(|n| (n.clone(), 0)).collect();
    let map = shards["shards"].as_object().ok_or("no shards")?;
    let sfx = crate::cluster_support::suffix(via, db);
    for (range, holders) in map {
        let holders: BTreeSet<String> = holders
            .as_array()
            .ok_or("holders")?
            .iter()
            .filter_map(|h| h.as_str().map(str::to_string))
            .collect();
        if holders.len() != n || !holders.is_subset(&names) {
            return Err(format!("range {range} on {holders:?}"));
        }
        let shard = format!("shards/{range}/{db}{sfx}");
        let mut seen = None;
        for h in &holders {
            *counts.entry(h.clone()).or_default() += 1;
            let slot = m.slot_of(h).ok_or("a holder with no slot")?;
            let leaves = try_leaves(m.server(slot), &shard, secret)
                .ok_or_else(|| format!("no copy {shard} on {h}"))?;
            match &seen {
                None => seen = Some(leaves),
                Some(first) if *first != leaves => {
                    return Err(format!("copies of {shard} differ ({h})"))
                }
                Some(_) => {}
            }
        }
    }
    let (lo, hi) = (counts.values().min(), counts.values().max());
    if hi.zip(lo).is_none_or(|(h, l)| h - l > 1) {
        return Err(format!("unbalanced: {counts:?}"));
    }
    Ok(map.len())
}

/// Every revision in the trees of `id`'s leaves, and the leaves (rev ->
/// deleted), read through member `via`.
fn tree_of(
    via: &crate::common::Server,
    db: &str,
    id: &str,
) -> (BTreeSet<String>, Vec<(String, bool)>) {
    let r = via.raw(
        "GET",
        &format!("/{db}/{id}?open_revs=all&revs=true"),
        true,
        &[("Accept", "application/json")],
        None,
    );
    assert_eq!(r.status, 200, "{id}: {r:?}");
    let mut all = BTreeSet::new();
    let mut leaves = Vec::new();
    for row in r.json().as_array().expect("open_revs rows") {
        let Some(doc) = row.get("ok") else { continue };
        let start = doc["_revisions"]["start"].as_u64().expect("start");
        for (k, h) in doc["_revisions"]["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .enumerate()
        {
            all.insert(format!("{}-{}", start - k as u64, h.as_str().expect("id")));
        }
        leaves.push((
            doc["_rev"].as_str().expect("_rev").to_string(),
            doc["_deleted"] == json!(true),
        ));
    }
    (all, leaves)
}

/// Checks the history against the documents, read through `via`.
pub fn verify(via: &crate::common::Server, db: &str, h: &History) -> Verdict {
    let mut v = Verdict::default();
    for (id, log) in &h.docs {
        v.docs += 1;
        if log.acks.is_empty() && log.known.is_none() {
            v.uncertain += usize::from(log.uncertain);
            continue;
        }
        let (tree, leaves) = tree_of(via, db, id);
        for a in &log.acks {
            v.revisions_checked += 1;
            if !tree.contains(&a.rev) {
                let what = format!(
                    "{id} {}{}",
                    a.rev,
                    if a.deleted { " (deletion)" } else { "" }
                );
                if a.quorum {
                    v.lost_quorum.push(what);
                } else {
                    v.lost_other.push(what);
                }
            }
        }
        if log.uncertain {
            v.uncertain += 1;
            continue;
        }
        let Some(known) = &log.known else { continue };
        let r = via.admin("GET", &format!("/{db}/{id}"), None);
        match (log.deleted, r.status) {
            (true, 404) => {}
            (true, _) => v
                .resurrected
                .push(format!("{id}: {} {}", r.status, r.body.trim())),
            (false, 200) if r.json()["_rev"] == json!(known) => {}
            (false, _) => v.wrong_winner.push(format!(
                "{id}: known {known}, answered {} {} (leaves {leaves:?})",
                r.status,
                r.body.trim()
            )),
        }
    }
    v
}

/// The `p`-quantile of `xs` (sorted in place), `None` when empty.
pub fn quantile(xs: &mut [f64], p: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let i = ((xs.len() - 1) as f64 * p).round() as usize;
    Some(xs[i])
}
