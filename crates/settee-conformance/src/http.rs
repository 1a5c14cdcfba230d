//! A raw HTTP/1.1 client: the harness writes requests byte for byte (paths
//! exactly as scenarios spell them, chunked or gzip bodies on demand) and
//! reads any response (`Content-Length`, chunked, or until close).
//!
//! Invariant: one connection per request, a bounded read (64 MiB, a read
//! timeout), so a misbehaving server fails a scenario instead of hanging it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Largest response read.
const MAX_RESPONSE: usize = 64 << 20;

/// A request ready to send.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    pub chunked: bool,
}

/// A response: status, headers in order (names lowercased), decoded body.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `req` to `host:port` and reads the whole response.
pub fn send(addr: &str, req: &Request, timeout: Duration) -> Result<Response, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(timeout)).ok();
    s.set_write_timeout(Some(timeout)).ok();
    s.set_nodelay(true).ok();
    let mut head = format!("{} {} HTTP/1.1\r\nHost: {addr}\r\n", req.method, req.target);
    for (k, v) in &req.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let mut out = Vec::new();
    match (&req.body, req.chunked) {
        (Some(b), true) => {
            head.push_str("Transfer-Encoding: chunked\r\n\r\n");
            out.extend_from_slice(head.as_bytes());
            // Two chunks when the body allows, to exercise reassembly.
            let mid = b.len() / 2;
            for part in [&b[..mid], &b[mid..]] {
                if !part.is_empty() {
                    out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                    out.extend_from_slice(part);
                    out.extend_from_slice(b"\r\n");
                }
            }
            out.extend_from_slice(b"0\r\n\r\n");
        }
        (Some(b), false) => {
            head.push_str(&format!("Content-Length: {}\r\n\r\n", b.len()));
            out.extend_from_slice(head.as_bytes());
            out.extend_from_slice(b);
        }
        (None, _) => {
            if matches!(req.method.as_str(), "PUT" | "POST") {
                head.push_str("Content-Length: 0\r\n");
            }
            head.push_str("\r\n");
            out.extend_from_slice(head.as_bytes());
        }
    }
    s.write_all(&out).map_err(|e| format!("write: {e}"))?;
    read_response(&mut s, req.method == "HEAD")
}

fn read_response(s: &mut TcpStream, head_only: bool) -> Result<Response, String> {
    let mut buf = Vec::with_capacity(8192);
    let mut tmp = [0u8; 16384];
    loop {
        let mut hs = [httparse::EMPTY_HEADER; 128];
        let mut resp = httparse::Response::new(&mut hs);
        match resp.parse(&buf) {
            Ok(httparse::Status::Complete(n)) => {
                let status = resp.code.unwrap_or(0);
                let headers: Vec<(String, String)> = resp
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                if (100..200).contains(&status) && status != 101 {
                    buf.drain(..n);
                    continue;
                }
                let rest = buf.split_off(n);
                let body = read_body(
                    s,
                    &headers,
                    rest,
                    head_only || status == 204 || status == 304,
                )?;
                let body = decode(&headers, body)?;
                return Ok(Response {
                    status,
                    headers,
                    body,
                });
            }
            Ok(httparse::Status::Partial) => {}
            Err(e) => return Err(format!("bad response head: {e}")),
        }
        let n = s.read(&mut tmp).map_err(|e| format!("read head: {e}"))?;
        if n == 0 {
            return Err("connection closed before a response".into());
        }
        buf.extend_from_slice(&tmp[..n]);
        if buf.len() > MAX_RESPONSE {
            return Err("response head too large".into());
        }
    }
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn read_body(
    s: &mut TcpStream,
    headers: &[(String, String)],
    mut have: Vec<u8>,
    none: bool,
) -> Result<Vec<u8>, String> {
    if none {
        return Ok(Vec::new());
    }
    let chunked = header(headers, "transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let mut tmp = [0u8; 16384];
    if chunked {
        let mut out = Vec::new();
        let mut pos = 0;
        loop {
            // Need a full size line.
            let line_end = loop {
                if let Some(i) = have[pos..].windows(2).position(|w| w == b"\r\n") {
                    break pos + i;
                }
                fill(s, &mut have, &mut tmp)?;
            };
            let line = std::str::from_utf8(&have[pos..line_end]).map_err(|_| "bad chunk size")?;
            let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| format!("bad chunk size {line:?}"))?;
            pos = line_end + 2;
            if size == 0 {
                return Ok(out);
            }
            while have.len() < pos + size + 2 {
                fill(s, &mut have, &mut tmp)?;
            }
            out.extend_from_slice(&have[pos..pos + size]);
            pos += size + 2;
            if out.len() > MAX_RESPONSE {
                return Err("response body too large".into());
            }
        }
    }
    if let Some(len) = header(headers, "content-length") {
        let len: usize = len.trim().parse().map_err(|_| "bad content-length")?;
        if len > MAX_RESPONSE {
            return Err("response body too large".into());
        }
        while have.len() < len {
            fill(s, &mut have, &mut tmp)?;
        }
        have.truncate(len);
        return Ok(have);
    }
    loop {
        match s.read(&mut tmp) {
            Ok(0) => return Ok(have),
            Ok(n) => have.extend_from_slice(&tmp[..n]),
            Err(e) => return Err(format!("read body: {e}")),
        }
        if have.len() > MAX_RESPONSE {
            return Err("response body too large".into());
        }
    }
}

fn fill(s: &mut TcpStream, have: &mut Vec<u8>, tmp: &mut [u8]) -> Result<(), String> {
    let n = s.read(tmp).map_err(|e| format!("read body: {e}"))?;
    if n == 0 {
        return Err("connection closed mid-body".into());
    }
    have.extend_from_slice(&tmp[..n]);
    Ok(())
}

fn decode(headers: &[(String, String)], body: Vec<u8>) -> Result<Vec<u8>, String> {
    match header(headers, "content-encoding").map(|v| v.trim().to_ascii_lowercase()) {
        Some(e) if e == "gzip" => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&body[..])
                .take(MAX_RESPONSE as u64)
                .read_to_end(&mut out)
                .map_err(|e| format!("bad gzip body: {e}"))?;
            Ok(out)
        }
        _ => Ok(body),
    }
}

/// Gzip-compresses a request body.
pub fn gzip(body: &[u8]) -> Vec<u8> {
    use flate2::write::GzEncoder;
    let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(body).expect("writing to memory");
    enc.finish().expect("writing to memory")
}
