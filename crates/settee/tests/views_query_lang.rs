//! Query-language (Mango `"json"` index) design documents end to end,
//! through the real server: `PUT` as `POST /db/_index` stores them, then
//! queried with `_view` like any view (ranges, descending, skip/limit,
//! include_docs, `_count` reduce and grouping). The expected answers are
//! CouchDB 3.4.3's for the same documents and queries (recorded from the
//! reference server; revisions left out). Also: edits and deletions,
//! design documents never indexed, definitions that cannot be indexed,
//! `_info`, shared signatures and `_view_cleanup`, many rows.

mod common;

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

fn bulk(s: &Server, db: &str, docs: Vec<Value>) {
    let r = s.admin(
        "POST",
        &format!("/{db}/_bulk_docs"),
        Some(&json!({ "docs": docs }).to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
}

/// A `_view` answer without the documents' `_rev` (CouchDB's differ).
fn without_revs(mut v: Value) -> Value {
    for row in v["rows"].as_array_mut().into_iter().flatten() {
        if let Some(doc) = row.get_mut("doc").and_then(Value::as_object_mut) {
            doc.remove("_rev");
        }
    }
    v
}

fn rev(s: &Server, db: &str, id: &str) -> String {
    get(s, &format!("/{db}/{id}"))["_rev"]
        .as_str()
        .expect("_rev")
        .to_string()
}

/// The design document `POST /db/_index` writes for two indexes in one
/// design document (plus `include_design`, which Mango ignores).
fn mango_ddoc() -> Value {
    json!({
        "language": "query",
        "options": {"include_design": true},
        "views": {
            "n": {"map": {"fields": {"n": "asc", "m": "desc"},
                          "partial_filter_selector": {"k": {"$gt": 0}}},
                  "reduce": "_count",
                  "options": {"def": {"fields": ["n", {"m": "desc"}]}}},
            "p": {"map": {"fields": {"a.b": "asc", "x\\.y": "asc"}, "partial_filter_selector": {}},
                  "reduce": "_count",
                  "options": {"def": {"fields": ["a.b", "x\\.y"]}}}
        }
    })
}

fn setup(s: &Server, db: &str) {
    s.create_db(db);
    bulk(
        s,
        db,
        vec![
            json!({"_id": "d1", "n": 1, "m": 2, "k": 1}),
            json!({"_id": "d2", "n": null, "m": "x", "k": 5}),
            json!({"_id": "d3", "n": 1, "k": 1}),
            json!({"_id": "d4", "n": [1, 2], "m": {"z": 1}, "k": 2}),
            json!({"_id": "d5", "n": 3, "m": 3, "k": 0}),
            json!({"_id": "d6", "a": {"b": 7}, "x.y": 8}),
            json!({"_id": "d7", "a": {"b": 7}, "x": {"y": 8}}),
            json!({"_id": "d8", "a": [{"b": 1}], "x.y": 1}),
            json!({"_id": "d9", "n": 1, "m": 1, "k": 3}),
            json!({"_id": "d10", "n": "s", "m": true, "k": 1}),
            json!({"_id": "_design/x", "n": 1, "m": 1, "k": 1}),
        ],
    );
    assert_eq!(
        put(s, &format!("/{db}/_design/i"), &mango_ddoc()).status,
        201
    );
}

fn row(id: &str, key: Value) -> Value {
    json!({"id": id, "key": key, "value": null})
}

#[test]
fn query_views_answer_as_couchdb_does() {
    let s = shared();
    let db = "vq_answers";
    setup(s, db);
    let view = |q: &str| without_revs(get(s, &format!("/{db}/_design/i/_view/{q}")));
    let cases: Vec<(&str, Value)> = vec![
        (
            "n?reduce=false",
            json!({"total_rows": 5, "offset": 0, "rows": [
                row("d2", json!([null, "x"])),
                row("d9", json!([1, 1])),
                row("d1", json!([1, 2])),
                row("d10", json!(["s", true])),
                row("d4", json!([[1, 2], {"z": 1}])),
            ]}),
        ),
        ("n", json!({"rows": [{"key": null, "value": 5}]})),
        (
            "n?reduce=false&startkey=[1]&endkey=[1,{}]",
            json!({"total_rows": 5, "offset": 1, "rows": [
                row("d9", json!([1, 1])),
                row("d1", json!([1, 2])),
            ]}),
        ),
        (
            "n?reduce=false&descending=true&limit=2&include_docs=true",
            json!({"total_rows": 5, "offset": 0, "rows": [
                {"id": "d4", "key": [[1, 2], {"z": 1}], "value": null,
                 "doc": {"_id": "d4", "n": [1, 2], "m": {"z": 1}, "k": 2}},
                {"id": "d10", "key": ["s", true], "value": null,
                 "doc": {"_id": "d10", "n": "s", "m": true, "k": 1}},
            ]}),
        ),
        (
            "n?reduce=false&descending=true&startkey=[1,{}]&endkey=[1]",
            json!({"total_rows": 5, "offset": 2, "rows": [
                row("d1", json!([1, 2])),
                row("d9", json!([1, 1])),
            ]}),
        ),
        (
            "n?group_level=1",
            json!({"rows": [
                {"key": [null], "value": 1},
                {"key": [1], "value": 2},
                {"key": ["s"], "value": 1},
                {"key": [[1, 2]], "value": 1},
            ]}),
        ),
        (
            "n?reduce=false&key=[null,%22x%22]",
            json!({"total_rows": 5, "offset": 0, "rows": [row("d2", json!([null, "x"]))]}),
        ),
        (
            "n?startkey=[1]&endkey=[1,{}]",
            json!({"rows": [{"key": null, "value": 2}]}),
        ),
        (
            "n?reduce=false&startkey=[1,1]&endkey=[1,2]&inclusive_end=false",
            json!({"total_rows": 5, "offset": 1, "rows": [row("d9", json!([1, 1]))]}),
        ),
        (
            "n?reduce=false&skip=1&limit=2",
            json!({"total_rows": 5, "offset": 1, "rows": [
                row("d9", json!([1, 1])),
                row("d1", json!([1, 2])),
            ]}),
        ),
        (
            "p?reduce=false",
            json!({"total_rows": 1, "offset": 0, "rows": [row("d6", json!([7, 8]))]}),
        ),
        ("p", json!({"rows": [{"key": null, "value": 1}]})),
    ];
    for (q, want) in cases {
        assert_eq!(view(q), want, "{q}");
    }
    // The same through POST with keys.
    let r = s.admin(
        "POST",
        &format!("/{db}/_design/i/_view/n"),
        Some(r#"{"keys": [[1, 2], [null, "x"], [9, 9]], "reduce": false}"#),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(
        v["rows"],
        json!([row("d1", json!([1, 2])), row("d2", json!([null, "x"]))])
    );
}

#[test]
fn query_views_follow_edits_and_deletions() {
    let s = shared();
    let db = "vq_edits";
    setup(s, db);
    // Built first, then changed.
    assert_eq!(
        get(s, &format!("/{db}/_design/i/_view/n"))["rows"][0]["value"],
        5
    );
    let r = s.admin(
        "DELETE",
        &format!("/{db}/d1?rev={}", rev(s, db, "d1")),
        None,
    );
    assert_eq!(r.status, 200, "{r:?}");
    for (id, body) in [
        ("d3", json!({"n": 1, "m": 5, "k": 1})),
        ("d5", json!({"n": 3, "m": 3, "k": 1})),
        ("d4", json!({"n": [1, 2], "m": {"z": 1}, "k": 0})),
        ("d7", json!({"a": {"b": 6}, "x.y": [1]})),
    ] {
        let mut body = body;
        body["_rev"] = json!(rev(s, db, id));
        assert_eq!(put(s, &format!("/{db}/{id}"), &body).status, 201);
    }
    assert_eq!(
        put(
            s,
            &format!("/{db}/d11"),
            &json!({"n": 2, "m": null, "k": 1})
        )
        .status,
        201
    );
    // CouchDB 3.4.3's answers.
    assert_eq!(
        get(s, &format!("/{db}/_design/i/_view/n?reduce=false")),
        json!({"total_rows": 6, "offset": 0, "rows": [
            row("d2", json!([null, "x"])),
            row("d9", json!([1, 1])),
            row("d3", json!([1, 5])),
            row("d11", json!([2, null])),
            row("d5", json!([3, 3])),
            row("d10", json!(["s", true])),
        ]})
    );
    assert_eq!(
        get(s, &format!("/{db}/_design/i/_view/n")),
        json!({"rows": [{"key": null, "value": 6}]})
    );
    assert_eq!(
        get(s, &format!("/{db}/_design/i/_view/p?reduce=false")),
        json!({"total_rows": 2, "offset": 0, "rows": [
            row("d7", json!([6, [1]])),
            row("d6", json!([7, 8])),
        ]})
    );
    // A design document with the fields is still left out.
    let mut x = get(s, &format!("/{db}/_design/x"));
    x["k"] = json!(9);
    assert_eq!(put(s, &format!("/{db}/_design/x"), &x).status, 201);
    assert_eq!(
        get(s, &format!("/{db}/_design/i/_view/n?reduce=false"))["total_rows"],
        6
    );
}

#[test]
fn query_views_that_cannot_be_indexed_are_refused_when_queried() {
    let s = shared();
    let db = "vq_invalid";
    s.create_db(db);
    bulk(s, db, vec![json!({"_id": "a", "n": 1})]);
    for (name, map, reason) in [
        ("nofields", json!({}), "View v: `map` has no `fields`"),
        (
            "badfilter",
            json!({"fields": {"n": "asc"}, "partial_filter_selector": {"$bogus": 1}}),
            "View v: invalid partial_filter_selector: Invalid operator: $bogus",
        ),
        (
            "badfield",
            json!({"fields": {"a..b": "asc"}}),
            "View v: Invalid field name: a..b",
        ),
    ] {
        // Stored, as CouchDB stores them (its queries then fail with 500).
        let ddoc = json!({"language": "query", "views": {"v": {"map": map, "reduce": "_count"}}});
        assert_eq!(
            put(s, &format!("/{db}/_design/{name}"), &ddoc).status,
            201,
            "{name}"
        );
        let r = s.admin("GET", &format!("/{db}/_design/{name}/_view/v"), None);
        assert_eq!(r.status, 400, "{name}: {r:?}");
        assert_eq!(r.json()["error"], "invalid_design_doc", "{name}");
        assert_eq!(r.json()["reason"], reason, "{name}");
    }
    // A JavaScript map in a query-language design document is refused
    // when saved (its `map` must be an object).
    let r = put(
        s,
        &format!("/{db}/_design/js"),
        &json!({"language": "query", "views": {"v": {"map": "function(doc){}"}}}),
    );
    assert_eq!(r.status, 400, "{r:?}");
    // Fields as an array and any direction are tolerated; an empty list of
    // fields indexes every document under `[]`.
    let ddoc = json!({"language": "query", "views": {
        "arr": {"map": {"fields": ["n", {"_id": "desc"}]}, "reduce": "_count"},
        "dir": {"map": {"fields": {"n": "up"}}},
        "none": {"map": {"fields": {}}}
    }});
    assert_eq!(put(s, &format!("/{db}/_design/ok"), &ddoc).status, 201);
    assert_eq!(
        get(s, &format!("/{db}/_design/ok/_view/arr?reduce=false"))["rows"],
        json!([row("a", json!([1, "a"]))])
    );
    assert_eq!(
        get(s, &format!("/{db}/_design/ok/_view/dir"))["rows"],
        json!([row("a", json!([1]))])
    );
    assert_eq!(
        get(s, &format!("/{db}/_design/ok/_view/none"))["rows"],
        json!([row("a", json!([]))])
    );
    // Map-only views refuse reduce as JavaScript ones do.
    let r = s.admin(
        "GET",
        &format!("/{db}/_design/ok/_view/dir?reduce=true"),
        None,
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "query_parse_error");
}

#[test]
fn query_views_have_info_shared_signatures_and_survive_cleanup() {
    let s = shared();
    let db = "vq_info";
    setup(s, db);
    // The same definitions written differently: one index.
    let mut twin = mango_ddoc();
    twin["views"]["n"]["map"]["fields"] = json!(["n", {"m": "desc"}]);
    twin["views"]["p"]["map"]
        .as_object_mut()
        .expect("map")
        .remove("partial_filter_selector");
    assert_eq!(put(s, &format!("/{db}/_design/twin"), &twin).status, 201);
    let info = get(s, &format!("/{db}/_design/i/_info"));
    assert_eq!(info["name"], "i");
    assert_eq!(info["view_index"]["language"], "query");
    let twin_info = get(s, &format!("/{db}/_design/twin/_info"));
    assert_eq!(
        info["view_index"]["signature"],
        twin_info["view_index"]["signature"]
    );
    let rows = get(s, &format!("/{db}/_design/twin/_view/n?reduce=false"));
    assert_eq!(rows["total_rows"], 5);
    // Built through the database's sequence (a string; the index's is a number).
    let db_seq = get(s, &format!("/{db}"))["update_seq"]
        .as_str()
        .and_then(|q| q.split('-').next()?.parse::<u64>().ok());
    assert_eq!(
        get(s, &format!("/{db}/_design/i/_info"))["view_index"]["update_seq"].as_u64(),
        db_seq
    );
    // Another filter: another index.
    let mut other = mango_ddoc();
    other["views"]["n"]["map"]["partial_filter_selector"] = json!({"k": {"$gt": 1}});
    assert_eq!(put(s, &format!("/{db}/_design/other"), &other).status, 201);
    let other_info = get(s, &format!("/{db}/_design/other/_info"));
    assert_ne!(
        info["view_index"]["signature"],
        other_info["view_index"]["signature"]
    );
    assert_eq!(
        get(s, &format!("/{db}/_design/other/_view/n?reduce=false"))["total_rows"],
        3
    );
    let r = s.admin("POST", &format!("/{db}/_view_cleanup"), Some("{}"));
    assert_eq!(r.status, 202, "{r:?}");
    assert_eq!(
        get(s, &format!("/{db}/_design/i/_view/n?reduce=false&limit=1"))["rows"],
        json!([row("d2", json!([null, "x"]))])
    );
}

#[test]
fn query_views_over_many_rows_count_every_range() {
    let s = shared();
    let db = "vq_many";
    s.create_db(db);
    let n = 1500usize;
    let docs: Vec<Value> = (0..n)
        .map(|i| {
            let mut d = json!({"_id": format!("k{i:05}"), "g": i % 7, "i": i});
            if i % 10 == 0 {
                d.as_object_mut().expect("doc").remove("g");
            }
            d
        })
        .collect();
    for chunk in docs.chunks(500) {
        bulk(s, db, chunk.to_vec());
    }
    let ddoc = json!({"language": "query", "views": {
        "g": {"map": {"fields": {"g": "asc", "i": "asc"}, "partial_filter_selector": {"i": {"$lt": 1400}}},
              "reduce": "_count"}}});
    assert_eq!(put(s, &format!("/{db}/_design/i"), &ddoc).status, 201);
    let with_g = |g: usize| (0..1400).filter(|i| i % 10 != 0 && i % 7 == g).count();
    let total: usize = (0..7).map(with_g).sum();
    let v = get(s, &format!("/{db}/_design/i/_view/g?reduce=false&limit=3"));
    assert_eq!(v["total_rows"], total);
    assert_eq!(
        v["rows"],
        json!([
            row("k00007", json!([0, 7])),
            row("k00014", json!([0, 14])),
            row("k00021", json!([0, 21]))
        ])
    );
    let grouped = get(s, &format!("/{db}/_design/i/_view/g?group_level=1"));
    let want: Vec<Value> = (0..7)
        .map(|g| json!({"key": [g], "value": with_g(g)}))
        .collect();
    assert_eq!(grouped["rows"], json!(want));
    let v = get(
        s,
        &format!("/{db}/_design/i/_view/g?startkey=[3]&endkey=[4,{{}}]"),
    );
    assert_eq!(v["rows"][0]["value"], with_g(3) + with_g(4));
    let v = get(
        s,
        &format!("/{db}/_design/i/_view/g?reduce=false&startkey=[4]&limit=1&descending=true"),
    );
    assert_eq!(
        v["offset"],
        total - with_g(0) - with_g(1) - with_g(2) - with_g(3)
    );
}
