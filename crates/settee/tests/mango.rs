//! Mango end to end, through the real server: `_find` answers checked
//! against an independent filter over a generated corpus (with and without
//! json indexes), bookmark paging through whole result sets, indexes
//! following edits and deletions, sorts served by indexes, and the `_index`
//! life cycle. (CouchDB's exact answers are the conformance goldens,
//! `tests/conformance/scenarios/mango_*.scn`.)

mod common;

use std::collections::BTreeSet;

use common::{shared, Server};
use serde_json::{json, Value};

fn post(s: &Server, path: &str, body: &Value) -> Value {
    let r = s.admin("POST", path, Some(&body.to_string()));
    assert_eq!(
        r.status,
        if path.ends_with("_bulk_docs") {
            201
        } else {
            200
        },
        "POST {path} {body}: {r:?}"
    );
    r.json()
}

fn ids(v: &Value) -> Vec<String> {
    common::strings_of(v, "docs", "_id")
}

/// A deterministic pseudo-random corpus: `n` 0..50 (missing on every
/// 7th), `t` one of four strings, `o.b` a number or absent, `tags` an
/// array.
fn corpus(count: usize) -> Vec<Value> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..count)
        .map(|i| {
            let r = next();
            let t = ["red", "green", "blue", "Blue"][usize::try_from(r % 4).expect("small")];
            let mut d = json!({"_id": format!("d{i:04}"), "t": t});
            if i % 7 != 0 {
                d["n"] = json!(r % 50);
            }
            if r % 3 == 0 {
                d["o"] = json!({"b": (r >> 8) % 10});
            }
            d["tags"] = json!([format!("k{}", (r >> 16) % 5)]);
            d
        })
        .collect()
}

type Check = fn(&Value) -> bool;

fn num(d: &Value, f: &str) -> Option<u64> {
    d.get(f).and_then(Value::as_u64)
}

/// Selectors with an independent statement of what they select.
fn cases() -> Vec<(Value, Check)> {
    vec![
        (json!({"n": 7}), |d| num(d, "n") == Some(7)),
        (json!({"n": {"$gt": 40}}), |d| {
            num(d, "n").is_some_and(|n| n > 40)
        }),
        (json!({"n": {"$gte": 10, "$lt": 12}}), |d| {
            num(d, "n").is_some_and(|n| (10..12).contains(&n))
        }),
        (json!({"t": "blue", "n": {"$lte": 5}}), |d| {
            d["t"] == "blue" && num(d, "n").is_some_and(|n| n <= 5)
        }),
        (
            json!({"t": {"$in": ["red", "Blue"]}, "n": {"$gt": 45}}),
            |d| (d["t"] == "red" || d["t"] == "Blue") && num(d, "n").is_some_and(|n| n > 45),
        ),
        (json!({"$or": [{"n": 1}, {"o.b": 3}]}), |d| {
            num(d, "n") == Some(1) || d["o"]["b"] == 3
        }),
        (json!({"n": {"$exists": false}}), |d| d.get("n").is_none()),
        (json!({"o": {"b": {"$gte": 8}}}), |d| {
            d["o"]["b"].as_u64().is_some_and(|b| b >= 8)
        }),
        (
            json!({"tags": {"$elemMatch": {"$eq": "k2"}}, "n": {"$lt": 10}}),
            |d| d["tags"][0] == "k2" && num(d, "n").is_some_and(|n| n < 10),
        ),
        (
            json!({"t": {"$regex": "^[Bb]lue$"}, "n": {"$ne": 3}}),
            |d| (d["t"] == "blue" || d["t"] == "Blue") && num(d, "n").is_some_and(|n| n != 3),
        ),
        (json!({"n": {"$mod": [10, 3]}}), |d| {
            num(d, "n").is_some_and(|n| n % 10 == 3)
        }),
        // Read as several ranges of an index (beyond CouchDB).
        (json!({"n": {"$in": [3, 7, 49, 100, "7"]}}), |d| {
            matches!(num(d, "n"), Some(3 | 7 | 49))
        }),
        (
            json!({"$or": [{"n": {"$lt": 3}}, {"n": {"$gt": 47}}, {"n": 20}, {"n": {"$lte": 1}}]}),
            |d| num(d, "n").is_some_and(|n| !(3..=47).contains(&n) || n == 20),
        ),
        (
            json!({"t": {"$in": ["blue", "Blue"]}, "n": {"$in": [1, 2, 3]}}),
            |d| (d["t"] == "blue" || d["t"] == "Blue") && matches!(num(d, "n"), Some(1..=3)),
        ),
        (json!({"tags": {"$in": ["k1", "k3"]}}), |d| {
            d["tags"][0] == "k1" || d["tags"][0] == "k3"
        }),
        (
            json!({"$nor": [{"t": "red"}, {"t": "green"}], "n": {"$gt": 30}}),
            |d| d["t"] != "red" && d["t"] != "green" && num(d, "n").is_some_and(|n| n > 30),
        ),
    ]
}

