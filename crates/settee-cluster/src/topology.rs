//! The interface between the HTTP layer and the cluster: what the routes
//! ask (the node's name, the members, a database's shard map and its
//! creation and deletion) of either a single node or a member of a cluster.
//!
//! Invariants: on a single node ([`Topology::Single`]) nothing here does
//! any work (no etcd, no task, no lock): the answers are the node's own
//! name, and a route that finds no coordinator does what it always did;
//! nothing of etcd appears in this interface.

use std::sync::Arc;

use crate::coordinator::Coordinator;
use crate::error::Result;

/// The members as CouchDB's `/_membership` lists them: `all_nodes`, the
/// nodes that are up (live members); `cluster_nodes`, every node that is
/// part of the cluster, up or not. Both sorted by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    pub all_nodes: Vec<String>,
    pub cluster_nodes: Vec<String>,
}

/// What this server is: a single node, or a member of a cluster.
#[derive(Debug)]
pub enum Topology {
    /// A single node named so: the local engine is the whole database.
    Single(&'static str),
    /// A member of a cluster.
    Member(Arc<Coordinator>),
}

impl Topology {
    /// The node's name.
    pub fn node_name(&self) -> &str {
        match self {
            Topology::Single(name) => name,
            Topology::Member(c) => c.node_name(),
        }
    }

    /// The coordinator when this node is a member of a cluster.
    pub fn coordinator(&self) -> Option<&Arc<Coordinator>> {
        match self {
            Topology::Single(_) => None,
            Topology::Member(c) => Some(c),
        }
    }

    /// The members: on a single node, itself alone.
    pub async fn membership(&self) -> Result<Membership> {
        match self {
            Topology::Single(name) => Ok(Membership {
                all_nodes: vec![(*name).to_string()],
                cluster_nodes: vec![(*name).to_string()],
            }),
            Topology::Member(c) => c.membership().await,
        }
    }
}
