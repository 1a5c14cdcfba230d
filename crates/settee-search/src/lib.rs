//! Full-text search built in: design documents' `nouveau` indexes
//! (CouchDB 3.4's Nouveau API) and `indexes` (the Clouseau-style
//! `_search` API) on tantivy, built incrementally from a database's
//! changes, queried with Lucene's query syntax.
//!
//! - [`spec`]: what a design document asks to be indexed, and the
//!   signature naming the index's files;
//! - [`fields`]: the index calls of a document, checked as Nouveau (or
//!   CouchDB's search query server) checks them;
//! - [`analyzer`]: the analyzers an index may name;
//! - [`lucene`]: Lucene's classic query syntax, parsed;
//! - [`index`]: one index (files, schema, updater on the shared loop of
//!   `settee_views::follow`, query compilation);
//! - [`query`]: a Nouveau query's arguments and its answer, and the
//!   search both flavors run;
//! - [`clouseau`]: a `_search` query's arguments and its answer;
//! - [`mango_text`], [`mango_query`], [`mango_find`]: Mango text indexes
//!   (their fields, a selector as a query over them, a page of hits);
//! - `auto`: background updates of the indexes in use (as views have);
//! - [`Search`] (here): the server's search indexes by database and
//!   signature, and the operations on them by name.
//!
//! **Architecture invariants:** nothing outside this crate knows tantivy
//! (the API speaks `serde_json` values and [`SearchError`]); index
//! functions run on `settee_js` (this crate knows no JavaScript engine);
//! an index's files live in a directory of their own under the server's
//! search directory, named by database incarnation and signature, so a
//! database deleted and created again never meets its predecessor's
//! indexes, and a design document edited meets its old index only if
//! what the index is made of did not change.

pub mod analyzer;
mod auto;
pub mod clouseau;
pub mod error;
pub mod fields;
pub mod index;
pub mod lucene;
pub mod mango_find;
pub mod mango_query;
pub mod mango_text;
pub mod query;
pub mod spec;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use settee_db::json::{push_doc, Extras};
use settee_db::{Database, GetOptions};
use settee_js::{DesignDoc, JsEngine};

pub use clouseau::ClouseauArgs;
pub use error::{Result, SearchError};
pub use index::SearchIndex;
pub use query::SearchArgs;
pub use spec::{Flavor, IndexSpec};

/// Most indexes kept open; past it the unused ones are closed.
pub const OPEN_MAX: usize = 256;

/// A database incarnation: its name and creation time.
type DbKey = (String, u64);

fn db_key(db: &Database) -> DbKey {
    (db.name().to_string(), db.created_us())
}

/// Indexes open: (database incarnation, signature) → index.
type OpenIndexes = HashMap<(DbKey, [u8; 16]), Arc<SearchIndex>>;

/// The server's search indexes.
pub struct Search {
    js: Arc<JsEngine>,
    root: PathBuf,
    /// A directory of the process's own when the server has no data
    /// directory (embedded, tests); removed when dropped.
    _temp: Option<tempfile::TempDir>,
    indexes: Arc<Mutex<OpenIndexes>>,
    /// The background updater, while one runs.
    auto: Mutex<Option<auto::AutoUpdate>>,
}

