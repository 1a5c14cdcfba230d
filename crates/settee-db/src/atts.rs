//! Attachments of document updates: storing the bytes a document carries
//! ([`AttWriter`], [`Database::store_attachments`]) and resolving a new
//! revision's attachments against its parent's ([`resolve`]).
//!
//! Invariants:
//! - By the time an update reaches the writer, every attachment it names
//!   is a stub or stored (`AttKind::Stored`): stored already, or, for a
//!   blob of one chunk, with the writes that store it (`BlobWrites`), which
//!   the writer puts in the same batch as the revision naming it (so a
//!   small attachment costs no storage write of its own, and a refused
//!   revision stores nothing). The writer writes stubs into the body.
//! - A new revision's stored body begins with its stubs (see
//!   `settee_core::att`): stubs sent as `stub: true` are the parent's
//!   attachments of that name (a `revpos` given with one must match), new
//!   attachments get the new revision's position (a replicated one keeps
//!   the `revpos` it came with); a stub the parent lacks is `missing_stub`.
//! - Compressible types are stored gzip-encoded (CouchDB's
//!   `[attachments] compressible_types` and `compression_level`); the
//!   digest is the MD5 of the bytes stored.

use std::io::Write as _;
use std::sync::Arc;

use flate2::write::GzEncoder;
use flate2::{Compression, GzBuilder};
use parking_lot::RwLock;
use settee_core::att::{self, AttKind, AttStub, BlobWrites};
use settee_core::doc::{Body, Doc, DocError};
use settee_core::rev::Rev;
use settee_store::StoreError;

use crate::blobs::{BlobWriter, Blobs};
use crate::database::Database;
use crate::error::{DocFailure, Error, Result};

/// Which attachments are stored compressed, and how hard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttCompression {
    /// Patterns of content types (`text/*`, `application/json`).
    pub types: Vec<String>,
    /// 0 (none) to 9; CouchDB's default is 8.
    pub level: u32,
}

impl Default for AttCompression {
    fn default() -> Self {
        AttCompression {
            types: [
                "text/*",
                "application/javascript",
                "application/json",
                "application/xml",
            ]
            .map(str::to_string)
            .to_vec(),
            level: 8,
        }
    }
}

impl AttCompression {
    /// CouchDB's `[attachments] compressible_types` list.
    pub fn parse_types(list: &str) -> Vec<String> {
        list.split(',')
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
            .collect()
    }

    /// The gzip level for `content_type`, or None when it is stored as is.
    pub fn level_for(&self, content_type: &str) -> Option<u32> {
        if self.level == 0 {
            return None;
        }
        let ct = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let matches = self.types.iter().any(|p| match p.strip_suffix("/*") {
            Some(prefix) => ct.split('/').next() == Some(prefix),
            None => p == "*" || *p == ct,
        });
        matches.then_some(self.level.min(9))
    }
}

/// Shared, settable compression settings (the configuration API changes them).
pub type SharedCompression = Arc<RwLock<AttCompression>>;

enum Sink {
    Plain(BlobWriter),
    Gzip(GzEncoder<BlobWriter>),
}

/// An attachment being stored: identity bytes in, stored (possibly
/// gzip-encoded) bytes out to a blob, a chunk at a time.
pub struct AttWriter {
    sink: Sink,
    length: u64,
}

impl AttWriter {
    /// Starts storing an attachment, gzip-encoded when `gzip_level` is set.
    pub fn new(blobs: &Blobs, gzip_level: Option<u32>) -> Result<AttWriter> {
        let w = blobs.writer()?;
        let sink = match gzip_level {
            // The header CouchDB's zlib writes (no name, time 0, OS Unix),
            // so that the same bytes compress to the same digest on both.
            Some(level) => Sink::Gzip(
                GzBuilder::new()
                    .operating_system(3)
                    .write(w, Compression::new(level)),
            ),
            None => Sink::Plain(w),
        };
        Ok(AttWriter { sink, length: 0 })
    }

    pub fn write_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.length += bytes.len() as u64;
        match &mut self.sink {
            Sink::Plain(w) => w.write_bytes(bytes),
            Sink::Gzip(g) => g.write_all(bytes).map_err(io_error),
        }
    }

    /// Identity bytes written so far.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Finishes the blob: the stub (its `revpos` is 0: the update assigns
    /// it), and the writes the document write must carry (see
    /// [`crate::blobs::BlobWriter::finish_deferred`]).
    pub fn finish(self, content_type: String) -> Result<(AttStub, BlobWrites)> {
        let ((written, writes), encoded) = match self.sink {
            Sink::Plain(w) => (w.finish_deferred()?, false),
            Sink::Gzip(g) => (g.finish().map_err(io_error)?.finish_deferred()?, true),
        };
        let stub = AttStub {
            content_type,
            revpos: 0,
            digest: written.digest(),
            length: self.length,
            encoding: encoded.then(|| "gzip".to_string()),
            encoded_length: encoded.then_some(written.len),
        };
        Ok((stub, writes))
    }
}

fn io_error(e: std::io::Error) -> Error {
    match e.into_inner().map(|inner| inner.downcast::<Error>()) {
        Some(Ok(e)) => *e,
        Some(Err(other)) => Error::Storage(StoreError::Io(other.to_string())),
        None => Error::Storage(StoreError::Io("attachment write failed".into())),
    }
}

