//! Attachments on the wire: `GET/HEAD/PUT/DELETE /{db}/{doc}/{att}`
//! (names may contain `/`), and documents read with their attachments'
//! bytes (`attachments=true`, `atts_since`, `att_encoding_info`) as JSON
//! with base64 `data` or as `multipart/related`.
//!
//! Invariants:
//! - Attachment bodies are streamed both ways: an upload goes to storage a
//!   frame at a time, a download comes from it a chunk at a time (gzip
//!   decoded on the way for clients that do not accept gzip).
//! - An upload's bytes are stored before the document update that names
//!   them; if the update fails (conflict, validation) they are left for
//!   compaction's garbage collection, never visible.
//! - `Range` applies to attachments stored as they were sent (CouchDB
//!   sends `Accept-Ranges: none` for encoded ones and ignores the range).

use std::io::Read as _;
use std::sync::Arc;

use axum::body::Body as HttpBody;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use settee_core::att::{self, AttIn, AttKind, AttStub, BlobWrites};
use settee_core::doc::{Body, Doc};
use settee_core::name::DocKind;
use settee_core::rev::Rev;
use settee_core::revtree::RevTree;
use settee_db::atts::AttWriter;
use settee_db::blobs::{BlobReader, Blobs};
use settee_db::json::{AttView, Extras};
use settee_db::{Database, DocRead, GetOptions};

use crate::auth::{require_db_admin, require_db_reader, require_db_writer};
use crate::error::{ApiError, ApiResult};
use crate::render::{json_response, push_str};
use crate::request::{parse_rev, Req};
use crate::server::NoCompress;
use crate::state::App;
use crate::upload::Upload;

/// What a read asks of attachments: `attachments`, `att_encoding_info`
/// and `atts_since` (the revisions the client has).
#[derive(Debug, Clone, Default)]
pub struct AttAsk {
    /// The view, with `since_pos` 0 (see [`AttAsk::view_for`]).
    pub view: AttView,
    pub since: Option<Vec<Rev>>,
}

impl AttAsk {
    /// The view for revision `rev` of a document with revision tree
    /// `tree`: as CouchDB, attachments are sent only if added after the
    /// newest `atts_since` revision that is `rev` or one of its ancestors
    /// (revisions the document does not have are ignored).
    pub fn view_for(&self, tree: Option<&RevTree>, rev: &Rev) -> AttView {
        match (self.view, &self.since, tree) {
            (AttView::Data { encoding_info, .. }, Some(since), Some(tree)) => {
                let path = tree.path(rev).unwrap_or_default();
                let since_pos = since
                    .iter()
                    .filter(|r| path.iter().any(|n| n.rev == **r))
                    .map(|r| r.pos)
                    .max()
                    .unwrap_or(0);
                AttView::Data {
                    encoding_info,
                    since_pos,
                }
            }
            (view, _, _) => view,
        }
    }

    pub fn wants_data(&self) -> bool {
        matches!(self.view, AttView::Data { .. })
    }
}

/// Parses a JSON list of revisions (`atts_since`).
pub fn parse_since(v: &serde_json::Value) -> ApiResult<Vec<Rev>> {
    let bad = || ApiError::bad_request("atts_since is not a JSON list of revisions");
    v.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|r| parse_rev(r.as_str().ok_or_else(bad)?))
        .collect()
}

/// How `attachments`, `atts_since` and `att_encoding_info` ask for
/// attachments to be shown.
pub fn att_ask(req: &Req) -> ApiResult<AttAsk> {
    let q = &req.query;
    let encoding_info = q.get("att_encoding_info") == Some("true");
    // Every occurrence is read, as CouchDB does; the last one counts.
    let mut since = None;
    for spec in q.all("atts_since") {
        let v = crate::request::parse_json_bytes(spec.as_bytes())?;
        if !v.is_array() {
            return Err(ApiError::bad_request("Invalid list of revisions"));
        }
        since = Some(parse_since(&v)?);
    }
    let view = if q.get("attachments") == Some("true") || since.is_some() {
        AttView::Data {
            encoding_info,
            since_pos: 0,
        }
    } else if encoding_info {
        AttView::EncodingInfo
    } else {
        AttView::Stubs
    };
    Ok(AttAsk { view, since })
}

