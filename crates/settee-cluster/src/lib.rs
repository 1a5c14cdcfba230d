//! Settee's cluster: databases split into `q` shards by hash range, `n`
//! copies of each on the cluster's nodes, and the state the nodes agree on
//! kept in etcd. See ARCHITECTURE.md and docs/adr/0011-cluster-coordination.md.
//!
//! - [`layout`]: CouchDB's shard layout, pure (ranges, hash, shard names,
//!   placement, the shard map document).
//! - [`etcd`]: the connection to etcd and the key layout in it.
//! - [`membership`]: live members by lease, joining, leaving, watching.
//! - [`shard_map`]: databases' shard maps, changed only by compare-and-swap.
//! - [`settings`]: the cluster's `q` and `n` defaults.
//! - [`error`]: the crate's error type.
//!
//! Invariant: nothing outside this crate knows etcd; its API speaks of
//! members, shard maps and settings, never of etcd's types.

pub mod error;
pub mod etcd;
pub mod layout;
pub mod membership;
pub mod settings;
pub mod shard_map;

pub use error::{ClusterError, Result};
pub use etcd::{Etcd, EtcdConfig, Versioned};
pub use layout::{Range, ShardMap};
pub use membership::{MembershipChange, MembershipWatch, NodeInfo, Registration};
pub use settings::ClusterSettings;
pub use shard_map::ShardMaps;
