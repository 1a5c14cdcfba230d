//! The query-server environment end to end, through the public API only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use settee_js::{DesignDoc, JsConfig, JsEngine, JsError, ValidateError};

fn engine(workers: usize) -> JsEngine {
    JsEngine::new(JsConfig {
        workers,
        ..JsConfig::default()
    })
    .unwrap()
}

fn ddoc(v: Value) -> DesignDoc {
    DesignDoc::new(&v).unwrap()
}

fn map_ddoc(maps: &[(&str, &str)]) -> DesignDoc {
    let mut views = serde_json::Map::new();
    for (name, src) in maps {
        views.insert(name.to_string(), json!({ "map": src }));
    }
    ddoc(json!({"_id": "_design/t", "views": views}))
}

/// The rows of one document, one Vec per view.
fn rows(out: &settee_js::MapOutput, doc: usize) -> Vec<Vec<(Value, Value)>> {
    out.docs[doc].clone().unwrap()
}

#[test]
fn emit_round_trips_every_json_type() {
    let e = engine(1);
    let d = map_ddoc(&[("all", "function (doc) { for (var i = 0; i < doc.values.length; i++) emit(doc.values[i], doc.values[i]); }")]);
    let values = json!([
        null, true, false, 0, 1, -1, 42, -9007199254740991i64, 9007199254740991i64,
        1.5, -0.25, 1e300, -1e-300, 5e-324, 1.7976931348623157e308, 0.1, 123456.789,
        "", "plain", "quote \" backslash \\ slash / tab \t newline \n nul \u{0}",
        "unicode: é ü 日本語 \u{1F600} \u{2028} \u{FEFF}",
        [], [1, [2, [3, [4]]]], {}, {"a": {"b": {"c": [null, {"d": "deep"}]}}},
        {"z": 1, "a": 2, "m": [true, null]}
    ]);
    let doc = json!({"_id": "x", "values": values});
    let out = e.map_docs(&d, &["all"], &[doc]).unwrap();
    let got = rows(&out, 0);
    let expected: Vec<(Value, Value)> = values
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v.clone(), v.clone()))
        .collect();
    assert_eq!(got, vec![expected]);
    // The same as JSON text input.
    let text = json!({"_id": "x", "values": values}).to_string();
    let out2 = e.map_docs(&d, &["all"], &[text.as_str()]).unwrap();
    assert_eq!(out2.docs, out.docs);
}

#[test]
fn emit_values_follow_javascript() {
    let e = engine(1);
    let d = map_ddoc(&[(
        "v",
        r#"function (doc) {
            emit(doc._id);                      // value undefined -> null
            emit([doc._id, 2], {u: undefined, n: NaN, i: -Infinity});
            emit("err", new TypeError("boom")); // Errors become {error, message}
            emit("date", new Date(0));          // toJSON is honoured
        }"#,
    )]);
    let out = e.map_docs(&d, &["v"], &[json!({"_id": "a"})]).unwrap();
    assert_eq!(
        rows(&out, 0),
        vec![vec![
            (json!("a"), Value::Null),
            (json!(["a", 2]), json!({"n": null, "i": null})),
            (
                json!("err"),
                json!({"error": "TypeError", "message": "boom"})
            ),
            (json!("date"), json!("1970-01-01T00:00:00.000Z")),
        ]]
    );
}

#[test]
fn globals_log_sum_tojson_isarray() {
    let e = engine(1);
    let d = map_ddoc(&[(
        "g",
        r#"function (doc) {
            log("hello " + doc._id);
            log({an: "object"});
            log(new Error("as json"));
            emit(sum([1, 2, 3.5]), toJSON({a: [1]}));
            emit(isArray([]), isArray({length: 0}));
            emit(JSON.stringify(doc.n), typeof JSON.parse);
        }"#,
    )]);
    let out = e
        .map_docs(&d, &["g"], &[json!({"_id": "a", "n": 7})])
        .unwrap();
    assert_eq!(
        rows(&out, 0),
        vec![vec![
            (json!(6.5), json!("{\"a\":[1]}")),
            (json!(true), json!(false)),
            (json!("7"), json!("function")),
        ]]
    );
    assert_eq!(
        out.logs,
        vec![
            "hello a".to_string(),
            r#"{"an":"object"}"#.to_string(),
            r#"{"error":"Error","message":"as json"}"#.to_string()
        ]
    );
}

#[test]
fn log_lines_are_bounded_per_call() {
    let e = JsEngine::new(JsConfig {
        workers: 1,
        log_lines_max: 3,
        ..JsConfig::default()
    })
    .unwrap();
    let d = map_ddoc(&[(
        "l",
        "function (doc) { for (var i = 0; i < 10; i++) log(i); }",
    )]);
    let out = e.map_docs(&d, &["l"], &[json!({"_id": "a"})]).unwrap();
    assert_eq!(out.logs, vec!["0", "1", "2"]);
    assert_eq!(out.logs_dropped, 7);
    // The next call starts with an empty buffer.
    let out = e.map_docs(&d, &["l"], &[json!({"_id": "b"})]).unwrap();
    assert_eq!(out.logs.len(), 3);
}

