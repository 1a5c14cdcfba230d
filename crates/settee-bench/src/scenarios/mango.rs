//! Mango (`POST /db/_find`). Every scenario loads 100,000 documents
//! (quick: 5,000) with `_bulk_docs`, outside the clock, into a database of
//! its own: document `i` is `{"k": i mod D/10, "n": (i·7919) mod D,
//! "m": mix(i) mod D}` (D = the document count), so each `k` value holds
//! ten documents, `n` is a permutation of `0..D` and `m` is unindexed.
//! The json indexes a scenario needs are created and built (the first
//! query waits for them) before the clock starts. Every scenario times
//! requests for 5 s each (quick: 0.4 s) with 1 and 32 clients (the two
//! that read many documents per query on CouchDB, `find_in` and
//! `find_unindexed`: 1 and 4); the first answer of each is checked
//! exactly, so a fast wrong answer fails.
//!
//! - `find_indexed`: `{"k": v}` on an index of `k` — ten documents.
//! - `find_range`: `{"n": {"$gte": x, "$lt": x + D/2}}` sorted by `n`,
//!   `limit` 25, on an index of `n` — documents `n = x … x+24` in order.
//! - `find_in`: `{"k": {"$in": [20 values]}}`, `limit` 200, on the index
//!   of `k` — the 200 documents of those values.
//! - `find_unindexed`: `{"m": v}` with no index on `m` (CouchDB's
//!   "no matching index" full scan): every document read.

use std::sync::Arc;

use bytes::Bytes;
use hyper::Method;
use serde_json::{json, Value};

use super::{cleanup, create_db, Ctx, Outcome, ScenarioDef, Scope};
use crate::client::Conn;
use crate::error::BenchError;
use crate::load::{drive, BoxFuture, Limit, Req, ReqOp};
use crate::zipf::mix;

const fn d(name: &'static str, about: &'static str, run: super::RunFn) -> ScenarioDef {
    ScenarioDef {
        name,
        group: "mango",
        about,
        scope: Scope::PerServer,
        run,
    }
}

pub const DEFS: [ScenarioDef; 4] = [
    d(
        "find_indexed",
        "_find by equality on an indexed field (10 of 100k docs)",
        indexed_boxed,
    ),
    d(
        "find_range",
        "_find by range on an indexed field, sorted, limit 25",
        range_boxed,
    ),
    d(
        "find_in",
        "_find by $in of 20 values on an indexed field (200 docs)",
        in_boxed,
    ),
    d(
        "find_unindexed",
        "_find by equality on an unindexed field (full scan of 100k docs)",
        unindexed_boxed,
    ),
];

fn indexed_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(ctx, Kind::Indexed))
}

fn range_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(ctx, Kind::Range))
}

fn in_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(ctx, Kind::In))
}

fn unindexed_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(ctx, Kind::Unindexed))
}

/// Documents per `_bulk_docs` request while loading.
const LOAD_BATCH: u64 = 1000;
/// Documents per `k` value.
const PER_K: u64 = 10;
/// Values in a `find_in` query.
const IN_VALUES: u64 = 20;
/// `find_range`'s page.
const RANGE_LIMIT: u64 = 25;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Indexed,
    Range,
    In,
    Unindexed,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Indexed => "find_indexed",
            Kind::Range => "find_range",
            Kind::In => "find_in",
            Kind::Unindexed => "find_unindexed",
        }
    }

    /// The client counts measured.
    fn clients(self) -> [usize; 2] {
        match self {
            Kind::Indexed | Kind::Range => [1, 32],
            Kind::In | Kind::Unindexed => [1, 4],
        }
    }

    /// The index the scenario queries through, if any.
    fn index(self) -> Option<&'static str> {
        match self {
            Kind::Indexed | Kind::In => Some("k"),
            Kind::Range => Some("n"),
            Kind::Unindexed => None,
        }
    }
}

/// The corpus of `docs` documents.
#[derive(Debug, Clone, Copy)]
struct Corpus {
    docs: u64,
}

impl Corpus {
    fn k(self, i: u64) -> u64 {
        i % (self.docs / PER_K).max(1)
    }

    fn n(self, i: u64) -> u64 {
        (i * 7919) % self.docs
    }

    fn m(self, i: u64) -> u64 {
        mix(i) % self.docs
    }

