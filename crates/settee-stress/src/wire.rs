//! A strict HTTP/1.x response reader over a raw TCP connection.
//!
//! The hostile runner writes arbitrary bytes, so it cannot use an HTTP
//! client library (which would refuse to send them, or repair what the
//! server sends back). This module reads exactly what the server wrote and
//! judges its framing by RFC 9112: a status line `HTTP/1.x NNN reason`,
//! CRLF-terminated header lines with token names, then a body delimited by
//! `Transfer-Encoding: chunked`, a single `Content-Length`, or the end of
//! the connection; no body for HEAD, 1xx, 204 and 304. Interim 1xx
//! responses (`100 Continue`) are skipped.
//!
//! Invariants (bounds): a response head is at most [`HEAD_MAX`] bytes, a
//! body at most the caller's limit, at most [`INTERIM_MAX`] interim
//! responses precede a final one, and every read observes the caller's
//! deadline. Bytes after a response stay buffered for the next one
//! (pipelining).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Longest response head accepted.
pub const HEAD_MAX: usize = 64 << 10;
/// Most interim (1xx) responses before the final one.
pub const INTERIM_MAX: usize = 8;
/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 64 << 10;

/// A complete response.
#[derive(Debug, Clone)]
pub struct Response {
    /// 0 or 1 (`HTTP/1.0`, `HTTP/1.1`).
    pub minor: u8,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The connection cannot carry another request after this response
    /// (`Connection: close`, HTTP/1.0 without keep-alive, or a body
    /// delimited by the end of the connection).
    pub close: bool,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// Why no (complete, well-formed) response was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The connection ended before any byte of a response.
    Closed,
    /// A socket error before any byte of a response (e.g. reset).
    Reset(String),
    /// The deadline passed; `partial` when some of the response had arrived.
    Timeout { partial: bool },
    /// The bytes are not a valid HTTP/1.x response.
    Malformed(String),
    /// The connection ended (or broke) part-way through a response.
    Truncated(String),
    /// The body is longer than the caller's limit (reading stopped).
    TooLarge,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Closed => write!(f, "connection closed before a response"),
            WireError::Reset(e) => write!(f, "connection error before a response: {e}"),
            WireError::Timeout { partial: false } => write!(f, "no response before the deadline"),
            WireError::Timeout { partial: true } => {
                write!(f, "response incomplete at the deadline")
            }
            WireError::Malformed(m) => write!(f, "malformed response: {m}"),
            WireError::Truncated(m) => write!(f, "truncated response: {m}"),
            WireError::TooLarge => write!(f, "response body over the read limit"),
        }
    }
}

/// The read half of a connection with its buffer.
#[derive(Debug)]
pub struct Reader<R> {
    inner: R,
    buf: Vec<u8>,
    /// Start of unconsumed bytes in `buf`.
    pos: usize,
    eof: bool,
}

/// A whole connection: a buffered read half and the write half, usable
/// at the same time (a request is written while its response is read, so
/// a server that answers early never deadlocks against a blocked writer).
#[derive(Debug)]
pub struct Conn {
    pub rd: Reader<OwnedReadHalf>,
    pub wr: OwnedWriteHalf,
}

