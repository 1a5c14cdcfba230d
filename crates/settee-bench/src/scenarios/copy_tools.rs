//! The operator tools as an operator runs them: the same 100,000
//! `{"foo":"bar"}` documents as the `copy` scenario (quick: 5,000) are
//! preloaded into a fresh source database, then copied into a fresh target
//! (created before and deleted after each run, both outside the clock) by
//! real `settee` subprocesses (the current executable), credentials in the
//! URLs:
//!
//! - `copy_tools_copy`: `settee copy SRC DST` (page and batch sizes chosen
//!   automatically at run time);
//! - `copy_tools_copy_fixed_N` for N = 50, 200, 2000: `settee copy SRC DST
//!   -u N -b N` (the same faithful copy with fixed page and batch sizes);
//! - `copy_tools_pipeline_N` for N = 50, 200, 2000:
//!   `settee ls-docs SRC -u N | settee post-docs DST --new-edits=false`,
//!   two processes joined by a kernel pipe exactly as a shell joins them.
//!
//! Each run is one sample: its latency is the wall time from starting the
//! process(es) to the last exit, its items the documents copied. A run is
//! bounded by a timeout (killed when it runs over); a run that exits
//! non-zero, times out, or leaves the target with a `doc_count` other than
//! the source's, or a probe document with another revision, is an error
//! (no items, its time not counted), never a sample. The full run repeats
//! the four variants 3 times, interleaved (quick: once); a row's throughput
//! is its documents over its runs' total wall time, each run's own figure is
//! in `docs_per_s_runs`. "client CPU" is the tools' CPU (user + system of
//! the waited-for children, `RUSAGE_CHILDREN`), not the bench's.
//!
//! The copy row carries the verdict the issue asks for, like for like:
//! `ratio_copy_to_best` = automatic copy's docs/s over the best fixed-size
//! copy's (`best_page_docs`), `within_10pct` when at least 0.9, and
//! `copy_curve` (docs/s per fixed page size). It also carries the seed's
//! curve for the pipeline (`curve`) and `ratio_copy_to_best_pipeline`; the
//! pipeline reads only winning revisions without their histories, so it is
//! not a like-for-like reference for a faithful copy.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use serde_json::json;

use super::{
    cleanup, create_db, db_info, preload, seq_id, Ctx, Outcome, ScenarioDef, Scope, FOO_BAR,
};
use crate::client::{redact, Conn};
use crate::cpu::{children_cpu, Measured};
use crate::error::BenchError;
use crate::load::BoxFuture;
use crate::stats::{Sample, Summary};

pub const DEF: ScenarioDef = ScenarioDef {
    name: "copy_tools",
    group: "copy",
    about: "settee copy (automatic, and fixed -u 50/200/2000) vs settee ls-docs -u 50/200/2000 | settee post-docs --new-edits=false",
    scope: Scope::PerServer,
    run: run_boxed,
};

/// Page sizes of the pipeline variants.
pub const UNITS: [u64; 3] = [50, 200, 2000];

/// How close `copy` must come to the best fixed page size.
const WITHIN: f64 = 0.9;

/// Stderr kept in an error message.
const STDERR_TAIL: usize = 600;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Copy,
    CopyFixed(u64),
    Pipeline(u64),
}

impl Variant {
    fn row(self) -> String {
        match self {
            Variant::Copy => "copy_tools_copy".into(),
            Variant::CopyFixed(n) => format!("copy_tools_copy_fixed_{n}"),
            Variant::Pipeline(n) => format!("copy_tools_pipeline_{n}"),
        }
    }
}

fn run_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(ctx))
}

/// The settee binary: the running executable when it is `settee` (it is
/// under `settee bench`), else `--settee-bin` / target/release/settee.
fn settee_exe(ctx: &Ctx) -> Result<PathBuf, BenchError> {
    let me = std::env::current_exe()?;
    if me.file_stem().is_some_and(|s| s == "settee") {
        return Ok(me);
    }
    crate::spawn::settee_binary(ctx.settee_bin.clone())
}

/// One started process: what it is, the child, its stderr file.
struct Proc {
    what: String,
    child: Child,
    stderr: File,
}

impl Proc {
    fn start(what: &str, cmd: &mut Command) -> Result<Proc, BenchError> {
        let stderr = tempfile::tempfile()?;
        let child = cmd
            .stderr(Stdio::from(stderr.try_clone()?))
            .env_remove("SETTEE_URL")
            .spawn()
            .map_err(|e| BenchError::Spawn(format!("{what}: {e}")))?;
        Ok(Proc {
            what: what.to_string(),
            child,
            stderr,
        })
    }

