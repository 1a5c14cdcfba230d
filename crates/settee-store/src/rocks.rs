//! The RocksDB store: one RocksDB instance holding every database, one
//! column family per [`Keyspace`].
//!
//! Crash safety (RocksDB's documented behaviour, which we rely on): every
//! write batch goes to the write-ahead log before the memtable, atomically
//! across column families; a write with `sync` fsyncs the log (and RocksDB
//! groups concurrent synced writers into one fsync); after a crash, recovery
//! replays the log up to the last complete batch (`PointInTimeRecovery`),
//! so a batch is either wholly present or wholly absent, and every synced
//! batch is present. Unsynced batches survive a process crash (they were
//! handed to the OS) but not an OS crash or power loss until [`Store::sync`].

#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, Options,
    ReadOptions, SnapshotWithThreadMode, WriteBatch, WriteOptions, DB,
};

use crate::leftovers;
use crate::preformat::{self, Preformat};
use crate::{Batch, Keyspace, Op, Prepared, Result, ScanFn, Snapshot, Store, StoreError};

/// Tunables for the RocksDB instance.
#[derive(Debug, Clone)]
pub struct RocksOptions {
    /// Shared block cache for all column families.
    pub block_cache_bytes: usize,
    /// Memtable size per column family before a flush to disk.
    pub write_buffer_bytes: usize,
    /// Background flush/compaction threads.
    pub background_jobs: i32,
    /// Bytes of each of the first two write-ahead logs pre-formatted after
    /// opening (see the `preformat` module); 0 (the default) turns it off.
    /// Costs twice this many bytes of writes, in the background, at every
    /// open; `settee serve` pre-formats 64 MiB.
    pub wal_preformat_bytes: u64,
}

impl Default for RocksOptions {
    fn default() -> Self {
        RocksOptions {
            block_cache_bytes: 256 << 20,
            write_buffer_bytes: 64 << 20,
            background_jobs: 2,
            wal_preformat_bytes: 0,
        }
    }
}

/// The embedded RocksDB engine behind [`Store`].
pub struct RocksStore {
    db: Arc<DB>,
    path: PathBuf,
    /// RocksDB's id of each keyspace's column family, by [`Keyspace::index`].
    cf_ids: [u32; Keyspace::ALL.len()],
    /// Joined on drop (or by `close`), so the database is closed with the store.
    preformat: parking_lot::Mutex<Option<Preformat>>,
    /// Held while an explicit compaction of `Keyspace::Blobs` runs with
    /// blob garbage collection on (see `compact_range`).
    blob_gc: parking_lot::Mutex<()>,
}

fn io(e: rocksdb::Error) -> StoreError {
    match e.kind() {
        rocksdb::ErrorKind::Corruption => StoreError::Corruption(e.into_string()),
        _ => StoreError::Io(e.into_string()),
    }
}

