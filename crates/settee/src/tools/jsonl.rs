//! JSON Lines input with a bound on line length, and JSON Lines output.
//!
//! Invariant: a line longer than the bound is never held in memory; it is
//! consumed up to its newline and reported as [`Line::TooLong`].

use std::io::{self, BufRead, Write};

use serde_json::value::RawValue;

/// Default longest input line: above CouchDB's 8,000,000-byte
/// `max_document_size` plus room for `_revisions`.
pub const LINE_BYTES_MAX: usize = 8 << 20;

/// One read from [`read_line`].
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line is in the buffer (without its `\n` or `\r\n`).
    Some,
    /// The line exceeded the bound; the buffer is empty.
    TooLong,
    Eof,
}

/// Reads one line into `buf` (cleared first), holding at most `max` bytes.
pub fn read_line<R: BufRead>(r: &mut R, buf: &mut Vec<u8>, max: usize) -> io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    let mut any = false;
    loop {
        let avail = match r.fill_buf() {
            Ok(a) => a,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok(match (any, too_long) {
                (false, _) => Line::Eof,
                (true, true) => Line::TooLong,
                (true, false) => {
                    strip_cr(buf);
                    Line::Some
                }
            });
        }
        any = true;
        let (take, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (avail.len(), false),
        };
        if !too_long && buf.len() + take <= max {
            buf.extend_from_slice(&avail[..take]);
        } else {
            too_long = true;
            buf.clear();
        }
        r.consume(if done { take + 1 } else { take });
        if done {
            if too_long {
                return Ok(Line::TooLong);
            }
            strip_cr(buf);
            return Ok(Line::Some);
        }
    }
}

fn strip_cr(buf: &mut Vec<u8>) {
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
}

/// Parses a line as one JSON object, kept raw.
pub fn parse_doc(line: &[u8]) -> Result<Box<RawValue>, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8: {e}"))?;
    let raw: Box<RawValue> =
        serde_json::from_str(text.trim()).map_err(|e| format!("invalid JSON: {e}"))?;
    if !raw.get().starts_with('{') {
        return Err("not a JSON object".into());
    }
    Ok(raw)
}

/// Writes one document as one line. Servers send compact JSON; a body with
/// raw newlines (a pretty-printing server) is re-serialised compactly.
pub fn write_doc<W: Write>(out: &mut W, doc: &RawValue) -> io::Result<()> {
    let text = doc.get();
    if text.contains('\n') {
        let v: serde_json::Value = serde_json::from_str(text).map_err(io::Error::other)?;
        serde_json::to_writer(&mut *out, &v).map_err(io::Error::other)?;
    } else {
        out.write_all(text.as_bytes())?;
    }
    out.write_all(b"\n")
}

/// True for design documents (the seed's `grep -v _design`).
pub fn is_design(id: &str) -> bool {
    id.starts_with("_design/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_lines() {
        let input = b"{\"a\":1}\r\n0123456789abc\nshort\nlast".to_vec();
        let mut r = io::BufReader::with_capacity(4, &input[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut r, &mut buf, 10).unwrap(), Line::Some);
        assert_eq!(buf, b"{\"a\":1}");
        assert_eq!(read_line(&mut r, &mut buf, 10).unwrap(), Line::TooLong);
        assert!(buf.is_empty());
        assert_eq!(read_line(&mut r, &mut buf, 10).unwrap(), Line::Some);
        assert_eq!(buf, b"short");
        assert_eq!(read_line(&mut r, &mut buf, 10).unwrap(), Line::Some);
        assert_eq!(buf, b"last");
        assert_eq!(read_line(&mut r, &mut buf, 10).unwrap(), Line::Eof);
    }

    #[test]
    fn docs_must_be_objects() {
        assert!(parse_doc(b"{\"_id\":\"a\"}").is_ok());
        assert!(parse_doc(b"[1]").is_err());
        assert!(parse_doc(b"{\"_id\":").is_err());
    }
}