    /// The end of what it wrote to stderr.
    fn stderr_tail(&self) -> String {
        let mut s = String::new();
        let _ = (&self.stderr).seek(SeekFrom::Start(0));
        let _ = (&self.stderr).read_to_string(&mut s);
        let s = s.trim();
        let cut = s
            .char_indices()
            .rev()
            .nth(STDERR_TAIL)
            .map_or(0, |(i, _)| i);
        s[cut..].to_string()
    }
}

/// Runs `variant` from `src` to `dst` (URLs with credentials) as
/// subprocesses of `exe`, bounded by `limit`; the wall time, the
/// children's CPU and the last stderr line of the first process (`copy`
/// reports the page and batch sizes it settled on there). Blocking.
fn run_tools(
    exe: &PathBuf,
    variant: Variant,
    src: &str,
    dst: &str,
    limit: Duration,
) -> Result<(Measured, String), BenchError> {
    let cpu0 = children_cpu();
    let started = Instant::now();
    let mut procs = Vec::new();
    let spawned = (|| {
        match variant {
            Variant::Copy => procs.push(Proc::start(
                "settee copy",
                Command::new(exe)
                    .args(["copy", src, dst])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null()),
            )?),
            Variant::CopyFixed(n) => procs.push(Proc::start(
                &format!("settee copy -u {n} -b {n}"),
                Command::new(exe)
                    .args(["copy", src, dst, "-u", &n.to_string(), "-b", &n.to_string()])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null()),
            )?),
            Variant::Pipeline(n) => {
                let mut ls = Proc::start(
                    &format!("settee ls-docs -u {n}"),
                    Command::new(exe)
                        .args(["ls-docs", src, "-u", &n.to_string()])
                        .stdin(Stdio::null())
                        .stdout(Stdio::piped()),
                )?;
                // The pipe's read end goes to post-docs only: the temporary
                // Command (and with it our copy of the fd) is dropped at the
                // end of the statement, so ls-docs sees EPIPE if post-docs dies.
                let out = ls
                    .child
                    .stdout
                    .take()
                    .ok_or_else(|| BenchError::Spawn("ls-docs: no stdout".into()))?;
                procs.push(ls);
                procs.push(Proc::start(
                    "settee post-docs --new-edits=false",
                    Command::new(exe)
                        .args(["post-docs", dst, "--new-edits=false"])
                        .stdin(Stdio::from(out))
                        .stdout(Stdio::null()),
                )?);
            }
        }
        Ok::<(), BenchError>(())
    })();
    let deadline = started + limit;
    let mut status = vec![None; procs.len()];
    let mut failure = spawned.err().map(|e| e.to_string());
    // Bounded: every pass sleeps 1 ms and the deadline ends it.
    while failure.is_none() && status.iter().any(Option::is_none) {
        for (p, st) in procs.iter_mut().zip(status.iter_mut()) {
            if st.is_none() {
                *st = p.child.try_wait()?;
            }
        }
        if status.iter().any(Option::is_none) {
            if Instant::now() >= deadline {
                failure = Some(format!("timed out after {limit:?}"));
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let wall = started.elapsed();
    let mut reasons = Vec::new();
    for (p, st) in procs.iter_mut().zip(&status) {
        match st {
            Some(s) if s.success() => {}
            Some(s) => reasons.push(format!("{} exited with {s}: {}", p.what, p.stderr_tail())),
            None => {
                let _ = p.child.kill();
                let _ = p.child.wait();
                reasons.push(format!("{} killed: {}", p.what, p.stderr_tail()));
            }
        }
    }
    if let Some(f) = failure {
        reasons.insert(0, f);
    }
    if !reasons.is_empty() {
        return Err(BenchError::Check(reasons.join("; ")));
    }
    let said = procs[0]
        .stderr_tail()
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    Ok((
        Measured {
            wall,
            cpu: children_cpu().saturating_sub(cpu0),
        },
        said,
    ))
}

/// `_rev` of `id` in `db`.
async fn rev(conn: &mut Conn, db: &str, id: &str) -> Result<serde_json::Value, BenchError> {
    let r = conn
        .expect(Method::GET, &format!("/{db}/{id}"), Bytes::new(), &[200])
        .await?;
    Ok(r.json::<serde_json::Value>()?["_rev"].clone())
}

/// What one variant measured over its runs.
#[derive(Default)]
struct Tally {
    samples: Vec<Sample>,
    measured: Measured,
    errors: Vec<String>,
    rates: Vec<f64>,
    /// What `copy` said about each run (page and batch sizes).
    said: Vec<String>,
}

impl Tally {
    fn outcome(self, ctx: &Ctx, variant: Variant, docs: u64) -> Outcome {
        let mut o = Outcome {
            name: variant.row(),
            scenario: DEF.name.to_string(),
            server: ctx.server.clone(),
            unit: "docs",
            errors_expected: false,
            summary: Summary::of(&self.samples, self.measured),
            error_messages: self.errors,
            extra: serde_json::Map::new(),
        }
        .with("docs", docs)
        .with(
            "docs_per_s_runs",
            self.rates
                .iter()
                .map(|r| (r * 10.0).round() / 10.0)
                .collect::<Vec<_>>(),
        );
        match variant {
            Variant::Pipeline(n) | Variant::CopyFixed(n) => o = o.with("page_docs", n),
            Variant::Copy => o = o.with("copy_said", self.said),
        }
        o
    }
}

/// The (page size, docs/s) points of the rows named `prefix` + N.
fn curve_of(rows: &[Outcome], prefix: &str) -> Vec<(u64, f64)> {
    rows.iter()
        .filter_map(|o| {
            let n = o.name.strip_prefix(prefix)?.parse().ok()?;
            (o.summary.errors == 0 && o.summary.throughput > 0.0)
                .then_some((n, o.summary.throughput))
        })
        .collect()
}

fn best_of(curve: &[(u64, f64)]) -> Option<(u64, f64)> {
    curve.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1))
}

