//! CouchDB's HTTP API over settee-db — the only crate that knows the wire
//! format.
//!
//! Code map:
//! - [`server`]: the listener loop (connection limit, header timeout,
//!   keep-alive, graceful shutdown), the connection threads (one
//!   single-threaded runtime per CPU) and the tower stack (gzip/deflate
//!   request bodies, compressed responses, panic guard);
//! - this module: the request entry point — counters, idle polling, CORS, authentication,
//!   path splitting, the headers of every answer (`Server`, and
//!   `X-Couch-Request-ID` — a client's own id echoed — with
//!   `X-CouchDB-Body-Time` where CouchDB sends them) — before
//!   [`routes::dispatch`] picks a handler;
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
pub mod auth_chain;
pub mod config;
pub mod design_req;
pub mod error;
pub mod idle_poll;
pub mod linger;
pub mod multipart_parts;
pub mod prometheus;
pub mod purge_holds;
pub mod render;
pub mod replicator_db;
pub mod request;
pub mod request_time;
pub mod routes;
pub mod server;
pub mod state;
pub mod stream;
pub mod upload;
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
    let arrived = std::time::Instant::now();
    let settings = app.config.settings();
    let origin = req.headers().get(header::ORIGIN).cloned();
    let cors_origin = origin.filter(|o| cors_allowed(&settings, o));
    let path_for_id = req.uri().path().to_string();
    let client_id = client_request_id(req.headers());
    let mut resp = if cors_origin.is_some() && req.method() == Method::OPTIONS {
        preflight(&settings)
    } else {
        route(&app, req, settings.clone()).await
    };
    let status = resp.status();
    let tag_request =
        sends_request_id(&path_for_id, status) && resp.extensions().get::<NoRequestId>().is_none();
    let h = resp.headers_mut();
    h.insert(header::SERVER, HeaderValue::from_static(SERVER_HEADER));
    if tag_request {
        h.insert(REQUEST_ID, client_id.unwrap_or_else(request_id));
        h.insert(BODY_TIME, HeaderValue::from_static("0"));
    }
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
    app.stats.request_times.record(arrived.elapsed());
    resp
}

/// CouchDB tags every response with a request id except `/favicon.ico`,
/// a successful `/_membership`, and `/_uuids` answers other than its 400s.
fn sends_request_id(path: &str, status: StatusCode) -> bool {
    match path.trim_end_matches('/') {
        "/favicon.ico" => false,
        "/_uuids" => status == StatusCode::BAD_REQUEST,
        "/_membership" => status != StatusCode::OK,
        _ => true,
    }
}

/// Marks a response CouchDB sends without `X-Couch-Request-ID` (those of
/// its older HTTP layer: `/_session`'s own answers).
#[derive(Clone, Copy)]
pub(crate) struct NoRequestId;

const REQUEST_ID: header::HeaderName = header::HeaderName::from_static("x-couch-request-id");
/// Sent with every request id, as CouchDB does. CouchDB reports the
/// milliseconds it spent receiving the request body; Settee streams bodies
/// into their handlers instead of receiving them first, and reports 0 (what
/// CouchDB reports for a body read at once).
const BODY_TIME: header::HeaderName = header::HeaderName::from_static("x-couchdb-body-time");