fn check_corpus(s: &Server, db: &str, docs: &[Value], stage: &str) {
    for (selector, check) in cases() {
        let got = post(
            s,
            &format!("/{db}/_find"),
            &json!({"selector": selector, "limit": 10_000}),
        );
        let got: BTreeSet<String> = ids(&got).into_iter().collect();
        let want: BTreeSet<String> = docs
            .iter()
            .filter(|d| check(d))
            .map(|d| d["_id"].as_str().expect("id").to_string())
            .collect();
        assert_eq!(got, want, "{stage}: {selector}");
    }
}

#[test]
fn find_agrees_with_an_independent_filter_with_and_without_indexes() {
    let s = shared();
    let db = "m_corpus";
    s.create_db(db);
    let mut docs = corpus(600);
    post(s, &format!("/{db}/_bulk_docs"), &json!({ "docs": docs }));
    check_corpus(s, db, &docs, "no index");
    for (fields, name) in [
        (json!(["n"]), "n"),
        (json!(["t", "n"]), "tn"),
        (json!(["o.b"]), "ob"),
        (json!(["tags"]), "tags"),
    ] {
        let r = post(
            s,
            &format!("/{db}/_index"),
            &json!({"index": {"fields": fields}, "ddoc": "ix", "name": name}),
        );
        assert_eq!(r["result"], "created");
    }
    let explained = post(
        s,
        &format!("/{db}/_explain"),
        &json!({"selector": {"t": "blue", "n": {"$lte": 5}}}),
    );
    assert_eq!(explained["index"]["name"], "tn", "{explained}");
    check_corpus(s, db, &docs, "indexed");
    // Edit a third of the documents and delete a tenth: the indexes follow.
    let all = s
        .admin("GET", &format!("/{db}/_all_docs?startkey=%22d%22"), None)
        .json();
    let mut changes = Vec::new();
    for (i, row) in all["rows"].as_array().expect("rows").iter().enumerate() {
        let rev = row["value"]["rev"].clone();
        if i % 10 == 0 {
            changes.push(json!({"_id": row["id"], "_rev": rev, "_deleted": true}));
            docs[i] = json!({"_id": row["id"], "_deleted": true});
        } else if i % 3 == 0 {
            let mut d = docs[i].clone();
            d["n"] = json!((i * 7) % 50);
            d["t"] = json!("green");
            docs[i] = d.clone();
            d["_rev"] = rev;
            changes.push(d);
        }
    }
    post(s, &format!("/{db}/_bulk_docs"), &json!({ "docs": changes }));
    docs.retain(|d| d.get("_deleted").is_none());
    check_corpus(s, db, &docs, "after edits");
}