#[test]
fn require_modules_from_views_lib() {
    let e = engine(1);
    let d = ddoc(json!({
        "_id": "_design/lib",
        "views": {
            "lib": {
                "math": "exports.double = function (x) { return x * 2; }; exports.tag = require('./strings').tag;",
                "strings": "exports.tag = function (s) { return '<' + s + '>'; };",
                "deep": {
                    "nested": "var m = require('../math'); module.exports = { quad: function (x) { return m.double(m.double(x)); } };",
                    "abs": "exports.viaRoot = require('views/lib/math').double(21);"
                },
                "a": "exports.name = 'a'; var b = require('./b'); exports.sawB = b.name; exports.bSawA = b.sawA;",
                "b": "var a = require('./a'); exports.name = 'b'; exports.sawA = JSON.stringify(a);",
                "counter": "exports.loads = (globalThis.__loads = (globalThis.__loads || 0) + 1);"
            },
            "uses": {"map": "function (doc) { var m = require('views/lib/math'); emit(m.double(doc.n), m.tag('x')); }"},
            "nested": {"map": "function (doc) { emit(require('views/lib/deep/nested').quad(doc.n), require('views/lib/deep/abs').viaRoot); }"},
            "cycle": {"map": "function (doc) { var a = require('views/lib/a'); emit(a.sawB, a.bSawA); }"},
            "cached": {"map": "function (doc) { require('views/lib/counter'); emit(require('views/lib/counter').loads, null); }"},
            "bad": {"map": "function (doc) { emit(require('views/lib/nope'), 1); }"},
            "outside": {"map": "function (doc) { emit(require('validate_doc_update'), 1); }"}
        },
        "validate_doc_update": "function () {}"
    }));
    let out = e
        .map_docs(
            &d,
            &["uses", "nested", "cycle", "cached", "bad", "outside"],
            &[json!({"_id": "d", "n": 5})],
        )
        .unwrap();
    let r = rows(&out, 0);
    assert_eq!(r[0], vec![(json!(10), json!("<x>"))]);
    assert_eq!(r[1], vec![(json!(20), json!(42))]);
    // a requires b requires a: b sees the empty stand-in for a, as in CouchDB.
    assert_eq!(r[2], vec![(json!("b"), json!("{}"))]);
    // A module is evaluated once per function, however often it is required.
    assert_eq!(r[3], vec![(json!(1), Value::Null)]);
    // A bad path only costs that function its rows; the error is logged.
    assert_eq!(r[4], vec![]);
    assert_eq!(r[5], vec![], "map functions see only views.lib");
    assert!(
        out.logs.iter().any(|l| l.contains("invalid_require_path")
            && l.contains("nope")
            && l.contains("with doc._id d")),
        "{:?}",
        out.logs
    );
}

#[test]
fn require_errors_in_modules_are_compilation_errors() {
    let e = engine(1);
    let d = ddoc(json!({
        "_id": "_design/x",
        "lib": {"broken": "exports.x = ;", "throws": "throw new Error('module failed');"},
        "filters": {
            "broken": "function (doc, req) { return require('lib/broken').x; }",
            "throws": "function (doc, req) { return require('lib/throws'); }",
            "ok": "function (doc, req) { return require('./lib/missing'); }"
        }
    }));
    let err = e
        .filter(&d, "broken", &[json!({"_id": "a"})], &json!({}))
        .unwrap_err();
    assert_eq!(err.couch_error(), "compilation_error", "{err}");
    assert!(
        err.couch_reason()
            .contains("Module require('lib/broken') raised error SyntaxError"),
        "{err}"
    );
    let err = e
        .filter(&d, "throws", &[json!({"_id": "a"})], &json!({}))
        .unwrap_err();
    assert!(err.couch_reason().contains("module failed"), "{err}");
    let err = e
        .filter(&d, "ok", &[json!({"_id": "a"})], &json!({}))
        .unwrap_err();
    assert_eq!(err.couch_error(), "invalid_require_path", "{err}");
}

#[test]
fn throwing_map_skips_only_that_doc_and_function() {
    let e = engine(1);
    let d = map_ddoc(&[
        ("picky", "function (doc) { if (doc.bad) throw new Error('bad doc ' + doc._id); emit(doc._id, 1); }"),
        ("all", "function (doc) { emit(doc._id, 2); }"),
        ("typo", "function (doc) { emit(doc.missing.field, 3); }"),
    ]);
    let docs = [
        json!({"_id": "a"}),
        json!({"_id": "b", "bad": true}),
        json!({"_id": "c"}),
    ];
    let out = e.map_docs(&d, &["picky", "all", "typo"], &docs).unwrap();
    assert_eq!(
        rows(&out, 0),
        vec![
            vec![(json!("a"), json!(1))],
            vec![(json!("a"), json!(2))],
            vec![]
        ]
    );
    assert_eq!(
        rows(&out, 1),
        vec![vec![], vec![(json!("b"), json!(2))], vec![]]
    );
    assert_eq!(
        rows(&out, 2),
        vec![
            vec![(json!("c"), json!(1))],
            vec![(json!("c"), json!(2))],
            vec![]
        ]
    );
    assert!(
        out.logs.contains(
            &"function raised exception Error: bad doc b with doc._id b (view picky)".to_string()
        ),
        "{:?}",
        out.logs
    );
    assert_eq!(
        out.logs.iter().filter(|l| l.contains("TypeError")).count(),
        3,
        "{:?}",
        out.logs
    );
}

#[test]
fn fatal_error_ends_the_map_call() {
    let e = engine(1);
    let d = map_ddoc(&[(
        "f",
        "function (doc) { if (doc.stop) throw 'fatal_error'; emit(1, 1); }",
    )]);
    let err = e
        .map_docs(
            &d,
            &["f"],
            &[json!({"_id": "a"}), json!({"_id": "b", "stop": 1})],
        )
        .unwrap_err();
    assert_eq!(
        err,
        JsError::Runtime {
            name: "map_runtime_error".into(),
            reason: "function raised 'fatal_error'".into()
        }
    );
    // The worker goes on.
    assert!(e.map_docs(&d, &["f"], &[json!({"_id": "a"})]).is_ok());
}

#[test]
fn documents_are_sealed_between_map_functions() {
    let e = engine(1);
    let d = map_ddoc(&[
        ("mutate", "function (doc) { doc.name = 'changed'; doc.list.push(4); doc.nested.x = 9; delete doc._id; emit(doc.name, doc.nested.x); }"),
        ("strict", "function (doc) { 'use strict'; doc.name = 'again'; emit('never', 1); }"),
        ("look", "function (doc) { emit(doc._id, [doc.name, doc.list.length, doc.nested.x]); }"),
    ]);
    let out = e
        .map_docs(
            &d,
            &["mutate", "strict", "look"],
            &[json!({"_id": "a", "name": "orig", "list": [1, 2, 3], "nested": {"x": 1}})],
        )
        .unwrap();
    let r = rows(&out, 0);
    // list.push throws on a frozen array, so "mutate" emits nothing...
    assert_eq!(r[0], vec![]);
    // ...a strict-mode write throws too...
    assert_eq!(r[1], vec![]);
    // ...and the next function sees the document as it came.
    assert_eq!(r[2], vec![(json!("a"), json!(["orig", 3, 1]))]);
}

