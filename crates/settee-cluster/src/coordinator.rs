//! A node's part in a cluster: joined to etcd, answering the cluster facts
//! the HTTP layer asks for (through [`crate::Topology`]), creating and
//! deleting databases' shard maps, and keeping the node's own shard
//! copies — databases of its engine named as CouchDB names shard files,
//! `shards/BEGIN-END/DB.SUFFIX` — in line with the maps.
//!
//! - [`Coordinator::join`] connects to etcd (an unreachable etcd is
//!   [`ClusterError::Unreachable`] at once), registers the node (a name a
//!   live node holds is [`ClusterError::NodeNameTaken`], and nothing is
//!   left registered) and starts the *shard keeper*.
//! - The shard keeper follows every map ([`ShardMapWatch`]) and creates
//!   the copies a map places on this node; when a map is deleted it deletes
//!   the node's copies of that database, unless a map stored since names
//!   them again. Listing the maps (at start, after a lost watch) creates
//!   what is missing and deletes nothing: a copy no map names is kept and
//!   logged, so an etcd that lost its data (or a fresh one) never erases a
//!   node's data.
//! - [`Coordinator::create_db`] writes a new map (compare-and-swap: absent
//!   only) placed over the live members, then creates this node's copies
//!   before answering; the other members' keepers create theirs as the
//!   watch tells them (within milliseconds on loopback).
//!   [`Coordinator::delete_db`] deletes the map at the revision read, then
//!   this node's copies; the other keepers delete theirs.
//!
//! Invariants: every etcd call runs on the runtime the coordinator was
//! joined on (callers may be on any runtime: the HTTP layer's connection
//! threads run their own), engine calls on the blocking pool; every wait
//! is bounded; writes of maps need the node's lease to be certainly alive
//! ([`ClusterError::LeaseLost`] otherwise).

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use settee_db::Engine;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{ClusterError, Result};
use crate::etcd::{Etcd, EtcdConfig};
use crate::fabric::{self, FabricRequest, FabricResponse};
use crate::layout::{effective_n, parse_shard_name, ShardMap};
use crate::membership::{self, MembershipChange, MembershipWatch, NodeInfo, Registration};
use crate::settings;
use crate::shard_map::{ShardMapChange, ShardMapWatch, ShardMaps};
use crate::sync::SyncQueue;
use crate::topology::Membership;
use crate::view::ClusterView;

/// How a node joins a cluster.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Where etcd is, and the cluster's key prefix.
    pub etcd: EtcdConfig,
    /// The node's name, unique among live members.
    pub name: String,
    /// The URL the node is reached at.
    pub advertise: String,
    /// The lease TTL ([`membership::MIN_TTL`] to [`membership::MAX_TTL`]).
    pub ttl: Duration,
    /// How often each of the node's shard copies is pushed to the other
    /// copies of its shard ([`crate::sync`]'s sweep).
    pub sync_interval: Duration,
    /// How the node decides moves when it is elected ([`crate::decider`]).
    pub decider: crate::decider::DeciderConfig,
    /// Members this node reaches at another URL than the one they
    /// advertise: name -> URL ([`ClusterView::with_routes`]).
    pub peer_urls: std::collections::BTreeMap<String, String>,
}

/// What a database's creation asks for: `q` and `n` (the cluster's
/// defaults when absent) and whether it is partitioned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateDb {
    pub db: String,
    pub q: Option<u32>,
    pub n: Option<u32>,
    pub partitioned: bool,
}

/// A node joined to a cluster. Shared by the HTTP layer (through
/// [`crate::Topology::Member`]) and the binary that joined it.
pub struct Coordinator {
    etcd: Etcd,
    maps: ShardMaps,
    engine: Engine,
    info: NodeInfo,
    runtime: Handle,
    registration: Mutex<Option<Registration>>,
    keeper: Mutex<Vec<JoinHandle<()>>>,
    stop: watch::Sender<bool>,
    view: ClusterView,
    secret: String,
    http: reqwest::Client,
    sync: SyncQueue,
    moves: crate::move_progress::Registry,
    spread: crate::fabric::design::SpreadCache,
    rereduce: std::sync::OnceLock<Arc<dyn crate::fabric::views::Rereduce>>,
    move_throttle: settee_replicator::throttle::Throttle,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("node", &self.info)
            .finish()
    }
}

