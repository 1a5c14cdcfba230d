//! The listener: accepts HTTP/1.1 connections and serves the router.
//!
//! Invariants (the bounds of the network edge):
//! - at most `max_connections` connections are served at once; beyond it
//!   the accept loop waits (the kernel backlog absorbs bursts);
//! - a client must send its request head within `header_read_timeout`
//!   (slow-loris); bodies are bounded by [`crate::request`];
//! - keep-alive is on; TCP_NODELAY is set (responses are written whole);
//! - a closing connection lingers (bounded) to read what the client is
//!   still sending, so an answer given before the body was read is not
//!   cut by a reset ([`crate::linger`]);
//! - connections are served by one thread per CPU, each with its own
//!   single-threaded runtime; the accept loop gives each new connection to
//!   the thread with the fewest, and it stays there;
//! - on shutdown the loop stops accepting, streaming feeds are told to end
//!   (`AppState::closing`), and each thread waits (bounded) for its
//!   in-flight requests, so acknowledged writes are answered before the
//!   engine is shut down.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::predicate::{DefaultPredicate, Predicate};
use tower_http::compression::CompressionLayer;
use tower_http::decompression::RequestDecompressionLayer;

use crate::error::ApiError;
use crate::linger::Linger;
use crate::state::App;

/// Limits of the listener.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    /// How long shutdown waits for in-flight requests.
    pub shutdown_grace: Duration,
    /// Threads serving connections (0: one per CPU).
    pub threads: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_connections: 2048,
            header_read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            threads: 0,
        }
    }
}

/// Threads for blocking work (`spawn_blocking`: page rendering, database
/// creation, password hashing) across all connection threads' runtimes.
const BLOCKING_THREADS_MAX: usize = 512;

/// Marks a streaming response (continuous feeds) that must not be compressed,
/// because a compressor would hold back heartbeats and rows.
#[derive(Debug, Clone, Copy)]
pub struct NoCompress;

#[derive(Clone, Copy)]
struct NotMarked;

impl Predicate for NotMarked {
    fn should_compress<B>(&self, response: &axum::http::Response<B>) -> bool
    where
        B: http_body::Body,
    {
        response.extensions().get::<NoCompress>().is_none()
    }
}

fn panic_response(
    _: Box<dyn std::any::Any + Send + 'static>,
) -> axum::http::Response<axum::body::Body> {
    use axum::response::IntoResponse;
    tracing::error!("request handler panicked");
    ApiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "unknown_error",
        "internal error",
    )
    .into_response()
}

/// Serves `app` on `listener` until `shutdown` completes.
///
/// The accept loop hands each connection to one of [`ServeOptions::threads`]
/// connection threads — the one serving the fewest — each running its own
/// single-threaded runtime, so a request, its handler and the wake-up when
/// the engine answers stay on one thread. (On a work-stealing runtime a
/// lone client's durable PUT was read by one worker, woke the other, and
/// was answered by whichever the engine's reply unparked: three thread
/// wake-ups per request on a 2-CPU VM; `bench/RESULTS.md`, session 7.)
pub async fn serve(
    listener: TcpListener,
    app: App,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        let _ = app.local_addr.set(addr);
    }
    // The `_replicator` database's jobs run while the server serves.
    app.replicator.spawn_rescheduler();
    let follower = tokio::spawn(Arc::clone(&app.replicator_docs).follow(app.closing.subscribe()));
    let permits = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    let threads = if opts.threads == 0 {
        std::thread::available_parallelism().map_or(1, usize::from)
    } else {
        opts.threads
    };
    let loads: Arc<[AtomicUsize]> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
    let mut senders = Vec::with_capacity(threads);
    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        // Unbounded, yet bounded by the permits: every queued connection
        // holds one.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        senders.push(tx);
        let (app, opts, loads) = (app.clone(), opts.clone(), loads.clone());
        // Tokio's default of 512 blocking threads per runtime, shared out:
        // one runtime per thread must not multiply it.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads((BLOCKING_THREADS_MAX / threads).max(8))
            .build()?;
        let handle = std::thread::Builder::new()
            .name(format!("http-{i}"))
            .spawn(move || runtime.block_on(serve_thread(rx, app, opts, loads, i)))?;
        handles.push(handle);
    }
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // A stream that cannot move between runtimes is dropped: only that
        // client sees it.
        let Ok(stream) = stream.into_std() else {
            continue;
        };
        let (least, _) = loads
            .iter()
            .enumerate()
            .min_by_key(|(_, l)| l.load(Ordering::Relaxed))
            .expect("at least one thread");
        loads[least].fetch_add(1, Ordering::Relaxed);
        if senders[least].send((stream, permit)).is_err() {
            // The thread is gone (it only ends when the senders drop).
            loads[least].fetch_sub(1, Ordering::Relaxed);
        }
    }
    // Running replications write their last checkpoints while the
    // connection threads still serve (bounded).
    app.closing.send_replace(true);
    let _ = follower.await;
    app.replicator.stop_all().await;
    drop(listener);
    // The threads see their channels close, wait (bounded) for their
    // connections and return; joining them must not block this runtime.
    drop(senders);
    tokio::task::spawn_blocking(move || {
        for h in handles {
            // A panicked connection thread has nothing left to wait for.
            let _ = h.join();
        }
    })
    .await
    .map_err(std::io::Error::other)
}

/// One connection thread: serves the connections handed to it until the
/// accept loop stops, then waits (bounded) for them to finish.
/// `loads[me]` counts its open connections.
async fn serve_thread(
    mut incoming: tokio::sync::mpsc::UnboundedReceiver<(std::net::TcpStream, OwnedSemaphorePermit)>,
    app: App,
    opts: ServeOptions,
    loads: Arc<[AtomicUsize]>,
    me: usize,
) {
    let router = crate::router(app).layer(CatchPanicLayer::custom(panic_response));
    let svc = ServiceBuilder::new()
        .layer(CompressionLayer::new().compress_when(DefaultPredicate::new().and(NotMarked)))
        // gzip request bodies are inflated here; any other encoding passes
        // through to the router, which refuses it as CouchDB does (415).
        .layer(RequestDecompressionLayer::new().pass_through_unaccepted(true))
        .service(router);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    while let Some((stream, permit)) = incoming.recv().await {
        let Ok(stream) = tokio::net::TcpStream::from_std(stream) else {
            loads[me].fetch_sub(1, Ordering::Relaxed);
            continue;
        };
        // Best effort: a socket that refuses NODELAY still works.
        let _ = stream.set_nodelay(true);
        // Each request knows its client's address (the login lockout).
        let peer = crate::auth::Peer(stream.peer_addr().ok().map(|a| a.ip()));
        let svc = tower::ServiceBuilder::new()
            .map_request(move |mut r: hyper::Request<hyper::body::Incoming>| {
                r.extensions_mut().insert(peer);
                r
            })
            .service(svc.clone());
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(opts.header_read_timeout)
            .keep_alive(true)
            .serve_connection(
                TokioIo::new(Linger::new(stream)),
                TowerToHyperService::new(svc),
            );
        let conn = graceful.watch(conn);
        let loads = loads.clone();
        tokio::spawn(async move {
            // Connection errors (resets, timeouts) concern only that client.
            let _ = conn.await;
            drop(permit);
            loads[me].fetch_sub(1, Ordering::Relaxed);
        });
    }
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(opts.shutdown_grace) => tracing::warn!("shutdown grace period over; closing connections"),
    }
}