#[test]
fn invalid_documents_get_their_own_error() {
    let e = engine(1);
    let d = map_ddoc(&[("m", "function (doc) { emit(doc._id, null); }")]);
    let docs = [
        "{\"_id\":\"a\"}",
        "not json",
        "[1,2]",
        "  {\"_id\":\"b\"}  ",
    ];
    let out = e.map_docs(&d, &["m"], &docs).unwrap();
    assert_eq!(rows(&out, 0), vec![vec![(json!("a"), Value::Null)]]);
    assert!(matches!(out.docs[1], Err(JsError::InvalidInput { .. })));
    assert!(matches!(out.docs[2], Err(JsError::InvalidInput { .. })));
    assert_eq!(rows(&out, 3), vec![vec![(json!("b"), Value::Null)]]);
    // Rows that cannot be serialised spoil only their document.
    let d = map_ddoc(&[(
        "cyc",
        "function (doc) { var o = {}; if (doc.cyclic) o.self = o; emit(doc._id, o); }",
    )]);
    let out = e
        .map_docs(
            &d,
            &["cyc"],
            &[json!({"_id": "a"}), json!({"_id": "b", "cyclic": true})],
        )
        .unwrap();
    assert_eq!(rows(&out, 0), vec![vec![(json!("a"), json!({}))]]);
    assert!(
        matches!(&out.docs[1], Err(JsError::Runtime { name, .. }) if name == "TypeError"),
        "{:?}",
        out.docs[1]
    );
    assert_eq!(out.docs.len(), 2);
    // No documents at all.
    assert_eq!(
        e.map_docs::<Value, _>(&d, &["cyc"], &[]).unwrap().docs,
        vec![]
    );
}

#[test]
fn function_sources_in_the_forms_couchdb_accepts() {
    let e = engine(1);
    let d = map_ddoc(&[
        ("plain", "function(doc){emit(1,1)}"),
        (
            "comments",
            "  // leading comment\n/* block */ function (doc) { emit(2, 2); } // trailing comment",
        ),
        ("named", "function byId(doc) { emit(3, 3); }"),
        ("semicolon", "function (doc) { emit(4, 4); };\n"),
        ("program", "var k = 5; (function (doc) { emit(k, 5); })"),
        ("arrow", "(doc) => emit(6, 6)"),
    ]);
    let out = e
        .map_docs(
            &d,
            &[
                "plain",
                "comments",
                "named",
                "semicolon",
                "program",
                "arrow",
            ],
            &[json!({"_id": "a"})],
        )
        .unwrap();
    let r = rows(&out, 0);
    for (i, rs) in r.iter().enumerate() {
        let n = i as i64 + 1;
        assert_eq!(rs, &vec![(json!(n), json!(n))], "function {i}");
    }
}

#[test]
fn compilation_errors_and_missing_functions() {
    let e = engine(1);
    let d = map_ddoc(&[
        ("syntax", "function (doc) { emit(doc._id, ; }"),
        ("notfn", "42"),
        ("ok", "function (doc) { emit(1, 1); }"),
    ]);
    let err = e
        .map_docs(&d, &["ok", "syntax"], &[json!({"_id": "a"})])
        .unwrap_err();
    assert_eq!(err.couch_error(), "compilation_error");
    assert!(err.couch_reason().starts_with("SyntaxError: "), "{err}");
    assert!(
        err.couch_reason()
            .ends_with("(function (doc) { emit(doc._id, ; })"),
        "{err}"
    );
    let err = e
        .map_docs(&d, &["notfn"], &[json!({"_id": "a"})])
        .unwrap_err();
    assert_eq!(
        err,
        JsError::Compilation {
            reason: "Expression does not eval to a function. (42)".into()
        }
    );
    let err = e
        .map_docs(&d, &["nosuchview"], &[json!({"_id": "a"})])
        .unwrap_err();
    assert_eq!(
        err,
        JsError::NotFound {
            reason: "missing views function nosuchview on design doc _design/t".into()
        }
    );
    let err = e.reduce(&d, "ok", &[]).unwrap_err();
    assert_eq!(err.couch_error(), "not_found");
    let err = e
        .filter(&d, "nofilter", &[json!({"_id": "a"})], &json!({}))
        .unwrap_err();
    assert_eq!(err.couch_error(), "not_found");
    let err = e
        .validate(&d, &json!({}), None, &json!({}), &json!({}))
        .unwrap_err();
    assert_eq!(err.couch_error(), "not_found");
    // A compilation failure is not cached: the fixed design document works.
    let fixed = map_ddoc(&[("syntax", "function (doc) { emit(doc._id, 1); }")]);
    assert!(e
        .map_docs(&fixed, &["syntax"], &[json!({"_id": "a"})])
        .is_ok());
}