    fn doc(self, i: u64) -> String {
        format!(
            "{{\"_id\":\"{i:010}\",\"k\":{},\"n\":{},\"m\":{}}}",
            self.k(i),
            self.n(i),
            self.m(i)
        )
    }

    fn keys(self) -> u64 {
        (self.docs / PER_K).max(1)
    }

    /// The `_find` body of operation `op`.
    fn query(self, kind: Kind, op: u64) -> Value {
        let v = mix(op ^ 0x5eed);
        match kind {
            Kind::Indexed => json!({"selector": {"k": v % self.keys()}}),
            Kind::Range => {
                let x = v % (self.docs / 2);
                json!({
                    "selector": {"n": {"$gte": x, "$lt": x + self.docs / 2}},
                    "sort": [{"n": "asc"}],
                    "limit": RANGE_LIMIT,
                })
            }
            Kind::In => {
                let first = v % self.keys();
                let values: Vec<u64> = (0..IN_VALUES)
                    .map(|j| (first + j * 37) % self.keys())
                    .collect();
                json!({
                    "selector": {"k": {"$in": values}},
                    "limit": IN_VALUES * PER_K,
                })
            }
            Kind::Unindexed => json!({"selector": {"m": v % self.docs}}),
        }
    }

    /// The documents (`_id`s) `query(kind, op)` must answer, in order when
    /// the query is sorted, else sorted.
    fn expected(self, kind: Kind, op: u64) -> Vec<String> {
        let q = self.query(kind, op);
        let sel = &q["selector"];
        let id = |i: u64| format!("{i:010}");
        match kind {
            Kind::Range => {
                let x = sel["n"]["$gte"].as_u64().unwrap_or(0);
                let mut by_n: Vec<(u64, u64)> = (0..self.docs)
                    .map(|i| (self.n(i), i))
                    .filter(|(n, _)| (x..x + RANGE_LIMIT).contains(n))
                    .collect();
                by_n.sort_unstable();
                by_n.into_iter().map(|(_, i)| id(i)).collect()
            }
            _ => {
                let keep = |i: u64| match kind {
                    Kind::Indexed => Some(self.k(i)) == sel["k"].as_u64(),
                    Kind::In => sel["k"]["$in"]
                        .as_array()
                        .is_some_and(|vs| vs.iter().any(|v| v.as_u64() == Some(self.k(i)))),
                    _ => Some(self.m(i)) == sel["m"].as_u64(),
                };
                let mut ids: Vec<String> = (0..self.docs).filter(|&i| keep(i)).map(id).collect();
                ids.sort();
                ids
            }
        }
    }
}