impl RocksStore {
    /// Writes one RocksDB batch atomically, fsyncing the log first if asked.
    fn write_batch(&self, wb: WriteBatch, sync: bool) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.db.write_opt(wb, &wo).map_err(io)
    }

    /// Opens (creating if needed) the store in `path`.
    pub fn open(path: &Path, opts: &RocksOptions) -> Result<RocksStore> {
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(opts.background_jobs);
        db_opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::PointInTime);
        db_opts.set_keep_log_file_num(4);
        db_opts.set_max_total_wal_size(512 << 20);
        // Retired write-ahead logs are reused instead of deleted: appending
        // to a reused log overwrites blocks the file already owns (an fsync
        // then need not journal new extents or a new size) and pages the
        // page cache may still hold. Recovery stops at the first stale
        // record of a log's previous life (the RocksDB we build, 11.8,
        // accepts recycling with point-in-time recovery; tests/wal_recycling_crash.rs
        // SIGKILLs a writer after recycling and finds every acked write).
        db_opts.set_recycle_log_file_num(4);
        // Flushes and compactions write whole new files that nothing reads
        // soon through the page cache (reads go through the block cache):
        // writing them with O_DIRECT saves the kernel's copy into the page
        // cache, which took ~12% of the CPU under a sustained bulk load.
        // Only where the file system supports it (tmpfs before Linux 6.6
        // does not, and RocksDB would then fail every flush).
        std::fs::create_dir_all(path).map_err(|e| StoreError::Io(e.to_string()))?;
        db_opts.set_use_direct_io_for_flush_and_compaction(supports_direct_io(path));
        let cache = Cache::new_lru_cache(opts.block_cache_bytes);
        let mut cfs: Vec<ColumnFamilyDescriptor> = Keyspace::ALL
            .iter()
            .map(|ks| ColumnFamilyDescriptor::new(ks.name(), cf_options(*ks, opts, &cache)))
            .collect();
        cfs.push(ColumnFamilyDescriptor::new(
            preformat::CF,
            Options::default(),
        ));
        let unfinished = leftovers::find(path);
        let db = Arc::new(DB::open_cf_descriptors(&db_opts, path, cfs).map_err(io)?);
        leftovers::remove_untouched(&unfinished);
        let names = Keyspace::ALL
            .iter()
            .map(|ks| ks.name().to_string())
            .chain([preformat::CF.to_string()])
            .collect();
        let cf_ids = Keyspace::ALL.map(|ks| cf_id(&db, ks));
        let preformat = Preformat::start(db.clone(), opts.wal_preformat_bytes, names);
        Ok(RocksStore {
            db,
            path: path.to_path_buf(),
            cf_ids,
            preformat: parking_lot::Mutex::new(preformat),
            blob_gc: parking_lot::Mutex::new(()),
        })
    }

    /// Blocks until the write-ahead log's pre-formatting (started by
    /// [`RocksStore::open`]) is done.
    pub fn wait_preformat(&mut self) {
        if let Some(p) = self.preformat.get_mut().as_mut() {
            p.wait();
        }
    }

    fn cf(&self, ks: Keyspace) -> &ColumnFamily {
        cf_handle(&self.db, ks)
    }
}

/// Whether files in `dir` can be opened with `O_DIRECT` (probed with a
/// scratch file that is removed again).
fn supports_direct_io(dir: &Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let probe = dir.join(".direct-io-probe");
        let ok = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)
            .is_ok();
        let _ = std::fs::remove_file(&probe);
        ok
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        false
    }
}

fn cf_handle(db: &DB, ks: Keyspace) -> &ColumnFamily {
    // Every keyspace's column family is created at open (create_missing_column_families).
    db.cf_handle(ks.name())
        .expect("column family created at open")
}

fn cf_options(ks: Keyspace, opts: &RocksOptions, cache: &Cache) -> Options {
    let mut o = Options::default();
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    match ks {
        // Point lookups by id dominate: a bloom filter makes misses cheap.
        Keyspace::Docs | Keyspace::Bodies | Keyspace::Local | Keyspace::Views => {
            table.set_bloom_filter(10.0, false)
        }
        _ => {}
    }
    o.set_block_based_table_factory(&table);
    if matches!(ks, Keyspace::Docs | Keyspace::Seqs) {
        // Purged documents (by hand or by the automatic purge) leave runs
        // of deletions in these two: a file with 3,072 of them among 4,096
        // consecutive entries is marked for compaction, so RocksDB's own
        // background compactions reclaim the space, file by file (no
        // manual `_compact`, no rewrite of the whole database at once).
        o.add_compact_on_deletion_collector_factory(4096, 3072, 0.0);
    }
    // No memtable bloom filter: setting a bit of it on every insert is a
    // cache miss, and that cost more than it saved the writer's lookups of
    // new ids, even with random ids (bench/RESULTS.md, session 6).
    o.set_write_buffer_size(opts.write_buffer_bytes);
    // Fresh data (flushes and the first compactions) is written uncompressed:
    // under a sustained write load those run on the same cores as the
    // writers, and LZ4 there cost more CPU than the bytes it saved. Older
    // levels, where most data lives, are LZ4-compressed.
    use DBCompressionType::{Lz4, None as Plain};
    o.set_compression_per_level(&[Plain, Plain, Lz4, Lz4, Lz4, Lz4, Lz4]);
    if ks == Keyspace::Blobs {
        // Attachment chunks are large values written once: RocksDB's blob
        // files keep them out of the LSM tree, so compactions move only
        // their small references (and blob garbage collection reclaims
        // the files of deleted chunks).
        o.set_enable_blob_files(true);
        o.set_min_blob_size(2048);
        o.set_blob_file_size(64 << 20);
        // No blob garbage collection in RocksDB's own compactions: with it,
        // every compaction of references rewrote the blobs they name (1.5
        // GB of blob rewrites for four 256 MiB uploads, each upload slower
        // than the one before). `compact_range` turns it on for the
        // explicit compactions that reclaim deleted attachments' space.
        // Blob files whose every blob is deleted go in any compaction.
        o.set_enable_blob_gc(false);
        // A small memtable: an upload streams through memory, so this
        // bounds what a large one holds there (two tables of 8 MiB).
        o.set_write_buffer_size(8 << 20);
        o.set_max_write_buffer_number(2);
    }
    o
}

