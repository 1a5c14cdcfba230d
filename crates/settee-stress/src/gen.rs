//! The hostile-request generator: request `i` of seed `s` is a pure
//! function of `(s, i)` and the run's [`GenConfig`], so any request of a
//! run can be regenerated alone (`settee stress hostile --seed S --show I`).
//!
//! A request is built in two steps. First a *plan* for one endpoint family
//! (server, config, database, document, design, local, attachment,
//! `_all_docs`, `_changes`, `_bulk_docs`, `_bulk_get`, `_revs_diff`,
//! `_purge`, `_find`, database maintenance, raw garbage) with its natural
//! method, admin credentials and a valid body; about a third of the
//! requests stay that way, so databases really get written. Then zero to
//! three *mutations* from the catalogue in [`Mutation`]: methods, percent
//! encodings, query strings, headers, bodies and framing. Finally, a small
//! share is delivered by a slow or broken client (trickled, cut mid-head
//! or mid-body, never read).
//!
//! Every case states what the runner may expect from the server:
//! [`Need::Required`] — the framing is valid, so a response must come;
//! [`Need::Optional`] — the framing is broken, so the server may answer or
//! close; [`Need::NoneExpected`] — the client leaves before the request
//! ends. `may_block` marks live `_changes` feeds that may legitimately run
//! until the client gives up.
//!
//! Invariants: requests are bounded (URL ≲ 64 KiB, head ≲ 512 KiB, body ≤
//! `max_body_bytes`, slow deliveries ≲ 2 s); admin-authenticated requests
//! never write outside the run's own databases and `stress*` config
//! sections (so a run cannot lock itself out or damage other data);
//! design documents with executable code go only to the run's `js`
//! database.

use std::io::Write as _;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use crate::check::ReqHint;

/// What every request of a run shares.
#[derive(Debug, Clone)]
pub struct GenConfig {
    pub seed: u64,
    /// Prefix of the run's database names (e.g. `stress-7-`).
    pub prefix: String,
    /// Databases in the run's pool (plus one `js` database).
    pub dbs: u32,
    /// `Host` header value.
    pub host: String,
    /// The admin's `Authorization` value, and the admin's user name.
    pub admin_auth: Option<String>,
    pub admin_user: Option<String>,
    /// Largest request body generated (oversized-body cases are skipped
    /// when they would exceed it).
    pub max_body_bytes: usize,
    /// Per million requests: wrong password for the real admin (each costs
    /// the server a PBKDF2 verification, ~0.25 s of one CPU).
    pub pbkdf2_per_million: u32,
    /// Per thousand requests: slow or broken client deliveries.
    pub slow_per_mille: u32,
}

impl GenConfig {
    /// Pool database `k`.
    pub fn db(&self, k: u32) -> String {
        format!("{}{k}", self.prefix)
    }

    /// The database that receives design documents with code.
    pub fn js_db(&self) -> String {
        format!("{}js", self.prefix)
    }

    /// Databases created before the run.
    pub fn initial_dbs(&self) -> Vec<String> {
        (0..self.dbs)
            .map(|k| self.db(k))
            .chain(std::iter::once(self.js_db()))
            .collect()
    }
}

/// A request body; `Filled` bodies are produced while writing (large
/// bodies are never held in memory).
#[derive(Debug, Clone)]
pub enum Body {
    Bytes(Vec<u8>),
    Filled {
        prefix: Vec<u8>,
        fill: u8,
        len: usize,
        suffix: Vec<u8>,
    },
}