/// True when the client takes `multipart/related` (CouchDB's test: no
/// `Accept`, or one naming it or `*/*`).
pub fn accepts_multipart(req: &Req) -> bool {
    match req.header(header::ACCEPT) {
        None => true,
        Some(a) => a.split(',').any(|t| {
            let t = t.split(';').next().unwrap_or("").trim();
            t == "*/*" || t.eq_ignore_ascii_case("multipart/related") || t == "multipart/*"
        }),
    }
}

fn open(blobs: &Blobs, stub: &AttStub) -> ApiResult<BlobReader> {
    let md5 = stub
        .md5()
        .ok_or_else(|| ApiError::from(settee_db::Error::Corrupt("attachment digest".into())))?;
    blobs.open(&md5)?.ok_or_else(|| {
        ApiError::from(settee_db::Error::Corrupt(format!(
            "attachment body {} is missing",
            stub.digest
        )))
    })
}

/// Renders a document with its attachments' bytes inline (base64).
pub fn push_doc_with_data(
    out: &mut String,
    db: &Database,
    d: &DocRead,
    extras: Extras,
) -> ApiResult<()> {
    Ok(settee_db::json::push_doc_blobs(
        out,
        d,
        extras,
        &db.blobs(),
    )?)
}

/// A piece of a streamed response: bytes, or a stored blob's bytes.
enum Piece {
    Bytes(Bytes),
    Blob(BlobReader),
}

/// The response body of `pieces`, blobs read a chunk at a time.
fn stream_pieces(pieces: Vec<Piece>) -> HttpBody {
    let s = stream::iter(pieces).flat_map(|p| match p {
        Piece::Bytes(b) => stream::iter(vec![Ok::<Bytes, std::io::Error>(b)]).boxed(),
        Piece::Blob(r) => {
            let r = Arc::new(r);
            let n = r.chunks();
            stream::iter(0..n)
                .map(move |i| r.chunk(i).map(Bytes::from).map_err(std::io::Error::other))
                .boxed()
        }
    });
    HttpBody::from_stream(s)
}

fn boundary() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// A document's part of a multipart body: its JSON and the attachments
/// that follow it, in order.
struct Related {
    json: String,
    follows: Vec<(String, AttStub)>,
}

/// A document's JSON for a multipart body (attachments above the view's
/// `since_pos` marked `follows`, with their encoding) and the stubs of
/// those that follow, in order; None when none follows.
fn related_json(d: &DocRead, extras: Extras) -> ApiResult<Option<Related>> {
    let (encoding_info, since_pos) = match extras.atts {
        AttView::Data {
            encoding_info,
            since_pos,
        } => (encoding_info, since_pos),
        _ => return Ok(None),
    };
    let (stubs, rest) = att::split_stored(d.body.as_str())
        .map_err(|e| ApiError::from(settee_db::Error::Corrupt(e.to_string())))?;
    if !stubs.iter().any(|(_, s)| s.revpos > since_pos) {
        return Ok(None);
    }
    // The document without its stubs, then `_attachments`.
    let bare = DocRead {
        body: Body::from_stored(rest),
        ..d.clone()
    };
    let mut json = settee_db::json::doc_string(&bare, extras);
    json.pop();
    json.push_str(",\"_attachments\":{");
    let mut follows = Vec::new();
    for (i, (name, stub)) in stubs.into_iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        push_str(&mut json, &name);
        json.push(':');
        if stub.revpos > since_pos {
            stub.write_head(&mut json);
            json.push_str(",\"length\":");
            json.push_str(&stub.length.to_string());
            json.push_str(",\"follows\":true");
            stub.write_encoding(&mut json);
            json.push('}');
            follows.push((name, stub));
        } else {
            stub.write_json(&mut json, encoding_info);
        }
    }
    json.push_str("}}");
    Ok(Some(Related { json, follows }))
}

