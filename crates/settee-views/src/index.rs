//! One index (a design document's views, by signature) and its updater.
//!
//! Invariants:
//! - **One updater at a time.** [`Index::update`] holds the index's update
//!   lock; a caller that finds it taken waits and then finds the index
//!   (nearly) current.
//! - **Incremental** (the shared loop of [`crate::follow`]). An update reads the database's changes after the
//!   index's sequence, a batch of at most [`UPDATE_BATCH`] documents at a
//!   time, from one database snapshot: only those documents are mapped;
//!   each one's old rows (found through its back entry) are replaced by
//!   its new ones, or removed when it is deleted or purged. Purges since
//!   the index's purge sequence are applied the same way; a purge history
//!   that no longer reaches back that far empties the index, which then
//!   rebuilds.
//! - **Crash-safe.** Each batch's rows, back entries and new state are one
//!   atomic write: a crash loses at most unfinished batches, redone from
//!   the recorded sequence.
//! - **Parallel map.** A batch's documents are mapped in as many chunks as
//!   the JavaScript engine has workers, concurrently. Query-language
//!   (Mango) views are mapped natively, without JavaScript
//!   ([`crate::spec::QueryMap::key`]): the documents are read and mapped
//!   in as many chunks as there are CPUs, each on a thread of its own,
//!   each document's JSON parsed once. Their rows, back entries, blocks
//!   and counts are laid out and written exactly as JavaScript views' are
//!   (one batch per atomic write, the same state).
//! - Design documents are indexed only with the design document's
//!   `options.include_design` (never for query-language views); `_local`
//!   documents never (they have no sequence).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use settee_core::collate::collate;
use settee_db::json::{push_doc, Extras};
use settee_db::{Database, GetOptions, IndexBatch, IndexSnapshot, IndexSpace, Reader};
use settee_index::keycodec::encode_row_key;
use settee_js::{JsEngine, ViewRows};

use crate::blocks::Blocks;
use crate::error::{Result, ViewError};
use crate::follow::{Follower, Position};
use crate::layout::{self, BackEntry, IndexState, RowValue};
use crate::offsets::Offsets;
use crate::spec::IndexSpec;

/// Documents mapped per batch (and per atomic index write).
pub const UPDATE_BATCH: usize = 2000;

/// Changes after which an update moves the written data out of memory
/// (see [`Index::update`]).
const FLUSH_AFTER_CHANGES: u64 = 4 * UPDATE_BATCH as u64;

/// Documents per map call at least (smaller batches use fewer workers).
const MAP_CHUNK_MIN: usize = 64;

/// Progress of a running update, for `_active_tasks`.
#[derive(Debug, Default)]
pub struct Progress {
    pub running: std::sync::atomic::AtomicBool,
    pub changes_done: AtomicU64,
    pub total_changes: AtomicU64,
    pub started_s: AtomicU64,
    pub updated_s: AtomicU64,
}

/// An index and its update lock. Shared (`Arc`) by every design document
/// with its signature.
pub struct Index {
    pub spec: Arc<IndexSpec>,
    space: IndexSpace,
    /// The update lock, guarding the updater's copy of the blocks (read
    /// on first use; dropped after a failure, to be read again).
    update_lock: Mutex<Option<Blocks>>,
    pub progress: Progress,
    /// Queries waiting for an update to finish.
    pub waiting: AtomicU64,
    /// Block counts cached for `offset`.
    pub(crate) offsets: Offsets,
    /// A `_compact/{ddoc}` is rewriting the index's keys.
    pub compacting: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("ddoc", &self.spec.ddoc_id)
            .field("signature", &self.spec.signature_hex())
            .finish_non_exhaustive()
    }
}

