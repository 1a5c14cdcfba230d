//! End-to-end tests of partitioned databases beyond the conformance
//! scenarios (which pin CouchDB's answers one request at a time): a
//! partitioned database keeps its kind across restarts; partition queries
//! of views (map and every built-in reduce, grouped), `_all_docs`, Mango
//! and the partition's info agree with the same answers computed from the
//! whole database, with partitions of many sizes whose rows share index
//! blocks, and stay right as documents change.

mod common;

use std::collections::BTreeMap;

use common::{Resp, Server};
use serde_json::{json, Value};

fn ok(r: Resp) -> Value {
    assert!(r.status < 300, "{r:?}");
    r.json()
}

/// Partitions `p0`…`p6` with 1, 10, 100, 400, 7, 1 and 600 documents
/// (`n` = position in the partition, `g` = n % 3): their rows share the
/// index's blocks of 128 rows, so partition boundaries fall inside blocks.
const SIZES: [usize; 7] = [1, 10, 100, 400, 7, 1, 600];

fn seed(s: &Server, db: &str) -> Vec<Value> {
    let r = s.admin("PUT", &format!("/{db}?partitioned=true"), None);
    assert_eq!(r.status, 201, "{r:?}");
    let mut docs = Vec::new();
    for (p, size) in SIZES.iter().enumerate() {
        for n in 0..*size {
            docs.push(json!({"_id": format!("p{p}:{n:04}"), "n": n, "g": n % 3}));
        }
    }
    for chunk in docs.chunks(500) {
        ok(s.admin(
            "POST",
            &format!("/{db}/_bulk_docs"),
            Some(&json!({ "docs": chunk }).to_string()),
        ));
    }
    let ddoc = json!({"views": {
        "n": {"map": "function(doc){ emit([doc.g, doc.n], doc.n); }", "reduce": "_stats"},
        "c": {"map": "function(doc){ emit(doc.g, 1); }", "reduce": "_count"},
        "js": {"map": "function(doc){ emit(doc.n, doc.n); }",
               "reduce": "function(k, v, re){ return sum(v); }"}
    }});
    ok(s.admin("PUT", &format!("/{db}/_design/d"), Some(&ddoc.to_string())));
    docs
}