/// The parts of a `multipart/related` body with boundary `b`: the JSON,
/// then each attachment that follows (its stored bytes), then the close.
fn related_pieces(db: &Database, b: &str, r: &Related, pieces: &mut Vec<Piece>) -> ApiResult<()> {
    let json = &r.json;
    let blobs = db.blobs();
    pieces.push(Piece::Bytes(Bytes::from(format!(
        "--{b}\r\nContent-Type: application/json\r\n\r\n{json}"
    ))));
    for (name, stub) in &r.follows {
        let mut head = format!("\r\n--{b}\r\nContent-Disposition: attachment; filename=");
        push_str(&mut head, name);
        head.push_str(&format!(
            "\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
            stub.content_type,
            stub.stored_length()
        ));
        if let Some(enc) = &stub.encoding {
            head.push_str(&format!("Content-Encoding: {enc}\r\n"));
        }
        head.push_str("\r\n");
        pieces.push(Piece::Bytes(Bytes::from(head)));
        pieces.push(Piece::Blob(open(&blobs, stub)?));
    }
    pieces.push(Piece::Bytes(Bytes::from(format!("\r\n--{b}--"))));
    Ok(())
}

fn streamed(pieces: Vec<Piece>, content_type: &str) -> Response {
    let mut resp = Response::new(stream_pieces(pieces));
    set(&mut resp, header::CONTENT_TYPE, content_type);
    // Attachment bytes go out as stored (compressible ones already are).
    resp.extensions_mut().insert(NoCompress);
    resp
}

/// A document as `multipart/related` (JSON when no attachment follows).
pub fn multipart_doc(db: &Database, d: &DocRead, extras: Extras) -> ApiResult<Response> {
    let Some(related) = related_json(d, extras)? else {
        let mut out = String::new();
        push_doc_with_data(&mut out, db, d, extras)?;
        return Ok(json_response(StatusCode::OK, out));
    };
    let b = boundary();
    let mut pieces = Vec::new();
    related_pieces(db, &b, &related, &mut pieces)?;
    Ok(streamed(
        pieces,
        &format!("multipart/related; boundary=\"{b}\""),
    ))
}

/// `open_revs` as `multipart/mixed` with attachment bytes: each revision
/// with attachments to send as a nested `multipart/related`, the others
/// as JSON, missing ones as errors (what CouchDB's replicator reads).
pub fn multipart_open_revs(
    db: &Database,
    results: &[(&settee_db::OpenRev, Extras)],
) -> ApiResult<Response> {
    let outer = boundary();
    let mut pieces = Vec::new();
    for (r, extras) in results {
        match r {
            settee_db::OpenRev::Found(d) => match related_json(d, *extras)? {
                Some(related) => {
                    let inner = boundary();
                    pieces.push(Piece::Bytes(Bytes::from(format!(
                        "--{outer}\r\nContent-Type: multipart/related; boundary=\"{inner}\"\r\n\r\n"
                    ))));
                    related_pieces(db, &inner, &related, &mut pieces)?;
                    pieces.push(Piece::Bytes(Bytes::from_static(b"\r\n")));
                }
                None => {
                    let mut out = format!("--{outer}\r\nContent-Type: application/json\r\n\r\n");
                    push_doc_with_data(&mut out, db, d, *extras)?;
                    out.push_str("\r\n");
                    pieces.push(Piece::Bytes(Bytes::from(out)));
                }
            },
            settee_db::OpenRev::Missing(rev) => {
                let mut out = format!(
                    "--{outer}\r\nContent-Type: application/json; error=\"true\"\r\n\r\n{{\"missing\":"
                );
                crate::render::push_rev(&mut out, rev);
                out.push_str("}\r\n");
                pieces.push(Piece::Bytes(Bytes::from(out)));
            }
        }
    }
    pieces.push(Piece::Bytes(Bytes::from(format!("--{outer}--"))));
    Ok(streamed(
        pieces,
        &format!("multipart/mixed; boundary=\"{outer}\""),
    ))
}

