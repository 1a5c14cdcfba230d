//! The one node that plans and drives shard moves (issue 39): the holder
//! of an etcd election (`PREFIX decider`) campaigned for on the node's
//! lease, so leadership ends when the lease does.
//!
//! While it leads, every [`TICK`] the decider: notes which known members
//! are down (a node down longer than `heal_after` is *gone*: its copies
//! are replaced); resumes every move recorded in a map that it is not
//! running (a decider that died mid-move left it there); and, unless
//! rebalancing is paused (`POST /_cluster/rebalance`), records new moves
//! from [`crate::plan`] up to `max_moves` in flight cluster-wide and runs
//! them ([`crate::mover`]). Its progress is written to `PREFIX rebalance`
//! for any node to answer `GET /_cluster/rebalance`.
//!
//! Invariants: every map change it makes is guarded by its election key
//! (a deposed decider changes nothing); the time a node has been down is
//! counted from when this decider first saw it down, so a new decider
//! heals later, never earlier; at most `max_moves` moves are recorded at
//! once.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_client::LeaderKey;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::coordinator::Coordinator;
use crate::error::{ClusterError, Result};
use crate::layout::Move;

/// How often a leading decider looks at the cluster.
pub const TICK: Duration = Duration::from_secs(1);
/// Moves kept in the status' history.
const HISTORY: usize = 50;

/// The default bandwidth of shard moves: 64 MiB/s.
pub const DEFAULT_MOVE_BYTES_PER_S: u64 = 64 << 20;

/// How the decider is tuned (from the node's configuration).
#[derive(Clone, Copy, Debug)]
pub struct DeciderConfig {
    /// A node down this long is gone: its copies are replaced.
    pub heal_after: Duration,
    /// Moves in flight at once, cluster-wide.
    pub max_moves: usize,
    /// Bytes per second all the moves this node fills may copy together
    /// (`[cluster] rebalance_max_bytes_per_s`; 0: no limit).
    pub max_bytes_per_s: u64,
}

impl Default for DeciderConfig {
    fn default() -> Self {
        DeciderConfig {
            heal_after: Duration::from_secs(60),
            max_moves: 2,
            max_bytes_per_s: DEFAULT_MOVE_BYTES_PER_S,
        }
    }
}

/// What `GET /_cluster/rebalance` answers (written by the decider).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RebalanceStatus {
    /// The node deciding.
    pub decider: String,
    /// `balanced`, `moving` or `paused`.
    pub state: String,
    /// Moves completed since this decider was elected.
    pub moves_done: u64,
    /// Moves recorded in maps and not completed.
    pub in_flight: Vec<MoveStatus>,
    /// Moves planned but not started (the budget was used).
    pub pending: u64,
    /// Nodes whose copies are being replaced (down past `heal_after_s`).
    pub gone: Vec<String>,
    /// The decider's limit on the bandwidth of its moves together
    /// (bytes per second; 0: none).
    #[serde(default)]
    pub max_bytes_per_s: u64,
    /// Nodes being decommissioned (their copies move off).
    #[serde(default)]
    pub leaving: Vec<String>,
    /// Leaving nodes that hold no copy any more (safe to stop).
    #[serde(default)]
    pub decommissioned: Vec<String>,
    /// Shards (`db range`) with fewer live full copies than the map
    /// names (nodes down, or no node left to hold a replacement).
    #[serde(default)]
    pub under_replicated: Vec<String>,
    /// The last moves completed or failed.
    pub history: Vec<MoveStatus>,
    /// When this was written (Unix seconds).
    pub updated: u64,
}

/// One move, as the status lists it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct MoveStatus {
    pub db: String,
    pub range: String,
    pub to: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The fill's figures (moves in flight, when the decider fills it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<crate::move_progress::MoveProgress>,
}

impl MoveStatus {
    fn of(db: &str, m: &Move) -> MoveStatus {
        MoveStatus {
            db: db.to_string(),
            range: m.range.to_string(),
            to: m.to.clone(),
            from: m.from.clone(),
            result: None,
            progress: None,
        }
    }
}

/// The operator's control (`POST /_cluster/rebalance`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RebalanceControl {
    pub paused: bool,
}

/// Campaigns, and while leading, decides (see the module doc), until
/// `stop` turns true.
pub async fn run(c: Arc<Coordinator>, config: DeciderConfig, mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        // No lease while the node rejoins after losing one: wait for it.
        let Some(lease) = c.lease_id().filter(|_| c.is_live()) else {
            let _ = tokio::time::timeout(TICK, stop.changed()).await;
            continue;
        };
        let mut election = c.etcd().client().election_client();
        let name = c.etcd().key("decider");
        let campaign = election.campaign(name, c.node_name().as_bytes().to_vec(), lease);
        let leader = tokio::select! {
            r = campaign => r,
            _ = stop.changed() => return,
        };
        let leader = match leader {
            Ok(mut r) => match r.take_leader() {
                Some(l) => l,
                None => continue,
            },
            Err(e) => {
                tracing::warn!(error = %e, "decider campaign failed; trying again");
                let _ = tokio::time::timeout(TICK * 2, stop.changed()).await;
                continue;
            }
        };
        tracing::info!(node = c.node_name(), "elected the cluster's decider");
        lead(&c, config, &leader, &mut stop).await;
        let mut election = c.etcd().client().election_client();
        let _ = c
            .etcd()
            .call(
                "resign",
                election.resign(Some(
                    etcd_client::ResignOptions::new().with_leader(leader.clone()),
                )),
            )
            .await;
    }
}

