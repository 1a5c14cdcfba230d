//! The public face of the crate: [`JsEngine`] and the calls CouchDB's query
//! server answers (map, reduce, rereduce, validate_doc_update, filters).
//!
//! Owns the translation between Rust values and the driver's JSON text:
//! inputs are serialised on the caller's thread, results parsed there too,
//! so workers spend their time in JavaScript. Invariants: every call is one
//! job on the pool (bounded queue, per-call timeout, memory limit); a call
//! fails as a whole only for what CouchDB would fail it for (compilation,
//! missing function, fatal or uncaught errors, timeout, memory), while a map
//! function throwing for one document only costs that document that
//! function's rows.

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;

use crate::input::{batch, utf16_len, JsonDoc};
use crate::pool::Pool;
use crate::runtime::{CallOutput, ListIo, Worker};
use crate::{DesignDoc, JsConfig, JsError, JsStats, ValidateError};

/// The rows one map function emitted for one document: `(key, value)` pairs.
pub type ViewRows = Vec<(Value, Value)>;

/// What [`JsEngine::map_docs`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct MapOutput {
    /// One entry per input document, in input order: for each view asked
    /// for, in the order asked, the rows its map function emitted. `Err` for
    /// an input that is not a JSON object, or whose rows cannot be
    /// serialised (e.g. a cyclic value was emitted).
    pub docs: Vec<Result<Vec<ViewRows>, JsError>>,
    /// What the call logged, in order: `log()` lines and the exceptions map
    /// functions raised ("function raised exception ... with doc._id ...").
    /// Each line is also sent to `tracing` (target `settee_js`, info).
    pub logs: Vec<String>,
    /// Log lines past `JsConfig::log_lines_max`, counted and dropped.
    pub logs_dropped: u64,
}

/// What [`JsEngine::index_docs`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexOutput {
    /// One entry per input document, in input order: the arguments of each
    /// `index(...)` call, in call order; `Err` when the function threw for
    /// the document (or the input was not a JSON object).
    pub docs: Vec<Result<Vec<Vec<Value>>, JsError>>,
    /// What the call logged, in order (also sent to `tracing`).
    pub logs: Vec<String>,
}

/// A pool of JavaScript workers running CouchDB's query-server functions.
///
/// Every call has a blocking form, which must not be used on an async
/// runtime's thread (it would block that thread), and an `_async` form whose
/// future owns its inputs (`'static`, `Send`). Dropping the engine finishes
/// the calls already queued and joins the workers.
pub struct JsEngine {
    pool: Pool,
    config: Arc<JsConfig>,
}