fn set(resp: &mut Response, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

fn missing_att() -> ApiError {
    ApiError::not_found("Document is missing attachment")
}

/// `/{db}/{doc}/{att}`.
pub async fn handle(
    app: &App,
    req: &mut Req,
    db: &str,
    id: String,
    name: String,
) -> ApiResult<Response> {
    let db = app.db(db)?;
    match req.method {
        Method::GET | Method::HEAD => get(req, &db, &id, &name),
        Method::PUT => put(app, req, &db, id, name).await,
        Method::DELETE => delete(app, req, &db, id, name).await,
        _ => Err(ApiError::method_not_allowed("DELETE,GET,HEAD,PUT")),
    }
}

fn get(req: &Req, db: &Database, id: &str, name: &str) -> ApiResult<Response> {
    require_db_reader(req)?;
    let reader = db.reader()?;
    let opts = GetOptions {
        rev: req.query.rev()?,
        ..GetOptions::default()
    };
    let d = reader.get(id, &opts)?;
    let stubs = att::stored_stubs(d.body.as_str())
        .map_err(|e| ApiError::from(settee_db::Error::Corrupt(e.to_string())))?;
    let stub = stubs
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, s)| s)
        .ok_or_else(missing_att)?;
    let etag = format!("\"{}\"", stub.digest.trim_start_matches("md5-"));
    if crate::render::none_match(req.header(header::IF_NONE_MATCH), &etag) {
        return Ok(crate::render::not_modified(&etag));
    }
    let reader = open(&db.blobs(), &stub)?;
    let encoded = stub.encoding.is_some();
    let gzip_ok = req.header(header::ACCEPT_ENCODING).is_some_and(|a| {
        a.split(',').any(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("gzip")
        })
    });
    let head = req.method == Method::HEAD;
    let mut status = StatusCode::OK;
    let (body, length, extra): (HttpBody, u64, Vec<(header::HeaderName, String)>) =
        if encoded && gzip_ok {
            let len = reader.len();
            (
                stream_pieces(vec![Piece::Blob(reader)]),
                len,
                vec![(
                    header::CONTENT_ENCODING,
                    stub.encoding.clone().unwrap_or_default(),
                )],
            )
        } else if encoded {
            (decoded_stream(reader), stub.length, Vec::new())
        } else {
            let len = reader.len();
            match req.header(header::RANGE).map(|r| parse_ranges(r, len)) {
                Some(Ranges::Unsatisfiable) => {
                    return Err(ApiError::new(
                        StatusCode::RANGE_NOT_SATISFIABLE,
                        "requested_range_not_satisfiable",
                        "Requested range not satisfiable",
                    ))
                }
                Some(Ranges::Some(ranges)) if ranges.len() == 1 => {
                    let (from, to) = ranges[0];
                    status = StatusCode::PARTIAL_CONTENT;
                    (
                        range_stream(reader, from, to + 1),
                        to + 1 - from,
                        vec![(header::CONTENT_RANGE, format!("bytes {from}-{to}/{len}"))],
                    )
                }
                Some(Ranges::Some(ranges)) => {
                    return Ok(multi_range(reader, &ranges, &stub.content_type, head))
                }
                _ => (stream_pieces(vec![Piece::Blob(reader)]), len, Vec::new()),
            }
        };
    let mut resp = Response::new(if head { HttpBody::empty() } else { body });
    *resp.status_mut() = status;
    // Served as stored, as CouchDB: never re-encoded on the way out.
    resp.extensions_mut().insert(NoCompress);
    set(&mut resp, header::CONTENT_TYPE, &stub.content_type);
    set(&mut resp, header::ETAG, &etag);
    set(&mut resp, header::CACHE_CONTROL, "must-revalidate");
    // An HTML attachment must not run scripts in the server's origin.
    set(&mut resp, header::CONTENT_SECURITY_POLICY, "sandbox");
    set(
        &mut resp,
        header::ACCEPT_RANGES,
        if encoded { "none" } else { "bytes" },
    );
    set(&mut resp, header::CONTENT_LENGTH, &length.to_string());
    for (k, v) in extra {
        set(&mut resp, k, &v);
    }
    Ok(resp)
}

/// Requested byte ranges, inclusive, clamped to the attachment.
enum Ranges {
    /// Not a byte range request CouchDB honours: the whole attachment.
    Whole,
    Unsatisfiable,
    Some(Vec<(u64, u64)>),
}

