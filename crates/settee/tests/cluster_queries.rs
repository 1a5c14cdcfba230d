//! Queries on a clustered database answered as one node answers them: a
//! differential test. The same generated documents and design documents
//! go into a single Settee node and into a database of q=4 shards, n=2
//! copies on three real members (real etcd, loopback); then a generated
//! set of view queries (every view × key ranges, `keys`, `descending`,
//! `skip`/`limit`, `inclusive_end`, `include_docs` with linked documents,
//! `group`/`group_level`, built-in and JavaScript reduces, raw collation,
//! GET and POST) is asked of both, through every member in turn, and the
//! answers must be equal. Also: a design document is one document of the
//! database (listed once, counted once, one `_changes` row) though every
//! shard keeps it, and an edit of it takes effect at once everywhere.
//!
//! Every wait is bounded; all traffic is to 127.0.0.1.

mod cluster_support;
mod common;
#[path = "../../settee-cluster/tests/common/mod.rs"]
mod etcd_common;

use cluster_support::node;
use common::Server;
use etcd_common::EtcdServer;
use serde_json::{json, Value};

/// A small deterministic generator (no seed from the clock: a failure
/// repeats).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A key of a mixed type, as views meet them.
fn key(g: &mut Gen) -> Value {
    match g.below(8) {
        0 => Value::Null,
        1 => json!(g.below(2) == 1),
        2 | 3 => json!(g.below(20) as i64 - 5),
        4 => json!((g.below(100) as f64) / 8.0),
        5 | 6 => json!(["a", "B", "b", "é", "c", "ab"][g.below(6) as usize]),
        _ => {
            let second = ["x", "y"][g.below(2) as usize];
            json!([g.below(3), second])
        }
    }
}

fn docs(n: usize) -> Vec<Value> {
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|i| {
            let tag = ["red", "green", "blue"][g.below(3) as usize];
            json!({
                "_id": format!("d{:03}", g.below(1000) * 1000 + i as u64),
                "k": key(&mut g),
                "n": g.below(50),
                "tag": tag,
                "when": [2020 + g.below(3), g.below(12) + 1, g.below(28) + 1],
                "link": format!("d{:03}", g.below(1000) * 1000 + g.below(n as u64)),
            })
        })
        .collect()
}

fn design() -> Value {
    json!({
        "_id": "_design/q",
        "views": {
            "by_k": {"map": "function(d){ if ('k' in d) emit(d.k, d.n); }"},
            "sum": {"map": "function(d){ emit(d.tag, d.n); }", "reduce": "_sum"},
            "count": {"map": "function(d){ emit(d.when, 1); }", "reduce": "_count"},
            "stats": {"map": "function(d){ emit(d.tag, d.n); }", "reduce": "_stats"},
            "js": {
                "map": "function(d){ emit(d.when, d.n); }",
                "reduce": "function(k, v, re){ return sum(v); }"
            },
            "raw": {
                "map": "function(d){ emit(d.k, null); }",
                "options": {"collation": "raw"}
            },
            "linked": {"map": "function(d){ emit(d.n, {_id: d.link}); }"}
        },
        "shows": {
            "s": "function(doc, req){ return {body: doc ? doc._id + ':' + doc.n : 'none'}; }"
        }
    })
}

/// The queries asked of every view (query strings; values are JSON).
fn queries() -> Vec<(String, Vec<(String, String)>)> {
    let mut out = Vec::new();
    let map_opts: Vec<Vec<(&str, &str)>> = vec![
        vec![],
        vec![("descending", "true")],
        vec![("limit", "7")],
        vec![("skip", "5"), ("limit", "10")],
        vec![("descending", "true"), ("skip", "3"), ("limit", "4")],
        vec![("startkey", "2"), ("endkey", "\"b\"")],
        vec![
            ("startkey", "\"b\""),
            ("endkey", "2"),
            ("descending", "true"),
        ],
        vec![
            ("startkey", "0"),
            ("endkey", "7"),
            ("inclusive_end", "false"),
        ],
        vec![("key", "3")],
        vec![("keys", "[3,\"a\",null,3,[1,\"x\"],42]")],
        vec![("keys", "[\"b\",1.5,true]"), ("descending", "true")],
        vec![("include_docs", "true"), ("limit", "12")],
        vec![
            ("startkey", "[1]"),
            ("startkey_docid", "d5"),
            ("limit", "9"),
        ],
    ];
    for view in ["by_k", "raw", "linked"] {
        for o in &map_opts {
            out.push((view.to_string(), own(o)));
        }
    }
    out.push((
        "linked".into(),
        own(&[
            ("include_docs", "true"),
            ("startkey", "10"),
            ("limit", "30"),
        ]),
    ));
    let reduce_opts: Vec<Vec<(&str, &str)>> = vec![
        vec![],
        vec![("group", "true")],
        vec![("group", "true"), ("descending", "true")],
        vec![("group", "true"), ("skip", "1"), ("limit", "2")],
        vec![("group_level", "1")],
        vec![("group_level", "2"), ("limit", "5")],
        vec![("group", "true"), ("keys", "[\"red\",\"blue\",\"none\"]")],
        vec![("reduce", "false"), ("limit", "10")],
        vec![("startkey", "\"green\""), ("endkey", "\"red\"")],
        vec![("skip", "1")],
        vec![("limit", "0")],
    ];
    for view in ["sum", "count", "stats", "js"] {
        for o in &reduce_opts {
            out.push((view.to_string(), own(o)));
        }
    }
    out
}

