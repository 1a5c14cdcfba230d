//! LMDB (through `heed`) behind [`Store`]: one environment, one named
//! database per [`Keyspace`].
//!
//! How the contract is met:
//! - **Atomic batches**: every [`Store::write`] is one LMDB write
//!   transaction; an error drops (aborts) it.
//! - **`sync` flag**: LMDB fsyncs at every commit unless the environment has
//!   `MDB_NOSYNC`. That flag can be changed between transactions
//!   (`mdb_env_set_flags`), so each write sets it to `!sync` under the write
//!   mutex before it begins its transaction. A synced commit makes every
//!   earlier unsynced one durable too (one `fdatasync` of the whole data file).
//!   Caveat (LMDB's documentation): with `MDB_NOSYNC`, an OS crash may lose
//!   the last commits *or corrupt the database* if the buffers were not
//!   flushed; a process crash loses nothing.
//! - **[`Store::sync`]**: `mdb_env_sync(force = 1)`.
//! - **Snapshots**: a read transaction kept alive (`static_read_txn`; the
//!   environment is opened with `MDB_NOTLS` so the transaction is `Send`). An
//!   LMDB read transaction may be used by one thread at a time, hence the
//!   mutex; it is re-entrant because the document layer reads bodies from
//!   inside a scan's visitor.
//! - **Limits**: keys are 1 to 511 bytes (LMDB's compile-time default). A
//!   write of a longer key fails (which poisons settee's engine); reads and
//!   scan bounds outside that range are mapped to equivalent ones ([`Bounds`]).

#![allow(unsafe_code)]

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::FailedSnapshot;
use heed::types::Bytes;
use heed::{
    CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, FlagSetMode, RoTxn, RwTxn, WithoutTls,
};
use parking_lot::{Mutex, ReentrantMutex};
use settee_store::{Batch, Keyspace, Op, Result, ScanFn, Snapshot, Store, StoreError};

type Db = Database<'static, Bytes, Bytes>;
type Dbs = [Db; Keyspace::ALL.len()];

/// Size of the memory map: an upper bound of the file size, not an allocation.
const MAP_SIZE: usize = 64 << 30;

/// The LMDB engine behind [`Store`].
pub struct LmdbStore {
    env: Env<WithoutTls>,
    dbs: Dbs,
    /// Serializes writers (LMDB would anyway) so toggling `MDB_NOSYNC` never
    /// races a commit; holds whether the flag is currently set.
    write_lock: Mutex<bool>,
    max_key: usize,
    path: PathBuf,
}

fn err(e: heed::Error) -> StoreError {
    match e {
        heed::Error::Mdb(
            heed::MdbError::Corrupted | heed::MdbError::PageNotFound | heed::MdbError::Invalid,
        ) => StoreError::Corruption(e.to_string()),
        _ => StoreError::Io(e.to_string()),
    }
}

impl LmdbStore {
    /// Opens (creating if needed) the environment in directory `path`.
    pub fn open(path: &Path) -> Result<LmdbStore> {
        std::fs::create_dir_all(path).map_err(|e| StoreError::Io(e.to_string()))?;
        let mut opts = EnvOpenOptions::new().read_txn_without_tls();
        opts.map_size(MAP_SIZE)
            .max_dbs(Keyspace::ALL.len() as u32 + 2)
            .max_readers(1024);
        // SAFETY: heed requires that no other handle in this process has the
        // environment open and that nothing modifies the file behind LMDB's
        // back: the directory is private to this benchmark, and a store is
        // only reopened after the previous handle was dropped.
        let env = unsafe { opts.open(path) }.map_err(err)?;
        let wtxn = env.write_txn().map_err(err)?;
        let dbs = env
            .create_databases_and_commit(
                wtxn,
                |opener, wtxn| -> std::result::Result<_, heed::Error> {
                    let mut out = Vec::with_capacity(Keyspace::ALL.len());
                    for ks in Keyspace::ALL {
                        out.push(opener.create_database::<Bytes, Bytes>(wtxn, Some(ks.name()))?);
                    }
                    let arr: [_; Keyspace::ALL.len()] = out
                        .try_into()
                        .map_err(|_| heed::Error::Io(std::io::Error::other("keyspace count")))?;
                    Ok(CommitOrAbort::<_, ()>::Commit(arr))
                },
            )
            .map_err(err)?
            .unwrap_commit();
        let max_key = env.max_key_size();
        Ok(LmdbStore {
            env,
            dbs,
            write_lock: Mutex::new(false),
            max_key,
            path: path.to_path_buf(),
        })
    }

    fn db(&self, ks: Keyspace) -> Db {
        self.dbs[ks as usize]
    }

