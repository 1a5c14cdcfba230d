//! Headerless parts in a `multipart/related` body. CouchDB accepts a part
//! whose header block is empty (the boundary line, then at once the blank
//! line and the bytes) — its own attachment tests send attachments that
//! way — but the multipart parser used here wants at least one header
//! line. [`Rewriter`] gives each such part a neutral
//! `Content-Type: application/octet-stream` header as the body streams by
//! (the attachment's type comes from the document's `_attachments`, never
//! from the part), so both shapes parse the same.
//!
//! Invariants:
//! - Bytes are only ever inserted right after a delimiter line followed by
//!   an empty line; everything else passes through unchanged and in order.
//! - Memory is bounded: at most one delimiter's length is held back
//!   between chunks, whatever the chunking of the body.

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};

const INSERT: &[u8] = b"Content-Type: application/octet-stream\r\n";

/// Streams a body, adding a header line to each headerless part.
pub struct Rewriter {
    /// `\r\n--BOUNDARY\r\n\r\n`: a delimiter line followed by an empty line.
    pattern: Vec<u8>,
    /// Bytes not yet passed on (a possible start of `pattern`).
    held: BytesMut,
    /// How many of the two bytes put in front of the body (so its first
    /// delimiter, which has no CRLF before it, matches too) are still to
    /// be dropped from the output.
    virtual_prefix: usize,
}

impl Rewriter {
    pub fn new(boundary: &str) -> Rewriter {
        let mut pattern = b"\r\n--".to_vec();
        pattern.extend_from_slice(boundary.as_bytes());
        pattern.extend_from_slice(b"\r\n\r\n");
        Rewriter {
            pattern,
            held: BytesMut::from(&b"\r\n"[..]),
            virtual_prefix: 2,
        }
    }

    /// The next chunk of the body; returns what may be passed on now.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.held.extend_from_slice(chunk);
        let buf = std::mem::take(&mut self.held);
        let keep = self.pattern.len() - 1;
        let mut out = BytesMut::with_capacity(buf.len() + INSERT.len());
        let mut from = 0;
        while let Some(at) = memchr::memmem::find(&buf[from..], &self.pattern) {
            let end_of_line = from + at + self.pattern.len() - 2;
            out.extend_from_slice(&buf[from..end_of_line]);
            out.extend_from_slice(INSERT);
            from = end_of_line;
        }
        let emit_to = buf.len().saturating_sub(keep).max(from);
        out.extend_from_slice(&buf[from..emit_to]);
        self.held.extend_from_slice(&buf[emit_to..]);
        self.strip_prefix(out)
    }

    /// The end of the body: whatever was held back.
    pub fn finish(&mut self) -> Bytes {
        let rest = std::mem::take(&mut self.held);
        self.strip_prefix(rest)
    }

    fn strip_prefix(&mut self, mut out: BytesMut) -> Bytes {
        let drop = self.virtual_prefix.min(out.len());
        self.virtual_prefix -= drop;
        let _ = out.split_to(drop);
        out.freeze()
    }
}

/// `body` with every headerless part given a header line.
pub fn rewrite<S, E>(body: S, boundary: &str) -> impl Stream<Item = Result<Bytes, E>>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let state = (body, Some(Rewriter::new(boundary)));
    futures_util::stream::unfold(state, |(mut body, mut rw)| async move {
        let r = rw.as_mut()?;
        match body.next().await {
            Some(Ok(chunk)) => {
                let out = r.push(&chunk);
                Some((Ok(out), (body, rw)))
            }
            Some(Err(e)) => Some((Err(e), (body, None))),
            None => {
                let out = r.finish();
                Some((Ok(out), (body, None)))
            }
        }
    })
    .filter(|item| futures_util::future::ready(!matches!(item, Ok(b) if b.is_empty())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8], split: &[usize]) -> Vec<u8> {
        let mut r = Rewriter::new("XYZ");
        let mut out = Vec::new();
        let mut at = 0;
        for &s in split {
            out.extend_from_slice(&r.push(&input[at..s]));
            at = s;
        }
        out.extend_from_slice(&r.push(&input[at..]));
        out.extend_from_slice(&r.finish());
        out
    }

    const BODY: &[u8] = b"--XYZ\r\nContent-Type: application/json\r\n\r\n{}\r\n--XYZ\r\n\r\nhello\r\n--XYZ\r\nContent-Type: text/plain\r\n\r\nbye\r\n--XYZ--";
    const WANT: &[u8] = b"--XYZ\r\nContent-Type: application/json\r\n\r\n{}\r\n--XYZ\r\nContent-Type: application/octet-stream\r\n\r\nhello\r\n--XYZ\r\nContent-Type: text/plain\r\n\r\nbye\r\n--XYZ--";

    #[test]
    fn a_headerless_part_gets_a_header_whatever_the_chunking() {
        assert_eq!(run(BODY, &[]), WANT);
        for i in 0..=BODY.len() {
            assert_eq!(run(BODY, &[i]), WANT, "split at {i}");
            for j in i..=BODY.len() {
                assert_eq!(run(BODY, &[i, j]), WANT, "split at {i}, {j}");
            }
        }
        let singles: Vec<usize> = (1..BODY.len()).collect();
        assert_eq!(run(BODY, &singles), WANT, "one byte at a time");
    }

    #[test]
    fn the_first_part_headerless_too_and_other_bodies_unchanged() {
        let body = b"--XYZ\r\n\r\n{}\r\n--XYZ--";
        let want = b"--XYZ\r\nContent-Type: application/octet-stream\r\n\r\n{}\r\n--XYZ--";
        assert_eq!(run(body, &[3]), want);
        let plain = b"--XYZ\r\nA: b\r\n\r\n--XY\r\n\r\n--XYZ--\r\n";
        assert_eq!(run(plain, &[]), plain);
        assert_eq!(run(b"", &[]), b"");
        assert_eq!(run(b"x", &[]), b"x");
    }
}
