//! One worker's JavaScript state: a QuickJS runtime and, in it, one context
//! per design document, kept in a least-recently-used cache.
//!
//! This is the only module that names the engine (`rquickjs`); everything it
//! hands out is std types, JSON text and [`JsError`].
//!
//! Invariants:
//! - A design document runs in a context of its own (its own global object
//!   and built-ins), created from `prelude.js` (and, for a CoffeeScript
//!   design document, the CoffeeScript compiler); its functions are compiled
//!   there once, on first use, and stay until the context is evicted (more
//!   than `ddoc_cache_max` design documents) or the runtime is discarded.
//!   One design document's code cannot see or change another's globals.
//! - Every call into JavaScript runs under a deadline: the interrupt handler
//!   stops the call once `deadline_ns` has passed. Map and filter calls push
//!   the deadline forward per document (`tick`), so the timeout is per
//!   document, as CouchDB's is per command.
//! - After an out-of-memory error, a failed runtime or a panic, the whole
//!   runtime is dropped and the next call builds a new one: nothing that
//!   failed half-way is reused.
//! - A design function source whose compilation the deadline stopped (an
//!   endless loop at the top level) is remembered by the engine
//!   ([`Hanging`], shared by the workers), not only by its context: every
//!   context created later learns it, so compiling it again fails at once
//!   whatever was evicted or restarted in between.
//! - Drop order: the contexts (and the persistent driver handles in them)
//!   are dropped before the runtime (field order of [`JsState`]).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rquickjs::function::IntoArgs;
use rquickjs::{Context, Ctx, Exception, Function, Object, Persistent, Runtime, Value};

use crate::stats::Stats;
use crate::{DesignDoc, JsConfig, JsError};

/// The environment every design document's context starts from.
const PRELUDE: &str = include_str!("prelude.js");

/// The CoffeeScript compiler (an expression whose value is its module),
/// bundled by build.rs from the pinned npm package; evaluated only in the
/// contexts of `"language": "coffeescript"` design documents.
const COFFEE: &str = include_str!(concat!(env!("OUT_DIR"), "/coffee.js"));

/// QuickJS's own stack bound for one call (nested JavaScript calls, JSON
/// nesting). Worker threads get a larger native stack (`pool.rs`).
pub(crate) const JS_STACK_BYTES: usize = 1 << 20;

/// Where a streamed list call reads rows and writes output, on the
/// worker thread while the call runs (both may block: they are bounded by
/// their owner, who gives up after a timeout).
pub struct ListIo {
    /// The next row's JSON; `Ok(None)` when there are no more; `Err`: the
    /// rows failed (the message is thrown into the function).
    pub next_row: NextRow,
    /// An output event: `start` (JSON `{code, headers, contentType}`) or
    /// `chunk` (text); false once nobody reads them any more.
    pub emit: Emit,
}

/// [`ListIo::next_row`].
pub type NextRow = Box<dyn FnMut() -> Result<Option<String>, String> + Send>;

/// [`ListIo::emit`].
pub type Emit = Box<dyn FnMut(&str, String) -> bool + Send>;

/// What a call returned: the body, and what the functions logged.
#[derive(Debug, Default)]
pub(crate) struct CallOutput {
    pub body: String,
    pub logs: Vec<String>,
    pub logs_dropped: u64,
}

/// The deadline shared by the interrupt handler and `tick`.
struct Clock {
    epoch: Instant,
    /// Nanoseconds since `epoch` after which the running call is stopped; 0: none.
    deadline_ns: AtomicU64,
    timeout_ns: u64,
    /// Set by the interrupt handler when it stopped a call.
    fired: AtomicBool,
}

impl Clock {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
    fn arm(&self) {
        self.fired.store(false, Ordering::Relaxed);
        self.deadline_ns
            .store(self.now_ns() + self.timeout_ns, Ordering::Relaxed);
    }
    fn disarm(&self) {
        self.deadline_ns.store(0, Ordering::Relaxed);
    }
    fn expired(&self) -> bool {
        let d = self.deadline_ns.load(Ordering::Relaxed);
        if d != 0 && self.now_ns() > d {
            self.fired.store(true, Ordering::Relaxed);
            true
        } else {
            false
        }
    }
}

/// A design document's context and the driver object `prelude.js` returned in it.
struct DdocEnv {
    // Declared before `ctx`: dropped first.
    driver: Persistent<Object<'static>>,
    ctx: Context,
    signature: u128,
    last_used: u64,
}