struct Leading {
    down_since: BTreeMap<String, Instant>,
    running: Arc<Mutex<HashSet<(String, String, String)>>>,
    done: Arc<std::sync::atomic::AtomicU64>,
    history: Arc<Mutex<Vec<MoveStatus>>>,
}

async fn lead(
    c: &Arc<Coordinator>,
    config: DeciderConfig,
    leader: &LeaderKey,
    stop: &mut watch::Receiver<bool>,
) {
    let mut st = Leading {
        down_since: BTreeMap::new(),
        running: Arc::new(Mutex::new(HashSet::new())),
        done: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        history: Arc::new(Mutex::new(Vec::new())),
    };
    while !*stop.borrow() && c.is_live() {
        match still_leader(c, leader).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => tracing::warn!(error = %e, "cannot check the decider's election"),
        }
        if let Err(e) = tick(c, config, leader, &mut st).await {
            tracing::warn!(error = %e, "decider tick failed");
        }
        let _ = tokio::time::timeout(TICK, stop.changed()).await;
    }
}

async fn still_leader(c: &Coordinator, leader: &LeaderKey) -> Result<bool> {
    let resp = c
        .etcd()
        .call(
            "get election key",
            c.etcd().client().get(leader.key(), None),
        )
        .await?;
    Ok(resp
        .kvs()
        .first()
        .is_some_and(|kv| kv.create_revision() == leader.rev()))
}

