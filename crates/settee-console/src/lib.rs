//! The web admin console's assets, served at `/_utils/`.
//!
//! The bundle (built from `console/` by `build.rs`, embedded with
//! `include_bytes!`) is the one thing this crate owns; settee-http only
//! hands it the requests whose path is `/_utils` or under `/_utils/`
//! ([`is_console_path`], [`serve`]).
//!
//! Invariants:
//! - Only `GET` and `HEAD` are answered with content (anything else is 405);
//!   no request reads a file at run time: every byte served is in the binary.
//! - Every asset carries a strong `ETag` (XXH3 of its bytes, computed at
//!   build time) and `If-None-Match` answers 304. `index.html` is
//!   revalidated on every load (`no-cache`); the other files are named by
//!   their content's hash (esbuild's `[hash]`), so they are `immutable`.
//! - `/_utils` redirects to `/_utils/`; a path under it that names no asset
//!   and looks like a page (no extension, or `.html`, e.g. CouchDB's
//!   `/_utils/session.html` login redirect) gets `index.html` (the console
//!   routes in the browser); any other unknown path is 404.
//! - The assets are public (the same bytes for everyone, no data in them):
//!   they are served without authentication, so the login page loads even
//!   when `require_valid_user` is on. Every data request the console makes
//!   goes through the public HTTP API with the user's own session.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;

/// One file of the bundle.
#[derive(Debug)]
pub struct Asset {
    /// Path under `/_utils/`, with `/` separators.
    pub path: &'static str,
    /// Strong ETag, quotes included.
    pub etag: &'static str,
    pub body: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/assets.rs"));

/// The page every console route is rendered by.
const INDEX: &str = "index.html";

/// Whether `path` (the request's raw path) is the console's.
pub fn is_console_path(path: &str) -> bool {
    path == "/_utils" || path.starts_with("/_utils/")
}

/// The asset at `rel` (a path under `/_utils/`), if the bundle has it.
pub fn asset(rel: &str) -> Option<&'static Asset> {
    ASSETS
        .binary_search_by(|a| a.path.cmp(rel))
        .ok()
        .map(|i| &ASSETS[i])
}

/// The answer to a request for a console path (see [`is_console_path`]).
pub fn serve(method: &Method, path: &str, query: Option<&str>, headers: &HeaderMap) -> Response {
    if *method != Method::GET && *method != Method::HEAD {
        let mut r = error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "Only GET,HEAD allowed",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET,HEAD"));
        return r;
    }
    let Some(rel) = path.strip_prefix("/_utils/") else {
        let loc = match query {
            Some(q) => format!("/_utils/?{q}"),
            None => "/_utils/".to_string(),
        };
        let mut r = empty(StatusCode::MOVED_PERMANENTLY);
        if let Ok(v) = HeaderValue::from_str(&loc) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return r;
    };
    let rel = if rel.is_empty() { INDEX } else { rel };
    let found = asset(rel).or_else(|| looks_like_page(rel).then(|| asset(INDEX)).flatten());
    let Some(a) = found else {
        return error(StatusCode::NOT_FOUND, "not_found", "missing");
    };
    let etag = HeaderValue::from_static(a.etag);
    let fresh = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let t = t.trim();
            t == "*" || t.strip_prefix("W/").unwrap_or(t) == a.etag
        });
    let mut r = if fresh {
        empty(StatusCode::NOT_MODIFIED)
    } else if *method == Method::HEAD {
        let mut r = empty(StatusCode::OK);
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(a.body.len()));
        r
    } else {
        Response::new(Body::from(a.body))
    };
    let h = r.headers_mut();
    h.insert(header::ETAG, etag);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(a.path)),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    let cache = if a.path == INDEX {
        "no-cache"
    } else {
        "public, max-age=31536000, immutable"
    };
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if a.path == INDEX {
        // CodeMirror writes its styles into <style> elements: style-src
        // needs 'unsafe-inline'; scripts come only from the bundle.
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                 img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; \
                 base-uri 'none'; form-action 'self'",
            ),
        );
    }
    r
}

/// A console route rather than a missing file: no extension in its last
/// segment, or `.html`.
fn looks_like_page(rel: &str) -> bool {
    let last = rel.rsplit('/').next().unwrap_or(rel);
    !last.contains('.') || last.ends_with(".html")
}

/// The Content-Type of a bundle file, by its extension.
pub fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
    match ext {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

fn empty(status: StatusCode) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    r
}

/// CouchDB's error shape.
fn error(status: StatusCode, error: &str, reason: &str) -> Response {
    let body = format!("{{\"error\":\"{error}\",\"reason\":\"{reason}\"}}\n");
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str, headers: &HeaderMap) -> Response {
        serve(&Method::GET, path, None, headers)
    }

    #[test]
    fn bundle_has_an_index_and_is_sorted() {
        assert!(asset(INDEX).is_some());
        assert!(ASSETS.windows(2).all(|w| w[0].path < w[1].path));
        let html = std::str::from_utf8(asset(INDEX).unwrap().body).unwrap();
        // Every script and stylesheet the page names is in the bundle.
        for part in html.split("/_utils/").skip(1) {
            let name = part.split('"').next().unwrap();
            assert!(asset(name).is_some(), "index.html names {name}");
        }
    }

    #[test]
    fn redirect_index_fallback_and_404() {
        let h = HeaderMap::new();
        let r = serve(&Method::GET, "/_utils", Some("a=b"), &h);
        assert_eq!(r.status(), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(r.headers()[header::LOCATION], "/_utils/?a=b");
        let r = get("/_utils/", &h);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        assert_eq!(r.headers()[header::CACHE_CONTROL], "no-cache");
        let index_etag = r.headers()[header::ETAG].clone();
        for page in ["/_utils/session.html", "/_utils/database/x"] {
            let r = get(page, &h);
            assert_eq!(r.status(), StatusCode::OK, "{page}");
            assert_eq!(r.headers()[header::ETAG], index_etag, "{page}");
        }
        assert_eq!(get("/_utils/nope.js", &h).status(), StatusCode::NOT_FOUND);
        let r = serve(&Method::POST, "/_utils/", None, &h);
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[header::ALLOW], "GET,HEAD");
    }

    #[test]
    fn etags_and_types() {
        let js = ASSETS.iter().find(|a| a.path.ends_with(".js")).unwrap();
        let h = HeaderMap::new();
        let r = get(&format!("/_utils/{}", js.path), &h);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "text/javascript; charset=utf-8"
        );
        assert!(r.headers()[header::CACHE_CONTROL]
            .to_str()
            .unwrap()
            .contains("immutable"));
        let mut h = HeaderMap::new();
        h.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_str(&format!("\"x\", {}", js.etag)).unwrap(),
        );
        let r = get(&format!("/_utils/{}", js.path), &h);
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
        let r = serve(&Method::HEAD, "/_utils/", None, &HeaderMap::new());
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()[header::CONTENT_LENGTH],
            asset(INDEX).unwrap().body.len().to_string().as_str()
        );
        let sum: usize = ASSETS.iter().map(|a| a.body.len()).sum();
        assert_eq!(sum as u64, BUNDLE_BYTES);
    }
}