#[test]
fn bookmarks_page_through_whole_answers() {
    let s = shared();
    let db = "m_pages";
    s.create_db(db);
    let docs: Vec<Value> = (0..230)
        .map(|i| json!({"_id": format!("p{i:03}"), "v": (i * 37) % 100}))
        .collect();
    post(s, &format!("/{db}/_bulk_docs"), &json!({ "docs": docs }));
    post(
        s,
        &format!("/{db}/_index"),
        &json!({"index": {"fields": ["v"]}, "ddoc": "v", "name": "v"}),
    );
    for (selector, sort) in [
        (json!({"v": {"$gte": 10}}), json!([])),
        (json!({"v": {"$gte": 10}}), json!([{"v": "desc"}])),
        (json!({"_id": {"$gt": "p050"}}), json!([])),
        (json!({"v": {"$in": [3, 10, 44, 71, 99]}}), json!([])),
        (
            json!({"v": {"$in": [3, 10, 44, 71, 99]}}),
            json!([{"v": "desc"}]),
        ),
        (
            json!({"$or": [{"v": {"$lt": 20}}, {"v": {"$gt": 80}}, {"v": 50}]}),
            json!([{"v": "asc"}]),
        ),
    ] {
        let whole = post(
            s,
            &format!("/{db}/_find"),
            &json!({"selector": selector, "sort": sort, "limit": 1000, "fields": ["_id", "v"]}),
        );
        let mut paged = Vec::new();
        let mut bookmark: Option<String> = None;
        for _ in 0..100 {
            let mut q =
                json!({"selector": selector, "sort": sort, "limit": 17, "fields": ["_id", "v"]});
            if let Some(b) = &bookmark {
                q["bookmark"] = json!(b);
            }
            let page = post(s, &format!("/{db}/_find"), &q);
            let got = page["docs"].as_array().expect("docs").clone();
            if got.is_empty() {
                break;
            }
            paged.extend(got);
            bookmark = page["bookmark"].as_str().map(str::to_string);
        }
        assert_eq!(Value::Array(paged), whole["docs"], "{selector} {sort}");
        let values: Vec<u64> = whole["docs"]
            .as_array()
            .expect("docs")
            .iter()
            .map(|d| d["v"].as_u64().expect("v"))
            .collect();
        if sort == json!([{"v": "desc"}]) {
            assert!(values.windows(2).all(|w| w[0] >= w[1]), "{selector} {sort}");
        } else if sort != json!([]) || selector.get("_id").is_none() {
            assert!(values.windows(2).all(|w| w[0] <= w[1]), "{selector} {sort}");
        }
    }
    // `_explain` shows the ranges an `$in` is read as (beyond CouchDB).
    let explained = post(
        s,
        &format!("/{db}/_explain"),
        &json!({"selector": {"v": {"$in": [10, 3]}}}),
    );
    assert_eq!(
        explained["ranges"],
        json!([
            {"start_key": [3], "end_key": [3, "<MAX>"]},
            {"start_key": [10], "end_key": [10, "<MAX>"]},
            {"start_key": [[]], "end_key": [{}, "<MAX>"]},
        ]),
        "{explained}"
    );
    assert_eq!(explained["mrargs"]["start_key"], json!([]), "as CouchDB's");
    // An `$in` reads only its values' rows of the index, not all of it.
    let stats = post(
        s,
        &format!("/{db}/_find"),
        &json!({"selector": {"v": {"$in": [3, 10]}}, "execution_stats": true}),
    );
    let want = docs.iter().filter(|d| d["v"] == 3 || d["v"] == 10).count() as u64;
    assert_eq!(stats["docs"].as_array().map(Vec::len), Some(want as usize));
    assert_eq!(
        stats["execution_stats"]["total_keys_examined"], want,
        "{stats}"
    );
}

