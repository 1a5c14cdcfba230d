//! Answering a view query from an index snapshot: map rows (with
//! `include_docs`) or reductions (whole range, `group`, `group_level`),
//! written as CouchDB's JSON into an [`Out`] row by row.
//!
//! Invariants:
//! - Memory is bounded whatever the number of rows: rows are written as
//!   they are read ([`Out::row_done`] lets the caller send and stop), and
//!   a reduction holds at most [`REDUCE_CHUNK`] rows before reducing them
//!   to a partial.
//! - Rows come in CouchDB's order (the index's key order, reversed for
//!   `descending`); `skip` and `limit` count output rows (groups, when
//!   reducing).
//! - `total_rows` is the view's row count in the index state of the same
//!   snapshot; `offset` counts the rows before the first one the range
//!   could return, plus `skip` — in a partitioned index too, as CouchDB
//!   counts them (over every partition).
//! - A query of a partitioned index reads only its partition's range of
//!   rows ([`Query::within`]).

use serde_json::Value;
use settee_core::rev::Rev;
use settee_db::json::{push_doc_blobs, push_str, push_u64, AttView, Extras};
use settee_db::{DocRead, GetOptions, IndexSnapshot, Reader};
use std::cmp::Ordering;

use settee_core::collate::collate;
use settee_index::keycodec::{
    array_prefix_range, collate_raw, key_range, prefix_successor, view_range, ByteRange, Collation,
    GroupLevel, ViewRange,
};
use settee_index::reduce::Partial;
use settee_js::{JsEngine, JsError};

use crate::args::{ViewArgs, ViewKind};
use crate::blocks;
use crate::error::{Result, ViewError};
use crate::index::Index;
use crate::layout::{self, IndexState, RowValue};
use crate::reducer::Reducer;

/// Rows a reduction buffers before reducing them to a partial.
pub const REDUCE_CHUNK: usize = 1000;

/// Where a query writes its answer.
pub trait Out {
    fn buf(&mut self) -> &mut String;
    /// Called after each row; `false` stops the query (the client left).
    fn row_done(&mut self) -> bool;
}

/// A [`Out`] collecting into a string.
impl Out for String {
    fn buf(&mut self) -> &mut String {
        self
    }
    fn row_done(&mut self) -> bool {
        true
    }
}

/// One query against one view of an index.
pub struct Query<'a> {
    pub index: &'a Index,
    pub view: u16,
    pub args: &'a ViewArgs,
    pub snap: &'a IndexSnapshot,
    pub state: &'a IndexState,
    /// For `include_docs`.
    pub docs: &'a Reader,
    /// For `include_docs` with `attachments`.
    pub blobs: &'a settee_db::blobs::Blobs,
    pub js: &'a JsEngine,
}

/// The byte ranges a query scans, in scan order: one per key of `keys`
/// (in reverse with `descending`, as CouchDB), else the key range. The
/// first range also places `offset`, even when it is empty.
fn ranges(q: &Query<'_>) -> Vec<ByteRange> {
    let collation = q.collation();
    let a = q.args;
    let ranges = match &a.keys {
        Some(keys) if a.descending => keys.iter().rev().map(|k| key_range(k, collation)).collect(),
        Some(keys) => keys.iter().map(|k| key_range(k, collation)).collect(),
        None => vec![view_range(
            &ViewRange {
                start_key: a.start_key.as_ref(),
                start_key_doc_id: a.start_docid.as_deref(),
                end_key: a.end_key.as_ref(),
                end_key_doc_id: a.end_docid.as_deref(),
                inclusive_end: a.inclusive_end,
                descending: a.descending,
            },
            collation,
        )],
    };
    ranges.into_iter().map(|r| q.within(r)).collect()
}

/// CouchDB's check that a key range can hold rows at all.
fn check_range(args: &ViewArgs, collation: Collation) -> Result<()> {
    let (Some(start), Some(end)) = (&args.start_key, &args.end_key) else {
        return Ok(());
    };
    let order = match collation {
        Collation::Couch => collate(start, end),
        Collation::Raw => collate_raw(start, end),
    };
    let reversed = if args.descending {
        order == Ordering::Less
    } else {
        order == Ordering::Greater
    };
    if reversed {
        return Err(ViewError::KeyRange(format!(
            "No rows can match your key range, reverse your start_key and end_key or set descending={}",
            !args.descending
        )));
    }
    Ok(())
}