#[test]
fn design_document_checks() {
    assert!(matches!(
        DesignDoc::new(&json!([])),
        Err(JsError::InvalidInput { .. })
    ));
    assert!(matches!(
        DesignDoc::new(&json!({"views": {}})),
        Err(JsError::InvalidInput { .. })
    ));
    assert!(matches!(
        DesignDoc::new(&json!({"_id": "_design/e", "language": "erlang"})),
        Err(JsError::UnsupportedLanguage { language }) if language == "erlang"
    ));
    let a = DesignDoc::new(&json!({"_id": "_design/a", "language": "javascript", "views": {}}))
        .unwrap();
    let same =
        DesignDoc::from_json(r#"{"_id":"_design/a","language":"javascript","views":{}}"#).unwrap();
    let other =
        DesignDoc::new(&json!({"_id": "_design/a", "language": "javascript", "views": {"v": {}}}))
            .unwrap();
    assert_eq!(a.signature(), same.signature());
    assert_ne!(a.signature(), other.signature());
    assert_eq!(a.signature().len(), 32);
    assert_eq!(a.id(), "_design/a");
}

#[test]
fn timeout_interrupts_an_endless_map_and_the_worker_serves_the_next_job() {
    let e = JsEngine::new(JsConfig {
        workers: 1,
        timeout: Duration::from_millis(200),
        ..JsConfig::default()
    })
    .unwrap();
    let d = map_ddoc(&[
        (
            "spin",
            "function (doc) { if (doc.spin) { while (true) {} } emit(doc._id, 1); }",
        ),
        (
            "catchy",
            "function (doc) { try { while (true) {} } catch (e) { emit('caught', 1); } }",
        ),
    ]);
    let start = Instant::now();
    let err = e
        .map_docs(
            &d,
            &["spin"],
            &[json!({"_id": "a"}), json!({"_id": "loops", "spin": true})],
        )
        .unwrap_err();
    let took = start.elapsed();
    assert!(
        matches!(&err, JsError::Timeout { doc_id: Some(id), .. } if id == "loops"),
        "{err:?}"
    );
    assert_eq!(err.couch_error(), "os_process_error");
    assert_eq!(err.couch_reason(), "OS process timed out.");
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(3),
        "{took:?}"
    );
    // An interrupt cannot be caught by the function.
    let err = e
        .map_docs(&d, &["catchy"], &[json!({"_id": "b"})])
        .unwrap_err();
    assert!(matches!(err, JsError::Timeout { .. }), "{err:?}");
    // Catastrophic regular-expression backtracking is interrupted too.
    let re = map_ddoc(&[("re", "function (doc) { emit(/(a+)+b/.test(doc.s), 1); }")]);
    let err = e
        .map_docs(&re, &["re"], &[json!({"_id": "r", "s": "a".repeat(40)})])
        .unwrap_err();
    assert!(matches!(err, JsError::Timeout { .. }), "{err:?}");
    // The same worker (there is one) answers the next call at once.
    let out = e.map_docs(&d, &["spin"], &[json!({"_id": "c"})]).unwrap();
    assert_eq!(rows(&out, 0), vec![vec![(json!("c"), json!(1))]]);
    let s = e.stats();
    assert_eq!(s.timeouts, 3);
    assert_eq!(s.runtimes_started, 1, "a timeout keeps the runtime");
}

#[test]
fn a_source_stopped_while_compiling_fails_at_once_the_next_time() {
    let timeout = Duration::from_millis(400);
    let e = JsEngine::new(JsConfig {
        workers: 1,
        timeout,
        ..JsConfig::default()
    })
    .unwrap();
    // Not a function expression: evaluating it loops at the top level.
    let d = map_ddoc(&[
        ("v", "while(true){}"),
        ("ok", "function (doc) { emit(1, 2); }"),
    ]);
    let start = Instant::now();
    let first = e.compile_view(&d, "v", false).unwrap_err();
    assert!(matches!(first, JsError::Timeout { .. }), "{first:?}");
    assert!(start.elapsed() >= timeout);
    let again = Instant::now();
    let second = e.compile_view(&d, "v", false).unwrap_err();
    assert_eq!(
        (second.couch_error(), second.couch_reason()),
        ("os_process_error", "OS process timed out.".to_string())
    );
    assert!(again.elapsed() < timeout / 2, "{:?}", again.elapsed());
    let err = e.map_docs(&d, &["v"], &[json!({"_id": "a"})]).unwrap_err();
    assert!(matches!(err, JsError::Timeout { .. }), "{err:?}");
    assert!(again.elapsed() < timeout / 2, "{:?}", again.elapsed());
    // Other functions of the design document are not affected.
    let out = e.map_docs(&d, &["ok"], &[json!({"_id": "a"})]).unwrap();
    assert_eq!(rows(&out, 0), vec![vec![(json!(1), json!(2))]]);
}

#[test]
fn a_stopped_source_is_remembered_beyond_its_context() {
    // One context per worker (ddoc_cache_max 1): compiling another design
    // document evicts the looping one's context, where the first version
    // of this memory lived; a copy compiled after that still fails at once.
    let timeout = Duration::from_millis(300);
    let e = JsEngine::new(JsConfig {
        workers: 1,
        timeout,
        ddoc_cache_max: 1,
        ..JsConfig::default()
    })
    .unwrap();
    let looping = map_ddoc(&[("v", "while(true){}")]);
    let err = e.compile_view(&looping, "v", false).unwrap_err();
    assert!(matches!(err, JsError::Timeout { .. }), "{err:?}");
    let other = map_ddoc(&[("w", "function (doc) { emit(1, 2); }")]);
    e.compile_view(&other, "w", false).unwrap();
    let again = Instant::now();
    let err = e.compile_view(&looping, "v", false).unwrap_err();
    assert_eq!(
        (err.couch_error(), err.couch_reason()),
        ("os_process_error", "OS process timed out.".to_string())
    );
    assert!(again.elapsed() < timeout / 2, "{:?}", again.elapsed());
    assert_eq!(e.stats().ddoc_cache_evictions, 2);
}

#[test]
fn the_timeout_is_per_document() {
    // Each document takes ~60 ms; the batch takes far longer than the 300 ms
    // timeout, but no single document does.
    let e = JsEngine::new(JsConfig {
        workers: 1,
        timeout: Duration::from_millis(300),
        ..JsConfig::default()
    })
    .unwrap();
    let d = map_ddoc(&[(
        "slow",
        "function (doc) { var t = Date.now(); while (Date.now() - t < 60) {} emit(doc._id, 1); }",
    )]);
    let docs: Vec<Value> = (0..10).map(|i| json!({"_id": format!("d{i}")})).collect();
    let out = e.map_docs(&d, &["slow"], &docs).unwrap();
    assert_eq!(out.docs.len(), 10);
    assert!(out.docs.iter().all(|r| r.is_ok()));
}

