// Not built with the crate (it would compile boa). To run it: a scratch crate with
//   [dependencies] boa_engine = "0.22"  serde_json = "1"
// and this file as src/main.rs, `cargo run --release`. Compared in
// docs/adr/0004-javascript-engine.md.
// The same workload as settee-js's map_throughput part 2 ("JSON text in, one
// call per batch, JSON text out, sealed") on boa.
use boa_engine::{js_string, Context, JsValue, Source};
use std::time::Instant;
fn main() {
    let n = 20_000;
    let docs: Vec<String> = (0..n).map(|i| format!(r#"{{"_id":"{i:010}","_rev":"1-967a00dff5e02add41819138abb3284d","type":"{}","n":{i},"tags":["a","b"],"title":"a small document"}}"#, if i % 3 == 0 { "post" } else { "comment" })).collect();
    let mut ctx = Context::default();
    ctx.eval(Source::from_bytes(r#"
        var rows = null;
        function emit(k, v) { rows.push([k, v]); }
        var f = function (doc) { emit(doc._id, 1); };
        function deepFreeze(o) { Object.freeze(o); var ks = Reflect.ownKeys(o); for (var i = 0; i < ks.length; i++) { var v = o[ks[i]]; if (typeof v === "object" && v !== null) deepFreeze(v); } }
        function run(json) { var d = JSON.parse(json); var out = new Array(d.length);
          for (var i = 0; i < d.length; i++) { deepFreeze(d[i]); rows = []; f(d[i]); out[i] = JSON.stringify([rows]); }
          return out.join("\n"); }
    "#)).unwrap();
    let run = ctx.global_object().get(js_string!("run"), &mut ctx).unwrap();
    let run = run.as_callable().unwrap().clone();
    for round in 0..3 {
        let start = Instant::now();
        let mut count = 0;
        for chunk in docs.chunks(1000) {
            let json = format!("[{}]", chunk.join(","));
            let out = run.call(&JsValue::undefined(), &[JsValue::from(js_string!(json.as_str()))], &mut ctx).unwrap();
            let s = out.to_string(&mut ctx).unwrap().to_std_string_escaped();
            for l in s.split('\n') { count += serde_json::from_str::<Vec<Vec<(serde_json::Value, serde_json::Value)>>>(l).unwrap().len(); }
        }
        println!("boa round {round}: {:.0} docs/s", count as f64 / start.elapsed().as_secs_f64());
    }
}