// RocksDB's write batch format (rocksdb/db/write_batch.cc): a 12-byte
// header (the sequence number, which the write fills in, then the record
// count, both little-endian), then per record a tag, the column family id
// (varint32) and the key and value, each prefixed with its length
// (varint32).
const BATCH_HEADER: usize = 12;
const TAG_CF_DELETION: u8 = 0x4;
const TAG_CF_VALUE: u8 = 0x5;
const TAG_CF_RANGE_DELETION: u8 = 0xE;

fn push_varint32(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn push_slice(out: &mut Vec<u8>, s: &[u8]) {
    // Keys and values are bounded far below 4 GiB (document and request
    // size limits).
    push_varint32(
        out,
        u32::try_from(s.len()).expect("a key or value under 4 GiB"),
    );
    out.extend_from_slice(s);
}

/// The id RocksDB gave `ks`'s column family, read back from a write batch
/// RocksDB encodes itself (the id follows the header and the tag).
fn cf_id(db: &DB, ks: Keyspace) -> u32 {
    let mut wb = WriteBatch::default();
    wb.put_cf(cf_handle(db, ks), b"", b"");
    let mut id = 0u32;
    for (i, b) in wb.data()[BATCH_HEADER + 1..].iter().enumerate().take(5) {
        id |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            break;
        }
    }
    id
}

fn to_rocks_batch(db: &DB, batch: &Batch) -> WriteBatch {
    // Sized up front: growing the batch's buffer op by op re-copied it.
    // Per op: a tag, a column family id and two length prefixes (at most
    // 16 bytes).
    let mut wb = WriteBatch::with_capacity_bytes(12 + batch.data_bytes() + 16 * batch.len());
    // Handles looked up once per batch, not per operation (a lookup by
    // name compares strings).
    let cfs = Keyspace::ALL.map(|ks| cf_handle(db, ks));
    let cf = |ks: Keyspace| cfs[ks.index()];
    for op in batch.ops() {
        match op {
            Op::Put(ks, k, v) => wb.put_cf(cf(ks), k, v),
            Op::Delete(ks, k) => wb.delete_cf(cf(ks), k),
            Op::DeleteRange(ks, from, to) => wb.delete_range_cf(cf(ks), from, to),
        }
    }
    wb
}

/// Visits a raw iterator's entries (bounded by its read options) in
/// order: each key and value is borrowed from the iterator, not copied.
fn scan_raw<D: rocksdb::DBAccess>(
    mut iter: rocksdb::DBRawIteratorWithThreadMode<'_, D>,
    from: &[u8],
    reverse: bool,
    visit: &mut ScanFn<'_>,
) -> Result<()> {
    if reverse {
        // The upper bound in the read options makes this land below `to`.
        iter.seek_to_last();
    } else {
        iter.seek(from);
    }
    while iter.valid() {
        let (Some(k), Some(v)) = (iter.key(), iter.value()) else {
            break;
        };
        if reverse && k < from {
            break;
        }
        if !visit(k, v) {
            return Ok(());
        }
        if reverse {
            iter.prev();
        } else {
            iter.next();
        }
    }
    iter.status().map_err(io)
}

fn bounded_read_options(from: &[u8], to: &[u8]) -> ReadOptions {
    let mut ro = ReadOptions::default();
    ro.set_iterate_lower_bound(from.to_vec());
    ro.set_iterate_upper_bound(to.to_vec());
    ro
}