#[test]
fn sorts_need_an_index_and_use_its_order() {
    let s = shared();
    let db = "m_sort";
    s.create_db(db);
    let docs: Vec<Value> = (0..50)
        .map(|i| json!({"_id": format!("s{i:02}"), "k": (i * 13) % 50, "g": i % 2}))
        .collect();
    post(s, &format!("/{db}/_bulk_docs"), &json!({ "docs": docs }));
    let r = s.admin(
        "POST",
        &format!("/{db}/_find"),
        Some(&json!({"selector": {"k": {"$gt": 0}}, "sort": ["k"]}).to_string()),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "no_usable_index");
    post(
        s,
        &format!("/{db}/_index"),
        &json!({"index": {"fields": ["g", "k"]}, "ddoc": "gk", "name": "gk"}),
    );
    let asc = post(
        s,
        &format!("/{db}/_find"),
        &json!({"selector": {"g": 1, "k": {"$gt": 10}}, "sort": ["k"], "fields": ["k"], "limit": 100}),
    );
    let ks: Vec<u64> = asc["docs"]
        .as_array()
        .expect("docs")
        .iter()
        .map(|d| d["k"].as_u64().expect("k"))
        .collect();
    let mut want: Vec<u64> = (0..50u64)
        .filter(|i| i % 2 == 1)
        .map(|i| (i * 13) % 50)
        .filter(|k| *k > 10)
        .collect();
    want.sort_unstable();
    assert_eq!(ks, want);
    let desc = post(
        s,
        &format!("/{db}/_find"),
        &json!({"selector": {"g": 1, "k": {"$gt": 10}}, "sort": [{"g": "desc"}, {"k": "desc"}], "fields": ["k"], "limit": 100}),
    );
    let kd: Vec<u64> = desc["docs"]
        .as_array()
        .expect("docs")
        .iter()
        .map(|d| d["k"].as_u64().expect("k"))
        .collect();
    want.reverse();
    assert_eq!(kd, want);
    // Deleting the index: the sort is refused again.
    let r = s.admin("DELETE", &format!("/{db}/_index/gk/json/gk"), None);
    assert_eq!(r.status, 200, "{r:?}");
    let r = s.admin(
        "POST",
        &format!("/{db}/_find"),
        Some(&json!({"selector": {"g": 1}, "sort": ["k"]}).to_string()),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        s.admin("GET", &format!("/{db}/_design/gk"), None).status,
        404
    );
}

/// Planner facts of CouchDB 3.4.3 found by the generated differential
/// corpus (tests/conformance/scenarios/mango_corpus.scn, seed 2).
#[test]
fn planner_choices_follow_couchdb() {
    let s = shared();
    let db = "m_planner";
    s.create_db(db);
    let docs = json!([{"_id": "x1", "a": 1, "b": 2}, {"_id": "x2", "a": 1, "b": 1}]);
    post(s, &format!("/{db}/_bulk_docs"), &json!({ "docs": docs }));
    for (name, fields) in [("i1", json!(["a"])), ("i2", json!(["a", "b"]))] {
        post(
            s,
            &format!("/{db}/_index"),
            &json!({"index": {"fields": fields}, "ddoc": name, "name": name}),
        );
    }
    // `$exists: true` counts for the index prefix: [a, b] beats [a].
    let q = json!({"selector": {"a": {"$gt": 0}, "b": {"$exists": true}}});
    let found = post(s, &format!("/{db}/_find"), &q);
    assert_eq!(ids(&found), ["x2", "x1"], "{found}");
    let explained = post(s, &format!("/{db}/_explain"), &q);
    assert_eq!(explained["index"]["name"], "i2", "{explained}");
    // Conditions that cannot all hold on the index's first field: CouchDB
    // answers the bare `{"docs": []}`.
    let none = post(
        s,
        &format!("/{db}/_find"),
        &json!({"selector": {"a": {"$gt": 5, "$lt": 5}}, "execution_stats": true}),
    );
    assert_eq!(none, json!({"docs": []}));
    // An `_id` bounded above by a non-string reads nothing (ids sort above).
    let below = post(
        s,
        &format!("/{db}/_find"),
        &json!({"selector": {"_id": {"$lt": 5}}, "execution_stats": true}),
    );
    assert_eq!(below["docs"], json!([]));
    assert_eq!(
        below["execution_stats"]["total_docs_examined"], 0,
        "{below}"
    );
    // Negations are pushed down by De Morgan before ranges are taken.
    let nor = post(
        s,
        &format!("/{db}/_find"),
        &json!({"selector": {"$nor": [{"_id": {"$gt": "x0", "$lt": "x2"}}]}}),
    );
    assert_eq!(ids(&nor), ["x2"], "{nor}");
    // A partitioned index needs a partitioned database, and "partitioned"
    // is a boolean: CouchDB answers both with 500s, and so does Settee.
    for (partitioned, error) in [
        (json!(true), "error_saving_ddoc"),
        (json!("yes"), "unknown_error"),
    ] {
        let r = s.admin(
            "POST",
            &format!("/{db}/_index"),
            Some(&json!({"index": {"fields": ["a"]}, "partitioned": partitioned}).to_string()),
        );
        assert_eq!(
            (r.status, r.error()),
            (500, error.to_string()),
            "{partitioned}: {r:?}"
        );
    }
}
