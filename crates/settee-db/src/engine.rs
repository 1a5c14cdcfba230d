//! The engine: a data directory holding any number of databases in one
//! store, with the catalog of their names.
//!
//! Invariants:
//! - A database name maps to a database id in the catalog; ids are never
//!   reused, so a deleted database's keys (removed by range deletes in the
//!   same atomic batch as its catalog entry) can never leak into a new one.
//! - Each open database has at most one writer thread (started by the first
//!   write, retired when idle); handles to a deleted database fail with
//!   not_found.
//! - Creation and deletion are durable (fsynced) before they return.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};
use settee_core::name::{is_shard_db_name, validate_db_name};
use settee_store::cache::CachedStore;
use settee_store::rocks::RocksStore;
use settee_store::{Batch, Keyspace, Store};
use tokio::sync::watch;

use crate::batch_buffer::BatchBuffer;
use crate::database::{Database, Shared};
use crate::error::{Error, Result};
use crate::keys::{self, DbId};
use crate::options::EngineOptions;
use crate::poison::Poison;
use crate::records::{decode, encode, DbMeta, DbState};
use crate::time_seq::TimeSeq;

/// What a database keeps beside its counters, read when it is opened.
struct Stored {
    security: Option<Arc<str>>,
    auto_purge: Option<Arc<str>>,
    time_seq: TimeSeq,
}

/// Now in whole seconds since the epoch, rounded up (what
/// [`TimeSeq::record`] takes).
pub(crate) fn unix_secs_ceil() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

struct Inner {
    store: Arc<dyn Store>,
    poison: Poison,
    opts: Arc<EngineOptions>,
    /// Open databases by name. Also serializes create/delete.
    open: Mutex<HashMap<String, Arc<Shared>>>,
    shut_down: AtomicBool,
    /// Which attachments are stored compressed (every database's).
    att_compression: crate::atts::SharedCompression,
}

