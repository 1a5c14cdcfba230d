//! The `_replicator` database: replications as documents, as in CouchDB 3.
//!
//! - Writes (`PUT`/`POST` of a document) are checked as a replication
//!   definition first: an invalid one is refused with 403 `forbidden` and
//!   the reason (a local database name: `local_endpoints_not_supported`, as
//!   CouchDB 3 refuses it); the document gets `owner`: the writer's name.
//! - [`Manager`] follows the database: every document without a final
//!   state runs as a job of the server's [`settee_replicator::Scheduler`];
//!   a changed document restarts its job, a deleted one stops it; a
//!   one-shot job that ends writes `_replication_state` (`completed` or
//!   `failed`), `_replication_state_time`, `_replication_state_reason` and
//!   `_replication_stats` back into its document, which then stays done.
//!   Jobs are restarted from the documents when the server starts.
//! - `/_scheduler/docs` lists the documents' states.
//!
//! Invariant: one document runs at most one job, and a document in a final
//! state runs none; the manager's own write-back never restarts a job (it
//! changes only `_replication_*` fields, which are not part of the
//! definition).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use settee_core::doc::Doc;
use settee_db::reader::IdRange;
use settee_db::{Database, Engine, UpdateOptions};
use settee_replicator::{RepError, Spec};

use crate::auth::UserCtx;
use crate::error::{ApiError, ApiResult};

pub const REPLICATOR_DB: &str = "_replicator";

/// Whether database `name` holds replication documents: `_replicator`, or
/// any database whose name ends in `/_replicator` (as CouchDB allows).
pub fn is_replicator_db(name: &str) -> bool {
    name == REPLICATOR_DB || name.ends_with("/_replicator")
}

/// A replication document: (its database, its id).
type DocKey = (String, String);

/// Creates `_replicator` (admin-only, as CouchDB creates it) if absent.
pub fn ensure_replicator_db(engine: &Engine) -> settee_db::Result<()> {
    crate::auth::ensure_admin_only_db(engine, REPLICATOR_DB)
}

/// The definition part of a replication document: every member but the
/// `_`-prefixed ones and `owner`.
fn definition(doc: &Map<String, Value>) -> Map<String, Value> {
    doc.iter()
        .filter(|(k, _)| !k.starts_with('_') && k.as_str() != "owner")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Checks a document written to `_replicator` and names its owner.
/// Nothing for other databases, design or deleted documents, or
/// replicated revisions.
pub fn before_write(
    user: &UserCtx,
    db: &Database,
    mut doc: Map<String, Value>,
    new_edits: bool,
) -> ApiResult<Map<String, Value>> {
    let id = doc.get("_id").and_then(Value::as_str).unwrap_or_default();
    let deleted = doc.get("_deleted").and_then(Value::as_bool) == Some(true);
    if !is_replicator_db(db.name()) || !new_edits || deleted || id.starts_with("_design/") {
        return Ok(doc);
    }
    match Spec::parse(&Value::Object(definition(&doc)), None) {
        Ok(_) => {}
        Err(RepError::LocalEndpoint) => {
            return Err(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "forbidden",
                "local_endpoints_not_supported",
            ))
        }
        // CouchDB's reason is its Erlang term of the refusal.
        Err(RepError::BadRequest(r)) => {
            return Err(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "forbidden",
                format!("{{throw,{{bad_request,<<\"{r}\">>}}}}"),
            ))
        }
        Err(e) => {
            return Err(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "forbidden",
                e.to_string(),
            ))
        }
    }
    if let Some(name) = &user.name {
        doc.insert("owner".into(), json!(name));
    }
    Ok(doc)
}

/// What `/_scheduler/docs` shows of one document.
#[derive(Debug, Clone)]
struct DocState {
    /// The definition the job runs (to see whether the document changed).
    definition: Map<String, Value>,
    /// `initializing`, `running`, `crashing`, `completed`, `failed`.
    state: String,
    id: Option<String>,
    info: Value,
    error_count: u64,
    start_time: String,
    last_updated: String,
    stop: Option<tokio::sync::watch::Sender<bool>>,
}