pub(crate) fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Index {
    pub fn new(spec: Arc<IndexSpec>, space: IndexSpace) -> Index {
        Index {
            spec,
            space,
            update_lock: Mutex::new(None),
            progress: Progress::default(),
            waiting: AtomicU64::new(0),
            offsets: Offsets::default(),
            compacting: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub fn space(&self) -> &IndexSpace {
        &self.space
    }

    /// The index's state in a snapshot (an index never built has none).
    pub fn state(&self, snap: &IndexSnapshot) -> Result<IndexState> {
        let mut st = match snap.get(&layout::state_key(&self.spec.signature))? {
            Some(b) => layout::decode::<IndexState>(&b, "index state")?,
            None => IndexState::default(),
        };
        st.rows.resize(self.spec.views.len(), 0);
        Ok(st)
    }

    /// The stored state; None when the index was never written.
    pub fn stored_state(&self, snap: &IndexSnapshot) -> Result<Option<IndexState>> {
        match snap.get(&layout::state_key(&self.spec.signature))? {
            Some(b) => Ok(Some(layout::decode::<IndexState>(&b, "index state")?)),
            None => Ok(None),
        }
    }

    /// Whether an update is running now.
    pub fn updater_running(&self) -> bool {
        self.progress.running.load(Ordering::Relaxed)
    }

    /// Brings the index up to the database's latest state (as of each
    /// batch's snapshot). Blocking: runs JavaScript and reads storage.
    pub fn update(&self, db: &Database, js: &JsEngine) -> Result<IndexState> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let mut guard = self.update_lock.lock();
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        let p = &self.progress;
        p.running.store(true, Ordering::Relaxed);
        p.started_s.store(now_s(), Ordering::Relaxed);
        p.changes_done.store(0, Ordering::Relaxed);
        p.total_changes.store(0, Ordering::Relaxed);
        let result = self.update_locked(db, js, &mut guard);
        if result.is_err() {
            *guard = None;
        }
        p.running.store(false, Ordering::Relaxed);
        drop(guard);
        result
    }

    fn update_locked(
        &self,
        db: &Database,
        js: &JsEngine,
        blocks: &mut Option<Blocks>,
    ) -> Result<IndexState> {
        let snap = self.space.snapshot()?;
        let mut state = self.state(&snap)?;
        if blocks.is_none() {
            *blocks = Some(Blocks::load(&snap, &self.spec)?);
        }
        drop(snap);
        let before = state.seq;
        let state = self.catch_up(db, js, &mut state, blocks)?;
        if let Some(b) = blocks.as_mut() {
            if b.needs_refresh() {
                b.refresh(&self.space, &self.spec, js)?;
            }
        }
        // A long update rewrote block records batch after batch: queries
        // would step over every old version left in the in-memory table.
        if state.seq.saturating_sub(before) >= FLUSH_AFTER_CHANGES {
            self.space.flush_memory();
        }
        Ok(state)
    }

    /// Applies the database's changes (and purges) until the index has
    /// caught up with it (the shared loop, [`crate::follow::catch_up`]).
    fn catch_up(
        &self,
        db: &Database,
        js: &JsEngine,
        state: &mut IndexState,
        blocks: &mut Option<Blocks>,
    ) -> Result<IndexState> {
        let at = Position {
            seq: state.seq,
            purge_seq: state.purge_seq,
        };
        let mut follow = ViewFollower {
            index: self,
            js,
            state: state.clone(),
            blocks,
        };
        crate::follow::catch_up(db, at, UPDATE_BATCH, &self.progress, &mut follow)?;
        Ok(follow.state)
    }

    /// Drops every row, back entry and the state of the index.
    fn reset(&self) -> Result<()> {
        let (from, to) = layout::index_range(&self.spec.signature);
        let mut batch = IndexBatch::new();
        self.space.delete_range(&mut batch, &from, &to);
        self.space.write(batch)?;
        Ok(())
    }

    /// Re-indexes `ids` (with whether their winner is known deleted) as
    /// `reader` sees them, and writes the rows with `next` as the state.
    fn apply(
        &self,
        reader: &Reader,
        js: &JsEngine,
        mut ids: Vec<(String, bool)>,
        next: &mut IndexState,
        blocks: &mut Blocks,
    ) -> Result<()> {
        let spec = &self.spec;
        ids.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        ids.dedup_by(|a, b| a.0 == b.0);
        ids.retain(|(id, _)| spec.include_design || !id.starts_with("_design/"));
        let new_rows = if spec.is_query() {
            query_rows(spec, reader, &ids)?
        } else {
            self.js_rows(reader, js, &ids)?
        };
        self.write_rows(&ids, new_rows, next, blocks)
    }

    /// The rows of `ids` (sorted, deduplicated) as `reader` sees them,
    /// from the JavaScript map functions.
    fn js_rows(
        &self,
        reader: &Reader,
        js: &JsEngine,
        ids: &[(String, bool)],
    ) -> Result<Vec<Vec<Row>>> {
        let spec = &self.spec;
        // The documents to map: (position in ids, JSON).
        let mut inputs: Vec<(usize, String)> = Vec::with_capacity(ids.len());
        let opts = GetOptions {
            conflicts: true,
            ..GetOptions::default()
        };
        for (i, (id, deleted)) in ids.iter().enumerate() {
            if *deleted {
                continue;
            }
            match reader.get(id, &opts) {
                Ok(d) if !d.deleted => {
                    let mut json = String::with_capacity(d.body.len() + 64);
                    push_doc(
                        &mut json,
                        &d,
                        Extras {
                            local_seq: spec.local_seq,
                            ..Extras::default()
                        },
                    );
                    inputs.push((i, json));
                }
                Ok(_) | Err(settee_db::Error::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let mapped = map_parallel(js, spec, &inputs)?;
        let mut new_rows: Vec<Vec<Row>> = vec![Vec::new(); ids.len()];
        for ((i, _), out) in inputs.iter().zip(mapped) {
            let id = &ids[*i].0;
            match out {
                Ok(views) => new_rows[*i] = rows_of(spec, id, views),
                Err(e) => {
                    tracing::info!(ddoc = %spec.ddoc_id, doc = %id, error = %e, "map function failed for a document; it has no rows")
                }
            }
        }
        Ok(new_rows)
    }

    /// Replaces the rows of `ids` by `new_rows` (one entry per id), with
    /// `next` as the state, in one atomic write.
    fn write_rows(
        &self,
        ids: &[(String, bool)],
        new_rows: Vec<Vec<Row>>,
        next: &mut IndexState,
        blocks: &mut Blocks,
    ) -> Result<()> {
        let spec = &self.spec;
        let back_keys: Vec<Vec<u8>> = ids
            .iter()
            .map(|(id, _)| layout::back_key(&spec.signature, id))
            .collect();
        let refs: Vec<&[u8]> = back_keys.iter().map(Vec::as_slice).collect();
        let old = self.space.multi_get(&refs)?;
        let mut batch = IndexBatch::new();
        for (((_, back_key), old), rows) in ids.iter().zip(&back_keys).zip(old).zip(new_rows) {
            if let Some(bytes) = old {
                for (view, key) in layout::decode::<BackEntry>(&bytes, "back entry")? {
                    blocks.touch(view, &key, -1);
                    let full = [layout::view_prefix(&spec.signature, view), key].concat();
                    self.space.delete(&mut batch, &full);
                    if let Some(n) = next.rows.get_mut(usize::from(view)) {
                        *n = n.saturating_sub(1);
                    }
                }
            }
            if rows.is_empty() {
                self.space.delete(&mut batch, back_key);
                continue;
            }
            let mut back: BackEntry = Vec::with_capacity(rows.len());
            for (view, key, value) in rows {
                blocks.touch(view, &key, 1);
                let full = [layout::view_prefix(&spec.signature, view), key.clone()].concat();
                self.space.put(&mut batch, &full, &layout::encode(&value));
                if let Some(n) = next.rows.get_mut(usize::from(view)) {
                    *n += 1;
                }
                back.push((view, key));
            }
            self.space.put(&mut batch, back_key, &layout::encode(&back));
        }
        blocks.write_touched(&self.space, &mut batch);
        self.space.put(
            &mut batch,
            &layout::state_key(&spec.signature),
            &layout::encode(&*next),
        );
        self.space.write(batch)?;
        Ok(())
    }
}

/// A view index as the shared updater loop drives it: its state and the
/// updater's copy of its blocks.
struct ViewFollower<'a> {
    index: &'a Index,
    js: &'a JsEngine,
    state: IndexState,
    blocks: &'a mut Option<Blocks>,
}

impl Follower for ViewFollower<'_> {
    type Error = ViewError;

    fn reset(&mut self) -> Result<()> {
        let index = self.index;
        index.reset()?;
        self.state = IndexState::default();
        self.state.rows.resize(index.spec.views.len(), 0);
        *self.blocks = Some(Blocks::load(&index.space.snapshot()?, &index.spec)?);
        Ok(())
    }

    fn apply(&mut self, reader: &Reader, ids: Vec<(String, bool)>, next: Position) -> Result<()> {
        let mut state = self.state.clone();
        state.seq = next.seq;
        state.purge_seq = next.purge_seq;
        let b = self
            .blocks
            .as_mut()
            .ok_or_else(|| ViewError::Corrupt("view blocks not loaded".into()))?;
        self.index.apply(reader, self.js, ids, &mut state, b)?;
        self.state = state;
        Ok(())
    }
}

/// Maps documents in as many concurrent chunks as the engine has workers.
fn map_parallel(
    js: &JsEngine,
    spec: &IndexSpec,
    inputs: &[(usize, String)],
) -> Result<Vec<std::result::Result<Vec<ViewRows>, settee_js::JsError>>> {
    if inputs.is_empty() || spec.views.is_empty() {
        return Ok(inputs.iter().map(|_| Ok(Vec::new())).collect());
    }
    let names: Vec<&str> = spec.views.iter().map(|v| v.name.as_str()).collect();
    let workers = js.config().workers.max(1);
    let chunk = inputs.len().div_ceil(workers).max(MAP_CHUNK_MIN);
    let docs: Vec<&str> = inputs.iter().map(|(_, j)| j.as_str()).collect();
    let parts: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = docs
            .chunks(chunk)
            .map(|c| s.spawn(|| js.map_docs(&spec.js, &names, c)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(settee_js::JsError::InvalidInput {
                        reason: "map worker panicked".into(),
                    })
                })
            })
            .collect()
    });
    let mut out = Vec::with_capacity(inputs.len());
    for part in parts {
        let part = part.map_err(ViewError::Js)?;
        for (line, _) in part.logs.iter().zip(0..) {
            tracing::info!(ddoc = %spec.ddoc_id, "{line}");
        }
        out.extend(part.docs);
    }
    Ok(out)
}

