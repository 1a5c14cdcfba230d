//! Cluster membership: who the live nodes are. A node is a member while
//! its key `PREFIX nodes/NAME` exists; the key is attached to a lease the
//! node keeps alive, so a node that stops renewing (killed, partitioned
//! away, hung) drops out once the lease's TTL runs out, with no one else
//! having to act.
//!
//! - [`join`] registers a node: a lease, then one transaction that puts
//!   the key only if no key of that name exists ([`ClusterError::NodeNameTaken`]
//!   otherwise, and the lease is revoked: no half-joined state).
//! - [`Registration`] keeps the lease alive (a keep-alive every third of
//!   the TTL) and knows until when the lease is *certainly* alive:
//!   the send time of the last renewal etcd answered plus the TTL it
//!   granted. [`Registration::is_live`] turns false at that instant if
//!   renewals fail, which is before etcd can have expired the lease, so a
//!   node that acts only while it is live never acts after the cluster
//!   counted it out.
//! - [`members`] lists the live members, [`known_members`] every node that
//!   ever joined (its `known/NAME` record, written by the join's
//!   transaction, has no lease); [`MembershipWatch`] follows changes
//!   (list at a revision, then watch from the next one, so no change falls
//!   between the two).
//!
//! Invariants: two live registrations never hold one name; every wait
//! (etcd calls, keep-alive answers, watch reads) is bounded in time; the
//! keep-alive task ends when its registration ends or its lease is lost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions, WatchStream,
};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::error::{ClusterError, Result};
use crate::etcd::{decode, header_revision, Etcd, Versioned};

/// The shortest lease TTL accepted (etcd itself refuses less than about
/// 1.5 election timeouts, i.e. 2 s with its default settings).
pub const MIN_TTL: Duration = Duration::from_secs(2);
/// The lease TTL a node uses unless told otherwise (docs/adr/0011: a
/// dead node is out within about 4 to 5.5 s; renewals every 1.7 s ride
/// out an etcd leader election and a second's stall).
pub const DEFAULT_TTL: Duration = Duration::from_secs(5);
/// The longest lease TTL accepted.
pub const MAX_TTL: Duration = Duration::from_secs(300);

/// What a member says about itself (the value of its key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The node's name, unique in the cluster (`settee@127.0.0.1`).
    pub name: String,
    /// The URL other nodes and clients reach it at.
    pub advertise: String,
}

/// A change of membership seen by a [`MembershipWatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipChange {
    /// A node joined (or re-registered with other information).
    Joined(NodeInfo),
    /// A node left: its key was deleted or its lease expired.
    Left(String),
}

/// Checks a node name: 1 to 255 ASCII letters, digits or `._-@:+`.
pub fn validate_node_name(name: &str) -> Result<()> {
    let bad = |reason: &str| {
        Err(ClusterError::InvalidNodeName {
            name: name.to_string(),
            reason: reason.to_string(),
        })
    };
    if name.is_empty() || name.len() > 255 {
        return bad("must be 1 to 255 characters");
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"._-@:+".contains(&c))
    {
        return bad("only ASCII letters, digits and . _ - @ : + are allowed");
    }
    Ok(())
}

struct LeaseState {
    /// Until when the lease is certainly alive.
    valid_until: Mutex<Instant>,
    /// Set once the lease is known to be gone (or can no longer be known alive).
    lost: AtomicBool,
}

impl LeaseState {
    fn renewed(&self, sent: Instant, ttl_secs: i64) {
        let until = sent + Duration::from_secs(ttl_secs.max(0) as u64);
        let mut v = self.valid_until.lock().unwrap_or_else(|p| p.into_inner());
        if until > *v {
            *v = until;
        }
    }

    fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A node's membership: its lease, kept alive until [`Registration::leave`],
/// [`Registration::stop_keep_alive`] or drop (which stops the renewals
/// and lets the lease run out, as a crash would).
pub struct Registration {
    etcd: Etcd,
    info: NodeInfo,
    lease: i64,
    ttl: Duration,
    state: Arc<LeaseState>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("info", &self.info)
            .field("lease", &self.lease)
            .finish()
    }
}

