//! Storage-engine benchmark for Settee's document layer.
//!
//! Runs settee-db (`Engine::with_store`) over RocksDB (settee's own
//! `RocksStore`), LMDB (heed) and redb, each behind `settee_store::Store`,
//! and prints the median of each workload per engine with its ratio to
//! RocksDB. See RESULTS.md for a recorded run.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/main/target cargo run --release -- [--quick]
//!     [--runs N] [--engines rocksdb,lmdb,redb] [--dir /tmp/…] [--check] [--probe N]
//! ```
//!
//! `--check` only verifies that every engine keeps the store contract
//! (which a normal run also does first); `--probe N` measures the storage
//! cost of single durable puts instead (see [`probe`]).

mod contract;
mod probe;
mod report;
mod runner;
mod scenarios;
mod stores;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use runner::Plan;
use scenarios::{BenchResult, Sizes};
use stores::EngineKind;

const USAGE: &str = "usage: settee-bench-engines [--quick] [--runs N] [--engines rocksdb,lmdb,redb] [--dir DIR] [--check] [--probe N]";

struct Args {
    plan: Plan,
    check_only: bool,
    probe: Option<u64>,
}

fn parse_args() -> BenchResult<Args> {
    let mut quick = false;
    let mut runs = None;
    let mut engines = EngineKind::ALL.to_vec();
    let mut base = std::env::temp_dir().join(format!("settee-bench-{}", std::process::id()));
    let mut check_only = false;
    let mut probe = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--quick" => quick = true,
            "--check" => check_only = true,
            "--probe" => probe = Some(value()?.parse::<u64>()?),
            "--runs" => runs = Some(value()?.parse::<usize>()?),
            "--dir" => base = PathBuf::from(value()?),
            "--engines" => {
                engines = value()?
                    .split(',')
                    .map(|s| {
                        EngineKind::parse(s.trim()).ok_or_else(|| format!("unknown engine {s:?}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}").into()),
        }
    }
    let sizes = if quick {
        Sizes {
            docs: 10_000,
            batch: 1_000,
            reads: 10_000,
            durable_for: Duration::from_secs(1),
            threads: 32,
        }
    } else {
        Sizes {
            docs: 100_000,
            batch: 1_000,
            reads: 100_000,
            durable_for: Duration::from_secs(3),
            threads: 32,
        }
    };
    let runs = runs.unwrap_or(if quick { 1 } else { 3 });
    Ok(Args {
        plan: Plan {
            engines,
            runs,
            sizes,
            base,
        },
        check_only,
        probe,
    })
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "unknown".into(), |s| s.trim().to_string())
}

fn check_contracts(plan: &Plan) -> BenchResult<()> {
    for &k in &plan.engines {
        let dir = plan.base.join(format!("{}-contract", k.name()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = contract::check(k, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        r.map_err(|e| format!("{}: {e}", k.name()))?;
        eprintln!("contract ok: {}", k.name());
    }
    Ok(())
}

fn real_main() -> BenchResult<()> {
    let Args {
        plan,
        check_only,
        probe,
    } = parse_args()?;
    std::fs::create_dir_all(&plan.base)?;
    if let Some(n) = probe {
        let r = probe::run(&plan.engines, n, &plan.base);
        let _ = std::fs::remove_dir_all(&plan.base);
        return r;
    }
    let checked = check_contracts(&plan);
    if check_only || checked.is_err() {
        let _ = std::fs::remove_dir_all(&plan.base);
        return checked;
    }
    let start_load = load_average();
    println!("load average at start: {start_load}");
    println!(
        "sizes: {:?}; runs: {}; dir: {}",
        plan.sizes,
        plan.runs,
        plan.base.display()
    );
    let results = runner::run(&plan);
    let end_load = load_average();
    let _ = std::fs::remove_dir_all(&plan.base);
    let results = results?;
    println!("load average at end: {end_load}\n");
    println!(
        "Medians of {} interleaved runs (ratio to rocksdb; higher is better):\n",
        plan.runs
    );
    println!("{}", results.medians_table(&plan.engines, &plan.sizes));
    println!("Median of the per-run ratios to rocksdb (same run, back to back):\n");
    println!(
        "{}",
        results.paired_ratios_table(&plan.engines, &plan.sizes)
    );
    println!("Bytes sent to storage per document (median; /proc/self/io write_bytes while the clock ran):\n");
    println!("{}", results.written_table(&plan.engines, &plan.sizes));
    println!("All runs:\n");
    println!("{}", results.runs_table(&plan.engines, &plan.sizes));
    Ok(())
}

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
