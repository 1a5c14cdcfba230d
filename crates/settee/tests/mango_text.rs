//! Mango text indexes end to end, through the real server: `POST
//! /db/_index` with `"type": "text"` (every option, CouchDB's errors),
//! `GET /db/_index`, `DELETE /db/_index/{ddoc}/text/{name}`, `_find` with
//! `$text` and with any selector over a text index (sort, limit, skip,
//! bookmark, fields, r, conflicts, execution_stats, use_index), `_explain`
//! for a text index, partitioned text indexes, and a generated corpus:
//! seeded random documents and selectors, each `_find` on the text index
//! checked against an independent selector evaluator written here.

mod common;

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{shared, Resp, Server};
use serde_json::{json, Map, Value};

fn post(s: &Server, path: &str, body: &Value) -> Resp {
    s.admin("POST", path, Some(&body.to_string()))
}

fn ok(s: &Server, path: &str, body: &Value) -> Value {
    let r = post(s, path, body);
    assert_eq!(r.status, 200, "POST {path} {body}: {r:?}");
    r.json()
}

fn get(s: &Server, path: &str) -> Value {
    let r = s.admin("GET", path, None);
    assert_eq!(r.status, 200, "GET {path}: {r:?}");
    r.json()
}

fn ids(v: &Value) -> Vec<String> {
    v["docs"]
        .as_array()
        .expect("docs")
        .iter()
        .map(|d| d["_id"].as_str().expect("_id").to_string())
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn find(s: &Server, db: &str, body: Value) -> Value {
    ok(s, &format!("/{db}/_find"), &body)
}

fn err(s: &Server, path: &str, body: &Value) -> (u16, String, String) {
    post(s, path, body).error_triple()
}

fn people(s: &Server, db: &str) {
    s.create_db(db);
    s.bulk(
        db,
        vec![
            json!({"_id": "p1", "name": "Ramona Floyd", "age": 22, "city": "Boston", "tags": ["red", "blue"], "manager": true, "bio": "likes big cats and small dogs"}),
            json!({"_id": "p2", "name": "Stephanie Kirkland", "age": 31, "city": "Austin", "tags": ["green"], "manager": false, "bio": "big dogs"}),
            json!({"_id": "p3", "name": "Brown Bear", "age": 45, "city": "Boston", "tags": [], "manager": true, "nested": {"level": 2}}),
            json!({"_id": "p4", "name": "Ann Lee", "age": 22.5, "city": "Denver", "tags": ["red"], "bio": "cats"}),
            json!({"_id": "p5", "name": "Zed", "city": null, "tags": "red", "nested": {}}),
            json!({"_id": "_design/other", "views": {}}),
        ],
    );
}

#[test]
fn text_indexes_are_created_listed_and_deleted_as_couchdb_does() {
    let s = shared();
    let db = "mt_defs";
    people(s, db);
    let idx = format!("/{db}/_index");
    let body = json!({"type": "text", "ddoc": "t", "name": "all", "index": {}});
    let r = ok(s, &idx, &body);
    assert_eq!(
        r,
        json!({"result": "created", "id": "_design/t", "name": "all"})
    );
    assert_eq!(ok(s, &idx, &body)["result"], "exists");
    // Stored as CouchDB stores it, so replication carries it.
    let ddoc = get(s, &format!("/{db}/_design/t"));
    assert_eq!(ddoc["language"], "query");
    let member = &ddoc["indexes"]["all"];
    assert_eq!(member["index"]["fields"], "all_fields");
    assert_eq!(member["index"]["default_analyzer"], "keyword");
    assert_eq!(member["index"]["index_array_lengths"], true);
    assert_eq!(
        member["analyzer"],
        json!({"name": "perfield", "default": "keyword", "fields": {"$default": "standard"}})
    );
    // A second index with fields and options, named by a digest.
    let some = ok(
        s,
        &idx,
        &json!({"type": "text", "index": {
            "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "number"}],
            "default_field": {"enabled": false},
            "index_array_lengths": false,
            "partial_filter_selector": {"age": {"$gt": 0}}
        }}),
    );
    assert_eq!(some["result"], "created");
    assert!(some["id"].as_str().unwrap().starts_with("_design/"));
    let list = get(s, &idx);
    let texts: Vec<&Value> = list["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "text")
        .collect();
    assert_eq!(texts.len(), 2, "{list}");
    let all = texts.iter().find(|i| i["name"] == "all").unwrap();
    assert_eq!(all["ddoc"], "_design/t");
    assert_eq!(all["partitioned"], false);
    assert_eq!(all["def"]["fields"], json!([]));
    assert!(all["def"].get("partial_filter_selector").is_none());
    let other = texts.iter().find(|i| i["name"] != "all").unwrap();
    assert_eq!(
        other["def"]["fields"],
        json!([{"name": "string"}, {"age": "number"}])
    );
    assert_eq!(
        other["def"]["partial_filter_selector"],
        json!({"age": {"$gt": 0}})
    );
    assert_eq!(other["def"]["index_array_lengths"], false);

    // Bad definitions: CouchDB's errors.
    let bad = |index: Value| err(s, &idx, &json!({"type": "text", "index": index}));
    assert_eq!(bad(json!(["a"])).1, "invalid_index");
    assert!(bad(json!(["a"]))
        .2
        .starts_with("Text indexes must be an object"));
    assert_eq!(
        bad(json!({"fields": [{"name": "", "type": "string"}]})).1,
        "invalid_index_fields_definition"
    );
    assert_eq!(
        bad(json!({"fields": [{"name": "a", "type": "date"}]})).1,
        "invalid_index_fields_definition"
    );
    assert_eq!(
        bad(json!({"fields": ["a"]})).1,
        "invalid_index_fields_definition"
    );
    assert_eq!(
        bad(json!({"bogus": 1})),
        (
            400,
            "invalid_key".into(),
            "Invalid key bogus for this request.".into()
        )
    );
    assert_eq!(
        bad(json!({"index_array_lengths": "yes"})).1,
        "invalid_boolean"
    );
    assert_eq!(
        bad(json!({"partial_filter_selector": 3})).1,
        "invalid_selector_json"
    );
    assert_eq!(bad(json!({"default_analyzer": "nope"})).1, "invalid_index");
    assert_eq!(bad(json!({"default_field": {"analyzer": "nope"}})).0, 400);
    // Nouveau stays unavailable.
    assert_eq!(
        err(s, &idx, &json!({"type": "nouveau", "index": {}})).0,
        503
    );

    // Delete: the wrong type is missing; the last index takes the ddoc.
    let r = s.admin("DELETE", &format!("/{db}/_index/t/json/all"), None);
    assert_eq!(r.status, 404);
    let r = s.admin("DELETE", &format!("/{db}/_index/t/text/all"), None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        s.admin("GET", &format!("/{db}/_design/t"), None).status,
        404
    );
    let r = s.admin("DELETE", &format!("/{db}/_index/t/text/all"), None);
    assert_eq!(r.status, 404);
    // A text index beside a json index in one design document.
    ok(
        s,
        &idx,
        &json!({"ddoc": "mix", "name": "j", "index": {"fields": ["age"]}}),
    );
    ok(
        s,
        &idx,
        &json!({"ddoc": "mix", "name": "t", "type": "text", "index": {}}),
    );
    let r = s.admin("DELETE", &format!("/{db}/_index/mix/json/j"), None);
    assert_eq!(r.status, 200);
    let ddoc = get(s, &format!("/{db}/_design/mix"));
    assert!(ddoc["indexes"]["t"].is_object() && ddoc.get("views").is_none());
}

#[test]
fn find_over_a_text_index_answers_every_option() {
    let s = shared();
    let db = "mt_find";
    people(s, db);
    let fpath = format!("/{db}/_find");
    // `$text` without a text index: 400.
    let (st, e, _) = err(s, &fpath, &json!({"selector": {"$text": "cats"}}));
    assert_eq!((st, e.as_str()), (400, "no_usable_index"));
    ok(
        s,
        &format!("/{db}/_index"),
        &json!({"type": "text", "ddoc": "t", "name": "all", "index": {}}),
    );
    // `$text`: a phrase on `$default` (standard analyzer).
    let v = find(s, db, json!({"selector": {"$text": "cats"}}));
    assert_eq!(sorted(ids(&v)), ["p1", "p4"]);
    let v = find(s, db, json!({"selector": {"$text": "big dogs"}}));
    assert_eq!(ids(&v), ["p2"]);
    let v = find(s, db, json!({"selector": {"$text": "Boston"}}));
    assert_eq!(sorted(ids(&v)), ["p1", "p3"]);
    let v = find(
        s,
        db,
        json!({"selector": {"$text": "cats", "age": {"$gt": 22}}}),
    );
    assert_eq!(ids(&v), ["p4"]);
    let v = find(
        s,
        db,
        json!({"selector": {"$and": [{"$text": "Boston"}, {"manager": true}]}}),
    );
    assert_eq!(sorted(ids(&v)), ["p1", "p3"]);
    let (_, e, _) = err(
        s,
        &fpath,
        &json!({"selector": {"$text": "a", "$and": [{"$text": "b"}]}}),
    );
    assert_eq!(e, "multiple_text_selector");
    assert_eq!(
        err(s, &fpath, &json!({"selector": {"$text": 3}})).1,
        "bad_arg"
    );
    // Any selector, answered exactly.
    let sel = |sel: Value| {
        sorted(ids(&find(
            s,
            db,
            json!({"selector": sel, "use_index": "t", "allow_fallback": false}),
        )))
    };
    assert_eq!(sel(json!({"age": 22})), ["p1"]);
    assert_eq!(
        sel(json!({"age": {"$gte": 22, "$lt": 40}})),
        ["p1", "p2", "p4"]
    );
    assert_eq!(sel(json!({"city": {"$ne": "Boston"}})), ["p2", "p4", "p5"]);
    assert_eq!(sel(json!({"city": null})), ["p5"]);
    assert_eq!(sel(json!({"tags": {"$size": 0}})), ["p3"]);
    assert_eq!(sel(json!({"tags": {"$all": ["red", "blue"]}})), ["p1"]);
    assert_eq!(
        sel(json!({"tags": {"$elemMatch": {"$eq": "red"}}})),
        ["p1", "p4"]
    );
    assert_eq!(
        sel(json!({"tags": {"$in": ["green", "red"]}})),
        ["p1", "p2", "p4", "p5"]
    );
    assert_eq!(sel(json!({"tags": "red"})), ["p5"]);
    assert_eq!(sel(json!({"nested": {"$exists": true}})), ["p3", "p5"]);
    assert_eq!(sel(json!({"nested": {"$type": "object"}})), ["p3", "p5"]);
    assert_eq!(sel(json!({"nested.level": {"$gt": 1}})), ["p3"]);
    assert_eq!(sel(json!({"name": {"$regex": "^[A-B]"}})), ["p3", "p4"]);
    assert_eq!(sel(json!({"manager": {"$exists": false}})), ["p4", "p5"]);
    assert_eq!(sel(json!({"$not": {"manager": true}})), ["p2"]);
    assert_eq!(
        sel(json!({"$nor": [{"city": "Boston"}, {"age": {"$lt": 30}}]})),
        ["p2"]
    );
    assert_eq!(sel(json!({"tags.0": "red"})), ["p1", "p4"]);
    // Chosen without use_index when no json index serves the query.
    let v = find(
        s,
        db,
        json!({"selector": {"age": {"$gt": 30}}, "execution_stats": true}),
    );
    assert_eq!(sorted(ids(&v)), ["p2", "p3"]);
    assert!(v.get("warning").is_none(), "{v}");
    let st = &v["execution_stats"];
    assert_eq!(st["results_returned"], 2);
    assert!(st["total_docs_examined"].as_u64().unwrap() >= 2);
    // Sort by number and by string, explicit and inferred; pages.
    let v = find(
        s,
        db,
        json!({"selector": {"age": {"$gt": 0}}, "sort": [{"age:number": "desc"}]}),
    );
    assert_eq!(ids(&v), ["p3", "p2", "p4", "p1"]);
    let v = find(
        s,
        db,
        json!({"selector": {"age": {"$gt": 0}}, "sort": ["age"]}),
    );
    assert_eq!(ids(&v), ["p1", "p4", "p2", "p3"]);
    let v = find(
        s,
        db,
        json!({"selector": {"name": {"$gt": "A"}}, "sort": ["name"], "fields": ["name"]}),
    );
    assert_eq!(v["docs"][0], json!({"name": "Ann Lee"}));
    let (st, e, _) = err(
        s,
        &fpath,
        &json!({"selector": {"age": {"$gt": 0}}, "sort": ["city"]}),
    );
    assert_eq!((st, e.as_str()), (400, "text_sort_error"));
    let mut got = Vec::new();
    let mut bookmark = Value::Null;
    for _ in 0..10 {
        let v = find(
            s,
            db,
            json!({"selector": {"age": {"$gt": 0}}, "sort": ["age:number"], "limit": 1, "bookmark": bookmark}),
        );
        let page = ids(&v);
        if page.is_empty() {
            break;
        }
        got.extend(page);
        bookmark = v["bookmark"].clone();
    }
    assert_eq!(got, ["p1", "p4", "p2", "p3"]);
    let v = find(
        s,
        db,
        json!({"selector": {"age": {"$gt": 0}}, "sort": ["age:number"], "skip": 1, "limit": 2}),
    );
    assert_eq!(ids(&v), ["p4", "p2"]);
    let (_, e, _) = err(
        s,
        &fpath,
        &json!({"selector": {"age": {"$gt": 0}}, "use_index": "t", "bookmark": "garbage"}),
    );
    assert_eq!(e, "invalid_bookmark");
    // r, conflicts.
    let v = find(
        s,
        db,
        json!({"selector": {"age": 22}, "r": 2, "conflicts": true, "execution_stats": true}),
    );
    assert_eq!(ids(&v), ["p1"]);
    assert_eq!(v["execution_stats"]["total_quorum_docs_examined"], 1);
    // Design documents are never answered.
    assert!(!ids(&find(
        s,
        db,
        json!({"selector": {"_id": {"$gt": null}}, "use_index": "t", "limit": 100})
    ))
    .contains(&"_design/other".to_string()));
    // New documents are indexed before the query answers.
    s.bulk(
        db,
        vec![json!({"_id": "p6", "age": 99, "bio": "more cats"})],
    );
    let v = find(s, db, json!({"selector": {"$text": "cats"}}));
    assert_eq!(sorted(ids(&v)), ["p1", "p4", "p6"]);
    // A json index is preferred where it serves the query.
    ok(
        s,
        &format!("/{db}/_index"),
        &json!({"ddoc": "j", "name": "age", "index": {"fields": ["age"]}}),
    );
    let x = ok(
        s,
        &format!("/{db}/_explain"),
        &json!({"selector": {"age": {"$gt": 30}}}),
    );
    assert_eq!(x["index"]["type"], "json");
    let x = ok(
        s,
        &format!("/{db}/_explain"),
        &json!({"selector": {"age": {"$gt": 30}}, "use_index": ["t", "all"], "sort": [{"age:number": "desc"}], "limit": 3, "skip": 1, "fields": ["name"]}),
    );
    assert_eq!(x["index"]["type"], "text");
    assert_eq!(x["index"]["name"], "all");
    assert_eq!(x["limit"], 3);
    assert_eq!(x["skip"], 1);
    assert_eq!(x["fields"], json!(["name"]));
    assert_eq!(x["sort"], json!(["-age_3anumber<number>"]));
    let q = x["query"].as_str().unwrap();
    assert!(q.contains("age_3anumber:{30 TO Infinity]"), "{q}");
    let x = ok(
        s,
        &format!("/{db}/_explain"),
        &json!({"selector": {"$text": "cats"}}),
    );
    assert_eq!(x["query"], "($default:\"cats\")");
    assert_eq!(x["selector"]["$default"], json!({"$text": "cats"}));
    assert_eq!(x["sort"], "relevance");
    // A second text index: `$text` needs `use_index`.
    ok(
        s,
        &format!("/{db}/_index"),
        &json!({"type": "text", "ddoc": "t2", "name": "names", "index": {"fields": [{"name": "name", "type": "string"}]}}),
    );
    assert_eq!(
        err(s, &fpath, &json!({"selector": {"$text": "cats"}})).1,
        "multiple_text_indexes"
    );
    let v = find(
        s,
        db,
        json!({"selector": {"$text": "cats"}, "use_index": "t"}),
    );
    assert_eq!(sorted(ids(&v)), ["p1", "p4", "p6"]);
    let v = find(
        s,
        db,
        json!({"selector": {"name": "Zed"}, "use_index": ["t2", "names"]}),
    );
    assert_eq!(ids(&v), ["p5"]);
}

#[test]
fn partial_and_partitioned_text_indexes() {
    let s = shared();
    let db = "mt_part";
    let r = s.admin("PUT", &format!("/{db}?partitioned=true"), None);
    assert_eq!(r.status, 201, "{r:?}");
    s.bulk(
        db,
        vec![
            json!({"_id": "a:1", "n": 1, "t": "red fox"}),
            json!({"_id": "a:2", "n": 2, "t": "blue fox"}),
            json!({"_id": "b:1", "n": 3, "t": "red hen"}),
        ],
    );
    ok(
        s,
        &format!("/{db}/_index"),
        &json!({"type": "text", "ddoc": "t", "name": "i", "index": {}}),
    );
    let list = get(s, &format!("/{db}/_index"));
    let t = list["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "text")
        .unwrap()
        .clone();
    assert_eq!(t["partitioned"], true);
    let v = ok(
        s,
        &format!("/{db}/_partition/a/_find"),
        &json!({"selector": {"$text": "fox"}}),
    );
    assert_eq!(sorted(ids(&v)), ["a:1", "a:2"]);
    let v = ok(
        s,
        &format!("/{db}/_partition/b/_find"),
        &json!({"selector": {"$text": "red"}}),
    );
    assert_eq!(ids(&v), ["b:1"]);
    let v = ok(
        s,
        &format!("/{db}/_partition/a/_find"),
        &json!({"selector": {"n": {"$gt": 1}}}),
    );
    assert_eq!(ids(&v), ["a:2"]);
    // A global query cannot read a partitioned text index.
    let (st, _, _) = err(
        s,
        &format!("/{db}/_find"),
        &json!({"selector": {"$text": "fox"}}),
    );
    assert_eq!(st, 400);

    // A partial index answers only when named, and only its documents.
    let db = "mt_partial";
    people(s, db);
    ok(
        s,
        &format!("/{db}/_index"),
        &json!({"type": "text", "ddoc": "p", "name": "adults", "index": {"partial_filter_selector": {"age": {"$gt": 30}}}}),
    );
    let v = find(
        s,
        db,
        json!({"selector": {"city": "Boston"}, "use_index": "p"}),
    );
    assert_eq!(ids(&v), ["p3"]);
    let v = find(s, db, json!({"selector": {"city": "Boston"}}));
    assert_eq!(sorted(ids(&v)), ["p1", "p3"]);
}

// ------------------------------------------------------ generated corpus --

/// xorshift64*: the corpus is the same for a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

const WORDS: [&str; 7] = [
    "apple", "apricot", "banana", "berry", "cherry", "date", "fig",
];

fn number(r: &mut Rng) -> Value {
    let n = r.below(21) as i64 - 5;
    if r.chance(25) {
        json!(n as f64 + 0.5)
    } else {
        json!(n)
    }
}

fn scalar(r: &mut Rng) -> Value {
    match r.below(6) {
        0 | 1 => number(r),
        2 | 3 => json!(r.pick(&WORDS)),
        4 => json!(r.chance(50)),
        _ => Value::Null,
    }
}

fn any_value(r: &mut Rng, depth: u32) -> Value {
    match r.below(if depth > 1 { 6 } else { 8 }) {
        0..=5 => scalar(r),
        6 => Value::Array((0..r.below(4)).map(|_| scalar(r)).collect()),
        _ => {
            let mut m = Map::new();
            for k in ["x", "y"] {
                if r.chance(60) {
                    m.insert(k.into(), any_value(r, depth + 1));
                }
            }
            Value::Object(m)
        }
    }
}

fn document(r: &mut Rng, i: usize) -> Value {
    let mut m = Map::new();
    m.insert("_id".into(), json!(format!("d{i:04}")));
    let fields: [(&str, u64); 6] = [
        ("a", 80),
        ("b", 70),
        ("s", 70),
        ("t", 70),
        ("o", 60),
        ("e", 20),
    ];
    for (name, p) in fields {
        if !r.chance(p) {
            continue;
        }
        let v = match name {
            "b" => number(r),
            "s" => json!(r.pick(&WORDS)),
            "t" if r.chance(80) => Value::Array((0..r.below(5)).map(|_| scalar(r)).collect()),
            "e" => {
                if r.chance(50) {
                    json!({})
                } else {
                    json!([])
                }
            }
            _ => any_value(r, 0),
        };
        m.insert(name.into(), v);
    }
    Value::Object(m)
}

const PATHS: [&str; 9] = ["a", "b", "s", "t", "o", "o.x", "o.y", "t.0", "e"];

fn condition(r: &mut Rng) -> Value {
    match r.below(16) {
        0 | 1 => scalar(r),
        2 => json!({"$eq": scalar(r)}),
        3 => json!({"$ne": scalar(r)}),
        4 => json!({*r.pick(&["$gt", "$gte", "$lt", "$lte"]): number(r)}),
        5 => json!({*r.pick(&["$gt", "$gte", "$lt", "$lte"]): r.pick(&WORDS)}),
        6 => json!({"$exists": r.chance(50)}),
        7 => json!({"$type": r.pick(&["null", "boolean", "number", "string", "array", "object"])}),
        8 => json!({"$in": (0..1 + r.below(3)).map(|_| scalar(r)).collect::<Vec<_>>()}),
        9 => json!({"$nin": (0..1 + r.below(3)).map(|_| scalar(r)).collect::<Vec<_>>()}),
        10 => json!({"$all": (0..1 + r.below(2)).map(|_| scalar(r)).collect::<Vec<_>>()}),
        11 => json!({"$size": r.below(4)}),
        12 => json!({"$elemMatch": {"$eq": scalar(r)}}),
        13 => json!({"$regex": format!("^{}", &r.pick(&WORDS)[..2])}),
        14 => json!({"$not": {"$eq": scalar(r)}}),
        _ => json!({"$gt": number(r), "$lt": number(r)}),
    }
}

fn selector(r: &mut Rng, depth: u32) -> Value {
    let leaf = |r: &mut Rng| json!({*r.pick(&PATHS): condition(r)});
    if depth > 1 {
        return leaf(r);
    }
    match r.below(10) {
        0..=4 => leaf(r),
        5 => json!({"$and": [selector(r, depth + 1), selector(r, depth + 1)]}),
        6 => json!({"$or": [selector(r, depth + 1), selector(r, depth + 1)]}),
        7 => json!({"$not": selector(r, depth + 1)}),
        8 => json!({"$nor": [selector(r, depth + 1), selector(r, depth + 1)]}),
        _ => {
            let mut m = Map::new();
            for _ in 0..2 {
                m.insert(r.pick(&PATHS).to_string(), condition(r));
            }
            Value::Object(m)
        }
    }
}

// ---------------------------------------------- the independent evaluator --
// Mango's matching rules, written afresh from CouchDB's documentation: a
// condition on a missing field is false (but `$exists: false`), negations
// apply to the field conditions below them, values compare in CouchDB's
// collation (null < false < true < numbers < strings < arrays < objects).

fn rank(v: &Value) -> u8 {
    match v {
        Value::Null => 0,
        Value::Bool(false) => 1,
        Value::Bool(true) => 2,
        Value::Number(_) => 3,
        Value::String(_) => 4,
        Value::Array(_) => 5,
        Value::Object(_) => 6,
    }
}

fn cmp(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .unwrap()
            .partial_cmp(&y.as_f64().unwrap())
            .unwrap(),
        // The corpus's strings are lowercase ASCII: collation is byte order.
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let o = cmp(p, q);
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            for ((k1, v1), (k2, v2)) in x.iter().zip(y) {
                let o = k1.cmp(k2).then_with(|| cmp(v1, v2));
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

enum Found<'a> {
    Value(&'a Value),
    Missing,
    Bad,
}

fn lookup<'a>(doc: &'a Value, path: &str) -> Found<'a> {
    let mut v = doc;
    for seg in path.split('.') {
        v = match v {
            Value::Object(m) => match m.get(seg) {
                Some(x) => x,
                None => return Found::Missing,
            },
            Value::Array(items) => match seg.parse::<usize>().ok().and_then(|i| items.get(i)) {
                Some(x) => x,
                None => return Found::Bad,
            },
            _ => return Found::Bad,
        };
    }
    Found::Value(v)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// One operator on a found value.
fn op_holds(op: &str, arg: &Value, v: &Value) -> bool {
    let eq = |a: &Value, b: &Value| cmp(a, b) == Ordering::Equal;
    match op {
        "$eq" => eq(v, arg),
        "$ne" => !eq(v, arg),
        "$gt" => cmp(v, arg) == Ordering::Greater,
        "$gte" => cmp(v, arg) != Ordering::Less,
        "$lt" => cmp(v, arg) == Ordering::Less,
        "$lte" => cmp(v, arg) != Ordering::Greater,
        "$exists" => arg.as_bool().unwrap(),
        "$type" => type_name(v) == arg.as_str().unwrap(),
        "$in" | "$nin" => {
            let args = arg.as_array().unwrap();
            let hit = match v {
                Value::Array(items) => items.iter().any(|i| args.iter().any(|a| eq(i, a))),
                _ => args.iter().any(|a| eq(v, a)),
            };
            hit == (op == "$in")
        }
        "$all" => {
            let args = arg.as_array().unwrap();
            match v {
                Value::Array(items) => {
                    !args.is_empty() && args.iter().all(|a| items.iter().any(|i| eq(i, a)))
                }
                _ => false,
            }
        }
        "$size" => v
            .as_array()
            .is_some_and(|a| a.len() as u64 == arg.as_u64().unwrap()),
        "$elemMatch" => {
            let (op2, arg2) = arg.as_object().unwrap().iter().next().unwrap();
            v.as_array()
                .is_some_and(|items| items.iter().any(|i| op_holds(op2, arg2, i)))
        }
        "$regex" => {
            let prefix = arg.as_str().unwrap().trim_start_matches('^');
            v.as_str().is_some_and(|s| s.starts_with(prefix))
        }
        other => panic!("the generator makes no {other}"),
    }
}

/// A field's condition (an implicit `$eq`, operators, `$not`).
fn field_holds(doc: &Value, path: &str, cond: &Value, negated: bool) -> bool {
    match cond {
        Value::Object(ops) if ops.keys().all(|k| k.starts_with('$')) && !ops.is_empty() => {
            let mut results = ops.iter().map(|(op, arg)| {
                if op == "$not" {
                    field_holds(doc, path, arg, !negated)
                } else {
                    one(doc, path, op, arg, negated)
                }
            });
            if negated {
                results.any(|b| b)
            } else {
                results.all(|b| b)
            }
        }
        _ => one(doc, path, "$eq", cond, negated),
    }
}

fn one(doc: &Value, path: &str, op: &str, arg: &Value, negated: bool) -> bool {
    match lookup(doc, path) {
        Found::Value(v) => op_holds(op, arg, v) != negated,
        Found::Missing => op == "$exists" && arg.as_bool() == Some(negated),
        Found::Bad => false,
    }
}

fn matches(doc: &Value, sel: &Value, negated: bool) -> bool {
    let m = sel.as_object().unwrap();
    let mut results = m.iter().map(|(k, v)| match k.as_str() {
        "$and" | "$or" | "$nor" => {
            let items = v.as_array().unwrap();
            if items.is_empty() {
                return true;
            }
            // `$nor` is the `$and` of its negated items; a negation
            // turns `$and` into `$or` and back.
            let (any, child_negated) = match (k.as_str(), negated) {
                ("$and", false) => (false, false),
                ("$and", true) => (true, true),
                ("$or", false) => (true, false),
                ("$or", true) => (false, true),
                ("$nor", false) => (false, true),
                _ => (true, false),
            };
            let mut rs = items.iter().map(|i| matches(doc, i, child_negated));
            if any {
                rs.any(|b| b)
            } else {
                rs.all(|b| b)
            }
        }
        "$not" => matches(doc, v, !negated),
        field => field_holds(doc, field, v, negated),
    });
    if negated {
        results.any(|b| b)
    } else {
        results.all(|b| b)
    }
}

#[test]
fn generated_corpus_matches_an_independent_evaluation() {
    let s = shared();
    let db = "mt_corpus";
    s.create_db(db);
    let mut r = Rng(0x5e77_ee42_0000_0001);
    let docs: Vec<Value> = (0..400).map(|i| document(&mut r, i)).collect();
    for chunk in docs.chunks(200) {
        s.bulk(db, chunk.to_vec());
    }
    ok(
        s,
        &format!("/{db}/_index"),
        &json!({"type": "text", "ddoc": "t", "name": "all", "index": {}}),
    );
    let started = Instant::now();
    let (mut checked, mut nonempty, mut examined) = (0, 0, 0u64);
    for _ in 0..300 {
        if started.elapsed() > Duration::from_secs(90) {
            break;
        }
        let sel = selector(&mut r, 0);
        let want: BTreeSet<String> = docs
            .iter()
            .filter(|d| matches(d, &sel, false))
            .map(|d| d["_id"].as_str().unwrap().to_string())
            .collect();
        // `allow_fallback: false`: the text index answers, or the query fails.
        let v = find(
            s,
            db,
            json!({"selector": sel, "use_index": "t", "limit": 1000,
            "allow_fallback": false, "execution_stats": true}),
        );
        let got: BTreeSet<String> = ids(&v).into_iter().collect();
        assert_eq!(got, want, "selector {sel}");
        examined += v["execution_stats"]["total_keys_examined"]
            .as_u64()
            .unwrap();
        checked += 1;
        if !want.is_empty() {
            nonempty += 1;
        }
    }
    assert!(checked >= 100, "only {checked} selectors checked in time");
    assert!(
        nonempty >= checked / 4,
        "too few selectors match anything: {nonempty}/{checked}"
    );
    // The index narrows what is read: far fewer hits than documents.
    let scanned = checked as u64 * docs.len() as u64;
    eprintln!("corpus: {checked} selectors, {nonempty} with matches, {examined} hits of {scanned}");
    assert!(
        examined * 2 < scanned,
        "the index read {examined} of {scanned}"
    );
    // Sorted pages: `b` is a number where it is there.
    for _ in 0..20 {
        let extra = selector(&mut r, 1);
        let sel = json!({"$and": [{"b": {"$type": "number"}}, extra]});
        let mut want: Vec<(f64, String)> = docs
            .iter()
            .filter(|d| matches(d, &sel, false))
            .map(|d| {
                (
                    d["b"].as_f64().unwrap(),
                    d["_id"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        want.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then_with(|| a.1.cmp(&b.1)));
        let want: Vec<String> = want.into_iter().map(|w| w.1).collect();
        let mut got = Vec::new();
        let mut bookmark = Value::Null;
        for _ in 0..200 {
            let v = find(
                s,
                db,
                json!({"selector": sel, "use_index": "t", "allow_fallback": false,
                "sort": ["b:number"], "limit": 7, "bookmark": bookmark}),
            );
            let page = ids(&v);
            let n = page.len();
            got.extend(page);
            bookmark = v["bookmark"].clone();
            if n < 7 {
                break;
            }
        }
        assert_eq!(got, want, "sorted pages of {sel}");
    }
}
