//! Attachment bodies: a database's content-addressed blobs, stored in
//! chunks in its range of `Keyspace::Blobs`.
//!
//! Keys, after the 8-byte database id:
//! - `h` + MD5 (16 bytes) → the [`Header`] of the blob with that MD5
//!   (CouchDB's attachment digest), naming where its chunks are;
//! - `c` + blob id (16 bytes) + chunk number (4 bytes, big-endian) → the
//!   chunk's bytes ([`CHUNK`] each, the last one shorter).
//!
//! Invariants:
//! - Bodies are streamed: a [`BlobWriter`] holds at most one chunk, a
//!   [`BlobReader`] reads one chunk at a time, so memory does not grow with
//!   an attachment's size.
//! - Chunks are written before their header, and a header no later than
//!   the revision that names its digest: a blob of several chunks is
//!   written by its upload before the document write (later in the same
//!   write-ahead log, so that write is never durable without it); a blob
//!   of one chunk ([`BlobWriter::finish_deferred`]) has its chunk and
//!   header put in the document write's own batch. A blob whose upload
//!   stopped has chunks and no header: nothing can name it, and garbage
//!   collection drops it.
//! - Stored once: a finished upload whose MD5 already has a header (with
//!   the same SHA-256; a different one is refused, never merged) drops its
//!   own chunks and uses the stored blob.
//! - Uploads write outside the database's writer, and never a key a
//!   document write changes (chunk keys are new random ids; headers are
//!   only written under the blob lock, which garbage collection holds
//!   while it deletes). A writer batch carries a one-chunk blob's keys only
//!   (see `crate::atts`); if two such batches carry the same content, the
//!   later header wins and the other's chunk is an orphan.
//! - Garbage collection ([`collect_garbage`], run by compaction) deletes a
//!   blob only when no stored revision names its digest, no upload of it is
//!   running, it is not noted as pending a document write, and its header
//!   was last written (or its digest noted pending) longer ago than the
//!   grace period (an upload finished just now may be about to be named by
//!   the document write that follows it).

use std::collections::HashSet;
use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use md5::{Digest as _, Md5};
use serde::{Deserialize, Serialize};
use settee_core::att::{self, BlobWrites};
use settee_store::{Batch, Keyspace, Snapshot};
use sha2::Sha256;

use crate::database::Shared;
use crate::error::{Error, Result};
use crate::records;

/// Bytes per stored chunk.
pub const CHUNK: usize = 128 * 1024;

/// How long a finished blob that nothing names yet is kept (see the
/// module doc) unless the engine's options say otherwise.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(600);

/// Most blobs noted in memory as about to be named (see
/// [`BlobWriter::finish_deferred`]).
const PENDING_MAX: usize = 100_000;

const HEADER: u8 = b'h';
const CHUNKS: u8 = b'c';

/// A blob's header: where its chunks are and what they hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Header {
    id: [u8; 16],
    len: u64,
    sha256: [u8; 32],
    /// When the header was last written (µs since the epoch).
    written_us: u64,
}

/// Uploads running in a database (their blob ids), and blobs finished
/// with their writes left to the document write that names them (their
/// MD5s, and when: see [`BlobWriter::finish_deferred`]).
#[derive(Default)]
pub(crate) struct BlobLock {
    active: HashSet<[u8; 16]>,
    pending: std::collections::HashMap<[u8; 16], u64>,
}

/// The header stored under `key`, read at the latest state.
fn stored_header(shared: &Shared, key: &[u8]) -> Result<Option<Header>> {
    shared
        .poison
        .guard(shared.store.get(Keyspace::Blobs, key))?
        .map(|b| records::decode::<Header>(&b, "blob header"))
        .transpose()
}

