//! The RocksDB store recycles its write-ahead log files (RocksDB's
//! `recycle_log_file_num`), so a recycled log holds new records followed
//! by stale ones from its previous life. Recovery must stop at the end of
//! the new records without losing any of them.
//!
//! This test kills a writer process with SIGKILL at arbitrary points after
//! logs have been recycled (checked in RocksDB's own info log) and checks
//! that every write it acknowledged (a synced `write` that returned) is
//! there after reopening. The writer is this same test binary, run again
//! with `CHILD_DIR` set.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use settee_store::rocks::{RocksOptions, RocksStore};
use settee_store::{Batch, Keyspace, Store};

const CHILD_DIR: &str = "SETTEE_WAL_RECYCLE_CHILD_DIR";
const CHILD_START: &str = "SETTEE_WAL_RECYCLE_CHILD_START";
const TEST_NAME: &str = "sigkill_after_wal_recycling_loses_no_acknowledged_write";

/// Small memtables: a new log every few hundred writes, so logs get
/// flushed, retired and recycled within a second of writing.
fn options() -> RocksOptions {
    RocksOptions {
        write_buffer_bytes: 64 << 10,
        ..RocksOptions::default()
    }
}

fn key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn value(i: u64) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(200, b'x');
    v
}

/// The child: synced writes of increasing keys, each acknowledged on
/// stdout once `write` returned; bounded in count and time.
fn child(dir: &Path, start: u64) {
    use std::io::Write;
    let store = RocksStore::open(dir, &options()).expect("open store");
    let mut out = std::io::stdout().lock();
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in start..start + 200_000 {
        if Instant::now() > deadline {
            break;
        }
        let mut b = Batch::new();
        b.put(Keyspace::Docs, key(i), value(i));
        store.write(&b, true).expect("write");
        writeln!(out, "acked {i}").expect("stdout");
        out.flush().expect("stdout");
    }
}

fn recycled_a_log(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().any(|e| {
        let p = e.unwrap().path();
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("LOG"))
            && std::fs::read_to_string(&p)
                .unwrap_or_default()
                .contains("from recycle list")
    })
}

#[test]
fn sigkill_after_wal_recycling_loses_no_acknowledged_write() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        let start = std::env::var(CHILD_START).unwrap().parse().unwrap();
        return child(Path::new(&dir), start);
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut next: u64 = 0;
    for round in 0..4u64 {
        let mut proc = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads", "1"])
            .env(CHILD_DIR, tmp.path())
            .env(CHILD_START, next.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the writer");
        let mut lines = BufReader::new(proc.stdout.take().unwrap()).lines();
        let mut acked: Option<u64> = None;
        // Enough writes for several logs to be recycled, plus a varying
        // number so the kill lands at different points of a log.
        let want = 3_000 + round * 397;
        let deadline = Instant::now() + Duration::from_secs(60);
        while acked.map_or(0, |a| a + 1 - next) < want && Instant::now() < deadline {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some(n) = l.strip_prefix("acked ") {
                        acked = Some(n.parse().unwrap());
                    }
                }
                _ => break,
            }
        }
        // SIGKILL: no shutdown, no flush.
        proc.kill().unwrap();
        // Acknowledgements already written before the kill count too.
        for l in lines.map_while(Result::ok) {
            if let Some(n) = l.strip_prefix("acked ") {
                acked = Some(n.parse().unwrap());
            }
        }
        proc.wait().unwrap();
        let last = acked.unwrap_or_else(|| panic!("round {round}: nothing was acknowledged"));
        let store = RocksStore::open(tmp.path(), &options()).unwrap();
        let mut lost = Vec::new();
        for i in 0..=last {
            match store.get(Keyspace::Docs, &key(i)).unwrap() {
                Some(v) => assert_eq!(v, value(i), "round {round}: key {i} corrupted"),
                None => lost.push(i),
            }
        }
        assert!(
            lost.is_empty(),
            "round {round}: {} acknowledged writes lost, first {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        );
        drop(store);
        next = last + 1;
    }
    assert!(
        recycled_a_log(tmp.path()),
        "no log was recycled: the test did not exercise recycling"
    );
}
