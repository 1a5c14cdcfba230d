//! redb behind [`Store`]: one file, one table per [`Keyspace`].
//!
//! How the contract is met:
//! - **Atomic batches**: every [`Store::write`] is one redb write
//!   transaction; an error drops (aborts) it.
//! - **`sync` flag**: `Durability::Immediate` for synced writes,
//!   `Durability::None` otherwise. Caveat (redb's documentation): a `None`
//!   commit is *not persisted at all* until a later `Immediate` commit — it
//!   is lost even on a process crash, which is weaker than RocksDB's unsynced
//!   writes (handed to the OS, they survive a process crash).
//! - **[`Store::sync`]**: an empty `Immediate` commit, which persists every
//!   earlier `None` commit.
//! - **Snapshots**: a `ReadTransaction` (MVCC, `Send + Sync`); each table is
//!   opened on first use and kept (a point read needs two of the six).
//! - **Space**: redb's `compact` needs exclusive access to the database, so
//!   [`Store::compact_range`] is a no-op; freed pages are reused.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use redb::{
    Durability, ReadOnlyTable, ReadTransaction, ReadableDatabase, TableDefinition, WriteTransaction,
};
use settee_store::{Batch, Keyspace, Op, Result, ScanFn, Snapshot, Store, StoreError};

use super::FailedSnapshot;

type Def = TableDefinition<'static, &'static [u8], &'static [u8]>;
type RoTable = ReadOnlyTable<&'static [u8], &'static [u8]>;

const TABLES: [Def; Keyspace::ALL.len()] = [
    TableDefinition::new("meta"),
    TableDefinition::new("docs"),
    TableDefinition::new("seqs"),
    TableDefinition::new("bodies"),
    TableDefinition::new("local"),
    TableDefinition::new("purges"),
];

fn table(ks: Keyspace) -> Def {
    TABLES[ks as usize]
}

fn err(e: impl Into<redb::Error>) -> StoreError {
    match e.into() {
        redb::Error::Corrupted(m) => StoreError::Corruption(m),
        e => StoreError::Io(e.to_string()),
    }
}

/// The redb engine behind [`Store`].
pub struct RedbStore {
    db: redb::Database,
    path: PathBuf,
}

impl RedbStore {
    /// Opens (creating if needed) the database file `dir/data.redb`.
    pub fn open(dir: &Path) -> Result<RedbStore> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Io(e.to_string()))?;
        let path = dir.join("data.redb");
        let db = redb::Database::create(&path).map_err(err)?;
        let txn = db.begin_write().map_err(err)?;
        for def in TABLES {
            txn.open_table(def).map_err(err)?;
        }
        txn.commit().map_err(err)?;
        Ok(RedbStore { db, path })
    }

    fn begin(&self, sync: bool) -> Result<WriteTransaction> {
        let mut txn = self.db.begin_write().map_err(err)?;
        txn.set_durability(if sync {
            Durability::Immediate
        } else {
            Durability::None
        })
        .map_err(err)?;
        Ok(txn)
    }
}

fn apply(txn: &WriteTransaction, batch: Batch) -> std::result::Result<(), redb::Error> {
    // Tables stay open for the whole batch: opening one costs a lookup.
    let mut open: Vec<Option<redb::Table<'_, &[u8], &[u8]>>> =
        (0..TABLES.len()).map(|_| None).collect();
    for op in batch.ops {
        let ks = match &op {
            Op::Put(ks, ..) | Op::Delete(ks, _) | Op::DeleteRange(ks, ..) => *ks,
        };
        let t = match &mut open[ks as usize] {
            Some(t) => t,
            slot => slot.insert(txn.open_table(table(ks))?),
        };
        match op {
            Op::Put(_, k, v) => {
                t.insert(k.as_slice(), v.as_slice())?;
            }
            Op::Delete(_, k) => {
                t.remove(k.as_slice())?;
            }
            Op::DeleteRange(_, from, to) => {
                if from < to {
                    t.retain_in(from.as_slice()..to.as_slice(), |_, _| false)?;
                }
            }
        }
    }
    Ok(())
}