/// A read view that owns its database handle: a snapshot, or (without one)
/// the live database, where each read sees the latest state — RocksDB
/// records the time and takes its mutex for every snapshot.
struct RocksView {
    // Field order matters: `snap` borrows from `db` and is dropped first.
    snap: Option<SnapshotWithThreadMode<'static, DB>>,
    db: Arc<DB>,
}

impl RocksView {
    fn snapshot(db: Arc<DB>) -> RocksView {
        let snap = db.snapshot();
        // SAFETY: the snapshot borrows the DB behind the Arc, whose heap
        // address never moves; we keep a clone of the Arc in the same struct
        // and declare `snap` first so it is dropped (released) before the Arc.
        let snap: SnapshotWithThreadMode<'static, DB> = unsafe { std::mem::transmute(snap) };
        RocksView {
            snap: Some(snap),
            db,
        }
    }

    fn latest(db: Arc<DB>) -> RocksView {
        RocksView { snap: None, db }
    }
}

impl Snapshot for RocksView {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let cf = cf_handle(&self.db, ks);
        match &self.snap {
            Some(snap) => snap.get_cf(cf, key),
            None => self.db.get_cf(cf, key),
        }
        .map_err(io)
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
        let (cf, opts) = (cf_handle(&self.db, ks), bounded_read_options(from, to));
        // Without a snapshot the iterator still reads one implicit snapshot.
        match &self.snap {
            Some(snap) => scan_raw(snap.raw_iterator_cf_opt(cf, opts), from, reverse, visit),
            None => scan_raw(self.db.raw_iterator_cf_opt(cf, opts), from, reverse, visit),
        }
    }
}

impl Store for RocksStore {
    fn write(&self, batch: &Batch, sync: bool) -> Result<()> {
        self.write_batch(to_rocks_batch(&self.db, batch), sync)
    }

    fn prepare(&self, batch: &Batch) -> Option<Prepared> {
        // Per operation at most a tag and three varint32s besides the bytes.
        let mut bytes = Vec::with_capacity(BATCH_HEADER + batch.data_bytes() + 16 * batch.len());
        bytes.resize(BATCH_HEADER, 0);
        for op in batch.ops() {
            let (tag, ks, key, value) = match op {
                Op::Put(ks, k, v) => (TAG_CF_VALUE, ks, k, Some(v)),
                Op::Delete(ks, k) => (TAG_CF_DELETION, ks, k, None),
                Op::DeleteRange(ks, from, to) => (TAG_CF_RANGE_DELETION, ks, from, Some(to)),
            };
            bytes.push(tag);
            push_varint32(&mut bytes, self.cf_ids[ks.index()]);
            push_slice(&mut bytes, key);
            if let Some(v) = value {
                push_slice(&mut bytes, v);
            }
        }
        Some(Prepared {
            bytes,
            count: u32::try_from(batch.len()).ok()?,
            header: BATCH_HEADER,
        })
    }

    fn write_prepared(&self, _batch: &Batch, prepared: Prepared, sync: bool) -> Result<()> {
        let Prepared {
            mut bytes, count, ..
        } = prepared;
        bytes[8..BATCH_HEADER].copy_from_slice(&count.to_le_bytes());
        self.write_batch(WriteBatch::from_data(&bytes), sync)
    }

    fn sync(&self) -> Result<()> {
        self.db.flush_wal(true).map_err(io)
    }