fn own(o: &[(&str, &str)]) -> Vec<(String, String)> {
    o.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn path(view: &str, q: &[(String, String)]) -> String {
    let qs: Vec<String> = q.iter().map(|(k, v)| format!("{k}={}", pct(v))).collect();
    format!("/db/_design/q/_view/{view}?{}", qs.join("&"))
}

/// `v` percent-encoded for a query string.
fn pct(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The answer with what legitimately differs between one node and a
/// cluster taken out (sequences).
fn facts(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("update_seq");
    }
    v
}

#[test]
fn view_queries_answer_as_one_node_does() {
    let etcd = EtcdServer::start();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("tmp")).collect();
    let names = ["v0@127.0.0.1", "v1@127.0.0.1", "v2@127.0.0.1"];
    let members: Vec<Server> = (0..3)
        .map(|i| node(dirs[i].path(), &etcd, names[i]))
        .collect();
    let single = Server::start();

    let r = members[0].admin("PUT", "/db?q=4&n=2", None);
    assert_eq!(r.status, 201, "{r:?}");
    single.create_db("db");
    let body = json!({"docs": docs(240)}).to_string();
    for s in [&members[1], &single] {
        let r = s.admin("POST", "/db/_bulk_docs", Some(&body));
        assert!(r.status == 201, "{r:?}");
    }
    for s in [&members[2], &single] {
        let r = s.admin("PUT", "/db/_design/q", Some(&design().to_string()));
        assert_eq!(r.status, 201, "{r:?}");
    }

    // One document: listed, counted and changed once.
    let one = |s: &Server, p: &str| facts(s.admin("GET", p, None).json());
    for p in ["/db/_all_docs?limit=5&startkey=\"_\"", "/db/_design_docs"] {
        assert_eq!(one(&members[0], p), one(&single, p), "{p}");
    }
    let info = members[1].admin("GET", "/db", None).json();
    let info1 = single.admin("GET", "/db", None).json();
    assert_eq!(info["doc_count"], info1["doc_count"], "{info} vs {info1}");
    // Each shard copy says how many of its design documents live elsewhere
    // (the coordinator's sums leave those out without asking again): one
    // design document, q=4 shards, so three copies away from home.
    let secret = cluster_support::secret(&etcd);
    let suffix = cluster_support::suffix(&members[0], "db");
    let mut foreign = 0;
    for (range, nodes) in cluster_support::copies(&members[0], "db") {
        let at = names.iter().position(|n| *n == nodes[0]).expect("a member");
        let shard = format!("shards/{range}/db{suffix}").replace('/', "%2F");
        let r = members[at].raw(
            "GET",
            &format!("/{shard}/_all_docs?limit=0"),
            false,
            &[("X-Settee-Cluster-Secret", &secret)],
            None,
        );
        assert_eq!(r.status, 200, "{r:?}");
        foreign += r
            .header("x-settee-foreign-designs")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no count: {r:?}"));
    }
    assert_eq!(foreign, 3);
    let ch = members[2]
        .admin("GET", "/db/_changes?filter=_design", None)
        .json();
    assert_eq!(ch["results"].as_array().map(Vec::len), Some(1), "{ch}");

    let (mut asked, mut with_rows) = (0, 0);
    for (i, (view, q)) in queries().into_iter().enumerate() {
        let member = &members[i % 3];
        let p = path(&view, &q);
        let want = single.admin("GET", &p, None);
        let got = member.admin("GET", &p, None);
        assert_eq!(
            got.status, want.status,
            "GET {p}: {} vs {}",
            got.body, want.body
        );
        assert_eq!(facts(got.json()), facts(want.json()), "GET {p} through {i}");
        if got.status == 200 && got.json()["rows"].as_array().is_some_and(|r| !r.is_empty()) {
            with_rows += 1;
        }
        // The same query as a POST body.
        let body: serde_json::Map<String, Value> = q
            .iter()
            .map(|(k, v)| {
                // Document ids are plain text in a query string.
                let v = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.clone()));
                (k.clone(), v)
            })
            .collect();
        let body = Value::Object(body).to_string();
        let pp = format!("/db/_design/q/_view/{view}");
        let want = single.admin("POST", &pp, Some(&body));
        let got = members[(i + 1) % 3].admin("POST", &pp, Some(&body));
        assert_eq!(got.status, want.status, "POST {pp} {body}: {}", got.body);
        assert_eq!(facts(got.json()), facts(want.json()), "POST {pp} {body}");
        asked += 2;
    }
    assert!(asked > 100, "{asked} queries");
    // Most queries find rows (the comparison is of answers, not of errors).
    assert!(
        with_rows * 10 >= asked / 2 * 8,
        "{with_rows} of {} with rows",
        asked / 2
    );

    // A refusal is a single node's.
    for p in [
        "/db/_design/q/_view/nope",
        "/db/_design/nope/_view/x",
        "/db/_design/q/_view/by_k?group=true",
        "/db/_design/q/_view/sum?keys=[1]",
    ] {
        let (got, want) = (
            members[0].admin("GET", p, None),
            single.admin("GET", p, None),
        );
        assert_eq!((got.status, got.json()), (want.status, want.json()), "{p}");
    }

    // An edit of the design document is in force at once, on every shard.
    let mut d = one(&members[0], "/db/_design/q");
    d["views"]["by_k"]["map"] = json!("function(d){ emit(d.n, 1); }");
    let r = members[1].admin("PUT", "/db/_design/q", Some(&d.to_string()));
    assert_eq!(r.status, 201, "{r:?}");
    let r = single.admin("PUT", "/db/_design/q", Some(&d.to_string()));
    assert_eq!(r.status, 201, "{r:?}");
    for m in &members {
        let p = "/db/_design/q/_view/by_k?limit=20&skip=3";
        assert_eq!(one(m, p), one(&single, p), "{p} after the edit");
    }
    let info = members[2].admin("GET", "/db", None).json();
    assert_eq!(info["doc_count"], json!(241), "{info}");

    design_endpoints_answer_as_one_node_does(&members, &single);
    mango_answers_as_one_node_does(&members, &single);
    // Last: it writes to the clustered database only.
    live_changes_stream_from_every_shard(&members);
}

