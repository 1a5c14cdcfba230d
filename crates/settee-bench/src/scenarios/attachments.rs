//! Attachments (standalone `PUT`/`GET /db/doc/att`). Every attachment is
//! `application/octet-stream` pseudo-random bytes, a pure function of a
//! seed (so nothing compresses, and a server that stores content by its
//! digest gets no duplicates: seeds differ per document, per row and per
//! run). The client sends each body whole from memory (the load client
//! cannot stream a request body) and collects each answer whole.
//!
//! - `att_small`: 10 KB (10,000-byte) attachments.
//!   `att_small_write_N`: N clients (1, 32) each `PUT /db/doc{i}/a.bin`
//!   on new documents (no revision) into a fresh database, 5 s each
//!   (quick: 0.4 s); documents per second. Before the clock, one write
//!   must answer 201 `{"ok":true}` and read back byte for byte.
//!   `att_small_read_N`: 10,000 such documents (quick: 500) are written
//!   outside the clock (standalone PUTs, 16 clients), then N clients
//!   (1, 32) `GET /db/doc{i}/a.bin` for uniformly random `i`, 5 s each
//!   (quick: 0.4 s); the first answer is checked exactly (length and
//!   bytes), so a fast wrong answer fails.
//! - `att_large`: one 256 MiB attachment (quick: 16 MiB).
//!   `att_large_up`: `PUT /db/big{r}/data.bin` (a new document and new
//!   content each time), up to 3 times (quick: 2) while under 60 s
//!   (quick: 10 s); `att_large_down`: `GET` of each uploaded attachment,
//!   as many times, each answer checked byte for byte outside the clock.
//!   Throughput in MiB/s (timed per request, generating and checking
//!   excluded). When the server listens on loopback here, its process
//!   tree's RSS before each row and its peak during it (sampled every
//!   100 ms) are reported beside the row.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;

use super::views::Timed;
use super::{cleanup, create_db, Ctx, Outcome, ScenarioDef, Scope};
use crate::client::{Conn, Response};
use crate::error::BenchError;
use crate::load::{drive, BoxFuture, Limit, Req, ReqOp};
use crate::rss::{server_pid, tree_rss_kib, PeakRss};
use crate::zipf::mix;

const fn d(name: &'static str, about: &'static str, run: super::RunFn) -> ScenarioDef {
    ScenarioDef {
        name,
        group: "attachments",
        about,
        scope: Scope::PerServer,
        run,
    }
}

pub const DEFS: [ScenarioDef; 2] = [
    d(
        "att_small",
        "PUT and GET 10 KB standalone attachments (10k docs), 1 and 32 clients",
        small_boxed,
    ),
    d(
        "att_large",
        "PUT then GET one 256 MiB attachment (MiB/s, peak RSS)",
        large_boxed,
    ),
];

fn small_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(small(ctx))
}

fn large_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(large(ctx))
}

/// A small attachment's length.
const SMALL_LEN: usize = 10_000;
/// Clients of the timed small-attachment rows.
const CLIENTS: [usize; 2] = [1, 32];
/// Clients writing the read corpus (outside the clock).
const LOAD_CLIENTS: usize = 16;
const MIB: usize = 1 << 20;
/// Bytes generated (or compared) at a time when checking a large answer.
const CHECK_CHUNK: usize = 64 * 1024;
/// Every attachment PUT names its type.
const OCTET: &[(&str, &str)] = &[("content-type", "application/octet-stream")];

/// Seed spaces: the read corpus, each write row, the large attachments.
const READ_SEEDS: u64 = 0;
const WRITE_SEEDS: u64 = 1 << 40;
const LARGE_SEEDS: u64 = 2 << 40;

/// Pseudo-random content: byte `p` of the attachment seeded `seed` is byte
/// `p % 8` of `mix(mix(seed) + p / 8)`, so any stretch can be regenerated
/// on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Content {
    seed: u64,
    len: usize,
}

