//! Cluster-wide settings kept in etcd (`PREFIX settings`): the `q` and `n`
//! a database gets when its creation names none (CouchDB's `[cluster] q`
//! and `n`). Absent, they are CouchDB 3's defaults, `q=2`, `n=3`.
//!
//! Invariants: only valid settings are written (`1 <= q <= MAX_Q`,
//! `1 <= n <= MAX_N`), by a transaction conditioned on the revision read
//! (0: not stored yet), so concurrent changes never overwrite each other.

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use crate::error::{ClusterError, Result};
use crate::etcd::{decode, header_revision, Etcd, Versioned};
use crate::layout::{MAX_N, MAX_Q};

/// The cluster's defaults for new databases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClusterSettings {
    /// Shards per database.
    pub q: u32,
    /// Copies of each shard.
    pub n: u32,
}

impl Default for ClusterSettings {
    fn default() -> ClusterSettings {
        ClusterSettings { q: 2, n: 3 }
    }
}

impl ClusterSettings {
    pub fn validate(&self) -> Result<()> {
        if self.q == 0 || self.q > MAX_Q {
            return Err(ClusterError::InvalidSettings(format!(
                "q must be between 1 and {MAX_Q}, got {}",
                self.q
            )));
        }
        if self.n == 0 || self.n > MAX_N {
            return Err(ClusterError::InvalidSettings(format!(
                "n must be between 1 and {MAX_N}, got {}",
                self.n
            )));
        }
        Ok(())
    }
}

/// The settings and their revision (0 and the defaults when none are stored).
pub async fn get(etcd: &Etcd) -> Result<Versioned<ClusterSettings>> {
    let key = etcd.settings_key();
    let resp = etcd
        .call("get settings", etcd.client().get(key, None))
        .await?;
    match resp.kvs().first() {
        None => Ok(Versioned {
            value: ClusterSettings::default(),
            revision: 0,
        }),
        Some(kv) => {
            let value: ClusterSettings = decode(kv.key(), kv.value())?;
            value.validate().map_err(|e| ClusterError::Corrupt {
                key: etcd.settings_key(),
                reason: e.to_string(),
            })?;
            Ok(Versioned {
                value,
                revision: kv.mod_revision(),
            })
        }
    }
}

/// Stores settings if they are still at `expected` (0: none stored).
/// Returns the new revision.
pub async fn put(etcd: &Etcd, settings: &ClusterSettings, expected: i64) -> Result<i64> {
    settings.validate()?;
    let key = etcd.settings_key();
    let value = serde_json::to_vec(settings).map_err(|e| ClusterError::Config(e.to_string()))?;
    // A key that does not exist compares as mod_revision 0.
    let txn = Txn::new()
        .when([Compare::mod_revision(
            key.clone(),
            CompareOp::Equal,
            expected,
        )])
        .and_then([TxnOp::put(key, value, None)]);
    let resp = etcd.call("put settings", etcd.client().txn(txn)).await?;
    if !resp.succeeded() {
        return Err(ClusterError::SettingsConflict { expected });
    }
    Ok(header_revision(resp.header()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_limits() {
        let d = ClusterSettings::default();
        assert_eq!((d.q, d.n), (2, 3));
        d.validate().unwrap();
        assert!(ClusterSettings { q: 0, n: 3 }.validate().is_err());
        assert!(ClusterSettings { q: 2, n: 0 }.validate().is_err());
        assert!(ClusterSettings { q: MAX_Q + 1, n: 1 }.validate().is_err());
        let s: ClusterSettings = serde_json::from_str(r#"{"q":8}"#).unwrap();
        assert_eq!(s, ClusterSettings { q: 8, n: 3 });
    }
}
