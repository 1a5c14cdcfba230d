//! Replication checkpoints as CouchDB keeps them: the document
//! `_local/{base replication id}` on both the source and the target, with
//! the last session's id, the source sequence reached, and the history of
//! sessions (newest first, at most [`HISTORY_MAX`] entries).
//!
//! A replication resumes from the sequence both ends agree on: the
//! source's `source_last_seq` when both documents name the same session,
//! else the `recorded_seq` of the newest session found in both histories,
//! else from the start. So a checkpoint written by CouchDB's replicator is
//! resumed by Settee's and the other way round.
//!
//! Invariant: a checkpoint records a sequence only after every change up
//! to it was written to the target (the job calls [`Log::record`] after a
//! page's `_bulk_docs` answered).

use serde_json::{json, Map, Value};
use settee_client::Db;

use crate::RepError;

/// History entries kept in a checkpoint document.
pub const HISTORY_MAX: usize = 50;

/// Counters of one session, as CouchDB names them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub missing_checked: u64,
    pub missing_found: u64,
    pub docs_read: u64,
    pub docs_written: u64,
    pub doc_write_failures: u64,
    pub bulk_get_docs: u64,
    pub bulk_get_attempts: u64,
}

impl Stats {
    /// Counts a page read from the source, and the sink's totals since
    /// the counts `before` (the session resumed): CouchDB counts every
    /// revision read as one `_bulk_get` attempt and document.
    pub fn count_page(
        &mut self,
        page: &crate::read::LeafPage,
        before: &Stats,
        sink: &crate::write::Sink,
    ) {
        let read = (page.docs.len() + page.streamed.len()) as u64;
        self.missing_checked += page.missing_checked as u64;
        self.missing_found += page.missing_found as u64;
        self.docs_read += read;
        self.bulk_get_docs += read;
        self.bulk_get_attempts += read;
        self.docs_written = before.docs_written + sink.written;
        self.doc_write_failures = before.doc_write_failures + sink.failed;
    }

    pub fn to_json(&self, into: &mut Map<String, Value>) {
        into.insert("missing_checked".into(), self.missing_checked.into());
        into.insert("missing_found".into(), self.missing_found.into());
        into.insert("docs_read".into(), self.docs_read.into());
        into.insert("docs_written".into(), self.docs_written.into());
        into.insert("doc_write_failures".into(), self.doc_write_failures.into());
        into.insert("bulk_get_docs".into(), self.bulk_get_docs.into());
        into.insert("bulk_get_attempts".into(), self.bulk_get_attempts.into());
    }
}

/// The two checkpoint documents of a replication and this session's state.
#[derive(Debug)]
pub struct Log {
    pub id: String,
    pub session_id: String,
    source_rev: Option<String>,
    target_rev: Option<String>,
    /// The history carried over from the checkpoint resumed.
    history: Vec<Value>,
    pub start_time: String,
    /// Where this session started.
    pub start_seq: Value,
    /// The last sequence recorded (both ends), if any this session.
    pub recorded_seq: Option<Value>,
    /// The last document written, for the answer of a replication that
    /// had nothing to do (`no_changes`).
    pub last_doc: Option<Value>,
    /// The counts of the session resumed (CouchDB's go on from them).
    pub resumed: Stats,
}