fn parse_ranges(spec: &str, len: u64) -> Ranges {
    let Some(list) = spec.trim().strip_prefix("bytes=") else {
        return Ranges::Whole;
    };
    let last = len.saturating_sub(1);
    let mut out = Vec::new();
    for r in list.split(',') {
        let Some((a, b)) = r.trim().split_once('-') else {
            return Ranges::Whole;
        };
        let (a, b) = (a.trim(), b.trim());
        let range = match (a.parse::<u64>(), b.parse::<u64>()) {
            // `bytes=0-` is the whole attachment (200, as CouchDB).
            (Ok(0), Err(_)) if b.is_empty() && list.trim() == r.trim() => return Ranges::Whole,
            (Ok(from), Ok(to)) if from <= to => (from, to.min(last)),
            (Ok(_), Ok(_)) => return Ranges::Unsatisfiable,
            (Ok(from), Err(_)) if b.is_empty() => (from, last),
            (Err(_), Ok(suffix)) if a.is_empty() => (len.saturating_sub(suffix), last),
            _ => return Ranges::Whole,
        };
        if range.0 >= len {
            return Ranges::Unsatisfiable;
        }
        out.push(range);
    }
    Ranges::Some(out)
}

/// Bytes `[from, to)` of a blob, a chunk at a time.
fn range_stream(reader: BlobReader, from: u64, to: u64) -> HttpBody {
    let chunk = settee_db::blobs::CHUNK as u64;
    let first = (from / chunk) as u32;
    let last = (to.saturating_sub(1) / chunk) as u32;
    let r = Arc::new(reader);
    let s = stream::iter(first..=last).map(move |n| {
        let bytes = r.chunk(n).map_err(std::io::Error::other)?;
        let base = u64::from(n) * chunk;
        let lo = from.saturating_sub(base) as usize;
        let hi = ((to - base) as usize).min(bytes.len());
        Ok::<Bytes, std::io::Error>(Bytes::from(bytes).slice(lo..hi))
    });
    HttpBody::from_stream(s)
}

fn multi_range(reader: BlobReader, ranges: &[(u64, u64)], ctype: &str, head: bool) -> Response {
    let b = boundary();
    let len = reader.len();
    let mut body: Vec<Result<Bytes, std::io::Error>> = Vec::new();
    for (from, to) in ranges {
        body.push(Ok(Bytes::from(format!(
            "\r\n--{b}\r\nContent-Type: {ctype}\r\nContent-Range: bytes {from}-{to}/{len}\r\n\r\n"
        ))));
        body.extend(
            reader
                .range(*from, to + 1)
                .map(|c| c.map(Bytes::from).map_err(std::io::Error::other)),
        );
    }
    body.push(Ok(Bytes::from(format!("\r\n--{b}--"))));
    let mut resp = Response::new(if head {
        HttpBody::empty()
    } else {
        HttpBody::from_stream(stream::iter(body))
    });
    *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
    resp.extensions_mut().insert(NoCompress);
    set(
        &mut resp,
        header::CONTENT_TYPE,
        &format!("multipart/byteranges; boundary=\"{b}\""),
    );
    resp
}

/// Reads a blob's chunks in order as one `Read`.
struct ChunkRead {
    reader: BlobReader,
    next: u32,
    buf: Vec<u8>,
    at: usize,
}

