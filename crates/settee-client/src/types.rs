//! Wire shapes of CouchDB answers, as far as the tools need them. Unknown
//! fields are ignored; documents stay raw JSON.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// `GET /db`.
#[derive(Debug, Clone, Deserialize)]
pub struct DbInfo {
    #[serde(default)]
    pub db_name: String,
    #[serde(default)]
    pub doc_count: u64,
    #[serde(default)]
    pub doc_del_count: u64,
    /// A number (Settee, CouchDB 1.x, PouchDB) or an opaque string (CouchDB 2+).
    #[serde(default)]
    pub update_seq: Value,
}

/// `GET /db/_all_docs`.
#[derive(Debug, Deserialize)]
pub struct AllDocsPage {
    #[serde(default)]
    pub total_rows: Option<u64>,
    pub rows: Vec<AllDocsRow>,
}

#[derive(Debug, Deserialize)]
pub struct AllDocsRow {
    pub id: String,
    #[serde(default)]
    pub value: Option<RowValue>,
    /// With `include_docs=true`.
    #[serde(default)]
    pub doc: Option<Box<RawValue>>,
}

#[derive(Debug, Deserialize)]
pub struct RowValue {
    pub rev: String,
}

/// `GET /db/_changes` (normal or longpoll feed).
#[derive(Debug, Deserialize)]
pub struct ChangesPage {
    pub results: Vec<Change>,
    pub last_seq: Value,
    #[serde(default)]
    pub pending: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub struct Change {
    pub seq: Value,
    pub id: String,
    /// The winning revision, or every leaf with `style=all_docs`.
    pub changes: Vec<ChangeRev>,
    #[serde(default)]
    pub deleted: bool,
    #[serde(default)]
    pub doc: Option<Box<RawValue>>,
}

#[derive(Debug, Deserialize)]
pub struct ChangeRev {
    pub rev: String,
}

/// `POST /db/_bulk_get`.
#[derive(Debug, Deserialize)]
pub struct BulkGetResponse {
    pub results: Vec<BulkGetResult>,
}

#[derive(Debug, Deserialize)]
pub struct BulkGetResult {
    #[serde(default)]
    pub id: Option<String>,
    pub docs: Vec<BulkGetDoc>,
}

/// One revision asked of `_bulk_get`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BulkGetItem {
    pub id: String,
    pub rev: String,
    /// Revisions the reader has: attachments up to them come as stubs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub atts_since: Vec<String>,
}

/// One document of a `_revs_diff` answer: the revisions missing, and the
/// ones the server has that may be their ancestors.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RevsDiff {
    #[serde(default)]
    pub missing: Vec<String>,
    #[serde(default)]
    pub possible_ancestors: Vec<String>,
}

/// Either `{"ok": doc}` or `{"error": {...}}`.
#[derive(Debug, Deserialize)]
pub struct BulkGetDoc {
    #[serde(default)]
    pub ok: Option<Box<RawValue>>,
    #[serde(default)]
    pub error: Option<Value>,
}

/// One element of a `_bulk_docs` answer.
#[derive(Debug, Clone, Deserialize)]
pub struct BulkDocsResult {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub rev: Option<String>,
    #[serde(default)]
    pub ok: Option<bool>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

impl BulkDocsResult {
    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }
}
