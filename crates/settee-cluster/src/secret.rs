//! The cluster's shared secret: a random token kept in etcd (`PREFIX
//! secret`), created by the first node that joins and read by every other.
//! Nodes send it on their requests to each other; a request carrying it is
//! the cluster itself (it may name shard copies and the user it acts for).
//!
//! Invariants: the secret is created once (compare-and-swap on absence:
//! two first nodes agree on one), never logged, and compared in constant
//! time; whoever can read the cluster's etcd keys is trusted as a node.

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use rand::RngCore;

use crate::error::{ClusterError, Result};
use crate::etcd::Etcd;

/// The cluster's secret: read, or created when the cluster has none.
pub async fn get_or_create(etcd: &Etcd) -> Result<String> {
    let key = format!("{}secret", etcd.config().prefix);
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let fresh: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key.clone(), fresh.clone(), None)])
        .or_else([TxnOp::get(key.clone(), None)]);
    let resp = etcd
        .call("create cluster secret", etcd.client().txn(txn))
        .await?;
    if resp.succeeded() {
        return Ok(fresh);
    }
    for op in resp.op_responses() {
        if let etcd_client::TxnOpResponse::Get(g) = op {
            if let Some(kv) = g.kvs().first() {
                let s = String::from_utf8_lossy(kv.value()).into_owned();
                if s.len() >= 32 && s.bytes().all(|c| c.is_ascii_hexdigit()) {
                    return Ok(s);
                }
                return Err(ClusterError::Corrupt {
                    key,
                    reason: "the cluster secret is not 32 or more hex digits".into(),
                });
            }
        }
    }
    Err(ClusterError::Etcd {
        op: "read cluster secret",
        reason: "the transaction answered no value".into(),
    })
}

/// Whether `given` is the secret (constant time in the secret's length).
pub fn matches(secret: &str, given: &str) -> bool {
    let (a, b) = (secret.as_bytes(), given.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_only_the_secret() {
        assert!(super::matches("abcd", "abcd"));
        assert!(!super::matches("abcd", "abce"));
        assert!(!super::matches("abcd", "abc"));
        assert!(!super::matches("abcd", ""));
    }
}
