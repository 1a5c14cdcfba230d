//! The server's views: which index serves a design document, and the
//! operations on views by name (query, info, cleanup).
//!
//! Invariants:
//! - One [`Index`] per (database incarnation, signature): design documents
//!   with equal signatures share it, and a database deleted and created
//!   again never meets its predecessor's indexes (its incarnation differs,
//!   and so does its index space).
//! - A design document is parsed once per revision ([`IndexSpec`] cached
//!   by database, id and revision); every query still reads the design
//!   document's current revision, so an edit takes effect at once.
//! - Caches are bounded ([`CACHE_MAX`] entries each; past it they are
//!   emptied and refilled on demand).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};
use settee_db::json::{push_doc, Extras};
use settee_db::{Database, DocRead, Engine, GetOptions, IndexBatch, IndexSnapshot};
use settee_js::JsEngine;

use crate::args::{Update, ViewArgs, ViewKind};
use crate::error::{Result, ViewError};
use crate::index::Index;
use crate::layout::{self, IndexState, RowValue};
use crate::query::{Out, Query};
use crate::spec::IndexSpec;

/// Most entries of each cache.
pub const CACHE_MAX: usize = 4096;

/// Most rows a quick query may skip ([`Views::query_quick`]).
const QUICK_SKIP_MAX: u64 = 1000;

/// Most keys a quick query may look up.
const QUICK_KEYS_MAX: usize = 64;

/// A database incarnation: its name and creation time.
type DbKey = (String, u64);

fn db_key(db: &Database) -> DbKey {
    (db.name().to_string(), db.created_us())
}

/// Parsed design documents: (database, id) → (revision, spec).
type SpecCache = HashMap<(DbKey, String), (String, Arc<IndexSpec>)>;

/// Indexes in use: (database, signature) → index.
pub(crate) type IndexCache = HashMap<(DbKey, [u8; 16]), Arc<Index>>;

/// The ids of a database's design documents, in id order.
pub fn design_ids(db: &Database) -> Result<Vec<String>> {
    let reader = db.reader()?;
    let range = settee_db::IdRange {
        start: Some("_design/".into()),
        end: Some("_design0".into()),
        inclusive_end: false,
        ..settee_db::IdRange::default()
    };
    let mut ids = Vec::new();
    reader.all_docs(&range, false, false, &mut |row| {
        ids.push(row.id);
        true
    })?;
    Ok(ids)
}

/// The server's views.
pub struct Views {
    js: Arc<JsEngine>,
    specs: Mutex<SpecCache>,
    indexes: Arc<Mutex<IndexCache>>,
    /// The background updates, once started.
    auto: Mutex<Option<crate::auto::AutoUpdate>>,
}

impl std::fmt::Debug for Views {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Views")
            .field("indexes", &self.indexes.lock().len())
            .finish_non_exhaustive()
    }
}

impl Views {
    pub fn new(js: Arc<JsEngine>) -> Views {
        Views {
            js,
            specs: Mutex::new(HashMap::new()),
            indexes: Arc::new(Mutex::new(HashMap::new())),
            auto: Mutex::new(None),
        }
    }

    pub fn js(&self) -> &JsEngine {
        &self.js
    }

    /// Starts background updates of the indexes in use (see
    /// [`crate::auto`]), looking every `interval`.
    pub fn start_auto_update(&self, engine: Engine, interval: Duration) -> std::io::Result<()> {
        let started = crate::auto::spawn(
            Arc::downgrade(&self.indexes),
            engine,
            Arc::clone(&self.js),
            interval,
        )?;
        // A thread started before stops (outside the lock).
        let previous = self.auto.lock().replace(started);
        drop(previous);
        Ok(())
    }

    /// Stops the background updates and waits for their thread (an index
    /// update under way finishes first); a no-op when none run.
    pub fn stop_auto_update(&self) {
        let running = self.auto.lock().take();
        drop(running);
    }