impl Body {
    pub fn len(&self) -> usize {
        match self {
            Body::Bytes(b) => b.len(),
            Body::Filled { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `[start, end)` of the body.
    pub fn slice(&self, start: usize, end: usize) -> Vec<u8> {
        let end = end.min(self.len());
        if start >= end {
            return Vec::new();
        }
        match self {
            Body::Bytes(b) => b[start..end].to_vec(),
            Body::Filled {
                prefix,
                fill,
                len,
                suffix,
            } => (start..end)
                .map(|i| {
                    if i < prefix.len() {
                        prefix[i]
                    } else if i >= len - suffix.len() {
                        suffix[i - (len - suffix.len())]
                    } else {
                        *fill
                    }
                })
                .collect(),
        }
    }
}

/// How the client sends the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// All at once (repeated `repeat` times back to back: pipelining).
    Whole,
    /// In pieces of `piece` bytes with `pause_ms` between them.
    Slow { piece: usize, pause_ms: u64 },
    /// The first `at` bytes, then `hold_ms` of silence, then close.
    Cut { at: usize, hold_ms: u64 },
    /// Everything, then `hold_ms` without reading, then close.
    NoRead { hold_ms: u64 },
}

/// What the server owes the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Required,
    Optional,
    NoneExpected,
}

/// One generated request.
#[derive(Debug, Clone)]
pub struct Case {
    pub index: u64,
    /// `family/mutation+mutation…`.
    pub label: String,
    pub head: Vec<u8>,
    pub body: Body,
    pub delivery: Delivery,
    pub need: Need,
    pub may_block: bool,
    /// The connection may carry the next request afterwards.
    pub reusable: bool,
    /// Shut down the write side after sending (so a server waiting for
    /// more body sees the end of the stream).
    pub half_close: bool,
    /// Copies sent back to back (each answered).
    pub repeat: u32,
    pub hint: ReqHint,
}

impl Case {
    /// Length of head + body.
    pub fn len(&self) -> usize {
        self.head.len() + self.body.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `[start, end)` of head + body.
    pub fn slice(&self, start: usize, end: usize) -> Vec<u8> {
        let h = self.head.len();
        let mut out = Vec::new();
        if start < h {
            out.extend_from_slice(&self.head[start..end.min(h)]);
        }
        if end > h {
            out.extend(self.body.slice(start.max(h) - h, end - h));
        }
        out
    }
}

/// How the body is delimited on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Framing {
    /// `Content-Length` when there is a body.
    Auto,
    /// `Transfer-Encoding: chunked`, optionally corrupted.
    Chunked(Option<ChunkFault>),
    /// A `Content-Length` larger than the body (the client then half-closes).
    LieLonger(usize),
    /// A `Content-Length` smaller than the body (the rest looks like the
    /// next request).
    LieShorter(usize),
    /// Two `Content-Length` headers, equal or not.
    DupLength { same: bool },
    /// A `Content-Length` that is not a number.
    BadLength(&'static str),
    /// Both `Content-Length` and `Transfer-Encoding: chunked`.
    LengthAndChunked,
    /// A transfer coding other than chunked.
    OtherCoding(&'static str),
    /// The body follows without any length.
    NoLength,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkFault {
    BadSize,
    SizeTooLarge,
    Overflow,
    NoFinalChunk,
    MissingCrlf,
    ExtensionGarbage,
    Negative,
}

const CHUNK_FAULTS: &[ChunkFault] = &[
    ChunkFault::BadSize,
    ChunkFault::SizeTooLarge,
    ChunkFault::Overflow,
    ChunkFault::NoFinalChunk,
    ChunkFault::MissingCrlf,
    ChunkFault::ExtensionGarbage,
    ChunkFault::Negative,
];

/// A request before it is rendered to bytes.
struct Plan {
    family: &'static str,
    method: Vec<u8>,
    /// Percent-encoded path segments.
    segs: Vec<Vec<u8>>,
    trailing_slash: bool,
    /// Raw query pairs (already encoded); `raw_query` overrides them.
    query: Vec<(Vec<u8>, Vec<u8>)>,
    raw_query: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    body: Option<Body>,
    framing: Framing,
    version: &'static [u8],
    /// Send a `Host` header.
    host: bool,
    /// An admin write to a `stress*` config section (other config writes
    /// never carry the admin's credentials).
    stress_config_write: bool,
    need: Need,
    may_block: bool,
    reusable: bool,
    half_close: bool,
    continuous: bool,
    repeat: u32,
    delivery: Delivery,
    labels: Vec<&'static str>,
    /// The whole request is these bytes (raw garbage).
    raw: Option<Vec<u8>>,
}

impl Plan {
    fn new(family: &'static str, method: &str, segs: Vec<Vec<u8>>) -> Plan {
        Plan {
            family,
            method: method.as_bytes().to_vec(),
            segs,
            trailing_slash: false,
            query: Vec::new(),
            raw_query: None,
            headers: Vec::new(),
            body: None,
            framing: Framing::Auto,
            version: b"HTTP/1.1",
            host: true,
            stress_config_write: false,
            need: Need::Required,
            may_block: false,
            reusable: true,
            half_close: false,
            continuous: false,
            repeat: 1,
            delivery: Delivery::Whole,
            labels: Vec::new(),
            raw: None,
        }
    }

    fn header(&mut self, name: &str, value: impl Into<Vec<u8>>) {
        self.headers.push((name.as_bytes().to_vec(), value.into()));
    }

    fn set_header(&mut self, name: &str, value: impl Into<Vec<u8>>) {
        self.remove_header(name);
        self.header(name, value);
    }

    fn remove_header(&mut self, name: &str) {
        self.headers
            .retain(|(k, _)| !k.eq_ignore_ascii_case(name.as_bytes()));
    }

    fn json_body(&mut self, text: impl Into<Vec<u8>>) {
        self.body = Some(Body::Bytes(text.into()));
        self.set_header("Content-Type", "application/json");
    }

    fn q(&mut self, k: &str, v: impl AsRef<[u8]>) {
        self.query
            .push((k.as_bytes().to_vec(), pct_query(v.as_ref())));
    }

    fn is_method(&self, m: &str) -> bool {
        self.method == m.as_bytes()
    }

    /// A broken framing: the server may close instead of answering, and
    /// the connection is not reused.
    fn broken(&mut self) {
        if self.need == Need::Required {
            self.need = Need::Optional;
        }
        self.reusable = false;
    }
}

/// Generates request `index` of the run.
pub fn generate(cfg: &GenConfig, index: u64) -> Case {
    let mut rng = StdRng::seed_from_u64(mix(cfg.seed, index));
    let mut plan = family(cfg, &mut rng);
    if plan.raw.is_none() {
        if rng.random_bool(0.62) {
            let n = *[1, 1, 1, 2, 2, 3].choose(&mut rng).unwrap_or(&1);
            for _ in 0..n {
                mutate(cfg, &mut plan, &mut rng);
            }
        } else {
            plan.labels.push("valid");
        }
        if rng.random_range(0..1000) < cfg.slow_per_mille {
            slow(&mut plan, &mut rng);
        }
        protect_system_dbs(&mut plan);
    }
    render(cfg, plan, index, &mut rng)
}

/// CouchDB's system databases are not the run's: writes to them (or a
/// method override on them) go without credentials; so do config writes
/// other than to `stress*` sections.
fn protect_system_dbs(plan: &mut Plan) {
    let system = plan.segs.first().is_some_and(|s| {
        matches!(
            s.as_slice(),
            b"_users" | b"_replicator" | b"_global_changes"
        )
    });
    let overridden = plan
        .headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case(b"x-http-method-override"));
    let reads = plan.is_method("GET") || plan.is_method("HEAD");
    if system && (overridden || !reads) {
        plan.remove_header("Authorization");
    }
    if plan.family == "config" && !reads && !plan.stress_config_write {
        plan.remove_header("Authorization");
    }
}

/// A 64-bit mix of seed and index (splitmix64's finaliser), so
/// neighbouring indices get unrelated generators.
fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    items.choose(rng).expect("non-empty choice list")
}

/// A string chosen at random.
fn pick_str(rng: &mut StdRng, items: &[&'static str]) -> &'static str {
    items.choose(rng).copied().unwrap_or("")
}

/// Index chosen by weight.
fn weighted(rng: &mut StdRng, weights: &[u32]) -> usize {
    let total: u32 = weights.iter().sum();
    let mut x = rng.random_range(0..total);
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    weights.len() - 1
}

const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn pct(bytes: &[u8]) -> Vec<u8> {
    percent_encoding::percent_encode(bytes, UNRESERVED)
        .to_string()
        .into_bytes()
}

fn pct_query(bytes: &[u8]) -> Vec<u8> {
    pct(bytes)
}

/// The path segment(s) of a document id: `_design/` and `_local/` keep
/// their slash (sometimes encoded).
fn id_segs(rng: &mut StdRng, id: &str) -> Vec<Vec<u8>> {
    for prefix in ["_design/", "_local/"] {
        if let Some(rest) = id.strip_prefix(prefix) {
            if rng.random_bool(0.85) {
                return vec![
                    prefix.as_bytes()[..prefix.len() - 1].to_vec(),
                    pct(rest.as_bytes()),
                ];
            }
        }
    }
    vec![pct(id.as_bytes())]
}

fn db_name(cfg: &GenConfig, rng: &mut StdRng) -> String {
    match weighted(rng, &[82, 4, 6, 8]) {
        0 => cfg.db(rng.random_range(0..cfg.dbs.max(1))),
        1 => cfg.js_db(),
        2 => format!("{}r{}", cfg.prefix, rng.random_range(0..12)),
        _ => (*pick(
            rng,
            &[
                "Stress",
                "9db",
                "_bogus",
                "db with space",
                "db%",
                "дб",
                "a\u{0}b",
                "db.dot",
                "-x",
                "$x",
                "_users",
                "_replicator",
                "_global_changes",
            ],
        ))
        .to_string(),
    }
}

fn doc_id(rng: &mut StdRng) -> String {
    match weighted(rng, &[70, 8, 5, 5, 4, 4, 4]) {
        0 => format!("d{}", rng.random_range(0..3000)),
        1 => format!(
            "{}{}",
            pick(
                rng,
                &[
                    "ü",
                    "日本語",
                    "😀",
                    "a b",
                    "a/b",
                    "a+b",
                    "a%b",
                    "a?b",
                    "a#b",
                    "x\u{7f}",
                    "&=",
                    "é\u{301}",
                    "\u{feff}x"
                ]
            ),
            rng.random_range(0..50)
        ),
        2 => format!("_design/s{}", rng.random_range(0..6)),
        3 => format!("_local/l{}", rng.random_range(0..60)),
        4 => format!(
            "{}{}",
            pick(
                rng,
                &["_foo", "_", "_all_docs", "_changes", "_bulk_docs", ""]
            ),
            rng.random_range(0..5)
        ),
        5 => "i".repeat(*pick(rng, &[4095, 4096, 4097, 8000, 20_000])),
        _ => format!("s{}", rng.random_range(0..200)),
    }
}

fn rev(rng: &mut StdRng) -> String {
    match weighted(rng, &[80, 20]) {
        0 => format!("{}-{:032x}", rng.random_range(1..6), rng.random::<u128>()),
        _ => (*pick(
            rng,
            &[
                "",
                "1",
                "1-",
                "-1-abc",
                "0-abc",
                "1-xyz",
                "99999999999999999999-a",
                "1-0123456789abcdef0123456789abcdef0",
                "a-b",
            ],
        ))
        .to_string(),
    }
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

/// A small random JSON value, at most `depth` levels deep.
fn value(rng: &mut StdRng, depth: u32) -> String {
    let leaf = depth == 0 || rng.random_bool(0.6);
    if leaf {
        return match rng.random_range(0..8) {
            0 => "null".into(),
            1 => "true".into(),
            2 => rng.random_range(-1000..1000).to_string(),
            3 => format!("{}", rng.random::<f64>() * 1e6),
            4 => json_string(&"x".repeat(rng.random_range(0..40))),
            5 => json_string(pick_str(
                rng,
                &["ü", "日本", "😀", "\u{0}", "\\", "\"", "\n"],
            )),
            6 => "[]".into(),
            _ => "{}".into(),
        };
    }
    if rng.random_bool(0.5) {
        let n = rng.random_range(0..5);
        let items: Vec<String> = (0..n).map(|_| value(rng, depth - 1)).collect();
        format!("[{}]", items.join(","))
    } else {
        let n = rng.random_range(0..5);
        let items: Vec<String> = (0..n)
            .map(|i| format!("\"k{i}\":{}", value(rng, depth - 1)))
            .collect();
        format!("{{{}}}", items.join(","))
    }
}

/// A valid document body (no `_id`/`_rev` unless asked).
fn doc_body(rng: &mut StdRng, id: Option<&str>, rev: Option<&str>) -> String {
    let mut fields = Vec::new();
    if let Some(id) = id {
        fields.push(format!("\"_id\":{}", json_string(id)));
    }
    if let Some(r) = rev {
        fields.push(format!("\"_rev\":{}", json_string(r)));
    }
    fields.push(format!(
        "\"type\":\"stress\",\"n\":{}",
        rng.random_range(0..1_000_000)
    ));
    for i in 0..rng.random_range(0..4) {
        fields.push(format!("\"f{i}\":{}", value(rng, 3)));
    }
    format!("{{{}}}", fields.join(","))
}

fn auth(cfg: &GenConfig, plan: &mut Plan) {
    if let Some(a) = &cfg.admin_auth {
        plan.header("Authorization", a.as_bytes().to_vec());
    }
}

/// A plan for one endpoint family, valid as far as possible.
fn family(cfg: &GenConfig, rng: &mut StdRng) -> Plan {
    const WEIGHTS: &[u32] = &[
        14, 12, 3, 2, 5, 3, 4, 2, 9, 3, 2, 1, 7, 1, 8, 2, 4, 3, 8, 2, 2,
    ];
    let db = db_name(cfg, rng);
    let dbseg = pct(db.as_bytes());
    let mut plan = match weighted(rng, WEIGHTS) {
        0 => {
            let id = doc_id(rng);
            let mut segs = vec![dbseg];
            segs.extend(id_segs(rng, &id));
            let mut p = Plan::new("doc_put", "PUT", segs);
            let r = rng.random_bool(0.15).then(|| rev(rng));
            let body = if id.starts_with("_design/") {
                design_body(rng, &db, cfg)
            } else {
                doc_body(rng, None, r.as_deref())
            };
            p.json_body(body);
            if rng.random_bool(0.1) {
                p.q("batch", "ok");
            }
            if rng.random_bool(0.05) {
                p.q("new_edits", "false");
            }
            p
        }
        1 => {
            let id = doc_id(rng);
            let mut segs = vec![dbseg];
            segs.extend(id_segs(rng, &id));
            let m = if rng.random_bool(0.85) { "GET" } else { "HEAD" };
            let mut p = Plan::new("doc_get", m, segs);
            for (k, v) in [
                ("revs", "true"),
                ("revs_info", "true"),
                ("conflicts", "true"),
                ("deleted_conflicts", "true"),
                ("local_seq", "true"),
                ("meta", "true"),
                ("latest", "true"),
                ("attachments", "true"),
                ("open_revs", "all"),
            ] {
                if rng.random_bool(0.07) {
                    p.q(k, v);
                }
            }
            if rng.random_bool(0.05) {
                let r = format!("[{}]", json_string(&rev(rng)));
                p.q("open_revs", r);
            }
            if rng.random_bool(0.05) {
                p.q("rev", rev(rng));
            }
            p
        }
        2 => {
            let id = doc_id(rng);
            let mut segs = vec![dbseg];
            segs.extend(id_segs(rng, &id));
            let mut p = Plan::new("doc_delete", "DELETE", segs);
            p.q("rev", rev(rng));
            p
        }
        3 => {
            let id = doc_id(rng);
            let mut segs = vec![dbseg];
            segs.extend(id_segs(rng, &id));
            let mut p = Plan::new("doc_copy", "COPY", segs);
            let dest = format!("c{}", rng.random_range(0..300));
            p.header("Destination", dest);
            p
        }
        4 => {
            let mut p = Plan::new("db_post", "POST", vec![dbseg]);
            let id = rng.random_bool(0.5).then(|| doc_id(rng));
            p.json_body(doc_body(rng, id.as_deref(), None));
            if rng.random_bool(0.1) {
                p.q("batch", "ok");
            }
            p
        }
        5 => {
            let name = format!("s{}", rng.random_range(0..6));
            let mut segs = vec![dbseg, b"_design".to_vec(), name.into_bytes()];
            let mut p = if rng.random_bool(0.6) {
                let mut p = Plan::new("design", "PUT", segs);
                let body = design_body(rng, &db, cfg);
                p.json_body(body);
                p
            } else {
                if rng.random_bool(0.5) {
                    segs.extend([b"_view".to_vec(), b"v".to_vec()]);
                } else {
                    segs.push(
                        (*pick(rng, &["_info", "_show", "_list", "_update", "att"]))
                            .as_bytes()
                            .to_vec(),
                    );
                }
                Plan::new("design", "GET", segs)
            };
            if rng.random_bool(0.1) {
                p.q("rev", rev(rng));
            }
            p
        }
        6 => {
            let name = format!("l{}", rng.random_range(0..60));
            let segs = vec![dbseg, b"_local".to_vec(), name.into_bytes()];
            let m = *pick(rng, &["PUT", "PUT", "GET", "DELETE"]);
            let mut p = Plan::new("local", m, segs);
            if m == "PUT" {
                p.json_body(doc_body(rng, None, None));
            }
            p
        }
        7 => {
            let id = format!("d{}", rng.random_range(0..3000));
            let segs = vec![dbseg, id.into_bytes(), b"att.bin".to_vec()];
            let mut p = Plan::new("attachment", pick_str(rng, &["PUT", "GET", "DELETE"]), segs);
            if p.is_method("PUT") {
                let n = rng.random_range(0..4096);
                p.body = Some(Body::Bytes((0..n).map(|_| rng.random::<u8>()).collect()));
                p.header("Content-Type", "application/octet-stream");
            }
            p
        }
        8 => {
            let mut p = Plan::new("bulk_docs", "POST", vec![dbseg, b"_bulk_docs".to_vec()]);
            let n = *pick(rng, &[1, 2, 5, 10, 20, 50]);
            let new_edits_false = rng.random_bool(0.15);
            let docs: Vec<String> = (0..n)
                .map(|_| {
                    let id = format!("d{}", rng.random_range(0..3000));
                    if new_edits_false {
                        let r = format!("{}-{:032x}", rng.random_range(1..4), rng.random::<u128>());
                        let mut d = doc_body(rng, Some(&id), Some(&r));
                        if rng.random_bool(0.1) {
                            d.insert_str(1, "\"_deleted\":true,");
                        }
                        d
                    } else {
                        let id = rng.random_bool(0.7).then_some(id);
                        doc_body(rng, id.as_deref(), None)
                    }
                })
                .collect();
            let extra = if new_edits_false {
                ",\"new_edits\":false"
            } else {
                ""
            };
            p.json_body(format!("{{\"docs\":[{}]{extra}}}", docs.join(",")));
            p
        }
        9 => {
            let mut p = Plan::new("bulk_get", "POST", vec![dbseg, b"_bulk_get".to_vec()]);
            let n = rng.random_range(1..20);
            let docs: Vec<String> = (0..n)
                .map(|_| {
                    let id = json_string(&doc_id(rng));
                    if rng.random_bool(0.3) {
                        format!("{{\"id\":{id},\"rev\":{}}}", json_string(&rev(rng)))
                    } else {
                        format!("{{\"id\":{id}}}")
                    }
                })
                .collect();
            p.json_body(format!("{{\"docs\":[{}]}}", docs.join(",")));
            if rng.random_bool(0.3) {
                p.q("revs", "true");
            }
            p
        }
        10 => {
            let which = *pick(rng, &[&b"_revs_diff"[..], b"_missing_revs"]);
            let mut p = Plan::new("revs_diff", "POST", vec![dbseg, which.to_vec()]);
            let n = rng.random_range(1..10);
            let items: Vec<String> = (0..n)
                .map(|_| format!("{}:[{}]", json_string(&doc_id(rng)), json_string(&rev(rng))))
                .collect();
            p.json_body(format!("{{{}}}", items.join(",")));
            p
        }
        11 => {
            let mut p = Plan::new("purge", "POST", vec![dbseg, b"_purge".to_vec()]);
            let n = rng.random_range(1..5);
            let items: Vec<String> = (0..n)
                .map(|_| format!("{}:[{}]", json_string(&doc_id(rng)), json_string(&rev(rng))))
                .collect();
            p.json_body(format!("{{{}}}", items.join(",")));
            p
        }
        12 => {
            let which = *pick(
                rng,
                &[
                    &b"_all_docs"[..],
                    b"_all_docs",
                    b"_design_docs",
                    b"_local_docs",
                ],
            );
            let post = rng.random_bool(0.2);
            let mut p = Plan::new(
                "all_docs",
                if post { "POST" } else { "GET" },
                vec![dbseg, which.to_vec()],
            );
            all_docs_params(&mut p, rng);
            if post {
                let keys: Vec<String> = (0..rng.random_range(0..20))
                    .map(|_| json_string(&doc_id(rng)))
                    .collect();
                p.json_body(format!("{{\"keys\":[{}]}}", keys.join(",")));
            }
            p
        }
        13 => {
            let mut p = Plan::new(
                "all_docs_queries",
                "POST",
                vec![dbseg, b"_all_docs".to_vec(), b"queries".to_vec()],
            );
            let qs: Vec<String> = (0..rng.random_range(0..5))
                .map(|_| {
                    format!(
                        "{{\"limit\":{},\"descending\":{}}}",
                        rng.random_range(0..50),
                        rng.random_bool(0.5)
                    )
                })
                .collect();
            p.json_body(format!("{{\"queries\":[{}]}}", qs.join(",")));
            p
        }
        14 => changes(dbseg, rng),
        15 => {
            let which = *pick(rng, &[&b"_find"[..], b"_index", b"_explain"]);
            let mut p = Plan::new("find", "POST", vec![dbseg, which.to_vec()]);
            p.json_body(format!(
                "{{\"selector\":{{\"n\":{{\"$gt\":{}}}}},\"limit\":{}}}",
                rng.random_range(0..1000),
                rng.random_range(0..100)
            ));
            p
        }
        16 => {
            let (seg, m): (&[u8], &str) = *pick(
                rng,
                &[
                    (&b"_compact"[..], "POST"),
                    (b"_view_cleanup", "POST"),
                    (b"_ensure_full_commit", "POST"),
                    (b"_revs_limit", "GET"),
                    (b"_revs_limit", "PUT"),
                    (b"_security", "GET"),
                    (b"_security", "PUT"),
                ],
            );
            let mut p = Plan::new("db_misc", m, vec![dbseg, seg.to_vec()]);
            if seg == b"_compact" && rng.random_bool(0.3) {
                p.segs.push(b"s1".to_vec());
            }
            if m == "PUT" && seg == b"_revs_limit" {
                p.json_body(rng.random_range(1..2000).to_string());
            } else if m == "PUT" {
                p.json_body(
                    r#"{"admins":{"names":[],"roles":[]},"members":{"names":[],"roles":[]}}"#,
                );
            } else if m == "POST" {
                p.set_header("Content-Type", "application/json");
            }
            p
        }
        17 => {
            // Database lifecycle: deletes are rare, and never of pool
            // databases (the run would lose what it wrote too often).
            let m = *pick(rng, &["GET", "GET", "HEAD", "PUT", "PUT", "DELETE"]);
            let name = if m == "DELETE" {
                format!("{}r{}", cfg.prefix, rng.random_range(0..12))
            } else {
                db
            };
            let mut p = Plan::new("db", m, vec![pct(name.as_bytes())]);
            if m == "PUT" && rng.random_bool(0.2) {
                p.q(
                    pick_str(rng, &["q", "n", "partitioned"]),
                    *pick(rng, &["1", "8", "true", "x"]),
                );
            }
            p
        }
        18 => server(rng),
        19 => config(cfg, rng),
        _ => {
            let mut p = Plan::new("garbage", "", Vec::new());
            p.raw = Some(garbage_request(rng));
            p.need = Need::Optional;
            p.reusable = false;
            p
        }
    };
    if plan.family != "garbage"
        && !plan.headers.iter().any(|(k, _)| k == b"Authorization")
        && (plan.family != "config" || plan.is_method("GET"))
    {
        auth(cfg, &mut plan);
    }
    plan
}

fn design_body(rng: &mut StdRng, db: &str, cfg: &GenConfig) -> String {
    // Executable code only in the js database (a hostile validate function
    // must not make every write of the pool fail).
    let code = if db == cfg.js_db() {
        *pick(
            rng,
            &[
                "function(newDoc, oldDoc, userCtx) { if (newDoc.n % 7 == 0) throw({forbidden: 'sevens'}); }",
                "function(doc) { emit(doc._id, 1); }",
                "function( {",
                "while(true){}",
                "function(){ var a = []; while(true) a.push(new Array(1000000)); }",
                "function(){ return this.constructor.constructor('return process')(); }",
            ],
        )
    } else {
        "function(doc) { emit(doc.n, null); }"
    };
    let mut parts = vec![format!(
        "\"views\":{{\"v\":{{\"map\":{}}}}}",
        json_string(code)
    )];
    if db == cfg.js_db() && rng.random_bool(0.5) {
        parts.push(format!("\"validate_doc_update\":{}", json_string(code)));
    }
    match rng.random_range(0..10) {
        0 => parts.push("\"language\":\"cobol\"".into()),
        1 => parts.push("\"views\":5".into()),
        2 => parts.push("\"filters\":{\"f\":[]}".into()),
        3 => parts.push("\"options\":{\"partitioned\":\"maybe\"}".into()),
        _ => {}
    }
    format!("{{{}}}", parts.join(","))
}

fn all_docs_params(p: &mut Plan, rng: &mut StdRng) {
    let params: &[(&str, &[&str])] = &[
        ("limit", &["0", "1", "10", "100", "-1", "x"]),
        ("skip", &["0", "5", "1000000", "-3"]),
        ("descending", &["true", "false", "yes"]),
        ("include_docs", &["true", "false"]),
        ("inclusive_end", &["false", "true"]),
        ("update_seq", &["true"]),
        ("conflicts", &["true"]),
        (
            "startkey",
            &["\"d1\"", "\"d5\"", "null", "[", "\"\\ud800\""],
        ),
        ("endkey", &["\"d9\"", "\"d\\ufff0\"", "{}", "\""]),
        ("key", &["\"d10\"", "1", "[1,2]"]),
        ("keys", &["[\"d1\",\"d2\"]", "[]", "\"x\"", "[1"]),
        ("start_key_doc_id", &["d1"]),
        ("stable", &["true"]),
        ("stale", &["ok", "update_after", "bogus"]),
    ];
    for _ in 0..rng.random_range(0..4) {
        let (k, vs) = pick(rng, params);
        let v = *pick(rng, vs);
        p.q(k, v);
    }
}

fn changes(dbseg: Vec<u8>, rng: &mut StdRng) -> Plan {
    let post = rng.random_bool(0.15);
    let mut p = Plan::new(
        "changes",
        if post { "POST" } else { "GET" },
        vec![dbseg, b"_changes".to_vec()],
    );
    let feed = *pick(
        rng,
        &[
            "normal",
            "normal",
            "normal",
            "longpoll",
            "continuous",
            "eventsource",
            "bogus",
        ],
    );
    if feed != "normal" || rng.random_bool(0.3) {
        p.q("feed", feed);
    }
    let live = matches!(feed, "longpoll" | "continuous" | "eventsource");
    p.continuous = feed == "continuous";
    let mut bounded = false;
    if live {
        match rng.random_range(0..10) {
            0 => p.may_block = true,
            1 => {
                p.q("heartbeat", *pick(rng, &["1", "10", "true", "x", "100"]));
                p.q("timeout", "300");
                p.may_block = true;
            }
            _ => {
                p.q("timeout", rng.random_range(0..800).to_string());
                bounded = true;
            }
        }
        if !bounded {
            p.may_block = true;
        }
    }
    let params: &[(&str, &[&str])] = &[
        (
            "since",
            &[
                "0",
                "now",
                "5",
                "\"3\"",
                "-1",
                "abc",
                "99999999999999999999",
            ],
        ),
        ("limit", &["0", "1", "10", "x"]),
        ("descending", &["true", "false"]),
        ("include_docs", &["true"]),
        ("conflicts", &["true"]),
        ("style", &["all_docs", "main_only", "x"]),
        (
            "filter",
            &[
                "_doc_ids",
                "_selector",
                "_design",
                "_view",
                "ddoc/f",
                "bogus",
            ],
        ),
        ("doc_ids", &["[\"d1\",\"d2\"]", "[1]", "\"d1\"", "["]),
        ("seq_interval", &["10"]),
    ];
    for _ in 0..rng.random_range(0..4) {
        let (k, vs) = pick(rng, params);
        p.q(k, *pick(rng, vs));
    }
    if post {
        let body = *pick(
            rng,
            &[
                "{\"doc_ids\":[\"d1\",\"d2\",\"d3\"]}",
                "{\"selector\":{\"n\":{\"$gt\":10}}}",
                "{\"doc_ids\":5}",
                "{\"selector\":{\"$bogus\":1}}",
                "{}",
            ],
        );
        p.json_body(body);
    }
    p
}

fn server(rng: &mut StdRng) -> Plan {
    let (path, m): (&str, &str) = *pick(
        rng,
        &[
            ("", "GET"),
            ("_up", "GET"),
            ("_all_dbs", "GET"),
            ("_dbs_info", "POST"),
            ("_dbs_info", "GET"),
            ("_uuids", "GET"),
            ("_session", "GET"),
            ("_session", "POST"),
            ("_session", "DELETE"),
            ("_active_tasks", "GET"),
            ("_membership", "GET"),
            ("favicon.ico", "GET"),
            ("_utils/index.html", "GET"),
            ("_node/_local", "GET"),
            ("_node/_local/_stats", "GET"),
            ("_node/_local/_stats/couchdb/httpd", "GET"),
            ("_node/_local/_system", "GET"),
            ("_node/nonode@nohost/_config", "GET"),
            ("_node/bogus/_stats", "GET"),
            ("_replicate", "POST"),
            ("_scheduler/jobs", "GET"),
            ("_users", "GET"),
            ("_replicator/_all_docs", "GET"),
            ("_global_changes/_changes", "GET"),
            ("_bogus", "GET"),
        ],
    );
    let segs = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| s.as_bytes().to_vec())
        .collect();
    let mut p = Plan::new("server", m, segs);
    match path {
        "_uuids" => p.q(
            "count",
            *pick(
                rng,
                &["1", "10", "1000", "1001", "0", "-1", "x", "99999999999"],
            ),
        ),
        "_all_dbs" => all_docs_params(&mut p, rng),
        "_dbs_info" if m == "POST" => p.json_body(*pick(
            rng,
            &[
                "{\"keys\":[\"a\",\"b\"]}",
                "{\"keys\":5}",
                "{}",
                "{\"keys\":[1,2]}",
            ],
        )),
        "_session" if m == "POST" => {
            p.json_body(*pick(
                rng,
                &[
                    "{\"name\":\"admin\",\"password\":\"nope\"}",
                    "{\"name\":5}",
                    "{}",
                ],
            ));
        }
        "_replicate" => p.json_body("{\"source\":\"a\",\"target\":\"b\"}"),
        _ => {}
    }
    p
}

/// `_config`: admin writes only to `stress*` sections; other writes carry
/// no (or wrong) credentials.
fn config(cfg: &GenConfig, rng: &mut StdRng) -> Plan {
    let base = vec![b"_node".to_vec(), b"_local".to_vec(), b"_config".to_vec()];
    let mut p;
    match rng.random_range(0..4) {
        0 => {
            p = Plan::new("config", "GET", base);
            for s in [&b"couchdb"[..], b"stress1"]
                .iter()
                .take(rng.random_range(0..3))
            {
                p.segs.push(s.to_vec());
            }
            auth(cfg, &mut p);
        }
        1 | 2 => {
            let m = *pick(rng, &["PUT", "PUT", "DELETE"]);
            p = Plan::new("config", m, base);
            let section = format!("stress{}", rng.random_range(0..3));
            let key = (*pick(
                rng,
                &[
                    "k1", "k2", "a;b", "a#b", "k%20", "k\u{e9}", "k=v", " k", "[x]",
                ],
            ))
            .to_string();
            p.segs.push(pct(section.as_bytes()));
            p.segs.push(pct(key.as_bytes()));
            let value = *pick(
                rng,
                &[
                    "\"v\"",
                    "\"\"",
                    "\" padded \"",
                    "\"a\\nb\"",
                    "\"a\\r\\n[admins]\\nx = y\"",
                    "\"\\u0000\"",
                    "\"caf\\u00e9\"",
                    "5",
                    "null",
                    "\"; comment\"",
                    "\"x = y\"",
                    "{",
                ],
            );
            if m == "PUT" {
                p.json_body(value);
            }
            p.stress_config_write = true;
            auth(cfg, &mut p);
        }
        _ => {
            // Dangerous writes, never with valid credentials.
            let m = *pick(rng, &["PUT", "DELETE"]);
            p = Plan::new("config", m, base);
            let (s, k): (&[u8], &[u8]) = *pick(
                rng,
                &[
                    (&b"admins"[..], &b"admin"[..]),
                    (b"chttpd", b"max_http_request_size"),
                    (b"couchdb", b"default_security"),
                ],
            );
            p.segs.push(s.to_vec());
            p.segs.push(k.to_vec());
            if m == "PUT" {
                p.json_body("\"1\"");
            }
            if rng.random_bool(0.5) {
                p.header("Authorization", "Basic bm9ib2R5Om5vcGU=");
            }
        }
    }
    p
}

fn garbage_request(rng: &mut StdRng) -> Vec<u8> {
    match rng.random_range(0..6) {
        0 => (0..rng.random_range(1..2000))
            .map(|_| rng.random::<u8>())
            .collect(),
        1 => b"\r\n\r\n\r\n".to_vec(),
        2 => b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n".to_vec(),
        3 => b"GET / HTTP/9.9\r\nHost: x\r\n\r\n".to_vec(),
        4 => b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
        _ => {
            let mut v = b"GET /".to_vec();
            v.extend((0..rng.random_range(0..200)).map(|_| rng.random_range(0x21u8..0x7f)));
            v.extend_from_slice(b" HTTP/1.1\r\n\r\n");
            v
        }
    }
}

/// The catalogue of mutations, with their weights.
#[derive(Debug, Clone, Copy)]
enum Mutation {
    MethodOther,
    MethodUnknown,
    MethodGarbage,
    PathBadEscape,
    PathNul,
    PathOverlong,
    PathInvalidUtf8,
    PathRawBytes,
    PathLong,
    PathDots,
    QueryGarbage,
    QueryHuge,
    QueryRepeated,
    ContentType,
    GzipValid,
    GzipGarbage,
    EncodingOther,
    ChunkedValid,
    ChunkedBad,
    TransferCodingOther,
    LengthFaults,
    LieLonger,
    LieShorter,
    NoLength,
    HeaderHuge,
    HeaderMany,
    NoHost,
    Http10,
    AuthGarbage,
    AuthWrongPassword,
    AuthNone,
    IfMatchGarbage,
    DestinationGarbage,
    MiscHeaders,
    BodyTruncated,
    BodyDeep,
    BodyInvalidUtf8,
    BodyNul,
    BodyNumbers,
    BodyDupKeys,
    BodyWrongType,
    BodySpecialFields,
    BodyOversized,
    BodyEscapes,
    Pipelined,
}

const MUTATIONS: &[(Mutation, u32, &str)] = &[
    (Mutation::MethodOther, 5, "method_other"),
    (Mutation::MethodUnknown, 3, "method_unknown"),
    (Mutation::MethodGarbage, 2, "method_garbage"),
    (Mutation::PathBadEscape, 4, "path_bad_escape"),
    (Mutation::PathNul, 2, "path_nul"),
    (Mutation::PathOverlong, 2, "path_overlong_utf8"),
    (Mutation::PathInvalidUtf8, 3, "path_invalid_utf8"),
    (Mutation::PathRawBytes, 2, "path_raw_bytes"),
    (Mutation::PathLong, 2, "path_long"),
    (Mutation::PathDots, 2, "path_dots"),
    (Mutation::QueryGarbage, 6, "query_garbage"),
    (Mutation::QueryHuge, 2, "query_huge"),
    (Mutation::QueryRepeated, 2, "query_repeated"),
    (Mutation::ContentType, 4, "content_type"),
    (Mutation::GzipValid, 2, "gzip_valid"),
    (Mutation::GzipGarbage, 3, "gzip_garbage"),
    (Mutation::EncodingOther, 2, "encoding_other"),
    (Mutation::ChunkedValid, 3, "chunked_valid"),
    (Mutation::ChunkedBad, 3, "chunked_bad"),
    (Mutation::TransferCodingOther, 1, "transfer_coding_other"),
    (Mutation::LengthFaults, 2, "length_faults"),
    (Mutation::LieLonger, 2, "length_lies_longer"),
    (Mutation::LieShorter, 2, "length_lies_shorter"),
    (Mutation::NoLength, 1, "no_length"),
    (Mutation::HeaderHuge, 2, "header_huge"),
    (Mutation::HeaderMany, 1, "header_many"),
    (Mutation::NoHost, 2, "no_host"),
    (Mutation::Http10, 2, "http10"),
    (Mutation::AuthGarbage, 4, "auth_garbage"),
    (Mutation::AuthWrongPassword, 0, "auth_wrong_password"),
    (Mutation::AuthNone, 3, "auth_none"),
    (Mutation::IfMatchGarbage, 3, "if_match_garbage"),
    (Mutation::DestinationGarbage, 3, "destination_garbage"),
    (Mutation::MiscHeaders, 5, "misc_headers"),
    (Mutation::BodyTruncated, 5, "body_truncated"),
    (Mutation::BodyDeep, 4, "body_deep"),
    (Mutation::BodyInvalidUtf8, 3, "body_invalid_utf8"),
    (Mutation::BodyNul, 2, "body_nul"),
    (Mutation::BodyNumbers, 3, "body_numbers"),
    (Mutation::BodyDupKeys, 3, "body_dup_keys"),
    (Mutation::BodyWrongType, 4, "body_wrong_type"),
    (Mutation::BodySpecialFields, 5, "body_special_fields"),
    (Mutation::BodyOversized, 1, "body_oversized"),
    (Mutation::BodyEscapes, 3, "body_escapes"),
    (Mutation::Pipelined, 2, "pipelined"),
];

/// Every mutation's label (for reports).
pub fn mutation_labels() -> Vec<&'static str> {
    MUTATIONS.iter().map(|(_, _, l)| *l).collect()
}

fn body_text(plan: &Plan) -> Vec<u8> {
    match &plan.body {
        Some(Body::Bytes(b)) => b.clone(),
        _ => b"{\"a\":1}".to_vec(),
    }
}

fn mutate(cfg: &GenConfig, plan: &mut Plan, rng: &mut StdRng) {
    // Wrong admin passwords cost the server a PBKDF2 run each: they come
    // at their own (small, configured) rate, not from the table.
    if cfg.admin_user.is_some() && rng.random_range(0..1_000_000) < cfg.pbkdf2_per_million {
        apply(cfg, plan, rng, Mutation::AuthWrongPassword);
        plan.labels.push("auth_wrong_password");
        return;
    }
    let weights: Vec<u32> = MUTATIONS.iter().map(|(_, w, _)| *w).collect();
    let (m, _, label) = MUTATIONS[weighted(rng, &weights)];
    apply(cfg, plan, rng, m);
    plan.labels.push(label);
}

fn apply(cfg: &GenConfig, plan: &mut Plan, rng: &mut StdRng, m: Mutation) {
    match m {
        Mutation::MethodOther => {
            plan.method = pick(
                rng,
                &[
                    "GET", "HEAD", "PUT", "POST", "DELETE", "COPY", "OPTIONS", "PATCH", "TRACE",
                ],
            )
            .as_bytes()
            .to_vec();
            if !plan.is_method("DELETE") && !plan.is_method("PUT") && !plan.is_method("POST") {
                // Keep the body anyway: GET with a body is hostile too.
            }
            if plan.is_method("DELETE") && plan.segs.len() == 1 && plan.family != "server" {
                // Pool databases are deleted only rarely (by method
                // overrides): the run would lose what it wrote.
                plan.segs = vec![pct(
                    format!("{}r{}", cfg.prefix, rng.random_range(0..12)).as_bytes()
                )];
            }
            if plan.family == "config" && !plan.is_method("GET") {
                plan.remove_header("Authorization");
            }
        }
        Mutation::MethodUnknown => {
            let m = *pick(
                rng,
                &[
                    "FROB", "get", "PROPFIND", "MKCOL", "X", "M-SEARCH", "PURGE", "BREW",
                ],
            );
            plan.method = if rng.random_bool(0.1) {
                "A".repeat(rng.random_range(65..4000)).into_bytes()
            } else {
                m.as_bytes().to_vec()
            };
            if plan.method.len() > 64 {
                plan.broken();
            }
        }
        Mutation::MethodGarbage => {
            plan.method = pick(
                rng,
                &[
                    &b"G ET"[..],
                    b"GET\x00",
                    b"\x80\xff",
                    b"",
                    b"(",
                    b"GE\tT",
                    b"\x16\x03\x01",
                ],
            )
            .to_vec();
            plan.broken();
        }
        Mutation::PathBadEscape => {
            let bad = *pick(rng, &["%ZZ", "%", "%0", "%G1", "%%", "%-1", "%+1"]);
            insert_in_segment(plan, rng, bad.as_bytes());
        }
        Mutation::PathNul => insert_in_segment(plan, rng, b"%00"),
        Mutation::PathOverlong => {
            let o = *pick(
                rng,
                &["%C0%AF", "%E0%80%AF", "%F0%80%80%AF", "%C0%80", "%C1%BF"],
            );
            insert_in_segment(plan, rng, o.as_bytes());
        }
        Mutation::PathInvalidUtf8 => {
            let o = *pick(
                rng,
                &["%FF%FE", "%ED%A0%80", "%C3", "%F4%90%80%80", "%80", "%FE"],
            );
            insert_in_segment(plan, rng, o.as_bytes());
        }
        Mutation::PathRawBytes => {
            let o = *pick(
                rng,
                &[
                    &b"\xc3\xa9"[..],
                    b"\xff",
                    b" ",
                    b"\x01",
                    b"\x7f",
                    b"\"",
                    b"<>",
                    b"{}",
                    b"|",
                ],
            );
            insert_in_segment(plan, rng, o);
            plan.broken();
        }
        Mutation::PathLong => {
            let n = *pick(rng, &[4097, 10_000, 40_000, 70_000]);
            let seg = "L".repeat(n).into_bytes();
            if plan.segs.len() >= 2 {
                let i = plan.segs.len() - 1;
                plan.segs[i] = seg;
            } else {
                plan.segs.push(seg);
            }
            if n > 60_000 {
                plan.broken();
            }
        }
        Mutation::PathDots => match rng.random_range(0..5) {
            0 => plan.segs.insert(0, b"..".to_vec()),
            1 => plan.segs.push(b".".to_vec()),
            2 => plan.trailing_slash = true,
            3 => plan.segs.insert(0, Vec::new()),
            _ => {
                let i = rng.random_range(0..plan.segs.len().max(1));
                if let Some(s) = plan.segs.get_mut(i) {
                    s.extend_from_slice(b"%2F..%2F");
                }
            }
        },
        Mutation::QueryGarbage => {
            const KEYS: &[&str] = &[
                "rev",
                "revs",
                "open_revs",
                "limit",
                "skip",
                "key",
                "keys",
                "startkey",
                "endkey",
                "feed",
                "since",
                "timeout",
                "heartbeat",
                "include_docs",
                "descending",
                "batch",
                "new_edits",
                "count",
                "callback",
                "style",
                "filter",
                "doc_ids",
                "conflicts",
                "latest",
                "attachments",
                "q",
                "n",
                "w",
                "r",
            ];
            for _ in 0..rng.random_range(1..5) {
                let k = *pick(rng, KEYS);
                let v = garbage_value(rng);
                plan.query.push((k.as_bytes().to_vec(), v));
            }
            if plan.family == "changes" {
                plan.may_block = true;
            }
            if rng.random_bool(0.2) {
                plan.raw_query = Some(
                    pick(
                        rng,
                        &[
                            &b"&&&"[..],
                            b"=",
                            b"a=%ZZ",
                            b"%FF=%FE",
                            b"a==b",
                            b"k&k=",
                            b"\xff",
                        ],
                    )
                    .to_vec(),
                );
                if plan.raw_query.as_deref() == Some(b"\xff") {
                    plan.broken();
                }
            }
        }
        Mutation::QueryHuge => {
            let n = *pick(rng, &[8_000, 30_000, 60_000]);
            let k = *pick(rng, &["key", "startkey", "keys", "x", "rev", "since"]);
            let v = format!("\"{}\"", "q".repeat(n));
            plan.query.push((k.as_bytes().to_vec(), pct(v.as_bytes())));
            if plan.family == "changes" {
                plan.may_block = true;
            }
        }
        Mutation::QueryRepeated => {
            let k = *pick(rng, &["limit", "rev", "feed", "x", "include_docs"]);
            let v = *pick(rng, &["1", "true", "normal", "a"]);
            for _ in 0..rng.random_range(100..3000) {
                plan.query
                    .push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
            }
            if plan.family == "changes" {
                plan.may_block = true;
            }
        }
        Mutation::ContentType => {
            let ct = *pick(
                rng,
                &[
                    &b"text/plain"[..],
                    b"application/json; charset=latin1",
                    b"APPLICATION/JSON",
                    b"multipart/related; boundary=xyz",
                    b"multipart/form-data",
                    b"application/x-www-form-urlencoded",
                    b"",
                    b";;;",
                    b"application/jsonx",
                    b"\xff\xfe",
                    b"application/json, text/html",
                ],
            );
            plan.set_header("Content-Type", ct.to_vec());
        }
        Mutation::GzipValid => {
            let text = body_text(plan);
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            let _ = enc.write_all(&text);
            if let Ok(z) = enc.finish() {
                plan.body = Some(Body::Bytes(z));
                plan.set_header("Content-Encoding", "gzip");
                if !plan.headers.iter().any(|(k, _)| k == b"Content-Type") {
                    plan.header("Content-Type", "application/json");
                }
            }
        }
        Mutation::GzipGarbage => {
            let body: Vec<u8> = match rng.random_range(0..4) {
                0 => (0..rng.random_range(0..500))
                    .map(|_| rng.random::<u8>())
                    .collect(),
                1 => b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff".to_vec(),
                2 => gzip_bomb(*pick(rng, &[1, 16, 80])).to_vec(),
                _ => {
                    let mut enc =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    let _ = enc.write_all(&body_text(plan));
                    let mut z = enc.finish().unwrap_or_default();
                    z.truncate(z.len() / 2);
                    z
                }
            };
            plan.body = Some(Body::Bytes(body));
            plan.set_header("Content-Encoding", "gzip");
        }
        Mutation::EncodingOther => {
            let e = *pick(
                rng,
                &[
                    "deflate",
                    "br",
                    "gzip, gzip",
                    "identity",
                    "compress",
                    "x-garbage",
                    "",
                    "GZIP",
                ],
            );
            plan.set_header("Content-Encoding", e);
            if plan.body.is_none() {
                plan.body = Some(Body::Bytes(b"{}".to_vec()));
            }
        }
        Mutation::ChunkedValid => {
            if plan.body.is_none() {
                plan.body = Some(Body::Bytes(b"{\"a\":1}".to_vec()));
            }
            plan.framing = Framing::Chunked(None);
        }
        Mutation::ChunkedBad => {
            if plan.body.is_none() {
                plan.body = Some(Body::Bytes(b"{\"a\":1}".to_vec()));
            }
            plan.framing = Framing::Chunked(Some(*pick(rng, CHUNK_FAULTS)));
            plan.half_close = true;
            plan.broken();
        }
        Mutation::TransferCodingOther => {
            plan.framing = Framing::OtherCoding(pick_str(
                rng,
                &[
                    "gzip",
                    "identity",
                    "chunked, identity",
                    "x",
                    "gzip, chunked",
                ],
            ));
            if plan.body.is_none() {
                plan.body = Some(Body::Bytes(b"{}".to_vec()));
            }
            plan.half_close = true;
            plan.broken();
        }
        Mutation::LengthFaults => {
            if plan.body.is_none() {
                plan.body = Some(Body::Bytes(b"{\"a\":1}".to_vec()));
            }
            plan.framing = match rng.random_range(0..4) {
                0 => Framing::DupLength { same: true },
                1 => Framing::DupLength { same: false },
                2 => Framing::BadLength(pick_str(
                    rng,
                    &[
                        "-1",
                        "abc",
                        "+7",
                        " 7 ",
                        "0x7",
                        "99999999999999999999999",
                        "7, 8",
                        "",
                    ],
                )),
                _ => Framing::LengthAndChunked,
            };
            plan.half_close = true;
            plan.broken();
        }
        Mutation::LieLonger => {
            if plan.body.is_none() {
                plan.body = Some(Body::Bytes(b"{\"a\":1}".to_vec()));
            }
            plan.framing = Framing::LieLonger(*pick(rng, &[1, 10, 1000, 1 << 20]));
            plan.half_close = true;
            plan.broken();
        }
        Mutation::LieShorter => {
            let len = plan.body.as_ref().map_or(0, Body::len);
            if len > 1 {
                plan.framing = Framing::LieShorter(rng.random_range(1..len));
                // The first request is well framed: it is answered.
                plan.reusable = false;
            }
        }
        Mutation::NoLength => {
            if plan.body.is_none() {
                plan.body = Some(Body::Bytes(b"{\"a\":1}".to_vec()));
            }
            plan.framing = Framing::NoLength;
            plan.reusable = false;
        }
        Mutation::HeaderHuge => {
            let n = *pick(rng, &[8_000, 60_000, 200_000, 500_000]);
            let name = *pick(
                rng,
                &[
                    "X-Huge",
                    "Cookie",
                    "User-Agent",
                    "Accept",
                    "Authorization",
                    "Content-Type",
                ],
            );
            plan.set_header(name, "h".repeat(n));
            plan.reusable = false;
            if n > 100_000 {
                plan.broken();
            }
        }
        Mutation::HeaderMany => {
            for i in 0..rng.random_range(50..300) {
                plan.header(&format!("X-Many-{i}"), "v");
            }
            plan.reusable = false;
        }
        Mutation::NoHost => plan.host = false,
        Mutation::Http10 => {
            plan.version = b"HTTP/1.0";
            plan.reusable = false;
            if matches!(plan.framing, Framing::Chunked(_)) {
                plan.broken();
            }
        }
        Mutation::AuthGarbage => {
            let v: Vec<u8> = match rng.random_range(0..12) {
                0 => b"Basic".to_vec(),
                1 => b"Basic ".to_vec(),
                2 => b"Basic !!!!".to_vec(),
                3 => b"Basic YWRtaW4=".to_vec(), // "admin" (no colon)
                4 => b"Basic //79".to_vec(),     // 0xff 0xfe 0xfd: not UTF-8
                5 => b"Basic bm9ib2R5Om5vcGU=".to_vec(), // nobody:nope
                6 => b"Bearer abc.def.ghi".to_vec(),
                7 => b"Digest username=\"admin\"".to_vec(),
                8 => b"BASIC YWRtaW46YWRtaW4=".to_vec(),
                9 => b"Basic Og==".to_vec(), // ":"
                10 => format!("Basic {}", "A".repeat(rng.random_range(100..20_000))).into_bytes(),
                _ => b"Basic \xff\xfe".to_vec(),
            };
            plan.set_header("Authorization", v);
        }
        Mutation::AuthWrongPassword => {
            use base64::Engine as _;
            let user = cfg.admin_user.clone().unwrap_or_default();
            let creds = format!("{user}:wrong{}", rng.random_range(0..1000));
            plan.set_header(
                "Authorization",
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(creds)
                ),
            );
        }
        Mutation::AuthNone => plan.remove_header("Authorization"),
        Mutation::IfMatchGarbage => {
            let name = *pick(rng, &["If-Match", "If-None-Match"]);
            let v = *pick(
                rng,
                &[
                    &b"\""[..],
                    b"\"\"",
                    b"*",
                    b"W/\"1-abc\"",
                    b"\"1-0123456789abcdef0123456789abcdef\"",
                    b"1-0123456789abcdef0123456789abcdef",
                    b"\"1-abc\", \"2-def\"",
                    b"\xff",
                    b"\"9999999999999999999999-x\"",
                ],
            );
            plan.set_header(name, v.to_vec());
        }
        Mutation::DestinationGarbage => {
            if rng.random_bool(0.7) {
                plan.method = b"COPY".to_vec();
            }
            let v: Vec<u8> = match rng.random_range(0..11) {
                0 => Vec::new(),
                1 => b"x?rev=garbage".to_vec(),
                2 => b"%ZZ".to_vec(),
                3 => b"_design/copied".to_vec(),
                4 => b"_local/copied".to_vec(),
                5 => b"\xc3\xa9t\xc3\xa9".to_vec(),
                6 => b"\xff\xfe".to_vec(),
                7 => "D".repeat(rng.random_range(4000..20_000)).into_bytes(),
                8 => b"http://elsewhere.invalid/db/x".to_vec(),
                9 => b"../../etc/passwd".to_vec(),
                _ => b"_bogus".to_vec(),
            };
            plan.set_header("Destination", v);
        }
        Mutation::MiscHeaders => match rng.random_range(0..12) {
            0 => plan.set_header(
                "X-HTTP-Method-Override",
                *pick(rng, &[&b"DELETE"[..], b"FROB", b"", b"\xff", b"G ET"]),
            ),
            1 => plan.set_header(
                "X-Couch-Full-Commit",
                *pick(rng, &["true", "false", "maybe", ""]),
            ),
            2 => plan.set_header(
                "Accept",
                *pick(
                    rng,
                    &[
                        "text/html",
                        "application/json",
                        "*/*;q=x",
                        "multipart/mixed",
                        "\u{0}",
                    ],
                ),
            ),
            3 => plan.set_header(
                "Accept-Encoding",
                *pick(rng, &["gzip", "deflate", "br", "gzip;q=0", "x", "*"]),
            ),
            4 => plan.set_header(
                "Expect",
                *pick(rng, &["100-continue", "200-ok", "", "100-continue, x"]),
            ),
            5 => plan.set_header("Origin", *pick(rng, &["http://evil.invalid", "null", ""])),
            6 => {
                plan.set_header(
                    "Connection",
                    *pick(
                        rng,
                        &["close", "keep-alive", "upgrade", "garbage", "close, close"],
                    ),
                );
                plan.reusable = false;
            }
            7 => {
                plan.set_header("Upgrade", *pick(rng, &["h2c", "websocket", "TLS/1.0"]));
                plan.set_header("Connection", "Upgrade");
                plan.reusable = false;
            }
            8 => plan.set_header(
                "Range",
                *pick(rng, &["bytes=0-1", "bytes=-1", "bytes=9-1", "x"]),
            ),
            9 => plan.set_header(
                "Cookie",
                *pick(
                    rng,
                    &[
                        "AuthSession=garbage",
                        "AuthSession=",
                        "a=b; AuthSession=YWRtaW46",
                    ],
                ),
            ),
            10 => plan.set_header(
                "X-Forwarded-Host",
                *pick(rng, &["evil.invalid", "", "a b", "\u{7f}"]),
            ),
            _ => plan.set_header("Content-MD5", *pick(rng, &["garbage", ""])),
        },
        Mutation::BodyTruncated => {
            let text = body_text(plan);
            if text.len() > 1 {
                let cut = rng.random_range(0..text.len());
                plan.json_body(text[..cut].to_vec());
            }
        }
        Mutation::BodyDeep => {
            let n = *pick(rng, &[127, 128, 129, 500, 1000, 5000, 10_000]);
            let deep = match rng.random_range(0..3) {
                0 => format!("{}{}", "[".repeat(n), "]".repeat(n)),
                1 => format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n)),
                _ => "[".repeat(n),
            };
            match plan.family {
                "bulk_docs" => {
                    plan.json_body(format!("{{\"docs\":[{{\"_id\":\"deep\",\"v\":{deep}}}]}}"))
                }
                "find" | "changes" => plan.json_body(format!("{{\"selector\":{{\"a\":{deep}}}}}")),
                "all_docs" | "server" if rng.random_bool(0.5) => plan.q("key", deep),
                _ if rng.random_bool(0.5) => plan.json_body(format!("{{\"v\":{deep}}}")),
                _ => plan.json_body(deep),
            }
            if plan.family == "changes" {
                plan.may_block = true;
            }
        }
        Mutation::BodyInvalidUtf8 => {
            let mut text = body_text(plan);
            let bad = *pick(
                rng,
                &[
                    &b"\xff"[..],
                    b"\xc0\xaf",
                    b"\xed\xa0\x80",
                    b"\xc3",
                    b"\x80\x80",
                    b"\xf8\x88\x80\x80\x80",
                ],
            );
            // Inside a string when there is one, else anywhere.
            let at = text.iter().rposition(|&b| b == b'"').unwrap_or(text.len());
            for (k, b) in bad.iter().enumerate() {
                text.insert(at + k, *b);
            }
            plan.json_body(text);
        }
        Mutation::BodyNul => {
            let mut text = body_text(plan);
            match rng.random_range(0..3) {
                0 => text.insert(rng.random_range(0..=text.len()), 0),
                1 => text = b"{\"_id\":\"nul\\u0000id\",\"\\u0000\":\"\\u0000\"}".to_vec(),
                _ => text.extend_from_slice(b"\x00\x00\x00"),
            }
            plan.json_body(text);
        }
        Mutation::BodyNumbers => {
            let n = *pick(
                rng,
                &[
                    "1e999",
                    "-1e999",
                    "1e-400",
                    "-0",
                    "123456789012345678901234567890",
                    "NaN",
                    "Infinity",
                    "0x10",
                    "01",
                    "1.",
                    ".5",
                    "1e",
                    "18446744073709551616",
                    "-9223372036854775809",
                ],
            );
            let big = "9".repeat(rng.random_range(300..5000));
            let v = if rng.random_bool(0.2) {
                big.as_str()
            } else {
                n
            };
            match plan.family {
                "bulk_docs" => plan.json_body(format!(
                    "{{\"docs\":[{{\"_id\":\"num{}\",\"v\":{v}}}]}}",
                    rng.random_range(0..50)
                )),
                "db_misc" => plan.json_body(v.to_string()),
                "all_docs" => plan.q(pick_str(rng, &["limit", "skip", "key"]), v),
                _ => plan.json_body(format!("{{\"v\":{v},\"n\":{v}}}")),
            }
        }
        Mutation::BodyDupKeys => {
            let b = *pick(
                rng,
                &[
                    "{\"_id\":\"dup1\",\"_id\":\"dup2\",\"v\":1}",
                    "{\"_rev\":\"1-abc\",\"_rev\":\"2-def\"}",
                    "{\"_deleted\":true,\"_deleted\":false}",
                    "{\"a\":1,\"a\":2,\"a\":3}",
                    "{\"docs\":[],\"docs\":[{\"_id\":\"dupdocs\"}]}",
                    "{\"docs\":[{\"_id\":\"x\",\"_id\":\"y\"}],\"new_edits\":true,\"new_edits\":false}",
                    "{\"keys\":[\"a\"],\"keys\":5}",
                ],
            );
            plan.json_body(b);
        }
        Mutation::BodyWrongType => {
            let b = *pick(
                rng,
                &[
                    &b"[]"[..],
                    b"null",
                    b"\"str\"",
                    b"123",
                    b"",
                    b"   ",
                    b"\xef\xbb\xbf{}",
                    b"{}{}",
                    b"{} xyz",
                    b"true",
                    b"{\"docs\":{}}",
                    b"{\"docs\":null}",
                    b"{\"docs\":[1,2,3]}",
                    b"{\"docs\":[[]]}",
                    b"{\"keys\":\"x\"}",
                    b"{\"selector\":[]}",
                    b"{,}",
                    b"{\"a\" 1}",
                    b"'single'",
                ],
            );
            plan.json_body(b.to_vec());
        }
        Mutation::BodySpecialFields => {
            let f = match rng.random_range(0..14) {
                0 => "\"_id\":123".to_string(),
                1 => "\"_id\":\"\"".to_string(),
                2 => "\"_rev\":\"garbage\"".to_string(),
                3 => "\"_revisions\":{\"start\":-1,\"ids\":[\"x\"]}".to_string(),
                4 => format!(
                    "\"_revisions\":{{\"start\":{},\"ids\":[{}]}}",
                    rng.random_range(1..20_000),
                    (0..rng.random_range(0..3000)).map(|i| format!("\"{i:032x}\"")).collect::<Vec<_>>().join(",")
                ),
                5 => "\"_attachments\":{\"a\":{\"data\":\"!!!not base64\",\"content_type\":5}}".to_string(),
                6 => "\"_attachments\":{\"a\":{\"stub\":true,\"revpos\":99}}".to_string(),
                7 => "\"_attachments\":{\"a\":{\"data\":\"aGVsbG8=\",\"content_type\":\"text/plain\"}}".to_string(),
                8 => "\"_deleted\":\"yes\"".to_string(),
                9 => "\"_foo\":1".to_string(),
                10 => "\"_conflicts\":[\"1-abc\"],\"_deleted_conflicts\":5".to_string(),
                11 => "\"_local_seq\":1,\"_revs_info\":[]".to_string(),
                12 => "\"_id\":\"_design/\"".to_string(),
                _ => "\"_deleted\":true".to_string(),
            };
            match plan.family {
                "bulk_docs" => plan.json_body(format!(
                    "{{\"docs\":[{{\"_id\":\"sp{}\",{f}}}],\"new_edits\":{}}}",
                    rng.random_range(0..100),
                    rng.random_bool(0.7)
                )),
                _ => plan.json_body(format!("{{{f},\"v\":1}}")),
            }
        }
        Mutation::BodyOversized => {
            let small = 8_000_001 + rng.random_range(0..200_000);
            let big = (64 << 20) + 1 + rng.random_range(0..(4 << 20));
            let len = if rng.random_bool(0.8) { small } else { big };
            if len <= cfg.max_body_bytes {
                let (prefix, suffix) = match plan.family {
                    "bulk_docs" => (
                        b"{\"docs\":[{\"_id\":\"big\",\"pad\":\"".to_vec(),
                        b"\"}]}".to_vec(),
                    ),
                    _ => (b"{\"pad\":\"".to_vec(), b"\"}".to_vec()),
                };
                plan.body = Some(Body::Filled {
                    prefix,
                    fill: b'p',
                    len,
                    suffix,
                });
                plan.set_header("Content-Type", "application/json");
                if matches!(plan.framing, Framing::Chunked(_)) {
                    plan.framing = Framing::Auto;
                }
                plan.reusable = false;
                if len > 64 << 20 {
                    // The server may answer 413 and close while the body is
                    // still being written.
                    plan.broken();
                }
            }
        }
        Mutation::BodyEscapes => {
            let s = *pick(
                rng,
                &[
                    "\\ud800",
                    "\\udc00\\ud800",
                    "\\x41",
                    "\\u12",
                    "\\u00zz",
                    "\\",
                    "\\uDFFF\\uD800",
                    "\\u0000",
                    "\\/",
                ],
            );
            let b = match plan.family {
                "bulk_docs" => format!(
                    "{{\"docs\":[{{\"_id\":\"esc{}\",\"v\":\"{s}\"}}]}}",
                    rng.random_range(0..50)
                ),
                _ if rng.random_bool(0.5) => format!("{{\"_id\":\"e{s}\",\"v\":1}}"),
                _ => format!("{{\"v\":\"{s}\",\"k{s}\":1}}"),
            };
            plan.json_body(b);
        }
        Mutation::Pipelined => {
            if plan.reusable
                && plan.need == Need::Required
                && plan.version == b"HTTP/1.1"
                && !plan.may_block
            {
                plan.repeat = rng.random_range(2..20);
            }
        }
    }
}

