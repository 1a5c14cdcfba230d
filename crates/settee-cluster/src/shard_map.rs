//! Databases' shard maps in etcd: one key per database (`PREFIX dbs/DB`),
//! its value the map as CouchDB's `_dbs` document ([`ShardMap`]).
//!
//! Every write is one etcd transaction conditioned on the revision the
//! writer read (compare-and-swap on the key's mod_revision): a creation
//! succeeds only if the key is absent, an update or deletion only if the
//! key was not written since. Of two coordinators that read the same map
//! and write, one wins and the other gets
//! [`ClusterError::ShardMapConflict`] and must read again; nothing is ever
//! overwritten unseen.
//!
//! Invariants: only maps that pass [`ShardMap::validate`] are written, and
//! a stored value that does not parse or validate, or names another
//! database than its key, reads as [`ClusterError::Corrupt`], never as a
//! map; listings are read in pages, each bounded in size and time.
//!
//! [`ShardMapWatch`] follows every map: the maps as of a revision (each
//! page read at that revision), then every change after it, so no change
//! falls between the listing and the watch.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, Txn, TxnOp, TxnOpResponse, WatchOptions, WatchStream,
};

use crate::error::{ClusterError, Result};
use crate::etcd::{decode, header_revision, Etcd, Versioned};
use crate::layout::ShardMap;

/// Keys per page of [`ShardMaps::list`].
const LIST_PAGE: i64 = 256;

/// The shard maps of a cluster.
#[derive(Clone, Debug)]
pub struct ShardMaps {
    etcd: Etcd,
}

impl ShardMaps {
    pub fn new(etcd: Etcd) -> ShardMaps {
        ShardMaps { etcd }
    }

    fn parse(&self, key: &[u8], value: &[u8], revision: i64) -> Result<Versioned<ShardMap>> {
        let map: ShardMap = decode(key, value)?;
        let corrupt = |reason: String| ClusterError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            reason,
        };
        if self.etcd.db_key(&map.db).as_bytes() != key {
            return Err(corrupt(format!("the map is of database {:?}", map.db)));
        }
        map.validate().map_err(|e| corrupt(e.to_string()))?;
        Ok(Versioned {
            value: map,
            revision,
        })
    }

    /// A database's map and the revision it was written at.
    pub async fn get(&self, db: &str) -> Result<Option<Versioned<ShardMap>>> {
        let key = self.etcd.db_key(db);
        let resp = self
            .etcd
            .call("get shard map", self.etcd.client().get(key, None))
            .await?;
        match resp.kvs().first() {
            None => Ok(None),
            Some(kv) => self
                .parse(kv.key(), kv.value(), kv.mod_revision())
                .map(Some),
        }
    }

    /// Every database's map, in name order.
    pub async fn list(&self) -> Result<Vec<Versioned<ShardMap>>> {
        let prefix = self.etcd.dbs_prefix();
        let mut end = prefix.clone().into_bytes();
        // The prefix ends with '/', so its range end is the same with '0'.
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let mut from = prefix.into_bytes();
        let mut out = Vec::new();
        loop {
            let options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(LIST_PAGE);
            let resp = self
                .etcd
                .call(
                    "list shard maps",
                    self.etcd.client().get(from.clone(), Some(options)),
                )
                .await?;
            for kv in resp.kvs() {
                out.push(self.parse(kv.key(), kv.value(), kv.mod_revision())?);
            }
            match resp.kvs().last() {
                // Each page starts past the last key of the one before.
                Some(kv) if resp.more() => {
                    from = kv.key().to_vec();
                    from.push(0);
                }
                _ => return Ok(out),
            }
        }
    }

    /// Stores a new database's map; [`ClusterError::ShardMapExists`] if it
    /// has one. Returns the map's revision.
    pub async fn create(&self, map: &ShardMap) -> Result<i64> {
        map.validate()?;
        let key = self.etcd.db_key(&map.db);
        let value = serde_json::to_vec(map).map_err(|e| ClusterError::Config(e.to_string()))?;
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value, None)]);
        let resp = self
            .etcd
            .call("create shard map", self.etcd.client().txn(txn))
            .await?;
        if !resp.succeeded() {
            return Err(ClusterError::ShardMapExists(map.db.clone()));
        }
        Ok(header_revision(resp.header()))
    }

    /// Replaces a database's map if it is still at `expected` (the revision
    /// it was read at). Returns the new revision.
    pub async fn update(&self, map: &ShardMap, expected: i64) -> Result<i64> {
        map.validate()?;
        let key = self.etcd.db_key(&map.db);
        let value = serde_json::to_vec(map).map_err(|e| ClusterError::Config(e.to_string()))?;
        self.swap(
            &map.db,
            expected,
            TxnOp::put(key, value, None),
            "update shard map",
        )
        .await
    }

    /// [`ShardMaps::update`], and only while `guard` (a key and its
    /// create revision: the decider's election key) still exists as it
    /// was: a decider that lost its election changes nothing.
    pub async fn update_guarded(
        &self,
        map: &ShardMap,
        expected: i64,
        guard: (&[u8], i64),
    ) -> Result<i64> {
        map.validate()?;
        let key = self.etcd.db_key(&map.db);
        let value = serde_json::to_vec(map).map_err(|e| ClusterError::Config(e.to_string()))?;
        let txn = Txn::new()
            .when([
                Compare::mod_revision(key.clone(), CompareOp::Equal, expected),
                Compare::create_revision(guard.0.to_vec(), CompareOp::Equal, guard.1),
            ])
            .and_then([TxnOp::put(key, value, None)]);
        let resp = self
            .etcd
            .call("update shard map", self.etcd.client().txn(txn))
            .await?;
        if !resp.succeeded() {
            return Err(ClusterError::ShardMapConflict {
                db: map.db.clone(),
                expected,
            });
        }
        Ok(header_revision(resp.header()))
    }

    /// Deletes a database's map if it is still at `expected`.
    pub async fn delete(&self, db: &str, expected: i64) -> Result<()> {
        let key = self.etcd.db_key(db);
        self.swap(db, expected, TxnOp::delete(key, None), "delete shard map")
            .await
            .map(|_| ())
    }

    /// `op` on the database's key if its mod_revision is `expected` (and
    /// it exists); otherwise which of the two it was.
    async fn swap(&self, db: &str, expected: i64, op: TxnOp, what: &'static str) -> Result<i64> {
        if expected <= 0 {
            return Err(ClusterError::NoShardMap(db.to_string()));
        }
        let key = self.etcd.db_key(db);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                expected,
            )])
            .and_then([op])
            .or_else([TxnOp::get(key, Some(GetOptions::new().with_keys_only()))]);
        let resp = self.etcd.call(what, self.etcd.client().txn(txn)).await?;
        if resp.succeeded() {
            return Ok(header_revision(resp.header()));
        }
        let exists = resp
            .op_responses()
            .iter()
            .any(|r| matches!(r, TxnOpResponse::Get(g) if !g.kvs().is_empty()));
        if exists {
            Err(ClusterError::ShardMapConflict {
                db: db.to_string(),
                expected,
            })
        } else {
            Err(ClusterError::NoShardMap(db.to_string()))
        }
    }
}

