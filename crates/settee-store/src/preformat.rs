//! Pre-formatting the RocksDB write-ahead log after the store opens.
//!
//! An `fdatasync` after appending to a file must also commit the file's
//! new size and newly allocated blocks through the file system's journal;
//! after overwriting blocks the file already owns it only writes the data.
//! On the development VM's ext4, 4 KB appended then synced: 168 µs,
//! overwritten: 92 µs; 300 KB: 444 vs 214 µs (`bench/RESULTS.md`).
//! RocksDB overwrites a log only when it reuses a recycled one
//! (`recycle_log_file_num`), and it recycles only logs retired by the
//! running process, so every process's first log is append-only — the one
//! every write goes to until the first memtable flush.
//!
//! Like a database that zero-fills its log segments before using them,
//! the store fills its first log with log-only records (`PutLogData`:
//! written to the log, never applied to any column family, skipped by
//! recovery) and retires it (a memtable switch and a flush of every column
//! family, after which nothing needs the log and RocksDB recycles it); then
//! the same with the second log, so that the log RocksDB writes next is
//! the first one, overwritten in place, and the one after it (the next
//! memtable switch, e.g. the flush after a database deletion) the second.
//!
//! Invariants:
//! - Only log-only records and one marker key of the store's private
//!   column family ([`CF`]) are written; no keyspace's data changes (the
//!   flush only moves memtables to files).
//! - It runs on its own thread, so the store serves at once; writes made
//!   meanwhile are merely flushed a little early. A crash at any point
//!   leaves nothing to undo.
//! - [`Preformat`]'s drop stops the thread (between 1 MiB records) and
//!   joins it, so the database is closed when the store is dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rocksdb::{FlushOptions, WriteBatch, WriteOptions, DB};

/// The store's private column family (never a [`crate::Keyspace`]): it
/// only ever holds the marker whose flush switches the log.
pub(crate) const CF: &str = "store-private";

/// Size of each log-only record.
const RECORD: usize = 1 << 20;

/// Logs pre-formatted.
const LOGS: usize = 2;

const MARKER: &[u8] = b"preformat";

/// The pre-formatting thread of an open store.
pub(crate) struct Preformat {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Preformat {
    /// Starts filling two logs of `db` with `bytes` of log-only records
    /// each and retiring them for reuse; `cfs` names every column
    /// family that may hold writes. `None` when `bytes` is 0 or the thread
    /// cannot start (pre-formatting is only an optimisation).
    pub(crate) fn start(db: Arc<DB>, bytes: u64, cfs: Vec<String>) -> Option<Preformat> {
        if bytes == 0 {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("wal-preformat".into())
            .spawn(move || {
                // Errors end the pre-formatting only: the same failure
                // reaches the next real write, which reports it.
                let _ = run(&db, bytes, &cfs, &flag);
            })
            .ok()?;
        Some(Preformat {
            stop,
            thread: Some(thread),
        })
    }

    /// Blocks until the pre-formatting is done (or stopped).
    pub(crate) fn wait(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Preformat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wait();
    }
}

fn run(db: &DB, bytes: u64, cfs: &[String], stop: &AtomicBool) -> Result<(), rocksdb::Error> {
    let record = vec![0u8; RECORD];
    // Two logs: the one written first after the pre-formatting, and the
    // one the next switch takes from the recycle list (a switch also
    // comes with every database deletion's flush). Later logs are recycled
    // ones again, each as long as its previous life.
    for _ in 0..LOGS {
        let mut written = 0u64;
        while written < bytes {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let mut wb = WriteBatch::default();
            wb.put_log_data(&record);
            db.write_opt(wb, &WriteOptions::default())?;
            written += RECORD as u64;
        }
        // Retire the filled log: a new log starts with the switch, and
        // once every memtable holding writes from the old one is flushed,
        // nothing needs it and RocksDB puts it on its recycle list. The
        // second switch starts the first recycled log.
        switch(db, cfs)?;
    }
    Ok(())
}

/// Switches to a new log: writes and deletes the marker (a memtable must
/// hold something to be switched) and flushes the named column families
/// (all of them: writes made meanwhile must not keep the old log alive).
fn switch(db: &DB, names: &[String]) -> Result<(), rocksdb::Error> {
    let Some(private) = db.cf_handle(CF) else {
        return Ok(());
    };
    db.put_cf(private, MARKER, b"")?;
    db.delete_cf(private, MARKER)?;
    let cfs: Vec<_> = names.iter().filter_map(|n| db.cf_handle(n)).collect();
    db.flush_cfs_opt(&cfs, &FlushOptions::default())
}