/// Checks an answer against what it must hold.
fn check(kind: Kind, answer: &Value, want: &[String]) -> Result<(), String> {
    let mut got: Vec<String> = answer["docs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["_id"].as_str().map(str::to_string))
        .collect();
    if kind != Kind::Range {
        got.sort();
    }
    if got != want {
        return Err(format!(
            "{}: answered {} documents {:?}…, want {} {:?}…",
            kind.name(),
            got.len(),
            got.iter().take(3).collect::<Vec<_>>(),
            want.len(),
            want.iter().take(3).collect::<Vec<_>>(),
        ));
    }
    Ok(())
}

async fn post_json(
    conn: &mut Conn,
    path: &str,
    body: &Value,
    limit: std::time::Duration,
) -> Result<Value, BenchError> {
    let body = Bytes::from(body.to_string());
    let r = tokio::time::timeout(limit, conn.expect(Method::POST, path, body, &[200]))
        .await
        .map_err(|_| BenchError::Check(format!("POST {path}: no answer within {limit:?}")))??;
    Ok(r.json()?)
}

async fn load(conn: &mut Conn, db: &str, corpus: Corpus) -> Result<(), BenchError> {
    for lo in (0..corpus.docs).step_by(LOAD_BATCH as usize) {
        let docs: Vec<String> = (lo..(lo + LOAD_BATCH).min(corpus.docs))
            .map(|i| corpus.doc(i))
            .collect();
        super::views::post_docs(conn, db, &docs).await?;
    }
    Ok(())
}

/// How many times the first `_find` is asked while no index is usable yet
/// (200 ms apart).
const INDEX_WAIT_TRIES: u32 = 50;

async fn run(ctx: Arc<Ctx>, kind: Kind) -> Result<Vec<Outcome>, BenchError> {
    let corpus = Corpus {
        docs: ctx.scale(100_000, 5_000),
    };
    let db = ctx.db_name(kind.name());
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &db).await?;
    let result = async {
        load(&mut conn, &db, corpus).await?;
        let find = format!("/{db}/_find");
        if let Some(field) = kind.index() {
            let index = json!({"index": {"fields": [field]}, "ddoc": field, "name": field});
            post_json(
                &mut conn,
                &format!("/{db}/_index"),
                &index,
                ctx.secs(60.0, 10.0),
            )
            .await?;
        }
        // The first query builds the index (outside the clock) and is checked.
        // A cluster may answer `no_usable_index` for a moment after `_index`
        // (CouchDB's does: a shard has not opened the new design document
        // yet): asked again, at most INDEX_WAIT_TRIES times.
        let mut tries = 0;
        let first = loop {
            match post_json(
                &mut conn,
                &find,
                &corpus.query(kind, 0),
                ctx.secs(900.0, 120.0),
            )
            .await
            {
                Err(e) if tries < INDEX_WAIT_TRIES && e.to_string().contains("no_usable_index") => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                other => break other?,
            }
        };
        check(kind, &first, &corpus.expected(kind, 0)).map_err(BenchError::Check)?;
        let bodies: Arc<Vec<Bytes>> = Arc::new(
            (0..1024)
                .map(|op| Bytes::from(corpus.query(kind, op).to_string()))
                .collect(),
        );
        let mut out = Vec::new();
        for clients in kind.clients() {
            let (find, bodies) = (find.clone(), bodies.clone());
            let op = ReqOp(move |_w, i| {
                let body = bodies[(i % bodies.len() as u64) as usize].clone();
                Req::new(Method::POST, find.clone(), body, &[200])
            });
            let limit = Limit::time(ctx.secs(5.0, 0.4));
            let run = drive(&ctx.target, clients, limit, Arc::new(op), &ctx.progress).await?;
            out.push(
                Outcome::from_run(
                    &ctx,
                    kind.name(),
                    format!("{}_{clients}", kind.name()),
                    "ops",
                    run,
                )
                .with("clients", clients)
                .with("docs", corpus.docs),
            );
        }
        Ok(out)
    }
    .await;
    cleanup(&ctx.target, &db).await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Corpus = Corpus { docs: 5_000 };

    #[test]
    fn corpus_shapes() {
        let ns: std::collections::BTreeSet<u64> = (0..C.docs).map(|i| C.n(i)).collect();
        assert_eq!(ns.len() as u64, C.docs, "n is a permutation");
        let d: Value = serde_json::from_str(&C.doc(7)).unwrap();
        assert_eq!(d["_id"], "0000000007");
        assert_eq!(d["k"], C.k(7));
        assert_eq!(C.expected(Kind::Indexed, 3).len() as u64, PER_K);
        assert_eq!(C.expected(Kind::In, 3).len() as u64, IN_VALUES * PER_K);
        let range = C.expected(Kind::Range, 3);
        assert_eq!(range.len() as u64, RANGE_LIMIT);
        let q = C.query(Kind::Range, 3);
        let x = q["selector"]["n"]["$gte"].as_u64().unwrap();
        let first: u64 = range[0].parse().unwrap();
        assert_eq!(C.n(first), x, "sorted by n");
    }

    #[test]
    fn answers_are_checked() {
        let want = C.expected(Kind::Indexed, 0);
        let docs: Vec<Value> = want.iter().rev().map(|id| json!({"_id": id})).collect();
        assert!(check(Kind::Indexed, &json!({ "docs": docs }), &want).is_ok());
        let short: Vec<Value> = want.iter().skip(1).map(|id| json!({"_id": id})).collect();
        assert!(check(Kind::Indexed, &json!({ "docs": short }), &want).is_err());
        let range = C.expected(Kind::Range, 0);
        let reversed: Vec<Value> = range.iter().rev().map(|id| json!({"_id": id})).collect();
        assert!(
            check(Kind::Range, &json!({ "docs": reversed }), &range).is_err(),
            "a sorted answer out of order fails"
        );
    }
}