/// A change of a shard map seen by a [`ShardMapWatch`].
#[derive(Clone, Debug, PartialEq)]
pub enum ShardMapChange {
    /// A database's map was created or replaced.
    Put(Versioned<ShardMap>),
    /// A database's map was deleted.
    Deleted(String),
}

/// Follows every database's shard map: the maps as of a revision, then
/// every change after it. A stored value that does not read as a map is
/// logged and skipped (it is no database's map).
pub struct ShardMapWatch {
    maps: ShardMaps,
    prefix: String,
    stream: WatchStream,
    listed: BTreeMap<String, Versioned<ShardMap>>,
    revision: i64,
}

impl std::fmt::Debug for ShardMapWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardMapWatch")
            .field("maps", &self.listed.len())
            .field("revision", &self.revision)
            .finish()
    }
}

impl ShardMapWatch {
    /// Lists every map (all pages at one revision) and starts watching
    /// from the next revision.
    pub async fn start(etcd: &Etcd) -> Result<ShardMapWatch> {
        let maps = ShardMaps::new(etcd.clone());
        let prefix = etcd.dbs_prefix();
        let mut end = prefix.clone().into_bytes();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let mut from = prefix.clone().into_bytes();
        let mut revision = 0;
        let mut listed = BTreeMap::new();
        loop {
            let mut options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(LIST_PAGE);
            if revision > 0 {
                options = options.with_revision(revision);
            }
            let resp = etcd
                .call(
                    "list shard maps",
                    etcd.client().get(from.clone(), Some(options)),
                )
                .await?;
            if revision == 0 {
                revision = header_revision(resp.header());
            }
            for kv in resp.kvs() {
                match maps.parse(kv.key(), kv.value(), kv.mod_revision()) {
                    Ok(m) => {
                        listed.insert(m.value.db.clone(), m);
                    }
                    Err(e) => tracing::warn!(error = %e, "unreadable shard map; ignored"),
                }
            }
            match resp.kvs().last() {
                Some(kv) if resp.more() => {
                    from = kv.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let stream = etcd
            .call(
                "watch shard maps",
                etcd.client().watch(prefix.clone(), Some(options)),
            )
            .await?;
        Ok(ShardMapWatch {
            maps,
            prefix,
            stream,
            listed,
            revision,
        })
    }

    /// The maps as listed at the start (by database name).
    pub fn listed(&self) -> &BTreeMap<String, Versioned<ShardMap>> {
        &self.listed
    }

    /// The etcd revision of the last change seen.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The next changes, waiting at most `within` (an empty list if none
    /// came). [`ClusterError::WatchEnded`] if etcd cancelled the watch.
    pub async fn next(&mut self, within: Duration) -> Result<Vec<ShardMapChange>> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let msg = match tokio::time::timeout_at(deadline, self.stream.message()).await {
                Err(_) => return Ok(Vec::new()),
                Ok(Err(e)) => {
                    return Err(ClusterError::Etcd {
                        op: "watch shard maps",
                        reason: e.to_string(),
                    })
                }
                Ok(Ok(None)) => return Err(ClusterError::WatchEnded(self.prefix.clone())),
                Ok(Ok(Some(m))) => m,
            };
            if msg.canceled() {
                return Err(ClusterError::WatchEnded(self.prefix.clone()));
            }
            let mut changes = Vec::new();
            for ev in msg.events() {
                let Some(kv) = ev.kv() else { continue };
                self.revision = self.revision.max(kv.mod_revision());
                let Some(db) = kv.key().strip_prefix(self.prefix.as_bytes()) else {
                    continue;
                };
                match ev.event_type() {
                    EventType::Put => {
                        match self.maps.parse(kv.key(), kv.value(), kv.mod_revision()) {
                            Ok(m) => changes.push(ShardMapChange::Put(m)),
                            Err(e) => tracing::warn!(error = %e, "unreadable shard map; ignored"),
                        }
                    }
                    EventType::Delete => changes.push(ShardMapChange::Deleted(
                        String::from_utf8_lossy(db).into_owned(),
                    )),
                }
            }
            if !changes.is_empty() {
                return Ok(changes);
            }
        }
    }
}
