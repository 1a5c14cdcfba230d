//! The server's shared state: the engine, configuration, authenticator,
//! id generator, counters and idle polling. One `App` per server, shared by every request.
//!
//! Invariant: handlers reach databases only through [`App::db`], which
//! checks the name first, so every illegal name is a 400 before storage
//! is touched.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use settee_core::name::validate_db_name;
use settee_db::{Database, Engine};
use settee_design::{Design, DesignConfig};
use settee_js::{JsConfig, JsEngine, JsError};

use crate::auth::{Auth, SecurityObject};
use crate::config::Config;
use crate::error::ApiResult;
use crate::idle_poll::IdlePoll;
use crate::uuids::Uuids;

/// The name this single node reports.
pub const NODE_NAME: &str = "settee@127.0.0.1";

/// Request counters for `/_node/_local/_stats`.
#[derive(Debug)]
pub struct Stats {
    pub requests: AtomicU64,
    pub methods: [AtomicU64; 8],
    /// Responses by status code (100..=599).
    pub statuses: Box<[AtomicU64]>,
    pub bulk_requests: AtomicU64,
    pub docs_read: AtomicU64,
    pub docs_written: AtomicU64,
    /// `couchdb.request_time`.
    pub request_times: crate::request_time::RequestTimes,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            requests: AtomicU64::new(0),
            methods: Default::default(),
            statuses: (0..600).map(|_| AtomicU64::new(0)).collect(),
            bulk_requests: AtomicU64::new(0),
            docs_read: AtomicU64::new(0),
            docs_written: AtomicU64::new(0),
            request_times: Default::default(),
        }
    }
}

pub const METHOD_NAMES: [&str; 8] = [
    "GET", "HEAD", "PUT", "POST", "DELETE", "COPY", "OPTIONS", "OTHER",
];