impl Query<'_> {
    fn collation(&self) -> Collation {
        self.index.spec.views[usize::from(self.view)].collation
    }

    fn kind(&self) -> ViewKind {
        match self.index.spec.views[usize::from(self.view)].reduce {
            Some(_) => ViewKind::Reduce,
            None => ViewKind::Map,
        }
    }

    fn prefix(&self) -> Vec<u8> {
        layout::view_prefix(&self.index.spec.signature, self.view)
    }

    /// A range of row keys as the range of the index's rows: in a
    /// partitioned index, that range within the query's partition.
    fn within(&self, r: ByteRange) -> ByteRange {
        let partition = self.args.partition.as_deref();
        let Some(p) = partition.filter(|_| self.index.spec.partitioned) else {
            return r;
        };
        let prefix = layout::partition_prefix(p, self.collation());
        let lower = [&prefix[..], r.lower.as_deref().unwrap_or_default()].concat();
        let upper = match r.upper {
            Some(u) => Some([&prefix[..], &u[..]].concat()),
            None => prefix_successor(&prefix),
        };
        ByteRange {
            lower: Some(lower),
            upper,
        }
    }

    /// The storage bounds of the view's rows in `[lo, hi)` (row keys after
    /// the view prefix; `hi = None`: to the end of the view).
    fn span(&self, lo: &[u8], hi: Option<&[u8]>) -> (Vec<u8>, Vec<u8>) {
        let prefix = self.prefix();
        let to = match hi {
            Some(h) => [&prefix[..], h].concat(),
            None => prefix_successor(&prefix).unwrap_or_default(),
        };
        ([&prefix[..], lo].concat(), to)
    }

    /// Scans the rows of a byte range of the view in the query's
    /// direction: `(row key without DUP, value)`.
    fn scan(
        &self,
        range: &ByteRange,
        visit: &mut dyn FnMut(&[u8], RowValue) -> Result<bool>,
    ) -> Result<()> {
        let prefix_len = self.prefix().len();
        let (from, to) = self.span(
            range.lower.as_deref().unwrap_or(&[]),
            range.upper.as_deref(),
        );
        let mut failure = None;
        self.snap
            .scan(&from, Some(&to), self.args.descending, &mut |k, v| {
                let rest = &k[prefix_len..];
                let row = match layout::decode::<RowValue>(v, "view row") {
                    Ok(r) => r,
                    Err(e) => {
                        failure = Some(e);
                        return Ok(false);
                    }
                };
                match visit(layout::strip_dup(rest), row) {
                    Ok(more) => Ok(more),
                    Err(e) => {
                        failure = Some(e);
                        Ok(false)
                    }
                }
            })?;
        failure.map_or(Ok(()), Err)
    }

    /// Rows of the view before the query's first possible row.
    fn offset(&self, ranges: &[ByteRange]) -> Result<u64> {
        let total = self
            .state
            .rows
            .get(usize::from(self.view))
            .copied()
            .unwrap_or(0);
        let Some(first) = ranges.first() else {
            return Ok(0);
        };
        let sig = &self.index.spec.signature;
        let below = |key: &[u8]| {
            self.index
                .offsets
                .rows_below(self.snap, self.state, sig, self.view, key)
        };
        let n = if self.args.descending {
            match &first.upper {
                Some(u) => total.saturating_sub(below(u)?),
                None => 0,
            }
        } else {
            match &first.lower {
                Some(l) => below(l)?,
                None => 0,
            }
        };
        Ok(n.min(total))
    }

    /// Writes the whole answer.
    pub fn run(&self, out: &mut dyn Out) -> Result<()> {
        check_range(self.args, self.collation())?;
        if self.args.reduces(self.kind()) {
            self.run_reduce(out)
        } else {
            self.run_map(out)
        }
    }

    fn push_update_seq(&self, buf: &mut String) {
        if self.args.update_seq {
            buf.push_str("\"update_seq\":\"");
            push_u64(buf, self.state.seq);
            buf.push_str("\",");
        }
    }

    fn run_map(&self, out: &mut dyn Out) -> Result<()> {
        let ranges = ranges(self);
        let total = self
            .state
            .rows
            .get(usize::from(self.view))
            .copied()
            .unwrap_or(0);
        let offset = self
            .offset(&ranges)?
            .saturating_add(self.args.skip)
            .min(total);
        let buf = out.buf();
        buf.push_str("{\"total_rows\":");
        push_u64(buf, total);
        buf.push_str(",\"offset\":");
        push_u64(buf, offset);
        buf.push(',');
        self.push_update_seq(buf);
        buf.push_str("\"rows\":[");
        let mut first = true;
        let mut alive = true;
        self.selected_rows(&ranges, &mut |row| {
            let buf = out.buf();
            buf.push_str(if first { "\r\n" } else { ",\r\n" });
            first = false;
            buf.push_str("{\"id\":");
            push_str(buf, &row.id);
            buf.push_str(",\"key\":");
            buf.push_str(&row.key);
            buf.push_str(",\"value\":");
            buf.push_str(&row.value);
            if self.args.include_docs {
                buf.push_str(",\"doc\":");
                self.push_linked_doc(buf, &row)?;
            }
            buf.push('}');
            alive = out.row_done();
            Ok(alive)
        })?;
        if alive {
            out.buf().push_str("\r\n]}");
        }
        Ok(())
    }

    /// Visits the rows a map query selects (its ranges, `skip` and
    /// `limit`) in order, without rendering an answer: for callers that
    /// filter rows themselves (Mango). `visit` gets each row and its
    /// document when `include_docs` (None when missing or deleted); it
    /// returns false to stop.
    pub fn each_row(
        &self,
        visit: &mut dyn FnMut(RowValue, Option<DocRead>) -> Result<bool>,
    ) -> Result<()> {
        check_range(self.args, self.collation())?;
        self.selected_rows(&ranges(self), &mut |row| {
            let doc = if self.args.include_docs {
                let opts = GetOptions {
                    conflicts: self.args.conflicts,
                    ..GetOptions::default()
                };
                match self.docs.get(&row.id, &opts) {
                    Ok(d) if !d.deleted => Some(d),
                    Ok(_) | Err(settee_db::Error::NotFound(_)) => None,
                    Err(e) => return Err(e.into()),
                }
            } else {
                None
            };
            visit(row, doc)
        })
    }

    /// Visits the rows of `ranges` in order after `skip`, at most `limit`
    /// of them; `visit` returns false to stop.
    fn selected_rows(
        &self,
        ranges: &[ByteRange],
        visit: &mut dyn FnMut(RowValue) -> Result<bool>,
    ) -> Result<()> {
        let mut skip = self.args.skip;
        let mut left = self.args.limit;
        let mut alive = true;
        for range in ranges.iter().filter(|r| !r.is_empty()) {
            if left == 0 || !alive {
                break;
            }
            self.scan(range, &mut |_, row| {
                if skip > 0 {
                    skip -= 1;
                    return Ok(true);
                }
                left -= 1;
                alive = visit(row)?;
                Ok(alive && left > 0)
            })?;
        }
        Ok(())
    }

    /// The document of a row for `include_docs`: the row's own, or the one
    /// its value links to (`{"_id": …}`, `{"_rev": …}` or both); `null`
    /// when it is missing or deleted, or the link is not an id (CouchDB
    /// takes an id as Erlang iodata: a string, or a list of strings).
    fn push_linked_doc(&self, buf: &mut String, row: &RowValue) -> Result<()> {
        let mut id = Some(row.id.clone());
        let mut rev = None;
        if row.value.starts_with('{') {
            if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(&row.value) {
                if let Some(linked) = m.get("_id") {
                    id = iodata(linked);
                }
                if let Some(r) = m.get("_rev") {
                    match r.as_str().and_then(|r| r.parse::<Rev>().ok()) {
                        Some(r) => rev = Some(r),
                        None => id = None,
                    }
                }
            }
        }
        let Some(id) = id else {
            buf.push_str("null");
            return Ok(());
        };
        let opts = GetOptions {
            rev,
            conflicts: self.args.conflicts,
            ..GetOptions::default()
        };
        match self.docs.get(&id, &opts) {
            Ok(d) if !d.deleted => {
                let a = self.args;
                let atts = AttView::from_flags(a.attachments, a.att_encoding_info);
                let extras = Extras {
                    atts,
                    ..Extras::default()
                };
                push_doc_blobs(buf, &d, extras, self.blobs)?
            }
            Ok(_) | Err(settee_db::Error::NotFound(_)) => buf.push_str("null"),
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    fn run_reduce(&self, out: &mut dyn Out) -> Result<()> {
        let spec = &self.index.spec;
        let view = &spec.views[usize::from(self.view)];
        let reduce = view
            .reduce
            .clone()
            .ok_or_else(|| ViewError::QueryParse("Reduce is invalid for map-only views.".into()))?;
        let level = match self.args.group_level() {
            None => GroupLevel::Level(0),
            Some(None) => GroupLevel::Exact,
            Some(Some(n)) => GroupLevel::Level(usize::try_from(n).unwrap_or(usize::MAX)),
        };
        let buf = out.buf();
        buf.push('{');
        self.push_update_seq(buf);
        buf.push_str("\"rows\":[");
        let mut w = GroupWriter {
            reducer: Reducer {
                reduce,
                js: self.js,
                spec,
                view_name: &view.name,
            },
            skip: self.args.skip,
            left: self.args.limit,
            first: true,
            alive: true,
        };
        for range in ranges(self).into_iter().filter(|r| !r.is_empty()) {
            let lo = range.lower.clone().unwrap_or_default();
            let hi = range.upper.clone();
            if level == GroupLevel::Level(0) {
                if self.first_row(&lo, hi.as_deref(), false)?.is_some() {
                    w.group(self, out, Value::Null, &lo, hi.as_deref())?;
                }
            } else if self.args.descending {
                let mut cur = hi;
                while w.wants_more() {
                    let Some(key) = self.first_row(&lo, cur.as_deref(), true)? else {
                        break;
                    };
                    let g = self.within(group_range(&key, level, self.collation()));
                    let glo = max_bytes(g.lower.unwrap_or_default(), &lo);
                    let ghi = min_bytes(g.upper, cur.as_deref());
                    w.group(
                        self,
                        out,
                        group_output_key(&key, level),
                        &glo,
                        ghi.as_deref(),
                    )?;
                    if glo <= lo {
                        break;
                    }
                    cur = Some(glo);
                }
            } else {
                let mut cur = lo.clone();
                while w.wants_more() {
                    let Some(key) = self.first_row(&cur, hi.as_deref(), false)? else {
                        break;
                    };
                    let g = self.within(group_range(&key, level, self.collation()));
                    let glo = max_bytes(g.lower.unwrap_or_default(), &cur);
                    let ghi = min_bytes(g.upper, hi.as_deref());
                    w.group(
                        self,
                        out,
                        group_output_key(&key, level),
                        &glo,
                        ghi.as_deref(),
                    )?;
                    match ghi {
                        Some(next) => cur = next,
                        None => break,
                    }
                }
            }
            if !w.wants_more() {
                break;
            }
        }
        if w.alive {
            out.buf().push_str("\r\n]}");
        }
        Ok(())
    }

    /// The key of the first row in `[lo, hi)` (the last with `last`).
    fn first_row(&self, lo: &[u8], hi: Option<&[u8]>, last: bool) -> Result<Option<Value>> {
        let (from, to) = self.span(lo, hi);
        let mut found = None;
        let mut failure = None;
        self.snap.scan(&from, Some(&to), last, &mut |_, v| {
            match layout::decode::<RowValue>(v, "view row").and_then(|r| {
                serde_json::from_str(&r.key).map_err(|e| ViewError::Corrupt(e.to_string()))
            }) {
                Ok(k) => found = Some(k),
                Err(e) => failure = Some(e),
            }
            Ok(false)
        })?;
        match failure {
            Some(e) => Err(e),
            None => Ok(found),
        }
    }

    /// The partial reductions of the rows in `[lo, hi)`, in index order:
    /// the stored partial of each block inside the range, the rows of the
    /// others.
    fn partials(
        &self,
        reducer: &Reducer<'_>,
        lo: &[u8],
        hi: Option<&[u8]>,
    ) -> Result<Vec<Partial>> {
        let sig = &self.index.spec.signature;
        let mut out = Vec::new();
        for (start, end, rec) in blocks::overlapping(self.snap, sig, self.view, lo, hi)? {
            let inside_lo = start.as_slice() >= lo;
            let inside_hi = match (&end, hi) {
                (_, None) => true,
                (Some(e), Some(h)) => e.as_slice() <= h,
                (None, Some(_)) => false,
            };
            if inside_lo && inside_hi {
                if let Some(p) = &rec.partial {
                    let p =
                        Partial::from_bytes(p).map_err(|e| ViewError::Corrupt(e.to_string()))?;
                    out.push(p);
                    continue;
                }
            }
            let from = max_bytes(start, lo);
            let to = match (end, hi) {
                (Some(e), Some(h)) => Some(if e.as_slice() < h { e } else { h.to_vec() }),
                (Some(e), None) => Some(e),
                (None, h) => h.map(<[u8]>::to_vec),
            };
            self.reduce_rows_in(reducer, &from, to.as_deref(), &mut out)?;
        }
        Ok(out)
    }

    /// Reduces the rows of `[lo, hi)` in chunks of [`REDUCE_CHUNK`].
    fn reduce_rows_in(
        &self,
        reducer: &Reducer<'_>,
        lo: &[u8],
        hi: Option<&[u8]>,
        out: &mut Vec<Partial>,
    ) -> Result<()> {
        let (from, to) = self.span(lo, hi);
        let mut buf = Vec::new();
        let mut failure = None;
        self.snap.scan(&from, Some(&to), false, &mut |_, v| {
            let row = match blocks::decode_row(v) {
                Ok(r) => r,
                Err(e) => {
                    failure = Some(e);
                    return Ok(false);
                }
            };
            buf.push(row);
            if buf.len() >= REDUCE_CHUNK {
                match reducer.reduce_rows(&buf) {
                    Ok(p) => out.push(p),
                    Err(e) => {
                        failure = Some(e);
                        return Ok(false);
                    }
                }
                buf.clear();
            }
            Ok(true)
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        if !buf.is_empty() {
            out.push(reducer.reduce_rows(&buf)?);
        }
        Ok(())
    }
}

fn max_bytes(a: Vec<u8>, b: &[u8]) -> Vec<u8> {
    if a.as_slice() >= b {
        a
    } else {
        b.to_vec()
    }
}

/// The lower of two upper bounds (`None`: unbounded).
fn min_bytes(a: Option<Vec<u8>>, b: Option<&[u8]>) -> Option<Vec<u8>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if a.as_slice() <= b { a } else { b.to_vec() }),
        (Some(a), None) => Some(a),
        (None, b) => b.map(<[u8]>::to_vec),
    }
}