/// Registers `info` as a live member with a lease of `ttl` (whole
/// seconds, [`MIN_TTL`] to [`MAX_TTL`]) and starts keeping it alive. Must
/// run inside a tokio runtime (the keep-alive is a task).
pub async fn join(etcd: &Etcd, info: NodeInfo, ttl: Duration) -> Result<Registration> {
    validate_node_name(&info.name)?;
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(ClusterError::Config(format!(
            "lease TTL {ttl:?} is not between {MIN_TTL:?} and {MAX_TTL:?}"
        )));
    }
    let ttl_secs = ttl.as_secs() as i64;
    let key = etcd.node_key(&info.name);
    let value = serde_json::to_vec(&info).map_err(|e| ClusterError::Config(e.to_string()))?;

    let sent = Instant::now();
    let grant = etcd
        .call("lease grant", etcd.client().lease_grant(ttl_secs, None))
        .await?;
    let lease = grant.id();
    let state = Arc::new(LeaseState {
        valid_until: Mutex::new(sent),
        lost: AtomicBool::new(false),
    });
    state.renewed(sent, grant.ttl());

    // The live key on the lease and the known member's record (no lease:
    // it outlives the node, as CouchDB's `_nodes` documents do).
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(
                key.clone(),
                value.clone(),
                Some(PutOptions::new().with_lease(lease)),
            ),
            TxnOp::put(etcd.known_key(&info.name), value, None),
        ]);
    let won = match etcd.call("register node", etcd.client().txn(txn)).await {
        Ok(r) => r.succeeded(),
        Err(e) => {
            // The put may or may not have happened: revoking the lease
            // removes the key if it did.
            revoke(etcd, lease).await;
            return Err(e);
        }
    };
    if !won {
        revoke(etcd, lease).await;
        return Err(ClusterError::NodeNameTaken(info.name));
    }

    let (keeper, stream) = match etcd
        .call("lease keep-alive", etcd.client().lease_keep_alive(lease))
        .await
    {
        Ok(ks) => ks,
        Err(e) => {
            revoke(etcd, lease).await;
            return Err(e);
        }
    };
    let (stop_tx, stop_rx) = oneshot::channel();
    let task = tokio::spawn(keep_alive(
        etcd.clone(),
        lease,
        ttl,
        state.clone(),
        keeper,
        stream,
        stop_rx,
    ));
    tracing::info!(node = %info.name, lease, ?ttl, "joined the cluster");
    Ok(Registration {
        etcd: etcd.clone(),
        info,
        lease,
        ttl,
        state,
        stop: Some(stop_tx),
        task: Some(task),
    })
}

async fn revoke(etcd: &Etcd, lease: i64) {
    if let Err(e) = etcd
        .call("lease revoke", etcd.client().lease_revoke(lease))
        .await
    {
        tracing::warn!(lease, error = %e, "could not revoke a lease; it expires by itself");
    }
}

/// Renews the lease every third of its TTL until stopped or lost. After a
/// failed renewal the stream is opened anew (its first answer is a renewal
/// too), so a late answer is never taken for a newer request's.
async fn keep_alive(
    etcd: Etcd,
    lease: i64,
    ttl: Duration,
    state: Arc<LeaseState>,
    keeper: etcd_client::LeaseKeeper,
    stream: etcd_client::LeaseKeepAliveStream,
    mut stop: oneshot::Receiver<()>,
) {
    let interval = (ttl / 3).max(Duration::from_millis(500));
    let wait = etcd.config().request_timeout.min(ttl);
    let mut ks = Some((keeper, stream));
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let sent = Instant::now();
        let answer = tokio::select! {
            _ = &mut stop => return,
            a = tokio::time::timeout(wait, renew(&etcd, lease, &mut ks)) => a,
        };
        match answer {
            Ok(Ok(granted)) if granted > 0 => state.renewed(sent, granted),
            Ok(Ok(_)) => {
                tracing::warn!(lease, "etcd no longer knows the node's lease");
                state.lost.store(true, Ordering::SeqCst);
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(lease, error = %e, "lease renewal failed");
                ks = None;
            }
            Err(_) => {
                tracing::warn!(lease, ?wait, "lease renewal unanswered");
                ks = None;
            }
        }
        if Instant::now() >= state.valid_until() {
            tracing::warn!(
                lease,
                "lease no longer certainly alive: leaving the cluster"
            );
            state.lost.store(true, Ordering::SeqCst);
            return;
        }
    }
}

