//! `fsync_floor`: the disk's own limit for a durable write, measured in the
//! same run as the servers. A file in the directory given by `--fsync-dir`
//! (the data directory's disk; default the current directory) is first
//! written whole and synced (pre-formatted, as Settee's write-ahead log
//! is, so a sync commits data blocks only, not a new file size through
//! the file system's journal); then 64-byte records are written one
//! after another into it, each followed by an `fdatasync`, 2,000 times
//! (quick: 200); each sample is the `fdatasync` alone. No server is
//! involved; runs once per invocation (server "disk").
//!
//! The report divides every serial durable row's p50 by this row's p50
//! ([`SERIAL_DURABLE`], `report::floor_table`): an acknowledged full-commit
//! write needs at least one such sync, so the multiple says how much the
//! server adds to the disk.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::{Ctx, Outcome, ScenarioDef, Scope};
use crate::cpu::Measure;
use crate::error::BenchError;
use crate::load::{BoxFuture, Run};
use crate::stats::Sample;

pub const DEF: ScenarioDef = ScenarioDef {
    name: "fsync_floor",
    group: "chapter",
    about: "the disk's limit: fdatasync after a 64-byte write (--fsync-dir)",
    scope: Scope::Once,
    run: run_boxed,
};

/// The rows that are one client writing one durable document at a time.
pub const SERIAL_DURABLE: &[&str] = &["single_doc_insert", "concurrent_writers_1"];

/// The server name of this scenario's row.
pub const SERVER: &str = "disk";

fn run_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(async move {
        let n = ctx.scale(2_000, 200);
        let dir = ctx.fsync_dir.clone();
        let c = ctx.clone();
        let run = tokio::task::spawn_blocking(move || probe(&c, &dir, n))
            .await
            .map_err(|e| BenchError::Engine(e.to_string()))??;
        let mut out = Outcome::from_run(&ctx, "fsync_floor", "fsync_floor", "ops", run)
            .with("dir", ctx.fsync_dir.display().to_string())
            .with("write_bytes", 64);
        out.server = SERVER.into();
        Ok(vec![out])
    })
}

fn probe(ctx: &Ctx, dir: &Path, n: u64) -> Result<Run, BenchError> {
    let mut file = tempfile::Builder::new()
        .prefix(".settee-fsync-floor-")
        .tempfile_in(dir)?;
    const RECORD: usize = 64;
    file.write_all(&vec![0u8; RECORD * n as usize])?;
    file.as_file().sync_all()?;
    let payload = [b'x'; RECORD];
    let measure = Measure::start();
    let mut samples = Vec::with_capacity(n as usize);
    for i in 0..n {
        file.as_file().write_all_at(&payload, i * RECORD as u64)?;
        let t0 = Instant::now();
        let ok = file.as_file().sync_data().is_ok();
        samples.push(Sample {
            at_us: t0.duration_since(measure.started()).as_micros() as u64,
            latency_us: u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX),
            items: u32::from(ok),
            ok,
        });
        ctx.progress.tick(1);
    }
    Ok(Run {
        samples,
        measured: measure.finish(),
        error_messages: Vec::new(),
    })
}