    /// The index spec of a design document's current revision.
    pub fn spec(&self, db: &Database, ddoc_id: &str) -> Result<Arc<IndexSpec>> {
        let reader = db.latest_reader()?;
        let doc = reader
            .get(ddoc_id, &GetOptions::default())
            .map_err(|e| match e {
                settee_db::Error::NotFound(r) => ViewError::NotFound(r.to_string()),
                e => e.into(),
            })?;
        let rev = doc.rev.to_string();
        let key = (db_key(db), ddoc_id.to_string());
        if let Some((cached_rev, spec)) = self.specs.lock().get(&key) {
            if *cached_rev == rev {
                return Ok(Arc::clone(spec));
            }
        }
        let mut text = String::new();
        push_doc(&mut text, &doc, Extras::default());
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| ViewError::Corrupt(format!("design document: {e}")))?;
        let spec = Arc::new(IndexSpec::from_ddoc_in(&value, db.partitioned())?);
        let mut specs = self.specs.lock();
        if specs.len() >= CACHE_MAX {
            specs.clear();
        }
        specs.insert(key, (rev, Arc::clone(&spec)));
        Ok(spec)
    }

    /// The index of a spec in a database (made on first use).
    pub fn index(&self, db: &Database, spec: Arc<IndexSpec>) -> Arc<Index> {
        let key = (db_key(db), spec.signature);
        let mut indexes = self.indexes.lock();
        if let Some(i) = indexes.get(&key) {
            return Arc::clone(i);
        }
        if indexes.len() >= CACHE_MAX {
            // Only unused ones go: an index in use keeps its update lock.
            indexes.retain(|_, i| Arc::strong_count(i) > 1);
        }
        let i = Arc::new(Index::new(spec, db.index_space()));
        indexes.insert(key, Arc::clone(&i));
        i
    }

    /// Answers a view query (blocking: may build the index first).
    pub fn query(
        &self,
        db: &Database,
        ddoc_id: &str,
        view: &str,
        args: &ViewArgs,
        out: &mut dyn Out,
    ) -> Result<()> {
        let (index, view_no, snap, state) = self.open(db, ddoc_id, view, args)?;
        self.answer(db, index, view_no, args, &snap, &state, out)
    }

    /// Answers a view query only if that is quick — a map query (no
    /// reduce, no JavaScript) with a bounded `skip` and number of `keys`,
    /// on an index that needs no update or lazy one — and says whether it
    /// did. When it does not, nothing is written to `out` and the caller
    /// asks [`Views::query`] on a thread that may block. Its output is not
    /// bounded: the caller stops it through `out` past a size.
    pub fn query_quick(
        &self,
        db: &Database,
        ddoc_id: &str,
        view: &str,
        args: &ViewArgs,
        out: &mut dyn Out,
    ) -> Result<bool> {
        let (index, view_no) = self.resolve(db, ddoc_id, view, args)?;
        let kind = self.kind(&index, view_no);
        if args.reduces(kind)
            || args.skip > QUICK_SKIP_MAX
            || args.keys.as_ref().is_some_and(|k| k.len() > QUICK_KEYS_MAX)
        {
            return Ok(false);
        }
        let snap = index.space().snapshot()?;
        let state = index.state(&snap)?;
        if args.update == Update::True {
            let (update_seq, purge_seq) = db.seqs();
            if state.seq < update_seq || state.purge_seq < purge_seq || index.updater_running() {
                return Ok(false);
            }
        }
        self.answer(db, index, view_no, args, &snap, &state, out)?;
        Ok(true)
    }

    /// Visits the rows of several map queries of one view in turn (each as
    /// [`Query::each_row`] does), on one snapshot of its index (brought up
    /// to date as the first query's `update` says), until `visit` answers
    /// false. Blocking.
    pub fn each_row_of(
        &self,
        db: &Database,
        ddoc_id: &str,
        view: &str,
        queries: &[ViewArgs],
        visit: &mut dyn FnMut(RowValue, Option<DocRead>) -> Result<bool>,
    ) -> Result<()> {
        let Some(first) = queries.first() else {
            return Ok(());
        };
        let (index, view_no, snap, state) = self.open(db, ddoc_id, view, first)?;
        let docs = db.reader()?;
        let blobs = db.blobs();
        let more = std::cell::Cell::new(true);
        let mut tracked = |row: RowValue, doc: Option<DocRead>| {
            more.set(visit(row, doc)?);
            Ok(more.get())
        };
        for args in queries {
            args.validate(self.kind(&index, view_no), index.spec.partitioned)?;
            Query {
                index: &index,
                view: view_no,
                args,
                snap: &snap,
                state: &state,
                docs: &docs,
                blobs: &blobs,
                js: &self.js,
            }
            .each_row(&mut tracked)?;
            if !more.get() {
                break;
            }
        }
        Ok(())
    }

    /// The index and view a query names, brought up to date as
    /// `args.update` says, with a snapshot of it and its state there.
    fn open(
        &self,
        db: &Database,
        ddoc_id: &str,
        view: &str,
        args: &ViewArgs,
    ) -> Result<(Arc<Index>, u16, IndexSnapshot, IndexState)> {
        let (index, view_no) = self.resolve(db, ddoc_id, view, args)?;
        if args.update == Update::True {
            index.update(db, &self.js)?;
        }
        let snap = index.space().snapshot()?;
        let state = index.state(&snap)?;
        Ok((index, view_no, snap, state))
    }

    /// The index and view number a query names, with its arguments checked.
    fn resolve(
        &self,
        db: &Database,
        ddoc_id: &str,
        view: &str,
        args: &ViewArgs,
    ) -> Result<(Arc<Index>, u16)> {
        let spec = self.spec(db, ddoc_id)?;
        let view_no = spec
            .view_number(view)
            .ok_or_else(|| ViewError::NotFound("missing_named_view".into()))?;
        let index = self.index(db, spec);
        args.validate(self.kind(&index, view_no), index.spec.partitioned)?;
        Ok((index, view_no))
    }

    fn kind(&self, index: &Index, view_no: u16) -> ViewKind {
        match index.spec.views[usize::from(view_no)].reduce {
            Some(_) => ViewKind::Reduce,
            None => ViewKind::Map,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn answer(
        &self,
        db: &Database,
        index: Arc<Index>,
        view_no: u16,
        args: &ViewArgs,
        snap: &IndexSnapshot,
        state: &IndexState,
        out: &mut dyn Out,
    ) -> Result<()> {
        let docs = db.reader()?;
        let blobs = db.blobs();
        Query {
            index: &index,
            view: view_no,
            args,
            snap,
            state,
            docs: &docs,
            blobs: &blobs,
            js: &self.js,
        }
        .run(out)?;
        if args.update == Update::Lazy {
            let (db, js) = (db.clone(), Arc::clone(&self.js));
            std::thread::spawn(move || {
                if let Err(e) = index.update(&db, &js) {
                    tracing::warn!(db = %db.name(), error = %e, "lazy view update failed");
                }
            });
        }
        Ok(())
    }

    /// The reduce function of view `view` of design document `ddoc` (as
    /// JSON) run once more over reductions of parts of the view (`values`,
    /// in key order) — what a cluster's coordinator does with the
    /// reductions of each shard. Built-ins combine exactly; JavaScript is
    /// called with `rereduce` set, as CouchDB calls it. A view without a
    /// reduce function is [`ViewError::NotFound`].
    pub fn rereduce(
        &self,
        ddoc: &Value,
        partitioned: bool,
        view: &str,
        values: Vec<Value>,
    ) -> Result<Value> {
        let spec = IndexSpec::from_ddoc_in(ddoc, partitioned)?;
        let def = spec
            .view(view)
            .ok_or_else(|| ViewError::NotFound("missing_named_view".into()))?;
        let reduce = def
            .reduce
            .clone()
            .ok_or_else(|| ViewError::NotFound("no reduce function".into()))?;
        let reducer = crate::reducer::Reducer {
            reduce,
            js: &self.js,
            spec: &spec,
            view_name: view,
        };
        reducer.finish(
            values
                .into_iter()
                .map(settee_index::reduce::Partial::Json)
                .collect(),
        )
    }

    /// Brings a design document's index up to date.
    pub fn update(&self, db: &Database, ddoc_id: &str) -> Result<()> {
        let spec = self.spec(db, ddoc_id)?;
        self.index(db, spec).update(db, &self.js)?;
        Ok(())
    }

    /// `GET /db/_design/ddoc/_info`.
    pub fn info(&self, db: &Database, ddoc_id: &str) -> Result<Value> {
        let spec = self.spec(db, ddoc_id)?;
        let index = self.index(db, Arc::clone(&spec));
        let snap = index.space().snapshot()?;
        let state = index.state(&snap)?;
        let pending = db.update_seq().saturating_sub(state.seq);
        let (from, to) = layout::index_range(&spec.signature);
        // The index's records as stored in files (compressed, approximate;
        // what is still in the store's memory table is not counted):
        // CouchDB's file and active sizes; external, the uncompressed size,
        // is not kept, so the stored size stands for it.
        let size = index.space().approximate_size(&from, &to);
        let compacting = index.compacting.load(std::sync::atomic::Ordering::Relaxed);
        Ok(json!({
            "name": spec.ddoc_name(),
            "view_index": {
                "updates_pending": {"minimum": pending, "preferred": pending, "total": pending},
                "waiting_commit": false,
                "waiting_clients": index.waiting.load(std::sync::atomic::Ordering::Relaxed),
                "updater_running": index.updater_running(),
                "update_seq": state.seq,
                "sizes": {"file": size, "external": size, "active": size},
                "signature": spec.signature_hex(),
                "purge_seq": state.purge_seq,
                "language": spec.language,
                "compact_running": compacting,
                "collator_versions": [settee_core::collate::COLLATOR_VERSION],
            }
        }))
    }

    /// `POST /db/_compact/{ddoc}`: compacts the design document's index in
    /// the store (old versions of its rewritten rows and blocks dropped).
    /// Blocking; `_info` reports `compact_running` meanwhile.
    pub fn compact(&self, db: &Database, ddoc_id: &str) -> Result<()> {
        let spec = self.spec(db, ddoc_id)?;
        let index = self.index(db, Arc::clone(&spec));
        let (from, to) = layout::index_range(&spec.signature);
        index
            .compacting
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let done = index.space().compact(&from, &to);
        index
            .compacting
            .store(false, std::sync::atomic::Ordering::Relaxed);
        Ok(done?)
    }

    /// `POST /db/_view_cleanup`: drops the indexes no current design
    /// document of the database uses.
    pub fn cleanup(&self, db: &Database) -> Result<()> {
        let mut keep: Vec<[u8; 16]> = Vec::new();
        let ids = design_ids(db)?;
        for id in ids {
            if let Ok(spec) = self.spec(db, &id) {
                keep.push(spec.signature);
            }
        }
        // Every signature with data in the index space.
        let snap = db.index_space().snapshot()?;
        let mut found: Vec<[u8; 16]> = Vec::new();
        let mut from: Vec<u8> = Vec::new();
        loop {
            let mut next = None;
            snap.scan(&from, None, false, &mut |k, _| {
                if k.len() >= 16 {
                    let mut sig = [0u8; 16];
                    sig.copy_from_slice(&k[..16]);
                    next = Some(sig);
                }
                Ok(false)
            })?;
            let Some(sig) = next else { break };
            found.push(sig);
            from = layout::index_range(&sig).1;
        }
        let mut batch = IndexBatch::new();
        let space = db.index_space();
        let key = db_key(db);
        for sig in found.into_iter().filter(|s| !keep.contains(s)) {
            let (lo, hi) = layout::index_range(&sig);
            space.delete_range(&mut batch, &lo, &hi);
            self.indexes.lock().remove(&(key.clone(), sig));
        }
        space.write(batch)?;
        Ok(())
    }

    /// How far the built indexes of a database's current design documents
    /// (views and Mango json indexes) have read it: the lowest update
    /// sequence and the lowest purge sequence among them, with the design
    /// document at the lowest sequence; None when no index is built. An
    /// index never built (no state) holds nothing back: when it is built
    /// it reads what is there then. Every index looked at is put among the
    /// indexes in use, so the background updates bring it up to date.
    pub fn purge_hold(&self, db: &Database) -> Result<Option<(u64, u64, String)>> {
        let ids = design_ids(db)?;
        let mut hold: Option<(u64, u64, String)> = None;
        for id in ids {
            let Ok(spec) = self.spec(db, &id) else {
                continue;
            };
            if spec.views.is_empty() {
                continue;
            }
            let index = self.index(db, spec);
            let snap = index.space().snapshot()?;
            let Some(state) = index.stored_state(&snap)? else {
                continue;
            };
            hold = Some(match hold {
                None => (state.seq, state.purge_seq, id),
                Some((seq, purge, by)) => {
                    let (seq, by) = if state.seq < seq {
                        (state.seq, id)
                    } else {
                        (seq, by)
                    };
                    (seq, purge.min(state.purge_seq), by)
                }
            });
        }
        Ok(hold)
    }

    /// The indexes being updated now, for `_active_tasks`: (database,
    /// design document, changes done, total changes, started, updated).
    pub fn active(&self) -> Vec<Value> {
        self.indexes
            .lock()
            .iter()
            .filter(|(_, i)| i.updater_running())
            .map(|((db, _), i)| {
                let p = &i.progress;
                let done = p.changes_done.load(std::sync::atomic::Ordering::Relaxed);
                let total = p.total_changes.load(std::sync::atomic::Ordering::Relaxed);
                json!({
                    "type": "indexer",
                    "database": db.0,
                    "design_document": i.spec.ddoc_id,
                    "changes_done": done,
                    "total_changes": total,
                    "progress": (done * 100).checked_div(total).unwrap_or(0).min(100),
                    "started_on": p.started_s.load(std::sync::atomic::Ordering::Relaxed),
                    "updated_on": p.updated_s.load(std::sync::atomic::Ordering::Relaxed),
                })
            })
            .collect()
    }
}