impl std::fmt::Debug for JsEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsEngine")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl JsEngine {
    /// Starts the workers. Their runtimes are created at their first call.
    pub fn new(config: JsConfig) -> Result<JsEngine, JsError> {
        let config = Arc::new(config);
        Ok(JsEngine {
            pool: Pool::new(Arc::clone(&config))?,
            config,
        })
    }

    pub fn config(&self) -> &JsConfig {
        &self.config
    }

    /// The engine's counters, summed over all workers.
    pub fn stats(&self) -> JsStats {
        self.pool.stats.snapshot()
    }

    /// Runs the map functions of `views` of `ddoc` over `docs`, as CouchDB's
    /// `map_doc` does for each document: each document is sealed (deep-frozen)
    /// before the first function sees it; a function that throws for a
    /// document gives no rows for it, the exception is logged and everything
    /// else goes on; `throw "fatal_error"` (or an engine failure) ends the call.
    pub fn map_docs<D, S>(
        &self,
        ddoc: &DesignDoc,
        views: &[S],
        docs: &[D],
    ) -> Result<MapOutput, JsError>
    where
        D: JsonDoc,
        S: AsRef<str>,
    {
        crate::pool_block_on(self.map_docs_async(ddoc, views, docs))
    }

    /// [`map_docs`](Self::map_docs), awaiting the result.
    pub fn map_docs_async<D, S>(
        &self,
        ddoc: &DesignDoc,
        views: &[S],
        docs: &[D],
    ) -> impl Future<Output = Result<MapOutput, JsError>> + Send + 'static
    where
        D: JsonDoc,
        S: AsRef<str>,
    {
        let names: Vec<&str> = views.iter().map(AsRef::as_ref).collect();
        let names_json = serde_json::to_string(&names).expect("strings serialise");
        let view_count = names.len();
        let batch = batch(docs);
        let accepted = batch.accepted;
        let count = batch.count;
        let docs_json = batch.json;
        let ddoc = ddoc.clone();
        let id = ddoc.id().to_string();
        let job = self
            .pool
            .run(move |w| w.call(&ddoc, "map", (names_json, docs_json)));
        async move {
            let out = job.await?;
            finish_map(&id, out, accepted, count, view_count)
        }
    }

    /// Runs the search index function `name` of design-document section
    /// `section` (`"nouveau"`, or `"indexes"` for Clouseau-style search)
    /// over `docs`: for each document, in input order, the arguments of
    /// every `index(...)` call it made, as JSON values (`undefined` reads
    /// as `null`), for the caller to check. A function that throws for a
    /// document gives that document an `Err` (and a log line); what ends
    /// a map call ends this one too.
    pub fn index_docs<D: JsonDoc>(
        &self,
        ddoc: &DesignDoc,
        section: &str,
        name: &str,
        docs: &[D],
    ) -> Result<IndexOutput, JsError> {
        let batch = batch(docs);
        let (accepted, count, docs_json) = (batch.accepted, batch.count, batch.json);
        let ddoc = ddoc.clone();
        let id = ddoc.id().to_string();
        let args = (section.to_string(), name.to_string(), docs_json);
        let job = self.pool.run(move |w| w.call(&ddoc, "index", args));
        let out = crate::pool_block_on(job)?;
        log_lines(&id, &out);
        let mut lines = out.body.split('\n').filter(|_| count > 0);
        let mut results = Vec::with_capacity(accepted.len());
        for input in accepted {
            results.push(match input {
                Err(reason) => Err(JsError::InvalidInput { reason }),
                Ok(()) => {
                    let line = lines.next().ok_or_else(|| malformed("index", &out.body))?;
                    parse_index_line(line)
                }
            });
        }
        if lines.next().is_some() {
            return Err(malformed("index", &out.body));
        }
        Ok(IndexOutput {
            docs: results,
            logs: out.logs,
        })
    }

    /// Compiles the map function of `view` (and, with `reduce`, its
    /// JavaScript reduce function) without running them, as CouchDB checks
    /// a design document when it is saved: `Err` is the compilation error
    /// (or `not_found` for a missing function).
    pub fn compile_view(&self, ddoc: &DesignDoc, view: &str, reduce: bool) -> Result<(), JsError> {
        crate::pool_block_on(self.compile_view_async(ddoc, view, reduce))
    }

    /// [`compile_view`](Self::compile_view), awaiting the result.
    pub fn compile_view_async(
        &self,
        ddoc: &DesignDoc,
        view: &str,
        reduce: bool,
    ) -> impl Future<Output = Result<(), JsError>> + Send + 'static {
        let ddoc = ddoc.clone();
        let view = view.to_string();
        let job = self
            .pool
            .run(move |w| w.call(&ddoc, "compile_view", (view, reduce)));
        async move {
            job.await?;
            Ok(())
        }
    }

    /// Runs the reduce function of `view` over `kvs`, each a `([key, docid],
    /// value)` pair, as `reduce(keys, values, false)`. With `reduce_limit`
    /// on, output that does not shrink fails with `reduce_overflow_error`.
    pub fn reduce(
        &self,
        ddoc: &DesignDoc,
        view: &str,
        kvs: &[(Value, Value)],
    ) -> Result<Value, JsError> {
        crate::pool_block_on(self.reduce_async(ddoc, view, kvs))
    }

    /// [`reduce`](Self::reduce), awaiting the result.
    pub fn reduce_async(
        &self,
        ddoc: &DesignDoc,
        view: &str,
        kvs: &[(Value, Value)],
    ) -> impl Future<Output = Result<Value, JsError>> + Send + 'static {
        let input = serde_json::to_string(kvs).expect("values serialise");
        // CouchDB measures its whole command line less the function source:
        // ["reduce",["<source>"],<kvs>].
        let input_len = utf16_len(&input) + r#"["reduce",[""],]"#.len();
        self.reduce_call(ddoc, "reduce", view, input, input_len)
    }

    /// Runs the reduce function of `view` over earlier reductions, as
    /// `reduce(null, values, true)`.
    pub fn rereduce(
        &self,
        ddoc: &DesignDoc,
        view: &str,
        values: &[Value],
    ) -> Result<Value, JsError> {
        crate::pool_block_on(self.rereduce_async(ddoc, view, values))
    }

    /// [`rereduce`](Self::rereduce), awaiting the result.
    pub fn rereduce_async(
        &self,
        ddoc: &DesignDoc,
        view: &str,
        values: &[Value],
    ) -> impl Future<Output = Result<Value, JsError>> + Send + 'static {
        let input = serde_json::to_string(values).expect("values serialise");
        let input_len = utf16_len(&input) + r#"["rereduce",[""],]"#.len();
        self.reduce_call(ddoc, "rereduce", view, input, input_len)
    }

    fn reduce_call(
        &self,
        ddoc: &DesignDoc,
        method: &'static str,
        view: &str,
        input: String,
        input_len: usize,
    ) -> impl Future<Output = Result<Value, JsError>> + Send + 'static {
        let ddoc = ddoc.clone();
        let view = view.to_string();
        let id = ddoc.id().to_string();
        let job = self
            .pool
            .run(move |w| w.call(&ddoc, method, (view, input, input_len as f64)));
        async move {
            let out = job.await?;
            log_lines(&id, &out);
            match serde_json::from_str::<Value>(&out.body) {
                Ok(Value::Array(mut a)) if a.len() == 1 => Ok(a.pop().expect("one element")),
                Ok(_) | Err(_) => Err(malformed("reduce", &out.body)),
            }
        }
    }

    /// Runs `validate_doc_update(newDoc, oldDoc, userCtx, secObj)` with the
    /// design document as `this`. Returning normally allows the update.
    pub fn validate(
        &self,
        ddoc: &DesignDoc,
        new_doc: &Value,
        old_doc: Option<&Value>,
        user_ctx: &Value,
        sec_obj: &Value,
    ) -> Result<(), ValidateError> {
        crate::pool_block_on(self.validate_async(ddoc, new_doc, old_doc, user_ctx, sec_obj))
    }

    /// [`validate`](Self::validate), awaiting the result.
    pub fn validate_async(
        &self,
        ddoc: &DesignDoc,
        new_doc: &Value,
        old_doc: Option<&Value>,
        user_ctx: &Value,
        sec_obj: &Value,
    ) -> impl Future<Output = Result<(), ValidateError>> + Send + 'static {
        let json = |v: &Value| serde_json::to_string(v).expect("values serialise");
        let args = (
            json(new_doc),
            old_doc.map_or_else(|| "null".to_string(), json),
            json(user_ctx),
            json(sec_obj),
        );
        let ddoc = ddoc.clone();
        let id = ddoc.id().to_string();
        let job = self.pool.run(move |w| w.call(&ddoc, "validate", args));
        async move {
            let out = job.await?;
            log_lines(&id, &out);
            if out.body == "1" {
                return Ok(());
            }
            let thrown = match serde_json::from_str::<Value>(&out.body) {
                Ok(Value::Object(mut o)) => o.remove("thrown").unwrap_or(Value::Null),
                _ => return Err(malformed("validate", &out.body).into()),
            };
            Err(validate_refusal(thrown))
        }
    }

    /// Calls driver method `method` of a render function (show, list,
    /// update, rewrite) with `args`: the JSON its body parses to (`Null`
    /// when it does not) and the body itself, for the caller to check the
    /// shape and name a malformed answer.
    fn render_call<A>(
        &self,
        ddoc: &DesignDoc,
        method: &'static str,
        args: A,
    ) -> impl Future<Output = Result<(Value, String), JsError>> + Send + 'static
    where
        A: for<'js> rquickjs::function::IntoArgs<'js> + Send + 'static,
    {
        self.render_job(ddoc, move |w, ddoc| w.call(ddoc, method, args))
    }

    /// [`JsEngine::render_call`] of any worker call `run` (the streamed
    /// list's too): runs it on the pool, logs what the function logged.
    fn render_job<F>(
        &self,
        ddoc: &DesignDoc,
        run: F,
    ) -> impl Future<Output = Result<(Value, String), JsError>> + Send + 'static
    where
        F: FnOnce(&mut Worker, &DesignDoc) -> Result<CallOutput, JsError> + Send + 'static,
    {
        let ddoc = ddoc.clone();
        let id = ddoc.id().to_string();
        let job = self.pool.run(move |w| run(w, &ddoc));
        async move {
            let out = job.await?;
            log_lines(&id, &out);
            let value = serde_json::from_str::<Value>(&out.body).unwrap_or(Value::Null);
            Ok((value, out.body))
        }
    }

    /// Runs `shows.NAME(doc, req)` (with `provides()`, `registerType()`,
    /// `send()` and `start()`), the design document as `this`: the
    /// response object (`{code, headers, body | json | base64}`) CouchDB's
    /// query server would answer. `doc` is the document's JSON (`null`
    /// for none). Throws in the function come back as CouchDB names them
    /// (`render_error` for anything but `["error", name, reason]`).
    pub fn show_async(
        &self,
        ddoc: &DesignDoc,
        name: &str,
        doc: String,
        req: &Value,
    ) -> impl Future<Output = Result<Value, JsError>> + Send + 'static {
        let args = (
            name.to_string(),
            doc,
            serde_json::to_string(req).expect("values serialise"),
        );
        let call = self.render_call(ddoc, "show", args);
        async move {
            match call.await? {
                (v @ Value::Object(_), _) => Ok(v),
                (_, body) => Err(malformed("show", &body)),
            }
        }
    }

    /// Runs the design document's `rewrites` function on `req`: what it
    /// returned (a path, `{path, query, method, headers, body}`, `{code,
    /// …}`, or anything else for the caller to refuse).
    pub fn rewrite_async(
        &self,
        ddoc: &DesignDoc,
        req: &Value,
    ) -> impl Future<Output = Result<Value, JsError>> + Send + 'static {
        let args = (serde_json::to_string(req).expect("values serialise"),);
        let call = self.render_call(ddoc, "rewrite", args);
        async move {
            match call.await? {
                (Value::Array(mut a), _) if a.len() == 1 => Ok(a.pop().expect("one element")),
                (_, body) => Err(malformed("rewrite", &body)),
            }
        }
    }

    /// Runs `lists.NAME(head, req)`, streamed: `getRow()` takes each row
    /// from `io.next_row` as the function asks for it, and the output goes
    /// out through `io.emit` as CouchDB's query server sends it — a
    /// `start` event (`{code, headers, contentType}`) at the first
    /// `getRow()`, then a `chunk` of what was sent before each later
    /// `getRow()`. Answers `{code, headers, body, contentType, committed}`:
    /// the rest of the output (all of it when nothing was committed); a
    /// throw after the start is appended to it as CouchDB's error line.
    pub fn list_async(
        &self,
        ddoc: &DesignDoc,
        name: &str,
        head: String,
        req: &Value,
        io: ListIo,
    ) -> impl Future<Output = Result<Value, JsError>> + Send + 'static {
        let args = (
            name.to_string(),
            head,
            serde_json::to_string(req).expect("values serialise"),
        );
        let call = self.render_job(ddoc, move |w, ddoc| w.call_list(ddoc, args, io));
        async move {
            match call.await? {
                (v @ Value::Object(_), _) => Ok(v),
                (_, body) => Err(malformed("list", &body)),
            }
        }
    }

    /// Runs `updates.NAME(doc, req)`, the design document as `this`: the
    /// document to save (any JSON; only an object is saved) and the
    /// response (a string becomes `{body}`; anything else the function
    /// returned as its second element, as it is).
    pub fn update_async(
        &self,
        ddoc: &DesignDoc,
        name: &str,
        doc: String,
        req: &Value,
    ) -> impl Future<Output = Result<(Value, Value), JsError>> + Send + 'static {
        let args = (
            name.to_string(),
            doc,
            serde_json::to_string(req).expect("values serialise"),
        );
        let call = self.render_call(ddoc, "update", args);
        async move {
            match call.await? {
                (Value::Array(mut a), _) if a.len() == 3 && a[0] == "up" => {
                    let resp = a.pop().expect("three elements");
                    let doc = a.pop().expect("three elements");
                    Ok((doc, resp))
                }
                (_, body) => Err(malformed("update", &body)),
            }
        }
    }

    /// Runs `filters.NAME(doc, req)` for each document, with the design
    /// document as `this`: a truthy result passes the document. An exception
    /// fails the whole call, as in CouchDB.
    pub fn filter<D: JsonDoc>(
        &self,
        ddoc: &DesignDoc,
        name: &str,
        docs: &[D],
        req: &Value,
    ) -> Result<Vec<bool>, JsError> {
        crate::pool_block_on(self.filter_async(ddoc, name, docs, req))
    }

    /// [`filter`](Self::filter), awaiting the result.
    pub fn filter_async<D: JsonDoc>(
        &self,
        ddoc: &DesignDoc,
        name: &str,
        docs: &[D],
        req: &Value,
    ) -> impl Future<Output = Result<Vec<bool>, JsError>> + Send + 'static {
        let req = serde_json::to_string(req).expect("values serialise");
        self.filter_call(ddoc, "filter", name, docs, Some(req))
    }

    /// The `_view` changes filter: a document passes if the map function of
    /// `view` emits anything for it. An exception fails the whole call.
    pub fn filter_view<D: JsonDoc>(
        &self,
        ddoc: &DesignDoc,
        view: &str,
        docs: &[D],
    ) -> Result<Vec<bool>, JsError> {
        crate::pool_block_on(self.filter_view_async(ddoc, view, docs))
    }

    /// [`filter_view`](Self::filter_view), awaiting the result.
    pub fn filter_view_async<D: JsonDoc>(
        &self,
        ddoc: &DesignDoc,
        view: &str,
        docs: &[D],
    ) -> impl Future<Output = Result<Vec<bool>, JsError>> + Send + 'static {
        self.filter_call(ddoc, "filterView", view, docs, None)
    }

    fn filter_call<D: JsonDoc>(
        &self,
        ddoc: &DesignDoc,
        method: &'static str,
        name: &str,
        docs: &[D],
        req: Option<String>,
    ) -> impl Future<Output = Result<Vec<bool>, JsError>> + Send + 'static {
        let batch = batch(docs);
        let rejected = batch
            .accepted
            .iter()
            .enumerate()
            .find_map(|(i, r)| r.as_ref().err().map(|e| format!("document {i}: {e}")));
        let count = batch.count;
        let docs_json = batch.json;
        let ddoc = ddoc.clone();
        let name = name.to_string();
        let id = ddoc.id().to_string();
        let job = self.pool.run(move |w| {
            if let Some(reason) = rejected {
                return Err(JsError::InvalidInput { reason });
            }
            match req {
                Some(req) => w.call(&ddoc, method, (name, docs_json, req)),
                None => w.call(&ddoc, method, (name, docs_json)),
            }
        });
        async move {
            let out = job.await?;
            log_lines(&id, &out);
            if out.body.len() != count || !out.body.bytes().all(|b| b == b'0' || b == b'1') {
                return Err(malformed(method, &out.body));
            }
            Ok(out.body.bytes().map(|b| b == b'1').collect())
        }
    }
}