/// `mib` MiB of zeros, gzipped (about 1 KiB per MiB); computed once.
fn gzip_bomb(mib: usize) -> &'static [u8] {
    use std::sync::OnceLock;
    static BOMBS: [OnceLock<Vec<u8>>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = match mib {
        1 => 0,
        16 => 1,
        _ => 2,
    };
    BOMBS[slot].get_or_init(|| {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..mib {
            let _ = enc.write_all(&zeros);
        }
        enc.finish().unwrap_or_default()
    })
}

fn garbage_value(rng: &mut StdRng) -> Vec<u8> {
    match rng.random_range(0..16) {
        0 => Vec::new(),
        1 => b"true".to_vec(),
        2 => b"-1".to_vec(),
        3 => b"1e309".to_vec(),
        4 => b"18446744073709551616".to_vec(),
        5 => pct(b"\"str\""),
        6 => pct(b"["),
        7 => pct(b"{\"a\":"),
        8 => b"%ZZ".to_vec(),
        9 => b"%00".to_vec(),
        10 => b"%FF%FE".to_vec(),
        11 => b"a+b".to_vec(),
        12 => pct("[".repeat(rng.random_range(100..3000)).as_bytes()),
        13 => pct("日本".as_bytes()),
        14 => pct(b"longpoll"),
        _ => (0..rng.random_range(1..50))
            .map(|_| *pick(rng, b"abcXYZ019-_.~"))
            .collect(),
    }
}