impl Conn {
    pub fn new(stream: TcpStream) -> Conn {
        let (r, w) = stream.into_split();
        Conn {
            rd: Reader::new(r),
            wr: w,
        }
    }
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub fn new(inner: R) -> Reader<R> {
        Reader {
            inner,
            buf: Vec::with_capacity(8 << 10),
            pos: 0,
            eof: false,
        }
    }

    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    pub fn into_inner(self) -> R {
        self.inner
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > (1 << 20) {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    /// Reads more bytes; false at end of stream.
    async fn fill(&mut self, deadline: Instant, started: bool) -> Result<bool, WireError> {
        if self.eof {
            return Ok(false);
        }
        let old = self.buf.len();
        self.buf.resize(old + READ_CHUNK, 0);
        let read = tokio::time::timeout_at(deadline, self.inner.read(&mut self.buf[old..])).await;
        match read {
            Err(_) => {
                self.buf.truncate(old);
                Err(WireError::Timeout { partial: started })
            }
            Ok(Err(e)) => {
                self.buf.truncate(old);
                self.eof = true;
                if started {
                    Err(WireError::Truncated(format!(
                        "connection error mid-response: {e}"
                    )))
                } else {
                    Err(WireError::Reset(e.to_string()))
                }
            }
            Ok(Ok(n)) => {
                self.buf.truncate(old + n);
                if n == 0 {
                    self.eof = true;
                }
                Ok(n > 0)
            }
        }
    }

    /// Reads one final response (skipping interim ones). `head_request`:
    /// the request was HEAD (no body follows whatever the headers say).
    pub async fn read_response(
        &mut self,
        head_request: bool,
        deadline: Instant,
        body_limit: usize,
    ) -> Result<Response, WireError> {
        for _ in 0..=INTERIM_MAX {
            let resp = self.read_one(head_request, deadline, body_limit).await?;
            if (100..200).contains(&resp.status) && resp.status != 101 {
                continue;
            }
            return Ok(resp);
        }
        Err(WireError::Malformed(format!(
            "more than {INTERIM_MAX} interim responses"
        )))
    }

    async fn read_one(
        &mut self,
        head_request: bool,
        deadline: Instant,
        body_limit: usize,
    ) -> Result<Response, WireError> {
        // The head.
        let head_len = loop {
            if let Some(i) = find(self.pending(), b"\r\n\r\n") {
                break i + 4;
            }
            if self.pending().len() > HEAD_MAX {
                return Err(WireError::Malformed(format!(
                    "response head longer than {HEAD_MAX} bytes"
                )));
            }
            let started = !self.pending().is_empty();
            if !self.fill(deadline, started).await? {
                return Err(if started {
                    WireError::Truncated("connection closed inside the response head".into())
                } else {
                    WireError::Closed
                });
            }
        };
        let head = self.pending()[..head_len - 4].to_vec();
        self.consume(head_len);
        let (minor, status, headers) = parse_head(&head).map_err(WireError::Malformed)?;
        let connection = header_tokens(&headers, "connection");
        let mut close = if minor == 0 {
            !connection.iter().any(|t| t == "keep-alive")
        } else {
            connection.iter().any(|t| t == "close")
        };
        let no_body =
            head_request || (100..200).contains(&status) || status == 204 || status == 304;
        let te = header_tokens(&headers, "transfer-encoding");
        let lengths: Vec<&str> = headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.as_str())
            .collect();
        if !te.is_empty() && !lengths.is_empty() {
            return Err(WireError::Malformed(
                "both Transfer-Encoding and Content-Length".into(),
            ));
        }
        let content_length = parse_content_length(&lengths).map_err(WireError::Malformed)?;
        if (status == 204 || (100..200).contains(&status))
            && (!te.is_empty() || content_length.is_some_and(|n| n > 0))
        {
            return Err(WireError::Malformed(format!(
                "status {status} with a message body"
            )));
        }
        let body = if no_body {
            Vec::new()
        } else if te.last().is_some_and(|t| t == "chunked") {
            self.read_chunked(deadline, body_limit).await?
        } else if !te.is_empty() {
            close = true;
            self.read_to_end(deadline, body_limit).await?
        } else if let Some(n) = content_length {
            self.read_exact_body(n, deadline, body_limit).await?
        } else {
            close = true;
            self.read_to_end(deadline, body_limit).await?
        };
        Ok(Response {
            minor,
            status,
            headers,
            body,
            close,
        })
    }

    async fn read_exact_body(
        &mut self,
        n: u64,
        deadline: Instant,
        limit: usize,
    ) -> Result<Vec<u8>, WireError> {
        if n > limit as u64 {
            return Err(WireError::TooLarge);
        }
        let n = n as usize;
        while self.pending().len() < n {
            if !self.fill(deadline, true).await? {
                return Err(WireError::Truncated(format!(
                    "connection closed after {} of {n} body bytes",
                    self.pending().len()
                )));
            }
        }
        let body = self.pending()[..n].to_vec();
        self.consume(n);
        Ok(body)
    }

    async fn read_to_end(&mut self, deadline: Instant, limit: usize) -> Result<Vec<u8>, WireError> {
        while self.fill(deadline, true).await? {
            if self.pending().len() > limit {
                return Err(WireError::TooLarge);
            }
        }
        let body = self.pending().to_vec();
        self.consume(body.len());
        Ok(body)
    }

    /// A line ending in CRLF (without it), at most `max` bytes.
    async fn read_line(&mut self, deadline: Instant, max: usize) -> Result<Vec<u8>, WireError> {
        loop {
            if let Some(i) = find(self.pending(), b"\r\n") {
                let line = self.pending()[..i].to_vec();
                self.consume(i + 2);
                return Ok(line);
            }
            if self.pending().len() > max {
                return Err(WireError::Malformed("chunk line too long".into()));
            }
            if !self.fill(deadline, true).await? {
                return Err(WireError::Truncated(
                    "connection closed inside a chunked body".into(),
                ));
            }
        }
    }

    async fn read_chunked(
        &mut self,
        deadline: Instant,
        limit: usize,
    ) -> Result<Vec<u8>, WireError> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line(deadline, 4096).await?;
            let size_text = line.split(|&b| b == b';').next().unwrap_or(&[]);
            let size_text = std::str::from_utf8(size_text)
                .map_err(|_| WireError::Malformed("chunk size is not text".into()))?;
            if size_text.is_empty()
                || size_text.len() > 16
                || !size_text.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return Err(WireError::Malformed(format!(
                    "bad chunk size line {:?}",
                    String::from_utf8_lossy(&line)
                )));
            }
            let size = u64::from_str_radix(size_text, 16)
                .map_err(|_| WireError::Malformed("bad chunk size".into()))?;
            if size == 0 {
                // Trailers, then an empty line.
                loop {
                    let t = self.read_line(deadline, 8192).await?;
                    if t.is_empty() {
                        return Ok(body);
                    }
                }
            }
            if body.len() as u64 + size > limit as u64 {
                return Err(WireError::TooLarge);
            }
            let size = size as usize;
            while self.pending().len() < size + 2 {
                if !self.fill(deadline, true).await? {
                    return Err(WireError::Truncated(format!(
                        "connection closed inside a chunk, after {} body bytes",
                        body.len() + self.pending().len()
                    )));
                }
            }
            body.extend_from_slice(&self.pending()[..size]);
            if &self.pending()[size..size + 2] != b"\r\n" {
                return Err(WireError::Malformed("chunk not followed by CRLF".into()));
            }
            self.consume(size + 2);
        }
    }

    /// Waits (bounded) for the peer to close; true if it did.
    pub async fn closed_within(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        loop {
            match self.fill(deadline, true).await {
                Ok(true) => {
                    let n = self.pending().len();
                    self.consume(n);
                }
                Ok(false) => return true,
                Err(WireError::Timeout { .. }) => return false,
                Err(_) => return true,
            }
        }
    }
}