async fn tick(
    c: &Arc<Coordinator>,
    config: DeciderConfig,
    leader: &LeaderKey,
    st: &mut Leading,
) -> Result<()> {
    let live: BTreeSet<String> = c.view().live().into_keys().collect();
    let maps = c.maps().list().await?;
    // Who is down, and since when (as this decider saw it).
    let mut holders = BTreeSet::new();
    for m in &maps {
        holders.extend(m.value.by_node.keys().cloned());
    }
    let now = Instant::now();
    st.down_since.retain(|n, _| !live.contains(n));
    for n in holders.iter().filter(|n| !live.contains(*n)) {
        st.down_since.entry(n.clone()).or_insert(now);
    }
    let gone: BTreeSet<String> = st
        .down_since
        .iter()
        .filter(|(_, t)| now.duration_since(**t) >= config.heal_after)
        .map(|(n, _)| n.clone())
        .collect();
    // A leaving node takes no copies, and its copies are replaced at once
    // (it is still live, so it is one of the sources of their fill).
    let leaving = crate::leaving::get(c.etcd()).await?;
    let eligible: BTreeSet<String> = live.difference(&leaving).cloned().collect();
    let mut replaced = gone.clone();
    replaced.extend(leaving.iter().cloned());
    let paused = control(c).await?.paused;
    let guard = (leader.key().to_vec(), leader.rev());
    let mut in_flight = Vec::new();
    let mut recorded = 0usize;
    for m in &maps {
        for mv in &m.value.moves {
            recorded += 1;
            let mut entry = MoveStatus::of(&m.value.db, mv);
            entry.progress = c.moves().of(&m.value.db, mv);
            in_flight.push(entry);
            // A move whose target went down is withdrawn.
            if !live.contains(&mv.to) {
                withdraw(c, &m.value.db, mv, &guard).await?;
                continue;
            }
            spawn_move(c, st, &m.value.db, mv, &guard);
        }
    }
    let mut pending = 0u64;
    if !paused {
        for m in &maps {
            let budget = config.max_moves.saturating_sub(recorded);
            let planned = crate::plan::next_moves(&m.value, &eligible, &replaced, config.max_moves);
            pending += planned.len().saturating_sub(budget) as u64;
            let take: Vec<Move> = planned.into_iter().take(budget).collect();
            if take.is_empty() {
                continue;
            }
            let mut next = m.value.clone();
            next.moves.extend(take.iter().cloned());
            match c
                .maps()
                .update_guarded(&next, m.revision, (&guard.0, guard.1))
                .await
            {
                Ok(_) => {
                    c.view().put_map(next);
                    recorded += take.len();
                    for mv in &take {
                        tracing::info!(db = %m.value.db, range = %mv.range, to = %mv.to, from = ?mv.from, "shard move recorded");
                        in_flight.push(MoveStatus::of(&m.value.db, mv));
                        spawn_move(c, st, &m.value.db, mv, &guard);
                    }
                }
                Err(ClusterError::ShardMapConflict { .. }) => {} // next tick
                Err(e) => return Err(e),
            }
        }
    }
    let maps = c.maps().list().await?;
    let decommissioned = leaving
        .iter()
        .filter(|n| maps.iter().all(|m| m.value.held_by(n).is_empty()))
        .cloned()
        .collect();
    let under_replicated = maps
        .iter()
        .flat_map(|m| {
            under_replicated(&m.value, &live)
                .into_iter()
                .map(move |r| format!("{} {r}", m.value.db))
        })
        .collect();
    let status = RebalanceStatus {
        decider: c.node_name().to_string(),
        state: match (paused, in_flight.is_empty() && pending == 0) {
            (true, _) => "paused",
            (false, true) => "balanced",
            (false, false) => "moving",
        }
        .into(),
        moves_done: st.done.load(std::sync::atomic::Ordering::Relaxed),
        in_flight,
        pending,
        gone: gone.into_iter().collect(),
        max_bytes_per_s: c.move_throttle().rate(),
        leaving: leaving.into_iter().collect(),
        decommissioned,
        under_replicated,
        history: st.history.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        updated: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let value = serde_json::to_vec(&status).map_err(|e| ClusterError::Config(e.to_string()))?;
    c.etcd()
        .call(
            "put rebalance status",
            c.etcd()
                .client()
                .put(c.etcd().key("rebalance"), value, None),
        )
        .await?;
    Ok(())
}

/// The ranges of `map` with fewer live full copies than it names.
pub fn under_replicated(map: &crate::layout::ShardMap, live: &BTreeSet<String>) -> Vec<String> {
    map.by_range
        .iter()
        .filter(|(_, nodes)| nodes.iter().filter(|n| live.contains(*n)).count() < nodes.len())
        .map(|(r, _)| r.to_string())
        .collect()
}

/// Takes a move off its map (its target went down before it finished).
async fn withdraw(c: &Coordinator, db: &str, mv: &Move, guard: &(Vec<u8>, i64)) -> Result<()> {
    let Some(current) = c.maps().get(db).await? else {
        return Ok(());
    };
    let mut next = current.value.clone();
    next.moves.retain(|m| m != mv);
    match c
        .maps()
        .update_guarded(&next, current.revision, (&guard.0, guard.1))
        .await
    {
        Ok(_) | Err(ClusterError::ShardMapConflict { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

fn spawn_move(c: &Arc<Coordinator>, st: &Leading, db: &str, mv: &Move, guard: &(Vec<u8>, i64)) {
    let key = (db.to_string(), mv.range.to_string(), mv.to.clone());
    if !st
        .running
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone())
    {
        return;
    }
    let (c, db, mv, guard) = (Arc::clone(c), db.to_string(), mv.clone(), guard.clone());
    let (running, done, history) = (
        Arc::clone(&st.running),
        Arc::clone(&st.done),
        Arc::clone(&st.history),
    );
    tokio::spawn(async move {
        let result = crate::mover::run(&c, &db, &mv, (&guard.0, guard.1)).await;
        let mut entry = MoveStatus::of(&db, &mv);
        entry.result = Some(match &result {
            Ok(()) => {
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                "done".into()
            }
            Err(e) => {
                tracing::warn!(db, range = %mv.range, to = %mv.to, error = %e, "shard move failed; retried");
                format!("failed: {e}")
            }
        });
        {
            let mut h = history.lock().unwrap_or_else(|p| p.into_inner());
            h.push(entry);
            let excess = h.len().saturating_sub(HISTORY);
            h.drain(..excess);
        }
        running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
    });
}

/// The operator's control, default when never set.
pub async fn control(c: &Coordinator) -> Result<RebalanceControl> {
    let key = c.etcd().key("rebalance_control");
    let resp = c
        .etcd()
        .call(
            "get rebalance control",
            c.etcd().client().get(key.clone(), None),
        )
        .await?;
    match resp.kvs().first() {
        None => Ok(RebalanceControl::default()),
        Some(kv) => crate::etcd::decode(key.as_bytes(), kv.value()),
    }
}

/// Sets the operator's control.
pub async fn set_control(c: &Coordinator, control: RebalanceControl) -> Result<()> {
    let value = serde_json::to_vec(&control).map_err(|e| ClusterError::Config(e.to_string()))?;
    c.etcd()
        .call(
            "put rebalance control",
            c.etcd()
                .client()
                .put(c.etcd().key("rebalance_control"), value, None),
        )
        .await?;
    Ok(())
}

/// The last status a decider wrote (None: no decider yet).
pub async fn status(c: &Coordinator) -> Result<Option<RebalanceStatus>> {
    let key = c.etcd().key("rebalance");
    let resp = c
        .etcd()
        .call(
            "get rebalance status",
            c.etcd().client().get(key.clone(), None),
        )
        .await?;
    match resp.kvs().first() {
        None => Ok(None),
        Some(kv) => crate::etcd::decode(key.as_bytes(), kv.value()).map(Some),
    }
}