/// How long the shard keeper waits for a watch event before checking
/// whether it should stop.
const KEEPER_POLL: Duration = Duration::from_millis(500);
/// How long the shard keeper waits before listing again after etcd failed.
const KEEPER_RETRY: Duration = Duration::from_secs(1);
/// How many times a deletion reads the map again after losing a race.
const DELETE_ATTEMPTS: usize = 3;

impl Coordinator {
    /// Connects to etcd, registers the node and starts its shard keeper.
    /// Must run inside the tokio runtime that will run the coordinator's
    /// etcd calls (it must outlive the coordinator).
    pub async fn join(config: NodeConfig, engine: Engine) -> Result<Arc<Coordinator>> {
        membership::validate_node_name(&config.name)?;
        let etcd = Etcd::connect(config.etcd.clone()).await?;
        let info = NodeInfo {
            name: config.name.clone(),
            advertise: config.advertise.clone(),
        };
        let secret = crate::secret::get_or_create(&etcd).await?;
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| ClusterError::Config(format!("cannot build the HTTP client: {e}")))?;
        let (sync, jobs) = SyncQueue::new();
        let registration = membership::join(&etcd, info.clone(), config.ttl).await?;
        let coordinator = Arc::new(Coordinator {
            maps: ShardMaps::new(etcd.clone()),
            etcd,
            engine,
            info,
            runtime: Handle::current(),
            registration: Mutex::new(Some(registration)),
            keeper: Mutex::new(Vec::new()),
            stop: watch::channel(false).0,
            view: ClusterView::with_routes(config.peer_urls.clone()),
            secret,
            http,
            sync,
            moves: Default::default(),
            spread: Default::default(),
            rereduce: std::sync::OnceLock::new(),
            move_throttle: settee_replicator::throttle::Throttle::new(
                config.decider.max_bytes_per_s,
            ),
        });
        // The maps and members are known before the first request.
        coordinator
            .view
            .set_live(membership::members(&coordinator.etcd).await?.value);
        let maps = coordinator.maps.list().await?;
        coordinator.view.set_maps(maps.into_iter().map(|m| m.value));
        let c = &coordinator;
        let tasks = vec![
            tokio::spawn(shard_keeper(Arc::clone(c), c.stop.subscribe())),
            tokio::spawn(member_watcher(Arc::clone(c), c.stop.subscribe())),
            tokio::spawn(crate::sync::worker(Arc::clone(c), jobs, c.stop.subscribe())),
            tokio::spawn(crate::sync::sweeper(
                Arc::clone(c),
                config.sync_interval.max(Duration::from_millis(100)),
                c.stop.subscribe(),
            )),
            tokio::spawn(crate::decider::run(
                Arc::clone(c),
                config.decider,
                c.stop.subscribe(),
            )),
            tokio::spawn(rejoiner(Arc::clone(c), config.ttl, c.stop.subscribe())),
        ];
        *lock(&coordinator.keeper) = tasks;
        Ok(coordinator)
    }

    /// The design-document revisions this node has spread to every shard.
    pub fn spread_cache(&self) -> &crate::fabric::design::SpreadCache {
        &self.spread
    }

    /// Gives the fabric the views' reduce functions (set once, by the HTTP
    /// layer, which runs JavaScript).
    pub fn set_rereduce(&self, r: Arc<dyn crate::fabric::views::Rereduce>) {
        let _ = self.rereduce.set(r);
    }

    /// The reduce functions, once given.
    pub fn rereduce(&self) -> Option<Arc<dyn crate::fabric::views::Rereduce>> {
        self.rereduce.get().cloned()
    }

    /// The node's name.
    pub fn node_name(&self) -> &str {
        &self.info.name
    }

    /// The URL the node said it is reached at.
    pub fn advertise(&self) -> &str {
        &self.info.advertise
    }

    /// What the node knows of the cluster now (maps, live members).
    pub fn view(&self) -> &ClusterView {
        &self.view
    }

    /// The cluster's secret (sent on requests to other nodes).
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Whether `given` is the cluster's secret.
    pub fn is_secret(&self, given: &str) -> bool {
        crate::secret::matches(&self.secret, given)
    }

    /// The client requests to other nodes go through.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// What `GET /_cluster/rebalance` answers: the decider's last status
    /// and whether rebalancing is paused.
    pub async fn rebalance_status(self: &Arc<Self>) -> Result<serde_json::Value> {
        let c = Arc::clone(self);
        self.on_runtime(async move {
            let status = crate::decider::status(&c).await?;
            let control = crate::decider::control(&c).await?;
            let mut v = match status {
                Some(s) => serde_json::to_value(s).unwrap_or_default(),
                None => serde_json::json!({"state": "no decider yet"}),
            };
            v["paused"] = serde_json::Value::Bool(control.paused);
            Ok(v)
        })
        .await
    }

    /// Pauses or resumes rebalancing (moves in flight finish; no new ones).
    pub async fn set_rebalance_paused(self: &Arc<Self>, paused: bool) -> Result<()> {
        let c = Arc::clone(self);
        self.on_runtime(async move {
            crate::decider::set_control(&c, crate::decider::RebalanceControl { paused }).await
        })
        .await
    }

    /// The shards (`db range`) of every database with fewer live full
    /// copies than their map names.
    pub fn under_replicated(&self) -> Vec<String> {
        let live = self.view.live().into_keys().collect();
        let mut out = Vec::new();
        for db in self.view.dbs() {
            if let Some(m) = self.view.map(&db) {
                out.extend(
                    crate::decider::under_replicated(&m, &live)
                        .into_iter()
                        .map(|r| format!("{db} {r}")),
                );
            }
        }
        out
    }

    /// The bandwidth limit every shard move this node fills shares.
    pub fn move_throttle(&self) -> &settee_replicator::throttle::Throttle {
        &self.move_throttle
    }

    /// The moves this node is filling, with their progress.
    pub fn moves(&self) -> &crate::move_progress::Registry {
        &self.moves
    }

    /// This node's `_active_tasks` entries (the moves it fills).
    pub fn active_tasks(&self) -> Vec<serde_json::Value> {
        self.moves.active_tasks(&self.info.name)
    }

    /// Marks `node` as leaving (`true`: decommission, its copies move
    /// off) or takes the mark off; answers whether anything changed.
    pub async fn set_leaving(self: &Arc<Self>, node: &str, leaving: bool) -> Result<bool> {
        membership::validate_node_name(node)?;
        let (etcd, node) = (self.etcd.clone(), node.to_string());
        self.on_runtime(async move { crate::leaving::set(&etcd, &node, leaving).await })
            .await
    }

    /// `/_cluster_setup`'s `add_node`: asks the server at `url` (with
    /// `auth`, Basic) its node name, and admits it (a decommission mark
    /// comes off) if it is a live member of this cluster. A Settee node
    /// joins by starting with the cluster's etcd; one that has not is
    /// [`ClusterError::NodeNotAdded`] with how to start it.
    pub async fn add_node(
        self: &Arc<Self>,
        url: &str,
        auth: Option<(String, String)>,
    ) -> Result<String> {
        let not_added = ClusterError::NodeNotAdded;
        let mut req = self
            .http
            .get(format!("{}/_node/_local", url.trim_end_matches('/')))
            .timeout(Duration::from_secs(10));
        if let Some((user, password)) = &auth {
            req = req.basic_auth(user, Some(password));
        }
        let resp = req
            .send()
            .await
            .map_err(|e| not_added(format!("cannot reach the node at {url}: {e}")))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(not_added(format!(
                "the node at {url} answered {status} to GET /_node/_local"
            )));
        }
        let v: serde_json::Value = resp
            .json()
            .await
            .map_err(|e| not_added(format!("the node at {url} answered no JSON: {e}")))?;
        let Some(name) = v["name"].as_str().map(str::to_string) else {
            return Err(not_added(format!("the node at {url} did not say its name")));
        };
        if self.view.member(&name).is_none() {
            return Err(not_added(format!(
                "the node at {url} ({name}) is not a member of this cluster: start it with \
                 --cluster-etcd set to this cluster's etcd and --node {name}"
            )));
        }
        self.set_leaving(&name, false).await?;
        Ok(name)
    }

    /// A node as the operator sees it: `live`, `down` or `leaving`
    /// (`None`: never a member), and how many shard copies it holds.
    pub async fn node_state(self: &Arc<Self>, node: &str) -> Result<Option<(String, usize)>> {
        let (etcd, name) = (self.etcd.clone(), node.to_string());
        let (known, leaving) = self
            .on_runtime(async move {
                let known = membership::known_members(&etcd).await?;
                Ok((known.contains_key(&name), crate::leaving::get(&etcd).await?))
            })
            .await?;
        let live = self.view.member(node).is_some();
        if !known && !live && !leaving.contains(node) {
            return Ok(None);
        }
        let copies = self
            .view
            .dbs()
            .iter()
            .filter_map(|db| self.view.map(db))
            .map(|m| m.held_by(node).len())
            .sum();
        let state = match (leaving.contains(node), live) {
            (true, _) => "leaving",
            (false, true) => "live",
            (false, false) => "down",
        };
        Ok(Some((state.to_string(), copies)))
    }

    /// The shard maps in etcd.
    pub fn maps(&self) -> &ShardMaps {
        &self.maps
    }

    /// The connection to etcd (within this crate only).
    pub(crate) fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    /// The node's lease id, while it is registered.
    pub fn lease_id(&self) -> Option<i64> {
        lock(&self.registration)
            .as_ref()
            .map(Registration::lease_id)
    }

    /// The internal replication queue.
    pub fn sync(&self) -> &SyncQueue {
        &self.sync
    }

    /// A database's map: the view's, else etcd's (a database another node
    /// created a moment ago, whose map this node's watch has not seen).
    pub async fn map_of(&self, db: &str) -> Option<Arc<ShardMap>> {
        if let Some(m) = self.view.map(db) {
            return Some(m);
        }
        match self.shard_map(db).await {
            Ok(Some(m)) => {
                self.view.put_map(m);
                self.view.map(db)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(db, error = %e, "cannot read a shard map");
                None
            }
        }
    }

    /// Answers a request for a clustered database ([`crate::fabric`]), on
    /// the coordinator's runtime.
    pub async fn handle(self: &Arc<Self>, req: FabricRequest) -> FabricResponse {
        match self
            .runtime
            .spawn(fabric::handle(Arc::clone(self), req))
            .await
        {
            Ok(r) => r,
            Err(e) => FabricResponse::error(
                http::StatusCode::INTERNAL_SERVER_ERROR,
                "error",
                format!("the coordinator's task failed: {e}"),
            ),
        }
    }

    /// Whether the node's lease is certainly alive (it is a member).
    pub fn is_live(&self) -> bool {
        lock(&self.registration)
            .as_ref()
            .is_some_and(Registration::is_live)
    }

    /// Leaves the cluster: stops the shard keeper and revokes the lease
    /// (the node's key is gone at once). Bounded by the request timeout.
    pub async fn leave(&self) -> Result<()> {
        let _ = self.stop.send(true);
        let tasks = std::mem::take(&mut *lock(&self.keeper));
        for task in tasks {
            if tokio::time::timeout(KEEPER_POLL * 4, task).await.is_err() {
                tracing::warn!("a coordinator task did not stop in time");
            }
        }
        let registration = lock(&self.registration).take();
        match registration {
            Some(r) => self.on_runtime(r.leave()).await,
            None => Ok(()),
        }
    }

    /// Runs `fut` on the coordinator's runtime and waits for it.
    async fn on_runtime<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        self.runtime
            .spawn(fut)
            .await
            .map_err(|e| ClusterError::Etcd {
                op: "coordinator task",
                reason: e.to_string(),
            })?
    }

    /// The live members (`all_nodes`) and every member that ever joined
    /// (`cluster_nodes`), both sorted by name.
    pub async fn membership(&self) -> Result<Membership> {
        let etcd = self.etcd.clone();
        self.on_runtime(async move {
            let live = membership::members(&etcd).await?.value;
            let mut known: BTreeSet<String> = membership::known_members(&etcd)
                .await?
                .into_keys()
                .collect();
            known.extend(live.keys().cloned());
            Ok(Membership {
                all_nodes: live.into_keys().collect(),
                cluster_nodes: known.into_iter().collect(),
            })
        })
        .await
    }

    /// A database's shard map (`None`: no such database in the cluster).
    pub async fn shard_map(&self, db: &str) -> Result<Option<ShardMap>> {
        let (maps, db) = (self.maps.clone(), db.to_string());
        self.on_runtime(async move { Ok(maps.get(&db).await?.map(|v| v.value)) })
            .await
    }

    /// Creates a database: its map (placed over the live members; `n`
    /// at most their number), stored only if the database has none
    /// ([`ClusterError::ShardMapExists`]), then this node's copies.
    pub async fn create_db(&self, spec: CreateDb) -> Result<ShardMap> {
        if !self.is_live() {
            return Err(ClusterError::LeaseLost(self.info.name.clone()));
        }
        let (etcd, maps) = (self.etcd.clone(), self.maps.clone());
        let map = self
            .on_runtime(async move {
                let defaults = settings::get(&etcd).await?.value;
                // A leaving node takes no new copies.
                let leaving = crate::leaving::get(&etcd).await?;
                let live: Vec<String> = membership::members(&etcd)
                    .await?
                    .value
                    .into_keys()
                    .filter(|n| !leaving.contains(n))
                    .collect();
                let q = spec.q.unwrap_or(defaults.q);
                let n = effective_n(spec.n.unwrap_or(defaults.n), live.len());
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                let map = ShardMap::new(&spec.db, q, n, &live, now, spec.partitioned)?;
                maps.create(&map).await?;
                Ok(map)
            })
            .await?;
        self.create_copies(&map).await?;
        self.view.put_map(map.clone());
        tracing::info!(db = %map.db, q = map.q(), "database created in the cluster");
        Ok(map)
    }

    /// Deletes a database: its map at the revision read (read again if
    /// another writer changed it meanwhile), then this node's copies.
    pub async fn delete_db(&self, db: &str) -> Result<()> {
        if !self.is_live() {
            return Err(ClusterError::LeaseLost(self.info.name.clone()));
        }
        let (maps, name) = (self.maps.clone(), db.to_string());
        let map = self
            .on_runtime(async move {
                let mut attempt = 0;
                loop {
                    let Some(current) = maps.get(&name).await? else {
                        return Err(ClusterError::NoShardMap(name));
                    };
                    match maps.delete(&name, current.revision).await {
                        Ok(()) => return Ok(current.value),
                        Err(ClusterError::ShardMapConflict { .. })
                            if attempt + 1 < DELETE_ATTEMPTS =>
                        {
                            attempt += 1;
                        }
                        Err(e) => return Err(e),
                    }
                }
            })
            .await?;
        self.view.remove_map(db);
        let names: Vec<String> = map
            .held_by(&self.info.name)
            .iter()
            .map(|r| map.shard_name(*r))
            .collect();
        self.delete_local(names).await
    }

    /// Creates the copies `map` places on this node that the engine lacks.
    async fn create_copies(&self, map: &ShardMap) -> Result<()> {
        let names: Vec<String> = map
            .held_by(&self.info.name)
            .iter()
            .map(|r| map.shard_name(*r))
            .collect();
        if names.is_empty() {
            return Ok(());
        }
        let (engine, partitioned) = (self.engine.clone(), map.partitioned());
        blocking(move || {
            for name in &names {
                match engine.create_db_with(name, None, partitioned) {
                    Ok(_) => tracing::debug!(shard = %name, "shard copy created"),
                    Err(settee_db::Error::DbExists) => {}
                    Err(e) => return Err(local(format!("cannot create {name}: {e}"))),
                }
            }
            Ok(())
        })
        .await
    }

    /// Deletes local shard copies by name (those already gone are fine).
    pub(crate) async fn delete_local(&self, names: Vec<String>) -> Result<()> {
        let engine = self.engine.clone();
        blocking(move || {
            for name in &names {
                match engine.delete_db(name) {
                    Ok(()) => tracing::debug!(shard = %name, "shard copy deleted"),
                    Err(settee_db::Error::NotFound(_)) => {}
                    Err(e) => return Err(local(format!("cannot delete {name}: {e}"))),
                }
            }
            Ok(())
        })
        .await
    }

    /// The names of this node's copies of database `db` (any suffix).
    pub(crate) async fn local_copies_of(&self, db: &str) -> Result<Vec<String>> {
        let (engine, db) = (self.engine.clone(), db.to_string());
        blocking(move || {
            let names = engine
                .list_shard_dbs()
                .map_err(|e| local(format!("cannot list shard copies: {e}")))?;
            Ok(names
                .into_iter()
                .filter(|n| parse_shard_name(n).is_some_and(|(_, d, _)| d == db))
                .collect())
        })
        .await
    }

    /// A map was deleted: this node's copies of its database go, except
    /// those a map stored since names (a database created again).
    async fn map_deleted(&self, db: &str) -> Result<()> {
        let mut copies = self.local_copies_of(db).await?;
        if let Some(map) = self.maps.get(db).await? {
            let keep: BTreeSet<String> = map
                .value
                .held_by(&self.info.name)
                .iter()
                .map(|r| map.value.shard_name(*r))
                .collect();
            copies.retain(|c| !keep.contains(c));
        }
        self.delete_local(copies).await
    }
}