impl std::fmt::Debug for Search {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Search")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// The design document `ddoc_id`'s current revision in `db` as JSON.
fn read_ddoc(db: &Database, ddoc_id: &str) -> Result<Value> {
    let reader = db.latest_reader()?;
    let doc = reader
        .get(ddoc_id, &GetOptions::default())
        .map_err(|e| match e {
            settee_db::Error::NotFound(r) => SearchError::NotFound(r.to_string()),
            e => e.into(),
        })?;
    let mut text = String::new();
    push_doc(&mut text, &doc, Extras::default());
    serde_json::from_str(&text).map_err(|e| SearchError::Index(format!("design document: {e}")))
}

/// The design document an index's update runs: `ddoc` itself, or for a
/// Mango text index (indexed natively; its design document's language is
/// `query`) one without functions.
fn js_ddoc_of(spec: &IndexSpec, ddoc: &Value) -> Result<DesignDoc> {
    Ok(if spec.mango.is_some() {
        DesignDoc::new(&json!({"_id": spec.ddoc_id}))?
    } else {
        DesignDoc::new(ddoc)?
    })
}

/// The directory name of a database incarnation's indexes.
fn db_dir_name(name: &str, created_us: u64) -> String {
    format!("{}-{created_us}", hex::encode(name))
}

impl Search {
    /// The search indexes under `root` (created when needed); None: under
    /// a temporary directory of this process's own.
    pub fn new(js: Arc<JsEngine>, root: Option<PathBuf>) -> std::io::Result<Search> {
        let (root, temp) = match root {
            Some(r) => {
                std::fs::create_dir_all(&r)?;
                (r, None)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("settee-search-")
                    .tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        Ok(Search {
            js,
            root,
            _temp: temp,
            indexes: Arc::new(Mutex::new(HashMap::new())),
            auto: Mutex::new(None),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn db_dir(&self, db: &Database) -> PathBuf {
        self.root.join(db_dir_name(db.name(), db.created_us()))
    }

    /// The design document `ddoc_id`'s current revision as JSON.
    fn ddoc(&self, db: &Database, ddoc_id: &str) -> Result<Value> {
        read_ddoc(db, ddoc_id)
    }

    /// Starts background updates of the indexes in use (see `auto`),
    /// looking every `interval`; a thread started before stops.
    pub fn start_auto_update(
        &self,
        engine: settee_db::Engine,
        interval: std::time::Duration,
    ) -> std::io::Result<()> {
        let started = auto::spawn(
            Arc::downgrade(&self.indexes),
            engine,
            Arc::clone(&self.js),
            interval,
        )?;
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

    /// The index `name` of design document `ddoc_id` (opened on first use).
    fn open(
        &self,
        db: &Database,
        ddoc_id: &str,
        name: &str,
    ) -> Result<(Arc<SearchIndex>, DesignDoc)> {
        let ddoc = self.ddoc(db, ddoc_id)?;
        self.open_in(db, &ddoc, Flavor::Nouveau, name)
    }

    /// The index `name` of flavor `flavor` of design document `ddoc`.
    fn open_in(
        &self,
        db: &Database,
        ddoc: &Value,
        flavor: Flavor,
        name: &str,
    ) -> Result<(Arc<SearchIndex>, DesignDoc)> {
        let spec = Arc::new(IndexSpec::of(ddoc, flavor, name, db.partitioned())?);
        let js_ddoc = js_ddoc_of(&spec, ddoc)?;
        let key = (db_key(db), spec.signature);
        let mut indexes = self.indexes.lock();
        if let Some(i) = indexes.get(&key) {
            return Ok((Arc::clone(i), js_ddoc));
        }
        if indexes.len() >= OPEN_MAX {
            indexes.retain(|_, i| Arc::strong_count(i) > 1);
        }
        let dir = self.db_dir(db).join(spec.signature_hex());
        let index = Arc::new(SearchIndex::open(spec, &dir)?);
        indexes.insert(key, Arc::clone(&index));
        Ok((index, js_ddoc))
    }

    /// `GET|POST /db/_design/ddoc/_nouveau/name`: the answer as CouchDB's
    /// Nouveau gives it. Blocking (may update the index first).
    pub fn query(
        &self,
        db: &Database,
        ddoc_id: &str,
        name: &str,
        args: &SearchArgs,
    ) -> Result<Value> {
        let (index, ddoc) = self.open(db, ddoc_id, name)?;
        let started = Instant::now();
        let meta = if args.update {
            index.update(db, &self.js, &ddoc)?
        } else {
            index.meta()
        };
        let latency = started.elapsed().as_millis() as u64;
        let (mut out, ids) = query::run(&index, args, &meta)?;
        if args.include_docs {
            if let Some(Value::Array(hits)) = out.get_mut("hits") {
                let docs = docs_of(db, &ids)?;
                for (hit, doc) in hits.iter_mut().zip(docs) {
                    if let Value::Object(h) = hit {
                        let mut with = Map::new();
                        with.insert("doc".into(), doc.unwrap_or(Value::Null));
                        with.extend(std::mem::take(h));
                        *h = with;
                    }
                }
            }
        }
        out.insert("update_latency".into(), json!(latency));
        Ok(Value::Object(out))
    }

    /// `GET|POST /db/_design/ddoc/_search/name`: the answer as CouchDB's
    /// search answers it. Blocking (may update the index first).
    pub fn search(
        &self,
        db: &Database,
        ddoc_id: &str,
        name: &str,
        args: &ClouseauArgs,
    ) -> Result<Value> {
        let ddoc = self.ddoc(db, ddoc_id)?;
        let index_partitioned = match ddoc.pointer("/options/partitioned") {
            Some(Value::Bool(b)) => *b,
            _ => db.partitioned(),
        };
        let limit = args.check(db.partitioned(), index_partitioned)?;
        let (index, js) = self.open_in(db, &ddoc, Flavor::Clouseau, name)?;
        let meta = if args.update {
            index.update(db, &self.js, &js)?
        } else {
            index.meta()
        };
        let (mut out, ids) = clouseau::run(&index, args, limit, &meta)?;
        if args.include_docs {
            let docs = docs_of(db, &ids)?;
            let mut docs = docs.into_iter();
            let mut attach = |rows: &mut Value| {
                if let Value::Array(rows) = rows {
                    for row in rows {
                        if let (Value::Object(r), Some(doc)) = (row, docs.next()) {
                            match doc {
                                Some(d) => r.insert("doc".into(), d),
                                None => r.insert("error".into(), json!("not_found")),
                            };
                        }
                    }
                }
            };
            if let Some(groups) = out.get_mut("groups").and_then(Value::as_array_mut) {
                for g in groups {
                    if let Some(rows) = g.get_mut("rows") {
                        attach(rows);
                    }
                }
            } else if let Some(rows) = out.get_mut("rows") {
                attach(rows);
            }
        }
        Ok(out)
    }

    /// A page of hits of the Mango text index `name` of design document
    /// `ddoc_id` (brought up to date first when `update`). Blocking.
    pub fn mango_page(
        &self,
        db: &Database,
        ddoc_id: &str,
        name: &str,
        req: &mango_find::TextPageRequest,
        after: Option<&str>,
        n: usize,
        update: bool,
    ) -> Result<Vec<mango_find::TextHit>> {
        let ddoc = self.ddoc(db, ddoc_id)?;
        let (index, js) = self.open_in(db, &ddoc, Flavor::Clouseau, name)?;
        if index.spec.mango.is_none() {
            return Err(SearchError::NotFound(format!("{name} not found.")));
        }
        let meta = if update {
            index.update(db, &self.js, &js)?
        } else {
            index.meta()
        };
        mango_find::page(&index, &meta, req, after, n)
    }

    /// `GET /db/_design/ddoc/_search_info/name`.
    pub fn search_info(&self, db: &Database, ddoc_id: &str, name: &str) -> Result<Value> {
        let ddoc = self.ddoc(db, ddoc_id)?;
        let (index, _) = self.open_in(db, &ddoc, Flavor::Clouseau, name)?;
        let meta = index.meta();
        let searcher = index.searcher();
        let deleted: u64 = searcher
            .segment_readers()
            .iter()
            .map(|r| u64::from(r.num_deleted_docs()))
            .sum();
        Ok(json!({
            "name": format!("{ddoc_id}/{name}"),
            "search_index": {
                "pending_seq": meta.update_seq,
                "doc_del_count": deleted,
                "doc_count": searcher.num_docs(),
                "disk_size": index.disk_size(),
                "committed_seq": meta.update_seq,
                "purge_seq": meta.purge_seq,
            }
        }))
    }

    /// `GET /db/_design/ddoc/_search_disk_size/name`.
    pub fn search_disk_size(&self, db: &Database, ddoc_id: &str, name: &str) -> Result<Value> {
        let ddoc = self.ddoc(db, ddoc_id)?;
        let (index, _) = self.open_in(db, &ddoc, Flavor::Clouseau, name)?;
        Ok(json!({
            "name": format!("{ddoc_id}/{name}"),
            "search_index": {"disk_size": index.disk_size()}
        }))
    }

    /// `GET /db/_design/ddoc/_nouveau_info/name`.
    pub fn info(&self, db: &Database, ddoc_id: &str, name: &str) -> Result<Value> {
        let (index, _) = self.open(db, ddoc_id, name)?;
        let meta = index.meta();
        let num_docs = index.searcher().num_docs();
        Ok(json!({
            "name": format!("{ddoc_id}/{name}"),
            "search_index": {
                "disk_size": index.disk_size(),
                "num_docs": num_docs,
                "purge_seq": meta.purge_seq,
                "signature": index.spec.signature_hex(),
                "update_seq": meta.update_seq,
            }
        }))
    }

    /// Brings every search index of design document `ddoc_id` up to date.
    pub fn update_all(&self, db: &Database, ddoc_id: &str) -> Result<()> {
        let ddoc = self.ddoc(db, ddoc_id)?;
        for flavor in [Flavor::Nouveau, Flavor::Clouseau] {
            for name in spec::names_in(&ddoc, flavor) {
                if let Ok((index, js)) = self.open_in(db, &ddoc, flavor, &name) {
                    index.update(db, &self.js, &js)?;
                }
            }
        }
        Ok(())
    }

    /// `POST /db/_nouveau_cleanup` (and `_view_cleanup`, `_search_cleanup`):
    /// removes the files of the database's indexes no current design
    /// document defines, and those of its earlier incarnations.
    pub fn cleanup(&self, db: &Database) -> Result<()> {
        let ids = settee_views::registry::design_ids(db).map_err(|e| match e {
            settee_views::ViewError::Db(d) => SearchError::Db(d),
            other => SearchError::Index(other.to_string()),
        })?;
        let mut keep: Vec<String> = Vec::new();
        for id in ids {
            let Ok(ddoc) = self.ddoc(db, &id) else {
                continue;
            };
            for flavor in [Flavor::Nouveau, Flavor::Clouseau] {
                for name in spec::names_in(&ddoc, flavor) {
                    if let Ok(s) = IndexSpec::of(&ddoc, flavor, &name, db.partitioned()) {
                        keep.push(s.signature_hex());
                    }
                }
            }
        }
        let key = db_key(db);
        let mine = self.db_dir(db);
        let prefix = format!("{}-", hex::encode(db.name()));
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let file_name = entry.file_name().to_string_lossy().to_string();
            if !file_name.starts_with(&prefix) {
                continue;
            }
            if path != mine {
                // An earlier incarnation of the database.
                std::fs::remove_dir_all(&path)?;
                continue;
            }
            for sig_dir in std::fs::read_dir(&path)?.flatten() {
                let sig = sig_dir.file_name().to_string_lossy().to_string();
                if keep.contains(&sig) {
                    continue;
                }
                let mut indexes = self.indexes.lock();
                indexes.retain(|(k, s), _| !(k == &key && hex::encode(s) == sig));
                drop(indexes);
                std::fs::remove_dir_all(sig_dir.path())?;
            }
        }
        Ok(())
    }

    /// A database was deleted: closes its indexes and removes their files
    /// (of every incarnation of that name).
    pub fn forget_db(&self, name: &str) -> Result<()> {
        self.indexes.lock().retain(|((db, _), _), _| db != name);
        let prefix = format!("{}-", hex::encode(name));
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                std::fs::remove_dir_all(entry.path())?;
            }
        }
        Ok(())
    }

    /// The indexes being updated now, for `_active_tasks`.
    pub fn active(&self) -> Vec<Value> {
        use std::sync::atomic::Ordering::Relaxed;
        self.indexes
            .lock()
            .iter()
            .filter(|(_, i)| i.updater_running())
            .map(|((db, _), i)| {
                let p = &i.progress;
                let (done, total) = (p.changes_done.load(Relaxed), p.total_changes.load(Relaxed));
                json!({
                    "type": "search_indexer",
                    "database": db.0,
                    "design_document": i.spec.ddoc_id,
                    "index": i.spec.name,
                    "changes_done": done,
                    "total_changes": total,
                    "progress": (done * 100).checked_div(total).unwrap_or(0).min(100),
                })
            })
            .collect()
    }
}

/// The documents `ids` as JSON, in order (None: missing or deleted).
fn docs_of(db: &Database, ids: &[String]) -> Result<Vec<Option<Value>>> {
    let reader = db.reader()?;
    let opts = GetOptions::default();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.push(match reader.get(id, &opts) {
            Ok(d) if !d.deleted => {
                let mut text = String::new();
                push_doc(&mut text, &d, Extras::default());
                serde_json::from_str(&text).ok()
            }
            Ok(_) | Err(settee_db::Error::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        });
    }
    Ok(out)
}

/// `POST /_search_analyze` (and GET): the tokens analyzer `analyzer` (a
/// name, or an object with `name` and `stopwords`) makes of `text`.
pub fn analyze(analyzer: Option<&Value>, text: Option<&Value>) -> Result<Value> {
    let Some(a) = analyzer.filter(|v| !v.is_null()) else {
        return Err(SearchError::BadRequest(
            "analyzer parameter is mandatory".into(),
        ));
    };
    let key = match a {
        Value::String(s) => analyzer::key(s, None)?,
        Value::Object(o) if !o.is_empty() => {
            let name = o.get("name").and_then(Value::as_str).unwrap_or("standard");
            let stop = o.get("stopwords").and_then(Value::as_array).map(|w| {
                w.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            });
            analyzer::key(name, stop)?
        }
        _ => {
            return Err(SearchError::BadRequest(
                "analyzer parameter must be a string or an object".into(),
            ))
        }
    };
    let text = match text.filter(|v| !v.is_null()) {
        None => {
            return Err(SearchError::BadRequest(
                "text parameter is mandatory".into(),
            ))
        }
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            return Err(SearchError::BadRequest(
                "text parameter must be a string".into(),
            ))
        }
    };
    let mut built = analyzer::build(&key)
        .ok_or_else(|| SearchError::BadRequest(format!("no_such_analyzer: {key}")))?;
    Ok(json!({ "tokens": analyzer::tokens(&mut built, text) }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use serde_json::{json, Value};
    use settee_core::doc::Doc;
    use settee_db::{Database, Engine, EngineOptions, UpdateOptions};
    use settee_js::{JsConfig, JsEngine};

    use super::{Search, SearchArgs};

    fn bulk(db: &Database, docs: Vec<Value>) {
        let docs = docs
            .into_iter()
            .map(|d| Doc::from_json(d, || "x".into()).unwrap())
            .collect();
        db.update(docs, UpdateOptions::default()).unwrap();
    }

    fn args(v: Value) -> SearchArgs {
        SearchArgs::from_body(v.as_object().unwrap()).unwrap()
    }

    fn ids(v: &Value) -> Vec<String> {
        v["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_str().unwrap().to_string())
            .collect()
    }

    fn setup(dir: &std::path::Path) -> (Engine, Database, Search) {
        let engine = Engine::open(&dir.join("db"), EngineOptions::default()).unwrap();
        let db = engine.create_db("db").unwrap();
        let js = Arc::new(JsEngine::new(JsConfig::default()).unwrap());
        let search = Search::new(js, Some(dir.join("search"))).unwrap();
        (engine, db, search)
    }

    #[test]
    fn an_index_follows_its_database_incrementally() {
        let dir = tempfile::tempdir().unwrap();
        let (_engine, db, search) = setup(dir.path());
        bulk(
            &db,
            (0..50)
                .map(|i| json!({"_id": format!("d{i:02}"), "t": format!("w{}", i % 5), "n": i}))
                .collect(),
        );
        bulk(
            &db,
            vec![json!({"_id": "_design/s", "nouveau": {"i": {"index":
                "function(doc){ index('text', 't', doc.t); index('double', 'n', doc.n, {store: true}); }"}}})],
        );
        let q = |v: Value| search.query(&db, "_design/s", "i", &args(v)).unwrap();
        assert_eq!(q(json!({"q": "t:w1", "sort": "n"}))["total_hits"], 10);
        assert_eq!(
            ids(&q(json!({"q": "t:w1 AND n:[0 TO 20]", "sort": "-n"}))),
            ["d16", "d11", "d06", "d01"]
        );
        bulk(&db, vec![json!({"_id": "d99", "t": "w1", "n": 99})]);
        let v = q(json!({"q": "t:w1", "sort": "-n", "limit": 1}));
        assert_eq!(ids(&v), ["d99"]);
        assert_eq!(v["hits"][0]["fields"], json!({"n": 99.0}));
        let meta = search.open(&db, "_design/s", "i").unwrap().0.meta();
        assert_eq!(meta.update_seq, db.update_seq());
    }

    /// `_search` build rate for 10k documents and query latency (run with
    /// `--ignored --nocapture`).
    #[test]
    #[ignore]
    fn search_build_rate_for_10k_documents() {
        let dir = tempfile::tempdir().unwrap();
        let (_engine, db, search) = setup(dir.path());
        let words = [
            "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
        ];
        let n = 10_000;
        let docs: Vec<Value> = (0..n)
            .map(|i| {
                let title: Vec<&str> = (0..8).map(|k| words[(i * 7 + k * 3) % words.len()]).collect();
                json!({"_id": format!("doc{i:06}"), "title": title.join(" "), "cat": words[i % 8], "n": i})
            })
            .collect();
        for chunk in docs.chunks(2000) {
            bulk(&db, chunk.to_vec());
        }
        bulk(
            &db,
            vec![json!({"_id": "_design/s", "indexes": {"i": {"index":
                "function(doc){ index('default', doc.title, {store: true}); index('cat', doc.cat, {facet: true}); index('n', doc.n, {facet: true}); }"}}})],
        );
        let q = |v: Value| {
            let a = crate::ClouseauArgs::from_body(v.as_object().unwrap(), None).unwrap();
            search.search(&db, "_design/s", "i", &a).unwrap()
        };
        let t = Instant::now();
        let v = q(json!({"q": "*:*", "limit": 1}));
        let built = t.elapsed();
        assert_eq!(v["total_rows"], n);
        let mut lat = Vec::new();
        for i in 0..200 {
            let t = Instant::now();
            let text = format!("{} AND n:[{} TO {}]", words[i % 8], i * 10, i * 10 + 3000);
            q(json!({"q": text, "sort": "-n", "counts": ["cat"],
                     "ranges": {"n": {"low": "[0 TO 5000}", "high": "[5000 TO Infinity]"}}}));
            lat.push(t.elapsed());
        }
        lat.sort();
        eprintln!(
            "_search, 10k docs: built in {built:?} ({:.0} docs/s); query p50 {:?} p99 {:?}",
            n as f64 / built.as_secs_f64(),
            lat[lat.len() / 2],
            lat[lat.len() * 99 / 100]
        );
    }

    /// Index build rate for 10k documents (run with `--ignored --nocapture`).
    #[test]
    #[ignore]
    fn build_rate_for_10k_documents() {
        let dir = tempfile::tempdir().unwrap();
        let (_engine, db, search) = setup(dir.path());
        let words = [
            "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
        ];
        let n = 10_000;
        let docs: Vec<Value> = (0..n)
            .map(|i| {
                let title: Vec<&str> = (0..8).map(|k| words[(i * 7 + k * 3) % words.len()]).collect();
                json!({"_id": format!("doc{i:06}"), "title": title.join(" "), "cat": words[i % 8], "n": i})
            })
            .collect();
        for chunk in docs.chunks(2000) {
            bulk(&db, chunk.to_vec());
        }
        bulk(
            &db,
            vec![json!({"_id": "_design/s", "nouveau": {"i": {"index":
                "function(doc){ index('text', 'title', doc.title, {store: true}); index('string', 'cat', doc.cat); index('double', 'n', doc.n); }"}}})],
        );
        let t = Instant::now();
        let v = search
            .query(
                &db,
                "_design/s",
                "i",
                &args(json!({"q": "*:*", "limit": 1})),
            )
            .unwrap();
        let built = t.elapsed();
        assert_eq!(v["total_hits"], n);
        let mut lat = Vec::new();
        for i in 0..200 {
            let t = Instant::now();
            let q = format!(
                "title:{} AND n:[{} TO {}]",
                words[i % 8],
                i * 10,
                i * 10 + 3000
            );
            search
                .query(
                    &db,
                    "_design/s",
                    "i",
                    &args(json!({"q": q, "sort": "-n", "counts": ["cat"]})),
                )
                .unwrap();
            lat.push(t.elapsed());
        }
        lat.sort();
        eprintln!(
            "10k docs: built in {built:?} ({:.0} docs/s); query p50 {:?} p99 {:?}",
            n as f64 / built.as_secs_f64(),
            lat[lat.len() / 2],
            lat[lat.len() * 99 / 100]
        );
    }
}
