//! Clouseau-style full-text search end to end, through the real server:
//! design documents' `indexes` queried with `_search` (GET and POST) and
//! every option CouchDB documents (q/query, sort, limit, bookmark,
//! include_docs, include_fields, counts, ranges, drilldown, group_field,
//! highlight_fields, stale/update), `_search_info`, `_search_disk_size`,
//! `_search_cleanup`, `/_search_analyze`, partitioned indexes, errors as
//! CouchDB's, and a generated corpus of queries whose hits, sort, pages,
//! counts, ranges, drilldowns and groups are checked against an
//! evaluation in this file.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{shared, Resp, Server};
use serde_json::{json, Value};

fn put(s: &Server, path: &str, body: &Value) -> Resp {
    s.admin("PUT", path, Some(&body.to_string()))
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

fn ids(v: &Value) -> Vec<String> {
    v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|h| h["id"].as_str().expect("id").to_string())
        .collect()
}

fn error(r: &Resp) -> (u16, String, String) {
    r.error_triple()
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

/// Furniture, as the search documentation's examples index it.
fn furniture(s: &Server, db: &str) {
    s.create_db(db);
    s.bulk(
        db,
        vec![
            json!({"_id": "f1", "name": "Red leather sofa", "type": "sofa", "price": 900, "stock": true, "code": "sf1"}),
            json!({"_id": "f2", "name": "Blue velvet sofa with cushions", "type": "sofa", "price": 450, "stock": false, "code": "SF-2"}),
            json!({"_id": "f3", "name": "Oak dining chair", "type": "chair", "price": 80, "stock": true, "code": "CH-1"}),
            json!({"_id": "f4", "name": "The red office chair", "type": "chair", "price": 150, "stock": true, "code": "CH-2"}),
            json!({"_id": "f5", "name": "Glass coffee table", "type": "table", "price": 300, "stock": false, "code": "TB-1"}),
            json!({"_id": "f6", "name": "A plain stool", "price": 20}),
        ],
    );
    let ddoc = json!({"indexes": {"things": {"analyzer": "standard", "index":
        "function (doc) { if (doc.name) index('default', doc.name, {store: true}); \
         if (doc.name) index('name', doc.name, {store: true}); \
         if (doc.type) index('type', doc.type, {facet: true, store: true}); \
         if (typeof doc.price == 'number') index('price', doc.price, {facet: true, store: true}); \
         if (typeof doc.stock == 'boolean') index('stock', doc.stock); \
         if (doc.code) index('code', doc.code, {index: 'not_analyzed'}); }"}}});
    assert_eq!(put(s, &format!("/{db}/_design/shop"), &ddoc).status, 201);
}

#[test]
fn search_answers_are_shaped_as_couchdbs() {
    let s = shared();
    let db = "csearch_shape";
    furniture(s, db);
    let url = format!("/{db}/_design/shop/_search/things");
    let v = get(s, &format!("{url}?q=sofa"));
    assert_eq!(v["total_rows"], 2);
    assert!(v["bookmark"].is_string());
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["total_rows", "bookmark", "rows"]);
    let row = &v["rows"][0];
    let row_keys: Vec<&String> = row.as_object().unwrap().keys().collect();
    assert_eq!(row_keys, ["id", "order", "fields"]);
    // Relevance order: a score, then the tie-breaker.
    assert!(row["order"][0].is_number(), "{row}");
    assert_eq!(row["order"].as_array().unwrap().len(), 2);
    assert!(row["fields"]["name"].as_str().unwrap().contains("sofa"));
    assert_eq!(row["fields"]["type"], "sofa");
    assert_eq!(
        BTreeSet::from_iter(ids(&v)),
        BTreeSet::from(["f1".to_string(), "f2".to_string()])
    );
    // `query` is `q`; POST answers as GET does.
    assert_eq!(ids(&get(s, &format!("{url}?query=sofa"))), ids(&v));
    assert_eq!(ids(&post(s, &url, &json!({"q": "sofa"}))), ids(&v));

    // The standard analyzer of Clouseau removes English stop words.
    assert_eq!(get(s, &format!("{url}?q=the"))["total_rows"], 0);
    assert_eq!(get(s, &format!("{url}?q=name:RED"))["total_rows"], 2);
    // Numbers: exact and ranges; booleans and not_analyzed strings.
    assert_eq!(ids(&get(s, &format!("{url}?q=price:150"))), ["f4"]);
    let v = get(
        s,
        &format!("{url}?q={}&sort=%22price%22", enc("price:[100 TO 500]")),
    );
    assert_eq!(ids(&v), ["f4", "f5", "f2"]);
    assert_eq!(v["rows"][0]["order"], json!([150.0, "f4"]));
    let v = get(s, &format!("{url}?q={}", enc("price:{150 TO 900]")));
    assert_eq!(v["total_rows"], 3);
    assert_eq!(
        BTreeSet::from_iter(ids(&get(s, &format!("{url}?q=stock:false")))),
        BTreeSet::from(["f2".to_string(), "f5".to_string()])
    );
    // A not_analyzed string is one token; the query's text is analyzed
    // (lowercased, cut at the hyphen), as Lucene's parser does.
    assert_eq!(
        ids(&get(s, &format!("{url}?q={}", enc("code:SF1")))),
        ["f1"]
    );
    assert_eq!(
        ids(&get(s, &format!("{url}?q={}", enc("code:sf*")))),
        ["f1"]
    );
    assert_eq!(
        get(s, &format!("{url}?q={}", enc("code:CH-1")))["total_rows"],
        0
    );
    // The text of a number is not the number.
    assert_eq!(get(s, &format!("{url}?q=name:150"))["total_rows"], 0);

    // sort: fields by number (the default type) and by string, both ways.
    let v = post(s, &url, &json!({"q": "*:*", "sort": "-price"}));
    assert_eq!(ids(&v), ["f1", "f2", "f5", "f4", "f3", "f6"]);
    let v = post(
        s,
        &url,
        &json!({"q": "*:*", "sort": ["type<string>", "-price<number>"]}),
    );
    // A document without the field sorts first (no value), then by type.
    assert_eq!(ids(&v), ["f6", "f4", "f3", "f1", "f2", "f5"]);
    assert_eq!(v["rows"][0]["order"], json!([null, 20.0, "f6"]));
    let v = post(s, &url, &json!({"q": "*:*", "sort": "-<doc>", "limit": 2}));
    assert_eq!(ids(&v), ["f6", "f5"]);

    // limit and bookmark: the pages join up; the page after the last
    // one is empty and keeps the bookmark.
    let mut seen = Vec::new();
    let mut bookmark = Value::Null;
    for _ in 0..10 {
        let v = post(
            s,
            &url,
            &json!({"q": "*:*", "sort": "price", "limit": 4, "bookmark": bookmark}),
        );
        assert_eq!(v["total_rows"], 6);
        if v["rows"].as_array().unwrap().is_empty() {
            assert_eq!(v["bookmark"], bookmark);
            break;
        }
        seen.extend(ids(&v));
        bookmark = v["bookmark"].clone();
    }
    assert_eq!(seen, ["f6", "f3", "f4", "f5", "f2", "f1"]);
    // limit=0: only the count.
    let v = get(s, &format!("{url}?q=chair&limit=0"));
    assert_eq!(
        (v["total_rows"].clone(), v["rows"].clone()),
        (json!(2), json!([]))
    );

    // include_docs and include_fields.
    let v = get(s, &format!("{url}?q=oak&include_docs=true"));
    assert_eq!(v["rows"][0]["doc"]["_id"], "f3");
    assert_eq!(v["rows"][0]["doc"]["price"], 80);
    assert!(v["rows"][0]["doc"]["_rev"].is_string());
    let v = post(s, &url, &json!({"q": "oak", "include_fields": ["type"]}));
    assert_eq!(v["rows"][0]["fields"], json!({"type": "chair"}));

    // counts, ranges (every label, zero included), drilldown.
    let v = post(
        s,
        &url,
        &json!({"q": "*:*", "limit": 0, "counts": ["type"],
                "ranges": {"price": {"cheap": "[0 TO 100]", "mid": "{100 TO 500]", "dear": "{500 TO Infinity]", "none": "[5000 TO 6000]"}}}),
    );
    assert_eq!(
        v["counts"],
        json!({"type": {"chair": 2, "sofa": 2, "table": 1}})
    );
    assert_eq!(
        v["ranges"],
        json!({"price": {"cheap": 2, "mid": 3, "dear": 1, "none": 0}})
    );
    let v = get(
        s,
        &format!("{url}?q=*:*&drilldown={}", enc(r#"["type","sofa"]"#)),
    );
    assert_eq!(v["total_rows"], 2);
    let v = get(
        s,
        &format!(
            "{url}?q=*:*&drilldown={}&drilldown={}",
            enc(r#"["type","sofa","chair"]"#),
            enc(r#"["type","chair"]"#)
        ),
    );
    assert_eq!(
        BTreeSet::from_iter(ids(&v)),
        BTreeSet::from(["f3".to_string(), "f4".to_string()])
    );
    // Drilldown values are not analyzed.
    let v = post(
        s,
        &url,
        &json!({"q": "*:*", "drilldown": [["type", "Sofa"]]}),
    );
    assert_eq!(v["total_rows"], 0);

    // group_field: groups by the field's value, each with its rows.
    let v = post(
        s,
        &url,
        &json!({"q": "*:*", "group_field": "type", "sort": "-price", "group_sort": "-price", "limit": 1}),
    );
    assert_eq!(v["total_rows"], 6);
    let groups = v["groups"].as_array().unwrap();
    let by: Vec<Value> = groups.iter().map(|g| g["by"].clone()).collect();
    assert_eq!(
        by,
        [json!("sofa"), json!("table"), json!("chair"), json!(null)]
    );
    assert_eq!(groups[0]["total_rows"], 2);
    assert_eq!(ids(&groups[0]), ["f1"]);
    assert_eq!(ids(&groups[2]), ["f4"]);
    let v = post(
        s,
        &url,
        &json!({"q": "*:*", "group_field": "type", "group_sort": "type<string>", "group_limit": 2, "include_docs": true}),
    );
    let by: Vec<Value> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["by"].clone())
        .collect();
    assert_eq!(by, [json!(null), json!("chair")]);
    assert_eq!(v["groups"][1]["rows"][0]["doc"]["type"], "chair");

    // highlight_fields: the stored values' fragments with the terms marked.
    let v = post(
        s,
        &url,
        &json!({"q": "name:red AND name:chair", "highlight_fields": ["name"],
                "highlight_pre_tag": "[", "highlight_post_tag": "]"}),
    );
    assert_eq!(ids(&v), ["f4"]);
    assert_eq!(
        v["rows"][0]["highlights"],
        json!({"name": ["The [red] office [chair]"]})
    );
    let v = get(
        s,
        &format!(
            "{url}?q=sofa&highlight_fields={}",
            enc(r#"["default","type"]"#)
        ),
    );
    let h = &v["rows"][0]["highlights"];
    assert!(
        h["default"][0].as_str().unwrap().contains("<em>sofa</em>"),
        "{h}"
    );
    // Lucene's highlighter marks the query's terms in any field.
    assert_eq!(h["type"], json!(["<em>sofa</em>"]), "{h}");
    let v = post(
        s,
        &url,
        &json!({"q": "name:oak", "highlight_fields": ["price"]}),
    );
    assert_eq!(
        v["rows"][0]["highlights"],
        json!({"price": []}),
        "not a string"
    );
    let long = "word ".repeat(60) + "needle " + &"word ".repeat(60);
    s.bulk(db, vec![json!({"_id": "f7", "name": long})]);
    let v = post(
        s,
        &url,
        &json!({"q": "needle", "highlight_fields": ["name"], "highlight_size": 40}),
    );
    let frag = v["rows"][0]["highlights"]["name"][0].as_str().unwrap();
    assert!(
        frag.contains("<em>needle</em>") && frag.len() < 80,
        "{frag}"
    );

    // stale=ok does not update the index; the next query does.
    s.bulk(
        db,
        vec![json!({"_id": "f8", "name": "wicker sofa", "type": "sofa"})],
    );
    assert_eq!(get(s, &format!("{url}?q=wicker&stale=ok"))["total_rows"], 0);
    assert_eq!(
        post(s, &url, &json!({"q": "wicker", "update": false}))["total_rows"],
        0
    );
    assert_eq!(get(s, &format!("{url}?q=wicker"))["total_rows"], 1);

    // _search_info and _search_disk_size.
    let info = get(s, &format!("/{db}/_design/shop/_search_info/things"));
    assert_eq!(info["name"], "_design/shop/things");
    let si = &info["search_index"];
    assert_eq!(si["doc_count"], 8);
    for k in [
        "pending_seq",
        "doc_del_count",
        "disk_size",
        "committed_seq",
        "purge_seq",
    ] {
        assert!(si[k].is_u64(), "{k}: {info}");
    }
    assert!(si["disk_size"].as_u64().unwrap() > 0);
    let ds = get(s, &format!("/{db}/_design/shop/_search_disk_size/things"));
    assert!(ds["search_index"]["disk_size"].as_u64().unwrap() > 0);
}

#[test]
fn analyzers_and_the_analyze_endpoint() {
    let s = shared();
    let a = |analyzer: Value, text: &str| {
        post(
            s,
            "/_search_analyze",
            &json!({"analyzer": analyzer, "text": text}),
        )["tokens"]
            .clone()
    };
    assert_eq!(
        a(json!("standard"), "The Quick fox"),
        json!(["quick", "fox"])
    );
    assert_eq!(
        a(json!("keyword"), "The Quick fox"),
        json!(["The Quick fox"])
    );
    assert_eq!(
        a(json!("whitespace"), "The Quick-fox"),
        json!(["The", "Quick-fox"])
    );
    assert_eq!(
        a(json!("simple"), "it's 42 Foxes"),
        json!(["it", "s", "foxes"])
    );
    assert_eq!(
        a(json!("english"), "the running foxes"),
        json!(["run", "fox"])
    );
    assert_eq!(a(json!("german"), "die Häuser"), json!(["haus"]));
    assert_eq!(a(json!("cjk"), "東京都"), json!(["東京", "京都"]));
    assert_eq!(
        a(json!("email"), "Mail ab@example.com"),
        json!(["mail", "ab@example.com"])
    );
    assert_eq!(
        a(json!({"name": "standard", "stopwords": ["fox"]}), "The fox"),
        json!(["the"])
    );
    let v = get(s, "/_search_analyze?analyzer=keyword&text=Ab%20C");
    assert_eq!(v["tokens"], json!(["Ab C"]));
    let e = |b: Value| error(&s.admin("POST", "/_search_analyze", Some(&b.to_string())));
    assert_eq!(e(json!({"text": "x"})).2, "analyzer parameter is mandatory");
    assert_eq!(
        e(json!({"analyzer": "standard"})).2,
        "text parameter is mandatory"
    );
    assert_eq!(e(json!({"analyzer": 3, "text": "x"})).0, 400);
    assert_eq!(e(json!({"analyzer": "klingon", "text": "x"})).0, 400);

    // Per-field analyzers in an index.
    let db = "csearch_analyzers";
    s.create_db(db);
    s.bulk(
        db,
        vec![
            json!({"_id": "a", "en": "running dogs", "kw": "Exact Value", "jp": "東京都に住む"}),
            json!({"_id": "b", "en": "a dog ran", "kw": "exact value", "jp": "京都"}),
        ],
    );
    let ddoc = json!({"indexes": {"i": {
        "analyzer": {"name": "perfield", "default": "english", "fields": {"kw": "keyword", "jp": "japanese"}},
        "index": "function(doc){ index('en', doc.en); index('kw', doc.kw); index('jp', doc.jp); }"}}});
    assert_eq!(put(s, &format!("/{db}/_design/a"), &ddoc).status, 201);
    let url = format!("/{db}/_design/a/_search/i");
    let q = |q: &str| {
        let mut v = ids(&post(s, &url, &json!({"q": q})));
        v.sort();
        v
    };
    assert_eq!(q("en:dog"), ["a", "b"]);
    assert_eq!(q("en:run"), ["a"]);
    assert_eq!(q("kw:\"Exact Value\""), ["a"]);
    assert_eq!(q("jp:京都"), ["a", "b"]);
    assert_eq!(q("jp:東京"), ["a"]);
}

#[test]
fn bad_requests_are_answered_as_couchdb_answers_them() {
    let s = shared();
    let db = "csearch_err";
    furniture(s, db);
    put(
        s,
        &format!("/{db}/_design/noidx"),
        &json!({"indexes": {"x": {"analyzer": "standard"}}}),
    );
    put(
        s,
        &format!("/{db}/_design/nofacet"),
        &json!({"indexes": {"x": {"index": "function(doc){ if (doc.type) index('type', doc.type); }"}}}),
    );
    let url = format!("/{db}/_design/shop/_search/things");
    let g = |q: &str| error(&s.admin("GET", &format!("{url}?{q}"), None));
    let p = |b: Value| error(&s.admin("POST", &url, Some(&b.to_string())));
    let e = |status: u16, err: &str, reason: &str| (status, err.to_string(), reason.to_string());
    assert_eq!(
        g("limit=3"),
        e(
            400,
            "query_parse_error",
            "Query must include a 'q' or 'query' argument"
        )
    );
    assert_eq!(
        g("q=a&limit=201"),
        e(
            400,
            "query_parse_error",
            "Value for limit is too large, must not exceed 200"
        )
    );
    assert_eq!(
        g("q=a&limit=-1"),
        e(
            400,
            "query_parse_error",
            "limit must be greater than or equal to zero"
        )
    );
    assert_eq!(
        g("q=a&stale=update_after"),
        e(400, "query_parse_error", "stale only available as stale=ok")
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
        g("q=a&group_field=type&group_limit=500"),
        e(
            400,
            "query_parse_error",
            "Value for group_limit is too large, must not exceed 200"
        )
    );
    assert_eq!(
        g("q=a&highlight_number=0"),
        e(
            400,
            "query_parse_error",
            "highlight_number must be greater than zero"
        )
    );
    assert_eq!(
        p(json!({"q": "a", "limit": "2"})),
        e(
            400,
            "query_parse_error",
            "Invalid value for limit: <<\"2\">>"
        )
    );
    assert_eq!(g("q=a&sort=x").0, 400, "sort is JSON");
    assert_eq!(
        p(json!({"q": "*:*", "sort": "a b"})),
        e(400, "bad_request", "Unrecognized sort parameter: a b")
    );
    assert_eq!(
        p(json!({"q": "*:*", "sort": "price<int>"})),
        e(400, "bad_request", "Unrecognized type: int")
    );
    assert_eq!(
        p(json!({"q": "*:*", "sort": "name"})),
        e(
            400,
            "bad_request",
            "cannot sort string field as numeric field"
        )
    );
    assert_eq!(
        p(json!({"q": "*:*", "group_field": "price<number>"})),
        e(
            400,
            "bad_request",
            "Group by number not supported. Group by string terms only."
        )
    );
    assert_eq!(
        p(json!({"q": "*:*", "counts": ["name"]})),
        e(400, "bad_request", "dimension \"name\" was not indexed")
    );
    assert_eq!(
        p(json!({"q": "*:*", "ranges": {"price": {"x": "cheap"}}})),
        e(
            400,
            "bad_request",
            "cheap was not a well-formed range specification"
        )
    );
    assert_eq!(p(json!({"q": "*:*", "drilldown": [["type", 3]]})).0, 400);
    let (status, err, reason) = p(json!({"q": "name:(sofa"}));
    assert_eq!((status, err.as_str()), (400, "bad_request"));
    assert!(reason.starts_with("Cannot parse 'name:(sofa'"), "{reason}");
    assert_eq!(p(json!({"q": "*:*", "bookmark": "not-one"})).0, 400);
    let b = post(s, &url, &json!({"q": "*:*", "sort": "price", "limit": 1}))["bookmark"].clone();
    assert_eq!(
        p(json!({"q": "*:*", "sort": ["type<string>", "price"], "bookmark": b})),
        e(
            400,
            "bad_request",
            "sort order not compatible with given bookmark"
        )
    );
    // An index without facets answers no counts at all.
    let v = post(
        s,
        &format!("/{db}/_design/nofacet/_search/x"),
        &json!({"q": "*:*", "counts": ["type"]}),
    );
    assert!(v.get("counts").is_none(), "{v}");
    assert_eq!(v["total_rows"], 5);
    let at = |path: &str| error(&s.admin("GET", &format!("/{db}/_design/{path}?q=a"), None));
    assert_eq!(
        at("shop/_search/nope"),
        e(404, "not_found", "nope not found.")
    );
    assert_eq!(at("none/_search/things"), e(404, "not_found", "missing"));
    assert_eq!(
        at("noidx/_search/x"),
        e(
            400,
            "invalid_design_doc",
            "index `x` must have parameter `index`"
        )
    );
    assert_eq!(
        error(&s.admin(
            "GET",
            "/csearch_no_db/_design/shop/_search/things?q=a",
            None
        ))
        .0,
        404
    );
    assert_eq!(
        g("q=a&partition=p"),
        e(
            400,
            "bad_request",
            "`partition` not supported on this index"
        )
    );
    let r = s.admin("PUT", &url, Some("{}"));
    assert_eq!(r.status, 405);
    let info = format!("/{db}/_design/shop/_search_info/things");
    assert_eq!(s.admin("POST", &info, Some("{}")).status, 405);
    assert_eq!(
        s.admin("GET", &format!("/{db}/_search_cleanup"), None)
            .status,
        405
    );
}

#[test]
fn edits_deletions_purges_and_cleanup_are_reflected() {
    let s = shared();
    let db = "csearch_edit";
    furniture(s, db);
    let url = format!("/{db}/_design/shop/_search/things");
    assert_eq!(get(s, &format!("{url}?q=sofa"))["total_rows"], 2);
    let f1 = get(s, &format!("/{db}/f1"));
    let rev = f1["_rev"].as_str().unwrap();
    s.bulk(
        db,
        vec![json!({"_id": "f1", "_rev": rev, "name": "Red leather armchair", "type": "chair", "price": 900})],
    );
    assert_eq!(ids(&get(s, &format!("{url}?q=sofa"))), ["f2"]);
    assert_eq!(ids(&get(s, &format!("{url}?q=armchair"))), ["f1"]);
    let f2 = get(s, &format!("/{db}/f2"));
    let r = s.admin(
        "DELETE",
        &format!("/{db}/f2?rev={}", f2["_rev"].as_str().unwrap()),
        None,
    );
    assert_eq!(r.status, 200);
    assert_eq!(get(s, &format!("{url}?q=sofa"))["total_rows"], 0);
    let f3 = get(s, &format!("/{db}/f3"));
    let r = s.admin(
        "POST",
        &format!("/{db}/_purge"),
        Some(&json!({"f3": [f3["_rev"]]}).to_string()),
    );
    assert_eq!(r.status, 201);
    assert_eq!(get(s, &format!("{url}?q=oak"))["total_rows"], 0);
    let v = post(
        s,
        &url,
        &json!({"q": "*:*", "counts": ["type"], "limit": 0}),
    );
    assert_eq!(v["counts"], json!({"type": {"chair": 2, "table": 1}}));
    // A changed index function builds a new index; cleanup removes the old.
    let prefix: String = db.bytes().map(|b| format!("{b:02x}")).collect();
    let indexes = || -> usize {
        std::fs::read_dir(s.dir.join("search"))
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{prefix}-"))
            })
            .map(|e| std::fs::read_dir(e.path()).unwrap().count())
            .sum()
    };
    assert_eq!(indexes(), 1);
    let dd = get(s, &format!("/{db}/_design/shop"));
    let mut dd2 = dd.clone();
    dd2["indexes"]["things"]["index"] =
        json!("function(doc){ if (doc.type) index('default', doc.type); }");
    assert_eq!(put(s, &format!("/{db}/_design/shop"), &dd2).status, 201);
    assert_eq!(ids(&get(s, &format!("{url}?q=table"))), ["f5"]);
    assert_eq!(indexes(), 2);
    let r = s.admin("POST", &format!("/{db}/_search_cleanup"), Some("{}"));
    assert_eq!(r.status, 202, "{r:?}");
    assert_eq!(r.json(), json!({"ok": true}));
    assert_eq!(indexes(), 1);
    assert_eq!(ids(&get(s, &format!("{url}?q=table"))), ["f5"]);
}

#[test]
fn a_partitioned_index_is_searched_by_partition() {
    let s = shared();
    let db = "csearch_part";
    assert_eq!(
        s.admin("PUT", &format!("/{db}?partitioned=true"), None)
            .status,
        201
    );
    s.bulk(
        db,
        vec![
            json!({"_id": "a:1", "t": "apple pie"}),
            json!({"_id": "a:2", "t": "apple tart"}),
            json!({"_id": "b:1", "t": "apple juice"}),
        ],
    );
    let ddoc = json!({"indexes": {"i": {"index": "function(doc){ index('default', doc.t, {store: true}); }"}}});
    assert_eq!(put(s, &format!("/{db}/_design/p"), &ddoc).status, 201);
    let v = get(
        s,
        &format!("/{db}/_partition/a/_design/p/_search/i?q=apple"),
    );
    let mut got = ids(&v);
    got.sort();
    assert_eq!(got, ["a:1", "a:2"]);
    let v = post(
        s,
        &format!("/{db}/_partition/b/_design/p/_search/i"),
        &json!({"q": "apple"}),
    );
    assert_eq!(ids(&v), ["b:1"]);
    let e = |r: Resp| error(&r);
    assert_eq!(
        e(s.admin("GET", &format!("/{db}/_design/p/_search/i?q=apple"), None)).2,
        "`partition` parameter is mandatory for queries to this index."
    );
    assert_eq!(
        e(s.admin(
            "GET",
            &format!("/{db}/_partition/a/_design/p/_search/i?q=apple&counts=%5B%22t%22%5D"),
            None
        ))
        .2,
        "`partition` and any of `drilldown`, `ranges`, `group_field`, `group_sort`, `group_limit` or `group_by` are incompatible"
    );
    // A global index in a partitioned database.
    let ddoc = json!({"options": {"partitioned": false}, "indexes": {"i": {"index": "function(doc){ index('default', doc.t); }"}}});
    assert_eq!(put(s, &format!("/{db}/_design/g"), &ddoc).status, 201);
    assert_eq!(
        get(s, &format!("/{db}/_design/g/_search/i?q=apple"))["total_rows"],
        3
    );
    assert_eq!(
        e(s.admin(
            "GET",
            &format!("/{db}/_partition/a/_design/g/_search/i?q=apple"),
            None
        ))
        .2,
        "`partition` not supported on this index"
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
const CATS: &[&str] = &["red", "green", "blue", "white"];

#[derive(Debug, Clone)]
struct Doc {
    id: String,
    words: Vec<String>,
    cat: Option<String>,
    n: f64,
}

/// A query in the test's own terms, with its Lucene text.
#[derive(Debug, Clone)]
enum Q {
    Word(String),
    Prefix(String),
    Cat(String),
    Range(f64, f64, bool),
    Phrase(String, String),
    And(Box<Q>, Box<Q>),
    Or(Box<Q>, Box<Q>),
    AndNot(Box<Q>, Box<Q>),
}

impl Q {
    fn text(&self) -> String {
        match self {
            // The default field.
            Q::Word(w) => w.clone(),
            Q::Prefix(p) => format!("{p}*"),
            Q::Cat(c) => format!("cat:{c}"),
            Q::Range(a, b, true) => format!("n:[{a} TO {b}]"),
            Q::Range(a, b, false) => format!("n:{{{a} TO {b}}}"),
            Q::Phrase(a, b) => format!("\"{a} {b}\""),
            Q::And(a, b) => format!("({}) AND ({})", a.text(), b.text()),
            Q::Or(a, b) => format!("({}) OR ({})", a.text(), b.text()),
            Q::AndNot(a, b) => format!("({}) AND NOT ({})", a.text(), b.text()),
        }
    }

    fn matches(&self, d: &Doc) -> bool {
        match self {
            Q::Word(w) => d.words.contains(w),
            Q::Prefix(p) => d.words.iter().any(|w| w.starts_with(p.as_str())),
            Q::Cat(c) => d.cat.as_deref() == Some(c),
            Q::Range(a, b, true) => d.n >= *a && d.n <= *b,
            Q::Range(a, b, false) => d.n > *a && d.n < *b,
            Q::Phrase(a, b) => d.words.windows(2).any(|p| p[0] == *a && p[1] == *b),
            Q::And(a, b) => a.matches(d) && b.matches(d),
            Q::Or(a, b) => a.matches(d) || b.matches(d),
            Q::AndNot(a, b) => a.matches(d) && !b.matches(d),
        }
    }

    fn generate(r: &mut Rng, depth: u32) -> Q {
        if depth == 0 || r.next().is_multiple_of(3) {
            return match r.next() % 5 {
                0 => Q::Cat(r.pick(CATS).into()),
                1 => {
                    let a = (r.next() % 100) as f64;
                    Q::Range(a, a + (r.next() % 40) as f64, r.next().is_multiple_of(2))
                }
                2 => Q::Phrase(r.pick(WORDS).into(), r.pick(WORDS).into()),
                3 => Q::Prefix(r.pick(WORDS)[..2].into()),
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
    let db = "csearch_gen";
    s.create_db(db);
    let mut r = Rng(7);
    let docs: Vec<Doc> = (0..300)
        .map(|i| Doc {
            id: format!("g{i:03}"),
            words: (0..1 + r.next() % 5)
                .map(|_| r.pick(WORDS).to_string())
                .collect(),
            cat: (i % 10 != 0).then(|| r.pick(CATS).to_string()),
            n: (r.next() % 120) as f64 + if i % 4 == 0 { 0.5 } else { 0.0 },
        })
        .collect();
    for chunk in docs.chunks(100) {
        s.bulk(
            db,
            chunk
                .iter()
                .map(|d| {
                    let title: Vec<String> = d
                        .words
                        .iter()
                        .map(|w| format!("{}{}", w[..1].to_uppercase(), &w[1..]))
                        .collect();
                    let mut doc = json!({"_id": d.id, "title": title.join(" "), "n": d.n});
                    if let Some(c) = &d.cat {
                        doc["cat"] = json!(c);
                    }
                    doc
                })
                .collect(),
        );
    }
    let ddoc = json!({"indexes": {"i": {"index": "function(doc){ if (doc.title) index('default', doc.title, {store: true}); if (doc.cat) index('cat', doc.cat, {facet: true}); if (typeof doc.n == 'number') index('n', doc.n, {facet: true, store: true}); }"}}});
    assert_eq!(put(s, &format!("/{db}/_design/g"), &ddoc).status, 201);
    let url = format!("/{db}/_design/g/_search/i");
    let mut nonempty = 0;
    for round in 0..150 {
        let q = Q::generate(&mut r, 2);
        let want: Vec<&Doc> = docs.iter().filter(|d| q.matches(d)).collect();
        let want_ids: BTreeSet<String> = want.iter().map(|d| d.id.clone()).collect();
        nonempty += usize::from(!want_ids.is_empty());
        // Hits sorted by n descending (then id), all of them by pages.
        let mut sorted = want.clone();
        sorted.sort_by(|a, b| b.n.total_cmp(&a.n).then_with(|| a.id.cmp(&b.id)));
        let sorted: Vec<String> = sorted.iter().map(|d| d.id.clone()).collect();
        let v = post(s, &url, &json!({"q": q.text(), "limit": 200, "sort": "-n"}));
        assert_eq!(
            v["total_rows"],
            want_ids.len(),
            "round {round}: {}",
            q.text()
        );
        // 200 is the most a page holds.
        let first = &sorted[..sorted.len().min(200)];
        assert_eq!(ids(&v), first, "round {round}: {}", q.text());
        if round % 5 == 0 {
            let mut paged = Vec::new();
            let mut bookmark = Value::Null;
            for _ in 0..100 {
                let v = post(
                    s,
                    &url,
                    &json!({"q": q.text(), "limit": 9, "sort": ["-n<number>"], "bookmark": bookmark}),
                );
                if v["rows"].as_array().unwrap().is_empty() {
                    break;
                }
                paged.extend(ids(&v));
                bookmark = v["bookmark"].clone();
            }
            assert_eq!(paged, sorted, "paged {}", q.text());
            // Relevance order pages join up to the same set.
            let mut paged = BTreeSet::new();
            let mut bookmark = Value::Null;
            for _ in 0..100 {
                let v = post(
                    s,
                    &url,
                    &json!({"q": q.text(), "limit": 11, "bookmark": bookmark}),
                );
                if v["rows"].as_array().unwrap().is_empty() {
                    break;
                }
                for id in ids(&v) {
                    assert!(paged.insert(id), "a hit twice: {}", q.text());
                }
                bookmark = v["bookmark"].clone();
            }
            assert_eq!(paged, want_ids, "relevance pages {}", q.text());
        }
        // Counts, ranges and a drilldown of the same query.
        if round % 3 == 0 {
            let cat = r.pick(CATS);
            let v = post(
                s,
                &url,
                &json!({"q": q.text(), "limit": 200, "counts": ["cat"],
                        "ranges": {"n": {"low": "[0 TO 40}", "high": "[40 TO Infinity]"}}}),
            );
            let mut counts: BTreeMap<String, u64> = BTreeMap::new();
            for d in &want {
                if let Some(c) = &d.cat {
                    *counts.entry(c.clone()).or_default() += 1;
                }
            }
            assert_eq!(v["counts"]["cat"], json!(counts), "{}", q.text());
            let low = want.iter().filter(|d| d.n < 40.0).count();
            assert_eq!(
                v["ranges"]["n"],
                json!({"low": low, "high": want.len() - low}),
                "{}",
                q.text()
            );
            let v = post(
                s,
                &url,
                &json!({"q": q.text(), "limit": 200, "drilldown": [["cat", cat]]}),
            );
            let drilled: BTreeSet<String> = want
                .iter()
                .filter(|d| d.cat.as_deref() == Some(cat))
                .map(|d| d.id.clone())
                .collect();
            assert_eq!(v["total_rows"], drilled.len());
            if drilled.len() <= 200 {
                assert_eq!(ids(&v).into_iter().collect::<BTreeSet<_>>(), drilled);
            }
            // Groups: each category's matches, best n first.
            let v = post(
                s,
                &url,
                &json!({"q": q.text(), "group_field": "cat", "sort": "-n", "limit": 3, "group_limit": 10}),
            );
            assert_eq!(v["total_rows"], want.len());
            let groups = v["groups"].as_array().unwrap();
            let mut by: BTreeMap<Option<String>, Vec<&Doc>> = BTreeMap::new();
            for d in &want {
                by.entry(d.cat.clone()).or_default().push(d);
            }
            assert_eq!(groups.len(), by.len(), "{}", q.text());
            for g in groups {
                let key = g["by"].as_str().map(str::to_string);
                let mut members = by[&key].clone();
                assert_eq!(g["total_rows"], members.len());
                members.sort_by(|a, b| b.n.total_cmp(&a.n).then_with(|| a.id.cmp(&b.id)));
                let first: Vec<String> = members.iter().take(3).map(|d| d.id.clone()).collect();
                assert_eq!(ids(g), first, "group {key:?} of {}", q.text());
            }
        }
    }
    assert!(
        nonempty > 50,
        "the generated queries mostly match something: {nonempty}"
    );
}

#[test]
fn a_mango_text_index_design_document_is_indexed_natively() {
    let s = shared();
    let db = "csearch_mango";
    s.create_db(db);
    s.bulk(
        db,
        vec![
            json!({"_id": "p1", "name": {"first": "Ann", "last": "Lee"}, "age": 30, "tags": ["x", "y"], "nick": "annie"}),
            json!({"_id": "p2", "name": {"first": "Bob", "last": "Stone"}, "age": 20, "tags": ["y"]}),
            json!({"_id": "p3", "name": {"first": "Cy", "last": "Lee"}, "age": 45, "tags": [], "active": true}),
            json!({"_id": "p4", "name": {"first": "Di"}, "age": 15, "note": null}),
        ],
    );
    // As CouchDB writes a Mango text index of all fields.
    let ddoc = json!({"language": "query", "indexes": {"all": {
        "index": {"default_analyzer": "keyword", "default_field": {}, "selector": {},
                  "partial_filter_selector": {}, "fields": "all_fields", "index_array_lengths": true},
        "analyzer": {"name": "perfield", "default": "keyword", "fields": {"$default": "standard"}}}}});
    assert_eq!(put(s, &format!("/{db}/_design/mt"), &ddoc).status, 201);
    let url = format!("/{db}/_design/mt/_search/all");
    let q = |q: &str| {
        let mut v = ids(&post(s, &url, &json!({"q": q, "limit": 200})));
        v.sort();
        v
    };
    assert_eq!(q("(name.first_3astring:\"Ann\")"), ["p1"]);
    // The keyword analyzer keeps case.
    assert_eq!(q("(name.first_3astring:\"ann\")"), Vec::<String>::new());
    assert_eq!(q("(name.last_3astring:\"Lee\")"), ["p1", "p3"]);
    assert_eq!(q("(age_3anumber:{20 TO *])"), ["p1", "p3"]);
    assert_eq!(q("(age_3anumber:[* TO 20])"), ["p2", "p4"]);
    assert_eq!(q("(tags._5b_5d_3astring:\"y\")"), ["p1", "p2"]);
    assert_eq!(q("(tags._5b_5d_3alength:0)"), ["p3"]);
    assert_eq!(q("(active_3aboolean:true)"), ["p3"]);
    assert_eq!(q("(note_3anull:true)"), ["p4"]);
    assert_eq!(q("(_5fid_3astring:\"p2\")"), ["p2"]);
    // $default: every string, standard-analyzed.
    assert_eq!(q("($default:\"lee\")"), ["p1", "p3"]);
    assert_eq!(q("($default:annie)"), ["p1"]);
    // $fieldnames: what Mango asks for $exists.
    assert_eq!(q("($fieldnames:nick_3a* OR $fieldnames:nick.*)"), ["p1"]);
    assert_eq!(
        q("($fieldnames:/.*/  AND NOT (($fieldnames:nick_3a* OR $fieldnames:nick.*)))"),
        ["p2", "p3", "p4"]
    );
    let v = post(
        s,
        &url,
        &json!({"q": "*:*", "sort": ["-age_3anumber<number>"]}),
    );
    assert_eq!(ids(&v), ["p3", "p1", "p2", "p4"]);
    let v = post(
        s,
        &url,
        &json!({"q": "*:*", "sort": "name.first_3astring<string>"}),
    );
    assert_eq!(ids(&v), ["p1", "p2", "p3", "p4"]);
    assert_eq!(
        error(&s.admin(
            "POST",
            &url,
            Some(&json!({"q": "name_3astring:/A.*/"}).to_string())
        ))
        .0,
        400
    );
    // Listed fields, a partial filter, no default field.
    let ddoc = json!({"language": "query", "indexes": {"some": {
        "index": {"default_analyzer": "keyword", "default_field": {"enabled": false},
                  "partial_filter_selector": {"age": {"$gte": 20}},
                  "fields": [{"name": "name.last", "type": "string"}], "index_array_lengths": false},
        "analyzer": "keyword"}}});
    assert_eq!(put(s, &format!("/{db}/_design/mt2"), &ddoc).status, 201);
    let url = format!("/{db}/_design/mt2/_search/some");
    let v = post(s, &url, &json!({"q": "*:*"}));
    assert_eq!(v["total_rows"], 3, "{v}");
    let v = post(s, &url, &json!({"q": "(age_3anumber:30)"}));
    assert_eq!(v["total_rows"], 0, "age is not a listed field");
    let v = post(s, &url, &json!({"q": "($default:lee)"}));
    assert_eq!(v["total_rows"], 0);
    let v = post(s, &url, &json!({"q": "(name.last_3astring:Lee)"}));
    assert_eq!(
        BTreeSet::from_iter(ids(&v)),
        BTreeSet::from(["p1".to_string(), "p3".to_string()])
    );
}

#[test]
fn a_restart_or_kill_keeps_the_index_without_a_rebuild() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = Server::start_in(tmp.path(), &[]);
    let db = "csearch_restart";
    furniture(&s, db);
    let url = format!("/{db}/_design/shop/_search/things");
    let before = post(&s, &url, &json!({"q": "*:*", "sort": "price"}));
    assert_eq!(before["total_rows"], 6);
    s.stop();
    let s = Server::start_in(tmp.path(), &[]);
    // stale=ok reads only what is on disk: all of it is there.
    let after = post(
        &s,
        &url,
        &json!({"q": "*:*", "sort": "price", "stale": "ok"}),
    );
    assert_eq!(ids(&after), ids(&before));
    let info = get(&s, &format!("/{db}/_design/shop/_search_info/things"));
    assert_eq!(info["search_index"]["committed_seq"], 7);
    // Writes after the restart are indexed from where the index was.
    s.bulk(
        db,
        vec![json!({"_id": "f9", "name": "bamboo shelf", "type": "shelf"})],
    );
    assert_eq!(ids(&get(&s, &format!("{url}?q=bamboo"))), ["f9"]);
    let info = get(&s, &format!("/{db}/_design/shop/_search_info/things"));
    assert_eq!(info["search_index"]["committed_seq"], 8);
    assert_eq!(info["search_index"]["doc_count"], 7);
    // A kill -9 loses nothing committed.
    s.kill9();
    let s = Server::start_in(tmp.path(), &[]);
    let v = post(
        &s,
        &url,
        &json!({"q": "*:*", "stale": "ok", "counts": ["type"], "limit": 0}),
    );
    assert_eq!(v["total_rows"], 7);
    assert_eq!(v["counts"]["type"]["shelf"], 1);
    s.stop();
}

/// Indexes in use catch up in the background a little after writes (as
/// views do): a `stale=ok` query right after a write sees the index as it
/// was, and one a few seconds later sees the write, with no query having
/// updated the index in between; a Nouveau index of the same design
/// document, opened by a query, catches up too.
#[test]
fn indexes_in_use_catch_up_in_the_background() {
    let s = shared();
    let db = "csearch_background";
    furniture(s, db);
    let ddoc = get(s, &format!("/{db}/_design/shop"));
    let mut with_nouveau = ddoc.clone();
    with_nouveau["nouveau"] = json!({"n": {"index":
        "function (doc) { if (doc.name) index('text', 'name', doc.name); }"}});
    assert_eq!(
        put(s, &format!("/{db}/_design/shop"), &with_nouveau).status,
        201
    );
    let url = format!("/{db}/_design/shop/_search/things");
    let nurl = format!("/{db}/_design/shop/_nouveau/n");
    assert_eq!(get(s, &format!("{url}?q=*:*"))["total_rows"], 6);
    assert_eq!(get(s, &format!("{nurl}?q=*:*"))["total_hits"], 6);

    s.bulk(
        db,
        vec![json!({"_id": "f7", "name": "rattan armchair", "type": "chair"})],
    );
    let stale = |q: &str| get(s, &format!("{url}?q={q}&stale=ok"))["total_rows"].clone();
    let nstale = |q: &str| get(s, &format!("{nurl}?q=name:{q}&update=false"))["total_hits"].clone();
    assert_eq!(stale("rattan"), 0, "updated before a whole interval passed");
    let caught_up = |f: &dyn Fn() -> bool| {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while std::time::Instant::now() < until {
            if f() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        false
    };
    assert!(
        caught_up(&|| stale("rattan") == 1 && nstale("rattan") == 1),
        "the write was not indexed in the background within 15 s"
    );
    // Deletions too.
    let f7 = get(s, &format!("/{db}/f7"));
    let r = s.admin(
        "DELETE",
        &format!("/{db}/f7?rev={}", f7["_rev"].as_str().unwrap()),
        None,
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        caught_up(&|| stale("rattan") == 0 && nstale("rattan") == 0),
        "the deletion was not indexed in the background within 15 s"
    );
    let info = get(s, &format!("/{db}/_design/shop/_search_info/things"));
    assert_eq!(info["search_index"]["doc_count"], 6, "{info}");
}
