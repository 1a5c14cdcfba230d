//! The HTTP load client: one keep-alive HTTP/1.1 connection per simulated
//! client (hyper's connection-level API, so "N clients" is exactly N
//! sockets), `TCP_NODELAY`, bodies handed over as pre-encoded `Bytes`
//! (no copy, not streamed), the response body collected whole. A body is
//! sent as `application/json` unless the request names a `content-type`.
//!
//! A [`Target`] is a parsed `http://user:pass@host:port/prefix` URL; the
//! credentials become one precomputed `Authorization` header. Only plain
//! `http` is supported (benchmarks run over loopback).

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;

use crate::error::BenchError;

/// A server to load, from its URL.
#[derive(Debug)]
pub struct Target {
    /// The URL without credentials (safe to print).
    pub url: String,
    pub addr: SocketAddr,
    host: HeaderValue,
    prefix: String,
    auth: Option<HeaderValue>,
}

impl Target {
    /// Parses `http://[user:pass@]host[:port][/prefix]`.
    pub fn parse(url: &str) -> Result<Target, BenchError> {
        let bad = |reason: &str| BenchError::BadUrl {
            url: redact(url),
            reason: reason.to_string(),
        };
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        if hostport.is_empty() {
            return Err(bad("no host"));
        }
        let with_port = if hostport
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            hostport.to_string()
        } else {
            format!("{hostport}:80")
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| bad(&format!("cannot resolve: {e}")))?
            .next()
            .ok_or_else(|| bad("host resolves to nothing"))?;
        let auth = match userinfo {
            Some(ui) => {
                let decoded = percent_encoding::percent_decode_str(ui)
                    .decode_utf8()
                    .map_err(|_| bad("credentials are not UTF-8"))?;
                let token = base64::engine::general_purpose::STANDARD.encode(decoded.as_bytes());
                Some(
                    HeaderValue::from_str(&format!("Basic {token}"))
                        .map_err(|_| bad("bad credentials"))?,
                )
            }
            None => None,
        };
        Ok(Target {
            url: format!("http://{hostport}{}", path.trim_end_matches('/')),
            addr,
            host: HeaderValue::from_str(hostport).map_err(|_| bad("bad host"))?,
            prefix: path.trim_end_matches('/').to_string(),
            auth,
        })
    }

    /// The URL with its credentials (percent-encoded), for a subprocess
    /// that must log in itself, e.g. `settee copy`. Never print it:
    /// [`redact`] it first.
    pub fn url_with_credentials(&self) -> String {
        let cred = self
            .auth
            .as_ref()
            .and_then(|a| a.to_str().ok())
            .and_then(|a| a.strip_prefix("Basic "))
            .and_then(|t| base64::engine::general_purpose::STANDARD.decode(t).ok())
            .and_then(|b| String::from_utf8(b).ok());
        let (Some(cred), Some(rest)) = (cred, self.url.strip_prefix("http://")) else {
            return self.url.clone();
        };
        let (user, pass) = cred.split_once(':').unwrap_or((&cred, ""));
        let enc = |s| percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC);
        format!("http://{}:{}@{rest}", enc(user), enc(pass))
    }
}

/// `url` with any password replaced by `***`.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].find(':') {
            Some(c) => format!("{}:***{}", &url[..s + 3 + c], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

/// A response, body read whole.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: Bytes,
}

impl Response {
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// Whether the body contains `"error"` — a bulk reply with a per-document failure.
    /// (A substring search: the check is on the client's side of every
    /// request's latency, and a window-by-window compare of a 70 KB
    /// `_bulk_docs` reply cost ~0.1 ms.)
    pub fn mentions_error(&self) -> bool {
        memchr::memmem::find(&self.body, b"\"error\"").is_some()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body[..self.body.len().min(300)]).into_owned()
    }
}