fn md5_collision() -> Error {
    Error::BadRequest(
        "attachment refused: its MD5 digest equals a stored attachment's with different content"
            .into(),
    )
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn header_key(db: u64, md5: &[u8; 16]) -> Vec<u8> {
    let mut k = Vec::with_capacity(25);
    k.extend_from_slice(&db.to_be_bytes());
    k.push(HEADER);
    k.extend_from_slice(md5);
    k
}

fn chunk_key(db: u64, id: &[u8; 16], n: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(29);
    k.extend_from_slice(&db.to_be_bytes());
    k.push(CHUNKS);
    k.extend_from_slice(id);
    k.extend_from_slice(&n.to_be_bytes());
    k
}

/// `[from, to)` of a blob's chunk keys.
fn chunk_range(db: u64, id: &[u8; 16]) -> (Vec<u8>, Vec<u8>) {
    let mut to = chunk_key(db, id, u32::MAX);
    to.push(0);
    (chunk_key(db, id, 0), to)
}

/// `[from, to)` of the keys of one kind (`h` or `c`).
fn kind_range(db: u64, kind: u8) -> (Vec<u8>, Vec<u8>) {
    let mut from = db.to_be_bytes().to_vec();
    from.push(kind);
    let mut to = db.to_be_bytes().to_vec();
    to.push(kind + 1);
    (from, to)
}

/// A new blob id: the time (so garbage collection can tell a young upload
/// from an abandoned one) and 64 random bits.
fn new_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&now_us().to_be_bytes());
    id[8..].copy_from_slice(&rand::random::<u64>().to_be_bytes());
    id
}

/// A database's blobs. Cheap to clone.
#[derive(Clone)]
pub struct Blobs {
    shared: Arc<Shared>,
}

/// What a finished upload stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub md5: [u8; 16],
    /// Bytes stored.
    pub len: u64,
}

impl Written {
    /// CouchDB's digest of the stored bytes.
    pub fn digest(&self) -> String {
        att::digest_of_md5(&self.md5)
    }
}

impl Blobs {
    pub(crate) fn new(shared: Arc<Shared>) -> Blobs {
        Blobs { shared }
    }

    fn check(&self) -> Result<()> {
        self.shared.poison.check()?;
        if self
            .shared
            .deleted
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(Error::NotFound("Database does not exist."));
        }
        Ok(())
    }

    fn write(&self, batch: &Batch) -> Result<()> {
        self.shared
            .poison
            .guard(self.shared.store.write(batch, false))
    }

    /// Starts an upload.
    pub fn writer(&self) -> Result<BlobWriter> {
        self.check()?;
        let id = new_id();
        self.shared.blob_lock.lock().active.insert(id);
        Ok(BlobWriter {
            blobs: self.clone(),
            id,
            buf: Vec::with_capacity(CHUNK),
            chunks: 0,
            len: 0,
            md5: Md5::new(),
            sha: Sha256::new(),
            finished: false,
        })
    }

    /// Stores `bytes` as one blob, whatever its size.
    pub fn put(&self, bytes: &[u8]) -> Result<Written> {
        let mut w = self.writer()?;
        w.write_bytes(bytes)?;
        w.finish()
    }

    /// Stores `bytes` as one blob; a blob of one chunk is left to the
    /// document write (see [`BlobWriter::finish_deferred`]).
    pub fn put_deferred(&self, bytes: &[u8]) -> Result<(Written, BlobWrites)> {
        let mut w = self.writer()?;
        w.write_bytes(bytes)?;
        w.finish_deferred()
    }

    /// A reader of the blob with `md5`, on a snapshot taken now.
    pub fn open(&self, md5: &[u8; 16]) -> Result<Option<BlobReader>> {
        self.check()?;
        let snap = self.shared.store.snapshot();
        let key = header_key(self.shared.db, md5);
        let Some(bytes) = self.shared.poison.guard(snap.get(Keyspace::Blobs, &key))? else {
            return Ok(None);
        };
        let header: Header = records::decode(&bytes, "blob header")?;
        Ok(Some(BlobReader {
            shared: Arc::clone(&self.shared),
            snap,
            id: header.id,
            len: header.len,
        }))
    }

    /// An attachment's identity bytes, whole (gzip-decoded when stored
    /// encoded): for inline base64 renderings, which hold them anyway.
    pub fn identity_bytes(&self, stub: &att::AttStub) -> Result<Vec<u8>> {
        let md5 = stub
            .md5()
            .ok_or_else(|| Error::Corrupt(format!("attachment digest {}", stub.digest)))?;
        let reader = self
            .open(&md5)?
            .ok_or_else(|| Error::Corrupt(format!("attachment body {} is missing", stub.digest)))?;
        let stored = reader.read_all()?;
        if stub.encoding.as_deref() != Some("gzip") {
            return Ok(stored);
        }
        let mut out = Vec::with_capacity(stub.length as usize);
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&stored[..]), &mut out)
            .map_err(|e| Error::Corrupt(format!("stored attachment does not decode: {e}")))?;
        Ok(out)
    }

    /// True when a blob with `md5` is stored.
    pub fn contains(&self, md5: &[u8; 16]) -> Result<bool> {
        self.check()?;
        let key = header_key(self.shared.db, md5);
        Ok(self
            .shared
            .poison
            .guard(self.shared.store.get(Keyspace::Blobs, &key))?
            .is_some())
    }
}