/// Inserts `bytes` into a random segment (the last one if the request has
/// a document id, which is where most decoding happens).
fn insert_in_segment(plan: &mut Plan, rng: &mut StdRng, bytes: &[u8]) {
    if plan.segs.is_empty() {
        plan.segs.push(Vec::new());
    }
    let i = if rng.random_bool(0.6) {
        plan.segs.len() - 1
    } else {
        rng.random_range(0..plan.segs.len())
    };
    let seg = &mut plan.segs[i];
    let at = rng.random_range(0..=seg.len());
    // Never split an existing escape.
    let at = (0..=at)
        .rev()
        .find(|&j| j < 2 || (seg.get(j - 1) != Some(&b'%') && seg.get(j - 2) != Some(&b'%')))
        .unwrap_or(0);
    seg.splice(at..at, bytes.iter().copied());
}

/// Chooses a slow or broken delivery.
fn slow(plan: &mut Plan, rng: &mut StdRng) {
    plan.repeat = 1;
    match rng.random_range(0..6) {
        0 | 1 => {
            plan.delivery = Delivery::Slow {
                piece: rng.random_range(1..64),
                pause_ms: rng.random_range(5..60),
            };
            plan.reusable = false;
            plan.labels.push("slow_send");
        }
        2 => {
            plan.delivery = Delivery::Cut {
                at: usize::MAX / 2, // inside the head, fixed at render time
                hold_ms: rng.random_range(0..1500),
            };
            plan.need = Need::NoneExpected;
            plan.labels.push("stop_mid_head");
        }
        3 => {
            if plan.body.is_none() {
                plan.body = Some(Body::Bytes(b"{\"docs\":[{\"_id\":\"cut\"}]}".to_vec()));
                plan.set_header("Content-Type", "application/json");
            }
            plan.delivery = Delivery::Cut {
                at: usize::MAX, // inside the body, fixed at render time
                hold_ms: rng.random_range(0..1500),
            };
            plan.need = Need::NoneExpected;
            plan.labels.push("stop_mid_body");
        }
        _ => {
            plan.delivery = Delivery::NoRead {
                hold_ms: rng.random_range(0..2000),
            };
            if rng.random_bool(0.5) {
                // Something with a large answer.
                plan.method = b"GET".to_vec();
                plan.body = None;
                let seg0 = plan.segs.first().cloned().unwrap_or_default();
                plan.segs = vec![seg0, b"_changes".to_vec()];
                plan.query = vec![
                    (b"include_docs".to_vec(), b"true".to_vec()),
                    (b"style".to_vec(), b"all_docs".to_vec()),
                ];
                plan.raw_query = None;
            }
            plan.need = Need::NoneExpected;
            plan.labels.push("never_read");
        }
    }
}

