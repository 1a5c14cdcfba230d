//! `--probe N`: N durable single-document puts per engine, one writer, with
//! the bytes the process sent to storage (`write_bytes` of `/proc/self/io`)
//! per put. Meant to run under `strace -f -c -e trace=fsync,fdatasync,…`,
//! one engine at a time, to count the flushes each commit costs; `--probe 0`
//! gives the fixed cost of opening the store and creating the database.

use std::path::Path;
use std::time::Instant;

use settee_core::doc::Doc;

use crate::scenarios::{storage_write_bytes, Bench, BenchResult};
use crate::stores::EngineKind;

/// Runs the probe for each engine in a fresh directory under `base`.
pub fn run(engines: &[EngineKind], n: u64, base: &Path) -> BenchResult<()> {
    for &kind in engines {
        let dir = base.join(format!("{}-probe", kind.name()));
        let _ = std::fs::remove_dir_all(&dir);
        let bench = Bench::open(kind, &dir)?;
        let before = storage_write_bytes();
        let start = Instant::now();
        for i in 0..n {
            bench.db.put(Doc::new(
                format!("{i:010}"),
                serde_json::json!({"foo": "bar"}),
            )?)?;
        }
        let secs = start.elapsed().as_secs_f64();
        let written = storage_write_bytes().saturating_sub(before);
        let per_put = written.checked_div(n).unwrap_or(0);
        println!("probe {:<8} {n} durable puts in {secs:.2} s; {written} bytes to storage ({per_put} per put)", kind.name());
        bench.close();
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}