/// A live runtime and its cached design documents.
struct JsState {
    // Declared before `rt`: every context is dropped before the runtime.
    envs: Vec<DdocEnv>,
    rt: Runtime,
    clock: Arc<Clock>,
    uses: u64,
}

/// The JavaScript side of one worker thread. Not `Send`: it lives and dies on
/// its worker thread.
pub(crate) struct Worker {
    config: Arc<JsConfig>,
    stats: Arc<Stats>,
    hanging: Arc<Hanging>,
    state: Option<JsState>,
}

/// Design function sources whose compilation the deadline stopped (an
/// endless loop at the top level), shared by every worker and kept across
/// context evictions and runtime restarts: each new context learns them,
/// so compiling one again fails at once instead of taking the whole
/// deadline again. Bounded: the newest [`HANGING_MAX`] sources of at most
/// [`HANGING_SOURCE_MAX_BYTES`] each.
#[derive(Default)]
pub(crate) struct Hanging {
    sources: parking_lot::Mutex<std::collections::VecDeque<String>>,
}

const HANGING_MAX: usize = 64;
const HANGING_SOURCE_MAX_BYTES: usize = 64 << 10;

impl Hanging {
    fn add(&self, source: String) {
        if source.len() > HANGING_SOURCE_MAX_BYTES {
            return;
        }
        let mut sources = self.sources.lock();
        if sources.contains(&source) {
            return;
        }
        if sources.len() >= HANGING_MAX {
            sources.pop_front();
        }
        sources.push_back(source);
    }

    /// The sources as a JSON array, or None when there are none.
    fn json(&self) -> Option<String> {
        let sources = self.sources.lock();
        if sources.is_empty() {
            return None;
        }
        serde_json::to_string(&*sources).ok()
    }
}

/// How a call failed inside JavaScript, before it is turned into a [`JsError`].
enum Failure {
    Error(JsError),
    /// The runtime must not be used again.
    Fatal(JsError),
}

impl Worker {
    pub(crate) fn new(config: Arc<JsConfig>, stats: Arc<Stats>, hanging: Arc<Hanging>) -> Worker {
        Worker {
            config,
            stats,
            hanging,
            state: None,
        }
    }

    /// Drops the runtime (and every context in it); the next call builds a new one.
    pub(crate) fn discard_runtime(&mut self) {
        self.state = None;
    }

    fn state(&mut self) -> Result<&mut JsState, JsError> {
        if self.state.is_none() {
            let rt = Runtime::new().map_err(|e| JsError::Unavailable {
                reason: format!("cannot create a JavaScript runtime: {e}"),
            })?;
            rt.set_memory_limit(self.config.memory_limit_bytes);
            rt.set_max_stack_size(JS_STACK_BYTES);
            let clock = Arc::new(Clock {
                epoch: Instant::now(),
                deadline_ns: AtomicU64::new(0),
                timeout_ns: self.config.timeout.as_nanos().min(u64::MAX as u128 / 2) as u64,
                fired: AtomicBool::new(false),
            });
            let handler_clock = Arc::clone(&clock);
            rt.set_interrupt_handler(Some(Box::new(move || handler_clock.expired())));
            self.stats.runtimes_started.fetch_add(1, Ordering::Relaxed);
            self.state = Some(JsState {
                envs: Vec::new(),
                rt,
                clock,
                uses: 0,
            });
        }
        Ok(self.state.as_mut().expect("state was just set"))
    }

    /// Calls `driver[method](args...)` in the context of `ddoc`, creating the
    /// runtime and the context when needed.
    pub(crate) fn call<A>(
        &mut self,
        ddoc: &DesignDoc,
        method: &str,
        args: A,
    ) -> Result<CallOutput, JsError>
    where
        A: for<'js> IntoArgs<'js>,
    {
        self.call_with(ddoc, method, move |_, f| f.call(args))
    }

