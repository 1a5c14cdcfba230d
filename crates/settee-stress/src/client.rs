//! A minimal keep-alive HTTP/1.1 client for well-formed requests (set-up,
//! the consistency check, the soak), built on the strict reader in
//! [`crate::wire`] so that every response it returns has been checked for
//! framing.
//!
//! Invariants: one request at a time per client; a connection is reused
//! only after a complete response without `Connection: close`; every
//! request has a deadline; a stale keep-alive connection (closed by the
//! server before any byte of the response) is retried once on a fresh
//! one.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use crate::target::Target;
use crate::wire::{Conn, Response, WireError};

/// Largest response body read by the client.
pub const BODY_MAX: usize = 512 << 20;

/// A keep-alive client authenticated as the target's admin.
#[derive(Debug)]
pub struct Client {
    target: Target,
    auth: Option<String>,
    conn: Option<Conn>,
    pub timeout: Duration,
}

/// A failed request: the transport error, or the server's status and body.
#[derive(Debug, Clone)]
pub struct ClientError(pub String);

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Client {
    pub fn new(target: &Target) -> Client {
        Client {
            target: target.clone(),
            auth: target.basic_auth(),
            conn: None,
            timeout: Duration::from_secs(60),
        }
    }

    /// Sends a request with an optional JSON body; any status is returned.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, ClientError> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.target.host);
        if let Some(a) = &self.auth {
            head.push_str(&format!("Authorization: {a}\r\n"));
        }
        if let Some(b) = body {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        if let Some(b) = body {
            bytes.extend_from_slice(b);
        }
        let reused = self.conn.is_some();
        match self.send(&bytes, method == "HEAD").await {
            Err(WireError::Closed) | Err(WireError::Reset(_)) if reused => {
                self.conn = None;
                self.send(&bytes, method == "HEAD").await
            }
            r => r,
        }
        .map_err(|e| ClientError(format!("{method} {path}: {e}")))
    }

    async fn send(&mut self, bytes: &[u8], head: bool) -> Result<Response, WireError> {
        let deadline = Instant::now() + self.timeout;
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => Conn::new(
                self.target
                    .connect(self.timeout)
                    .await
                    .map_err(|e| WireError::Reset(format!("connect: {e}")))?,
            ),
        };
        let resp = {
            let Conn { rd, wr } = &mut conn;
            let write = async {
                let r = wr.write_all(bytes).await;
                if r.is_err() {
                    // Let the reader report what the server said, if anything.
                    std::future::pending::<()>().await;
                }
            };
            let read = rd.read_response(head, deadline, BODY_MAX);
            tokio::pin!(read);
            tokio::select! {
                biased;
                r = &mut read => r,
                _ = write => read.await,
            }
        }?;
        if !resp.close {
            self.conn = Some(conn);
        }
        Ok(resp)
    }

    /// A request that must succeed (2xx); its JSON body.
    pub async fn json(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<serde_json::Value, ClientError> {
        let r = self.request(method, path, body).await?;
        if !(200..300).contains(&r.status) {
            return Err(ClientError(format!(
                "{method} {path}: {} {}",
                r.status,
                crate::check::preview(&r.body, 300)
            )));
        }
        r.json().ok_or_else(|| {
            ClientError(format!(
                "{method} {path}: body is not JSON: {}",
                crate::check::preview(&r.body, 300)
            ))
        })
    }
}

/// Percent-encodes a document id for a path (`_design/` and `_local/`
/// keep their slash).
pub fn doc_path(db: &str, id: &str) -> String {
    let enc = |s: &str| {
        percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    for prefix in ["_design/", "_local/"] {
        if let Some(rest) = id.strip_prefix(prefix) {
            return format!("/{}/{}{}", enc(db), prefix, enc(rest));
        }
    }
    format!("/{}/{}", enc(db), enc(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doc_paths() {
        assert_eq!(doc_path("db", "a/b"), "/db/a%2Fb");
        assert_eq!(doc_path("db", "_design/x y"), "/db/_design/x%20y");
        assert_eq!(doc_path("a-b", "é"), "/a%2Db/%C3%A9");
    }
}
