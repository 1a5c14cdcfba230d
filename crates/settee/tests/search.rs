//! Full-text search end to end, through the real server: CouchDB 3.4's
//! Nouveau API (`_nouveau`, `_nouveau_info`, `_nouveau_cleanup`) with
//! every query option, answers shaped as CouchDB's, a generated corpus of
//! queries whose hits are checked against an evaluation in this file,
//! paging by bookmark, updates, deletions and purges reflected, a design
//! document changed, errors as CouchDB's, the index kept across a
//! restart, and the database's security.

mod common;

use std::collections::BTreeSet;

use common::{call, shared, Resp, Server};
use serde_json::{json, Value};

fn put(s: &Server, path: &str, body: &Value) -> Resp {
    s.admin("PUT", path, Some(&body.to_string()))
}

fn bulk(s: &Server, db: &str, docs: Vec<Value>) -> Vec<Value> {
    s.bulk(db, docs)
}

fn post(s: &Server, path: &str, body: &Value) -> Value {
    let r = s.admin("POST", path, Some(&body.to_string()));
    assert_eq!(r.status, 200, "POST {path} {body}: {r:?}");
    r.json()
}

fn get(s: &Server, path: &str) -> Value {
    let r = s.admin("GET", path, None);
    assert_eq!(r.status, 200, "GET {path}: {r:?}");
    r.json()
}

fn hit_ids(v: &Value) -> Vec<String> {
    v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["id"].as_str().expect("id").to_string())
        .collect()
}

/// Percent-encodes a query-string value.
fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// CouchDB's own Nouveau test corpus (test/elixir/test/nouveau_test.exs).
fn couch_corpus(s: &Server, db: &str) {
    s.create_db(db);
    bulk(
        s,
        db,
        vec![
            json!({"_id": "doc4", "foo": "foo", "bar": 42}),
            json!({"_id": "doc3", "foo": "bar", "bar": 12.0}),
            json!({"_id": "doc1", "foo": "baz", "bar": 0}),
            json!({"_id": "doc2", "foo": "foobar", "bar": 100}),
        ],
    );
    let ddoc = json!({"nouveau": {"bar": {"default_analyzer": "standard", "index":
        "function (doc) { index(\"string\", \"foo\", doc.foo, {store: true}); index(\"double\", \"bar\", doc.bar, {store: true}); }"}}});
    assert_eq!(put(s, &format!("/{db}/_design/foo"), &ddoc).status, 201);
}