fn render(cfg: &GenConfig, plan: Plan, index: u64, rng: &mut StdRng) -> Case {
    let label = format!(
        "{}/{}",
        plan.family,
        if plan.labels.is_empty() {
            "valid".to_string()
        } else {
            plan.labels.join("+")
        }
    );
    let hint = ReqHint {
        head: plan.is_method("HEAD"),
        continuous: plan.continuous,
        favicon: {
            let mut named = plan.segs.iter().filter(|s| !s.is_empty());
            named.next().is_some_and(|s| s == b"favicon.ico") && named.next().is_none()
        },
    };
    if let Some(raw) = plan.raw {
        return Case {
            index,
            label,
            head: raw,
            body: Body::Bytes(Vec::new()),
            delivery: Delivery::Whole,
            need: Need::Optional,
            may_block: false,
            reusable: false,
            half_close: true,
            repeat: 1,
            hint,
        };
    }
    let mut head = Vec::with_capacity(512);
    head.extend_from_slice(&plan.method);
    head.push(b' ');
    head.push(b'/');
    for (i, s) in plan.segs.iter().enumerate() {
        if i > 0 {
            head.push(b'/');
        }
        head.extend_from_slice(s);
    }
    if plan.trailing_slash && !plan.segs.is_empty() {
        head.push(b'/');
    }
    let query = match &plan.raw_query {
        Some(q) => q.clone(),
        None => {
            let mut q = Vec::new();
            for (i, (k, v)) in plan.query.iter().enumerate() {
                if i > 0 {
                    q.push(b'&');
                }
                q.extend_from_slice(k);
                q.push(b'=');
                q.extend_from_slice(v);
            }
            q
        }
    };
    if !query.is_empty() {
        head.push(b'?');
        head.extend_from_slice(&query);
    }
    head.push(b' ');
    head.extend_from_slice(plan.version);
    head.extend_from_slice(b"\r\n");
    let mut need = plan.need;
    if head.len() > 65_000 {
        // Beyond what an HTTP stack must take for a URI (414 or close).
        need = match need {
            Need::Required => Need::Optional,
            n => n,
        };
    }
    if plan.host && plan.version == b"HTTP/1.1" {
        head.extend_from_slice(format!("Host: {}\r\n", cfg.host).as_bytes());
    }
    let mut head_bytes_headers = 0usize;
    for (k, v) in &plan.headers {
        head.extend_from_slice(k);
        head.extend_from_slice(b": ");
        head.extend_from_slice(v);
        head.extend_from_slice(b"\r\n");
        head_bytes_headers += k.len() + v.len() + 4;
    }
    let mut half_close = plan.half_close;
    let body = plan.body.unwrap_or(Body::Bytes(Vec::new()));
    let has_body = !body.is_empty() || plan.framing != Framing::Auto;
    let len = body.len();
    let body = match &plan.framing {
        Framing::Auto => {
            if has_body || plan.method == b"PUT" || plan.method == b"POST" {
                head.extend_from_slice(format!("Content-Length: {len}\r\n").as_bytes());
            }
            body
        }
        Framing::Chunked(fault) => {
            head.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
            chunked(&body.slice(0, len), *fault, rng)
        }
        Framing::LieLonger(extra) => {
            head.extend_from_slice(format!("Content-Length: {}\r\n", len + extra).as_bytes());
            half_close = true;
            body
        }
        Framing::LieShorter(less) => {
            head.extend_from_slice(
                format!("Content-Length: {}\r\n", len.saturating_sub(*less)).as_bytes(),
            );
            body
        }
        Framing::DupLength { same } => {
            let second = if *same { len } else { len + 1 };
            head.extend_from_slice(
                format!("Content-Length: {len}\r\nContent-Length: {second}\r\n").as_bytes(),
            );
            body
        }
        Framing::BadLength(v) => {
            head.extend_from_slice(format!("Content-Length: {v}\r\n").as_bytes());
            body
        }
        Framing::LengthAndChunked => {
            head.extend_from_slice(
                format!("Content-Length: {len}\r\nTransfer-Encoding: chunked\r\n").as_bytes(),
            );
            chunked(&body.slice(0, len), None, rng)
        }
        Framing::OtherCoding(c) => {
            head.extend_from_slice(format!("Transfer-Encoding: {c}\r\n").as_bytes());
            body
        }
        Framing::NoLength => body,
    };
    head.extend_from_slice(b"\r\n");
    if head_bytes_headers > 300_000 {
        need = match need {
            Need::Required => Need::Optional,
            n => n,
        };
    }
    let delivery = match plan.delivery {
        Delivery::Cut { at, hold_ms } => {
            let total = head.len() + body.len();
            let at = if at == usize::MAX && !body.is_empty() {
                head.len() + rng.random_range(0..body.len())
            } else {
                rng.random_range(1..head.len().saturating_sub(2).max(2))
            };
            Delivery::Cut {
                at: at.min(total),
                hold_ms,
            }
        }
        d => d,
    };
    let reusable =
        plan.reusable && need == Need::Required && delivery == Delivery::Whole && !half_close;
    Case {
        index,
        label,
        head,
        body,
        delivery,
        need,
        may_block: plan.may_block,
        reusable,
        half_close,
        repeat: if reusable && !plan.may_block {
            plan.repeat
        } else {
            1
        },
        hint,
    }
}