impl std::io::Read for ChunkRead {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.buf.len() {
            if self.next == self.reader.chunks() {
                return Ok(0);
            }
            self.buf = self
                .reader
                .chunk(self.next)
                .map_err(std::io::Error::other)?;
            self.next += 1;
            self.at = 0;
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// A gzip-stored blob decoded on the way out, 64 KiB at a time.
fn decoded_stream(reader: BlobReader) -> HttpBody {
    let decoder = flate2::read::GzDecoder::new(ChunkRead {
        reader,
        next: 0,
        buf: Vec::new(),
        at: 0,
    });
    let s = stream::unfold(Some(decoder), |state| async move {
        let mut d = state?;
        let mut buf = vec![0u8; 64 * 1024];
        match d.read(&mut buf) {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<Bytes, std::io::Error>(Bytes::from(buf)), Some(d)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    HttpBody::from_stream(s)
}

/// The revision an attachment write names (`?rev=` or `If-Match`).
fn write_rev(req: &Req) -> ApiResult<Option<settee_core::rev::Rev>> {
    let q = req.query.get("rev");
    let h = req
        .header(header::IF_MATCH)
        .map(|s| s.trim().trim_matches('"'));
    q.or(h).map(parse_rev).transpose()
}

fn require_writer(req: &Req, db: &Database, id: &str) -> ApiResult<()> {
    match super::partition::check_write_id(db, id)? {
        DocKind::Design => require_db_admin(req),
        DocKind::Local => Err(ApiError::bad_request(
            "Attachments are not allowed on _local documents",
        )),
        _ => require_db_writer(req),
    }
}

/// The body and stubs the edited revision has (an empty document when
/// there is none: a new document, or one recreated after deletion).
fn parent(
    db: &Database,
    id: &str,
    rev: Option<&settee_core::rev::Rev>,
) -> ApiResult<(String, Vec<(String, AttStub)>)> {
    let reader = db.reader()?;
    let Some(rev) = rev else {
        return match reader.get(id, &GetOptions::default()) {
            Ok(_) => Err(ApiError::conflict()),
            Err(settee_db::Error::NotFound(_)) => Ok(("{}".to_string(), Vec::new())),
            Err(e) => Err(e.into()),
        };
    };
    let opts = GetOptions {
        rev: Some(rev.clone()),
        ..GetOptions::default()
    };
    match reader.get(id, &opts) {
        Ok(d) => {
            let (stubs, rest) = att::split_stored(d.body.as_str())
                .map_err(|e| ApiError::from(settee_db::Error::Corrupt(e.to_string())))?;
            Ok((rest, stubs))
        }
        Err(settee_db::Error::NotFound(_)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_found",
            "missing_rev",
        )),
        Err(e) => Err(e.into()),
    }
}

/// Writes `id` at `rev` with `body` and `atts`; the response CouchDB
/// gives an attachment write.
async fn write_doc(
    app: &App,
    req: &Req,
    db: &Database,
    doc: Doc,
    status: StatusCode,
    location: Option<String>,
) -> ApiResult<Response> {
    super::doc::validate(app, req, db, &doc, true).await?;
    let id = doc.id.clone();
    let rev = super::doc::write_one(app, req, db, doc, true).await?;
    let mut out = String::from("{\"ok\":true,\"id\":");
    push_str(&mut out, &id);
    out.push_str(",\"rev\":");
    push_str(&mut out, &rev.map(|r| r.to_string()).unwrap_or_default());
    out.push('}');
    let mut resp = json_response(status, out);
    if let Some(loc) = location {
        set(&mut resp, header::LOCATION, &loc);
    }
    Ok(resp)
}

async fn put(
    app: &App,
    req: &mut Req,
    db: &Database,
    id: String,
    name: String,
) -> ApiResult<Response> {
    require_writer(req, db, &id)?;
    att::validate_name(&name).map_err(ApiError::from)?;
    let rev = write_rev(req)?;
    let content_type = req
        .header(header::CONTENT_TYPE)
        .unwrap_or(att::DEFAULT_CONTENT_TYPE)
        .to_string();
    // The edited revision is checked before the body is read.
    let (rest, stubs) = parent(db, &id, rev.as_ref())?;
    let settings = Arc::clone(&req.settings);
    let limit = settings.max_attachment_size;
    let level = settings.att_compression.level_for(&content_type);
    let mut up = Upload::start(AttWriter::new(&db.blobs(), level)?);
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "attachment_too_large",
            name.clone(),
        )
    };
    let mut body = req.body_frames(limit, too_large)?;
    while let Some(bytes) = body.next().await? {
        up.write(bytes).await?;
    }
    req.body_finished();
    let (stub, writes) = up.finish(content_type).await?;
    let mut atts = vec![AttIn {
        name: name.clone(),
        kind: AttKind::Stored(stub, writes),
    }];
    atts.extend(kept(stubs, &name));
    let doc = Doc {
        id: id.clone(),
        rev,
        deleted: false,
        revisions: None,
        body: Body::from_stored(rest),
        atts: Some(atts),
    };
    let location = super::db::location(req, db.name(), Some(&id)).and_then(|l| {
        use percent_encoding::utf8_percent_encode;
        let name = utf8_percent_encode(&name, super::db::URL_ENCODE).to_string();
        l.to_str().ok().map(|l| format!("{l}/{name}"))
    });
    write_doc(app, req, db, doc, StatusCode::CREATED, location).await
}

async fn delete(
    app: &App,
    req: &mut Req,
    db: &Database,
    id: String,
    name: String,
) -> ApiResult<Response> {
    require_writer(req, db, &id)?;
    let rev = write_rev(req)?;
    let Some(rev) = rev else {
        return Err(ApiError::conflict());
    };
    let (rest, stubs) = parent(db, &id, Some(&rev))?;
    if !stubs.iter().any(|(n, _)| *n == name) {
        return Err(missing_att());
    }
    let atts: Vec<AttIn> = kept(stubs, &name).collect();
    let doc = Doc {
        id,
        rev: Some(rev),
        deleted: false,
        revisions: None,
        body: Body::from_stored(rest),
        atts: (!atts.is_empty()).then_some(atts),
    };
    write_doc(app, req, db, doc, StatusCode::OK, None).await
}

/// The parent's attachments other than `name`, kept as stubs.
fn kept<'a>(stubs: Vec<(String, AttStub)>, name: &'a str) -> impl Iterator<Item = AttIn> + 'a {
    stubs
        .into_iter()
        .filter(move |(n, _)| n != name)
        .map(|(n, _)| AttIn {
            name: n,
            kind: AttKind::Stub { revpos: None },
        })
}

