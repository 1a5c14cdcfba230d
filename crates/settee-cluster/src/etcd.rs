//! The connection to etcd and the cluster's key layout in it. This module
//! (with [`crate::membership`], [`crate::shard_map`] and
//! [`crate::settings`], which use it) is the only code that names the
//! etcd client.
//!
//! Key layout, under a prefix (`/settee/` by default, so several clusters
//! can share one etcd):
//!
//! | key                  | value                         | written                             |
//! |----------------------|-------------------------------|-------------------------------------|
//! | `PREFIX nodes/NAME`  | [`crate::membership::NodeInfo`] JSON | by the node, attached to its lease |
//! | `PREFIX known/NAME`  | [`crate::membership::NodeInfo`] JSON | by the node's first join, no lease (CouchDB's `cluster_nodes`) |
//! | `PREFIX dbs/DB`      | [`crate::layout::ShardMap`] JSON (CouchDB's `_dbs` shape) | by a transaction on its mod_revision |
//! | `PREFIX settings`    | [`crate::settings::ClusterSettings`] JSON | by a transaction on its mod_revision |
//!
//! Invariants: every call to etcd is bounded in time ([`EtcdConfig::request_timeout`],
//! enforced here as well as by the client), and answers a typed
//! [`ClusterError`]; a client exists only once etcd has answered a request
//! ([`Etcd::connect`] probes it), so an unreachable etcd is a clear error
//! at start, never a half-made connection.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use crate::error::{ClusterError, Result};

/// Where etcd is and how long to wait for it.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs (`http://127.0.0.1:2379`), at least one.
    pub endpoints: Vec<String>,
    /// The key prefix of this cluster; starts and ends with `/`.
    pub prefix: String,
    /// How long to wait for a connection to an endpoint.
    pub connect_timeout: Duration,
    /// How long to wait for any one request's answer.
    pub request_timeout: Duration,
}

impl EtcdConfig {
    /// A configuration with the default prefix (`/settee/`) and timeouts
    /// (2 s to connect, 5 s a request).
    pub fn new(endpoints: Vec<String>) -> EtcdConfig {
        EtcdConfig {
            endpoints,
            prefix: "/settee/".to_string(),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
        }
    }

    /// The same with another key prefix.
    pub fn with_prefix(mut self, prefix: &str) -> EtcdConfig {
        self.prefix = prefix.to_string();
        self
    }

    fn check(&self) -> Result<()> {
        let bad = |m: String| Err(ClusterError::Config(m));
        if self.endpoints.is_empty() {
            return bad("no etcd endpoint given".into());
        }
        for e in &self.endpoints {
            if !(e.starts_with("http://") || e.starts_with("https://")) || e.len() > 2048 {
                return bad(format!(
                    "etcd endpoint {e:?} is not an http:// or https:// URL"
                ));
            }
        }
        if !self.prefix.starts_with('/') || !self.prefix.ends_with('/') || self.prefix.len() > 256 {
            return bad(format!(
                "key prefix {:?} must start and end with '/'",
                self.prefix
            ));
        }
        if self.connect_timeout.is_zero() || self.request_timeout.is_zero() {
            return bad("etcd timeouts must be positive".into());
        }
        Ok(())
    }
}

/// A connected etcd client with the cluster's key layout. Cheap to clone.
#[derive(Clone)]
pub struct Etcd {
    client: Client,
    config: EtcdConfig,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("config", &self.config)
            .finish()
    }
}

impl Etcd {
    /// Connects and checks that etcd answers (a status request to each
    /// endpoint until one answers): [`ClusterError::Unreachable`] if none
    /// does within the timeouts.
    pub async fn connect(config: EtcdConfig) -> Result<Etcd> {
        config.check()?;
        let endpoints = config.endpoints.join(",");
        let options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(config.request_timeout)
            .with_keep_alive(Duration::from_secs(2), config.request_timeout);
        let limit = config.connect_timeout + config.request_timeout;
        let client =
            match tokio::time::timeout(limit, Client::connect(&config.endpoints, Some(options)))
                .await
            {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    return Err(ClusterError::Unreachable {
                        endpoints,
                        reason: e.to_string(),
                    })
                }
                Err(_) => {
                    return Err(ClusterError::Unreachable {
                        endpoints,
                        reason: format!("no connection within {limit:?}"),
                    })
                }
            };
        let etcd = Etcd { client, config };
        let mut c = etcd.client.clone();
        match tokio::time::timeout(limit, c.status()).await {
            Ok(Ok(_)) => Ok(etcd),
            Ok(Err(e)) => Err(ClusterError::Unreachable {
                endpoints,
                reason: e.to_string(),
            }),
            Err(_) => Err(ClusterError::Unreachable {
                endpoints,
                reason: format!("no answer within {limit:?}"),
            }),
        }
    }

    pub fn config(&self) -> &EtcdConfig {
        &self.config
    }

    /// A client handle for one call (clones share the connection).
    pub(crate) fn client(&self) -> Client {
        self.client.clone()
    }

    /// Runs one etcd call with the request timeout, its failure typed.
    pub(crate) async fn call<T, F>(&self, op: &'static str, fut: F) -> Result<T>
    where
        F: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let after = self.config.request_timeout;
        match tokio::time::timeout(after, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ClusterError::Etcd {
                op,
                reason: e.to_string(),
            }),
            Err(_) => Err(ClusterError::Timeout { op, after }),
        }
    }

    /// `PREFIX nodes/`
    pub fn nodes_prefix(&self) -> String {
        format!("{}nodes/", self.config.prefix)
    }

    /// `PREFIX nodes/NAME`
    pub fn node_key(&self, name: &str) -> String {
        format!("{}nodes/{name}", self.config.prefix)
    }

    /// `PREFIX known/`
    pub fn known_prefix(&self) -> String {
        format!("{}known/", self.config.prefix)
    }

    /// `PREFIX known/NAME`
    pub fn known_key(&self, name: &str) -> String {
        format!("{}known/{name}", self.config.prefix)
    }

    /// `PREFIX dbs/`
    pub fn dbs_prefix(&self) -> String {
        format!("{}dbs/", self.config.prefix)
    }

    /// `PREFIX dbs/DB`
    pub fn db_key(&self, db: &str) -> String {
        format!("{}dbs/{db}", self.config.prefix)
    }

    /// `PREFIX settings`
    pub fn settings_key(&self) -> String {
        format!("{}settings", self.config.prefix)
    }

    /// `PREFIX NAME`: one of the cluster's own keys (the decider's
    /// election, the rebalance status and control).
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.config.prefix)
    }
}

/// A value read from etcd with the revision it was last written at (the
/// key's mod_revision; 0 for a value that is not stored). A
/// compare-and-swap names this revision.
#[derive(Clone, Debug, PartialEq)]
pub struct Versioned<T> {
    pub value: T,
    pub revision: i64,
}

/// Parses a stored JSON value, or says which key holds garbage.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T> {
    serde_json::from_slice(value).map_err(|e| ClusterError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: e.to_string(),
    })
}

/// The revision of the store a transaction's answer was made at.
pub(crate) fn header_revision(h: Option<&etcd_client::ResponseHeader>) -> i64 {
    h.map(|h| h.revision()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_checked() {
        let ok = EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]);
        ok.check().unwrap();
        assert!(EtcdConfig::new(vec![]).check().is_err());
        assert!(EtcdConfig::new(vec!["127.0.0.1:2379".into()])
            .check()
            .is_err());
        assert!(ok.clone().with_prefix("settee").check().is_err());
        assert!(ok.clone().with_prefix("/a/b/").check().is_ok());
    }
}