/// The request id a client sent, which CouchDB echoes instead of making
/// one: a single `X-Couch-Request-ID` of at most 36 ASCII letters, digits,
/// `-` and `_` (an empty one too). Any other is replaced by a generated id.
fn client_request_id(headers: &axum::http::HeaderMap) -> Option<HeaderValue> {
    let mut all = headers.get_all(REQUEST_ID).iter();
    let (v, None) = (all.next()?, all.next()) else {
        return None;
    };
    let b = v.as_bytes();
    (b.len() <= 36
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_')))
    .then(|| v.clone())
}

/// A request identifier as CouchDB sends it: 10 random lowercase hex digits
/// (a thread-local generator; no lock on the request path).
fn request_id() -> HeaderValue {
    use rand::Rng;
    let n: u64 = rand::rng().random::<u64>() & 0xff_ffff_ffff;
    HeaderValue::from_str(&format!("{n:010x}")).unwrap_or(HeaderValue::from_static("0000000000"))
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

/// Splits a raw path into decoded segments as CouchDB (mochiweb) does:
/// `+` is a space, `%XX` a byte (`/a%2Fb/c` → `a/b`, `c`); empty segments
/// (`//db`, a trailing `/`) are ignored. A `%` not followed by two hex digits is 400
/// `invalid_url_encoding`; bytes that are not UTF-8 are refused too (as an
/// illegal document id past the database segment).
fn split_path(path: &str) -> ApiResult<Vec<String>> {
    let trimmed = path.strip_prefix('/').unwrap_or(path);
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    trimmed
        .split('/')
        .filter(|s| !s.is_empty())
        .enumerate()
        .map(|(i, s)| {
            let b = s.as_bytes();
            let bad_escape = b.iter().enumerate().any(|(j, &c)| {
                c == b'%'
                    && !(b.get(j + 1).is_some_and(u8::is_ascii_hexdigit)
                        && b.get(j + 2).is_some_and(u8::is_ascii_hexdigit))
            });
            if bad_escape {
                return Err(ApiError::bad_request("invalid_url_encoding"));
            }
            let spaced = s.replace('+', " ");
            percent_decode_str(&spaced)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| {
                    if i == 0 {
                        ApiError::bad_request("URL path is not valid UTF-8 after percent-decoding")
                    } else {
                        ApiError::new(
                            StatusCode::BAD_REQUEST,
                            "illegal_docid",
                            "Document id must be valid UTF-8",
                        )
                    }
                })
        })
        .collect()
}

/// CouchDB answers a GET of `/db/_design%2Fname[/rest]` (a design
/// document, its views…) with a redirect to `/db/_design/name[/rest]`;
/// the target, if this is such a request.
fn design_redirect(
    method: &Method,
    raw_path: &str,
    headers: &axum::http::HeaderMap,
) -> Option<Response> {
    if method != Method::GET {
        return None;
    }
    let rest = raw_path.strip_prefix('/')?;
    let (db, doc) = rest.split_once('/')?;
    // `get` keeps a multi-byte character at byte 10 from panicking the slice.
    let (head, name) = (doc.get(..10)?, doc.get(10..)?);
    if !head.eq_ignore_ascii_case("_design%2F") {
        return None;
    }
    let host = headers
        .get("x-forwarded-host")
        .or_else(|| headers.get(header::HOST))?
        .to_str()
        .ok()?;
    let loc = HeaderValue::from_str(&format!("http://{host}/{db}/_design/{name}")).ok()?;
    let mut resp = StatusCode::MOVED_PERMANENTLY.into_response();
    resp.headers_mut().insert(header::LOCATION, loc);
    Some(resp)
}

/// Routes one request; afterwards drains what the handler left of the body
/// (see [`Req::settle_body`]) and marks the response `Connection: close`
/// when the connection cannot be reused.
async fn route(app: &App, req: Request, settings: std::sync::Arc<Settings>) -> Response {
    let (mut parts, body) = req.into_parts();
    let peer = parts.extensions.get::<auth::Peer>().and_then(|p| p.0);
    if let Some(resp) = design_redirect(&parts.method, parts.uri.path(), &parts.headers) {
        return resp;
    }
    // The web console's assets: public, so served before authentication
    // (the login page must load under require_valid_user).
    if settee_console::is_console_path(parts.uri.path()) {
        let mut resp = settee_console::serve(
            &parts.method,
            parts.uri.path(),
            parts.uri.query(),
            &parts.headers,
        );
        if !request::drain_unread(Some(body), &parts.headers).await {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        return resp;
    }
    method_override(&mut parts.method, &parts.headers);
    let query = Query::parse(parts.uri.query());
    let jsonp = match jsonp_callback(&settings, &query) {
        Ok(cb) => cb,
        Err(e) => return e.into_response(),
    };
    let accepts_html = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"));
    let prelude = match (
        content_encoding(&parts.headers),
        split_path(parts.uri.path()),
    ) {
        (Err(e), _) | (_, Err(e)) => Err(e),
        (Ok(()), Ok(segs)) => match cluster_peer(app, &parts.headers) {
            Some(who) => who.map(|who| (segs, who)),
            None => app
                .auth
                .authenticate(&parts.headers, &app.engine, peer, &settings)
                .await
                .and_then(|who| {
                    let login = parts.method == Method::POST && segs == ["_session"];
                    let up = settings.require_valid_user_except_for_up && segs == ["_up"];
                    if settings.require_valid_user && who.user.name.is_none() && !login && !up {
                        Err(ApiError::unauthorized("Authentication required."))
                    } else {
                        Ok((segs, who))
                    }
                }),
        },
    };
    let www_authenticate = if settings.require_valid_user {
        Some("Basic realm=\"server\"".to_string())
    } else {
        settings.www_authenticate.clone()
    };
    let mut set_cookie = None;
    let (result, reusable) = match prelude {
        Ok((segs, who)) => {
            let mut req = Req::new(
                parts.method,
                parts.uri.clone(),
                parts.headers.clone(),
                query,
                who.user,
                settings,
                body,
            );
            req.auth_method = who.method;
            req.internal = who.method == Some(CLUSTER_AUTH);
            req.peer = peer;
            set_cookie = who.set_cookie;
            let result = routes::dispatch(app, &mut req, &segs).await;
            (result, req.settle_body().await)
        }
        Err(e) => (
            Err(e),
            request::drain_unread(Some(body), &parts.headers).await,
        ),
    };
    let mut resp = match result {
        Ok(r) => r,
        Err(e) if accepts_html && e.status == StatusCode::UNAUTHORIZED => {
            login_redirect(&parts.headers, parts.uri.path(), &e)
        }
        Err(e) => e.into_response(),
    };
    if resp.status() == StatusCode::UNAUTHORIZED {
        if let Some(v) = www_authenticate.and_then(|v| HeaderValue::from_str(&v).ok()) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
    }
    // A session cookie past a tenth of its life is renewed (CouchDB).
    if let Some(c) = set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        if !resp.headers().contains_key(header::SET_COOKIE) {
            resp.headers_mut().insert(header::SET_COOKIE, c);
        }
    }
    if let Some(cb) = jsonp {
        resp = wrap_jsonp(resp, &cb).await;
    }
    if !reusable {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// The `auth_method` of a request another node of the cluster made.
const CLUSTER_AUTH: &str = "cluster";

/// A request another node of the cluster made: it carries the cluster's
/// secret (a wrong one is refused, never tried as a client's
/// credentials) and names the user it acts for (the cluster itself, a
/// server admin, when it names none). `None` for every other request.
fn cluster_peer(
    app: &App,
    headers: &axum::http::HeaderMap,
) -> Option<ApiResult<auth::Authenticated>> {
    let given = headers.get(settee_cluster::fabric::SECRET_HEADER)?;
    let Some(c) = app.coordinator() else {
        return Some(Err(ApiError::unauthorized(
            "This server is not a cluster member.",
        )));
    };
    if !given.to_str().is_ok_and(|g| c.is_secret(g)) {
        return Some(Err(ApiError::unauthorized(
            "Name or password is incorrect.",
        )));
    }
    let user = headers
        .get(settee_cluster::fabric::USER_HEADER)
        .and_then(|v| serde_json::from_slice::<settee_cluster::User>(v.as_bytes()).ok())
        .map(|u| settee_auth::UserCtx {
            name: u.name,
            roles: u.roles,
        })
        .unwrap_or_else(|| settee_auth::UserCtx::server_admin("_cluster"));
    Some(Ok(auth::Authenticated {
        user,
        method: Some(CLUSTER_AUTH),
        set_cookie: None,
    }))
}

/// `X-HTTP-Method-Override` on a POST replaces its method (CouchDB honours
/// it on POST only).
fn method_override(method: &mut Method, headers: &axum::http::HeaderMap) {
    if *method != Method::POST {
        return;
    }
    if let Some(m) = headers
        .get("x-http-method-override")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| Method::from_bytes(v.trim().as_bytes()).ok())
    {
        *method = m;
    }
}

/// 415 for a request body in an encoding other than gzip (inflated before
/// routing) or identity.
fn content_encoding(headers: &axum::http::HeaderMap) -> ApiResult<()> {
    match headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
    {
        None => Ok(()),
        Some(e) if e == "identity" => Ok(()),
        Some(e) => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "bad_content_type",
            format!("{e} is not a supported content encoding."),
        )),
    }
}