/// `(id, n, g)` of the live documents of partition `p`, in id order.
fn expected(docs: &[Value], p: usize) -> Vec<(String, u64, u64)> {
    let prefix = format!("p{p}:");
    let mut out: Vec<_> = docs
        .iter()
        .filter(|d| d["_id"].as_str().unwrap().starts_with(&prefix))
        .map(|d| {
            (
                d["_id"].as_str().unwrap().to_string(),
                d["n"].as_u64().unwrap(),
                d["g"].as_u64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn check_partition(s: &Server, db: &str, docs: &[Value], p: usize) {
    let want = expected(docs, p);
    let base = format!("/{db}/_partition/p{p}");
    let info = ok(s.admin("GET", &base, None));
    assert_eq!(info["doc_count"], want.len(), "{info}");
    let all = ok(s.admin("GET", &format!("{base}/_all_docs"), None));
    assert_eq!(
        common::strings_of(&all, "rows", "id"),
        want.iter().map(|w| w.0.as_str()).collect::<Vec<_>>(),
        "p{p}"
    );
    // Map rows: every document once, in [g, n] order.
    let rows = ok(s.admin(
        "GET",
        &format!("{base}/_design/d/_view/n?reduce=false"),
        None,
    ));
    let mut keyed: Vec<(u64, u64)> = want.iter().map(|w| (w.2, w.1)).collect();
    keyed.sort();
    let got: Vec<(u64, u64)> = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["key"][0].as_u64().unwrap(), r["key"][1].as_u64().unwrap()))
        .collect();
    assert_eq!(got, keyed, "p{p}");
    // Reductions: whole partition, grouped by g, and a JavaScript reduce.
    let sum: u64 = want.iter().map(|w| w.1).sum();
    let stats = ok(s.admin("GET", &format!("{base}/_design/d/_view/n"), None));
    if want.is_empty() {
        assert_eq!(stats["rows"], json!([]));
    } else {
        assert_eq!(stats["rows"][0]["value"]["count"], want.len());
        assert_eq!(
            stats["rows"][0]["value"]["sum"].as_f64().unwrap() as u64,
            sum
        );
        let js = ok(s.admin("GET", &format!("{base}/_design/d/_view/js"), None));
        assert_eq!(js["rows"][0]["value"], sum, "p{p}");
    }
    let mut groups: BTreeMap<u64, u64> = BTreeMap::new();
    for w in &want {
        *groups.entry(w.2).or_default() += 1;
    }
    let grouped = ok(s.admin("GET", &format!("{base}/_design/d/_view/c?group=true"), None));
    let got: BTreeMap<u64, u64> = grouped["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["key"].as_u64().unwrap(), r["value"].as_u64().unwrap()))
        .collect();
    assert_eq!(got, groups, "p{p}");
    // Mango through the partitioned index: n >= 5, sorted.
    let found = ok(s.admin(
        "POST",
        &format!("{base}/_find"),
        Some(r#"{"selector":{"n":{"$gte":5}},"sort":["n"],"fields":["_id"],"limit":10000}"#),
    ));
    let mut want_found: Vec<(u64, &str)> = want
        .iter()
        .filter(|w| w.1 >= 5)
        .map(|w| (w.1, w.0.as_str()))
        .collect();
    want_found.sort();
    assert_eq!(
        common::strings_of(&found, "docs", "_id"),
        want_found.iter().map(|w| w.1).collect::<Vec<_>>(),
        "p{p}"
    );
}

#[test]
fn partition_queries_agree_with_the_whole_database() {
    let s = Server::start();
    let mut docs = seed(&s, "pq");
    ok(s.admin(
        "POST",
        "/pq/_index",
        Some(r#"{"index":{"fields":["n"]},"name":"n","ddoc":"m"}"#),
    ));
    for p in 0..SIZES.len() + 1 {
        check_partition(&s, "pq", &docs, p);
    }
    // Changes: delete every third document of p3, add documents to p7,
    // then every partition again (views and indexes updated incrementally).
    let mut deleted = Vec::new();
    for n in (0..400).step_by(3) {
        let id = format!("p3:{n:04}");
        let rev = ok(s.admin("GET", &format!("/pq/{id}"), None))["_rev"].clone();
        deleted.push(json!({"_id": id, "_rev": rev, "_deleted": true}));
    }
    ok(s.admin(
        "POST",
        "/pq/_bulk_docs",
        Some(&json!({ "docs": deleted }).to_string()),
    ));
    docs.retain(|d| {
        let id = d["_id"].as_str().unwrap();
        !(id.starts_with("p3:") && id[3..].parse::<u64>().unwrap() % 3 == 0)
    });
    let added: Vec<Value> = (0..50)
        .map(|n| json!({"_id": format!("p7:{n:04}"), "n": n, "g": n % 3}))
        .collect();
    ok(s.admin(
        "POST",
        "/pq/_bulk_docs",
        Some(&json!({ "docs": added }).to_string()),
    ));
    docs.extend(added);
    for p in 0..SIZES.len() + 2 {
        check_partition(&s, "pq", &docs, p);
    }
    let info = ok(s.admin("GET", "/pq/_partition/p3", None));
    assert_eq!(info["doc_del_count"], 134);
    // Every partition's rows add up to the view's total.
    let total = ok(s.admin(
        "GET",
        "/pq/_partition/p0/_design/d/_view/n?reduce=false&limit=0",
        None,
    ));
    assert_eq!(total["total_rows"], docs.len());
}

#[test]
fn a_partitioned_database_stays_partitioned_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_in(dir.path(), &[]);
    assert_eq!(s.admin("PUT", "/pr?partitioned=true", None).status, 201);
    assert_eq!(s.admin("PUT", "/plain", None).status, 201);
    ok(s.admin("PUT", "/pr/a:1", Some(r#"{"n":1}"#)));
    s.stop();
    let s = Server::start_in(dir.path(), &[]);
    assert_eq!(
        ok(s.admin("GET", "/pr", None))["props"],
        json!({"partitioned": true})
    );
    assert_eq!(ok(s.admin("GET", "/plain", None))["props"], json!({}));
    let r = s.admin("PUT", "/pr/nocolon", Some("{}"));
    assert_eq!((r.status, r.error()), (400, "illegal_docid".to_string()));
    assert_eq!(s.admin("PUT", "/plain/nocolon", Some("{}")).status, 201);
    assert_eq!(ok(s.admin("GET", "/pr/_partition/a", None))["doc_count"], 1);
    let r = s.admin("GET", "/plain/_partition/a", None);
    assert_eq!(r.status, 400);
    // Every write path refuses an id without a partition.
    let r = s.raw("COPY", "/pr/a:1", true, &[("Destination", "nocolon")], None);
    assert_eq!((r.status, r.error()), (400, "illegal_docid".to_string()));
    let r = s.raw(
        "PUT",
        "/pr/nocolon/att",
        true,
        &[("Content-Type", "text/plain")],
        Some(b"hello"),
    );
    assert_eq!((r.status, r.error()), (400, "illegal_docid".to_string()));
    let r = s.admin("POST", "/pr", Some(r#"{"n":2}"#));
    assert_eq!((r.status, r.error()), (400, "illegal_docid".to_string()));
    // A partition named by a query parameter is checked as one in a path.
    ok(s.admin(
        "PUT",
        "/pr/_design/d",
        Some(r#"{"views":{"v":{"map":"function(doc){ emit(doc.n, null); }"}}}"#),
    ));
    let r = s.admin("GET", "/pr/_design/d/_view/v?partition=_x", None);
    assert_eq!(
        (r.status, r.error()),
        (400, "illegal_partition".to_string())
    );
    let r = s.admin("GET", "/pr/_design/d/_view/v?partition=a", None);
    assert_eq!(ok(r)["rows"][0]["id"], "a:1");
    s.stop();
}

/// `[couchdb] max_partition_size`: a partition whose documents take more
/// bytes than the limit takes no more writes (403 `partition_overflow`,
/// per document in `_bulk_docs`), other partitions and deletions do, as
/// in CouchDB.
#[test]
fn a_full_partition_refuses_writes() {
    let s = Server::start();
    let r = s.admin(
        "PUT",
        "/_node/_local/_config/couchdb/max_partition_size",
        Some("\"2500\""),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(s.admin("PUT", "/pf?partitioned=true", None).status, 201);
    let body = json!({ "x": "y".repeat(1000) }).to_string();
    for n in 1..=3 {
        let r = s.admin("PUT", &format!("/pf/a:{n}"), Some(&body));
        assert_eq!(r.status, 201, "{r:?}");
    }
    let r = s.admin("PUT", "/pf/a:4", Some(&body));
    assert_eq!(
        (r.status, r.error()),
        (403, "partition_overflow".to_string())
    );
    assert_eq!(
        r.json()["reason"],
        "Partition limit exceeded due to update on 'a:4'"
    );
    let r = s.admin(
        "POST",
        "/pf/_bulk_docs",
        Some(r#"{"docs":[{"_id":"a:9","x":1},{"_id":"b:1","x":1}]}"#),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let v = r.json();
    assert_eq!(v[0]["error"], "partition_overflow", "{v}");
    assert_eq!(v[1]["ok"], true, "{v}");
    // A deletion passes, and makes room.
    let rev = ok(s.admin("GET", "/pf/a:1", None))["_rev"].clone();
    let r = s.admin(
        "DELETE",
        &format!("/pf/a:1?rev={}", rev.as_str().unwrap()),
        None,
    );
    assert_eq!(r.status, 200, "{r:?}");
    let r = s.admin("PUT", "/pf/a:5", Some(r#"{"small":true}"#));
    assert_eq!(r.status, 201, "{r:?}");
    // Without the limit, the partition takes writes again.
    let r = s.admin(
        "DELETE",
        "/_node/_local/_config/couchdb/max_partition_size",
        None,
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(s.admin("PUT", "/pf/a:6", Some(&body)).status, 201);
}