impl Content {
    /// Fills `out` with the bytes from offset `from` (a multiple of 8).
    fn fill(self, from: usize, out: &mut [u8]) {
        debug_assert_eq!(from % 8, 0);
        let base = mix(self.seed).wrapping_add((from / 8) as u64);
        for (k, chunk) in out.chunks_mut(8).enumerate() {
            let w = mix(base.wrapping_add(k as u64)).to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
    }

    fn bytes(self) -> Bytes {
        let mut v = vec![0; self.len];
        self.fill(0, &mut v);
        Bytes::from(v)
    }

    /// Whether `got` is exactly this content (compared a chunk at a time,
    /// nothing the size of the whole allocated).
    fn check(self, what: &str, got: &[u8]) -> Result<(), BenchError> {
        let wrong = |reason: String| Err(BenchError::Check(format!("{what}: {reason}")));
        if got.len() != self.len {
            return wrong(format!("{} bytes, want {}", got.len(), self.len));
        }
        let mut want = vec![0; CHECK_CHUNK.min(self.len)];
        for (n, part) in got.chunks(CHECK_CHUNK).enumerate() {
            let want = &mut want[..part.len()];
            self.fill(n * CHECK_CHUNK, want);
            if part != want {
                let at =
                    n * CHECK_CHUNK + part.iter().zip(&*want).take_while(|(a, b)| a == b).count();
                return wrong(format!(
                    "{} bytes as expected, then differs at byte {at}",
                    self.len.min(at)
                ));
            }
        }
        Ok(())
    }
}

/// Distinguishes this run's contents from an earlier run's on the same server.
fn run_salt(ctx: &Ctx) -> u64 {
    ctx.run_tag
        .bytes()
        .fold(0x5a17, |h, b| mix(h ^ u64::from(b)))
        & ((1 << 40) - 1)
}

fn small_content(salt: u64, space: u64, i: u64) -> Content {
    Content {
        seed: space ^ (salt << 20) ^ i,
        len: SMALL_LEN,
    }
}

fn doc_path(db: &str, i: u64) -> String {
    format!("/{db}/doc{i}/a.bin")
}

/// `PUT path` of `body` as an attachment, answering within `limit`.
async fn put_att(
    conn: &mut Conn,
    path: &str,
    body: Bytes,
    limit: Duration,
) -> Result<Response, BenchError> {
    tokio::time::timeout(limit, conn.request(Method::PUT, path, body, OCTET))
        .await
        .map_err(|_| BenchError::Check(format!("PUT {path}: no answer within {limit:?}")))?
}

/// `GET path`, answering within `limit`.
async fn get_att(conn: &mut Conn, path: &str, limit: Duration) -> Result<Response, BenchError> {
    tokio::time::timeout(limit, conn.get(path))
        .await
        .map_err(|_| BenchError::Check(format!("GET {path}: no answer within {limit:?}")))?
}

/// Fails unless `r` answered `want` (for a PUT, also `"ok":true`).
fn expect_status(r: &Response, method: &str, path: &str, want: u16) -> Result<(), BenchError> {
    let ok = r.status == want
        && (want != 201
            || r.json::<serde_json::Value>()
                .is_ok_and(|v| v["ok"] == serde_json::Value::Bool(true)));
    if ok {
        return Ok(());
    }
    Err(BenchError::Status {
        method: method.into(),
        path: path.into(),
        status: r.status,
        body: r.text(),
    })
}

/// The op that PUTs document `i`'s attachment (content from `space`).
fn put_op(
    db: &str,
    salt: u64,
    space: u64,
) -> ReqOp<impl Fn(usize, u64) -> Req + Send + Sync + 'static> {
    let db = db.to_string();
    ReqOp(move |_w, i| Req {
        headers: OCTET,
        ..Req::new(
            Method::PUT,
            doc_path(&db, i),
            small_content(salt, space, i).bytes(),
            &[201, 202],
        )
    })
}

/// The document worker `w`'s operation `i` reads, uniform over `docs`.
fn read_key(w: usize, i: u64, docs: u64) -> u64 {
    mix(i ^ ((w as u64) << 40) ^ 0xa77) % docs
}