#[test]
fn couchdbs_nouveau_tests_pass() {
    let s = shared();
    let db = "search_couch";
    couch_corpus(s, db);
    let url = format!("/{db}/_design/foo/_nouveau/bar");
    let ids = |v: &Value| -> Vec<String> {
        v["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["doc"]["_id"].as_str().unwrap().to_string())
            .collect()
    };
    // GET and POST of everything: ties broken by _id.
    let all = get(s, &format!("{url}?q=*:*&include_docs=true"));
    assert_eq!(ids(&all), ["doc1", "doc2", "doc3", "doc4"]);
    assert_eq!(
        ids(&post(s, &url, &json!({"q": "*:*", "include_docs": true}))),
        ["doc1", "doc2", "doc3", "doc4"]
    );
    // The answer's shape.
    assert_eq!(all["total_hits"], 4);
    assert_eq!(all["total_hits_relation"], "EQUAL_TO");
    assert!(all["bookmark"].is_string());
    assert_eq!(all["counts"], Value::Null);
    assert_eq!(all["ranges"], Value::Null);
    assert!(all["update_latency"].is_u64());
    let hit = &all["hits"][0];
    assert_eq!(hit["id"], "doc1");
    assert_eq!(hit["fields"], json!({"foo": "baz", "bar": 0.0}));
    assert_eq!(hit["order"][1], json!({"@type": "string", "value": "doc1"}));
    assert_eq!(hit["order"][0]["@type"], "float");
    assert_eq!(hit["doc"]["foo"], "baz");
    assert!(hit["doc"]["_rev"].as_str().unwrap().starts_with("1-"));
    let keys: Vec<&String> = all.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "bookmark",
            "counts",
            "hits",
            "ranges",
            "total_hits",
            "total_hits_relation",
            "update_latency"
        ]
    );
    // Paginated.
    let p1 = post(
        s,
        &url,
        &json!({"q": "*:*", "limit": 2, "include_docs": true}),
    );
    assert_eq!(ids(&p1), ["doc1", "doc2"]);
    let p2 = post(
        s,
        &url,
        &json!({"q": "*:*", "limit": 2, "bookmark": p1["bookmark"], "include_docs": true}),
    );
    assert_eq!(ids(&p2), ["doc3", "doc4"]);
    let p3 = post(
        s,
        &url,
        &json!({"q": "*:*", "limit": 2, "bookmark": p2["bookmark"]}),
    );
    assert_eq!(hit_ids(&p3), Vec::<String>::new());
    assert_eq!(p3["bookmark"], p2["bookmark"], "the end keeps the bookmark");
    // A string field.
    assert_eq!(
        ids(&post(
            s,
            &url,
            &json!({"q": "foo:bar", "include_docs": true})
        )),
        ["doc3"]
    );
    // Sorts, both forms, both ways.
    for (sort, want) in [
        ("foo<string>", ["doc3", "doc1", "doc4", "doc2"]),
        ("-foo<string>", ["doc2", "doc4", "doc1", "doc3"]),
        ("bar<double>", ["doc1", "doc3", "doc4", "doc2"]),
        ("-bar<double>", ["doc2", "doc4", "doc3", "doc1"]),
        ("-bar", ["doc2", "doc4", "doc3", "doc1"]),
        ("foo", ["doc3", "doc1", "doc4", "doc2"]),
    ] {
        let v = post(s, &url, &json!({"q": "*:*", "sort": sort}));
        assert_eq!(hit_ids(&v), want, "{sort}");
        let v = get(
            s,
            &format!("{url}?q=*:*&sort={}", enc(&format!("\"{sort}\""))),
        );
        assert_eq!(hit_ids(&v), want, "GET {sort}");
    }
    let v = post(s, &url, &json!({"q": "*:*", "sort": ["-bar<double>"]}));
    assert_eq!(
        v["hits"][0]["order"][0],
        json!({"@type": "double", "value": 100.0})
    );
    // Counts and ranges.
    let v = post(s, &url, &json!({"q": "*:*", "counts": ["foo"]}));
    assert_eq!(
        v["counts"],
        json!({"foo": {"bar": 1, "baz": 1, "foo": 1, "foobar": 1}})
    );
    let v = post(
        s,
        &url,
        &json!({"q": "*:*", "ranges": {"bar": [
        {"label": "cheap", "min": 0, "max": 42},
        {"label": "expensive", "min": 42, "min_inclusive": false, "max": 1000}]}}),
    );
    assert_eq!(v["ranges"], json!({"bar": {"cheap": 3, "expensive": 1}}));
    let v = post(
        s,
        &url,
        &json!({"q": "*:*", "ranges": {"bar": [
        {"label": "cheap", "max": 42},
        {"label": "expensive", "min": 42, "min_inclusive": false}]}}),
    );
    assert_eq!(v["ranges"], json!({"bar": {"cheap": 3, "expensive": 1}}));
    let v = get(
        s,
        &format!("{url}?q=*:*&counts={}&top_n=2", enc(r#"["foo"]"#)),
    );
    assert_eq!(v["counts"]["foo"].as_object().unwrap().len(), 2, "{v}");
    // Numeric ranges in the query.
    assert_eq!(
        hit_ids(&post(
            s,
            &url,
            &json!({"q": "bar:[1 TO 50]", "sort": "bar"})
        )),
        ["doc3", "doc4"]
    );
    assert_eq!(
        hit_ids(&post(
            s,
            &url,
            &json!({"q": "bar:{0 TO 42]", "sort": "bar"})
        )),
        ["doc3", "doc4"]
    );
    assert_eq!(
        hit_ids(&post(
            s,
            &url,
            &json!({"q": "bar:[-Infinity TO 12]", "sort": "bar"})
        )),
        ["doc1", "doc3"]
    );
    assert_eq!(
        hit_ids(&post(
            s,
            &url,
            &json!({"q": "bar:[42 TO *]", "sort": "bar"})
        )),
        ["doc4", "doc2"]
    );
    assert_eq!(hit_ids(&post(s, &url, &json!({"q": "bar:42"}))), ["doc4"]);
    assert_eq!(
        hit_ids(&post(s, &url, &json!({"q": "foo:foo*", "sort": "foo"}))),
        ["doc4", "doc2"]
    );
    // Info.
    let info = get(s, &format!("/{db}/_design/foo/_nouveau_info/bar"));
    assert_eq!(info["name"], "_design/foo/bar");
    assert_eq!(info["search_index"]["num_docs"], 4);
    assert_eq!(info["search_index"]["update_seq"], 5, "{info}");
    assert_eq!(info["search_index"]["purge_seq"], 0);
    assert!(info["search_index"]["disk_size"].as_u64().unwrap() > 0);
    assert_eq!(
        info["search_index"]["signature"].as_str().unwrap().len(),
        32
    );
}

/// A small deterministic generator (no dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.next() as usize % xs.len()]
    }
}