    fn apply(&self, wtxn: &mut RwTxn<'_>, batch: Batch) -> heed::Result<()> {
        for op in batch.ops {
            match op {
                Op::Put(ks, k, v) => self.db(ks).put(wtxn, &k, &v)?,
                Op::Delete(ks, k) => {
                    if storable(&k, self.max_key) {
                        self.db(ks).delete(wtxn, &k)?;
                    }
                }
                Op::DeleteRange(ks, from, to) => {
                    if from < to {
                        self.db(ks)
                            .delete_range(wtxn, &bounds(&from, &to, self.max_key))?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether LMDB can hold `key` at all (a get or delete of any other key is
/// a no-op, not an error).
fn storable(key: &[u8], max_key: usize) -> bool {
    !key.is_empty() && key.len() <= max_key
}

/// A key range as LMDB accepts it.
type Bounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// `[from, to)` with bounds LMDB can seek to: an empty `from` is unbounded,
/// and a bound longer than `max_key` is replaced by its `max_key`-byte
/// prefix `p`, which selects the same stored keys (none is longer than
/// `max_key`, so `k >= from` ⇔ `k > p` and `k < to` ⇔ `k <= p`).
fn bounds<'a>(from: &'a [u8], to: &'a [u8], max_key: usize) -> Bounds<'a> {
    let lower = if from.is_empty() {
        Bound::Unbounded
    } else if from.len() > max_key {
        Bound::Excluded(&from[..max_key])
    } else {
        Bound::Included(from)
    };
    let upper = if to.len() > max_key {
        Bound::Included(&to[..max_key])
    } else {
        Bound::Excluded(to)
    };
    (lower, upper)
}

fn get_txn(
    db: Db,
    txn: &RoTxn<'_, WithoutTls>,
    key: &[u8],
    max_key: usize,
) -> Result<Option<Vec<u8>>> {
    if !storable(key, max_key) {
        return Ok(None);
    }
    db.get(txn, key).map(|v| v.map(<[u8]>::to_vec)).map_err(err)
}

fn scan_txn(
    db: Db,
    txn: &RoTxn<'_, WithoutTls>,
    range: Bounds<'_>,
    reverse: bool,
    visit: &mut ScanFn<'_>,
) -> heed::Result<()> {
    if reverse {
        for item in db.rev_range(txn, &range)? {
            let (k, v) = item?;
            if !visit(k, v) {
                break;
            }
        }
    } else {
        for item in db.range(txn, &range)? {
            let (k, v) = item?;
            if !visit(k, v) {
                break;
            }
        }
    }
    Ok(())
}

/// A long-lived read transaction.
struct LmdbSnapshot {
    txn: ReentrantMutex<RoTxn<'static, WithoutTls>>,
    dbs: Dbs,
    max_key: usize,
}

impl Snapshot for LmdbSnapshot {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let txn = self.txn.lock();
        get_txn(self.dbs[ks as usize], &txn, key, self.max_key)
    }

    fn scan(
        &self,
        ks: Keyspace,
        from: &[u8],
        to: &[u8],
        reverse: bool,
        visit: &mut ScanFn<'_>,
    ) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let txn = self.txn.lock();
        scan_txn(
            self.dbs[ks as usize],
            &txn,
            bounds(from, to, self.max_key),
            reverse,
            visit,
        )
        .map_err(err)
    }
}

impl Store for LmdbStore {
    fn write(&self, batch: Batch, sync: bool) -> Result<()> {
        let mut no_sync = self.write_lock.lock();
        if *no_sync == sync {
            let mode = if sync {
                FlagSetMode::Disable
            } else {
                FlagSetMode::Enable
            };
            // SAFETY: `write_lock` makes this the only thread setting flags or
            // committing; NOSYNC is one of the flags LMDB allows to change
            // on an open environment. Its durability cost is documented above.
            unsafe { self.env.set_flags(EnvFlags::NO_SYNC, mode) }.map_err(err)?;
            *no_sync = !sync;
        }
        let mut wtxn = self.env.write_txn().map_err(err)?;
        self.apply(&mut wtxn, batch).map_err(err)?;
        wtxn.commit().map_err(err)
    }

    fn sync(&self) -> Result<()> {
        let _w = self.write_lock.lock();
        self.env.force_sync().map_err(err)
    }

    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let txn = self.env.read_txn().map_err(err)?;
        get_txn(self.db(ks), &txn, key, self.max_key)
    }

    fn multi_get(&self, ks: Keyspace, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let txn = self.env.read_txn().map_err(err)?;
        let db = self.db(ks);
        keys.iter()
            .map(|k| get_txn(db, &txn, k, self.max_key))
            .collect()
    }

    fn snapshot(&self) -> Arc<dyn Snapshot> {
        match self.env.clone().static_read_txn() {
            Ok(txn) => Arc::new(LmdbSnapshot {
                txn: ReentrantMutex::new(txn),
                dbs: self.dbs,
                max_key: self.max_key,
            }),
            Err(e) => Arc::new(FailedSnapshot(err(e))),
        }
    }

    fn compact_range(&self, _: Keyspace, _: &[u8], _: &[u8]) -> Result<()> {
        // LMDB reuses freed pages itself; there is nothing to ask for.
        Ok(())
    }

    fn approximate_size(&self, ks: Keyspace, from: &[u8], to: &[u8]) -> u64 {
        // No cheap estimate in LMDB: sum the bytes of the range (O(n)).
        let Ok(txn) = self.env.read_txn() else {
            return 0;
        };
        if from >= to {
            return 0;
        }
        let mut total = 0u64;
        let _ = scan_txn(
            self.db(ks),
            &txn,
            bounds(from, to, self.max_key),
            false,
            &mut |k, v| {
                total += (k.len() + v.len()) as u64;
                true
            },
        );
        total
    }

    fn disk_size(&self) -> u64 {
        std::fs::metadata(self.path.join("data.mdb")).map_or(0, |m| m.len())
    }
}
