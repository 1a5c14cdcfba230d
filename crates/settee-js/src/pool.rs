//! The worker pool: threads that each own a JavaScript runtime, fed from one
//! bounded queue of jobs.
//!
//! Owns job submission (async, and blocking on top of it), the worker
//! threads and shutdown. Invariants:
//! - At most `queue_max` jobs wait for a worker: a submitter first takes a
//!   permit (awaiting one, or blocking for one), and the permit is released
//!   when a worker starts the job.
//! - A job that panics is caught on its worker: the caller gets
//!   [`JsError::Unavailable`], the worker drops its runtime and serves the
//!   next job; the pool never loses a thread to a panic.
//! - Shutdown (dropping the pool) stops new jobs, lets the workers finish
//!   the jobs already queued, and joins them. Futures still waiting for a
//!   permit then get [`JsError::Unavailable`].

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::{self, JoinHandle, Thread};

use parking_lot::Mutex;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use crate::runtime::{Hanging, Worker, JS_STACK_BYTES};
use crate::stats::Stats;
use crate::{JsConfig, JsError};

/// Work for a worker. Owns its inputs and its reply channel.
type Job = Box<dyn FnOnce(&mut Worker) + Send>;

/// A queued job with the permit it holds its queue slot by.
struct Queued {
    job: Job,
    permit: OwnedSemaphorePermit,
}

struct Shared {
    /// `None` once shut down.
    tx: Mutex<Option<crossbeam_channel::Sender<Queued>>>,
    permits: Arc<Semaphore>,
}

pub(crate) struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    pub(crate) stats: Arc<Stats>,
}

fn shut_down() -> JsError {
    JsError::Unavailable {
        reason: "the JavaScript engine is shut down".into(),
    }
}

impl Pool {
    pub(crate) fn new(config: Arc<JsConfig>) -> Result<Pool, JsError> {
        let stats = Arc::new(Stats::default());
        let (tx, rx) = crossbeam_channel::unbounded::<Queued>();
        let shared = Arc::new(Shared {
            tx: Mutex::new(Some(tx)),
            permits: Arc::new(Semaphore::new(
                config.queue_max.clamp(1, Semaphore::MAX_PERMITS),
            )),
        });
        let mut pool = Pool {
            shared,
            threads: Vec::new(),
            stats: Arc::clone(&stats),
        };
        let hanging = Arc::new(Hanging::default());
        for n in 0..config.workers.max(1) {
            let rx = rx.clone();
            let config = Arc::clone(&config);
            let stats = Arc::clone(&stats);
            let hanging = Arc::clone(&hanging);
            let handle = thread::Builder::new()
                .name(format!("settee-js-{n}"))
                // Room for QuickJS's own bound plus the native frames around it.
                .stack_size(4 * JS_STACK_BYTES)
                .spawn(move || {
                    // Created here: a runtime never leaves its thread.
                    let mut worker = Worker::new(config, Arc::clone(&stats), hanging);
                    for Queued { job, permit } in rx.iter() {
                        drop(permit);
                        if catch_unwind(AssertUnwindSafe(|| job(&mut worker))).is_err() {
                            stats
                                .worker_panics
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            tracing::error!(target: "settee_js", worker = n,
                                "a JavaScript job panicked; the worker starts a new runtime");
                            worker.discard_runtime();
                        }
                    }
                })
                .map_err(|e| JsError::Unavailable {
                    reason: format!("cannot start a JavaScript worker thread: {e}"),
                })?;
            pool.threads.push(handle);
        }
        Ok(pool)
    }

    /// Runs `f` on a worker; the future resolves with its result. The future
    /// owns everything it needs (`'static`), so it may be spawned.
    pub(crate) fn run<T, F>(
        &self,
        f: F,
    ) -> impl Future<Output = Result<T, JsError>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce(&mut Worker) -> Result<T, JsError> + Send + 'static,
    {
        let shared = Arc::clone(&self.shared);
        async move {
            let permit = Arc::clone(&shared.permits)
                .acquire_owned()
                .await
                .map_err(|_| shut_down())?;
            let (reply_tx, reply_rx) = oneshot::channel();
            let job: Job = Box::new(move |worker: &mut Worker| {
                let _ = reply_tx.send(f(worker));
            });
            {
                let tx = shared.tx.lock();
                let tx = tx.as_ref().ok_or_else(shut_down)?;
                tx.send(Queued { job, permit }).map_err(|_| shut_down())?;
            }
            reply_rx.await.map_err(|_| JsError::Unavailable {
                reason: "the JavaScript worker running this call failed (a bug, logged); \
                         it has restarted, the call may be retried"
                    .into(),
            })?
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.permits.close();
        // Dropping the only sender ends the workers' loops once the queue is empty.
        self.shared.tx.lock().take();
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}

/// Wakes a thread parked in [`block_on`].
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` to completion on the current thread, parking between polls.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DesignDoc;

    #[test]
    fn a_panicking_job_does_not_take_the_pool_down() {
        let config = Arc::new(JsConfig {
            workers: 1,
            ..JsConfig::default()
        });
        let pool = Pool::new(config).unwrap();
        let ddoc = DesignDoc::new(&serde_json::json!({
            "_id": "_design/p",
            "filters": {"all": "function () { return true; }"}
        }))
        .unwrap();
        let call = |pool: &Pool| {
            let ddoc = ddoc.clone();
            block_on(pool.run(move |w| {
                w.call(
                    &ddoc,
                    "filter",
                    ("all".to_string(), "[{}]".to_string(), "{}".to_string()),
                )
            }))
        };
        assert_eq!(call(&pool).unwrap().body, "1");
        // A job that panics while the worker's runtime is live...
        let r: Result<(), JsError> =
            block_on(pool.run(|_w| panic!("deliberate panic in a test job")));
        assert!(matches!(r, Err(JsError::Unavailable { .. })), "{r:?}");
        // ...costs only that job: the (only) worker serves the next one.
        assert_eq!(call(&pool).unwrap().body, "1");
        let s = pool.stats.snapshot();
        assert_eq!(s.worker_panics, 1);
        assert_eq!(
            s.runtimes_started, 2,
            "the panicked worker's runtime was replaced"
        );
    }

    #[test]
    fn calls_after_shutdown_fail_cleanly() {
        let pool = Pool::new(Arc::new(JsConfig {
            workers: 1,
            ..JsConfig::default()
        }))
        .unwrap();
        let future = pool.run(|_w| Ok(1));
        drop(pool);
        assert!(matches!(block_on(future), Err(JsError::Unavailable { .. })));
    }
}