/// An upload in progress. Dropped unfinished, it deletes what it wrote.
pub struct BlobWriter {
    blobs: Blobs,
    id: [u8; 16],
    buf: Vec<u8>,
    chunks: u32,
    len: u64,
    md5: Md5,
    sha: Sha256,
    finished: bool,
}

impl BlobWriter {
    /// Appends bytes, storing every full chunk.
    pub fn write_bytes(&mut self, mut bytes: &[u8]) -> Result<()> {
        self.md5.update(bytes);
        self.sha.update(bytes);
        self.len += bytes.len() as u64;
        while !bytes.is_empty() {
            let take = (CHUNK - self.buf.len()).min(bytes.len());
            self.buf.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.buf.len() == CHUNK {
                self.flush_chunk()?;
            }
        }
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn flush_chunk(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let shared = &self.blobs.shared;
        let mut batch = Batch::new();
        batch.put(
            Keyspace::Blobs,
            chunk_key(shared.db, &self.id, self.chunks),
            &self.buf,
        );
        self.blobs.write(&batch)?;
        self.chunks += 1;
        self.buf.clear();
        Ok(())
    }

    /// Stores the last chunk and the header (or finds the same content
    /// already stored and drops this copy).
    pub fn finish(self) -> Result<Written> {
        Ok(self.complete(false)?.0)
    }

    /// Finishes the upload; a blob of one chunk is not written here: its
    /// chunk and header are returned, for the document write that names
    /// it to carry in the same atomic write (one storage write, one fsync,
    /// per small attachment). Nothing is returned when the same content is
    /// stored already; then garbage collection keeps the stored blob for
    /// the grace period (the MD5 is noted in memory instead of refreshing
    /// the header on disk). A header carried by the document write needs
    /// no note: until that write lands there is nothing to collect. Larger
    /// blobs are stored as by [`BlobWriter::finish`].
    pub fn finish_deferred(self) -> Result<(Written, BlobWrites)> {
        self.complete(true)
    }

    /// Both finishes: `defer` leaves a one-chunk blob's writes to the
    /// caller (see [`BlobWriter::finish_deferred`]).
    fn complete(mut self, defer: bool) -> Result<(Written, BlobWrites)> {
        // A blob of one chunk goes in the header's write (one storage write
        // for a small attachment; none of its bytes if it is stored already).
        let single = self.chunks == 0;
        let defer = defer && single;
        if !single {
            self.flush_chunk()?;
        }
        let md5: [u8; 16] = std::mem::take(&mut self.md5).finalize().into();
        let sha256: [u8; 32] = std::mem::take(&mut self.sha).finalize().into();
        let shared = Arc::clone(&self.blobs.shared);
        let key = header_key(shared.db, &md5);
        let mut lock = shared.blob_lock.lock();
        let existing = stored_header(&shared, &key)?;
        let mut batch = Batch::new();
        let mut writes = Vec::new();
        match existing {
            Some(h) if h.sha256 != sha256 => return Err(md5_collision()),
            Some(h) => {
                // Stored once: this copy goes, the stored one is kept from
                // garbage collection until a document names it (see the
                // grace period in the module doc): by a note in memory when
                // deferred (bounded: past `PENDING_MAX` notes younger than
                // the grace period, as otherwise), else by refreshing its
                // header on disk.
                if !single {
                    let (from, to) = chunk_range(shared.db, &self.id);
                    batch.delete_range(Keyspace::Blobs, from, to);
                }
                if defer && lock.pending.len() >= PENDING_MAX {
                    let grace_us = shared.opts.blob_grace_ms.saturating_mul(1000);
                    let cutoff = now_us().saturating_sub(grace_us);
                    lock.pending.retain(|_, at| *at > cutoff);
                }
                if defer && lock.pending.len() < PENDING_MAX {
                    lock.pending.insert(md5, now_us());
                } else {
                    let refreshed = Header {
                        written_us: now_us(),
                        ..h
                    };
                    batch.put(Keyspace::Blobs, key, records::encode(&refreshed));
                }
            }
            None => {
                if single && !self.buf.is_empty() {
                    writes.push((
                        chunk_key(shared.db, &self.id, 0),
                        std::mem::take(&mut self.buf),
                    ));
                }
                let header = Header {
                    id: self.id,
                    len: self.len,
                    sha256,
                    written_us: now_us(),
                };
                writes.push((key, records::encode(&header)));
                if !defer {
                    for (k, v) in writes.drain(..) {
                        batch.put(Keyspace::Blobs, k, v);
                    }
                }
            }
        }
        if !batch.is_empty() {
            self.blobs.write(&batch)?;
        }
        lock.active.remove(&self.id);
        drop(lock);
        self.finished = true;
        Ok((Written { md5, len: self.len }, BlobWrites(writes)))
    }
}

/// True when `writes` (from [`BlobWriter::finish_deferred`]) are keys of
/// database `db`'s blob store.
pub(crate) fn writes_belong_to(db: u64, writes: &BlobWrites) -> bool {
    writes
        .0
        .iter()
        .all(|(k, _)| k.len() > 9 && k[..8] == db.to_be_bytes() && matches!(k[8], HEADER | CHUNKS))
}

impl io::Write for BlobWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_bytes(buf).map_err(io::Error::other)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let shared = &self.blobs.shared;
        if self.chunks > 0 {
            let (from, to) = chunk_range(shared.db, &self.id);
            let mut batch = Batch::new();
            batch.delete_range(Keyspace::Blobs, from, to);
            // Best effort: what is left is garbage collection's.
            let _ = shared.store.write(&batch, false);
        }
        shared.blob_lock.lock().active.remove(&self.id);
    }
}