#[test]
fn timeouts_in_reduce_validate_and_filters() {
    let e = JsEngine::new(JsConfig {
        workers: 1,
        timeout: Duration::from_millis(100),
        ..JsConfig::default()
    })
    .unwrap();
    let d = ddoc(json!({
        "_id": "_design/slow",
        "views": {"v": {"map": "function (doc) { for (;;) {} }", "reduce": "function () { for (;;) {} }"}},
        "validate_doc_update": "function () { for (;;) {} }",
        "filters": {"f": "function () { for (;;) {} }"}
    }));
    assert!(matches!(
        e.reduce(&d, "v", &[(json!(["k", "id"]), json!(1))]),
        Err(JsError::Timeout { .. })
    ));
    assert!(matches!(
        e.rereduce(&d, "v", &[json!(1)]),
        Err(JsError::Timeout { .. })
    ));
    assert!(matches!(
        e.validate(&d, &json!({}), None, &json!({}), &json!({})),
        Err(ValidateError::Js(JsError::Timeout { .. }))
    ));
    assert!(matches!(
        e.filter(&d, "f", &[json!({"_id": "x"})], &json!({})),
        Err(JsError::Timeout {
            doc_id: Some(_),
            ..
        })
    ));
    assert!(matches!(
        e.filter_view(&d, "v", &[json!({"_id": "x"})]),
        Err(JsError::Timeout { .. })
    ));
    assert_eq!(e.stats().timeouts, 5);
}

#[test]
fn memory_limit_is_an_error_and_the_worker_recovers() {
    let e = JsEngine::new(JsConfig {
        workers: 1,
        memory_limit_bytes: 32 << 20,
        ..JsConfig::default()
    })
    .unwrap();
    let d = map_ddoc(&[
        (
            "hog",
            "function (doc) { var a = []; for (;;) { a.push(new Array(100000).fill(doc._id)); } }",
        ),
        (
            "big",
            "function (doc) { emit(doc._id, new Array(50000000).fill(1).length); }",
        ),
        ("fine", "function (doc) { emit(doc._id, 1); }"),
    ]);
    let err = e
        .map_docs(&d, &["hog"], &[json!({"_id": "a"})])
        .unwrap_err();
    assert_eq!(
        err,
        JsError::OutOfMemory {
            limit_bytes: 32 << 20
        }
    );
    let out = e.map_docs(&d, &["fine"], &[json!({"_id": "b"})]).unwrap();
    assert_eq!(rows(&out, 0), vec![vec![(json!("b"), json!(1))]]);
    let err = e
        .map_docs(&d, &["big"], &[json!({"_id": "c"})])
        .unwrap_err();
    assert!(matches!(err, JsError::OutOfMemory { .. }), "{err:?}");
    let out = e.map_docs(&d, &["fine"], &[json!({"_id": "d"})]).unwrap();
    assert_eq!(rows(&out, 0), vec![vec![(json!("d"), json!(1))]]);
    let s = e.stats();
    assert_eq!(s.out_of_memory, 2);
    assert_eq!(
        s.runtimes_started, 3,
        "each out-of-memory error replaced the runtime"
    );
}

#[test]
fn reduce_and_rereduce() {
    let e = engine(1);
    let d = ddoc(json!({
        "_id": "_design/r",
        "views": {
            "sum": {"map": "function (doc) { emit(doc._id, doc.n); }", "reduce": "function (keys, values, rereduce) { return sum(values); }"},
            "shape": {"map": "function (doc) {}", "reduce": "function (keys, values, rereduce) { return {keys: keys, n: values.length, rereduce: rereduce}; }"},
            "stats": {"map": "function (doc) {}", "reduce": "function (k, v, re) { if (re) { return v.reduce(function (a, b) { return {min: Math.min(a.min, b.min), max: Math.max(a.max, b.max)}; }); } return {min: Math.min.apply(null, v), max: Math.max.apply(null, v)}; }"},
            "throws": {"map": "function (doc) {}", "reduce": "function (k, v) { throw new Error('nope'); }"},
            "undef": {"map": "function (doc) {}", "reduce": "function (k, v) { }"}
        }
    }));
    let kvs = vec![
        (json!(["a", "d1"]), json!(1)),
        (json!(["b", "d2"]), json!(2)),
        (json!(["c", "d3"]), json!(3.5)),
    ];
    assert_eq!(e.reduce(&d, "sum", &kvs).unwrap(), json!(6.5));
    assert_eq!(
        e.rereduce(&d, "sum", &[json!(6.5), json!(10)]).unwrap(),
        json!(16.5)
    );
    assert_eq!(
        e.reduce(&d, "shape", &kvs[..2]).unwrap(),
        json!({"keys": [["a", "d1"], ["b", "d2"]], "n": 2, "rereduce": false})
    );
    assert_eq!(
        e.rereduce(&d, "shape", &[json!(1)]).unwrap(),
        json!({"keys": null, "n": 1, "rereduce": true})
    );
    assert_eq!(
        e.reduce(&d, "stats", &kvs).unwrap(),
        json!({"min": 1, "max": 3.5})
    );
    assert_eq!(
        e.rereduce(
            &d,
            "stats",
            &[json!({"min": 1, "max": 3}), json!({"min": -2, "max": 0})]
        )
        .unwrap(),
        json!({"min": -2, "max": 3})
    );
    // A reduce function that throws gives null, as in CouchDB (and is logged).
    assert_eq!(e.reduce(&d, "throws", &kvs).unwrap(), Value::Null);
    assert_eq!(e.reduce(&d, "undef", &kvs).unwrap(), Value::Null);
    assert_eq!(e.reduce(&d, "sum", &[]).unwrap(), json!(0));
}