/// The document engine; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Engine {
    /// Opens (creating if needed) the engine in `dir` on RocksDB.
    pub fn open(dir: &Path, opts: EngineOptions) -> Result<Engine> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Storage(settee_store::StoreError::Io(e.to_string())))?;
        let store = RocksStore::open(&dir.join("store"), &opts.rocks)?;
        Ok(Engine::with_store(Arc::new(store), opts))
    }

    /// An engine over any store (in-memory and fault-injecting ones in tests).
    /// It caches by-id records in front of it (see `doc_cache_bytes`): every
    /// write must then go through the engine.
    pub fn with_store(store: Arc<dyn Store>, opts: EngineOptions) -> Engine {
        let store: Arc<dyn Store> = match opts.doc_cache_bytes {
            0 => store,
            bytes => Arc::new(CachedStore::new(store, Keyspace::Docs, bytes)),
        };
        Engine {
            inner: Arc::new(Inner {
                store,
                poison: Poison::default(),
                opts: Arc::new(opts),
                open: Mutex::new(HashMap::new()),
                shut_down: AtomicBool::new(false),
                att_compression: Default::default(),
            }),
        }
    }

    /// Bytes the storage holds in memory now, by part (block cache,
    /// write buffers, table readers, document cache).
    pub fn memory(&self) -> Vec<(&'static str, u64)> {
        self.inner.store.memory()
    }

    /// Which attachments are stored gzip-encoded from now on (every
    /// database's; CouchDB's `[attachments]` settings).
    pub fn set_att_compression(&self, c: crate::atts::AttCompression) {
        *self.inner.att_compression.write() = c;
    }

    pub fn options(&self) -> &EngineOptions {
        &self.inner.opts
    }

    /// Fails if the engine is poisoned or shut down.
    pub fn check(&self) -> Result<()> {
        self.inner.poison.check()?;
        if self.inner.shut_down.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn read_meta(&self, name: &str) -> Result<Option<DbMeta>> {
        let v = self
            .inner
            .poison
            .guard(self.inner.store.get(Keyspace::Meta, &keys::catalog(name)))?;
        v.map(|b| DbMeta::decode(&b)).transpose()
    }

    /// Creates a database; `DbExists` if it exists.
    pub fn create_db(&self, name: &str) -> Result<Database> {
        self.create_db_with_security(name, None)
    }

    /// Creates a database whose security object is `security` (JSON text)
    /// from the start, as CouchDB gives a new database its
    /// `default_security` object without advancing its `update_seq`.
    pub fn create_db_with_security(&self, name: &str, security: Option<&str>) -> Result<Database> {
        self.create_db_with(name, security, false)
    }

    /// Creates a database with its security object (JSON text) and, when
    /// `partitioned`, as a partitioned database.
    pub fn create_db_with(
        &self,
        name: &str,
        security: Option<&str>,
        partitioned: bool,
    ) -> Result<Database> {
        check_name(name)?;
        self.check()?;
        let mut open = self.inner.open.lock();
        if open.contains_key(name) || self.read_meta(name)?.is_some() {
            return Err(Error::DbExists);
        }
        let next = self
            .inner
            .poison
            .guard(self.inner.store.get(Keyspace::Meta, keys::META_NEXT_DB_ID))?;
        let id: DbId = match next {
            Some(b) => decode(&b, "next db id")?,
            None => 1,
        };
        let meta = DbMeta {
            id,
            created_us: now_us(),
            partitioned,
        };
        let state = DbState::default();
        let mut batch = Batch::new();
        batch.put(Keyspace::Meta, keys::META_NEXT_DB_ID, encode(&(id + 1)));
        batch.put(Keyspace::Meta, keys::catalog(name), encode(&meta));
        batch.put(Keyspace::Meta, keys::state(id), encode(&state));
        if let Some(sec) = security {
            batch.put(Keyspace::Meta, keys::security(id), sec.as_bytes());
        }
        self.inner
            .poison
            .guard(self.inner.store.write(&batch, true))?;
        let stored = Stored {
            security: security.map(Arc::from),
            auto_purge: None,
            time_seq: TimeSeq::seeded(unix_secs_ceil(), 0),
        };
        Ok(self.start(&mut open, name, meta, state, stored))
    }

    /// Opens an existing database; not_found if it does not exist.
    pub fn db(&self, name: &str) -> Result<Database> {
        self.check()?;
        let mut open = self.inner.open.lock();
        if let Some(shared) = open.get(name) {
            return Ok(Database {
                shared: shared.clone(),
            });
        }
        let meta = self
            .read_meta(name)?
            .ok_or(Error::NotFound("Database does not exist."))?;
        let state = match self
            .inner
            .poison
            .guard(self.inner.store.get(Keyspace::Meta, &keys::state(meta.id)))?
        {
            Some(b) => DbState::decode(&b)?,
            None => {
                return Err(Error::Corrupt(format!(
                    "database {name} has no state record"
                )))
            }
        };
        let meta_get = |key: Vec<u8>| {
            self.inner
                .poison
                .guard(self.inner.store.get(Keyspace::Meta, &key))
        };
        let text = |key: Vec<u8>, what: &str| -> Result<Option<Arc<str>>> {
            meta_get(key)?
                .map(|b| {
                    String::from_utf8(b.to_vec())
                        .map(Arc::from)
                        .map_err(|_| Error::Corrupt(format!("database {name}: {what}")))
                })
                .transpose()
        };
        let security = text(keys::security(meta.id), "security object")?;
        let auto_purge = text(keys::auto_purge(meta.id), "automatic purge settings")?;
        let time_seq = match meta_get(keys::time_seq(meta.id))? {
            Some(b) => {
                let mut ts: TimeSeq = decode(&b, "time sequence map")?;
                // Changes of the last second before the map was last
                // stored may not be in it: they were made by now.
                ts.record(unix_secs_ceil(), state.update_seq);
                ts
            }
            // A database from before the map: everything so far was made
            // by now.
            None => TimeSeq::seeded(unix_secs_ceil(), state.update_seq),
        };
        let stored = Stored {
            security,
            auto_purge,
            time_seq,
        };
        Ok(self.start(&mut open, name, meta, state, stored))
    }

    /// Registers an open database. Its writer thread starts with the first
    /// write and retires when idle.
    fn start(
        &self,
        open: &mut HashMap<String, Arc<Shared>>,
        name: &str,
        meta: DbMeta,
        state: DbState,
        stored: Stored,
    ) -> Database {
        let shared = Arc::new(Shared {
            name: name.to_string(),
            db: meta.id,
            meta,
            store: self.inner.store.clone(),
            poison: self.inner.poison.clone(),
            opts: self.inner.opts.clone(),
            writer: Mutex::new(None),
            batch: Mutex::new(BatchBuffer::default()),
            closed: AtomicBool::new(false),
            seq_watch: watch::channel(state.update_seq).0,
            state: Mutex::new(state),
            committed: Condvar::new(),
            deleted: AtomicBool::new(false),
            compacting: AtomicBool::new(false),
            design_generation: AtomicU64::new(crate::database::fresh_design_generation()),
            security: Arc::new(Mutex::new(stored.security)),
            auto_purge: Arc::new(Mutex::new(stored.auto_purge)),
            time_seq: Mutex::new(stored.time_seq),
            blob_lock: Mutex::new(Default::default()),
            att_compression: Arc::clone(&self.inner.att_compression),
        });
        open.insert(name.to_string(), shared.clone());
        Database { shared }
    }

    /// Deletes a database and all its data; not_found if it does not exist.
    pub fn delete_db(&self, name: &str) -> Result<()> {
        check_name(name)?;
        self.check()?;
        let mut open = self.inner.open.lock();
        let meta = self
            .read_meta(name)?
            .ok_or(Error::NotFound("Database does not exist."))?;
        if let Some(shared) = open.remove(name) {
            shared.deleted.store(true, Ordering::Release);
            shared.close();
        }
        let (lo, hi) = keys::db_range(meta.id);
        let mut batch = Batch::new();
        batch.delete(Keyspace::Meta, keys::catalog(name));
        batch.delete(Keyspace::Meta, keys::state(meta.id));
        batch.delete(Keyspace::Meta, keys::security(meta.id));
        batch.delete(Keyspace::Meta, keys::auto_purge(meta.id));
        batch.delete(Keyspace::Meta, keys::time_seq(meta.id));
        let (count_lo, count_hi) = keys::seq_count_range(meta.id);
        batch.delete_range(Keyspace::Meta, count_lo, count_hi);
        let (block_lo, block_hi) = keys::id_block_range(meta.id);
        batch.delete_range(Keyspace::Meta, block_lo, block_hi);
        for ks in [
            Keyspace::Docs,
            Keyspace::Seqs,
            Keyspace::Bodies,
            Keyspace::Local,
            Keyspace::Purges,
            Keyspace::Views,
            Keyspace::Blobs,
        ] {
            batch.delete_range(ks, lo.clone(), hi.clone());
        }
        self.inner
            .poison
            .guard(self.inner.store.write(&batch, true))?;
        // The range deletions sit in the in-memory table, where they turn
        // off its bloom filter for every later lookup of every database;
        // flushed to a file they only cost lookups in the deleted range.
        // Only an optimisation: a flush refused now (RocksDB refuses while
        // writes are stalled) loses nothing and must not poison the engine.
        if let Err(e) = self.inner.store.flush_memory() {
            tracing::warn!(error = %e, "flush after deleting a database not done");
        }
        Ok(())
    }

    /// All database names, sorted; a cluster node's shard copies
    /// ([`Engine::list_shard_dbs`]) are not among them.
    pub fn list_dbs(&self) -> Result<Vec<String>> {
        let mut names = self.list_all_dbs()?;
        names.retain(|n| !is_shard_db_name(n));
        Ok(names)
    }

    /// The shard copies this engine holds for a cluster
    /// (`shards/BEGIN-END/DB.SUFFIX`), sorted.
    pub fn list_shard_dbs(&self) -> Result<Vec<String>> {
        let mut names = self.list_all_dbs()?;
        names.retain(|n| is_shard_db_name(n));
        Ok(names)
    }

    fn list_all_dbs(&self) -> Result<Vec<String>> {
        self.check()?;
        let snap = self.inner.store.snapshot();
        let mut names = Vec::new();
        let mut hi = keys::META_DB_PREFIX.to_vec();
        *hi.last_mut().expect("non-empty prefix") += 1;
        self.inner.poison.guard(snap.scan(
            Keyspace::Meta,
            keys::META_DB_PREFIX,
            &hi,
            false,
            &mut |k, _| {
                names.push(String::from_utf8_lossy(&k[keys::META_DB_PREFIX.len()..]).into_owned());
                true
            },
        ))?;
        Ok(names)
    }

    pub fn db_exists(&self, name: &str) -> Result<bool> {
        Ok(self.inner.open.lock().contains_key(name) || self.read_meta(name)?.is_some())
    }

    /// Makes every write so far durable.
    pub fn sync(&self) -> Result<()> {
        self.inner.poison.check()?;
        self.inner.poison.guard(self.inner.store.sync())
    }

    /// Flushes every database's buffered and delayed writes and stops the
    /// writers. Later calls fail with `Closed`.
    pub fn shutdown(&self) {
        self.inner.shut_down.store(true, Ordering::Release);
        let dbs: Vec<Arc<Shared>> = self.inner.open.lock().drain().map(|(_, s)| s).collect();
        for shared in dbs {
            shared.close();
        }
    }

    /// [`Engine::shutdown`], then ends the store's life (every write
    /// durable, the storage engine's background work stopped and waited
    /// for): for a process about to exit, which may do so even while
    /// handles to the engine are still alive in other threads.
    pub fn close(&self) -> Result<()> {
        self.shutdown();
        self.inner.poison.guard(self.inner.store.close())
    }
}

impl Drop for Inner {
    /// The last engine handle stops the writers (flushing them), so the
    /// store closes once the remaining database handles are dropped too.
    fn drop(&mut self) {
        for (_, shared) in self.open.get_mut().drain() {
            shared.close();
        }
    }
}

/// A name the engine takes: a legal database name, or a cluster node's
/// shard copy (`shards/BEGIN-END/DB.SUFFIX`, which no client can name).
fn check_name(name: &str) -> Result<()> {
    if is_shard_db_name(name) {
        return Ok(());
    }
    validate_db_name(name)?;
    Ok(())
}