/// `bytes` split at every CRLF.
fn split_crlf(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some(i) = find(rest, b"\r\n") {
        out.push(&rest[..i]);
        rest = &rest[i + 2..];
    }
    out.push(rest);
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

type Head = (u8, u16, Vec<(String, String)>);

/// Parses a response head (without the final CRLF CRLF).
fn parse_head(head: &[u8]) -> Result<Head, String> {
    // `head` ends before the CRLF that ends the last line; lines are
    // separated by CRLF, and a bare LF anywhere is a framing error.
    if head.contains(&b'\n')
        && head
            .windows(2)
            .filter(|w| w[1] == b'\n')
            .any(|w| w[0] != b'\r')
    {
        return Err("line not ended by CRLF".into());
    }
    let mut lines = split_crlf(head).into_iter();
    let status_line = lines.next().unwrap_or(&[]);
    let minor = match status_line.get(..9) {
        Some(b"HTTP/1.1 ") => 1,
        Some(b"HTTP/1.0 ") => 0,
        _ => {
            return Err(format!(
                "bad status line {:?}",
                String::from_utf8_lossy(&status_line[..status_line.len().min(60)])
            ))
        }
    };
    let code = status_line.get(9..12).ok_or("status line too short")?;
    if !code.iter().all(u8::is_ascii_digit) || code[0] == b'0' {
        return Err(format!(
            "bad status code {:?}",
            String::from_utf8_lossy(code)
        ));
    }
    if status_line.len() > 12 && status_line[12] != b' ' {
        return Err("no space after the status code".into());
    }
    if status_line.iter().any(|&b| b < 0x20 && b != b'\t') {
        return Err("control character in the status line".into());
    }
    let status = code.iter().fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
    let mut headers = Vec::new();
    for line in lines {
        let colon = line.iter().position(|&b| b == b':').ok_or_else(|| {
            format!(
                "header line without colon: {:?}",
                String::from_utf8_lossy(line)
            )
        })?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err(format!(
                "bad header name {:?}",
                String::from_utf8_lossy(name)
            ));
        }
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(format!(
                "control character in header {}",
                String::from_utf8_lossy(name)
            ));
        }
        headers.push((
            String::from_utf8_lossy(name).into_owned(),
            String::from_utf8_lossy(value).trim().to_string(),
        ));
    }
    Ok((minor, status, headers))
}