/// One renewal: on the open stream, or by opening one. Returns the TTL
/// etcd granted (0 or less: the lease is gone).
async fn renew(
    etcd: &Etcd,
    lease: i64,
    ks: &mut Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)>,
) -> std::result::Result<i64, String> {
    match ks {
        Some((keeper, stream)) => {
            keeper.keep_alive().await.map_err(|e| e.to_string())?;
            match stream.message().await.map_err(|e| e.to_string())? {
                Some(resp) => Ok(resp.ttl()),
                None => Err("keep-alive stream closed".into()),
            }
        }
        None => match etcd.client().lease_keep_alive(lease).await {
            Ok(opened) => {
                *ks = Some(opened);
                // Opening waited for the first answer, a renewal.
                Ok(etcd_ttl_hint(etcd, lease).await)
            }
            Err(etcd_client::Error::LeaseKeepAliveError(m)) if m.contains("not found") => Ok(0),
            Err(e) => Err(e.to_string()),
        },
    }
}

/// The TTL etcd grants on renewal (the lease's granted TTL), asked after a
/// stream was reopened (the client keeps its first answer to itself): 0 if
/// the lease is gone, 1 s (the least it can be) if the question failed.
async fn etcd_ttl_hint(etcd: &Etcd, lease: i64) -> i64 {
    match etcd.client().lease_time_to_live(lease, None).await {
        Ok(r) if r.ttl() > 0 => r.granted_ttl(),
        Ok(_) => 0,
        Err(_) => 1,
    }
}

impl Registration {
    pub fn info(&self) -> &NodeInfo {
        &self.info
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The lease's id (what the node's election campaign is tied to).
    pub fn lease_id(&self) -> i64 {
        self.lease
    }

    /// Until when the lease is certainly alive.
    pub fn lease_valid_until(&self) -> Instant {
        self.state.valid_until()
    }

    /// Whether the lease is certainly alive now.
    pub fn is_live(&self) -> bool {
        !self.state.lost.load(Ordering::SeqCst) && Instant::now() < self.state.valid_until()
    }

    /// Leaves the cluster now: stops the renewals and revokes the lease,
    /// which deletes the member's key at once.
    pub async fn leave(mut self) -> Result<()> {
        self.stop_task().await;
        self.etcd
            .call("lease revoke", self.etcd.client().lease_revoke(self.lease))
            .await?;
        tracing::info!(node = %self.info.name, "left the cluster");
        Ok(())
    }

    /// Stops the renewals without revoking: the member's key disappears
    /// when the lease runs out, as if the process had died.
    pub async fn stop_keep_alive(mut self) {
        self.stop_task().await;
    }