/// Follows the maps and keeps this node's copies in line with them, until
/// told to stop; lists again (after a pause) whenever the watch ends.
async fn shard_keeper(c: Arc<Coordinator>, mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        let mut w = match ShardMapWatch::start(&c.etcd).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "cannot follow the shard maps; trying again");
                let _ = tokio::time::timeout(KEEPER_RETRY, stop.changed()).await;
                continue;
            }
        };
        reconcile(&c, &w).await;
        while !*stop.borrow() {
            match w.next(KEEPER_POLL).await {
                Ok(changes) => {
                    for change in changes {
                        let done = match &change {
                            ShardMapChange::Put(m) => {
                                c.view.put_map(m.value.clone());
                                let made = c.create_copies(&m.value).await;
                                crate::mover::spawn_drain(&c, m.value.clone());
                                made
                            }
                            ShardMapChange::Deleted(db) => {
                                c.view.remove_map(db);
                                c.map_deleted(db).await
                            }
                        };
                        if let Err(e) = done {
                            tracing::warn!(error = %e, ?change, "shard copies not brought in line");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "shard map watch ended; listing again");
                    let _ = tokio::time::timeout(KEEPER_RETRY, stop.changed()).await;
                    break;
                }
            }
        }
    }
}

/// Creates every copy the listed maps place on this node that is missing;
/// logs (and keeps) copies no map names.
async fn reconcile(c: &Coordinator, w: &ShardMapWatch) {
    c.view
        .set_maps(w.listed().values().map(|m| m.value.clone()));
    let mut wanted = BTreeSet::new();
    for m in w.listed().values() {
        if let Err(e) = c.create_copies(&m.value).await {
            tracing::warn!(error = %e, db = %m.value.db, "shard copies not created");
        }
        for r in m.value.held_by(&c.info.name) {
            wanted.insert(m.value.shard_name(r));
        }
    }
    let engine = c.engine.clone();
    if let Ok(Ok(names)) = tokio::task::spawn_blocking(move || engine.list_shard_dbs()).await {
        for orphan in names.iter().filter(|n| !wanted.contains(*n)) {
            tracing::warn!(shard = %orphan, "no shard map names this copy; kept");
        }
    }
}

