//! The crate's one error type. Every failure of the layout (bad `q`/`n`, a
//! malformed range or shard map) and of the coordination (etcd unreachable,
//! a call that timed out, a compare-and-swap that lost, a name already
//! registered) is a variant here; nothing in the crate panics on bad input.
//!
//! Invariant: no variant carries an etcd client type. Callers outside the
//! crate never learn which coordination engine is underneath; etcd's own
//! failures arrive as text in [`ClusterError::Etcd`].

use std::time::Duration;

/// The crate's result type.
pub type Result<T> = std::result::Result<T, ClusterError>;

/// Everything that can go wrong in the cluster's layout and coordination.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClusterError {
    #[error("q must be between 1 and {max}, got {q}")]
    InvalidQ { q: u64, max: u32 },
    #[error("n must be between 1 and the number of nodes ({nodes}, at most {max}), got {n}")]
    InvalidN { n: u64, nodes: usize, max: u32 },
    #[error("no nodes to place shard copies on")]
    NoNodes,
    #[error(
        "invalid shard range {0:?}: expected two 8-digit hex numbers BEGIN-END with BEGIN <= END"
    )]
    InvalidRange(String),
    #[error("invalid shard map of {db:?}: {reason}")]
    InvalidShardMap { db: String, reason: String },
    #[error("invalid node name {name:?}: {reason}")]
    InvalidNodeName { name: String, reason: String },
    #[error("node name {0:?} is already registered by a live member of the cluster")]
    NodeNameTaken(String),
    #[error("database {0:?} already has a shard map")]
    ShardMapExists(String),
    #[error("the shard map of {db:?} changed since revision {expected} was read")]
    ShardMapConflict { db: String, expected: i64 },
    #[error("database {0:?} has no shard map")]
    NoShardMap(String),
    #[error("the cluster settings changed since revision {expected} was read")]
    SettingsConflict { expected: i64 },
    #[error("invalid cluster settings: {0}")]
    InvalidSettings(String),
    #[error("invalid cluster configuration: {0}")]
    Config(String),
    #[error("etcd at {endpoints} is unreachable: {reason}")]
    Unreachable { endpoints: String, reason: String },
    #[error("etcd {op} failed: {reason}")]
    Etcd { op: &'static str, reason: String },
    #[error("etcd {op} did not answer within {after:?}")]
    Timeout { op: &'static str, after: Duration },
    #[error("the value stored at {key:?} is not valid: {reason}")]
    Corrupt { key: String, reason: String },
    #[error("the lease of node {0:?} is no longer known to be alive")]
    LeaseLost(String),
    #[error("the watch of {0:?} was cancelled by etcd; list and watch again")]
    WatchEnded(String),
    #[error("{0}")]
    NodeNotAdded(String),
    #[error("the node's engine failed: {0}")]
    Local(String),
}