    /// Calls `driver.list(name, head, req, nextRow, emit)`: a list function
    /// fed its rows by `io.next_row` and writing its output through
    /// `io.emit` while it runs (see [`ListIo`]). `io` is dropped when the
    /// call returns, whatever JavaScript still holds.
    pub(crate) fn call_list(
        &mut self,
        ddoc: &DesignDoc,
        args: (String, String, String),
        io: ListIo,
    ) -> Result<CallOutput, JsError> {
        let io = Rc::new(RefCell::new(Some(io)));
        let (rows, out) = (Rc::clone(&io), Rc::clone(&io));
        let result = self.call_with(ddoc, "list", move |ctx, f| {
            let next_row = Function::new(
                ctx.clone(),
                move |ctx: Ctx<'_>| -> rquickjs::Result<Option<String>> {
                    let mut io = rows.borrow_mut();
                    let Some(io) = io.as_mut() else {
                        return Ok(None);
                    };
                    (io.next_row)().map_err(|m| Exception::throw_internal(&ctx, &m))
                },
            )?;
            let emit = Function::new(ctx.clone(), move |kind: String, text: String| -> bool {
                out.borrow_mut()
                    .as_mut()
                    .is_some_and(|io| (io.emit)(&kind, text))
            })?;
            f.call((args.0, args.1, args.2, next_row, emit))
        });
        io.borrow_mut().take();
        result
    }

    fn call_with<F>(
        &mut self,
        ddoc: &DesignDoc,
        method: &str,
        invoke: F,
    ) -> Result<CallOutput, JsError>
    where
        F: for<'js> FnOnce(&Ctx<'js>, Function<'js>) -> rquickjs::Result<String>,
    {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let result = self.call_inner(ddoc, method, invoke);
        match result {
            Ok(out) => Ok(out),
            Err(Failure::Error(e)) => Err(e),
            Err(Failure::Fatal(e)) => {
                tracing::warn!(target: "settee_js", ddoc = ddoc.id(), error = %e,
                    "discarding the JavaScript runtime after a fatal error");
                self.discard_runtime();
                Err(e)
            }
        }
    }

    fn call_inner<F>(
        &mut self,
        ddoc: &DesignDoc,
        method: &str,
        invoke: F,
    ) -> Result<CallOutput, Failure>
    where
        F: for<'js> FnOnce(&Ctx<'js>, Function<'js>) -> rquickjs::Result<String>,
    {
        let config = Arc::clone(&self.config);
        let stats = Arc::clone(&self.stats);
        let hanging = Arc::clone(&self.hanging);
        let state = self.state().map_err(Failure::Fatal)?;
        let env_index = state.env_for(ddoc, &config, &stats, &hanging)?;
        let clock = Arc::clone(&state.clock);
        let env = &state.envs[env_index];
        let limit_bytes = config.memory_limit_bytes;
        let timeout = config.timeout;
        env.ctx.with(|ctx| {
            let driver = env
                .driver
                .clone()
                .restore(&ctx)
                .map_err(|e| Failure::Fatal(internal(e)))?;
            let function: Function = driver
                .get(method)
                .map_err(|e| Failure::Fatal(internal(e)))?;
            clock.arm();
            let called: rquickjs::Result<String> = invoke(&ctx, function);
            clock.disarm();
            let fired = clock.fired.swap(false, Ordering::Relaxed);
            match called {
                Ok(text) => {
                    let out = split_header(&text, &stats).map_err(Failure::Fatal)?;
                    Ok(out)
                }
                Err(rquickjs::Error::Exception) => {
                    let exception = ctx.catch();
                    let failure = classify(&ctx, exception, fired, timeout, limit_bytes);
                    // The logs of the failed call, and the document it was on.
                    let (logs, current) = drain_header(&ctx, &driver, &stats);
                    for line in logs {
                        tracing::info!(target: "settee_js", ddoc = ddoc.id(), "{line}");
                    }
                    let failure = match failure {
                        Failure::Error(JsError::Timeout { timeout, .. }) => {
                            Failure::Error(JsError::Timeout {
                                timeout,
                                doc_id: current,
                            })
                        }
                        other => other,
                    };
                    if matches!(failure, Failure::Error(JsError::Timeout { .. })) {
                        stats.timeouts.fetch_add(1, Ordering::Relaxed);
                        let stopped_compiling: Option<String> = driver
                            .get::<_, Function>("hanging")
                            .and_then(|f| f.call(()))
                            .ok()
                            .flatten();
                        if let Some(source) = stopped_compiling {
                            hanging.add(source);
                        }
                    }
                    if matches!(failure, Failure::Fatal(JsError::OutOfMemory { .. })) {
                        stats.out_of_memory.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(failure)
                }
                Err(rquickjs::Error::Allocation) => {
                    stats.out_of_memory.fetch_add(1, Ordering::Relaxed);
                    Err(Failure::Fatal(JsError::OutOfMemory { limit_bytes }))
                }
                Err(e) => Err(Failure::Fatal(internal(e))),
            }
        })
    }
}