const WORDS: &[&str] = &[
    "apple", "banana", "cherry", "date", "elder", "fig", "grape", "honey",
];
const CATS: &[&str] = &["red", "green", "blue"];

#[derive(Debug, Clone)]
struct GenDoc {
    id: String,
    words: Vec<String>,
    cat: String,
    n: f64,
}

/// A query in the test's own terms, with its Lucene text.
#[derive(Debug, Clone)]
enum Q {
    Word(String),
    Cat(String),
    Range(f64, f64),
    Phrase(String, String),
    And(Box<Q>, Box<Q>),
    Or(Box<Q>, Box<Q>),
    AndNot(Box<Q>, Box<Q>),
}

impl Q {
    fn text(&self) -> String {
        match self {
            Q::Word(w) => format!("title:{w}"),
            Q::Cat(c) => format!("cat:{c}"),
            Q::Range(a, b) => format!("n:[{a} TO {b}]"),
            Q::Phrase(a, b) => format!("title:\"{a} {b}\""),
            Q::And(a, b) => format!("({}) AND ({})", a.text(), b.text()),
            Q::Or(a, b) => format!("({}) OR ({})", a.text(), b.text()),
            Q::AndNot(a, b) => format!("({}) AND NOT ({})", a.text(), b.text()),
        }
    }

    fn matches(&self, d: &GenDoc) -> bool {
        match self {
            Q::Word(w) => d.words.contains(w),
            Q::Cat(c) => d.cat == *c,
            Q::Range(a, b) => d.n >= *a && d.n <= *b,
            Q::Phrase(a, b) => d.words.windows(2).any(|p| p[0] == *a && p[1] == *b),
            Q::And(a, b) => a.matches(d) && b.matches(d),
            Q::Or(a, b) => a.matches(d) || b.matches(d),
            Q::AndNot(a, b) => a.matches(d) && !b.matches(d),
        }
    }

    fn generate(r: &mut Rng, depth: u32) -> Q {
        let leaf = depth == 0 || r.next().is_multiple_of(3);
        if leaf {
            return match r.next() % 4 {
                0 => Q::Cat(r.pick(CATS).into()),
                1 => {
                    let a = (r.next() % 100) as f64;
                    Q::Range(a, a + (r.next() % 40) as f64)
                }
                2 => Q::Phrase(r.pick(WORDS).into(), r.pick(WORDS).into()),
                _ => Q::Word(r.pick(WORDS).into()),
            };
        }
        let (a, b) = (
            Box::new(Q::generate(r, depth - 1)),
            Box::new(Q::generate(r, depth - 1)),
        );
        match r.next() % 3 {
            0 => Q::And(a, b),
            1 => Q::Or(a, b),
            _ => Q::AndNot(a, b),
        }
    }
}