fn malformed(what: &str, body: &str) -> JsError {
    let shown: String = body.chars().take(200).collect();
    JsError::Unavailable {
        reason: format!("malformed {what} answer from the JavaScript driver: {shown:?}"),
    }
}

fn log_lines(ddoc_id: &str, out: &CallOutput) {
    for line in &out.logs {
        tracing::info!(target: "settee_js", ddoc = ddoc_id, "{line}");
    }
    if out.logs_dropped > 0 {
        tracing::warn!(target: "settee_js", ddoc = ddoc_id, dropped = out.logs_dropped,
            "log lines over the per-call limit were dropped");
    }
}

fn finish_map(
    ddoc_id: &str,
    out: CallOutput,
    accepted: Vec<Result<(), String>>,
    count: usize,
    view_count: usize,
) -> Result<MapOutput, JsError> {
    log_lines(ddoc_id, &out);
    let mut lines = out.body.split('\n').filter(|_| count > 0);
    let mut docs = Vec::with_capacity(accepted.len());
    for input in accepted {
        let result = match input {
            Err(reason) => Err(JsError::InvalidInput { reason }),
            Ok(()) => {
                let line = lines.next().ok_or_else(|| malformed("map", &out.body))?;
                parse_map_line(line, view_count)
            }
        };
        docs.push(result);
    }
    if lines.next().is_some() {
        return Err(malformed("map", &out.body));
    }
    Ok(MapOutput {
        docs,
        logs: out.logs,
        logs_dropped: out.logs_dropped,
    })
}