    fn close(&self) -> Result<()> {
        // The pre-formatting thread writes: stop it first.
        drop(self.preformat.lock().take());
        let synced = self.sync();
        self.db.cancel_all_background_work(true);
        synced
    }

    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.get_cf(self.cf(ks), key).map_err(io)
    }

    fn multi_get(&self, ks: Keyspace, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let cf = self.cf(ks);
        self.db
            .batched_multi_get_cf(cf, keys.iter(), keys.is_sorted())
            .into_iter()
            .map(|r| r.map(|o| o.map(|v| v.to_vec())).map_err(io))
            .collect()
    }

    fn snapshot(&self) -> Arc<dyn Snapshot> {
        Arc::new(RocksView::snapshot(self.db.clone()))
    }

    fn latest(&self) -> Arc<dyn Snapshot> {
        Arc::new(RocksView::latest(self.db.clone()))
    }

    fn compact_range(&self, ks: Keyspace, from: &[u8], to: &[u8]) -> Result<()> {
        if ks == Keyspace::Blobs {
            // The bottommost level too (RocksDB skips it by default): that
            // is where deleted attachment chunks' references end up, and
            // their blob files go only once no table references them. With
            // blob garbage collection over every blob file, for this
            // compaction only (see `cf_options`): live blobs are moved out
            // of files that also hold deleted ones.
            let _one = self.blob_gc.lock();
            let cf = self.cf(ks);
            let gc = |on: &str| {
                self.db.set_options_cf(
                    cf,
                    &[
                        ("enable_blob_garbage_collection", on),
                        ("blob_garbage_collection_age_cutoff", "1.0"),
                    ],
                )
            };
            gc("true").map_err(io)?;
            let mut o = rocksdb::CompactOptions::default();
            o.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::Force);
            self.db.compact_range_cf_opt(cf, Some(from), Some(to), &o);
            gc("false").map_err(io)?;
        } else {
            self.db.compact_range_cf(self.cf(ks), Some(from), Some(to));
        }
        Ok(())
    }

    fn await_older_snapshots(&self, timeout: std::time::Duration) -> bool {
        // A snapshot's sequence is the latest one when it was taken: those
        // below `now` were taken before this call.
        let now = self.db.latest_sequence_number();
        let start = std::time::Instant::now();
        loop {
            let oldest = self
                .db
                .property_int_value("rocksdb.oldest-snapshot-sequence")
                .ok()
                .flatten()
                .unwrap_or(0);
            if oldest == 0 || oldest >= now {
                return true;
            }
            if start.elapsed() >= timeout {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    fn flush_memory(&self) -> Result<()> {
        let mut fo = rocksdb::FlushOptions::default();
        fo.set_wait(false);
        let cfs: Vec<&ColumnFamily> = Keyspace::ALL.iter().map(|ks| self.cf(*ks)).collect();
        self.db.flush_cfs_opt(&cfs, &fo).map_err(io)
    }

    fn approximate_size(&self, ks: Keyspace, from: &[u8], to: &[u8]) -> u64 {
        let sizes = self
            .db
            .get_approximate_sizes_cf(self.cf(ks), &[rocksdb::Range::new(from, to)]);
        sizes.first().copied().unwrap_or(0)
    }

    fn disk_size(&self) -> u64 {
        dir_size(&self.path)
    }

    fn memory(&self) -> Vec<(&'static str, u64)> {
        let cf_prop = |ks: Keyspace, name: &str| {
            self.db
                .property_int_value_cf(self.cf(ks), name)
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        let cf_sum = |name: &str| -> u64 {
            Keyspace::ALL
                .iter()
                .map(|ks| {
                    self.db
                        .property_int_value_cf(self.cf(*ks), name)
                        .ok()
                        .flatten()
                        .unwrap_or(0)
                })
                .sum()
        };
        vec![
            // One cache shared by every keyspace's tables (see `open`).
            (
                "block_cache",
                cf_prop(Keyspace::Docs, "rocksdb.block-cache-usage"),
            ),
            ("memtables", cf_sum("rocksdb.size-all-mem-tables")),
            (
                "table_readers",
                cf_sum("rocksdb.estimate-table-readers-mem"),
            ),
        ]
    }
}

fn dir_size(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_view_reads_the_current_state() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksStore::open(dir.path(), &RocksOptions::default()).unwrap();
        let put = |v: u8| {
            let mut b = Batch::new();
            b.put(Keyspace::Docs, b"k", vec![v]);
            s.write(&b, false).unwrap();
        };
        put(1);
        let (latest, snap) = (s.latest(), s.snapshot());
        put(2);
        assert_eq!(latest.get(Keyspace::Docs, b"k").unwrap(), Some(vec![2]));
        assert_eq!(snap.get(Keyspace::Docs, b"k").unwrap(), Some(vec![1]));
        let mut seen = Vec::new();
        latest
            .scan(Keyspace::Docs, b"a", b"z", false, &mut |_, v| {
                seen.push(v[0]);
                true
            })
            .unwrap();
        assert_eq!(seen, vec![2]);
    }

    /// A batch of every kind of operation over every keyspace, with keys
    /// and values long enough for two-byte length prefixes.
    fn mixed_batch(seed: u8) -> Batch {
        let mut b = Batch::new();
        for (i, ks) in Keyspace::ALL.iter().enumerate() {
            let i = i as u8;
            b.put(*ks, [seed, i], vec![i; 200]);
            b.delete(*ks, [seed, i, 1]);
            b.put(*ks, vec![seed; 300], b"");
            b.delete_range(*ks, [seed, i, 2], [seed, i, 3]);
        }
        b
    }

    #[test]
    fn prepared_batches_encode_as_rocksdb_encodes_them() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksStore::open(dir.path(), &RocksOptions::default()).unwrap();
        let (a, b) = (mixed_batch(1), mixed_batch(2));
        let prepared = |batch: &Batch| {
            let mut p = s.prepare(batch).unwrap();
            let count = p.count.to_le_bytes();
            p.bytes[8..BATCH_HEADER].copy_from_slice(&count);
            p.bytes
        };
        assert_eq!(prepared(&a), to_rocks_batch(&s.db, &a).data());
        // Merged preparations encode the merged batch.
        let mut ab = a.clone();
        ab.append(&b);
        let mut merged = s.prepare(&a).unwrap();
        merged.append(&s.prepare(&b).unwrap());
        assert_eq!(merged, s.prepare(&ab).unwrap());
        // And write what the batch says.
        let mut w = Batch::new();
        w.put(Keyspace::Docs, b"k1", b"v1");
        w.put(Keyspace::Seqs, b"k2", b"v2");
        w.delete(Keyspace::Docs, b"gone");
        s.write(&w, false).unwrap();
        let mut w2 = Batch::new();
        w2.put(Keyspace::Docs, b"gone", b"x");
        w2.delete(Keyspace::Docs, b"k1");
        let p = s.prepare(&w2).unwrap();
        s.write_prepared(&w2, p, true).unwrap();
        assert_eq!(s.get(Keyspace::Docs, b"k1").unwrap(), None);
        assert_eq!(s.get(Keyspace::Docs, b"gone").unwrap(), Some(b"x".to_vec()));
        assert_eq!(s.get(Keyspace::Seqs, b"k2").unwrap(), Some(b"v2".to_vec()));
    }

    fn preformat_options(bytes: u64) -> RocksOptions {
        RocksOptions {
            wal_preformat_bytes: bytes,
            ..RocksOptions::default()
        }
    }

    fn log_files(dir: &Path) -> Vec<(String, u64)> {
        let mut logs: Vec<(String, u64)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (name, e.metadata().unwrap().len())
            })
            .collect();
        logs.sort();
        logs
    }

    #[test]
    fn the_preformatted_log_is_reused_and_data_survives() {
        let dir = tempfile::tempdir().unwrap();
        let put = |s: &RocksStore, k: &[u8], sync: bool| {
            let mut b = Batch::new();
            b.put(Keyspace::Docs, k, b"v");
            s.write(&b, sync).unwrap();
        };
        {
            let mut s = RocksStore::open(dir.path(), &preformat_options(4 << 20)).unwrap();
            // Written while the pre-formatting runs: flushed early, kept.
            put(&s, b"before", false);
            s.wait_preformat();
            put(&s, b"after", true);
            let info = std::fs::read_to_string(dir.path().join("LOG")).unwrap();
            assert!(info.contains("from recycle list"), "no log was reused");
            // The log written now is the first filled one, overwritten in
            // place; the second waits on the recycle list.
            let logs = log_files(dir.path());
            let newest = logs.last().unwrap();
            assert!(newest.1 >= 4 << 20, "{logs:?}");
            assert!(
                logs.iter().filter(|l| l.1 >= 4 << 20).count() >= 2,
                "{logs:?}"
            );
        }
        let s = RocksStore::open(dir.path(), &preformat_options(0)).unwrap();
        for k in [&b"before"[..], b"after"] {
            assert_eq!(s.get(Keyspace::Docs, k).unwrap(), Some(b"v".to_vec()));
        }
        let mut private = 0;
        s.db.iterator_cf(
            s.db.cf_handle(preformat::CF).unwrap(),
            rocksdb::IteratorMode::Start,
        )
        .for_each(|_| private += 1);
        assert_eq!(private, 0, "the marker is deleted again");
    }

    #[test]
    fn dropping_the_store_stops_the_preformatting_and_closes_it() {
        let dir = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        // Far more than it can write before the drop.
        let s = RocksStore::open(dir.path(), &preformat_options(8 << 30)).unwrap();
        drop(s);
        // Reopening needs the first instance closed (RocksDB's lock file).
        let s = RocksStore::open(dir.path(), &preformat_options(0)).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        let mut b = Batch::new();
        b.put(Keyspace::Docs, b"k", b"v");
        s.write(&b, true).unwrap();
    }

    #[test]
    fn close_stops_the_preformatting_and_keeps_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksStore::open(dir.path(), &preformat_options(8 << 30)).unwrap();
        let mut b = Batch::new();
        b.put(Keyspace::Docs, b"k", b"v");
        s.write(&b, false).unwrap();
        let started = std::time::Instant::now();
        s.close().unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        assert!(
            s.preformat.lock().is_none(),
            "the pre-formatting thread is joined"
        );
        // Still readable; a process would exit here. Leaked, the store is
        // never dropped (as when a thread still holds it at exit): the
        // unsynced write above must be in the log already.
        assert_eq!(
            s.get(Keyspace::Docs, b"k").unwrap().as_deref(),
            Some(&b"v"[..])
        );
        std::mem::forget(s);
        let copy = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name() != "LOCK" {
                std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
            }
        }
        let s = RocksStore::open(copy.path(), &preformat_options(0)).unwrap();
        assert_eq!(
            s.get(Keyspace::Docs, b"k").unwrap().as_deref(),
            Some(&b"v"[..])
        );
    }

    #[test]
    fn write_snapshot_scan_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = RocksStore::open(dir.path(), &RocksOptions::default()).unwrap();
            let mut b = Batch::new();
            for i in 0u8..10 {
                b.put(Keyspace::Seqs, vec![i], vec![i * 2]);
            }
            s.write(&b, true).unwrap();
            let snap = s.snapshot();
            let mut b = Batch::new();
            b.delete_range(Keyspace::Seqs, vec![0], vec![5]);
            s.write(&b, false).unwrap();
            let mut seen = Vec::new();
            snap.scan(Keyspace::Seqs, &[2], &[6], true, &mut |k, _| {
                seen.push(k[0]);
                true
            })
            .unwrap();
            assert_eq!(seen, vec![5, 4, 3, 2]);
            let mut seen = Vec::new();
            s.snapshot()
                .scan(Keyspace::Seqs, &[0], &[9], false, &mut |k, _| {
                    seen.push(k[0]);
                    seen.len() < 2
                })
                .unwrap();
            assert_eq!(seen, vec![5, 6]);
            assert_eq!(
                s.multi_get(Keyspace::Seqs, &[&[1], &[7]]).unwrap(),
                vec![None, Some(vec![14])]
            );
            s.sync().unwrap();
        }
        let s = RocksStore::open(dir.path(), &RocksOptions::default()).unwrap();
        assert_eq!(s.get(Keyspace::Seqs, &[9]).unwrap(), Some(vec![18]));
        assert_eq!(s.get(Keyspace::Seqs, &[1]).unwrap(), None);
        assert!(s.disk_size() > 0);
    }

    #[test]
    fn flushed_and_compacted_files_read_back() {
        // Flushes and compactions use O_DIRECT where the probe allows it;
        // either way the data must come back, and the probe leaves nothing.
        let dir = tempfile::tempdir().unwrap();
        let s = RocksStore::open(dir.path(), &RocksOptions::default()).unwrap();
        assert!(!dir.path().join(".direct-io-probe").exists());
        let mut b = Batch::new();
        for i in 0u32..5000 {
            b.put(Keyspace::Docs, i.to_be_bytes(), vec![7; 100]);
        }
        s.write(&b, true).unwrap();
        s.compact_range(Keyspace::Docs, &[0], &[255, 255, 255, 255, 255])
            .unwrap();
        assert!(s.approximate_size(Keyspace::Docs, &[0], &[255; 5]) > 100_000);
        assert_eq!(
            s.get(Keyspace::Docs, &4321u32.to_be_bytes()).unwrap(),
            Some(vec![7; 100])
        );
    }
}