#[test]
fn a_generated_corpus_of_queries_matches_an_independent_evaluation() {
    let s = shared();
    let db = "search_gen";
    s.create_db(db);
    let mut r = Rng(42);
    let docs: Vec<GenDoc> = (0..240)
        .map(|i| GenDoc {
            id: format!("g{i:03}"),
            words: (0..1 + r.next() % 5)
                .map(|_| r.pick(WORDS).to_string())
                .collect(),
            cat: r.pick(CATS).to_string(),
            n: (r.next() % 120) as f64 + if i % 4 == 0 { 0.5 } else { 0.0 },
        })
        .collect();
    for chunk in docs.chunks(80) {
        bulk(
            s,
            db,
            chunk
                .iter()
                .map(|d| {
                    // Capitalised words: the standard analyzer lowercases.
                    let title: Vec<String> = d
                        .words
                        .iter()
                        .map(|w| format!("{}{}", w[..1].to_uppercase(), &w[1..]))
                        .collect();
                    json!({"_id": d.id, "title": title.join(" "), "cat": d.cat, "n": d.n})
                })
                .collect(),
        );
    }
    let ddoc = json!({"nouveau": {"i": {"index": "function(doc){ if (doc.title) index('text', 'title', doc.title, {store: true}); if (doc.cat) index('string', 'cat', doc.cat); if (typeof doc.n == 'number') index('double', 'n', doc.n, {store: true}); }"}}});
    assert_eq!(put(s, &format!("/{db}/_design/g"), &ddoc).status, 201);
    let url = format!("/{db}/_design/g/_nouveau/i");
    let mut nonempty = 0;
    for round in 0..120 {
        let q = Q::generate(&mut r, 2);
        let want: Vec<&GenDoc> = docs.iter().filter(|d| q.matches(d)).collect();
        let want_ids: BTreeSet<String> = want.iter().map(|d| d.id.clone()).collect();
        let v = post(s, &url, &json!({"q": q.text(), "limit": 500}));
        let got: BTreeSet<String> = hit_ids(&v).into_iter().collect();
        assert_eq!(got, want_ids, "round {round}: {}", q.text());
        assert_eq!(v["total_hits"], want_ids.len(), "{}", q.text());
        nonempty += usize::from(!want_ids.is_empty());
        // Sorted by n descending, then id: the same order computed here.
        let mut sorted = want.clone();
        sorted.sort_by(|a, b| b.n.total_cmp(&a.n).then_with(|| a.id.cmp(&b.id)));
        let sorted: Vec<String> = sorted.iter().map(|d| d.id.clone()).collect();
        let v = post(
            s,
            &url,
            &json!({"q": q.text(), "limit": 500, "sort": "-n<double>"}),
        );
        assert_eq!(hit_ids(&v), sorted, "{}", q.text());
        // Paged by bookmark, the pages join up to the same order.
        if round % 6 == 0 {
            let mut paged = Vec::new();
            let mut bookmark = Value::Null;
            for _ in 0..100 {
                let v = post(
                    s,
                    &url,
                    &json!({"q": q.text(), "limit": 7, "sort": ["-n<double>"], "bookmark": bookmark}),
                );
                let page = hit_ids(&v);
                if page.is_empty() {
                    break;
                }
                paged.extend(page);
                bookmark = v["bookmark"].clone();
            }
            assert_eq!(paged, sorted, "paged {}", q.text());
        }
    }
    assert!(
        nonempty > 40,
        "the generated queries mostly match something: {nonempty}"
    );
    // Counts per category, checked against the corpus.
    let v = post(s, &url, &json!({"q": "*:*", "counts": ["cat"], "limit": 1}));
    for c in CATS {
        let n = docs.iter().filter(|d| d.cat == *c).count();
        assert_eq!(v["counts"]["cat"][c], n, "{c}");
    }
    // Relevance: a document with the word three times outranks one with it once.
    bulk(
        s,
        db,
        vec![
            json!({"_id": "r1", "title": "zebra zebra zebra"}),
            json!({"_id": "r2", "title": "zebra apple banana cherry date elder"}),
        ],
    );
    assert_eq!(
        hit_ids(&post(s, &url, &json!({"q": "zebra"}))),
        Vec::<String>::new(),
        "no default field"
    );
    assert_eq!(
        hit_ids(&post(s, &url, &json!({"q": "title:zebra"}))),
        ["r1", "r2"]
    );
}