/// `_info`, `_show`, `_view_cleanup`, `_compact/{ddoc}`.
fn design_endpoints_answer_as_one_node_does(members: &[Server], single: &Server) {
    let a = members[0].admin("GET", "/db/_design/q/_info", None).json();
    let b = single.admin("GET", "/db/_design/q/_info", None).json();
    assert_eq!(a["name"], b["name"], "{a}");
    assert_eq!(
        a["view_index"]["signature"], b["view_index"]["signature"],
        "{a}"
    );
    assert!(a["view_index"]["sizes"]["file"].is_u64(), "{a}");
    assert!(a["view_index"]["update_seq"].is_string(), "{a}");
    let ids: Vec<String> = single.admin("GET", "/db/_all_docs?limit=30", None).json()["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_string())
        .collect();
    for (i, id) in ids.iter().chain([&"missing".to_string()]).enumerate() {
        let p = format!("/db/_design/q/_show/s/{id}");
        let (a, b) = (
            members[i % 3].admin("GET", &p, None),
            single.admin("GET", &p, None),
        );
        assert_eq!((a.status, &a.body), (b.status, &b.body), "{p}");
    }
    let p = "/db/_design/q/_show/s";
    let (a, b) = (
        members[1].admin("GET", p, None),
        single.admin("GET", p, None),
    );
    assert_eq!((a.status, &a.body), (b.status, &b.body), "{p}");
    for p in ["/db/_view_cleanup", "/db/_compact/q", "/db/_compact"] {
        let (a, b) = (
            members[2].admin("POST", p, Some("{}")),
            single.admin("POST", p, Some("{}")),
        );
        assert_eq!((a.status, a.json()), (b.status, b.json()), "{p}");
    }
}

/// `_find` queries: every selector × sort × limit/skip × fields, pages
/// followed by bookmarks on both sides, the same documents in the same
/// order on every page.
fn find_queries() -> Vec<Value> {
    let selectors = [
        json!({"n": {"$gt": 10}}),
        json!({"tag": "red"}),
        json!({"tag": {"$in": ["blue", "green"]}, "n": {"$lt": 30}}),
        json!({"$or": [{"tag": "red"}, {"n": {"$gte": 45}}]}),
        json!({"k": {"$type": "string"}}),
        json!({"_id": {"$gt": "d5"}}),
        json!({"when.0": 2021}),
    ];
    let shapes = [
        json!({}),
        json!({"sort": [{"n": "asc"}]}),
        json!({"sort": [{"n": "desc"}], "limit": 7}),
        json!({"limit": 9, "skip": 4}),
        json!({"fields": ["_id", "n", "when.1"], "limit": 11}),
        json!({"sort": [{"tag": "asc"}, {"n": "asc"}], "limit": 13, "fields": ["tag"]}),
        json!({"use_index": "_design/by_n", "limit": 10}),
        json!({"sort": [{"_id": "desc"}], "limit": 6}),
    ];
    let mut out = Vec::new();
    for sel in &selectors {
        for shape in &shapes {
            let mut q = shape.clone();
            q["selector"] = sel.clone();
            out.push(q);
        }
    }
    out
}

fn mango_answers_as_one_node_does(members: &[Server], single: &Server) {
    for def in [
        json!({"index": {"fields": ["n"]}, "ddoc": "by_n", "name": "n"}),
        json!({"index": {"fields": ["tag", "n"]}, "ddoc": "by_tag", "name": "tag_n"}),
    ] {
        let a = members[0].admin("POST", "/db/_index", Some(&def.to_string()));
        let b = single.admin("POST", "/db/_index", Some(&def.to_string()));
        assert_eq!((a.status, a.json()), (b.status, b.json()), "{def}");
    }
    let list = |s: &Server| s.admin("GET", "/db/_index", None).json();
    assert_eq!(list(&members[1]), list(single));
    let (mut pages, mut docs) = (0, 0);
    for (i, q) in find_queries().into_iter().enumerate() {
        let m = &members[i % 3];
        let (mut qa, mut qb) = (q.clone(), q.clone());
        // At most 40 pages each: every query's result is smaller.
        for page in 0..40 {
            let a = m.admin("POST", "/db/_find", Some(&qa.to_string()));
            let b = single.admin("POST", "/db/_find", Some(&qb.to_string()));
            assert_eq!(a.status, b.status, "{qa}: {} vs {}", a.body, b.body);
            let (ja, jb) = (a.json(), b.json());
            assert_eq!(ja["docs"], jb["docs"], "{q} page {page}");
            // The scan ratio's warning is the shards' examined documents'
            // (more than one node reads); the plan's warnings are equal.
            let plan_warnings = |v: &Value| -> Vec<String> {
                v["warning"]
                    .as_str()
                    .unwrap_or("")
                    .split('\n')
                    .filter(|l| !l.is_empty() && !l.starts_with("The number of documents examined"))
                    .map(str::to_string)
                    .collect()
            };
            assert_eq!(plan_warnings(&ja), plan_warnings(&jb), "{q} page {page}");
            pages += 1;
            let n = jb["docs"].as_array().map_or(0, Vec::len);
            docs += n;
            if n == 0 || a.status != 200 {
                break;
            }
            qa["bookmark"] = ja["bookmark"].clone();
            qb["bookmark"] = jb["bookmark"].clone();
        }
    }
    assert!(
        pages > 100 && docs > 1000,
        "{pages} pages, {docs} documents"
    );

    // execution_stats: what was returned is the same.
    let q = json!({"selector": {"n": {"$gt": 5}}, "execution_stats": true, "limit": 30});
    let a = members[2]
        .admin("POST", "/db/_find", Some(&q.to_string()))
        .json();
    let b = single
        .admin("POST", "/db/_find", Some(&q.to_string()))
        .json();
    assert_eq!(
        a["execution_stats"]["results_returned"], b["execution_stats"]["results_returned"],
        "{a} {b}"
    );
    // _explain names the index a single node would use, and the database.
    let e = json!({"selector": {"tag": "red"}, "sort": [{"tag": "asc"}]});
    let a = members[0]
        .admin("POST", "/db/_explain", Some(&e.to_string()))
        .json();
    let b = single
        .admin("POST", "/db/_explain", Some(&e.to_string()))
        .json();
    assert_eq!(
        (&a["index"], &a["dbname"]),
        (&b["index"], &b["dbname"]),
        "{a}"
    );
    // Refusals are a single node's.
    for bad in [
        json!({"selector": 1}),
        json!({"selector": {"n": 1}, "sort": [{"nope": "asc"}]}),
        json!({"selector": {"n": 1}, "bookmark": "garbage"}),
        json!({"selector": {"n": 1}, "limit": -1}),
    ] {
        let a = members[1].admin("POST", "/db/_find", Some(&bad.to_string()));
        let b = single.admin("POST", "/db/_find", Some(&bad.to_string()));
        assert_eq!((a.status, a.json()), (b.status, b.json()), "{bad}");
    }
    // An index deleted is gone from every shard.
    let p = "/db/_index/_design/by_tag/json/tag_n";
    let a = members[2].admin("DELETE", p, None);
    let b = single.admin("DELETE", p, None);
    assert_eq!((a.status, a.json()), (b.status, b.json()), "{p}");
    assert_eq!(list(&members[0]), list(single));
    let q = json!({"selector": {"tag": "red"}, "sort": [{"tag": "asc"}, {"n": "asc"}]});
    let a = members[1].admin("POST", "/db/_find", Some(&q.to_string()));
    let b = single.admin("POST", "/db/_find", Some(&q.to_string()));
    assert_eq!(
        (a.status, a.json()),
        (b.status, b.json()),
        "{q} after the index went"
    );
}

/// `feed=continuous` and `feed=eventsource` on the clustered database:
/// rows written during the feed through another member arrive, one line
/// each, with opaque sequences; heartbeats keep it open; `limit` and
/// `timeout` end it with the `last_seq` line.
fn live_changes_stream_from_every_shard(members: &[Server]) {
    let write_later = |m: &Server, ids: Vec<String>| {
        let url = m.url("/db/_bulk_docs");
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(400));
            let docs: Vec<Value> = ids
                .iter()
                .map(|id| json!({"_id": id, "live": true}))
                .collect();
            let r = common::call(
                &common::agent(),
                "POST",
                &url,
                Some(common::ADMIN),
                &[("Content-Type", "application/json")],
                Some(json!({"docs": docs}).to_string().as_bytes()),
            );
            assert_eq!(r.status, 201, "{r:?}");
        })
    };
    // Three rows, then the timeout's end.
    let ids: Vec<String> = (0..3).map(|i| format!("live-a{i}")).collect();
    let w = write_later(&members[1], ids.clone());
    let r = members[0].admin(
        "GET",
        "/db/_changes?feed=continuous&since=now&timeout=2500",
        None,
    );
    w.join().expect("writer");
    assert_eq!(r.status, 200, "{r:?}");
    let lines: Vec<Value> = r
        .body
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let got: Vec<&str> = lines.iter().filter_map(|l| l["id"].as_str()).collect();
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(sorted, ids, "{}", r.body);
    assert!(
        lines
            .iter()
            .all(|l| l.get("id").is_none() || l["seq"].is_string()),
        "{}",
        r.body
    );
    let end = lines.last().expect("last line");
    assert!(
        end["last_seq"].is_string() && end.get("id").is_none(),
        "{}",
        r.body
    );
    // The last sequence resumes after them: nothing more.
    let since = end["last_seq"].as_str().expect("seq");
    let after = members[2]
        .admin("GET", &format!("/db/_changes?since={since}"), None)
        .json();
    assert_eq!(after["results"], json!([]), "{after}");

    // Heartbeats while waiting; the limit ends the feed.
    let w = write_later(&members[2], vec!["live-b0".into(), "live-b1".into()]);
    let r = members[1].admin(
        "GET",
        "/db/_changes?feed=continuous&since=now&heartbeat=100&limit=1",
        None,
    );
    w.join().expect("writer");
    assert!(r.body.starts_with('\n'), "a heartbeat first: {:?}", r.body);
    let rows: Vec<&str> = r.body.lines().filter(|l| l.contains("live-b")).collect();
    assert_eq!(rows.len(), 1, "{:?}", r.body);
    assert!(
        r.body.trim_end().ends_with('}') && r.body.contains("last_seq"),
        "{:?}",
        r.body
    );

    // eventsource: data/id events.
    let w = write_later(&members[0], vec!["live-c0".into()]);
    let r = members[2].admin(
        "GET",
        "/db/_changes?feed=eventsource&since=now&timeout=1500",
        None,
    );
    w.join().expect("writer");
    assert_eq!(r.header("content-type"), Some("text/event-stream"), "{r:?}");
    assert!(
        r.body.contains("data: {") && r.body.contains("live-c0") && r.body.contains("\nid: "),
        "{:?}",
        r.body
    );
    // A bad heartbeat is a single node's 400.
    let r = members[0].admin("GET", "/db/_changes?feed=continuous&heartbeat=x", None);
    assert_eq!(r.status, 400, "{r:?}");
}
