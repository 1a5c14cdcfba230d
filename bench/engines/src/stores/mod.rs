//! The engines under test, each behind [`settee_store::Store`].
//!
//! RocksDB is settee's own [`RocksStore`] with its default options; LMDB and
//! redb are implemented here ([`lmdb`], [`redb_store`]) to the same contract.

pub mod lmdb;
pub mod redb_store;

use std::path::Path;
use std::sync::Arc;

use settee_store::rocks::{RocksOptions, RocksStore};
use settee_store::{Keyspace, Result, ScanFn, Snapshot, Store, StoreError};

/// One engine under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    Rocks,
    Lmdb,
    Redb,
}

impl EngineKind {
    pub const ALL: [EngineKind; 3] = [EngineKind::Rocks, EngineKind::Lmdb, EngineKind::Redb];

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Rocks => "rocksdb",
            EngineKind::Lmdb => "lmdb",
            EngineKind::Redb => "redb",
        }
    }

    pub fn parse(s: &str) -> Option<EngineKind> {
        EngineKind::ALL
            .into_iter()
            .find(|k| k.name() == s || (s == "heed" && *k == EngineKind::Lmdb))
    }

    /// Opens a fresh store of this kind in `dir` (which should not exist yet).
    pub fn open(self, dir: &Path) -> Result<Arc<dyn Store>> {
        Ok(match self {
            EngineKind::Rocks => Arc::new(RocksStore::open(dir, &RocksOptions::default())?),
            EngineKind::Lmdb => Arc::new(lmdb::LmdbStore::open(dir)?),
            EngineKind::Redb => Arc::new(redb_store::RedbStore::open(dir)?),
        })
    }
}

/// A snapshot that could not be opened: every read fails with the cause
/// ([`Store::snapshot`] cannot return an error).
pub(crate) struct FailedSnapshot(pub(crate) StoreError);

impl Snapshot for FailedSnapshot {
    fn get(&self, _: Keyspace, _: &[u8]) -> Result<Option<Vec<u8>>> {
        Err(self.0.clone())
    }

    fn scan(&self, _: Keyspace, _: &[u8], _: &[u8], _: bool, _: &mut ScanFn<'_>) -> Result<()> {
        Err(self.0.clone())
    }
}