async fn small(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let docs = ctx.scale(10_000, 500);
    let salt = run_salt(&ctx);
    let check_limit = ctx.secs(60.0, 10.0);
    let mut out = Vec::new();
    // Writes: a fresh database per row.
    for clients in CLIENTS {
        let db = ctx.db_name("att_small_write");
        let mut conn = ctx.conn().await?;
        create_db(&mut conn, &db).await?;
        let space = WRITE_SEEDS ^ ((clients as u64) << 32);
        let result = async {
            // The first write, untimed: 201 and read back exactly.
            let probe = small_content(salt, space ^ (1 << 31), 0);
            let path = format!("/{db}/probe/a.bin");
            let r = put_att(&mut conn, &path, probe.bytes(), check_limit).await?;
            expect_status(&r, "PUT", &path, 201)?;
            let r = get_att(&mut conn, &path, check_limit).await?;
            expect_status(&r, "GET", &path, 200)?;
            probe.check(&format!("GET {path}"), &r.body)?;
            let op = put_op(&db, salt, space);
            let limit = Limit::time(ctx.secs(5.0, 0.4));
            drive(&ctx.target, clients, limit, Arc::new(op), &ctx.progress).await
        }
        .await;
        cleanup(&ctx.target, &db).await;
        out.push(
            Outcome::from_run(
                &ctx,
                "att_small",
                format!("att_small_write_{clients}"),
                "docs",
                result?,
            )
            .with("clients", clients)
            .with("attachment_bytes", SMALL_LEN),
        );
    }
    // Reads: one database of `docs` documents written outside the clock.
    let db = ctx.db_name("att_small_read");
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &db).await?;
    let result = async {
        let load = drive(
            &ctx.target,
            LOAD_CLIENTS,
            Limit::ops(docs),
            Arc::new(put_op(&db, salt, READ_SEEDS)),
            &ctx.progress,
        )
        .await?;
        let failed = load.samples.iter().filter(|s| !s.ok).count();
        if failed > 0 || load.samples.len() as u64 != docs {
            return Err(BenchError::Check(format!(
                "loading {docs} attachments: {} written, {failed} failed: {}",
                load.samples.len() - failed,
                load.error_messages.join("; ")
            )));
        }
        // The first read, checked exactly.
        let first = read_key(0, 0, docs);
        let path = doc_path(&db, first);
        let r = get_att(&mut conn, &path, check_limit).await?;
        expect_status(&r, "GET", &path, 200)?;
        small_content(salt, READ_SEEDS, first).check(&format!("GET {path}"), &r.body)?;
        let mut rows = Vec::new();
        for clients in CLIENTS {
            let db = db.clone();
            let op = ReqOp(move |w, i| {
                Req::new(
                    Method::GET,
                    doc_path(&db, read_key(w, i, docs)),
                    Bytes::new(),
                    &[200],
                )
            });
            let limit = Limit::time(ctx.secs(5.0, 0.4));
            let run = drive(&ctx.target, clients, limit, Arc::new(op), &ctx.progress).await?;
            rows.push(
                Outcome::from_run(
                    &ctx,
                    "att_small",
                    format!("att_small_read_{clients}"),
                    "ops",
                    run,
                )
                .with("clients", clients)
                .with("docs", docs)
                .with("attachment_bytes", SMALL_LEN),
            );
        }
        Ok(rows)
    }
    .await;
    cleanup(&ctx.target, &db).await;
    out.extend(result?);
    Ok(out)
}

fn mib(kib: u64) -> u64 {
    (kib + 512) / 1024
}

/// Peak RSS of the server's process tree over one row, when it can be seen.
struct Watch {
    before: Option<u64>,
    peak: Option<PeakRss>,
}

impl Watch {
    fn start(pid: Option<u32>) -> Watch {
        Watch {
            before: pid.and_then(tree_rss_kib),
            peak: pid.map(PeakRss::start),
        }
    }

    fn finish(self, row: Outcome) -> Outcome {
        let peak = self.peak.and_then(PeakRss::finish);
        match (self.before, peak) {
            (Some(before), Some(peak)) => row
                .with("rss_before_mib", mib(before))
                .with("rss_peak_mib", mib(peak))
                .with("rss_growth_mib", mib(peak.saturating_sub(before))),
            _ => row,
        }
    }
}

/// What `att_large` moves: `reps` attachments of `mib` MiB.
#[derive(Debug, Clone, Copy)]
struct Large {
    mib: usize,
    reps: u64,
    salt: u64,
}

impl Large {
    fn content(self, r: u64) -> Content {
        Content {
            seed: LARGE_SEEDS ^ (self.salt << 20) ^ r,
            len: self.mib * MIB,
        }
    }
}

/// Uploads up to `large.reps` attachments within `budget`; how many.
async fn upload(
    ctx: &Ctx,
    conn: &mut Conn,
    db: &str,
    large: Large,
    timed: &mut Timed,
) -> Result<u64, BenchError> {
    let (budget, started) = (ctx.secs(60.0, 10.0), Instant::now());
    let limit = ctx.secs(600.0, 120.0);
    let mut done = 0;
    while done < large.reps && (done == 0 || started.elapsed() < budget) {
        let body = large.content(done).bytes();
        let path = format!("/{db}/big{done}/data.bin");
        let r = timed
            .time(large.mib as u64, put_att(conn, &path, body, limit))
            .await?;
        expect_status(&r, "PUT", &path, 201)?;
        ctx.progress.tick(large.mib as u64);
        done += 1;
    }
    Ok(done)
}