/// With `[chttpd] allow_jsonp`, the `callback` parameter (which must be a
/// JavaScript identifier path) names the function to wrap the JSON in.
fn jsonp_callback(settings: &Settings, query: &Query) -> ApiResult<Option<String>> {
    if !settings.allow_jsonp {
        return Ok(None);
    }
    let Some(cb) = query.get("callback") else {
        return Ok(None);
    };
    let ok = !cb.is_empty()
        && cb.len() <= 128
        && cb
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'$' | b'[' | b']'));
    if ok {
        Ok(Some(cb.to_string()))
    } else {
        Err(ApiError::bad_request("invalid_callback"))
    }
}

/// Largest JSON response JSONP wraps (it buffers the body).
const JSONP_MAX: usize = 64 << 20;

/// `/* CouchDB */cb(<json>);` as `application/javascript`.
async fn wrap_jsonp(resp: Response, cb: &str) -> Response {
    use http_body_util::BodyExt;
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let limited = http_body_util::Limited::new(body, JSONP_MAX);
    let Ok(collected) = limited.collect().await else {
        return ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "error",
            "response too large for JSONP",
        )
        .into_response();
    };
    let bytes = collected.to_bytes();
    let json = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    let mut out = Vec::with_capacity(json.len() + cb.len() + 20);
    out.extend_from_slice(b"/* CouchDB */");
    out.extend_from_slice(cb.as_bytes());
    out.push(b'(');
    out.extend_from_slice(json);
    out.extend_from_slice(b");\n");
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/javascript"),
    );
    Response::from_parts(parts, axum::body::Body::from(out))
}