#[test]
fn reduce_overflow_error_when_output_does_not_shrink() {
    let d = ddoc(json!({
        "_id": "_design/r",
        "views": {
            "grow": {"map": "function (doc) {}", "reduce": "function (keys, values, rereduce) { return values.concat(values); }"},
            "keep": {"map": "function (doc) {}", "reduce": "function (keys, values) { return values; }"},
            "small": {"map": "function (doc) {}", "reduce": "function (keys, values) { return values.slice(0, 10); }"}
        }
    }));
    let kvs: Vec<(Value, Value)> = (0..400)
        .map(|i| {
            (
                json!([i, format!("doc{i}")]),
                json!(format!("value-{i:05}")),
            )
        })
        .collect();
    let values: Vec<Value> = kvs.iter().map(|(_, v)| v.clone()).collect();
    let e = engine(1);
    let err = e.reduce(&d, "grow", &kvs).unwrap_err();
    assert_eq!(err.couch_error(), "reduce_overflow_error");
    assert!(
        err.couch_reason()
            .starts_with("Reduce output must shrink more rapidly: input size: "),
        "{err}"
    );
    assert!(matches!(
        e.rereduce(&d, "grow", &values),
        Err(JsError::ReduceOverflow { .. })
    ));
    // Output more than half the input (values alone are ~45% of the kvs) is refused too...
    assert!(matches!(
        e.rereduce(&d, "keep", &values),
        Err(JsError::ReduceOverflow { .. })
    ));
    // ...while small output, or output under 4096 characters, is not.
    assert_eq!(
        e.reduce(&d, "small", &kvs)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        10
    );
    assert_eq!(
        e.rereduce(&d, "keep", &values[..50])
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        50
    );
    // With reduce_limit off, anything goes.
    let lax = JsEngine::new(JsConfig {
        workers: 1,
        reduce_limit: false,
        ..JsConfig::default()
    })
    .unwrap();
    assert_eq!(
        lax.reduce(&d, "grow", &kvs)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        800
    );
}

#[test]
fn validate_doc_update_answers() {
    let e = engine(1);
    let d = ddoc(json!({
        "_id": "_design/auth",
        "validate_doc_update": r#"function (newDoc, oldDoc, userCtx, secObj) {
            if (newDoc.kind === "forbidden") throw({forbidden: "not allowed: " + newDoc._id});
            if (newDoc.kind === "unauthorized") throw({unauthorized: "log in, " + userCtx.name});
            if (newDoc.kind === "other") throw({oops: "something else"});
            if (newDoc.kind === "string") throw "just a string";
            if (newDoc.kind === "type") return newDoc.a.b.c;
            if (newDoc.kind === "this") { if (this._id !== "_design/auth") throw({forbidden: "this is " + this._id}); return; }
            if (newDoc.kind === "old" && oldDoc === null) throw({forbidden: "no old doc"});
            if (newDoc.kind === "old" && oldDoc.v >= newDoc.v) throw({forbidden: "v must grow"});
            if (newDoc.kind === "admin" && secObj.admins.names.indexOf(userCtx.name) < 0) throw({unauthorized: "admins only"});
        }"#
    }));
    let user = json!({"name": "bob", "roles": []});
    let sec = json!({"admins": {"names": ["alice"], "roles": []}});
    let v = |doc: Value, old: Option<Value>| e.validate(&d, &doc, old.as_ref(), &user, &sec);
    assert_eq!(v(json!({"_id": "a"}), None), Ok(()));
    assert_eq!(
        v(json!({"_id": "a", "kind": "forbidden"}), None),
        Err(ValidateError::Forbidden("not allowed: a".into()))
    );
    assert_eq!(
        v(json!({"_id": "a", "kind": "unauthorized"}), None),
        Err(ValidateError::Unauthorized("log in, bob".into()))
    );
    assert_eq!(
        v(json!({"_id": "a", "kind": "other"}), None),
        Err(ValidateError::Unknown("something else".into()))
    );
    assert_eq!(
        v(json!({"_id": "a", "kind": "string"}), None),
        Err(ValidateError::Unknown("just a string".into()))
    );
    let err = v(json!({"_id": "a", "kind": "type"}), None).unwrap_err();
    assert!(
        matches!(&err, ValidateError::Js(JsError::Runtime { name, .. }) if name == "TypeError"),
        "{err:?}"
    );
    assert_eq!(err.couch_error(), "TypeError");
    assert_eq!(v(json!({"_id": "a", "kind": "this"}), None), Ok(()));
    assert_eq!(
        v(json!({"_id": "a", "kind": "old", "v": 1}), None),
        Err(ValidateError::Forbidden("no old doc".into()))
    );
    assert_eq!(
        v(
            json!({"_id": "a", "kind": "old", "v": 2}),
            Some(json!({"v": 1}))
        ),
        Ok(())
    );
    assert_eq!(
        v(
            json!({"_id": "a", "kind": "old", "v": 1}),
            Some(json!({"v": 1}))
        ),
        Err(ValidateError::Forbidden("v must grow".into()))
    );
    assert_eq!(
        v(json!({"_id": "a", "kind": "admin"}), None),
        Err(ValidateError::Unauthorized("admins only".into()))
    );
    assert_eq!(
        ValidateError::Forbidden("x".into()).couch_error(),
        "forbidden"
    );
}