#[test]
fn updates_deletions_purges_and_design_changes_are_reflected() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = Server::start_in(tmp.path(), &[]);
    let db = "search_upd";
    s.create_db(db);
    let revs = bulk(
        &s,
        db,
        (0..30)
            .map(|i| json!({"_id": format!("u{i:02}"), "body": format!("word{} common", i % 5), "n": i}))
            .collect(),
    );
    let ddoc = json!({"nouveau": {"i": {"index": "function(doc){ index('text', 'default', doc.body); index('double', 'n', doc.n); }"}}});
    let r = put(&s, &format!("/{db}/_design/d"), &ddoc);
    assert_eq!(r.status, 201);
    let ddoc_rev = r.json()["rev"].as_str().unwrap().to_string();
    let url = format!("/{db}/_design/d/_nouveau/i");
    let q = |q: &str| post(&s, &url, &json!({"q": q, "limit": 100, "sort": "n"}));
    assert_eq!(q("common")["total_hits"], 30);
    assert_eq!(
        hit_ids(&q("word3")),
        ["u03", "u08", "u13", "u18", "u23", "u28"]
    );
    // An edit, a deletion, a new document.
    let rev = |i: usize| revs[i]["rev"].as_str().unwrap().to_string();
    bulk(
        &s,
        db,
        vec![
            json!({"_id": "u03", "_rev": rev(3), "body": "changed", "n": 3}),
            json!({"_id": "u08", "_rev": rev(8), "_deleted": true}),
            json!({"_id": "u99", "body": "word3", "n": 99}),
        ],
    );
    assert_eq!(hit_ids(&q("word3")), ["u13", "u18", "u23", "u28", "u99"]);
    assert_eq!(hit_ids(&q("changed")), ["u03"]);
    // update=false answers from the index as it is.
    bulk(
        &s,
        db,
        vec![json!({"_id": "u98", "body": "word3", "n": 98})],
    );
    let stale = post(&s, &url, &json!({"q": "word3", "update": false}));
    assert_eq!(stale["total_hits"], 5);
    assert_eq!(q("word3")["total_hits"], 6);
    // A purge.
    let r = s.admin(
        "POST",
        &format!("/{db}/_purge"),
        Some(&json!({"u13": [rev(13)]}).to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(hit_ids(&q("word3")), ["u18", "u23", "u28", "u98", "u99"]);
    let info = get(&s, &format!("/{db}/_design/d/_nouveau_info/i"));
    assert_eq!(info["search_index"]["purge_seq"], 1);
    let old_sig = info["search_index"]["signature"]
        .as_str()
        .unwrap()
        .to_string();
    // The design document changed: the index is rebuilt with the new function.
    let ddoc = json!({"_rev": ddoc_rev, "nouveau": {"i": {"index": "function(doc){ if (doc.n % 2 == 0) index('text', 'default', doc.body); index('double', 'n', doc.n); }"}}});
    assert_eq!(put(&s, &format!("/{db}/_design/d"), &ddoc).status, 201);
    assert_eq!(hit_ids(&q("word3")), ["u18", "u28", "u98"]);
    let info = get(&s, &format!("/{db}/_design/d/_nouveau_info/i"));
    let new_sig = info["search_index"]["signature"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(old_sig, new_sig);
    // Cleanup removes the old index's files, keeps the new one's.
    let files = |sig: &str| -> usize {
        walk(&tmp.path().join("search"))
            .iter()
            .filter(|p| p.contains(sig))
            .count()
    };
    assert!(files(&old_sig) > 0 && files(&new_sig) > 0);
    let r = s.admin("POST", &format!("/{db}/_nouveau_cleanup"), Some("{}"));
    assert_eq!(r.status, 202, "{r:?}");
    assert_eq!(files(&old_sig), 0);
    assert!(files(&new_sig) > 0);
    assert_eq!(hit_ids(&q("word3")), ["u18", "u28", "u98"]);
    // The design document deleted: _view_cleanup removes its index too.
    let r = s.admin("GET", &format!("/{db}/_design/d"), None);
    let rev = r.json()["_rev"].as_str().unwrap().to_string();
    assert_eq!(
        s.admin("DELETE", &format!("/{db}/_design/d?rev={rev}"), None)
            .status,
        200
    );
    assert_eq!(
        s.admin("POST", &format!("/{db}/_view_cleanup"), Some("{}"))
            .status,
        202
    );
    assert_eq!(files(&new_sig), 0);
    // A deleted database takes its search indexes' files with it.
    let ddoc = json!({"nouveau": {"i": {"index": "function(doc){ index('text', 'default', doc.body); }"}}});
    assert_eq!(put(&s, &format!("/{db}/_design/e"), &ddoc).status, 201);
    assert_eq!(
        post(
            &s,
            &format!("/{db}/_design/e/_nouveau/i"),
            &json!({"q": "common"})
        )["total_hits"],
        27
    );
    assert!(!walk(&tmp.path().join("search")).is_empty());
    assert_eq!(s.admin("DELETE", &format!("/{db}"), None).status, 200);
    assert_eq!(walk(&tmp.path().join("search")), Vec::<String>::new());
    s.stop();
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            out.push(p.to_string_lossy().to_string());
            if p.is_dir() {
                out.extend(walk(&p));
            }
        }
    }
    out
}

fn error(r: &Resp) -> (u16, String, String) {
    r.error_triple()
}