/// The rows of the group a row with `key` belongs to.
fn group_range(key: &Value, level: GroupLevel, collation: Collation) -> ByteRange {
    match (level, key) {
        (GroupLevel::Level(n), Value::Array(a)) if a.len() >= n => {
            array_prefix_range(&a[..n], collation)
        }
        _ => key_range(key, collation),
    }
}

/// Writes groups' rows, honouring `skip` and `limit`.
struct GroupWriter<'a> {
    reducer: Reducer<'a>,
    skip: u64,
    left: u64,
    first: bool,
    alive: bool,
}

impl GroupWriter<'_> {
    fn wants_more(&self) -> bool {
        self.left > 0 && self.alive
    }

    /// Reduces the rows of one group, `[lo, hi)`, and writes its row.
    fn group(
        &mut self,
        q: &Query<'_>,
        out: &mut dyn Out,
        key: Value,
        lo: &[u8],
        hi: Option<&[u8]>,
    ) -> Result<()> {
        if self.skip > 0 {
            self.skip -= 1;
            return Ok(());
        }
        if !self.wants_more() {
            return Ok(());
        }
        let value = q
            .partials(&self.reducer, lo, hi)
            .and_then(|p| self.reducer.finish(p));
        let buf = out.buf();
        buf.push_str(if self.first { "\r\n" } else { ",\r\n" });
        self.first = false;
        match value {
            Ok(value) => {
                buf.push_str("{\"key\":");
                buf.push_str(&key.to_string());
                buf.push_str(",\"value\":");
                buf.push_str(&value.to_string());
                buf.push('}');
            }
            // CouchDB reports an overflowing reduction in its row.
            Err(ViewError::Js(JsError::ReduceOverflow { reason })) => {
                buf.push_str("{\"key\":null,\"error\":\"reduce_overflow_error\",\"reason\":");
                push_str(buf, &reason);
                buf.push('}');
            }
            Err(e) => return Err(e),
        }
        self.left -= 1;
        self.alive = out.row_done();
        Ok(())
    }
}

/// A JSON value read as Erlang iodata: a string, or a list of them
/// (nested), concatenated; anything else is not an id.
fn iodata(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(a) => a.iter().map(iodata).collect(),
        _ => None,
    }
}

/// The key a group is shown with: none for one group of everything, the
/// first row's key (truncated to `n` elements for `group_level=n`).
fn group_output_key(key: &Value, level: GroupLevel) -> Value {
    match (level, key) {
        (GroupLevel::Level(0), _) => Value::Null,
        (GroupLevel::Level(n), Value::Array(a)) if a.len() > n => Value::Array(a[..n].to_vec()),
        _ => key.clone(),
    }
}