/// A row as the updater writes it: (view number, row key with its DUP,
/// value).
type Row = (u16, Vec<u8>, RowValue);

/// The rows of `ids` (sorted, deduplicated; with whether each is known
/// deleted) in query-language views, computed natively: each document is
/// read from `reader`, its JSON parsed once and given at most one row per
/// view (`[field values…]` → `null`, [`crate::spec::QueryMap::key`]). The
/// documents are cut into as many chunks as there are CPUs, each read and
/// mapped on a thread of its own. One entry per id, in order.
fn query_rows(spec: &IndexSpec, reader: &Reader, ids: &[(String, bool)]) -> Result<Vec<Vec<Row>>> {
    let opts = GetOptions {
        conflicts: true,
        ..GetOptions::default()
    };
    let extras = Extras {
        local_seq: spec.local_seq,
        ..Extras::default()
    };
    let work = |chunk: &[(String, bool)]| -> Result<Vec<Vec<Row>>> {
        let mut json = String::new();
        let mut out = Vec::with_capacity(chunk.len());
        for (id, deleted) in chunk {
            if *deleted {
                out.push(Vec::new());
                continue;
            }
            let doc = match reader.get(id, &opts) {
                Ok(d) if !d.deleted => d,
                Ok(_) | Err(settee_db::Error::NotFound(_)) => {
                    out.push(Vec::new());
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            json.clear();
            push_doc(&mut json, &doc, extras);
            let rows = match serde_json::from_str::<Value>(&json) {
                Ok(doc) => {
                    let views = spec
                        .views
                        .iter()
                        .map(|v| match v.query().and_then(|q| q.key(&doc)) {
                            Some(key) => vec![(key, Value::Null)],
                            None => Vec::new(),
                        })
                        .collect();
                    rows_of(spec, id, views)
                }
                Err(e) => {
                    tracing::info!(ddoc = %spec.ddoc_id, doc = %id, error = %e, "document JSON unreadable; it has no rows");
                    Vec::new()
                }
            };
            out.push(rows);
        }
        Ok(out)
    };
    if spec.views.is_empty() {
        return Ok(vec![Vec::new(); ids.len()]);
    }
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let chunk = ids.len().div_ceil(threads).max(MAP_CHUNK_MIN);
    if chunk >= ids.len() {
        return work(ids);
    }
    let parts: Vec<Result<Vec<Vec<Row>>>> = std::thread::scope(|s| {
        let handles: Vec<_> = ids
            .chunks(chunk)
            .map(|c| s.spawn(move || work(c)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(ViewError::Js(settee_js::JsError::InvalidInput {
                        reason: "map thread panicked".into(),
                    }))
                })
            })
            .collect()
    });
    let mut out = Vec::with_capacity(ids.len());
    for part in parts {
        out.extend(part?);
    }
    Ok(out)
}