impl Stats {
    pub fn count_request(&self, method: &axum::http::Method) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let i = METHOD_NAMES
            .iter()
            .position(|m| *m == method.as_str())
            .unwrap_or(7);
        self.methods[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count_status(&self, status: u16) {
        if let Some(c) = self.statuses.get(usize::from(status)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[derive(Debug)]
pub struct AppState {
    pub engine: Engine,
    pub config: Arc<Config>,
    pub auth: Auth,
    pub uuids: Uuids,
    pub stats: Stats,
    pub server_uuid: String,
    pub started: Instant,
    /// Databases whose compaction was started over HTTP (for `_active_tasks`).
    pub compactions: Mutex<BTreeSet<String>>,
    /// Set to true when the server shuts down; streaming feeds end.
    pub closing: tokio::sync::watch::Sender<bool>,
    /// Told about every request when idle polling is on.
    pub idle_poll: Option<IdlePoll>,
    /// The JavaScript workers design-document functions run on.
    pub js: Arc<JsEngine>,
    /// The views of every database.
    pub views: settee_views::Views,
    /// The search indexes of every database (under `search/` in the data
    /// directory, beside the storage engine's).
    pub search: settee_search::Search,
    /// `validate_doc_update` and changes filters (on `js`).
    pub design: Design,
    /// Parsed security objects by database, each with the stored text it
    /// was parsed from (re-parsed when the database's text changes).
    pub security: Mutex<HashMap<String, ParsedSecurity>>,
    /// The replications this server runs (`_replicate`, `_scheduler`).
    pub replicator: Arc<settee_replicator::Scheduler>,
    /// The jobs of the `_replicator` database's documents.
    pub replicator_docs: Arc<crate::replicator_db::Manager>,
    /// The address the server listens on (set by [`crate::serve`]): local
    /// database names in a replication are reached through it.
    pub local_addr: std::sync::OnceLock<std::net::SocketAddr>,
    /// The coordinator, when this server is a member of a cluster (set
    /// once, before serving).
    pub cluster: std::sync::OnceLock<Arc<settee_cluster::Coordinator>>,
    /// The automatic purge of deleted documents (started with the state).
    pub purger: std::sync::OnceLock<settee_purger::Purger>,
}

/// `[replicator] max_jobs`, `max_churn` and `interval`, live.
fn apply_replicator_settings(s: &settee_replicator::Scheduler, settings: &crate::config::Settings) {
    s.set_max_jobs(usize::try_from(settings.replicator_max_jobs).unwrap_or(usize::MAX));
    s.set_max_churn(usize::try_from(settings.replicator_max_churn).unwrap_or(usize::MAX));
    s.set_interval(std::time::Duration::from_millis(
        settings.replicator_interval_ms,
    ));
}

/// A database's stored security text and the object parsed from it.
pub type ParsedSecurity = (Arc<str>, Arc<SecurityObject>);

pub type App = Arc<AppState>;

impl AppState {
    /// Hands the settings the engine applies itself to it (after a
    /// configuration change).
    pub fn apply_settings(&self) {
        let settings = self.config.settings();
        self.engine
            .set_att_compression(settings.att_compression.clone());
        apply_replicator_settings(&self.replicator, &settings);
        if let Some(p) = self.purger.get() {
            p.set_settings(crate::purge_holds::settings(&self.config));
        }
    }

    /// The server's state; fails only when the JavaScript workers cannot
    /// be started.
    pub fn new(
        engine: Engine,
        config: Arc<Config>,
        idle_poll: Option<IdlePoll>,
    ) -> Result<App, JsError> {
        let settings = config.settings();
        engine.set_att_compression(settings.att_compression.clone());
        let js = Arc::new(JsEngine::new(JsConfig {
            timeout: std::time::Duration::from_millis(settings.os_process_timeout_ms.max(1)),
            reduce_limit: settings.reduce_limit,
            ..JsConfig::default()
        })?);
        let server_uuid = match config.get("couchdb", "uuid") {
            Some(u) => u,
            None => {
                let u = Uuids::default().next(crate::config::UuidAlgorithm::Random, "");
                // Failing to persist only means a new uuid next start.
                if let Err(e) = config.set("couchdb", "uuid", &u) {
                    tracing::warn!(reason = %e.reason, "cannot store server uuid");
                }
                u
            }
        };
        let views = settee_views::Views::new(Arc::clone(&js));
        // Indexes in use catch up in the background a second after writes.
        if let Err(e) = views.start_auto_update(engine.clone(), std::time::Duration::from_secs(1)) {
            tracing::warn!(error = %e, "cannot start background view updates");
        }
        let search = settee_search::Search::new(
            Arc::clone(&js),
            config.data_dir().map(|d| d.join("search")),
        )
        .map_err(|e| JsError::Unavailable {
            reason: format!("cannot open the search index directory: {e}"),
        })?;
        // Search indexes in use catch up in the background as views do.
        if let Err(e) = search.start_auto_update(engine.clone(), std::time::Duration::from_secs(1))
        {
            tracing::warn!(error = %e, "cannot start background search index updates");
        }
        let scheduler = Arc::new(settee_replicator::Scheduler::new(
            server_uuid.clone(),
            NODE_NAME.to_string(),
        ));
        apply_replicator_settings(&scheduler, &settings);
        let replicator_docs = Arc::new(crate::replicator_db::Manager::new(
            engine.clone(),
            Arc::clone(&scheduler),
            NODE_NAME.to_string(),
        ));
        let app = Arc::new(AppState {
            engine,
            auth: Auth::new(config.clone()),
            config,
            uuids: Uuids::default(),
            stats: Stats::default(),
            server_uuid,
            started: Instant::now(),
            compactions: Mutex::new(BTreeSet::new()),
            closing: tokio::sync::watch::channel(false).0,
            idle_poll,
            views,
            search,
            design: Design::new(Arc::clone(&js), DesignConfig::default()),
            security: Mutex::new(HashMap::new()),
            replicator: Arc::clone(&scheduler),
            replicator_docs,
            local_addr: std::sync::OnceLock::new(),
            cluster: std::sync::OnceLock::new(),
            purger: std::sync::OnceLock::new(),
            js,
        });
        let holds = Arc::new(crate::purge_holds::ServerHolds(Arc::downgrade(&app)));
        match settee_purger::Purger::start(
            app.engine.clone(),
            holds,
            crate::purge_holds::settings(&app.config),
        ) {
            Ok(p) => {
                let _ = app.purger.set(p);
            }
            Err(e) => tracing::warn!(error = %e, "cannot start the automatic purge"),
        }
        Ok(app)
    }

    /// Stops the server's own background threads (view and search index
    /// updates, the purger) and waits for them; called once serving has
    /// ended, before the engine closes.
    pub fn stop_background(&self) {
        if let Some(p) = self.purger.get() {
            p.stop();
        }
        self.views.stop_auto_update();
        self.search.stop_auto_update();
    }

    /// Opens a database by name (404 if absent; an illegal name names no
    /// database, so it is absent too, as CouchDB answers: only creating
    /// one refuses the name).
    pub fn db(&self, name: &str) -> ApiResult<Database> {
        // A cluster member's shard copies (routes let only the cluster
        // itself name them).
        let shard = self.cluster.get().is_some() && settee_core::name::is_shard_db_name(name);
        if !shard && validate_db_name(name).is_err() {
            return Err(settee_db::Error::NotFound("Database does not exist.").into());
        }
        Ok(self.engine.db(name)?)
    }

    /// The security object stored for database `name`; None when there is
    /// no such database or it never had one. A stored object that no
    /// longer parses (it was validated when written) admits server admins
    /// only.
    pub fn security_of(&self, name: &str) -> Option<Arc<SecurityObject>> {
        let text = self.engine.db(name).ok()?.security()?;
        let mut cache = self.security.lock();
        if let Some((t, sec)) = cache.get(name) {
            if Arc::ptr_eq(t, &text) {
                return Some(Arc::clone(sec));
            }
        }
        let parsed = serde_json::from_str(&text)
            .ok()
            .and_then(|v| SecurityObject::parse(&v).ok())
            .unwrap_or_else(SecurityObject::admin_only);
        let sec = Arc::new(parsed);
        if cache.len() >= 4096 {
            cache.clear();
        }
        cache.insert(name.to_string(), (text, Arc::clone(&sec)));
        Some(sec)
    }

    /// The coordinator when this server is a member of a cluster.
    pub fn coordinator(&self) -> Option<&Arc<settee_cluster::Coordinator>> {
        self.cluster.get()
    }

    pub fn new_uuid(&self) -> String {
        let s = self.config.settings();
        self.uuids.next(s.uuid_algorithm, &s.utc_id_suffix)
    }
}
