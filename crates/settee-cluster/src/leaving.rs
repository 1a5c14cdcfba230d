//! Nodes being decommissioned (issue 39): `DELETE /_node/_local/_nodes/
//! {name}` marks a node as leaving (`PREFIX leaving`, a JSON list of
//! names); the decider then moves its copies to the other nodes, and new
//! databases place none on it. `PUT` of the node takes the mark off.
//!
//! Invariants: the mark only changes where copies go, never a map by
//! itself (the decider's guarded moves do that, each filled before the
//! leaving copy is dropped); changes are compare-and-swap on the key's
//! revision, so two operators' marks are never lost.

use std::collections::BTreeSet;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use crate::error::{ClusterError, Result};
use crate::etcd::Etcd;

const KEY: &str = "leaving";
/// Attempts at the compare-and-swap after losing a race.
const ATTEMPTS: usize = 5;

/// The nodes marked as leaving, with the key's modification revision
/// (0: never written).
async fn read(etcd: &Etcd) -> Result<(BTreeSet<String>, i64)> {
    let key = etcd.key(KEY);
    let resp = etcd
        .call("get leaving nodes", etcd.client().get(key.clone(), None))
        .await?;
    match resp.kvs().first() {
        None => Ok((BTreeSet::new(), 0)),
        Some(kv) => Ok((
            crate::etcd::decode(key.as_bytes(), kv.value())?,
            kv.mod_revision(),
        )),
    }
}

/// The nodes marked as leaving.
pub async fn get(etcd: &Etcd) -> Result<BTreeSet<String>> {
    Ok(read(etcd).await?.0)
}

/// Marks `node` as leaving (`true`) or takes the mark off; answers
/// whether the set changed.
pub async fn set(etcd: &Etcd, node: &str, leaving: bool) -> Result<bool> {
    let key = etcd.key(KEY);
    for _ in 0..ATTEMPTS {
        let (mut set, rev) = read(etcd).await?;
        let changed = if leaving {
            set.insert(node.to_string())
        } else {
            set.remove(node)
        };
        if !changed {
            return Ok(false);
        }
        let value = serde_json::to_vec(&set).map_err(|e| ClusterError::Config(e.to_string()))?;
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                rev,
            )])
            .and_then(vec![TxnOp::put(key.clone(), value, None)]);
        let resp = etcd
            .call("put leaving nodes", etcd.client().txn(txn))
            .await?;
        if resp.succeeded() {
            return Ok(true);
        }
    }
    Err(ClusterError::Local(
        "the leaving nodes kept changing; try again".into(),
    ))
}
