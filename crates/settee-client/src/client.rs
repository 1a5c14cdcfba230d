//! The HTTP client: connection pool, TLS, proxy, timeouts and the retry loop.
//!
//! Invariant: a request is retried only when [`Error::is_transient`] says so
//! and the caller's [`RetryPolicy`] allows it; every retry waits an
//! exponentially growing, jittered delay, bounded by `backoff_max`.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use reqwest::{Method, StatusCode};

use crate::error::Error;

/// Largest response body read into memory (a guard against a runaway or
/// hostile server; `_bulk_get` pages of 10,000 large documents stay below).
pub const RESPONSE_BYTES_MAX: usize = 1 << 30;

/// How to reach servers. All fields have working defaults.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// PEM file with extra trusted root certificates (added to the
    /// built-in web PKI roots).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (chain) and its private key, for mutual TLS.
    /// Both or neither.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// HTTP or HTTPS proxy for all requests (e.g. `http://proxy:3128`).
    pub proxy: Option<String>,
    pub connect_timeout: Duration,
    /// Whole-request timeout; a request without an answer by then is a
    /// stall ([`Error::Timeout`]).
    pub request_timeout: Duration,
    pub retry: RetryPolicy,
    /// Idle keep-alive connections kept per host.
    pub pool_idle_per_host: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            ca_file: None,
            client_cert: None,
            client_key: None,
            proxy: None,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            retry: RetryPolicy::default(),
            pool_idle_per_host: 8,
        }
    }
}

/// Retries with exponential backoff.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0: no retry).
    pub retries: u32,
    pub backoff_first: Duration,
    pub backoff_max: Duration,
    /// Retry timeouts too. Callers that adapt their request size to stalls
    /// turn this off and shrink instead.
    pub retry_timeouts: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: 5,
            backoff_first: Duration::from_millis(200),
            backoff_max: Duration::from_secs(20),
            retry_timeouts: true,
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `attempt` (1-based): first·2^(attempt-1),
    /// capped, with ±25% jitter so parallel clients do not retry in step.
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self
            .backoff_first
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.backoff_max);
        let jitter = rand::random_range(0.75..1.25);
        base.mul_f64(jitter)
    }
}

/// User name and password for HTTP Basic authentication.
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}:***)", self.user)
    }
}

/// A pooled HTTP client; cheap to clone (shares the pool).
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    opts: ClientOptions,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("opts", &self.opts).finish()
    }
}

/// One request, with everything needed to send it again.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub method: Method,
    pub url: url::Url,
    pub body: Option<Bytes>,
    pub credentials: Option<Credentials>,
    pub retry: RetryPolicy,
    pub timeout: Option<Duration>,
    /// Extra headers of the database's endpoint (shared, cheap to clone).
    pub headers: std::sync::Arc<[(String, String)]>,
}

impl Client {
    pub fn new(opts: ClientOptions) -> Result<Client, Error> {
        let mut b = reqwest::Client::builder()
            .use_rustls_tls()
            .connect_timeout(opts.connect_timeout)
            .timeout(opts.request_timeout)
            .pool_max_idle_per_host(opts.pool_idle_per_host)
            .tcp_nodelay(true)
            .gzip(true)
            .user_agent(concat!("settee-client/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &opts.ca_file {
            let pem = read_file(path, "CA file")?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| Error::Config(format!("CA file {}: {e}", path.display())))?;
            if certs.is_empty() {
                return Err(Error::Config(format!(
                    "CA file {}: no PEM certificate found",
                    path.display()
                )));
            }
            for c in certs {
                b = b.add_root_certificate(c);
            }
        }
        match (&opts.client_cert, &opts.client_key) {
            (Some(cert), Some(key)) => {
                let mut pem = read_file(cert, "client certificate")?;
                pem.push(b'\n');
                pem.extend(read_file(key, "client key")?);
                let id = reqwest::Identity::from_pem(&pem)
                    .map_err(|e| Error::Config(format!("client certificate/key: {e}")))?;
                b = b.identity(id);
            }
            (None, None) => {}
            _ => {
                return Err(Error::Config(
                    "a client certificate needs both --cert and --key".into(),
                ))
            }
        }
        if let Some(p) = &opts.proxy {
            let proxy =
                reqwest::Proxy::all(p).map_err(|e| Error::Config(format!("proxy {p:?}: {e}")))?;
            b = b.proxy(proxy);
        }
        let http = b
            .build()
            .map_err(|e| Error::Config(format!("HTTP client: {e}")))?;
        Ok(Client { http, opts })
    }

    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    /// Sends `req`, retrying transient failures per its policy, and returns
    /// the body of a 2xx answer. Non-2xx answers become [`Error::Couch`].
    pub(crate) async fn send(&self, req: &Request) -> Result<(StatusCode, Bytes), Error> {
        let mut attempt = 0u32;
        loop {
            let result = self.send_once(req).await;
            match result {
                Err(e)
                    if e.is_transient()
                        && attempt < req.retry.retries
                        && (req.retry.retry_timeouts || !e.is_timeout()) =>
                {
                    attempt += 1;
                    let delay = req.retry.delay(attempt);
                    tracing::warn!(error = %e, attempt, delay_ms = delay.as_millis() as u64, "retrying");
                    tokio::time::sleep(delay).await;
                }
                other => return other,
            }
        }
    }