    async fn stop_task(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            // The task returns at its next await point.
            if tokio::time::timeout(Duration::from_secs(1), task)
                .await
                .is_err()
            {
                tracing::warn!(node = %self.info.name, "keep-alive task did not stop within 1 s");
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The live members and the revision they were read at.
pub async fn members(etcd: &Etcd) -> Result<Versioned<BTreeMap<String, NodeInfo>>> {
    let prefix = etcd.nodes_prefix();
    let resp = etcd
        .call(
            "list members",
            etcd.client()
                .get(prefix.clone(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
    let mut out = BTreeMap::new();
    for kv in resp.kvs() {
        if let Some(info) = member_of(&prefix, kv.key(), kv.value()) {
            out.insert(info.name.clone(), info);
        }
    }
    Ok(Versioned {
        value: out,
        revision: header_revision(resp.header()),
    })
}

/// Every node that ever joined (and was not removed), live or not: CouchDB's
/// `cluster_nodes`.
pub async fn known_members(etcd: &Etcd) -> Result<BTreeMap<String, NodeInfo>> {
    let prefix = etcd.known_prefix();
    let resp = etcd
        .call(
            "list known members",
            etcd.client()
                .get(prefix.clone(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
    let mut out = BTreeMap::new();
    for kv in resp.kvs() {
        if let Some(info) = member_of(&prefix, kv.key(), kv.value()) {
            out.insert(info.name.clone(), info);
        }
    }
    Ok(out)
}

/// A member's information from its key and value (`None`, logged, for a
/// value that does not parse or does not match its key).
fn member_of(prefix: &str, key: &[u8], value: &[u8]) -> Option<NodeInfo> {
    match decode::<NodeInfo>(key, value) {
        Ok(info) if key.strip_prefix(prefix.as_bytes()) == Some(info.name.as_bytes()) => Some(info),
        Ok(_) => {
            tracing::warn!(key = %String::from_utf8_lossy(key), "member value names another node; ignored");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "unreadable member value; ignored");
            None
        }
    }
}

/// Follows membership: the members as of a revision, then every change
/// after it.
pub struct MembershipWatch {
    prefix: String,
    stream: WatchStream,
    members: BTreeMap<String, NodeInfo>,
    revision: i64,
}

impl std::fmt::Debug for MembershipWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MembershipWatch")
            .field("members", &self.members)
            .field("revision", &self.revision)
            .finish()
    }
}

impl MembershipWatch {
    /// Lists the members and starts watching from the next revision.
    pub async fn start(etcd: &Etcd) -> Result<MembershipWatch> {
        let listed = members(etcd).await?;
        let prefix = etcd.nodes_prefix();
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(listed.revision + 1);
        let stream = etcd
            .call(
                "watch members",
                etcd.client().watch(prefix.clone(), Some(options)),
            )
            .await?;
        Ok(MembershipWatch {
            prefix,
            stream,
            members: listed.value,
            revision: listed.revision,
        })
    }

    /// The members as of the last change seen.
    pub fn members(&self) -> &BTreeMap<String, NodeInfo> {
        &self.members
    }

    /// The etcd revision the members are as of.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The next changes, waiting at most `within` for one (an empty list
    /// if none came). [`ClusterError::WatchEnded`] if etcd cancelled the
    /// watch (start another).
    pub async fn next(&mut self, within: Duration) -> Result<Vec<MembershipChange>> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let msg = match tokio::time::timeout_at(deadline, self.stream.message()).await {
                Err(_) => return Ok(Vec::new()),
                Ok(Err(e)) => {
                    return Err(ClusterError::Etcd {
                        op: "watch members",
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
                let Some(name) = kv.key().strip_prefix(self.prefix.as_bytes()) else {
                    continue;
                };
                let name = String::from_utf8_lossy(name).into_owned();
                match ev.event_type() {
                    EventType::Put => {
                        if let Some(info) = member_of(&self.prefix, kv.key(), kv.value()) {
                            if self.members.get(&name) != Some(&info) {
                                self.members.insert(name, info.clone());
                                changes.push(MembershipChange::Joined(info));
                            }
                        }
                    }
                    EventType::Delete => {
                        if self.members.remove(&name).is_some() {
                            changes.push(MembershipChange::Left(name));
                        }
                    }
                }
            }
            if !changes.is_empty() {
                return Ok(changes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names() {
        validate_node_name("settee@127.0.0.1").unwrap();
        validate_node_name("node-1.example_2:5984+x").unwrap();
        for bad in ["", "a/b", "a b", "naïve", &"x".repeat(256)] {
            assert!(validate_node_name(bad).is_err(), "{bad}");
        }
    }
}