/// Refuses (413 `attachment_too_large`, naming it) an inline attachment
/// longer than `max` bytes (`max_attachment_size`).
pub fn check_inline_sizes(doc: &Doc, max: u64) -> ApiResult<()> {
    for a in doc.atts.iter().flatten() {
        if let AttKind::Data { data, .. } = &a.kind {
            if data.len() as u64 > max {
                return Err(too_large(&a.name));
            }
        }
    }
    Ok(())
}

pub(crate) fn too_large(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "attachment_too_large",
        name.to_string(),
    )
}

/// True for a `multipart/related` request body (a document with its
/// attachments, as CouchDB's replicator sends it).
pub fn is_multipart_related(req: &Req) -> bool {
    req.content_type_is("multipart/related")
}

/// Replaces each `follows` attachment of a parsed document with the
/// stub of its stored part (by name).
pub fn attach_stored(
    atts: &mut [AttIn],
    mut stored: Vec<(String, AttStub, BlobWrites)>,
    new_edits: bool,
) -> ApiResult<()> {
    for a in atts.iter_mut() {
        if let AttKind::Follows { revpos, .. } = &a.kind {
            let i = stored
                .iter()
                .position(|(n, _, _)| *n == a.name)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "attachment {} follows, but no part of the body carries it",
                        a.name
                    ))
                })?;
            let (_, stub, writes) = stored.swap_remove(i);
            let revpos = if new_edits { 0 } else { revpos.unwrap_or(0) };
            a.kind = AttKind::Stored(AttStub { revpos, ..stub }, writes);
        }
    }
    Ok(())
}

/// The next part of a multipart body, within the body timeout.
pub(crate) async fn next_part<'a>(
    mp: &mut multer::Multipart<'a>,
) -> ApiResult<Option<multer::Field<'a>>> {
    match tokio::time::timeout(crate::request::BODY_READ_TIMEOUT, mp.next_field()).await {
        Err(_) => Err(ApiError::body_timeout()),
        Ok(Ok(f)) => Ok(f),
        Ok(Err(e)) => Err(ApiError::bad_request(format!(
            "invalid multipart body: {e}"
        ))),
    }
}

pub(crate) async fn next_chunk(field: &mut multer::Field<'_>) -> ApiResult<Option<Bytes>> {
    match tokio::time::timeout(crate::request::BODY_READ_TIMEOUT, field.chunk()).await {
        Err(_) => Err(ApiError::body_timeout()),
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(ApiError::bad_request(format!(
            "invalid multipart body: {e}"
        ))),
    }
}