#[test]
fn filters_and_view_filters() {
    let e = engine(1);
    let d = ddoc(json!({
        "_id": "_design/f",
        "filters": {
            "typed": "function (doc, req) { return doc.type === req.query.type; }",
            "truthy": "function (doc, req) { return doc.v; }",
            "usesThis": "function (doc) { return this._id === '_design/f' && doc._id !== 'b'; }",
            "throws": "function (doc) { if (doc._id === 'b') throw new Error('filter failed'); return true; }"
        },
        "views": {"even": {"map": "function (doc) { if (doc.n % 2 === 0) emit(doc.n, null); }"}}
    }));
    let docs = [
        json!({"_id": "a", "type": "post", "v": 1, "n": 2}),
        json!({"_id": "b", "type": "comment", "v": "", "n": 3}),
        json!({"_id": "c", "type": "post", "v": [], "n": 4}),
    ];
    assert_eq!(
        e.filter(&d, "typed", &docs, &json!({"query": {"type": "post"}}))
            .unwrap(),
        vec![true, false, true]
    );
    assert_eq!(
        e.filter(&d, "truthy", &docs, &json!({})).unwrap(),
        vec![true, false, true]
    );
    assert_eq!(
        e.filter(&d, "usesThis", &docs, &json!({})).unwrap(),
        vec![true, false, true]
    );
    let err = e.filter(&d, "throws", &docs, &json!({})).unwrap_err();
    assert_eq!(
        err,
        JsError::Runtime {
            name: "Error".into(),
            reason: "filter failed".into()
        }
    );
    assert_eq!(
        e.filter_view(&d, "even", &docs).unwrap(),
        vec![true, false, true]
    );
    assert_eq!(
        e.filter_view(&d, "even", &[r#"{"_id":"t","n":10}"#])
            .unwrap(),
        vec![true]
    );
    assert!(matches!(
        e.filter(&d, "typed", &["nope"], &json!({})),
        Err(JsError::InvalidInput { .. })
    ));
    // Filtering with a view does not disturb mapping with it.
    let out = e.map_docs(&d, &["even"], &docs).unwrap();
    assert_eq!(rows(&out, 2), vec![vec![(json!(4), Value::Null)]]);
}

#[test]
fn many_threads_call_at_once() {
    let e = Arc::new(engine(2));
    let d = map_ddoc(&[("m", "function (doc) { emit(doc.n, doc.n * 2); }")]);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let e = Arc::clone(&e);
            let d = d.clone();
            std::thread::spawn(move || {
                for round in 0..20 {
                    let docs: Vec<Value> = (0..50)
                        .map(|i| json!({"_id": format!("{t}-{round}-{i}"), "n": t * 1000 + i}))
                        .collect();
                    let out = e.map_docs(&d, &["m"], &docs).unwrap();
                    for (i, r) in out.docs.iter().enumerate() {
                        let n = t * 1000 + i;
                        assert_eq!(r.as_ref().unwrap(), &vec![vec![(json!(n), json!(n * 2))]]);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = e.stats();
    assert_eq!(s.calls, 160);
    assert!(s.ddoc_cache_misses <= 2, "{s:?}");
}

#[test]
fn async_calls_from_a_tokio_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let e = Arc::new(engine(2));
    let d = ddoc(json!({
        "_id": "_design/a",
        "views": {"m": {"map": "function (doc) { emit(doc._id, 1); }", "reduce": "function (k, v) { return sum(v); }"}},
        "filters": {"all": "function () { return true; }"},
        "validate_doc_update": "function (doc) { if (!doc.ok) throw({forbidden: 'no'}); }"
    }));
    rt.block_on(async {
        let futures: Vec<_> = (0..16)
            .map(|i| e.map_docs_async(&d, &["m"], &[json!({"_id": format!("d{i}")})]))
            .collect();
        // The futures own their inputs: spawn them.
        let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
        for (i, h) in handles.into_iter().enumerate() {
            let out = h.await.unwrap().unwrap();
            assert_eq!(
                out.docs[0].as_ref().unwrap()[0],
                vec![(json!(format!("d{i}")), json!(1))]
            );
        }
        assert_eq!(
            e.reduce_async(&d, "m", &[(json!(["k", "d"]), json!(2))])
                .await
                .unwrap(),
            json!(2)
        );
        assert_eq!(
            e.rereduce_async(&d, "m", &[json!(2), json!(3)])
                .await
                .unwrap(),
            json!(5)
        );
        assert_eq!(
            e.filter_async(&d, "all", &[json!({"_id": "x"})], &json!({}))
                .await
                .unwrap(),
            vec![true]
        );
        assert_eq!(
            e.filter_view_async(&d, "m", &[json!({"_id": "x"})])
                .await
                .unwrap(),
            vec![true]
        );
        assert_eq!(
            e.validate_async(&d, &json!({"ok": false}), None, &json!({}), &json!({}))
                .await,
            Err(ValidateError::Forbidden("no".into()))
        );
        // The blocking API still works on a runtime thread (it only blocks it).
        assert_eq!(
            e.filter(&d, "all", &[json!({"_id": "y"})], &json!({}))
                .unwrap(),
            vec![true]
        );
    });
}

#[test]
fn compiled_functions_are_cached_and_evicted_by_the_bound() {
    let e = JsEngine::new(JsConfig {
        workers: 1,
        ddoc_cache_max: 2,
        ..JsConfig::default()
    })
    .unwrap();
    let make = |i: usize| map_ddoc(&[("m", &format!("function (doc) {{ emit(doc._id, {i}); }}"))]);
    let (a, b, c) = (make(1), make(2), make(3));
    let doc = [json!({"_id": "x"})];
    for _ in 0..5 {
        e.map_docs(&a, &["m"], &doc).unwrap();
    }
    let s = e.stats();
    assert_eq!(
        (s.functions_compiled, s.ddoc_cache_misses, s.ddoc_cache_hits),
        (1, 1, 4)
    );
    // The same content under a new DesignDoc value is the same signature.
    let a_again = make(1);
    e.map_docs(&a_again, &["m"], &doc).unwrap();
    assert_eq!(e.stats().functions_compiled, 1);
    // A third design document evicts the least recently used (a).
    e.map_docs(&b, &["m"], &doc).unwrap();
    e.map_docs(&a, &["m"], &doc).unwrap(); // a is now the most recent
    e.map_docs(&c, &["m"], &doc).unwrap(); // evicts b
    let s = e.stats();
    assert_eq!((s.functions_compiled, s.ddoc_cache_evictions), (3, 1));
    e.map_docs(&a, &["m"], &doc).unwrap(); // still cached
    assert_eq!(e.stats().functions_compiled, 3);
    let out = e.map_docs(&b, &["m"], &doc).unwrap(); // compiled again
    assert_eq!(rows(&out, 0), vec![vec![(json!("x"), json!(2))]]);
    let s = e.stats();
    assert_eq!((s.functions_compiled, s.ddoc_cache_evictions), (4, 2));
}

#[test]
fn design_documents_do_not_share_globals() {
    let e = engine(1);
    let polluter = ddoc(json!({
        "_id": "_design/polluter",
        "views": {"m": {"map": "function (doc) { globalThis.shared = 'polluted'; JSON.stringify = function () { return 'hijacked'; }; emit = function () {}; Array.prototype.push = null; }"}}
    }));
    let victim = map_ddoc(&[(
        "m",
        "function (doc) { emit(typeof shared, JSON.stringify([1])); }",
    )]);
    e.map_docs(&polluter, &["m"], &[json!({"_id": "a"})])
        .unwrap();
    let out = e.map_docs(&victim, &["m"], &[json!({"_id": "a"})]).unwrap();
    assert_eq!(
        rows(&out, 0),
        vec![vec![(json!("undefined"), json!("[1]"))]]
    );
    // The polluter's own later calls still produce well-formed answers.
    let out = e
        .map_docs(&polluter, &["m"], &[json!({"_id": "b"})])
        .unwrap();
    assert_eq!(rows(&out, 0), vec![vec![]]);
}

#[test]
fn shutdown_finishes_queued_calls() {
    let e = Arc::new(engine(1));
    let d = map_ddoc(&[(
        "m",
        "function (doc) { var t = Date.now(); while (Date.now() - t < 20) {} emit(doc._id, 1); }",
    )]);
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let e = Arc::clone(&e);
            let d = d.clone();
            std::thread::spawn(move || e.map_docs(&d, &["m"], &[json!({"_id": format!("{i}")})]))
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap().is_ok());
    }
    drop(Arc::try_unwrap(e).expect("last reference"));
}

#[test]
fn a_full_queue_makes_callers_wait_not_fail() {
    let e = Arc::new(
        JsEngine::new(JsConfig {
            workers: 1,
            queue_max: 1,
            ..JsConfig::default()
        })
        .unwrap(),
    );
    let d = map_ddoc(&[(
        "m",
        "function (doc) { var t = Date.now(); while (Date.now() - t < 5) {} emit(doc._id, 1); }",
    )]);
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (e, d) = (Arc::clone(&e), d.clone());
            std::thread::spawn(move || {
                for i in 0..3 {
                    let out = e
                        .map_docs(&d, &["m"], &[json!({"_id": format!("{t}-{i}")})])
                        .unwrap();
                    assert_eq!(
                        rows(&out, 0),
                        vec![vec![(json!(format!("{t}-{i}")), json!(1))]]
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(e.stats().calls, 18);
}

#[test]
fn index_functions_give_their_calls_per_document() {
    let e = engine(1);
    let d = ddoc(
        json!({"_id": "_design/s", "lib": {"m": "exports.f = function(x){ return x + '!'; }"},
        "nouveau": {"i": {"index": "function(doc){ if (doc.bad) throw new Error('no'); var m = require('lib/m'); index('text', 't', m.f(doc.t), {store: true}); index('double', 'n', doc.n); index('stored', 'u', doc.missing); }"}}}),
    );
    let out = e
        .index_docs(
            &d,
            "nouveau",
            "i",
            &[
                json!({"_id": "a", "t": "x", "n": 2}),
                json!({"_id": "b", "bad": true}),
                json!({"_id": "c", "t": "y", "n": 3}),
            ],
        )
        .unwrap();
    assert_eq!(
        out.docs[0].as_ref().unwrap(),
        &vec![
            vec![
                json!("text"),
                json!("t"),
                json!("x!"),
                json!({"store": true})
            ],
            vec![json!("double"), json!("n"), json!(2)],
            vec![json!("stored"), json!("u"), Value::Null],
        ]
    );
    assert!(out.docs[1].is_err(), "a document the function throws for");
    assert_eq!(out.docs[2].as_ref().unwrap()[1][2], json!(3));
    assert!(
        out.logs.iter().any(|l| l.contains("with doc._id b")),
        "{:?}",
        out.logs
    );
    // A missing index function is the call's error.
    assert!(e
        .index_docs(&d, "nouveau", "nope", &[json!({"_id": "a"})])
        .is_err());
}

/// `"language": "coffeescript"`: every function is translated by the
/// CoffeeScript compiler first (maps, reduces, filters alike); one that does
/// not translate, or does not make a function, is a compilation error that
/// quotes the source as written; JavaScript in such a document is not
/// CoffeeScript and fails; other languages stay refused.
#[test]
fn coffeescript_design_documents_are_translated() {
    let e = engine(1);
    let d = ddoc(json!({
        "_id": "_design/c",
        "language": "coffeescript",
        "views": {
            "v": {"map": "(doc) ->\n  emit \"#{doc.name}-#{i}\", i * 2 for i in doc.items when i > 1 if doc.items?"},
            "bad": {"map": "(doc) -> emit doc.n,, 1"},
            "nofn": {"map": "x = 1"}
        },
        "filters": {"f": "(doc, req) -> doc.keep is true"}
    }));
    assert!(d.is_coffee());
    let doc = json!({"_id": "a", "name": "alpha", "items": [1, 2, 3]});
    let out = e.map_docs(&d, &["v"], &[doc]).unwrap();
    assert_eq!(
        rows(&out, 0),
        vec![vec![
            (json!("alpha-2"), json!(4)),
            (json!("alpha-3"), json!(6))
        ]]
    );
    for (view, says) in [
        ("bad", "unexpected ,"),
        ("nofn", "does not eval to a function"),
    ] {
        let err = e.map_docs(&d, &[view], &[json!({"_id": "a"})]).unwrap_err();
        assert_eq!(err.couch_error(), "compilation_error", "{err}");
        let reason = err.couch_reason();
        assert!(reason.contains(says), "{view}: {reason}");
        assert!(reason.ends_with(")"), "{view}: {reason}");
    }
    let kept = e
        .filter(
            &d,
            "f",
            &[json!({"_id": "a", "keep": true}), json!({"_id": "b"})],
            &json!({}),
        )
        .unwrap();
    assert_eq!(kept, vec![true, false]);
    // A JavaScript function in a CoffeeScript document is not CoffeeScript.
    let js = ddoc(json!({"_id": "_design/j", "language": "coffeescript",
        "views": {"v": {"map": "function (doc) { emit(doc._id, null); }"}}}));
    let err = e.map_docs(&js, &["v"], &[json!({"_id": "a"})]).unwrap_err();
    assert_eq!(err.couch_error(), "compilation_error", "{err}");
    let other = DesignDoc::new(&json!({"_id": "_design/p", "language": "python"})).unwrap_err();
    assert!(
        matches!(other, JsError::UnsupportedLanguage { .. }),
        "{other}"
    );
}