/// Lowercased comma-separated tokens of every `name` header.
fn header_tokens(headers: &[(String, String)], name: &str) -> Vec<String> {
    headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .flat_map(|(_, v)| v.split(',').map(|t| t.trim().to_ascii_lowercase()))
        .filter(|t| !t.is_empty())
        .collect()
}

fn parse_content_length(values: &[&str]) -> Result<Option<u64>, String> {
    let mut found: Option<u64> = None;
    for v in values {
        for part in v.split(',') {
            let part = part.trim();
            if part.is_empty() || part.len() > 19 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("bad Content-Length {v:?}"));
            }
            let n: u64 = part
                .parse()
                .map_err(|_| format!("bad Content-Length {v:?}"))?;
            if found.is_some_and(|f| f != n) {
                return Err("conflicting Content-Length values".into());
            }
            found = Some(n);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(bytes: &[u8], head: bool) -> Result<Response, WireError> {
        let mut r = Reader::new(bytes);
        r.read_response(head, Instant::now() + Duration::from_secs(5), 1 << 20)
            .await
    }

    #[tokio::test]
    async fn framing() {
        let r = read(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", false)
            .await
            .unwrap();
        assert_eq!(
            (r.status, r.body.as_slice(), r.close),
            (200, &b"{}"[..], false)
        );
        let r = read(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            false,
        )
        .await
        .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (201, &b"{}"[..]));
        let r = read(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
            .await
            .unwrap();
        assert!(r.body.is_empty());
        let r = read(b"HTTP/1.0 400 Bad\r\n\r\nxyz", false).await.unwrap();
        assert_eq!((r.body.as_slice(), r.close), (&b"xyz"[..], true));
        assert_eq!(read(b"", false).await.unwrap_err(), WireError::Closed);
        for cut in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{}"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}",
            b"HTTP/1.1 200 OK\r\nContent",
        ] {
            assert!(
                matches!(read(cut, false).await, Err(WireError::Truncated(_))),
                "{}",
                String::from_utf8_lossy(cut)
            );
        }
        for bad in [
            &b"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n"[..],
            b"HTTP/1.1 2x0 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        ] {
            assert!(
                matches!(read(bad, false).await, Err(WireError::Malformed(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[tokio::test]
    async fn pipelined_responses_stay_buffered() {
        let bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\naHTTP/1.1 404 Not Found\r\nContent-Length: 1\r\n\r\nb";
        let mut r = Reader::new(&bytes[..]);
        let d = Instant::now() + Duration::from_secs(5);
        assert_eq!(r.read_response(false, d, 100).await.unwrap().body, b"a");
        assert_eq!(r.read_response(false, d, 100).await.unwrap().status, 404);
    }
}