/// Joins again when the node's lease was lost (a pause, or a partition
/// from etcd, longer than the lease): the old lease is revoked if etcd can
/// be reached (its key goes at once), then a new lease and registration,
/// as at start. A name still held by the old lease (etcd has not expired
/// it yet) is tried again at the next tick. Until then the node is not
/// live: it coordinates no writes ([`fabric::handle`]) and decides nothing.
async fn rejoiner(c: Arc<Coordinator>, ttl: Duration, mut stop: watch::Receiver<bool>) {
    let tick = (ttl / 4).max(Duration::from_millis(250));
    while !*stop.borrow() {
        let _ = tokio::time::timeout(tick, stop.changed()).await;
        if *stop.borrow() || c.is_live() {
            continue;
        }
        let old = lock(&c.registration).take();
        if let Some(old) = old {
            let wait = c.etcd.config().request_timeout;
            if let Ok(Err(e)) = tokio::time::timeout(wait, old.leave()).await {
                tracing::warn!(error = %e, "cannot revoke the lost lease; it expires by itself");
            }
        }
        match membership::join(&c.etcd, c.info.clone(), ttl).await {
            Ok(r) => {
                tracing::warn!(node = %c.info.name, "rejoined the cluster after its lease was lost");
                *lock(&c.registration) = Some(r);
            }
            Err(e) => tracing::warn!(error = %e, "cannot rejoin the cluster yet"),
        }
    }
}

