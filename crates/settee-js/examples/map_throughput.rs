//! Map throughput: `emit(doc._id, 1)` over small documents, in docs/s.
//!
//!     CARGO_TARGET_DIR=/work/target-js cargo run -p settee-js --release --example map_throughput [DOCS] [BATCH] [all|1|2]
//!
//! Part 1 runs the engine (the real path: caller serialises, a worker parses
//! the batch inside QuickJS, seals each document, runs the function,
//! stringifies the rows; the caller parses them) on one worker and on all,
//! with documents given as `serde_json::Value` and as JSON text.
//!
//! Part 2 measures, on a bare QuickJS context, the alternatives considered
//! for moving documents in and rows out (see docs/adr/0004-javascript-engine.md):
//! JSON text parsed by QuickJS vs objects built through the rquickjs API, one
//! call per batch vs one call per document, rows out as JSON text vs read
//! back through the API, and the cost of sealing and of the per-document
//! deadline `tick`.

use std::sync::Arc;
use std::time::Instant;

use rquickjs::{Array, Context, Function, Object, Runtime, Value as JsValue};
use serde_json::{json, Value};
use settee_js::{DesignDoc, JsConfig, JsEngine};

fn make_docs(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            json!({
                "_id": format!("{i:010}"),
                "_rev": "1-967a00dff5e02add41819138abb3284d",
                "type": if i % 3 == 0 { "post" } else { "comment" },
                "n": i,
                "tags": ["a", "b"],
                "title": "a small document"
            })
        })
        .collect()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

/// Maps all `docs` in batches of `batch`, from `callers` threads at once; docs/s.
fn run_engine<D>(
    engine: &Arc<JsEngine>,
    ddoc: &DesignDoc,
    docs: &Arc<Vec<D>>,
    batch: usize,
    callers: usize,
) -> f64
where
    D: settee_js::JsonDoc + Send + Sync + 'static,
{
    let start = Instant::now();
    let chunks: Vec<(usize, usize)> = (0..docs.len())
        .step_by(batch)
        .map(|s| (s, (s + batch).min(docs.len())))
        .collect();
    let chunks = Arc::new(chunks);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let threads: Vec<_> = (0..callers)
        .map(|_| {
            let (engine, ddoc, docs, chunks, next) = (
                Arc::clone(engine),
                ddoc.clone(),
                Arc::clone(docs),
                Arc::clone(&chunks),
                Arc::clone(&next),
            );
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(s, e)) = chunks.get(i) else { break };
                let out = engine.map_docs(&ddoc, &["by_id"], &docs[s..e]).unwrap();
                assert_eq!(out.docs.len(), e - s);
                assert!(out.docs[0].as_ref().unwrap()[0].len() == 1);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    docs.len() as f64 / start.elapsed().as_secs_f64()
}

fn part1(n: usize, batch: usize) {
    let docs = make_docs(n);
    let texts: Arc<Vec<String>> = Arc::new(docs.iter().map(|d| d.to_string()).collect());
    let docs = Arc::new(docs);
    let ddoc = DesignDoc::new(&json!({"_id": "_design/bench", "views": {"by_id": {"map": "function (doc) { emit(doc._id, 1); }"}}})).unwrap();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "part 1: engine, {n} docs of ~{} bytes, batches of {batch}, {cores} CPUs",
        texts[0].len()
    );
    for &(workers, callers) in &[(1usize, 1usize), (1, 2), (cores, cores), (cores, 2 * cores)] {
        let engine = Arc::new(
            JsEngine::new(JsConfig {
                workers,
                ..JsConfig::default()
            })
            .unwrap(),
        );
        // Warm-up: runtimes, contexts, compiled functions.
        run_engine(&engine, &ddoc, &docs, batch, callers);
        let mut values = Vec::new();
        let mut text = Vec::new();
        for _ in 0..5 {
            values.push(run_engine(&engine, &ddoc, &docs, batch, callers));
            text.push(run_engine(&engine, &ddoc, &texts, batch, callers));
        }
        println!(
            "  workers {workers}, caller threads {callers}: Value docs {:>8.0} docs/s, JSON-text docs {:>8.0} docs/s (median of 5)",
            median(values),
            median(text)
        );
    }
}

/// Builds a JS value from a serde value through the API (the alternative to JSON.parse).
fn to_js<'js>(ctx: &rquickjs::Ctx<'js>, v: &Value) -> rquickjs::Result<JsValue<'js>> {
    Ok(match v {
        Value::Null => JsValue::new_null(ctx.clone()),
        Value::Bool(b) => JsValue::new_bool(ctx.clone(), *b),
        Value::Number(n) => JsValue::new_number(ctx.clone(), n.as_f64().unwrap()),
        Value::String(s) => rquickjs::String::from_str(ctx.clone(), s)?.into_value(),
        Value::Array(a) => {
            let arr = Array::new(ctx.clone())?;
            for (i, x) in a.iter().enumerate() {
                arr.set(i, to_js(ctx, x)?)?;
            }
            arr.into_value()
        }
        Value::Object(o) => {
            let obj = Object::new(ctx.clone())?;
            for (k, x) in o {
                obj.set(k.as_str(), to_js(ctx, x)?)?;
            }
            obj.into_value()
        }
    })
}