impl JsState {
    /// The index of `ddoc`'s context, creating it (and evicting the least
    /// recently used one past the bound) when it is not cached.
    fn env_for(
        &mut self,
        ddoc: &DesignDoc,
        config: &JsConfig,
        stats: &Stats,
        hanging: &Hanging,
    ) -> Result<usize, Failure> {
        self.uses += 1;
        let signature = ddoc.signature_bits();
        if let Some(i) = self.envs.iter().position(|e| e.signature == signature) {
            self.envs[i].last_used = self.uses;
            stats.ddoc_cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(i);
        }
        stats.ddoc_cache_misses.fetch_add(1, Ordering::Relaxed);
        let cache_max = config.ddoc_cache_max.max(1);
        while self.envs.len() >= cache_max {
            let oldest = self
                .envs
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
                .expect("cache is not empty");
            self.envs.swap_remove(oldest);
            stats.ddoc_cache_evictions.fetch_add(1, Ordering::Relaxed);
        }
        let env = self.new_env(ddoc, config, hanging)?;
        self.envs.push(env);
        Ok(self.envs.len() - 1)
    }

    fn new_env(
        &self,
        ddoc: &DesignDoc,
        config: &JsConfig,
        hanging: &Hanging,
    ) -> Result<DdocEnv, Failure> {
        let ctx = Context::full(&self.rt).map_err(|e| match e {
            rquickjs::Error::Allocation => Failure::Fatal(JsError::OutOfMemory {
                limit_bytes: config.memory_limit_bytes,
            }),
            other => Failure::Fatal(internal(other)),
        })?;
        let clock = Arc::clone(&self.clock);
        let limit_bytes = config.memory_limit_bytes;
        let driver = ctx.with(|ctx| -> Result<Persistent<Object<'static>>, Failure> {
            let fail = |ctx: &Ctx<'_>, e: rquickjs::Error| match e {
                rquickjs::Error::Exception => {
                    let exception = ctx.catch();
                    classify(ctx, exception, false, config.timeout, limit_bytes)
                }
                rquickjs::Error::Allocation => Failure::Fatal(JsError::OutOfMemory { limit_bytes }),
                other => Failure::Fatal(internal(other)),
            };
            let factory: Function = ctx.eval(PRELUDE).map_err(|e| fail(&ctx, e))?;
            // CoffeeScript's compile function, or null: the prelude
            // translates every function source with it before compiling.
            let translate: Value = if ddoc.is_coffee() {
                let compiler: Object = ctx.eval(COFFEE).map_err(|e| fail(&ctx, e))?;
                compiler.get("compile").map_err(|e| fail(&ctx, e))?
            } else {
                Value::new_null(ctx.clone())
            };
            let tick_clock = Arc::clone(&clock);
            let tick =
                Function::new(ctx.clone(), move || tick_clock.arm()).map_err(|e| fail(&ctx, e))?;
            self.clock.arm();
            let made: rquickjs::Result<Object> = factory.call((
                ddoc.json(),
                tick,
                config.reduce_limit,
                config.log_lines_max.min(u32::MAX as usize) as u32,
                translate,
            ));
            self.clock.disarm();
            let driver = made.map_err(|e| fail(&ctx, e))?;
            if let Some(list) = hanging.json() {
                let remember: Function =
                    driver.get("rememberHanging").map_err(|e| fail(&ctx, e))?;
                remember.call::<_, ()>((list,)).map_err(|e| fail(&ctx, e))?;
            }
            Ok(Persistent::save(&ctx, driver))
        })?;
        Ok(DdocEnv {
            driver,
            ctx,
            signature: ddoc.signature_bits(),
            last_used: self.uses,
        })
    }
}

/// Splits a driver's answer into its header (`[compiled, logs, dropped, ...]`) and body.
fn split_header(text: &str, stats: &Stats) -> Result<CallOutput, JsError> {
    let (head, body) = text.split_once('\n').unwrap_or((text, ""));
    let (compiled, logs, dropped) = parse_header(head)?;
    stats
        .functions_compiled
        .fetch_add(compiled, Ordering::Relaxed);
    Ok(CallOutput {
        body: body.to_string(),
        logs,
        logs_dropped: dropped,
    })
}