/// Follows `_replicator` and runs its documents.
#[derive(Debug)]
pub struct Manager {
    engine: Engine,
    scheduler: Arc<settee_replicator::Scheduler>,
    docs: Mutex<BTreeMap<DocKey, DocState>>,
    node: String,
}

fn now_iso() -> String {
    settee_replicator::scheduler::iso_now()
}

impl Manager {
    pub fn new(
        engine: Engine,
        scheduler: Arc<settee_replicator::Scheduler>,
        node: String,
    ) -> Manager {
        Manager {
            engine,
            scheduler,
            docs: Mutex::new(BTreeMap::new()),
            node,
        }
    }

    /// Runs until `closing` turns true: reconciles the jobs with the
    /// documents at start and after every change of the database. Then
    /// stops every document's job (each writes its last checkpoint).
    pub async fn follow(self: Arc<Self>, closing: tokio::sync::watch::Receiver<bool>) {
        self.follow_until(closing).await;
        for st in self.docs.lock().values_mut() {
            if let Some(stop) = st.stop.take() {
                let _ = stop.send(true);
            }
        }
    }

    async fn follow_until(self: &Arc<Self>, mut closing: tokio::sync::watch::Receiver<bool>) {
        // Each database's documents are read again only when it is new,
        // recreated or changed since they were last read: (creation time,
        // update sequence) then.
        let mut read: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        loop {
            let names: Vec<String> = match self.engine.list_dbs() {
                Ok(all) => all.into_iter().filter(|n| is_replicator_db(n)).collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list databases");
                    Vec::new()
                }
            };
            read.retain(|name, _| names.contains(name));
            let mut watches = Vec::new();
            for name in &names {
                let Ok(db) = self.engine.db(name) else {
                    continue;
                };
                watches.push(db.subscribe());
                let state = (db.created_us(), db.update_seq());
                if read.get(name) == Some(&state) {
                    continue;
                }
                match Self::reconcile(self, name, &db) {
                    Ok(()) => {
                        read.insert(name.clone(), state);
                    }
                    Err(e) => {
                        tracing::warn!(db = %name, error = %e, "cannot read a replicator database");
                    }
                }
            }
            // Documents of databases that are gone stop their jobs.
            {
                let mut docs = self.docs.lock();
                let gone: Vec<DocKey> = docs
                    .keys()
                    .filter(|(db, _)| !names.contains(db))
                    .cloned()
                    .collect();
                for key in gone {
                    if let Some(stop) = docs.remove(&key).and_then(|st| st.stop) {
                        let _ = stop.send(true);
                    }
                }
            }
            let any_change = async {
                if watches.is_empty() {
                    std::future::pending::<()>().await;
                }
                let _ = futures_util::future::select_all(
                    watches.iter_mut().map(|w| Box::pin(w.changed())),
                )
                .await;
            };
            tokio::select! {
                _ = any_change => {}
                // New and recreated databases: look again now and then.
                _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
                _ = closing.changed() => return,
            }
            if *closing.borrow() {
                return;
            }
        }
    }

    /// Starts, restarts and stops jobs to match the documents.
    fn reconcile(self: &Arc<Self>, db_name: &str, db: &Database) -> settee_db::Result<()> {
        let mut found: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
        let reader = db.reader()?;
        let q = IdRange::default();
        reader.all_docs(&q, true, false, &mut |row| {
            if row.id.starts_with("_design/") {
                return true;
            }
            if let Some(d) = row.doc {
                found.insert(row.id, d.body.to_map());
            }
            true
        })?;
        let mut docs = self.docs.lock();
        // Deleted documents stop their jobs.
        let gone: Vec<DocKey> = docs
            .keys()
            .filter(|(d, id)| d == db_name && !found.contains_key(id))
            .cloned()
            .collect();
        for key in gone {
            if let Some(st) = docs.remove(&key) {
                if let Some(stop) = st.stop {
                    let _ = stop.send(true);
                }
            }
        }
        for (id, body) in found {
            let key: DocKey = (db_name.to_string(), id);
            let def = definition(&body);
            let final_state = body
                .get("_replication_state")
                .and_then(Value::as_str)
                .filter(|s| matches!(*s, "completed" | "failed"));
            if let Some(st) = docs.get(&key) {
                if st.definition == def {
                    continue;
                }
                // The definition changed: stop the old job.
                if let Some(stop) = &st.stop {
                    let _ = stop.send(true);
                }
            }
            let now = now_iso();
            if let Some(fs) = final_state {
                docs.insert(
                    key.clone(),
                    DocState {
                        definition: def,
                        state: fs.to_string(),
                        id: body
                            .get("_replication_id")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                        info: body
                            .get("_replication_stats")
                            .cloned()
                            .unwrap_or(Value::Null),
                        error_count: 0,
                        start_time: now.clone(),
                        last_updated: now,
                        stop: None,
                    },
                );
                continue;
            }
            let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
            docs.insert(
                key.clone(),
                DocState {
                    definition: def.clone(),
                    state: "initializing".into(),
                    id: None,
                    info: Value::Null,
                    error_count: 0,
                    start_time: now.clone(),
                    last_updated: now,
                    stop: Some(stop_tx),
                },
            );
            let me = Arc::clone(self);
            let owner = body
                .get("owner")
                .and_then(Value::as_str)
                .map(str::to_string);
            tokio::spawn(async move { me.run_doc(key, def, owner, stop_rx).await });
        }
        Ok(())
    }

    fn set(&self, key: &DocKey, def: &Map<String, Value>, f: impl FnOnce(&mut DocState)) {
        let mut docs = self.docs.lock();
        if let Some(st) = docs.get_mut(key) {
            if &st.definition == def {
                f(st);
                st.last_updated = now_iso();
            }
        }
    }

    /// Runs one document's replication; a one-shot one writes its result
    /// back into the document.
    async fn run_doc(
        self: Arc<Self>,
        key: DocKey,
        def: Map<String, Value>,
        owner: Option<String>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let spec = match Spec::parse(&Value::Object(def.clone()), None) {
            Ok(s) => s,
            Err(e) => {
                self.finish(&key, &def, Err(e)).await;
                return;
            }
        };
        let continuous = spec.continuous;
        let stopped = stop.clone();
        let result = self
            .scheduler
            .run_doc_job(spec, owner, key.clone(), stop, &|state, rep_id, error| {
                self.set(&key, &def, |st| {
                    st.state = state.to_string();
                    if let Some(id) = rep_id {
                        st.id = Some(id.to_string());
                    }
                    if let Some(e) = error {
                        st.error_count += 1;
                        st.info = json!({"error": e});
                    }
                });
            })
            .await;
        // A job stopped (its document changed or went, or the server is
        // stopping) leaves its document as it is.
        if !continuous && !*stopped.borrow() {
            self.finish(&key, &def, result).await;
        }
    }

    /// Writes a one-shot job's final state into its document (unless the
    /// document changed meanwhile: its new definition runs instead).
    async fn finish(
        &self,
        key: &DocKey,
        def: &Map<String, Value>,
        result: Result<Value, RepError>,
    ) {
        let (state, reason, stats) = match &result {
            Ok(out) => {
                let mut stats = Map::new();
                if let Some(h) = out.get("history").and_then(|h| h.get(0)) {
                    for k in [
                        "revisions_checked",
                        "missing_revisions_found",
                        "docs_read",
                        "docs_written",
                        "doc_write_failures",
                    ] {
                        let src = match k {
                            "revisions_checked" => "missing_checked",
                            "missing_revisions_found" => "missing_found",
                            other => other,
                        };
                        stats.insert(k.into(), h.get(src).cloned().unwrap_or(json!(0)));
                    }
                    stats.insert(
                        "checkpointed_source_seq".into(),
                        out["source_last_seq"].clone(),
                    );
                }
                ("completed", None, Some(Value::Object(stats)))
            }
            Err(e) => ("failed", Some(e.to_string()), None),
        };
        self.set(key, def, |st| {
            st.state = state.into();
            st.stop = None;
            if let Some(s) = &stats {
                st.info = s.clone();
            }
            if let Some(r) = &reason {
                st.info = json!({"error": r});
            }
        });
        if let Err(e) = self.write_back(key, def, state, reason, stats).await {
            tracing::warn!(db = %key.0, doc_id = %key.1, error = ?e, "cannot record the replication's state");
        }
    }

    async fn write_back(
        &self,
        (db_name, doc_id): &DocKey,
        def: &Map<String, Value>,
        state: &str,
        reason: Option<String>,
        stats: Option<Value>,
    ) -> ApiResult<()> {
        let db = self.engine.db(db_name)?;
        let read = db
            .reader()?
            .get(doc_id, &settee_db::reader::GetOptions::default());
        let doc_id = doc_id.as_str();
        let Ok(cur) = read else { return Ok(()) };
        if cur.deleted {
            return Ok(());
        }
        let mut body = cur.body.to_map();
        if &definition(&body) != def {
            return Ok(());
        }
        body.insert("_id".into(), json!(doc_id));
        body.insert("_rev".into(), json!(cur.rev.to_string()));
        body.insert("_replication_state".into(), json!(state));
        body.insert("_replication_state_time".into(), json!(now_iso()));
        body.remove("_replication_state_reason");
        body.remove("_replication_stats");
        if let Some(r) = reason {
            body.insert("_replication_state_reason".into(), json!(r));
        }
        if let Some(s) = stats {
            body.insert("_replication_stats".into(), s);
        }
        let doc = Doc::from_json(Value::Object(body), || doc_id.to_string())?;
        let results = db.update_async(vec![doc], UpdateOptions::default()).await?;
        if let Some(Err(e)) = results.into_iter().next() {
            tracing::warn!(db = %db_name, doc_id, error = ?e, "replication state not recorded");
        }
        Ok(())
    }

    /// The source URLs of the documents whose job is not registered with
    /// the scheduler (starting, or crashing before it could): their jobs
    /// will read their source from a checkpoint this server does not know
    /// yet. Running jobs are the scheduler's to report.
    pub fn unstarted_sources(&self) -> Vec<url::Url> {
        self.docs
            .lock()
            .values()
            .filter(|st| st.state == "initializing" || st.state == "crashing")
            .filter_map(|st| url::Url::parse(endpoint_url(st.definition.get("source")?)?).ok())
            .collect()
    }

    /// `GET /_scheduler/docs`: every replication document (`db`: those of
    /// one database; `doc`: one document, None when unknown).
    pub fn docs_json(&self, db: Option<&str>, doc: Option<&str>) -> Option<Value> {
        let docs = self.docs.lock();
        let one = |(db, id): &DocKey, st: &DocState| {
            json!({
                "database": db,
                "doc_id": id,
                "id": st.id,
                "node": self.node,
                "source": st.definition.get("source").map(redact),
                "target": st.definition.get("target").map(redact),
                "state": st.state,
                "info": st.info,
                "error_count": st.error_count,
                "last_updated": st.last_updated,
                "start_time": st.start_time,
            })
        };
        match (db, doc) {
            (Some(db), Some(id)) => {
                let key = (db.to_string(), id.to_string());
                docs.get(&key).map(|st| one(&key, st))
            }
            _ => {
                let list: Vec<Value> = docs
                    .iter()
                    .filter(|((d, _), _)| db.is_none_or(|want| want == d))
                    .map(|(k, st)| one(k, st))
                    .collect();
                Some(json!({"total_rows": list.len(), "offset": 0, "docs": list}))
            }
        }
    }
}

/// The URL an endpoint of a replication document names (a string, or an
/// object's `url`).
fn endpoint_url(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) => Some(s.as_str()),
        Value::Object(o) => o.get("url").and_then(Value::as_str),
        _ => None,
    }
}

/// An endpoint as `_scheduler/docs` shows it: its URL without credentials.
fn redact(v: &Value) -> Value {
    let url = endpoint_url(v).unwrap_or_default();
    match url::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            json!(u.to_string())
        }
        Err(_) => Value::Null,
    }
}
