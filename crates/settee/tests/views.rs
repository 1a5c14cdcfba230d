//! Views end to end, through the real server: map and reduce queries with
//! their options, incremental updates (edits, deletions, purges, design
//! document changes), staleness, errors, `_info`, `_view_cleanup`,
//! persistence across a restart, and a kill -9 in the middle of a build.

mod common;

use std::time::Duration;

use common::{shared, Resp, Server};
use serde_json::{json, Value};

fn put(s: &Server, path: &str, body: &Value) -> Resp {
    s.admin("PUT", path, Some(&body.to_string()))
}

fn get(s: &Server, path: &str) -> Value {
    let r = s.admin("GET", path, None);
    assert_eq!(r.status, 200, "GET {path}: {r:?}");
    r.json()
}

fn bulk(s: &Server, db: &str, docs: Vec<Value>) -> Vec<Value> {
    let r = s.admin(
        "POST",
        &format!("/{db}/_bulk_docs"),
        Some(&json!({ "docs": docs }).to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    r.json().as_array().expect("results").clone()
}

/// A database with documents `k0..k{n}` (`n` its number, `t` one of a, b,
/// c) and the design document `_design/d`.
fn setup(s: &Server, db: &str, n: usize) {
    s.create_db(db);
    let docs: Vec<Value> = (0..n)
        .map(|i| {
            let t = ["a", "b", "c"][i % 3];
            json!({"_id": format!("k{i:04}"), "n": i, "t": t})
        })
        .collect();
    bulk(s, db, docs);
    let ddoc = json!({"views": {
        "by_n": {"map": "function(doc){ if (typeof doc.n == 'number') emit(doc.n, doc.t); }"},
        "by_t": {"map": "function(doc){ if (doc.t) emit([doc.t, doc.n], doc.n); }", "reduce": "_sum"},
        "count": {"map": "function(doc){ if (doc.t) emit(doc.t, null); }", "reduce": "_count"},
        "stats": {"map": "function(doc){ if (doc.t) emit(doc.t, doc.n); }", "reduce": "_stats"},
        "js": {"map": "function(doc){ if (doc.t) emit(doc.t, doc.n); }",
               "reduce": "function(keys, values, rereduce){ return sum(values); }"}
    }});
    assert_eq!(put(s, &format!("/{db}/_design/d"), &ddoc).status, 201);
}

fn ids(v: &Value) -> Vec<String> {
    common::strings_of(v, "rows", "id")
}

fn keys(v: &Value) -> Vec<Value> {
    v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["key"].clone())
        .collect()
}

#[test]
fn map_queries_answer_every_range_option() {
    let s = shared();
    setup(s, "v_map", 30);
    let v = get(s, "/v_map/_design/d/_view/by_n");
    assert_eq!(v["total_rows"], 30);
    assert_eq!(v["offset"], 0);
    assert_eq!(keys(&v), (0..30).map(|i| json!(i)).collect::<Vec<_>>());
    assert_eq!(v["rows"][4], json!({"id": "k0004", "key": 4, "value": "b"}));

    let v = get(
        s,
        "/v_map/_design/d/_view/by_n?startkey=10&endkey=14&inclusive_end=false",
    );
    assert_eq!(keys(&v), [json!(10), json!(11), json!(12), json!(13)]);
    assert_eq!(v["offset"], 10);
    let v = get(
        s,
        "/v_map/_design/d/_view/by_n?descending=true&startkey=5&limit=3&skip=1",
    );
    assert_eq!(keys(&v), [json!(4), json!(3), json!(2)]);
    assert_eq!(v["offset"], 24 + 1);
    let v = get(s, "/v_map/_design/d/_view/by_n?key=7");
    assert_eq!(ids(&v), ["k0007"]);
    let v = get(s, "/v_map/_design/d/_view/by_n?keys=[9,2,9,99]");
    assert_eq!(ids(&v), ["k0009", "k0002", "k0009"]);
    let r = s.admin(
        "POST",
        "/v_map/_design/d/_view/by_n?limit=1",
        Some(r#"{"keys":[3,1]}"#),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(ids(&r.json()), ["k0003"]);
    // Array keys, collated; reduce=false on a reduce view.
    let v = get(
        s,
        "/v_map/_design/d/_view/by_t?reduce=false&startkey=[\"b\"]&endkey=[\"b\",{}]&limit=2",
    );
    assert_eq!(keys(&v), [json!(["b", 1]), json!(["b", 4])]);
    let v = get(
        s,
        "/v_map/_design/d/_view/by_n?key=3&include_docs=true&update_seq=true",
    );
    assert_eq!(v["rows"][0]["doc"]["_id"], "k0003");
    assert_eq!(v["rows"][0]["doc"]["n"], 3);
    assert_eq!(v["update_seq"], "31", "{v}");
    // /queries
    let r = s.admin(
        "POST",
        "/v_map/_design/d/_view/by_n/queries",
        Some(r#"{"queries":[{"key":1},{"startkey":28}]}"#),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let res = r.json();
    assert_eq!(ids(&res["results"][0]), ["k0001"]);
    assert_eq!(ids(&res["results"][1]), ["k0028", "k0029"]);
}

#[test]
fn reduce_queries_group_and_rereduce() {
    let s = shared();
    // More rows than one reduce chunk, so rereduce runs.
    let n = 2500usize;
    setup(s, "v_red", n);
    let total: u64 = (0..n as u64).sum();
    let v = get(s, "/v_red/_design/d/_view/by_t");
    assert_eq!(v["rows"], json!([{"key": null, "value": total}]));
    let per = |t: usize| -> u64 { (0..n as u64).filter(|i| *i as usize % 3 == t).sum() };
    let v = get(s, "/v_red/_design/d/_view/by_t?group_level=1");
    assert_eq!(
        v["rows"],
        json!([{"key": ["a"], "value": per(0)}, {"key": ["b"], "value": per(1)}, {"key": ["c"], "value": per(2)}])
    );
    let v = get(s, "/v_red/_design/d/_view/js?group=true&startkey=\"b\"");
    assert_eq!(
        v["rows"],
        json!([{"key": "b", "value": per(1)}, {"key": "c", "value": per(2)}])
    );
    let v = get(
        s,
        "/v_red/_design/d/_view/count?group=true&descending=true&limit=1",
    );
    assert_eq!(v["rows"], json!([{"key": "c", "value": n / 3}]));
    let v = get(s, "/v_red/_design/d/_view/stats?key=\"a\"");
    let count = n.div_ceil(3) as u64;
    assert_eq!(v["rows"][0]["value"]["count"], count);
    assert_eq!(v["rows"][0]["value"]["sum"], per(0));
    assert_eq!(v["rows"][0]["value"]["min"], 0);
    let v = get(
        s,
        "/v_red/_design/d/_view/count?keys=[\"c\",\"a\"]&group=true",
    );
    assert_eq!(
        v["rows"],
        json!([{"key": "c", "value": n / 3}, {"key": "a", "value": count}])
    );
    // An empty range reduces to no rows.
    let v = get(s, "/v_red/_design/d/_view/by_t?startkey=[\"z\"]");
    assert_eq!(v["rows"], json!([]));
}

#[test]
fn indexes_follow_edits_deletions_purges_and_design_changes() {
    let s = shared();
    setup(s, "v_inc", 10);
    assert_eq!(get(s, "/v_inc/_design/d/_view/by_n")["total_rows"], 10);
    let doc = get(s, "/v_inc/k0003");
    // Move k0003's key, delete k0004, purge k0005.
    let mut moved = doc.clone();
    moved["n"] = json!(100);
    assert_eq!(put(s, "/v_inc/k0003", &moved).status, 201);
    let d4 = get(s, "/v_inc/k0004");
    let r = s.admin(
        "DELETE",
        &format!("/v_inc/k0004?rev={}", d4["_rev"].as_str().unwrap()),
        None,
    );
    assert_eq!(r.status, 200);
    let d5 = get(s, "/v_inc/k0005");
    let r = s.admin(
        "POST",
        "/v_inc/_purge",
        Some(&json!({"k0005": [d5["_rev"]]}).to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let v = get(s, "/v_inc/_design/d/_view/by_n");
    assert_eq!(v["total_rows"], 8);
    assert_eq!(
        keys(&v),
        [0, 1, 2, 6, 7, 8, 9, 100]
            .iter()
            .map(|i| json!(i))
            .collect::<Vec<_>>()
    );
    // update=false answers from the index as it is; the next query updates.
    bulk(s, "v_inc", vec![json!({"_id": "new", "n": 50})]);
    let stale = get(s, "/v_inc/_design/d/_view/by_n?update=false");
    assert_eq!(stale["total_rows"], 8);
    let stale = get(s, "/v_inc/_design/d/_view/by_n?stale=ok");
    assert_eq!(stale["total_rows"], 8);
    assert_eq!(get(s, "/v_inc/_design/d/_view/by_n")["total_rows"], 9);
    // A changed design document is a new index.
    let ddoc = get(s, "/v_inc/_design/d");
    let mut changed = ddoc.clone();
    changed["views"]["by_n"]["map"] = json!("function(doc){ if (doc.n > 5) emit(doc.n, null); }");
    assert_eq!(put(s, "/v_inc/_design/d", &changed).status, 201);
    let v = get(s, "/v_inc/_design/d/_view/by_n");
    assert_eq!(
        keys(&v),
        [
            json!(6),
            json!(7),
            json!(8),
            json!(9),
            json!(50),
            json!(100)
        ]
    );
    // _view_cleanup drops the old index: the old design document, back
    // again, starts from nothing (update=false shows no rows).
    let r = s.admin("POST", "/v_inc/_view_cleanup", Some("{}"));
    assert_eq!(r.status, 202, "{r:?}");
    let now = get(s, "/v_inc/_design/d");
    let mut old = ddoc;
    old["_rev"] = now["_rev"].clone();
    assert_eq!(put(s, "/v_inc/_design/d", &old).status, 201);
    let v = get(s, "/v_inc/_design/d/_view/by_n?update=false");
    assert_eq!(v["total_rows"], 0, "{v}");
    assert_eq!(get(s, "/v_inc/_design/d/_view/by_n")["total_rows"], 9);
}

#[test]
fn view_errors_are_couchdbs() {
    let s = shared();
    setup(s, "v_err", 3);
    let err = |path: &str, status: u16, error: &str| {
        let r = s.admin("GET", path, None);
        assert_eq!(r.status, status, "{path}: {r:?}");
        assert_eq!(r.error(), error, "{path}: {r:?}");
        r.json()["reason"].as_str().unwrap_or_default().to_string()
    };
    assert_eq!(
        err("/v_err/_design/nope/_view/v", 404, "not_found"),
        "missing"
    );
    assert_eq!(
        err("/v_err/_design/d/_view/nope", 404, "not_found"),
        "missing_named_view"
    );
    err(
        "/v_err/_design/d/_view/by_n?limit=-1",
        400,
        "query_parse_error",
    );
    err(
        "/v_err/_design/d/_view/by_n?group=true",
        400,
        "query_parse_error",
    );
    err(
        "/v_err/_design/d/_view/by_t?include_docs=true",
        400,
        "query_parse_error",
    );
    err("/v_err/_design/d/_view/by_n?key=[", 400, "bad_request");
    err(
        "/v_err/_design/d/_view/by_n?update=maybe",
        400,
        "query_parse_error",
    );
    err(
        "/v_err/_design/d/_view/count?keys=[\"a\",\"b\"]",
        400,
        "query_parse_error",
    );
    err("/nodb/_design/d/_view/by_n", 404, "not_found");
    let r = s.admin("PUT", "/v_err/_design/d/_view/by_n", Some("{}"));
    assert_eq!(r.status, 405);
    // A deleted design document.
    let d = get(s, "/v_err/_design/d");
    let r = s.admin(
        "DELETE",
        &format!("/v_err/_design/d?rev={}", d["_rev"].as_str().unwrap()),
        None,
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        err("/v_err/_design/d/_view/by_n", 404, "not_found"),
        "deleted"
    );
}

#[test]
fn map_functions_get_couchdbs_environment() {
    let s = shared();
    s.create_db("v_env");
    bulk(
        s,
        "v_env",
        vec![
            json!({"_id": "a", "x": 1}),
            json!({"_id": "b"}),
            json!({"_id": "c", "x": 3, "link": "a"}),
        ],
    );
    let ddoc = json!({
        "options": {"include_design": true},
        "views": {
            "lib": {"util": "exports.twice = function(n){ return 2 * n; };"},
            "twice": {"map": "function(doc){ var u = require('views/lib/util'); emit(u.twice(doc.x.valueOf()), null); }"},
            "linked": {"map": "function(doc){ if (doc.link) emit(doc._id, {_id: doc.link}); }"},
            "all": {"map": "function(doc){ emit(doc._id, null); }"}
    }});
    assert_eq!(put(s, "/v_env/_design/e", &ddoc).status, 201);
    // "b" throws (doc.x is undefined): it has no rows, the others do.
    let v = get(s, "/v_env/_design/e/_view/twice");
    assert_eq!(keys(&v), [json!(2), json!(6)]);
    let v = get(s, "/v_env/_design/e/_view/linked?include_docs=true");
    assert_eq!(v["rows"][0]["doc"]["_id"], "a");
    // include_design: the design document is a row too.
    let v = get(s, "/v_env/_design/e/_view/all");
    assert_eq!(ids(&v), ["_design/e", "a", "b", "c"]);
    let info = get(s, "/v_env/_design/e/_info");
    assert_eq!(info["name"], "e");
    assert_eq!(info["view_index"]["language"], "javascript");
    assert_eq!(
        info["view_index"]["signature"].as_str().map(str::len),
        Some(32)
    );
}

#[test]
fn an_index_survives_a_restart_and_a_kill_during_its_build() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("data");
    let s = Server::start_in(&dir, &[]);
    let n = 40_000usize;
    s.create_db("big");
    for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
        let docs: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"_id": format!("d{i:06}"), "n": i}))
            .collect();
        bulk(&s, "big", docs);
    }
    let ddoc = json!({"views": {"v": {"map": "function(doc){ emit(doc.n % 100, doc.n); }", "reduce": "_count"}}});
    assert_eq!(put(&s, "/big/_design/d", &ddoc).status, 201);
    // Start the build, then kill the server while it runs.
    let port = s.port;
    let builder = std::thread::spawn(move || {
        let _ = common::agent()
            .get(&format!("http://127.0.0.1:{port}/big/_design/d/_view/v"))
            .set("Authorization", &basic())
            .call();
    });
    std::thread::sleep(Duration::from_millis(300));
    s.kill9();
    let _ = builder.join();
    let s = Server::start_in(&dir, &[]);
    // Whatever the build had written is consistent: the update finishes it.
    let v = get(&s, "/big/_design/d/_view/v");
    assert_eq!(v["rows"], json!([{"key": null, "value": n}]));
    let v = get(&s, "/big/_design/d/_view/v?reduce=false&key=7&limit=3");
    assert_eq!(v["total_rows"], n);
    assert_eq!(ids(&v), ["d000007", "d000107", "d000207"]);
    // A clean restart keeps the index: update=false answers in full.
    s.stop();
    let s = Server::start_in(&dir, &[]);
    let v = get(&s, "/big/_design/d/_view/v?update=false&group=true&limit=2");
    assert_eq!(
        v["rows"],
        json!([{"key": 0, "value": n / 100}, {"key": 1, "value": n / 100}])
    );
    s.stop();
}

fn basic() -> String {
    format!(
        "Basic {}",
        common::base64_lite::encode(format!("{}:{}", common::ADMIN.0, common::ADMIN.1).as_bytes())
    )
}

#[test]
fn indexes_in_use_catch_up_in_the_background() {
    let s = shared();
    setup(s, "v_auto", 5);
    assert_eq!(get(s, "/v_auto/_design/d/_view/by_n")["total_rows"], 5);
    bulk(s, "v_auto", vec![json!({"_id": "late", "n": 99})]);
    // No query asks for an update: the background updater brings the
    // index up to date within a few seconds.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let v = get(s, "/v_auto/_design/d/_view/by_n?update=false");
        if v["total_rows"] == 6 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not updated: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `offset` with a start key, asked once (block records scanned) and again
/// at the same index state (the cached block table), then after edits that
/// move rows between blocks: always the number of rows before the key.
#[test]
fn offsets_are_exact_from_the_block_table_and_after_edits() {
    let s = shared();
    let db = "v_offsets";
    setup(s, db, 1500);
    let expect = |n: &[u64], start: u64, descending: bool| -> u64 {
        if descending {
            n.iter().filter(|&&x| x > start).count() as u64
        } else {
            n.iter().filter(|&&x| x < start).count() as u64
        }
    };
    let check = |n: &[u64]| {
        for start in [0u64, 1, 127, 128, 129, 700, 1499, 1500, 2000] {
            for descending in [false, true] {
                for _ in 0..3 {
                    let v = get(
                        s,
                        &format!(
                            "/{db}/_design/d/_view/by_n?startkey={start}&limit=2&descending={descending}"
                        ),
                    );
                    assert_eq!(
                        v["offset"].as_u64(),
                        Some(expect(n, start, descending)),
                        "start {start} descending {descending}: {v}"
                    );
                    assert_eq!(v["total_rows"].as_u64(), Some(n.len() as u64));
                }
            }
        }
    };
    let mut n: Vec<u64> = (0..1500).collect();
    check(&n);
    // Move 300 documents' rows to the end (blocks grow past their cut)
    // and delete 100.
    let all = get(s, &format!("/{db}/_all_docs?startkey=%22k%22&limit=400"));
    let rows = all["rows"].as_array().expect("rows");
    let mut docs = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let id = r["id"].as_str().expect("id");
        let rev = r["value"]["rev"].clone();
        let num: u64 = id[1..].parse().expect("number");
        if i < 300 {
            docs.push(json!({"_id": id, "_rev": rev, "n": 5000 + num, "t": "a"}));
            n[usize::try_from(num).expect("index")] = 5000 + num;
        } else {
            docs.push(json!({"_id": id, "_rev": rev, "_deleted": true}));
            n[usize::try_from(num).expect("index")] = u64::MAX;
        }
    }
    bulk(s, db, docs);
    n.retain(|&x| x != u64::MAX);
    check(&n);
}

/// A query whose answer is larger than one streamed chunk, asked of an
/// index that is current (answered on the connection's thread until the
/// chunk fills, then again on the blocking pool): every row, once.
#[test]
fn large_answers_of_current_indexes_are_whole() {
    let s = shared();
    let db = "v_large";
    setup(s, db, 3000);
    let first = get(s, &format!("/{db}/_design/d/_view/by_n?limit=1"));
    assert_eq!(first["total_rows"], 3000);
    for path in [
        format!("/{db}/_design/d/_view/by_n"),
        format!("/{db}/_design/d/_view/by_n?include_docs=true"),
        format!("/{db}/_all_docs?include_docs=true"),
    ] {
        let v = get(s, &path);
        let ids = ids(&v);
        assert_eq!(
            ids.len(),
            if path.contains("_all_docs") {
                3001
            } else {
                3000
            },
            "{path}"
        );
        let mut sorted = ids.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "{path}: duplicated rows");
    }
}

/// `_info` reports the index's stored size; `_compact/{ddoc}` compacts it
/// in the background and the index answers as before.
#[test]
fn view_info_sizes_and_compaction() {
    let s = shared();
    let db = "v_compact";
    setup(s, db, 2000);
    let before = get(s, &format!("/{db}/_design/d/_view/by_n?limit=3&skip=100"));
    let r = s.admin("POST", &format!("/{db}/_compact/d"), Some("{}"));
    assert_eq!(r.status, 202, "{r:?}");
    let mut done = false;
    for _ in 0..100 {
        let info = get(s, &format!("/{db}/_design/d/_info"));
        if info["view_index"]["compact_running"] == false {
            done = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(done, "compaction still running after 5 s");
    // Compaction moved the index into files, where sizes are counted.
    let info = get(s, &format!("/{db}/_design/d/_info"));
    let size = info["view_index"]["sizes"]["active"]
        .as_u64()
        .expect("size");
    assert!(size > 0, "{info}");
    assert_eq!(info["view_index"]["sizes"]["file"].as_u64(), Some(size));
    assert_eq!(
        get(s, &format!("/{db}/_design/d/_view/by_n?limit=3&skip=100")),
        before
    );
    let r = s.admin("POST", &format!("/{db}/_compact/nope"), Some("{}"));
    assert_eq!(r.status, 404);
}