#[test]
fn bad_requests_are_answered_as_couchdb_answers_them() {
    let s = shared();
    let db = "search_err";
    couch_corpus(s, db);
    put(
        s,
        &format!("/{db}/_design/noidx"),
        &json!({"nouveau": {"x": {"default_analyzer": "standard"}}}),
    );
    let url = format!("/{db}/_design/foo/_nouveau/bar");
    let g = |q: &str| error(&s.admin("GET", &format!("{url}?{q}"), None));
    let p = |b: Value| error(&s.admin("POST", &url, Some(&b.to_string())));
    let e = |status: u16, err: &str, reason: &str| (status, err.to_string(), reason.to_string());
    assert_eq!(
        g("limit=3"),
        e(400, "query_parse_error", "q parameter is mandatory")
    );
    assert_eq!(
        g("q=a&limit=x"),
        e(
            400,
            "query_parse_error",
            "limit parameter must be an integer"
        )
    );
    assert_eq!(
        g("q=a&limit=0"),
        e(
            400,
            "query_parse_error",
            "limit parameter must be greater than zero"
        )
    );
    assert_eq!(
        g("q=a&include_docs=yes"),
        e(
            400,
            "query_parse_error",
            "Invalid value for include_docs: \"yes\""
        )
    );
    assert_eq!(
        g("q=a&update=1"),
        e(400, "query_parse_error", "Invalid value for update: \"1\"")
    );
    assert_eq!(
        p(json!({"q": "a", "limit": "2"})),
        e(
            400,
            "query_parse_error",
            "Invalid value for limit: <<\"2\">>"
        )
    );
    assert_eq!(
        p(json!({"q": "a", "counts": "foo"})),
        e(
            500,
            "query_parser_error",
            "counts parameter must be a list of strings"
        )
    );
    assert_eq!(
        p(json!({"q": "a", "ranges": {"bar": [1]}})),
        e(
            500,
            "query_parser_error",
            "all values in ranges parameter must be objects"
        )
    );
    let (status, err, reason) = p(json!({"q": "foo:(bar"}));
    assert_eq!((status, err.as_str()), (400, "bad_request"));
    assert!(reason.starts_with("Cannot parse 'foo:(bar'"), "{reason}");
    assert_eq!(
        p(json!({"q": "*:*", "sort": "a b"})),
        e(400, "bad_request", "a b is not a valid sort parameter")
    );
    assert_eq!(p(json!({"q": "*:*", "bookmark": "not-one"})).0, 400);
    assert_eq!(
        error(&s.admin("GET", &format!("/{db}/_design/foo/_nouveau/nope?q=a"), None)),
        e(404, "not_found", "nope not found.")
    );
    assert_eq!(
        error(&s.admin("GET", &format!("/{db}/_design/none/_nouveau/bar?q=a"), None)),
        e(404, "not_found", "missing")
    );
    assert_eq!(
        error(&s.admin("GET", &format!("/{db}/_design/noidx/_nouveau/x?q=a"), None)),
        e(
            400,
            "invalid_design_doc",
            "index `x` must have parameter `index`"
        )
    );
    assert_eq!(
        error(&s.admin("GET", "/search_no_db/_design/foo/_nouveau/bar?q=a", None)).0,
        404
    );
    let r = s.admin("PUT", &url, Some("{}"));
    assert_eq!(r.status, 405);
    assert_eq!(
        s.admin(
            "POST",
            &format!("/{db}/_design/foo/_nouveau_info/bar"),
            Some("{}")
        )
        .status,
        405
    );
    assert_eq!(
        s.admin("GET", &format!("/{db}/_nouveau_cleanup"), None)
            .status,
        405
    );
}

