//! Settee's cluster: databases split into `q` shards by hash range, `n`
//! copies of each on the cluster's nodes, and the state the nodes agree on
//! kept in etcd. See ARCHITECTURE.md and docs/adr/0011-cluster-coordination.md.
//!
//! - [`layout`]: CouchDB's shard layout, pure (ranges, hash, shard names,
//!   placement, the shard map document).
//! - [`error`]: the crate's error type.
//!
//! Invariant: nothing outside this crate knows etcd; its API speaks of
//! members, shard maps and settings, never of etcd's types.

pub mod error;
pub mod layout;

pub use error::{ClusterError, Result};
pub use layout::{Range, ShardMap};