/// Adds the curves and automatic copy's ratios to the copy row.
fn compare(rows: &mut [Outcome]) {
    let fixed = curve_of(rows, "copy_tools_copy_fixed_");
    let pipeline = curve_of(rows, "copy_tools_pipeline_");
    let Some(copy) = rows.iter_mut().find(|o| o.name == "copy_tools_copy") else {
        return;
    };
    let round = |v: f64| (v * 10.0).round() / 10.0;
    let points = |curve: &[(u64, f64)]| -> serde_json::Value {
        curve
            .iter()
            .map(|&(n, t)| json!({"page_docs": n, "docs_per_s": round(t)}))
            .collect()
    };
    copy.extra.insert("copy_curve".into(), points(&fixed));
    copy.extra.insert("curve".into(), points(&pipeline));
    let c = copy.summary.throughput;
    if copy.summary.errors != 0 || c <= 0.0 {
        return;
    }
    let ratio = |best: f64| ((c / best * 1000.0).round() / 1000.0).into();
    if let Some((n, b)) = best_of(&fixed) {
        copy.extra.insert("best_page_docs".into(), n.into());
        copy.extra
            .insert("best_fixed_copy_docs_per_s".into(), round(b).into());
        copy.extra.insert("ratio_copy_to_best".into(), ratio(b));
        copy.extra
            .insert("within_10pct".into(), (c / b >= WITHIN).into());
    }
    if let Some((n, b)) = best_of(&pipeline) {
        copy.extra
            .insert("best_pipeline_page_docs".into(), n.into());
        copy.extra
            .insert("best_pipeline_docs_per_s".into(), round(b).into());
        copy.extra
            .insert("ratio_copy_to_best_pipeline".into(), ratio(b));
    }
}