impl Database {
    /// [`Database::store_attachments`] for async callers: on the runtime's
    /// blocking pool when some document carries bytes (storage writes may
    /// wait behind another request's fsync; a runtime thread serves many
    /// connections), inline otherwise or outside a Tokio runtime.
    pub(crate) async fn store_attachments_async(
        &self,
        mut docs: Vec<Doc>,
        new_edits: bool,
    ) -> Result<Vec<Doc>> {
        let carries_bytes = docs.iter().any(|d| {
            d.atts
                .iter()
                .flatten()
                .any(|a| matches!(a.kind, AttKind::Data { .. }))
        });
        let runtime = tokio::runtime::Handle::try_current();
        match runtime {
            Ok(rt) if carries_bytes => {
                let db = self.clone();
                rt.spawn_blocking(move || {
                    db.store_attachments(&mut docs, new_edits)?;
                    Ok(docs)
                })
                .await
                .map_err(|_| Error::Closed)?
            }
            _ => {
                self.store_attachments(&mut docs, new_edits)?;
                Ok(docs)
            }
        }
    }

    /// Stores the bytes of every inline attachment of `docs` and makes it
    /// a stored stub (see the module doc). Attachments whose bytes follow
    /// in a multipart body must have been stored by the caller.
    pub fn store_attachments(&self, docs: &mut [Doc], new_edits: bool) -> Result<()> {
        let blobs = self.blobs();
        for doc in docs.iter_mut() {
            let Some(atts) = doc.atts.as_mut() else {
                continue;
            };
            for a in atts.iter_mut() {
                let stored = match &a.kind {
                    AttKind::Stub { .. } | AttKind::Stored(..) => continue,
                    AttKind::Follows { .. } => {
                        return Err(Error::BadRequest(format!(
                            "attachment {} follows, but no multipart body carries it",
                            a.name
                        )))
                    }
                    AttKind::Data {
                        content_type,
                        data,
                        revpos,
                        encoding,
                        length,
                    } => {
                        let revpos = if new_edits { 0 } else { revpos.unwrap_or(0) };
                        if let Some(enc) = encoding {
                            // Already encoded (a replicator's copy): stored as is.
                            let (written, writes) = blobs.put_deferred(data)?;
                            let stub = AttStub {
                                content_type: content_type.clone(),
                                revpos,
                                digest: written.digest(),
                                length: length.unwrap_or(written.len),
                                encoding: Some(enc.clone()),
                                encoded_length: Some(written.len),
                            };
                            (stub, writes)
                        } else {
                            let level = self.shared.att_compression.read().level_for(content_type);
                            let mut w = AttWriter::new(&blobs, level)?;
                            w.write_bytes(data)?;
                            let (stub, writes) = w.finish(content_type.clone())?;
                            (AttStub { revpos, ..stub }, writes)
                        }
                    }
                };
                a.kind = AttKind::Stored(stored.0, stored.1);
            }
        }
        Ok(())
    }
}

fn missing_stub(id: &str, name: &str) -> DocFailure {
    DocFailure::MissingStub(format!("Invalid attachment stub in {id} for {name}"))
}

/// The stored body of a new revision at position `pos` of `doc`, whose
/// attachments are resolved against `parent` (the stored body of the
/// revision it extends, if any). None when `doc` names no attachments.
pub(crate) fn resolve(
    doc: &Doc,
    pos: u64,
    parent: Option<&str>,
) -> std::result::Result<Option<Body>, DocFailure> {
    let Some(atts) = &doc.atts else {
        return Ok(None);
    };
    let parent_stubs = match parent {
        Some(body) => att::stored_stubs(body)
            .map_err(|e| DocFailure::Bad(DocError::BadRequest(format!("stored stubs: {e}"))))?,
        None => Vec::new(),
    };
    let mut out: Vec<(String, AttStub)> = Vec::with_capacity(atts.len());
    for a in atts {
        let stub = match &a.kind {
            AttKind::Stub { revpos } => {
                let found = parent_stubs
                    .iter()
                    .find(|(n, _)| *n == a.name)
                    .map(|(_, s)| s)
                    .filter(|s| revpos.is_none_or(|p| p == s.revpos));
                found
                    .cloned()
                    .ok_or_else(|| missing_stub(&doc.id, &a.name))?
            }
            AttKind::Stored(s, _) => AttStub {
                revpos: if s.revpos == 0 { pos } else { s.revpos },
                ..s.clone()
            },
            AttKind::Data { .. } | AttKind::Follows { .. } => {
                return Err(DocFailure::Bad(DocError::BadRequest(format!(
                    "attachment {} was not stored",
                    a.name
                ))))
            }
        };
        out.push((a.name.clone(), stub));
    }
    Ok(Some(Body::from_stored(att::join_stored(
        &out,
        doc.body.as_str(),
    ))))
}

/// The revision a new edit extends (the rule `update::apply` applies)
/// and the position of the revision it makes; None when `apply` will
/// refuse the edit as a conflict.
pub(crate) fn new_edit_parent(
    tree: Option<&settee_core::revtree::RevTree>,
    doc: &Doc,
) -> Option<(Option<Rev>, u64)> {
    let parent = match (tree, &doc.rev) {
        (Some(t), Some(rev)) if t.is_leaf(rev) => Some(rev.clone()),
        (_, Some(_)) => return None,
        (Some(t), None) => match t.winner() {
            Some(w) if w.deleted => Some(w.rev),
            Some(_) => return None,
            None => None,
        },
        (None, None) => None,
    };
    let pos = parent.as_ref().map_or(1, |r| r.pos + 1);
    Some((parent, pos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressible_types_as_couchdb_matches_them() {
        let c = AttCompression::default();
        assert_eq!(c.level_for("text/plain"), Some(8));
        assert_eq!(c.level_for("text/html; charset=utf-8"), Some(8));
        assert_eq!(c.level_for("application/json"), Some(8));
        assert_eq!(c.level_for("application/octet-stream"), None);
        assert_eq!(c.level_for("image/png"), None);
        let off = AttCompression {
            level: 0,
            ..AttCompression::default()
        };
        assert_eq!(off.level_for("text/plain"), None);
    }
}