/// A stored blob, read on one snapshot.
pub struct BlobReader {
    shared: Arc<Shared>,
    snap: Arc<dyn Snapshot>,
    id: [u8; 16],
    len: u64,
}

impl BlobReader {
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of chunks.
    pub fn chunks(&self) -> u32 {
        self.len.div_ceil(CHUNK as u64) as u32
    }

    /// Chunk `n`'s bytes.
    pub fn chunk(&self, n: u32) -> Result<Vec<u8>> {
        let key = chunk_key(self.shared.db, &self.id, n);
        self.shared
            .poison
            .guard(self.snap.get(Keyspace::Blobs, &key))?
            .ok_or_else(|| Error::Corrupt(format!("attachment chunk {n} is missing")))
    }

    /// The bytes in `[from, to)` (clamped to the blob), a chunk at a time.
    pub fn range(&self, from: u64, to: u64) -> impl Iterator<Item = Result<Vec<u8>>> + '_ {
        let to = to.min(self.len);
        let first = (from / CHUNK as u64) as u32;
        let last = if to == 0 { 0 } else { (to - 1) / CHUNK as u64 } as u32;
        let empty = from >= to;
        (first..=last).filter(move |_| !empty).map(move |n| {
            let chunk = self.chunk(n)?;
            let base = n as u64 * CHUNK as u64;
            let lo = from.saturating_sub(base) as usize;
            let hi = ((to - base) as usize).min(chunk.len());
            Ok(if lo == 0 && hi == chunk.len() {
                chunk
            } else {
                chunk[lo..hi].to_vec()
            })
        })
    }

    /// The whole blob in memory (for inline base64 renderings).
    pub fn read_all(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len as usize);
        for c in self.range(0, self.len) {
            out.extend_from_slice(&c?);
        }
        Ok(out)
    }
}

/// What garbage collection did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    pub blobs: u64,
    pub orphans: u64,
}