/// A document's rows: (view number, row key with its DUP, value). Rows
/// with equal row keys (one document emitting one key twice) are numbered
/// in the order of their values, as CouchDB sorts them.
/// In a partitioned index a document without a partition (none can be
/// written to a partitioned database) has no rows.
fn rows_of(spec: &IndexSpec, id: &str, views: Vec<ViewRows>) -> Vec<Row> {
    let mut out = Vec::new();
    let partition = settee_core::name::partition_of(id);
    if spec.partitioned && partition.is_none() {
        return out;
    }
    for (view, rows) in views.into_iter().enumerate() {
        let (Ok(number), Some(def)) = (u16::try_from(view), spec.views.get(view)) else {
            break;
        };
        let prefix = match partition.filter(|_| spec.partitioned) {
            Some(p) => layout::partition_prefix(p, def.collation),
            None => Vec::new(),
        };
        let mut keyed: Vec<(Vec<u8>, Value, Value)> = rows
            .into_iter()
            .map(|(key, value)| {
                let rk = encode_row_key(&key, id, def.collation);
                let rk = if prefix.is_empty() {
                    rk
                } else {
                    [&prefix[..], &rk[..]].concat()
                };
                (rk, key, value)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| collate(&a.2, &b.2)));
        let mut dup = 0u16;
        for i in 0..keyed.len() {
            dup = if i > 0 && keyed[i - 1].0 == keyed[i].0 {
                dup.saturating_add(1)
            } else {
                0
            };
            let (rk, key, value) = &keyed[i];
            out.push((
                number,
                layout::with_dup(rk, dup),
                RowValue {
                    id: id.to_string(),
                    key: json_text(key),
                    value: json_text(value),
                },
            ));
        }
    }
    out
}