/// Follows membership into the view; a member that joins has every shard
/// copy this node shares with it pushed to it (it may have missed writes).
async fn member_watcher(c: Arc<Coordinator>, mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        let mut w = match MembershipWatch::start(&c.etcd).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "cannot follow membership; trying again");
                let _ = tokio::time::timeout(KEEPER_RETRY, stop.changed()).await;
                continue;
            }
        };
        c.view.set_live(w.members().clone());
        while !*stop.borrow() {
            match w.next(KEEPER_POLL).await {
                Ok(changes) => {
                    for change in changes {
                        match change {
                            MembershipChange::Joined(info) => {
                                let name = info.name.clone();
                                c.view.joined(info);
                                for db in c.view.dbs() {
                                    if let Some(map) = c.view.map(&db) {
                                        crate::sync::push_shared(&c, &map, Some(&name));
                                    }
                                }
                            }
                            MembershipChange::Left(name) => c.view.left(&name),
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "membership watch ended; listing again");
                    let _ = tokio::time::timeout(KEEPER_RETRY, stop.changed()).await;
                    break;
                }
            }
        }
    }
}

/// Runs blocking engine work on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| local(format!("engine task failed: {e}")))?
}

fn local(reason: String) -> ClusterError {
    ClusterError::Local(reason)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