/// One document's line: `[[[key, value], ...], ...]`, one array per view,
/// or `{"error": name, "reason": text}` when its rows could not be serialised.
fn parse_map_line(line: &str, view_count: usize) -> Result<Vec<ViewRows>, JsError> {
    if line.starts_with('{') {
        let v: Value = serde_json::from_str(line).map_err(|_| malformed("map", line))?;
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        return Err(JsError::Runtime {
            name: text("error"),
            reason: text("reason"),
        });
    }
    let rows: Vec<ViewRows> = serde_json::from_str(line).map_err(|e| JsError::Runtime {
        name: "emit_error".into(),
        reason: format!("the rows emitted for this document cannot be read: {e}"),
    })?;
    if rows.len() != view_count {
        return Err(malformed("map", line));
    }
    Ok(rows)
}

/// One document's line of an index call: `[[arg, ...], ...]`, or
/// `{"error": name, "reason": text}` when the function threw for it.
fn parse_index_line(line: &str) -> Result<Vec<Vec<Value>>, JsError> {
    match serde_json::from_str::<Value>(line).map_err(|_| malformed("index", line))? {
        Value::Array(calls) => Ok(calls
            .into_iter()
            .map(|c| match c {
                Value::Array(args) => args,
                other => vec![other],
            })
            .collect()),
        v => {
            let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            Err(JsError::Runtime {
                name: text("error"),
                reason: text("reason"),
            })
        }
    }
}

/// What CouchDB makes of a non-`Error` value thrown by `validate_doc_update`:
/// a one-member object `{forbidden: m}` or `{unauthorized: m}` is a refusal
/// with `m` as the reason, another one-member object an `unknown_error`
/// with its value; any other object crashes CouchDB's handler
/// (`function_clause`).
fn validate_refusal(thrown: Value) -> ValidateError {
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    match thrown {
        Value::Object(o) if o.len() == 1 => {
            let (k, m) = o.into_iter().next().expect("one entry");
            match k.as_str() {
                "forbidden" => ValidateError::Forbidden(m),
                "unauthorized" => ValidateError::Unauthorized(m),
                _ => ValidateError::Unknown(text(&m)),
            }
        }
        Value::Object(_) => ValidateError::Unknown("function_clause".into()),
        Value::String(s) => ValidateError::Unknown(s),
        other => ValidateError::Unknown(other.to_string()),
    }
}