fn scan_table(
    t: &RoTable,
    from: &[u8],
    to: &[u8],
    reverse: bool,
    visit: &mut ScanFn<'_>,
) -> Result<()> {
    if from >= to {
        return Ok(());
    }
    let range = t.range(from..to).map_err(err)?;
    let mut step = |item: std::result::Result<_, redb::StorageError>| -> Result<bool> {
        let (k, v): (redb::AccessGuard<'_, &[u8]>, redb::AccessGuard<'_, &[u8]>) =
            item.map_err(err)?;
        Ok(visit(k.value(), v.value()))
    };
    if reverse {
        for item in range.rev() {
            if !step(item)? {
                break;
            }
        }
    } else {
        for item in range {
            if !step(item)? {
                break;
            }
        }
    }
    Ok(())
}

/// A read transaction, with the tables opened so far.
struct RedbSnapshot {
    txn: ReadTransaction,
    tables: [OnceLock<RoTable>; TABLES.len()],
}

impl RedbSnapshot {
    fn new(txn: ReadTransaction) -> RedbSnapshot {
        RedbSnapshot {
            txn,
            tables: Default::default(),
        }
    }

    fn table(&self, ks: Keyspace) -> Result<&RoTable> {
        let cell = &self.tables[ks as usize];
        if let Some(t) = cell.get() {
            return Ok(t);
        }
        let opened = self.txn.open_table(table(ks)).map_err(err)?;
        // A racing thread may have set it first; either table is the same.
        Ok(cell.get_or_init(|| opened))
    }
}

impl Snapshot for RedbSnapshot {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .table(ks)?
            .get(key)
            .map_err(err)?
            .map(|g| g.value().to_vec()))
    }

    fn scan(
        &self,
        ks: Keyspace,
        from: &[u8],
        to: &[u8],
        reverse: bool,
        visit: &mut ScanFn<'_>,
    ) -> Result<()> {
        scan_table(self.table(ks)?, from, to, reverse, visit)
    }
}

impl Store for RedbStore {
    fn write(&self, batch: Batch, sync: bool) -> Result<()> {
        let txn = self.begin(sync)?;
        apply(&txn, batch).map_err(err)?;
        txn.commit().map_err(err)
    }

    fn sync(&self) -> Result<()> {
        self.begin(true)?.commit().map_err(err)
    }

    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let txn = self.db.begin_read().map_err(err)?;
        let t = txn.open_table(table(ks)).map_err(err)?;
        Ok(t.get(key).map_err(err)?.map(|g| g.value().to_vec()))
    }

    fn multi_get(&self, ks: Keyspace, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let txn = self.db.begin_read().map_err(err)?;
        let t = txn.open_table(table(ks)).map_err(err)?;
        keys.iter()
            .map(|k| Ok(t.get(*k).map_err(err)?.map(|g| g.value().to_vec())))
            .collect()
    }

    fn snapshot(&self) -> Arc<dyn Snapshot> {
        match self.db.begin_read() {
            Ok(txn) => Arc::new(RedbSnapshot::new(txn)),
            Err(e) => Arc::new(FailedSnapshot(err(e))),
        }
    }

    fn compact_range(&self, _: Keyspace, _: &[u8], _: &[u8]) -> Result<()> {
        Ok(())
    }

    fn approximate_size(&self, ks: Keyspace, from: &[u8], to: &[u8]) -> u64 {
        // No range estimate in redb: sum the bytes of the range (O(n)).
        let Ok(t) = self
            .db
            .begin_read()
            .map_err(err)
            .and_then(|txn| txn.open_table(table(ks)).map_err(err))
        else {
            return 0;
        };
        let mut total = 0u64;
        let _ = scan_table(&t, from, to, false, &mut |k, v| {
            total += (k.len() + v.len()) as u64;
            true
        });
        total
    }

    fn disk_size(&self) -> u64 {
        std::fs::metadata(&self.path).map_or(0, |m| m.len())
    }
}
