//! Runs the workloads on every engine, interleaved: within each run, each
//! workload goes through all engines before the next workload starts, and
//! the engine that goes first rotates from run to run, so a noisy moment of
//! the machine (or the previous engine's write-back) hits every engine alike.
//! Every workload gets a fresh directory, removed afterwards.

use std::path::{Path, PathBuf};

use crate::report::{Metric, Results};
use crate::scenarios::{self, Bench, BenchResult, Outcome, Sizes};
use crate::stores::EngineKind;

/// What to run, and where.
#[derive(Debug, Clone)]
pub struct Plan {
    pub engines: Vec<EngineKind>,
    pub runs: usize,
    pub sizes: Sizes,
    /// Parent of the per-workload directories.
    pub base: PathBuf,
}

fn fresh_dir(base: &Path, kind: EngineKind, what: &str, run: usize) -> BenchResult<PathBuf> {
    let dir = base.join(format!("{}-{what}-{run}", kind.name()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(dir)
}

fn report(results: &mut Results, run: usize, kind: EngineKind, metric: Metric, o: Outcome) {
    let (rate, per_op) = (o.rate(), o.bytes_per_op());
    eprintln!(
        "  run {} {:<8} {:<12} {rate:>12.0}/s {per_op:>9.0} B/op",
        run + 1,
        kind.name(),
        format!("{metric:?}")
    );
    results.add(metric, kind, rate, per_op);
}

/// Lightning load, then point reads and the scan on the loaded database.
fn lightning_group(
    plan: &Plan,
    kind: EngineKind,
    run: usize,
    results: &mut Results,
) -> BenchResult<()> {
    let dir = fresh_dir(&plan.base, kind, "lightning", run)?;
    let bench = Bench::open(kind, &dir)?;
    let ids = scenarios::monotonic_ids(plan.sizes.docs);
    let load = scenarios::bulk_load(&bench.db, &ids, plan.sizes.batch)?;
    report(results, run, kind, Metric::Lightning, load);
    let reads = scenarios::point_reads(&bench.db, &ids, plan.sizes.reads)?;
    report(results, run, kind, Metric::PointReads, reads);
    let scan = scenarios::scan_all(&bench.db, ids.len())?;
    report(results, run, kind, Metric::Scan, scan);
    bench.close();
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

fn random_group(
    plan: &Plan,
    kind: EngineKind,
    run: usize,
    results: &mut Results,
) -> BenchResult<()> {
    let dir = fresh_dir(&plan.base, kind, "random", run)?;
    let bench = Bench::open(kind, &dir)?;
    let ids = scenarios::random_ids(plan.sizes.docs);
    let load = scenarios::bulk_load(&bench.db, &ids, plan.sizes.batch)?;
    report(results, run, kind, Metric::RandomIds, load);
    bench.close();
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

fn durable_group(
    plan: &Plan,
    kind: EngineKind,
    run: usize,
    threads: usize,
    results: &mut Results,
) -> BenchResult<()> {
    let dir = fresh_dir(&plan.base, kind, &format!("durable{threads}"), run)?;
    let bench = Bench::open(kind, &dir)?;
    let outcome = scenarios::durable_puts(&bench.db, threads, plan.sizes.durable_for)?;
    let metric = if threads == 1 {
        Metric::Durable1
    } else {
        Metric::DurableN
    };
    report(results, run, kind, metric, outcome);
    bench.close();
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Runs the whole plan.
pub fn run(plan: &Plan) -> BenchResult<Results> {
    std::fs::create_dir_all(&plan.base)?;
    let mut results = Results::default();
    for run in 0..plan.runs {
        let mut order = plan.engines.clone();
        let n = order.len().max(1);
        order.rotate_left(run % n);
        let names: Vec<&str> = order.iter().map(|k| k.name()).collect();
        eprintln!(
            "run {} of {} (engine order {})",
            run + 1,
            plan.runs,
            names.join(", ")
        );
        for &k in &order {
            lightning_group(plan, k, run, &mut results)
                .map_err(|e| format!("{} lightning: {e}", k.name()))?;
        }
        for &k in &order {
            random_group(plan, k, run, &mut results)
                .map_err(|e| format!("{} random ids: {e}", k.name()))?;
        }
        for &k in &order {
            durable_group(plan, k, run, 1, &mut results)
                .map_err(|e| format!("{} durable x1: {e}", k.name()))?;
        }
        for &k in &order {
            let t = plan.sizes.threads;
            durable_group(plan, k, run, t, &mut results)
                .map_err(|e| format!("{} durable x{t}: {e}", k.name()))?;
        }
    }
    Ok(results)
}