/// Deletes the blobs no stored revision names (see the module doc).
/// `named` holds every digest's MD5 that the database's stored revisions
/// name, read on a snapshot taken after `since_us`-old headers could no
/// longer be renamed without a refresh.
pub(crate) fn collect_garbage(
    shared: &Arc<Shared>,
    named: &HashSet<[u8; 16]>,
    grace: Duration,
) -> Result<Collected> {
    let db = shared.db;
    let cutoff = now_us().saturating_sub(grace.as_micros() as u64);
    let snap = shared.store.snapshot();
    let mut headers: Vec<([u8; 16], Header)> = Vec::new();
    let mut failure = None;
    let (from, to) = kind_range(db, HEADER);
    shared
        .poison
        .guard(snap.scan(Keyspace::Blobs, &from, &to, false, &mut |k, v| {
            match (
                <[u8; 16]>::try_from(&k[9..]),
                records::decode::<Header>(v, "blob header"),
            ) {
                (Ok(md5), Ok(h)) => headers.push((md5, h)),
                (_, Err(e)) => {
                    failure = Some(e);
                    return false;
                }
                (Err(_), _) => {}
            }
            true
        }))?;
    if let Some(e) = failure {
        return Err(e);
    }
    let mut out = Collected::default();
    let mut kept: HashSet<[u8; 16]> = HashSet::new();
    shared.blob_lock.lock().pending.retain(|_, at| *at > cutoff);
    for (md5, h) in headers {
        if named.contains(&md5) {
            kept.insert(h.id);
            continue;
        }
        let lock = shared.blob_lock.lock();
        if lock.pending.contains_key(&md5) {
            // About to be named by a document write.
            kept.insert(h.id);
            continue;
        }
        // The latest header: an upload may have refreshed it since.
        let key = header_key(db, &md5);
        let latest = stored_header(shared, &key)?;
        match latest {
            Some(l) if l.written_us <= cutoff => {
                let mut batch = Batch::new();
                batch.delete(Keyspace::Blobs, key);
                let (from, to) = chunk_range(db, &l.id);
                batch.delete_range(Keyspace::Blobs, from, to);
                shared.poison.guard(shared.store.write(&batch, false))?;
                out.blobs += 1;
            }
            Some(l) => {
                kept.insert(l.id);
            }
            None => {}
        }
        drop(lock);
    }
    // Chunks no header names: uploads that stopped (or are running).
    let mut orphans: Vec<[u8; 16]> = Vec::new();
    let (from, to) = kind_range(db, CHUNKS);
    shared
        .poison
        .guard(snap.scan(Keyspace::Blobs, &from, &to, false, &mut |k, _| {
            if let Ok(id) = <[u8; 16]>::try_from(&k[9..25.min(k.len())]) {
                if !kept.contains(&id) && orphans.last() != Some(&id) {
                    orphans.push(id);
                }
            }
            true
        }))?;
    for id in orphans {
        let started = u64::from_be_bytes(id[..8].try_into().unwrap_or([0; 8]));
        let lock = shared.blob_lock.lock();
        if lock.active.contains(&id) || started > cutoff {
            continue;
        }
        // A header written since the scan may name these chunks.
        let named_now = header_names(shared, &id)?;
        if !named_now {
            let mut batch = Batch::new();
            let (from, to) = chunk_range(db, &id);
            batch.delete_range(Keyspace::Blobs, from, to);
            shared.poison.guard(shared.store.write(&batch, false))?;
            out.orphans += 1;
        }
        drop(lock);
    }
    Ok(out)
}

/// True when some header names blob `id` (a scan of the headers; only
/// garbage collection asks, once per orphan).
fn header_names(shared: &Arc<Shared>, id: &[u8; 16]) -> Result<bool> {
    let (from, to) = kind_range(shared.db, HEADER);
    let mut found = false;
    shared.poison.guard(shared.store.latest().scan(
        Keyspace::Blobs,
        &from,
        &to,
        false,
        &mut |_, v| {
            if let Ok(h) = records::decode::<Header>(v, "blob header") {
                found = h.id == *id;
            }
            !found
        },
    ))?;
    Ok(found)
}

/// The MD5s a stored body names.
pub(crate) fn named_by(body: &str, out: &mut HashSet<[u8; 16]>) {
    if !att::has_stored(body) {
        return;
    }
    if let Ok(stubs) = att::stored_stubs(body) {
        out.extend(stubs.iter().filter_map(|(_, s)| s.md5()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_ranges_cover_exactly_one_blob() {
        let id = [0xff; 16];
        let (from, to) = chunk_range(7, &id);
        assert!(chunk_key(7, &id, u32::MAX) < to);
        assert!(from <= chunk_key(7, &id, 0));
        let mut other = [0xffu8; 16];
        other[15] = 0xfe;
        assert!(chunk_key(7, &other, u32::MAX) < from);
    }
}