/// `PUT /{db}/{doc}` as `multipart/related`: the document's JSON, then
/// the bytes of each attachment it marks `follows`, in order. Each part
/// is streamed to storage; then the document is written as a JSON PUT is.
pub async fn put_multipart(
    app: &App,
    req: &mut Req,
    db: &Database,
    id: &str,
) -> ApiResult<Response> {
    require_writer(req, db, id)?;
    let ct = req.header(header::CONTENT_TYPE).unwrap_or("").to_string();
    let boundary = multipart_boundary(&ct)
        .ok_or_else(|| ApiError::bad_request("multipart/related needs a boundary"))?;
    let settings = Arc::clone(&req.settings);
    let body = req
        .take_body()
        .ok_or_else(|| ApiError::bad_request("no body"))?;
    let stream = crate::multipart_parts::rewrite(body.into_data_stream(), &boundary);
    let mut mp = multer::Multipart::new(stream, boundary);
    // The document.
    let mut first = next_part(&mut mp)
        .await?
        .ok_or_else(|| ApiError::bad_request("multipart body without a document part"))?;
    if !first
        .content_type()
        .is_some_and(|m| m.essence_str().eq_ignore_ascii_case("application/json"))
    {
        return Err(ApiError::bad_ctype());
    }
    let mut json = Vec::new();
    while let Some(c) = next_chunk(&mut first).await? {
        json.extend_from_slice(&c);
        if json.len() as u64 > settings.max_http_request_size {
            return Err(ApiError::request_too_large());
        }
    }
    drop(first);
    let serde_json::Value::Object(map) = crate::request::parse_json_bytes(&json)? else {
        return Err(ApiError::bad_request("Document must be a JSON object"));
    };
    // Which attachments follow, in order, and how they are sent.
    let follows: Vec<Follows> = map
        .get("_attachments")
        .and_then(serde_json::Value::as_object)
        .map(|atts| {
            atts.iter()
                .filter(|(_, v)| v.get("follows") == Some(&serde_json::Value::Bool(true)))
                .map(|(name, v)| {
                    let ct = v
                        .get("content_type")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or(att::DEFAULT_CONTENT_TYPE)
                        .to_string();
                    let enc = v
                        .get("encoding")
                        .and_then(serde_json::Value::as_str)
                        .map(str::to_string);
                    let len = v.get("length").and_then(serde_json::Value::as_u64);
                    // The bytes the part carries: encoded ones when sent
                    // encoded (CouchDB's `encoded_length`).
                    let sent = match enc {
                        Some(_) => v.get("encoded_length").and_then(serde_json::Value::as_u64),
                        None => len,
                    };
                    (name.clone(), ct, enc, len, sent)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut stored = Vec::with_capacity(follows.len());
    for (name, ct, encoding, length, sent) in follows {
        let Some(mut part) = next_part(&mut mp).await? else {
            return Err(ApiError::bad_request(format!(
                "attachment {name} follows, but no part of the body carries it"
            )));
        };
        // Bytes sent encoded (a replicator's copy) are stored as they are.
        let level = match encoding {
            Some(_) => None,
            None => settings.att_compression.level_for(&ct),
        };
        let mut up = Upload::start(AttWriter::new(&db.blobs(), level)?);
        while let Some(c) = next_chunk(&mut part).await? {
            up.write(c).await?;
            if up.length() > settings.max_attachment_size {
                return Err(too_large(&name));
            }
            if sent.is_some_and(|n| up.length() > n) {
                return Err(ApiError::bad_request("attachment longer than expected"));
            }
        }
        if sent.is_some_and(|n| up.length() < n) {
            return Err(ApiError::bad_request("attachment shorter than expected"));
        }
        let (mut stub, writes) = up.finish(ct).await?;
        if let Some(enc) = encoding {
            stub.encoded_length = Some(stub.length);
            stub.length = length.unwrap_or(stub.length);
            stub.encoding = Some(enc);
        }
        stored.push((name, stub, writes));
    }
    while next_part(&mut mp).await?.is_some() {}
    drop(mp);
    req.body_finished();
    super::doc::write_with_atts(app, req, db, id, map, stored).await
}

/// An attachment a multipart document marks `follows`: its name, content
/// type, encoding, `length`, and the bytes its part must carry.
type Follows = (String, String, Option<String>, Option<u64>, Option<u64>);

/// The `boundary` parameter of a multipart content type.
pub(crate) fn multipart_boundary(ct: &str) -> Option<String> {
    ct.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_string())
            .filter(|b| !b.is_empty())
    })
}