fn parse_header(head: &str) -> Result<(u64, Vec<String>, u64), JsError> {
    serde_json::from_str::<(u64, Vec<String>, u64)>(head).map_err(|e| JsError::Unavailable {
        reason: format!("malformed answer from the JavaScript driver: {e}"),
    })
}

/// After an exception: the driver's pending logs (sent to `tracing` by the
/// caller) and the id of the document it was working on, if any.
fn drain_header<'js>(
    ctx: &Ctx<'js>,
    driver: &Object<'js>,
    stats: &Stats,
) -> (Vec<String>, Option<String>) {
    let header: Option<String> = driver
        .get::<_, Function>("header")
        .and_then(|f| f.call(()))
        .ok();
    let current: Option<String> = driver
        .get::<_, Function>("current")
        .and_then(|f| f.call(()))
        .ok()
        .flatten();
    // A failure here (out of memory again) leaves a pending exception: clear it.
    if header.is_none() {
        let _ = ctx.catch();
    }
    match header.as_deref().map(parse_header) {
        Some(Ok((compiled, logs, _))) => {
            stats
                .functions_compiled
                .fetch_add(compiled, Ordering::Relaxed);
            (logs, current)
        }
        _ => (Vec::new(), current),
    }
}

/// Turns a JavaScript exception into an error, following how CouchDB's query
/// server reports each form of exception.
fn classify<'js>(
    ctx: &Ctx<'js>,
    exception: Value<'js>,
    fired: bool,
    timeout: Duration,
    limit_bytes: usize,
) -> Failure {
    if fired {
        return Failure::Error(JsError::Timeout {
            timeout,
            doc_id: None,
        });
    }
    if exception.is_error() || exception.is_uncatchable_error() {
        let obj = exception.as_object();
        let name: String = obj
            .and_then(|o| o.get::<_, Option<String>>("name").ok().flatten())
            .unwrap_or_else(|| "Error".to_string());
        let message: String = obj
            .and_then(|o| o.get::<_, Option<String>>("message").ok().flatten())
            .unwrap_or_default();
        if name == "InternalError" && message == "out of memory" {
            return Failure::Fatal(JsError::OutOfMemory { limit_bytes });
        }
        if name == "InternalError" && message == "interrupted" {
            return Failure::Error(JsError::Timeout {
                timeout,
                doc_id: None,
            });
        }
        return Failure::Error(JsError::Runtime {
            name,
            reason: message,
        });
    }
    if exception.is_null()
        || exception.is_undefined()
        || exception.type_of() == rquickjs::Type::Uninitialized
    {
        // QuickJS throws without a value only when it could not even
        // allocate the error object.
        return Failure::Fatal(JsError::OutOfMemory { limit_bytes });
    }
    let json: Option<String> = ctx
        .json_stringify(exception.clone())
        .ok()
        .flatten()
        .and_then(|s| s.to_string().ok());
    let Some(json) = json else {
        let _ = ctx.catch();
        let text: String = exception
            .get::<rquickjs::Coerced<String>>()
            .map(|c| c.0)
            .unwrap_or_else(|_| "an unprintable value".to_string());
        return Failure::Error(JsError::Runtime {
            name: "unnamed_error".into(),
            reason: text,
        });
    };
    let value: serde_json::Value = serde_json::from_str(&json).unwrap_or(serde_json::Value::Null);
    Failure::Error(couch_thrown(value))
}

/// CouchDB's reading of a thrown value that is not an `Error`:
/// `["error"|"fatal", name, reason]`, `{error, reason}`, or anything else
/// (`unnamed_error`).
fn couch_thrown(value: serde_json::Value) -> JsError {
    use serde_json::Value as J;
    let text = |v: &J| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    match &value {
        J::Array(a) if a.len() == 3 && matches!(a[0].as_str(), Some("error" | "fatal")) => {
            JsError::from_couch(&text(&a[1]), text(&a[2]))
        }
        J::Object(o) if o.contains_key("error") && o.contains_key("reason") => {
            JsError::from_couch(&text(&o["error"]), text(&o["reason"]))
        }
        J::String(s) => JsError::Runtime {
            name: "unnamed_error".into(),
            reason: s.clone(),
        },
        other => JsError::Runtime {
            name: "unnamed_error".into(),
            reason: other.to_string(),
        },
    }
}

fn internal(e: rquickjs::Error) -> JsError {
    JsError::Unavailable {
        reason: format!("JavaScript engine error: {e}"),
    }
}
