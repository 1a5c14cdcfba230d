//! CouchDB's HTTP API over settee-db — the only crate that knows the wire
//! format.
//!
//! Code map:
//! - [`server`]: the listener loop (connection limit, header timeout,
//!   keep-alive, graceful shutdown), the connection threads (one
//!   single-threaded runtime per CPU) and the tower stack (gzip/deflate
//!   request bodies, compressed responses, panic guard);
//! - this module: the request entry point — counters, idle polling, CORS, authentication,
//!   path splitting — before [`routes::dispatch`] picks a handler;
//! - [`idle_poll`]: spinners that keep idle CPUs awake after requests;
//! - [`error`]: the single error table; [`auth`]: who may do what;
//!   [`config`]: `/_node/_local/_config` settings; [`request`]: bounded body
//!   reading and query parsing; [`render`]: document JSON;
//!   [`routes`]: one module per group of endpoints.
//!
//! Invariant: every response a client sees — including errors raised
//! before routing — is CouchDB-shaped JSON with the status of the error
//! table; nothing derived from input can panic a handler (and a panic that
//! slips through becomes a 500, not a dropped connection).

pub mod auth;
pub mod config;
pub mod error;
pub mod idle_poll;
pub mod render;
pub mod request;
pub mod routes;
pub mod server;
pub mod state;
pub mod stream;
pub mod uuids;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use percent_encoding::percent_decode_str;

pub use server::{serve, ServeOptions};
pub use state::{App, AppState};

use crate::config::Settings;
use crate::error::{ApiError, ApiResult};
use crate::request::{Query, Req};

const SERVER_HEADER: &str = concat!("Settee/", env!("CARGO_PKG_VERSION"));
const CORS_EXPOSE: &str = "content-type, cache-control, accept-ranges, etag, server, x-couch-request-id, x-couch-update-newrev";

/// The axum router: one fallback handler that does its own routing (CouchDB
/// paths hold database names and document ids with `/` in them).
pub fn router(app: App) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(app)
}

async fn handle(State(app): State<App>, req: Request) -> Response {
    let _in_flight = app.idle_poll.as_ref().map(|p| p.begin());
    app.stats.count_request(req.method());
    let settings = app.config.settings();
    let origin = req.headers().get(header::ORIGIN).cloned();
    let cors_origin = origin.filter(|o| cors_allowed(&settings, o));
    let mut resp = if cors_origin.is_some() && req.method() == Method::OPTIONS {
        preflight(&settings)
    } else {
        route(&app, req, settings.clone()).await
    };
    let h = resp.headers_mut();
    h.insert(header::SERVER, HeaderValue::from_static(SERVER_HEADER));
    if let Some(origin) = cors_origin {
        let wildcard = settings.cors.origins.iter().any(|o| o == "*") && !settings.cors.credentials;
        h.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            if wildcard {
                HeaderValue::from_static("*")
            } else {
                origin
            },
        );
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(CORS_EXPOSE),
        );
        if settings.cors.credentials {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
    }
    app.stats.count_status(resp.status().as_u16());
    resp
}

fn cors_allowed(settings: &Settings, origin: &HeaderValue) -> bool {
    let cors = &settings.cors;
    cors.enabled
        && origin.to_str().is_ok_and(|o| {
            cors.origins
                .iter()
                .any(|allowed| allowed == "*" || allowed.eq_ignore_ascii_case(o))
        })
}

fn preflight(settings: &Settings) -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&settings.cors.methods) {
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, v);
    }
    if let Ok(v) = HeaderValue::from_str(&settings.cors.headers) {
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
    }
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from(settings.cors.max_age),
    );
    resp
}

/// Splits a raw path into percent-decoded segments (`/a%2Fb/c` → `a/b`, `c`);
/// a trailing `/` is ignored.
fn split_path(path: &str) -> ApiResult<Vec<String>> {
    let trimmed = path.strip_prefix('/').unwrap_or(path);
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    trimmed
        .split('/')
        .map(|s| {
            percent_decode_str(s)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| {
                    ApiError::bad_request("URL path is not valid UTF-8 after percent-decoding")
                })
        })
        .collect()
}

/// Routes one request; afterwards drains what the handler left of the body
/// (see [`Req::settle_body`]) and marks the response `Connection: close`
/// when the connection cannot be reused.
async fn route(app: &App, req: Request, settings: std::sync::Arc<Settings>) -> Response {
    let (parts, body) = req.into_parts();
    let prelude = match split_path(parts.uri.path()) {
        Ok(segs) => app
            .auth
            .authenticate(&parts.headers)
            .await
            .map(|u| (segs, u)),
        Err(e) => Err(e),
    };
    let (result, reusable) = match prelude {
        Ok((segs, user)) => {
            let query = Query::parse(parts.uri.query());
            let mut req = Req::new(parts.method, parts.headers, query, user, settings, body);
            let result = routes::dispatch(app, &mut req, &segs).await;
            (result, req.settle_body().await)
        }
        Err(e) => (
            Err(e),
            request::drain_unread(Some(body), &parts.headers).await,
        ),
    };
    let mut resp = result.unwrap_or_else(IntoResponse::into_response);
    if !reusable {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_splitting() {
        assert_eq!(split_path("/").unwrap(), Vec::<String>::new());
        assert_eq!(split_path("/db/").unwrap(), vec!["db"]);
        assert_eq!(
            split_path("/a%2Fb/_design/x").unwrap(),
            vec!["a/b", "_design", "x"]
        );
        assert!(split_path("/%ff").is_err());
    }
}
