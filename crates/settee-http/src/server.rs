//! The listener: accepts HTTP/1.1 connections and serves the router.
//!
//! Invariants (the bounds of the network edge):
//! - at most `max_connections` connections are served at once; beyond it
//!   the accept loop waits (the kernel backlog absorbs bursts);
//! - a client must send its request head within `header_read_timeout`
//!   (slow-loris); bodies are bounded by [`crate::request`];
//! - keep-alive is on; TCP_NODELAY is set (responses are written whole);
//! - on shutdown the loop stops accepting, tells streaming feeds to end
//!   (`AppState::closing`), and waits (bounded) for in-flight requests, so
//!   acknowledged writes are answered before the engine is shut down.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::predicate::{DefaultPredicate, Predicate};
use tower_http::compression::CompressionLayer;
use tower_http::decompression::RequestDecompressionLayer;

use crate::error::ApiError;
use crate::state::App;

/// Limits of the listener.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    /// How long shutdown waits for in-flight requests.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_connections: 2048,
            header_read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

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
pub async fn serve(
    listener: TcpListener,
    app: App,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let router = crate::router(app.clone()).layer(CatchPanicLayer::custom(panic_response));
    let svc = ServiceBuilder::new()
        .layer(CompressionLayer::new().compress_when(DefaultPredicate::new().and(NotMarked)))
        .layer(RequestDecompressionLayer::new())
        .service(router);
    let permits = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
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
        // Best effort: a socket that refuses NODELAY still works.
        let _ = stream.set_nodelay(true);
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(opts.header_read_timeout)
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // Connection errors (resets, timeouts) concern only that client.
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    app.closing.send_replace(true);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(opts.shutdown_grace) => tracing::warn!("shutdown grace period over; closing connections"),
    }
    Ok(())
}