fn rev_of(doc: &Option<Value>) -> Option<String> {
    doc.as_ref()
        .and_then(|d| d.get("_rev"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn session(doc: &Value) -> Option<&str> {
    doc.get("session_id").and_then(Value::as_str)
}

fn history(doc: &Value) -> Vec<Value> {
    doc.get("history")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

impl Stats {
    /// The counts of a history entry.
    pub fn from_entry(e: &Value) -> Stats {
        let n = |k: &str| e.get(k).and_then(Value::as_u64).unwrap_or(0);
        Stats {
            missing_checked: n("missing_checked"),
            missing_found: n("missing_found"),
            docs_read: n("docs_read"),
            docs_written: n("docs_written"),
            doc_write_failures: n("doc_write_failures"),
            bulk_get_docs: n("bulk_get_docs"),
            bulk_get_attempts: n("bulk_get_attempts"),
        }
    }
}

/// Where two checkpoint documents agree: the sequence to start from and
/// the history to continue (its first entry is the session resumed).
pub fn compare(src: &Value, dst: &Value) -> (Value, Vec<Value>) {
    if let (Some(a), Some(b)) = (session(src), session(dst)) {
        if a == b {
            let seq = src.get("source_last_seq").cloned().unwrap_or(json!(0));
            return (seq, history(src));
        }
    }
    let dst_hist = history(dst);
    let src_hist = history(src);
    for (i, entry) in src_hist.iter().enumerate() {
        let Some(sid) = session(entry) else { continue };
        if dst_hist.iter().any(|e| session(e) == Some(sid)) {
            let seq = entry.get("recorded_seq").cloned().unwrap_or(json!(0));
            return (seq, src_hist[i..].to_vec());
        }
    }
    (json!(0), vec![])
}

/// A new session id: 32 random hex digits, as CouchDB's.
pub fn new_session_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

pub fn http_date() -> String {
    httpdate::fmt_http_date(std::time::SystemTime::now())
}

impl Log {
    /// Reads both checkpoint documents and decides where to start
    /// (`use_checkpoints: false` starts from the beginning and records
    /// nothing).
    pub async fn load(
        src: &Db,
        dst: &Db,
        id: &str,
        use_checkpoints: bool,
    ) -> Result<Log, RepError> {
        let (s, d) = if use_checkpoints {
            let s = src
                .get_local(id)
                .await
                .map_err(|e| RepError::from_client(e, src))?;
            let d = dst
                .get_local(id)
                .await
                .map_err(|e| RepError::from_client(e, dst))?;
            (s, d)
        } else {
            (None, None)
        };
        let (start_seq, history) = match (&s, &d) {
            (Some(s), Some(d)) => compare(s, d),
            _ => (json!(0), vec![]),
        };
        let resumed = history.first().map(Stats::from_entry).unwrap_or_default();
        Ok(Log {
            resumed,
            id: id.to_string(),
            session_id: new_session_id(),
            source_rev: rev_of(&s),
            target_rev: rev_of(&d),
            last_doc: s.clone(),
            history,
            start_time: http_date(),
            start_seq,
            recorded_seq: None,
        })
    }

    /// This session's history entry, as of now.
    pub fn entry(&self, last_seq: &Value, stats: &Stats) -> Value {
        let mut e = Map::new();
        e.insert("session_id".into(), json!(self.session_id));
        e.insert("start_time".into(), json!(self.start_time));
        e.insert("end_time".into(), json!(http_date()));
        e.insert("start_last_seq".into(), self.start_seq.clone());
        e.insert("end_last_seq".into(), last_seq.clone());
        e.insert("recorded_seq".into(), last_seq.clone());
        stats.to_json(&mut e);
        Value::Object(e)
    }

    /// The checkpoint document for `last_seq` (without `_id`/`_rev`).
    pub fn document(&self, last_seq: &Value, stats: &Stats) -> Value {
        let mut hist = vec![self.entry(last_seq, stats)];
        hist.extend(self.history.iter().take(HISTORY_MAX - 1).cloned());
        json!({
            "session_id": self.session_id,
            "source_last_seq": last_seq,
            "replication_id_version": 4,
            "history": hist,
        })
    }

    /// Records `last_seq` on both ends (target first: a source checkpoint
    /// never runs ahead of the target's).
    pub async fn record(
        &mut self,
        src: &Db,
        dst: &Db,
        last_seq: &Value,
        stats: &Stats,
    ) -> Result<(), RepError> {
        let doc = self.document(last_seq, stats);
        self.target_rev = put(dst, &self.id, &doc, self.target_rev.take()).await?;
        self.source_rev = match put(src, &self.id, &doc, self.source_rev.take()).await {
            Ok(r) => r,
            // A source the replicator may only read keeps no checkpoint;
            // the next run compares and starts over, as CouchDB would.
            Err(RepError::Unauthorized(reason)) => {
                tracing::warn!(reason, "cannot write the checkpoint on the source");
                None
            }
            Err(e) => return Err(e),
        };
        self.recorded_seq = Some(last_seq.clone());
        self.last_doc = Some(doc);
        Ok(())
    }
}

/// PUTs a `_local` document with its current rev, taking the rev found
/// on a conflict (another writer of the same checkpoint) once.
async fn put(
    db: &Db,
    id: &str,
    doc: &Value,
    rev: Option<String>,
) -> Result<Option<String>, RepError> {
    let mut rev = rev;
    for attempt in 0..2 {
        let mut d = doc.clone();
        if let Some(r) = &rev {
            d["_rev"] = json!(r);
        }
        match db.put_local(id, &d).await {
            Ok(r) => return Ok(Some(r)),
            Err(e) if e.status() == Some(409) && attempt == 0 => {
                let cur = db
                    .get_local(id)
                    .await
                    .map_err(|e| RepError::from_client(e, db))?;
                rev = rev_of(&cur);
            }
            Err(e) => return Err(RepError::from_client(e, db)),
        }
    }
    Err(RepError::Failed(format!(
        "checkpoint_commit_failure: the checkpoint on {} keeps conflicting",
        db.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_session_resumes_from_the_source_seq() {
        let a = json!({"session_id": "s2", "source_last_seq": "9-x", "history": [{"session_id": "s2", "recorded_seq": "9-x"}]});
        assert_eq!(compare(&a, &a).0, json!("9-x"));
    }

    #[test]
    fn common_history_resumes_from_its_recorded_seq() {
        let src = json!({"session_id": "s3", "source_last_seq": 12, "history": [
            {"session_id": "s3", "recorded_seq": 12},
            {"session_id": "s1", "recorded_seq": 5}]});
        let dst = json!({"session_id": "s2", "source_last_seq": 8, "history": [
            {"session_id": "s2", "recorded_seq": 8},
            {"session_id": "s1", "recorded_seq": 5}]});
        let (seq, hist) = compare(&src, &dst);
        assert_eq!(seq, json!(5));
        assert_eq!(hist.len(), 1);
        let other = json!({"session_id": "z", "history": [{"session_id": "z", "recorded_seq": 3}]});
        assert_eq!(compare(&src, &other).0, json!(0));
    }

    #[test]
    fn history_is_bounded() {
        let mut log = Log {
            id: "x".into(),
            session_id: new_session_id(),
            source_rev: None,
            target_rev: None,
            history: vec![json!({"session_id": "old"}); 80],
            start_time: http_date(),
            start_seq: json!(0),
            recorded_seq: None,
            last_doc: None,
            resumed: Stats::default(),
        };
        let doc = log.document(&json!(3), &Stats::default());
        assert_eq!(doc["history"].as_array().map(Vec::len), Some(HISTORY_MAX));
        assert_eq!(doc["history"][0]["session_id"], json!(log.session_id));
        assert_eq!(log.session_id.len(), 32);
        log.recorded_seq = Some(json!(3));
    }
}