/// One keep-alive connection to a target.
#[derive(Debug)]
pub struct Conn {
    target: Arc<Target>,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    /// Opens the connection (it is reopened lazily if the server closes it).
    pub async fn connect(target: &Arc<Target>) -> Result<Conn, BenchError> {
        let mut c = Conn {
            target: target.clone(),
            sender: None,
        };
        c.ensure().await?;
        Ok(c)
    }

    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }

    async fn ensure(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, BenchError> {
        if let Some(s) = &mut self.sender {
            if s.ready().await.is_ok() {
                return Ok(self.sender.as_mut().expect("just checked"));
            }
            self.sender = None;
        }
        let addr = self.target.addr;
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|source| BenchError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| BenchError::Transport(e.to_string()))?;
        tokio::spawn(async move {
            // Ends when the connection closes; errors surface on requests.
            let _ = conn.await;
        });
        Ok(self.sender.insert(sender))
    }

    /// Sends one request (path relative to the target's prefix).
    pub async fn request(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
        headers: &[(&'static str, &'static str)],
    ) -> Result<Response, BenchError> {
        let target = self.target.clone();
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{}{}", target.prefix, path))
            .header(HOST, target.host.clone());
        if let Some(a) = &target.auth {
            b = b.header(AUTHORIZATION, a.clone());
        }
        // JSON unless the caller names a type (an attachment's).
        let typed = headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
        if !body.is_empty() && !typed {
            b = b.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        for (k, v) in headers {
            b = b.header(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        let req = b
            .body(Full::new(body))
            .map_err(|e| BenchError::Transport(e.to_string()))?;
        let sender = self.ensure().await?;
        let result = async {
            let resp = sender.send_request(req).await?;
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>(Response { status, body })
        }
        .await;
        result.map_err(|e| {
            self.sender = None;
            BenchError::Transport(e.to_string())
        })
    }

    pub async fn get(&mut self, path: &str) -> Result<Response, BenchError> {
        self.request(Method::GET, path, Bytes::new(), &[]).await
    }

    /// A request that must answer one of `ok` statuses.
    pub async fn expect(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
        ok: &[u16],
    ) -> Result<Response, BenchError> {
        let m = method.to_string();
        let r = self.request(method, path, body, &[]).await?;
        if ok.contains(&r.status) {
            Ok(r)
        } else {
            Err(BenchError::Status {
                method: m,
                path: path.to_string(),
                status: r.status,
                body: r.text(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls_with_credentials_and_prefix() {
        let t = Target::parse("http://admin:p%40ss@127.0.0.1:5984/couch/").unwrap();
        assert_eq!(t.url, "http://127.0.0.1:5984/couch");
        assert_eq!(t.prefix, "/couch");
        assert_eq!(t.addr.port(), 5984);
        let want = base64::engine::general_purpose::STANDARD.encode("admin:p@ss");
        assert_eq!(
            t.url_with_credentials(),
            "http://admin:p%40ss@127.0.0.1:5984/couch"
        );
        assert_eq!(t.auth.unwrap(), format!("Basic {want}").as_str());
        let t = Target::parse("http://127.0.0.1:1").unwrap();
        assert!(t.auth.is_none());
        assert_eq!(t.url_with_credentials(), "http://127.0.0.1:1");
        assert_eq!(t.prefix, "");
        assert!(Target::parse("https://x:1").is_err());
        assert!(Target::parse("http://").is_err());
        assert_eq!(redact("http://a:secret@h:1/x"), "http://a:***@h:1/x");
        assert_eq!(redact("http://h:1"), "http://h:1");
    }

    #[test]
    fn finds_error_members_anywhere_in_a_reply() {
        let r = |body: &'static str| Response {
            status: 201,
            body: Bytes::from_static(body.as_bytes()),
        };
        assert!(!r(r#"[{"ok":true,"id":"a","rev":"1-x"}]"#).mentions_error());
        assert!(r(r#"[{"id":"a","error":"conflict","reason":"x"}]"#).mentions_error());
        assert!(r(r#""error""#).mentions_error());
        assert!(!r(r#"{"errors":1,"error ":2,"error"#).mentions_error());
        assert!(!r("").mentions_error());
    }
}