#[test]
fn a_restart_keeps_the_index_without_a_rebuild() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = Server::start_in(tmp.path(), &[]);
    let db = "search_restart";
    couch_corpus(&s, db);
    let url = format!("/{db}/_design/foo/_nouveau/bar");
    let before = post(&s, &url, &json!({"q": "*:*"}));
    assert_eq!(before["total_hits"], 4);
    s.stop();
    let s = Server::start_in(tmp.path(), &[]);
    // update=false reads only what is on disk: all of it is there.
    let after = post(&s, &url, &json!({"q": "*:*", "update": false}));
    assert_eq!(hit_ids(&after), hit_ids(&before));
    let info = get(&s, &format!("/{db}/_design/foo/_nouveau_info/bar"));
    assert_eq!(info["search_index"]["update_seq"], 5);
    // Writes after the restart are indexed from where the index was.
    bulk(&s, db, vec![json!({"_id": "doc5", "foo": "qux", "bar": 7})]);
    let v = post(&s, &url, &json!({"q": "foo:qux"}));
    assert_eq!(hit_ids(&v), ["doc5"]);
    let info = get(&s, &format!("/{db}/_design/foo/_nouveau_info/bar"));
    assert_eq!(info["search_index"]["update_seq"], 6);
    assert_eq!(info["search_index"]["num_docs"], 5);
    // A kill -9 loses nothing committed.
    s.kill9();
    let s = Server::start_in(tmp.path(), &[]);
    assert_eq!(
        post(&s, &url, &json!({"q": "*:*", "update": false}))["total_hits"],
        5
    );
    s.stop();
}

#[test]
fn reading_an_index_needs_what_reading_the_database_needs() {
    let s = shared();
    let db = "search_sec";
    couch_corpus(s, db);
    for (name, pw) in [("search_member", "pw-m"), ("search_other", "pw-o")] {
        let r = s.admin(
            "PUT",
            &format!("/_users/org.couchdb.user:{name}"),
            Some(&json!({"name": name, "password": pw, "roles": [], "type": "user"}).to_string()),
        );
        assert!(r.status == 201 || r.status == 409, "{r:?}");
    }
    let sec = json!({"members": {"names": ["search_member"], "roles": []}});
    assert_eq!(
        s.admin("PUT", &format!("/{db}/_security"), Some(&sec.to_string()))
            .status,
        200
    );
    let url = s.url(&format!("/{db}/_design/foo/_nouveau/bar?q=*:*"));
    let info = s.url(&format!("/{db}/_design/foo/_nouveau_info/bar"));
    let agent = common::agent();
    for u in [&url, &info] {
        assert_eq!(call(&agent, "GET", u, None, &[], None).status, 401, "{u}");
        assert_eq!(
            call(&agent, "GET", u, Some(("search_other", "pw-o")), &[], None).status,
            403,
            "{u}"
        );
        assert_eq!(
            call(&agent, "GET", u, Some(("search_member", "pw-m")), &[], None).status,
            200,
            "{u}"
        );
    }
    let cleanup = s.url(&format!("/{db}/_nouveau_cleanup"));
    let h = [("Content-Type", "application/json")];
    assert_eq!(
        call(
            &agent,
            "POST",
            &cleanup,
            Some(("search_member", "pw-m")),
            &h,
            Some(b"{}")
        )
        .status,
        401,
        "cleanup is for the database's admins"
    );
}

#[test]
fn a_partitioned_index_is_searched_by_partition() {
    let s = shared();
    let db = "search_part";
    assert_eq!(
        s.admin("PUT", &format!("/{db}?partitioned=true"), None)
            .status,
        201
    );
    bulk(
        s,
        db,
        (0..12)
            .map(|i| json!({"_id": format!("p{}:d{i:02}", i % 3), "t": "word", "n": i}))
            .collect(),
    );
    let ddoc = json!({"nouveau": {"i": {"index": "function(doc){ index('text', 't', doc.t); index('double', 'n', doc.n); }"}}});
    assert_eq!(put(s, &format!("/{db}/_design/d"), &ddoc).status, 201);
    let v = get(
        s,
        &format!("/{db}/_partition/p1/_design/d/_nouveau/i?q=t:word&sort=%22n%22"),
    );
    assert_eq!(hit_ids(&v), ["p1:d01", "p1:d04", "p1:d07", "p1:d10"]);
    assert_eq!(v["total_hits"], 4);
    let v = post(
        s,
        &format!("/{db}/_partition/p2/_design/d/_nouveau/i"),
        &json!({"q": "n:[0 TO 5]", "sort": "n"}),
    );
    assert_eq!(hit_ids(&v), ["p2:d02", "p2:d05"]);
    let v = get(s, &format!("/{db}/_design/d/_nouveau/i?q=t:word"));
    assert_eq!(v["total_hits"], 12, "a global query sees every partition");
    // A partition of an index that is not partitioned.
    couch_corpus(s, "search_part_not");
    let r = s.admin(
        "GET",
        "/search_part_not/_design/foo/_nouveau/bar?q=*:*&partition=p1",
        None,
    );
    assert_eq!(error(&r).0, 400, "{r:?}");
}