    /// A request builder for `req` (Accept, headers, credentials,
    /// timeout); the body is the caller's.
    fn builder(&self, req: &Request, accept: &str) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .request(req.method.clone(), req.url.clone())
            .header(reqwest::header::ACCEPT, accept);
        for (k, v) in req.headers.iter() {
            rb = rb.header(k.as_str(), v.as_str());
        }
        if let Some(c) = &req.credentials {
            rb = rb.basic_auth(&c.user, Some(&c.password));
        }
        if let Some(t) = req.timeout {
            rb = rb.timeout(t);
        }
        rb
    }

    fn error_map(&self, req: &Request) -> impl Fn(reqwest::Error) -> Error {
        let shown = crate::db::display_url(&req.url);
        let method = req.method.as_str().to_string();
        let timeout_ms = req.timeout.unwrap_or(self.opts.request_timeout).as_millis() as u64;
        move |e| classify(e, &method, &shown, timeout_ms)
    }

    async fn send_once(&self, req: &Request) -> Result<(StatusCode, Bytes), Error> {
        let mut rb = self.builder(req, "application/json");
        if let Some(body) = &req.body {
            rb = rb
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        let resp = rb.send().await.map_err(self.error_map(req))?;
        self.answer(req, resp).await
    }

    /// Reads an answer to `req` (bounded by [`RESPONSE_BYTES_MAX`]): the
    /// body of a 2xx, else [`Error::Couch`].
    async fn answer(
        &self,
        req: &Request,
        mut resp: reqwest::Response,
    ) -> Result<(StatusCode, Bytes), Error> {
        let shown = crate::db::display_url(&req.url);
        let method = req.method.as_str().to_string();
        let map = self.error_map(req);
        let status = resp.status();
        if let Some(len) = resp.content_length() {
            if len as usize > RESPONSE_BYTES_MAX {
                return Err(Error::BadResponse {
                    method,
                    url: shown,
                    detail: format!("body of {len} bytes exceeds {RESPONSE_BYTES_MAX}"),
                });
            }
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(&map)? {
            if body.len() + chunk.len() > RESPONSE_BYTES_MAX {
                return Err(Error::BadResponse {
                    method,
                    url: shown,
                    detail: format!("body exceeds {RESPONSE_BYTES_MAX} bytes"),
                });
            }
            body.extend_from_slice(&chunk);
        }
        if status.is_success() {
            return Ok((status, Bytes::from(body)));
        }
        #[derive(serde::Deserialize)]
        struct CouchError {
            error: serde_json::Value,
            #[serde(default)]
            reason: serde_json::Value,
        }
        let text = |v: serde_json::Value| match v {
            serde_json::Value::String(s) => s,
            serde_json::Value::Null => String::new(),
            other => other.to_string(),
        };
        let (error, reason) = match serde_json::from_slice::<CouchError>(&body) {
            Ok(e) => (text(e.error), text(e.reason)),
            Err(_) => (
                status
                    .canonical_reason()
                    .unwrap_or("error")
                    .to_ascii_lowercase()
                    .replace(' ', "_"),
                String::from_utf8_lossy(&body[..body.len().min(200)])
                    .trim()
                    .to_string(),
            ),
        };
        Err(Error::Couch {
            method,
            url: shown,
            status: status.as_u16(),
            error,
            reason,
        })
    }

    /// Sends `get`'s answer body, as it arrives, as the body of `put`
    /// (with the answer's Content-Type), retrying the pair on transient
    /// failures per `get`'s policy; returns `put`'s answer. Nothing of the
    /// transferred body is held beyond the chunk in flight.
    pub(crate) async fn stream_copy(
        &self,
        get: &Request,
        accept: &str,
        put: &Request,
    ) -> Result<Bytes, Error> {
        let mut attempt = 0u32;
        loop {
            match self.stream_copy_once(get, accept, put).await {
                Err(e)
                    if e.is_transient()
                        && attempt < get.retry.retries
                        && (get.retry.retry_timeouts || !e.is_timeout()) =>
                {
                    attempt += 1;
                    let delay = get.retry.delay(attempt);
                    tracing::warn!(error = %e, attempt, delay_ms = delay.as_millis() as u64, "retrying");
                    tokio::time::sleep(delay).await;
                }
                other => return other.map(|(_, body)| body),
            }
        }
    }

    async fn stream_copy_once(
        &self,
        get: &Request,
        accept: &str,
        put: &Request,
    ) -> Result<(StatusCode, Bytes), Error> {
        let resp = self
            .builder(get, accept)
            .send()
            .await
            .map_err(self.error_map(get))?;
        if !resp.status().is_success() {
            return self.answer(get, resp).await;
        }
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .cloned()
            .unwrap_or(reqwest::header::HeaderValue::from_static(
                "application/json",
            ));
        let body = reqwest::Body::wrap_stream(resp.bytes_stream());
        let resp = self
            .builder(put, "application/json")
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await
            .map_err(self.error_map(put))?;
        self.answer(put, resp).await
    }
}

fn read_file(path: &std::path::Path, what: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::Config(format!("{what} {}: {e}", path.display())))
}

/// Maps a reqwest error to ours. reqwest's Display hides the cause chain
/// ("error sending request"), so the innermost cause is appended.
fn classify(e: reqwest::Error, method: &str, url: &str, timeout_ms: u64) -> Error {
    let mut detail = e.to_string();
    let mut src: Option<&dyn std::error::Error> = std::error::Error::source(&e);
    let mut last = None;
    while let Some(s) = src {
        last = Some(s.to_string());
        src = s.source();
    }
    if let Some(l) = last {
        detail = format!("{detail}: {l}");
    }
    if e.is_timeout() {
        Error::Timeout {
            method: method.into(),
            url: url.into(),
            timeout_ms,
        }
    } else if e.is_connect() {
        Error::Connect {
            url: url.into(),
            detail,
        }
    } else {
        Error::Transport {
            method: method.into(),
            url: url.into(),
            detail,
        }
    }
}