async fn run(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let docs = ctx.scale(100_000, 5_000);
    let reps = ctx.scale(3, 1);
    // Generous for slow servers (pouchdb-server) and page size 50, yet bounded.
    let limit = Duration::from_secs(60 + docs / 500);
    let exe = Arc::new(settee_exe(&ctx)?);
    let base = ctx.target.url_with_credentials();
    let src = ctx.db_name("copy-tools-src");
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &src).await?;
    let result = async {
        preload(&mut conn, &src, docs, seq_id, FOO_BAR).await?;
        let src_count = db_info(&mut conn, &src).await?["doc_count"]
            .as_u64()
            .unwrap_or(0);
        if src_count != docs {
            return Err(BenchError::Check(format!(
                "copy_tools: source holds {src_count} of {docs} documents"
            )));
        }
        let probe = seq_id(docs / 2);
        let src_rev = rev(&mut conn, &src, &probe).await?;
        let variants: Vec<Variant> = std::iter::once(Variant::Copy)
            .chain(UNITS.iter().map(|&n| Variant::CopyFixed(n)))
            .chain(UNITS.iter().map(|&n| Variant::Pipeline(n)))
            .collect();
        let mut tallies: Vec<Tally> = variants.iter().map(|_| Tally::default()).collect();
        for _ in 0..reps {
            for (v, tally) in variants.iter().zip(tallies.iter_mut()) {
                let dst = ctx.db_name("copy-tools-dst");
                create_db(&mut conn, &dst).await?;
                let (s, d) = (format!("{base}/{src}"), format!("{base}/{dst}"));
                let (exe, v2) = (exe.clone(), *v);
                let ran = tokio::task::spawn_blocking(move || run_tools(&exe, v2, &s, &d, limit))
                    .await
                    .map_err(|e| BenchError::Check(format!("copy_tools task: {e}")))?;
                let checked = match ran {
                    Ok((m, said)) => {
                        let copied = db_info(&mut conn, &dst).await?["doc_count"]
                            .as_u64()
                            .unwrap_or(0);
                        if copied != src_count {
                            Err(format!("target holds {copied} of {src_count} documents"))
                        } else if rev(&mut conn, &dst, &probe).await? != src_rev {
                            Err(format!("{probe} has another revision in the target"))
                        } else {
                            Ok((m, said))
                        }
                    }
                    Err(e) => Err(e.to_string()),
                };
                cleanup(&ctx.target, &dst).await;
                let at_us = u64::try_from(tally.measured.wall.as_micros()).unwrap_or(u64::MAX);
                match checked {
                    Ok((m, said)) => {
                        if *v == Variant::Copy {
                            tally.said.push(said);
                        }
                        tally.samples.push(Sample {
                            at_us,
                            latency_us: u32::try_from(m.wall.as_micros()).unwrap_or(u32::MAX),
                            items: u32::try_from(src_count).unwrap_or(u32::MAX),
                            ok: true,
                        });
                        tally.measured.wall += m.wall;
                        tally.measured.cpu += m.cpu;
                        tally
                            .rates
                            .push(src_count as f64 / m.wall.as_secs_f64().max(1e-9));
                    }
                    Err(e) => {
                        tally.samples.push(Sample {
                            at_us,
                            latency_us: u32::try_from(limit.as_micros()).unwrap_or(u32::MAX),
                            items: 0,
                            ok: false,
                        });
                        let e = e.replace(&base, &redact(&base));
                        tally.errors.push(format!("{}: {e}", v.row()));
                    }
                }
                ctx.progress.tick(docs);
            }
        }
        let mut rows: Vec<Outcome> = variants
            .iter()
            .zip(tallies)
            .map(|(&v, t)| t.outcome(&ctx, v, docs))
            .collect();
        compare(&mut rows);
        Ok(rows)
    }
    .await;
    cleanup(&ctx.target, &src).await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, throughput: f64) -> Outcome {
        Outcome {
            name: name.into(),
            scenario: "copy_tools".into(),
            server: "settee".into(),
            unit: "docs",
            errors_expected: false,
            summary: Summary {
                samples: 1,
                throughput,
                ..Summary::default()
            },
            error_messages: vec![],
            extra: serde_json::Map::new(),
        }
    }

    #[test]
    fn ratio_to_the_best_fixed_page_size() {
        let mut rows = vec![
            row("copy_tools_copy", 45_000.0),
            row("copy_tools_copy_fixed_50", 10_000.0),
            row("copy_tools_copy_fixed_200", 48_000.0),
            row("copy_tools_copy_fixed_2000", 47_000.0),
            row("copy_tools_pipeline_50", 20_000.0),
            row("copy_tools_pipeline_200", 40_000.0),
            row("copy_tools_pipeline_2000", 90_000.0),
        ];
        compare(&mut rows);
        let x = &rows[0].extra;
        assert_eq!(x["best_page_docs"], 200);
        assert_eq!(x["ratio_copy_to_best"], 0.938);
        assert_eq!(x["within_10pct"], true);
        assert_eq!(x["copy_curve"].as_array().unwrap().len(), 3);
        assert_eq!(x["curve"].as_array().unwrap().len(), 3);
        assert_eq!(x["best_pipeline_page_docs"], 2000);
        assert_eq!(x["ratio_copy_to_best_pipeline"], 0.5);
        rows[0].summary.throughput = 40_000.0;
        compare(&mut rows);
        assert_eq!(rows[0].extra["within_10pct"], false);
    }

    #[test]
    fn row_names() {
        assert_eq!(Variant::Copy.row(), "copy_tools_copy");
        assert_eq!(Variant::Pipeline(200).row(), "copy_tools_pipeline_200");
        assert_eq!(Variant::CopyFixed(50).row(), "copy_tools_copy_fixed_50");
    }
}
