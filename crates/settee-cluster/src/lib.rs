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
//! - [`coordinator`]: a node joined to a cluster: cluster facts, database
//!   creation and deletion, the node's shard copies kept in line with the maps.
//! - [`topology`]: the interface the HTTP layer asks (single node or member).
//! - [`view`]: the maps and live members a coordinator routes by, in memory.
//! - [`fabric`]: requests for clustered databases answered from the shard
//!   copies on the members (quorum writes and reads, merged listings).
//! - [`sync`]: internal replication between copies of a shard.
//! - [`decider`]: the elected node that plans and drives shard moves.
//! - [`plan`]: the next moves of a map (heal, then balance), pure.
//! - [`mover`]: a move filled and completed; a dropped copy drained.
//! - [`move_progress`]: the moves this node fills, with their figures.
//! - [`leaving`]: nodes being decommissioned.
//! - [`seq`]: opaque sequences of clustered databases.
//! - [`secret`]: the secret nodes authenticate each other with.
//! - [`error`]: the crate's error type.
//!
//! Invariant: nothing outside this crate knows etcd; its API speaks of
//! members, shard maps and settings, never of etcd's types.

pub mod coordinator;
pub mod decider;
pub mod error;
pub mod etcd;
pub mod fabric;
pub mod layout;
pub mod leaving;
pub mod membership;
pub mod move_progress;
pub mod mover;
pub mod plan;
pub mod secret;
pub mod seq;
pub mod settings;
pub mod shard_map;
pub mod sync;
pub mod topology;
pub mod view;

pub use coordinator::{Coordinator, CreateDb, NodeConfig};
pub use error::{ClusterError, Result};
pub use etcd::{Etcd, EtcdConfig, Versioned};
pub use fabric::{FabricRequest, FabricResponse, User};
pub use layout::{Range, ShardMap};
pub use membership::{MembershipChange, MembershipWatch, NodeInfo, Registration};
pub use settings::ClusterSettings;
pub use shard_map::{ShardMapChange, ShardMapWatch, ShardMaps};
pub use topology::{Membership, Topology};