/// A browser (`Accept: text/html`) refused with 401 is sent to the login
/// page instead, the JSON error still in the body (CouchDB's behaviour).
fn login_redirect(headers: &axum::http::HeaderMap, path: &str, e: &ApiError) -> Response {
    use percent_encoding::utf8_percent_encode;
    use routes::db::URL_ENCODE;
    let host = headers
        .get("x-forwarded-host")
        .or_else(|| headers.get(header::HOST))
        .and_then(|v| v.to_str().ok());
    let mut resp = e.clone().into_response();
    if let Some(host) = host {
        let loc = format!(
            "http://{host}/_utils/session.html?return={}&reason={}",
            utf8_percent_encode(path, URL_ENCODE),
            utf8_percent_encode(&e.reason, URL_ENCODE)
        );
        if let Ok(v) = HeaderValue::from_str(&loc) {
            *resp.status_mut() = StatusCode::FOUND;
            resp.headers_mut().insert(header::LOCATION, v);
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_request_ids_echoed_only_when_couchdb_would() {
        let id = |vals: &[&str]| {
            let mut h = axum::http::HeaderMap::new();
            for v in vals {
                h.append(REQUEST_ID, HeaderValue::from_str(v).unwrap());
            }
            client_request_id(&h).map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(id(&["my-req_1"]).as_deref(), Some("my-req_1"));
        assert_eq!(id(&[""]).as_deref(), Some(""));
        let longest = "a".repeat(36);
        assert_eq!(id(&[&longest]), Some(longest.clone()));
        assert_eq!(id(&[&format!("{longest}a")]), None);
        for bad in ["a.b", "a b", "a+b", "a/b", "é"] {
            assert_eq!(id(&[bad]), None, "{bad}");
        }
        assert_eq!(id(&[]), None);
        assert_eq!(id(&["one", "two"]), None);
    }

    #[test]
    fn path_splitting() {
        assert_eq!(split_path("/").unwrap(), Vec::<String>::new());
        assert_eq!(split_path("/db/").unwrap(), vec!["db"]);
        assert_eq!(
            split_path("/a%2Fb/_design/x").unwrap(),
            vec!["a/b", "_design", "x"]
        );
        assert!(split_path("/%ff").is_err());
        assert_eq!(split_path("/db/a+b").unwrap(), vec!["db", "a b"]);
        assert_eq!(split_path("/db/a%2Bb").unwrap(), vec!["db", "a+b"]);
        assert_eq!(
            split_path("/db/a%ZZb").unwrap_err().reason,
            "invalid_url_encoding"
        );
        assert_eq!(split_path("/db/%FF%FE").unwrap_err().error, "illegal_docid");
        assert!(split_path("/db/a%2").is_err());
    }

    #[test]
    fn design_redirect_only_for_encoded_design_ids() {
        let mut h = axum::http::HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("h:1"));
        let r = design_redirect(&Method::GET, "/db/_design%2Fd1", &h).expect("redirect");
        assert_eq!(r.status(), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(r.headers()[header::LOCATION], "http://h:1/db/_design/d1");
        assert!(design_redirect(&Method::PUT, "/db/_design%2Fd1", &h).is_none());
        // A multi-byte character across byte 10 of the id (found by the
        // hostile-request generator: it panicked the slice).
        assert!(design_redirect(&Method::GET, "/db/aaaaaaaaa\u{e9}", &h).is_none());
        assert!(design_redirect(&Method::GET, "/db/_design/x", &h).is_none());
    }
}