/// Reads a JS value back into a serde value through the API.
fn from_js(v: &JsValue<'_>) -> Value {
    if let Some(s) = v.as_string() {
        return Value::String(s.to_string().unwrap());
    }
    if let Some(i) = v.as_int() {
        return json!(i);
    }
    if let Some(f) = v.as_float() {
        return json!(f);
    }
    if let Some(b) = v.as_bool() {
        return Value::Bool(b);
    }
    if let Some(a) = v.as_array() {
        return Value::Array(a.iter::<JsValue>().map(|x| from_js(&x.unwrap())).collect());
    }
    if let Some(o) = v.as_object() {
        return Value::Object(
            o.props::<String, JsValue>()
                .map(|p| {
                    let (k, x) = p.unwrap();
                    (k, from_js(&x))
                })
                .collect(),
        );
    }
    Value::Null
}

fn part2(n: usize, batch: usize) {
    println!("part 2: bare QuickJS context, one thread, {n} docs, batches of {batch}");
    let docs = make_docs(n);
    let rt = Runtime::new().unwrap();
    let ctx = Context::full(&rt).unwrap();
    let time = |label: &str, f: &dyn Fn() -> usize| {
        f();
        let mut rates = Vec::new();
        for _ in 0..5 {
            let start = Instant::now();
            let count = f();
            rates.push(count as f64 / start.elapsed().as_secs_f64());
        }
        println!("  {label:<62} {:>9.0} docs/s", median(rates));
    };
    ctx.with(|ctx| {
        let setup: Object = ctx
            .eval(
                r#"(function () {
                var rows = null;
                globalThis.emit = function (k, v) { rows.push([k, v]); };
                var f = function (doc) { emit(doc._id, 1); };
                function deepFreeze(o) { Object.freeze(o);
                  var ks = Reflect.ownKeys(o); for (var i = 0; i < ks.length; i++) { var v = o[ks[i]];
                  if (typeof v === "object" && v !== null) deepFreeze(v); } }
                function one(doc, seal) { if (seal) deepFreeze(doc); rows = []; f(doc); var r = [rows]; rows = null; return r; }
                return {
                  text: function (json, seal, tick) { var docs = JSON.parse(json); var out = new Array(docs.length);
                    for (var i = 0; i < docs.length; i++) { if (tick) tick(); out[i] = JSON.stringify(one(docs[i], seal)); }
                    return out.join("\n"); },
                  objects: function (docs) { var out = new Array(docs.length);
                    for (var i = 0; i < docs.length; i++) out[i] = JSON.stringify(one(docs[i], true)); return out.join("\n"); },
                  objectsOut: function (docs) { var out = new Array(docs.length);
                    for (var i = 0; i < docs.length; i++) out[i] = one(docs[i], true); return out; },
                  single: function (json) { return JSON.stringify(one(JSON.parse(json), true)); },
                };
              })()"#,
            )
            .unwrap();
        let text: Function = setup.get("text").unwrap();
        let objects: Function = setup.get("objects").unwrap();
        let objects_out: Function = setup.get("objectsOut").unwrap();
        let single: Function = setup.get("single").unwrap();
        let tick = Function::new(ctx.clone(), || {}).unwrap();
        let texts: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
        let parse_rows = |s: &str| -> usize { s.split('\n').map(|l| serde_json::from_str::<Vec<Vec<(Value, Value)>>>(l).unwrap().len()).sum() };
        let batches = |seal: bool, with_tick: bool| -> usize {
            let mut count = 0;
            for chunk in texts.chunks(batch) {
                let json = format!("[{}]", chunk.join(","));
                let out: String = if with_tick { text.call((json, seal, tick.clone())).unwrap() } else { text.call((json, seal)).unwrap() };
                count += parse_rows(&out);
            }
            count
        };
        time("JSON text in (one call per batch), JSON text out, sealed", &|| batches(true, false));
        time("  same, not sealed", &|| batches(false, false));
        time("  same, sealed, with a native tick() per document", &|| batches(true, true));
        time("objects built through the API in, JSON text out, sealed", &|| {
            let mut count = 0;
            for chunk in docs.chunks(batch) {
                let arr = Array::new(ctx.clone()).unwrap();
                for (i, d) in chunk.iter().enumerate() {
                    arr.set(i, to_js(&ctx, d).unwrap()).unwrap();
                }
                let out: String = objects.call((arr,)).unwrap();
                count += parse_rows(&out);
            }
            count
        });
        time("objects built through the API in, rows read through the API", &|| {
            let mut count = 0;
            for chunk in docs.chunks(batch) {
                let arr = Array::new(ctx.clone()).unwrap();
                for (i, d) in chunk.iter().enumerate() {
                    arr.set(i, to_js(&ctx, d).unwrap()).unwrap();
                }
                let out: Array = objects_out.call((arr,)).unwrap();
                for r in out.iter::<JsValue>() {
                    let v = from_js(&r.unwrap());
                    count += v.as_array().unwrap().len();
                }
            }
            count
        });
        time("JSON text in, one call per document", &|| {
            let mut count = 0;
            for t in &texts {
                let out: String = single.call((t.as_str(),)).unwrap();
                count += parse_rows(&out);
            }
            count
        });
    });
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map(|a| a.parse().unwrap()).unwrap_or(100_000);
    let batch: usize = args.next().map(|a| a.parse().unwrap()).unwrap_or(1000);
    let part = args.next().unwrap_or_else(|| "all".into());
    if part == "all" || part == "1" {
        part1(n, batch);
    }
    if part == "all" || part == "2" {
        part2(n, batch);
    }
}