fn json_text(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use serde_json::{json, Value};
    use settee_core::doc::Doc;
    use settee_db::{Database, Engine, EngineOptions, UpdateOptions};
    use settee_js::{JsConfig, JsEngine};
    use settee_store::mem::MemStore;

    use crate::args::ViewArgs;
    use crate::registry::Views;

    fn setup() -> (Engine, Database, Views) {
        let engine = Engine::with_store(Arc::new(MemStore::new()), EngineOptions::default());
        let db = engine.create_db("db").unwrap();
        let js = Arc::new(JsEngine::new(JsConfig::default()).unwrap());
        (engine, db, Views::new(js))
    }

    fn put(db: &Database, doc: Value) -> String {
        let rev = db.put(Doc::from_json(doc, || "x".into()).unwrap()).unwrap();
        rev.to_string()
    }

    fn bulk(db: &Database, docs: Vec<Value>) {
        let docs = docs
            .into_iter()
            .map(|d| Doc::from_json(d, || "x".into()).unwrap())
            .collect();
        db.update(docs, UpdateOptions::default()).unwrap();
    }

    fn query(views: &Views, db: &Database, view: &str, pairs: &[(&str, &str)]) -> Value {
        let args = ViewArgs::from_request(pairs.iter().copied(), None).unwrap();
        let mut out = String::new();
        views.query(db, "_design/i", view, &args, &mut out).unwrap();
        serde_json::from_str(&out).unwrap()
    }

    /// (id, key) of each row.
    fn rows(v: &Value) -> Vec<(String, Value)> {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["id"].as_str().unwrap().to_string(), r["key"].clone()))
            .collect()
    }

    fn row(id: &str, key: Value) -> (String, Value) {
        (id.to_string(), key)
    }

    #[test]
    fn purge_hold_is_the_slowest_built_index() {
        let (_engine, db, views) = setup();
        assert_eq!(views.purge_hold(&db).unwrap(), None, "no design document");
        bulk(
            &db,
            vec![json!({"_id": "a", "k": 1}), json!({"_id": "b", "k": 2})],
        );
        put(
            &db,
            json!({"_id": "_design/i", "language": "query", "views": {
                "k": {"map": {"fields": {"k": "asc"}, "partial_filter_selector": {}}, "reduce": "_count"}
            }}),
        );
        put(
            &db,
            json!({"_id": "_design/j", "language": "query", "views": {
                "k": {"map": {"fields": {"k": "desc"}, "partial_filter_selector": {}}, "reduce": "_count"}
            }}),
        );
        assert_eq!(views.purge_hold(&db).unwrap(), None, "no index built yet");
        query(&views, &db, "k", &[]);
        let built = db.update_seq();
        assert_eq!(
            views.purge_hold(&db).unwrap(),
            Some((built, 0, "_design/i".to_string()))
        );
        // Written past the index: it holds at what it read.
        bulk(&db, vec![json!({"_id": "c", "_deleted": true})]);
        assert_eq!(views.purge_hold(&db).unwrap().unwrap().0, built);
        views.update(&db, "_design/j").unwrap();
        assert_eq!(
            views.purge_hold(&db).unwrap().unwrap().2,
            "_design/i",
            "the slower of the two"
        );
        views.update(&db, "_design/i").unwrap();
        assert_eq!(views.purge_hold(&db).unwrap().unwrap().0, db.update_seq());
    }

    #[test]
    fn query_views_are_mapped_natively_and_kept_current() {
        let (_engine, db, views) = setup();
        bulk(
            &db,
            vec![
                json!({"_id": "d1", "n": 1, "m": 2, "k": 1}),
                json!({"_id": "d2", "n": null, "m": "x", "k": 5}),
                json!({"_id": "d3", "n": 1, "k": 1}),
                json!({"_id": "d4", "n": [1, 2], "m": {"z": 1}, "k": 2}),
                json!({"_id": "d5", "n": 3, "m": 3, "k": 0}),
                json!({"_id": "d6", "a": {"b": 7}, "x.y": 8}),
                json!({"_id": "d7", "a": {"b": 7}, "x": {"y": 8}}),
                json!({"_id": "d8", "a": [{"b": 1}], "x.y": 1}),
                json!({"_id": "_design/other", "n": 1, "m": 1, "k": 1}),
            ],
        );
        put(
            &db,
            json!({"_id": "_design/i", "language": "query", "views": {
                "n": {"map": {"fields": {"n": "asc", "m": "desc"},
                              "partial_filter_selector": {"k": {"$gt": 0}}},
                      "reduce": "_count", "options": {"def": {"fields": ["n", {"m": "desc"}]}}},
                "p": {"map": {"fields": {"a.b": "asc", "x\\.y": "asc"}, "partial_filter_selector": {}},
                      "reduce": "_count"}
            }}),
        );
        let n = query(&views, &db, "n", &[("reduce", "false")]);
        assert_eq!(n["total_rows"], 3);
        assert_eq!(
            rows(&n),
            [
                row("d2", json!([null, "x"])),
                row("d1", json!([1, 2])),
                row("d4", json!([[1, 2], {"z": 1}])),
            ]
        );
        assert_eq!(n["rows"][0]["value"], Value::Null);
        assert_eq!(
            rows(&query(&views, &db, "p", &[("reduce", "false")])),
            [row("d6", json!([7, 8]))]
        );
        assert_eq!(
            query(&views, &db, "n", &[]),
            json!({"rows": [{"key": null, "value": 3}]})
        );
        // Edits, deletions and a document that starts matching.
        let d1 = db
            .reader()
            .unwrap()
            .get("d1", &Default::default())
            .unwrap()
            .rev;
        put(
            &db,
            json!({"_id": "d1", "_rev": d1.to_string(), "_deleted": true}),
        );
        let d3 = db
            .reader()
            .unwrap()
            .get("d3", &Default::default())
            .unwrap()
            .rev;
        put(
            &db,
            json!({"_id": "d3", "_rev": d3.to_string(), "n": 0, "m": 0, "k": 1}),
        );
        let d4 = db
            .reader()
            .unwrap()
            .get("d4", &Default::default())
            .unwrap()
            .rev;
        put(
            &db,
            json!({"_id": "d4", "_rev": d4.to_string(), "n": [1, 2], "m": 1, "k": 0}),
        );
        let n = query(&views, &db, "n", &[("reduce", "false")]);
        assert_eq!(
            rows(&n),
            [row("d2", json!([null, "x"])), row("d3", json!([0, 0]))]
        );
        assert_eq!(n["total_rows"], 2);
        let spec = views.spec(&db, "_design/i").unwrap();
        assert!(spec.is_query());
        let q = spec.view("n").and_then(|v| v.query()).unwrap();
        assert_eq!(q.field_names(), ["n", "m"]);
    }

    /// The update path of a query-language view against a JavaScript one
    /// over the same documents (run with `--ignored --nocapture`).
    #[test]
    #[ignore]
    fn query_views_update_faster_than_javascript() {
        // On the real storage engine (a memory store's snapshots copy it).
        let dir = std::env::temp_dir().join(format!("settee-views-bench-{}", std::process::id()));
        let engine = Engine::open(&dir, EngineOptions::default()).unwrap();
        let db = engine.create_db("db").unwrap();
        let views = Views::new(Arc::new(JsEngine::new(JsConfig::default()).unwrap()));
        let docs: Vec<Value> = (0..100_000)
            .map(|i| {
                json!({"_id": format!("doc{i:06}"), "n": i, "t": (["a", "b", "c"][i % 3]),
                "body": "some text to carry along", "nested": {"x": i % 7}})
            })
            .collect();
        for chunk in docs.chunks(5000) {
            bulk(&db, chunk.to_vec());
        }
        put(
            &db,
            json!({"_id": "_design/i", "language": "query", "views": {
                "n": {"map": {"fields": {"t": "asc", "nested.x": "asc"}}, "reduce": "_count"}}}),
        );
        put(
            &db,
            json!({"_id": "_design/j", "views": {
                "n": {"map": "function(doc){ if (doc.t !== undefined && doc.nested && doc.nested.x !== undefined) emit([doc.t, doc.nested.x], null); }",
                      "reduce": "_count"}}}),
        );
        let t = Instant::now();
        views.update(&db, "_design/i").unwrap();
        let native = t.elapsed();
        let t = Instant::now();
        views.update(&db, "_design/j").unwrap();
        let js = t.elapsed();
        eprintln!("100k docs: query-language {native:?}, JavaScript {js:?}");
        let args = ViewArgs::default();
        let (mut a, mut b) = (String::new(), String::new());
        views.query(&db, "_design/i", "n", &args, &mut a).unwrap();
        views.query(&db, "_design/j", "n", &args, &mut b).unwrap();
        assert_eq!(a, b);
        drop((views, db, engine));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