/// Chunked encoding of `body` with an optional fault.
fn chunked(body: &[u8], fault: Option<ChunkFault>, rng: &mut StdRng) -> Body {
    let mut out = Vec::with_capacity(body.len() + 64);
    let mut rest = body;
    let mut first = true;
    while !rest.is_empty() {
        let n = rng.random_range(1..=rest.len().min(4096));
        let (piece, tail) = rest.split_at(n);
        match (fault, first) {
            (Some(ChunkFault::BadSize), true) => out.extend_from_slice(b"zz\r\n"),
            (Some(ChunkFault::SizeTooLarge), true) => {
                out.extend_from_slice(format!("{:x}\r\n", n + 100).as_bytes())
            }
            (Some(ChunkFault::Overflow), true) => out.extend_from_slice(b"ffffffffffffffffff\r\n"),
            (Some(ChunkFault::Negative), true) => out.extend_from_slice(b"-5\r\n"),
            (Some(ChunkFault::ExtensionGarbage), true) => out.extend_from_slice(
                format!(
                    "{n:x};;;=\"\x01{}\r\n",
                    "e".repeat(rng.random_range(0..10_000))
                )
                .as_bytes(),
            ),
            _ => out.extend_from_slice(format!("{n:x}\r\n").as_bytes()),
        }
        out.extend_from_slice(piece);
        if !(fault == Some(ChunkFault::MissingCrlf) && first) {
            out.extend_from_slice(b"\r\n");
        }
        first = false;
        rest = tail;
    }
    if fault != Some(ChunkFault::NoFinalChunk) {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    Body::Bytes(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> GenConfig {
        GenConfig {
            seed: 7,
            prefix: "stress-7-".into(),
            dbs: 4,
            host: "127.0.0.1:5984".into(),
            admin_auth: Some("Basic YWRtaW46YWRtaW4=".into()),
            admin_user: Some("admin".into()),
            max_body_bytes: 9 << 20,
            pbkdf2_per_million: 0,
            slow_per_mille: 20,
        }
    }

    #[test]
    fn deterministic_per_index() {
        let c = cfg();
        for i in [0, 1, 17, 99_999] {
            let (a, b) = (generate(&c, i), generate(&c, i));
            assert_eq!(a.head, b.head);
            assert_eq!(a.body.slice(0, a.body.len()), b.body.slice(0, b.body.len()));
            assert_eq!(a.label, b.label);
        }
        assert_ne!(generate(&c, 1).head, generate(&c, 2).head);
    }

    #[test]
    fn covers_the_catalogue_and_stays_bounded() {
        let c = cfg();
        let mut labels = std::collections::BTreeSet::new();
        let mut valid = 0;
        for i in 0..20_000 {
            let case = generate(&c, i);
            assert!(case.head.len() < 600_000, "{}", case.label);
            assert!(case.body.len() <= c.max_body_bytes, "{}", case.label);
            if case.label.ends_with("/valid") {
                valid += 1;
            }
            let (fam, muts) = case.label.split_once('/').unwrap();
            labels.insert(fam.to_string());
            for m in muts.split('+') {
                labels.insert(m.to_string());
            }
        }
        assert!(valid > 4000, "{valid} valid requests");
        for m in mutation_labels() {
            if m != "auth_wrong_password" {
                assert!(labels.contains(m), "mutation {m} never generated");
            }
        }
        for f in [
            "doc_put",
            "changes",
            "bulk_docs",
            "bulk_get",
            "revs_diff",
            "purge",
            "find",
            "config",
            "server",
            "garbage",
        ] {
            assert!(labels.contains(f), "family {f} never generated");
        }
        for s in ["slow_send", "stop_mid_head", "stop_mid_body", "never_read"] {
            assert!(labels.contains(s), "delivery {s} never generated");
        }
    }

    #[test]
    fn admin_writes_stay_in_the_run() {
        let c = cfg();
        for i in 0..20_000 {
            let case = generate(&c, i);
            let head = String::from_utf8_lossy(&case.head);
            let authed = head.contains("Authorization: Basic YWRtaW46YWRtaW4=");
            if !authed {
                continue;
            }
            let line = head.lines().next().unwrap_or("");
            if line.split(' ').count() != 3 {
                // Not a request line a server can route.
                continue;
            }
            let method = line.split(' ').next().unwrap_or("");
            if let Some((_, rest)) = line.split_once("/_config/") {
                let section = rest.split(['/', ' ', '?']).next().unwrap_or("");
                // A mutation may have inserted escapes into `stress…`;
                // what remains must still name a `stress` section.
                let mut plain = String::new();
                let mut chars = section.chars();
                while let Some(c) = chars.next() {
                    if c == '%' {
                        chars.next();
                        chars.next();
                    } else if c.is_ascii_alphanumeric() {
                        plain.push(c);
                    }
                }
                if method != "GET" && !plain.is_empty() {
                    assert!(plain.contains("stress"), "{line}");
                }
            }
            let path = line.split(' ').nth(1).unwrap_or("");
            let first = path
                .trim_start_matches('/')
                .split(['/', '?'])
                .next()
                .unwrap_or("");
            let first = percent_encoding::percent_decode_str(first).decode_utf8_lossy();
            let valid_name = first.starts_with(|c: char| c.is_ascii_lowercase())
                && first
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_$()+-/".contains(c));
            let system = matches!(first.as_ref(), "_users" | "_replicator" | "_global_changes");
            let writes =
                !matches!(method, "GET" | "HEAD") || head.contains("X-HTTP-Method-Override");
            if writes && (valid_name || system) && !first.starts_with("_node") {
                assert!(first.starts_with("stress-7-"), "{line}");
            }
            if method == "DELETE"
                && path
                    .trim_start_matches('/')
                    .split('?')
                    .next()
                    .is_some_and(|p| !p.contains('/'))
                && valid_name
            {
                assert!(first.starts_with("stress-7-r"), "{line}");
            }
        }
    }

    #[test]
    fn chunked_faults_render() {
        let mut rng = StdRng::seed_from_u64(1);
        let ok = chunked(b"hello world", None, &mut rng);
        let text = ok.slice(0, ok.len());
        assert!(text.ends_with(b"0\r\n\r\n"));
        let bad = chunked(b"hello", Some(ChunkFault::BadSize), &mut rng);
        assert!(bad.slice(0, bad.len()).starts_with(b"zz\r\n"));
    }
}
