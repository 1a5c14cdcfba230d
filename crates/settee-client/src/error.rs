//! Errors of CouchDB calls. Every error names the request (method and URL
//! without credentials) so the tools can print it as is.

/// An error from a call to a CouchDB-compatible server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server could not be reached (refused, DNS, TLS handshake).
    #[error("cannot connect to {url}: {detail}")]
    Connect { url: String, detail: String },
    /// No complete answer within the request timeout (a stall).
    #[error("{method} {url}: no answer within {timeout_ms} ms")]
    Timeout {
        method: String,
        url: String,
        timeout_ms: u64,
    },
    /// The server answered with a CouchDB error (`{"error","reason"}`), or
    /// with a non-success status whose body was not one.
    #[error("{method} {url}: {status} {error}: {reason}")]
    Couch {
        method: String,
        url: String,
        status: u16,
        error: String,
        reason: String,
    },
    /// The connection broke while sending or receiving.
    #[error("{method} {url}: {detail}")]
    Transport {
        method: String,
        url: String,
        detail: String,
    },
    /// A success status with a body that is not what CouchDB sends.
    #[error("{method} {url}: unexpected response: {detail}")]
    BadResponse {
        method: String,
        url: String,
        detail: String,
    },
    /// A URL that cannot name a database.
    #[error("invalid database URL {url:?}: {detail}")]
    InvalidUrl { url: String, detail: String },
    /// Client configuration: CA file, client certificate, proxy.
    #[error("{0}")]
    Config(String),
}

impl Error {
    /// The HTTP status, for [`Error::Couch`].
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Couch { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Worth retrying the same request: connection errors, broken
    /// transfers, timeouts, 5xx and 429 (Too Many Requests) answers (as
    /// CouchDB's replicator does).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Connect { .. } | Error::Timeout { .. } | Error::Transport { .. } => true,
            Error::Couch { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// 413: the request body (or the item count) exceeded a server limit.
    pub fn is_too_large(&self) -> bool {
        self.status() == Some(413)
    }

    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// 401 or 403.
    pub fn is_auth(&self) -> bool {
        matches!(self.status(), Some(401) | Some(403))
    }
}