/// Downloads the `uploaded` attachments (each checked), within `budget`.
async fn download(
    ctx: &Ctx,
    conn: &mut Conn,
    db: &str,
    large: Large,
    uploaded: u64,
    timed: &mut Timed,
) -> Result<u64, BenchError> {
    let (budget, started) = (ctx.secs(60.0, 10.0), Instant::now());
    let limit = ctx.secs(600.0, 120.0);
    let mut done = 0;
    while done < uploaded && (done == 0 || started.elapsed() < budget) {
        let path = format!("/{db}/big{done}/data.bin");
        let r = timed
            .time(large.mib as u64, get_att(conn, &path, limit))
            .await?;
        expect_status(&r, "GET", &path, 200)?;
        large.content(done).check(&format!("GET {path}"), &r.body)?;
        ctx.progress.tick(large.mib as u64);
        done += 1;
    }
    Ok(done)
}

async fn large(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let large = Large {
        mib: ctx.scale(256, 16) as usize,
        reps: ctx.scale(3, 2),
        salt: run_salt(&ctx),
    };
    let pid = server_pid(&ctx.target);
    let db = ctx.db_name("att_large");
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &db).await?;
    let result = async {
        let row = |name: &str, timed: Timed, n: u64| {
            Outcome::from_run(&ctx, "att_large", name, "MiB", timed.run())
                .with("attachment_mib", large.mib)
                .with("transfers", n)
        };
        let mut timed = Timed::default();
        let watch = Watch::start(pid);
        let up = upload(&ctx, &mut conn, &db, large, &mut timed).await;
        let up_row = watch.finish(row("att_large_up", timed, *up.as_ref().unwrap_or(&0)));
        let uploaded = up?;
        let mut timed = Timed::default();
        let watch = Watch::start(pid);
        let down = download(&ctx, &mut conn, &db, large, uploaded, &mut timed).await;
        let down_row = watch.finish(row("att_large_down", timed, *down.as_ref().unwrap_or(&0)));
        down?;
        Ok(vec![up_row, down_row])
    }
    .await;
    cleanup(&ctx.target, &db).await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_deterministic_and_checked() {
        let c = Content {
            seed: 7,
            len: 200_003,
        };
        let b = c.bytes();
        assert_eq!(b.len(), 200_003);
        assert_eq!(b, c.bytes());
        assert!(c.check("x", &b).is_ok());
        let mut part = vec![0; 16];
        c.fill(CHECK_CHUNK, &mut part);
        assert_eq!(part, b[CHECK_CHUNK..CHECK_CHUNK + 16]);
        assert!(c.check("x", &b[1..]).is_err(), "length");
        let mut wrong = b.to_vec();
        wrong[150_000] ^= 1;
        let e = c.check("x", &wrong).unwrap_err().to_string();
        assert!(e.contains("byte 150000"), "{e}");
        let other = Content { seed: 8, ..c }.bytes();
        assert_ne!(other, b);
        assert!(c.check("x", &other).is_err());
        // Documents, rows and runs get different contents.
        let a = small_content(1, READ_SEEDS, 3);
        assert_ne!(a, small_content(1, READ_SEEDS, 4));
        assert_ne!(a, small_content(2, READ_SEEDS, 3));
        assert_ne!(a, small_content(1, WRITE_SEEDS, 3));
        assert_eq!(a.len, SMALL_LEN);
    }

    #[test]
    fn requests_and_keys() {
        let ReqOp(f) = put_op("db", 1, READ_SEEDS);
        let r = f(0, 42);
        assert_eq!(
            (r.method, r.path.as_str()),
            (Method::PUT, "/db/doc42/a.bin")
        );
        assert_eq!(r.headers, OCTET);
        assert_eq!(r.body, small_content(1, READ_SEEDS, 42).bytes());
        let keys: std::collections::HashSet<u64> = (0..5000).map(|i| read_key(1, i, 500)).collect();
        assert!(keys.len() > 490 && keys.iter().all(|&k| k < 500));
    }
}
