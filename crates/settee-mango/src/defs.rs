//! Index definitions: the special `_all_docs` index, the `json` indexes
//! and the `text` indexes, stored as CouchDB stores them — views (json)
//! and `indexes` members (text: the definition as `index`, beside its
//! `analyzer`) of design documents with `"language": "query"` — so
//! replication carries them between Settee and CouchDB. Reading them from
//! design documents, and writing and deleting them.
//!
//! Invariants:
//! - A design document holds Mango indexes only if its language is
//!   `query`; each view whose `map` has `fields` is one json index, each
//!   `indexes` member whose `index` is an object one text index.
//! - Deleting a design document's last index deletes the design document.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use settee_core::doc::Doc;
use settee_db::json::{push_doc, Extras};
use settee_db::{Database, DocRead, GetOptions, IdRange};
use sha1::{Digest, Sha1};

use crate::erl::{term, Style};
use crate::error::{MangoError, Result};
use crate::request::{check_keys, sort, Dir};
use crate::select::normalize;

/// What kind of index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `_all_docs`.
    Special,
    Json,
    /// A Mango text index (on settee-search).
    Text,
}

/// One index.
#[derive(Debug, Clone)]
pub struct IndexDef {
    /// None for `_all_docs`.
    pub ddoc: Option<String>,
    pub name: String,
    pub kind: Kind,
    /// Indexed fields in key order, with the directions given.
    pub fields: Vec<(String, Dir)>,
    /// `partial_filter_selector` (None when empty).
    pub partial: Option<Value>,
    /// A partitioned index (its design document's, in a partitioned
    /// database): it serves queries of one partition only.
    pub partitioned: bool,
    /// A text index's definition as stored (`index` of its member).
    pub text_def: Option<Value>,
}

impl IndexDef {
    pub fn all_docs() -> IndexDef {
        IndexDef {
            ddoc: None,
            name: "_all_docs".into(),
            kind: Kind::Special,
            fields: vec![("_id".into(), Dir::Asc)],
            partial: None,
            partitioned: false,
            text_def: None,
        }
    }

    /// A text index's fields as `name:type` (None: all fields).
    pub fn text_columns(&self) -> Option<Vec<String>> {
        let def = self.text_def.as_ref()?;
        match def.get("fields") {
            Some(Value::Array(list)) if !list.is_empty() => Some(
                list.iter()
                    .filter_map(|f| {
                        let name = f.get("name")?.as_str()?;
                        let ty = f.get("type")?.as_str()?;
                        Some(format!("{name}:{ty}"))
                    })
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Whether a text index indexes array lengths.
    pub fn text_lengths(&self) -> bool {
        self.text_def
            .as_ref()
            .and_then(|d| d.get("index_array_lengths"))
            .and_then(Value::as_bool)
            .unwrap_or(true)
    }

    /// As `GET /db/_index` lists it.
    pub fn to_json(&self) -> Value {
        let fields: Vec<Value> = self
            .fields
            .iter()
            .map(|(f, d)| json!({ f.as_str(): d.as_str() }))
            .collect();
        let mut def = json!({ "fields": fields });
        if let Some(p) = &self.partial {
            def["partial_filter_selector"] = normalize(p);
        }
        match self.kind {
            Kind::Special => {
                json!({"ddoc": null, "name": self.name, "type": "special", "def": def})
            }
            Kind::Json => json!({
                "ddoc": self.ddoc, "name": self.name, "type": "json",
                "partitioned": self.partitioned, "def": def
            }),
            Kind::Text => json!({
                "ddoc": self.ddoc, "name": self.name, "type": "text",
                "partitioned": self.partitioned,
                "def": text_def_json(self.text_def.as_ref().unwrap_or(&Value::Null)),
            }),
        }
    }
}

/// A text index's definition as `GET /db/_index` shows it: `fields` as
/// `[{name: type}]` (`[]` for all fields), an empty
/// `partial_filter_selector` left out, the rest as stored.
fn text_def_json(def: &Value) -> Value {
    let mut out = Map::new();
    if let Value::Object(m) = def {
        for (k, v) in m {
            match k.as_str() {
                "fields" => {
                    let fields: Vec<Value> = v
                        .as_array()
                        .map(|list| {
                            list.iter()
                                .filter_map(|f| {
                                    let name = f.get("name")?.as_str()?;
                                    let ty = f.get("type")?.clone();
                                    Some(json!({ name: ty }))
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    out.insert(k.clone(), Value::Array(fields));
                }
                "partial_filter_selector" if v.as_object().is_some_and(Map::is_empty) => {}
                _ => {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
    }
    Value::Object(out)
}

/// The json indexes of one design document (JSON with `_id`) of a
/// database that is partitioned (`db_partitioned`) or not.
pub fn from_ddoc(ddoc: &Value, db_partitioned: bool) -> Vec<IndexDef> {
    let Some(id) = ddoc.get("_id").and_then(Value::as_str) else {
        return Vec::new();
    };
    if ddoc.get("language").and_then(Value::as_str) != Some("query") {
        return Vec::new();
    }
    let partitioned = db_partitioned
        && ddoc
            .pointer("/options/partitioned")
            .and_then(Value::as_bool)
            != Some(false);
    let mut out = Vec::new();
    if let Some(texts) = ddoc.get("indexes").and_then(Value::as_object) {
        for (name, member) in texts {
            let Some(def) = member.get("index").filter(|d| d.is_object()) else {
                continue;
            };
            let partial = ["partial_filter_selector", "selector"]
                .iter()
                .filter_map(|k| def.get(*k))
                .find(|p| p.as_object().is_some_and(|o| !o.is_empty()))
                .cloned();
            out.push(IndexDef {
                ddoc: Some(id.to_string()),
                name: name.clone(),
                kind: Kind::Text,
                fields: Vec::new(),
                partial,
                partitioned,
                text_def: Some(def.clone()),
            });
        }
    }
    let Some(views) = ddoc.get("views").and_then(Value::as_object) else {
        return out;
    };
    for (name, view) in views {
        let Some(map) = view.get("map").and_then(Value::as_object) else {
            continue;
        };
        let fields = match map.get("fields") {
            Some(Value::Object(f)) => f
                .iter()
                .map(|(k, d)| {
                    let dir = if d.as_str() == Some("desc") {
                        Dir::Desc
                    } else {
                        Dir::Asc
                    };
                    (k.clone(), dir)
                })
                .collect(),
            Some(v @ Value::Array(_)) => match sort(v) {
                Ok(f) => f,
                Err(_) => continue,
            },
            _ => continue,
        };
        let partial = match map.get("partial_filter_selector") {
            Some(Value::Object(p)) if !p.is_empty() => Some(Value::Object(p.clone())),
            _ => None,
        };
        out.push(IndexDef {
            ddoc: Some(id.to_string()),
            name: name.clone(),
            kind: Kind::Json,
            fields,
            partial,
            partitioned,
            text_def: None,
        });
    }
    out
}

/// Every index of a database: `_all_docs` first, then the json indexes by
/// design document id and name.
pub fn list(db: &Database) -> Result<Vec<IndexDef>> {
    let mut out = vec![IndexDef::all_docs()];
    for ddoc in design_docs(db)? {
        let mut defs = from_ddoc(&ddoc, db.partitioned());
        defs.sort_by(|a, b| a.name.cmp(&b.name));
        out.extend(defs);
    }
    Ok(out)
}

/// The database's design documents as JSON, by id.
fn design_docs(db: &Database) -> Result<Vec<Value>> {
    let reader = db.reader()?;
    let range = IdRange {
        start: Some("_design/".into()),
        end: Some("_design0".into()),
        inclusive_end: false,
        ..IdRange::default()
    };
    let mut out = Vec::new();
    let mut failed = None;
    reader.all_docs(&range, true, false, &mut |row| {
        if let Some(d) = &row.doc {
            match doc_value(d) {
                Ok(v) => out.push(v),
                Err(e) => {
                    failed = Some(e.to_string());
                    return false;
                }
            }
        }
        true
    })?;
    match failed {
        Some(e) => Err(MangoError::Server {
            error: "unknown_error",
            reason: format!("design document: {e}"),
        }),
        None => Ok(out),
    }
}

/// A document read, as JSON.
pub(crate) fn doc_value(d: &DocRead) -> Result<Value> {
    let mut text = String::new();
    push_doc(&mut text, d, Extras::default());
    serde_json::from_str(&text).map_err(|e| MangoError::Server {
        error: "unknown_error",
        reason: e.to_string(),
    })
}

/// A document as JSON, or None when missing or deleted.
fn read(db: &Database, id: &str) -> Result<Option<Value>> {
    match db.latest_reader()?.get(id, &GetOptions::default()) {
        Ok(d) if !d.deleted => doc_value(&d).map(Some),
        Ok(_) | Err(settee_db::Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn write(db: &Database, doc: Value) -> Result<()> {
    let doc = Doc::from_json(doc, String::new)
        .map_err(|e| MangoError::invalid("bad_request", e.to_string()))?;
    db.put(doc)?;
    Ok(())
}

/// What `POST /db/_index` asks.
#[derive(Debug, Clone)]
pub struct NewIndex {
    /// With its `_design/` prefix.
    pub ddoc: String,
    pub name: String,
    /// `fields` as given (strings and `{field: dir}`).
    pub fields_json: Value,
    pub fields: Vec<(String, Dir)>,
    pub partial: Value,
    /// Whether `partial_filter_selector` was given (it is then kept in
    /// `options.def` as given).
    pub partial_given: bool,
    /// `partitioned` as given (None: the database's kind).
    pub partitioned: Option<bool>,
    /// A text index: its definition as stored and its `analyzer`.
    pub text: Option<(Value, Value)>,
}

/// The members a `POST /db/_index` body may have.
const INDEX_KEYS: [&str; 6] = ["index", "ddoc", "name", "type", "partitioned", "w"];

impl NewIndex {
    pub fn parse(body: &Map<String, Value>) -> Result<NewIndex> {
        check_keys(body, &INDEX_KEYS)?;
        let index = body.get("index").ok_or_else(|| {
            MangoError::invalid("missing_required_key", "Missing required key: index")
        })?;
        let mut text = None;
        match body.get("type") {
            None => {}
            Some(Value::String(t)) if t == "json" => {}
            Some(Value::String(t)) if t == "text" => text = Some(crate::text_def::parse(index)?),
            Some(Value::String(t)) if t == "nouveau" => {
                return Err(MangoError::ServiceUnavailable(t.clone()))
            }
            Some(Value::String(t)) => {
                return Err(MangoError::invalid(
                    "invalid_index",
                    format!("Invalid type for index: {t}"),
                ))
            }
            Some(other) => {
                return Err(MangoError::invalid(
                    "invalid_string",
                    format!("Invalid string: {}", term(other, Style::Bytes)),
                ))
            }
        }
        if let Some((def, analyzer)) = text {
            let digest = {
                let mut h = Sha1::new();
                h.update(json!({"type": "text", "def": def}).to_string());
                hex::encode(h.finalize())
            };
            let (ddoc, name, partitioned) = common(body, &digest)?;
            return Ok(NewIndex {
                ddoc,
                name,
                fields_json: Value::Null,
                fields: Vec::new(),
                partial: json!({}),
                partial_given: false,
                partitioned,
                text: Some((def, analyzer)),
            });
        }
        let Value::Object(index) = index else {
            return Err(MangoError::invalid(
                "invalid_index",
                format!(
                    "JSON indexes must be an object, not: {}",
                    term(index, Style::Bytes)
                ),
            ));
        };
        // A json index's definition takes these members only.
        check_keys(index, &["fields", "partial_filter_selector"])?;
        let fields_json = index
            .get("fields")
            .ok_or_else(|| {
                MangoError::invalid("missing_required_key", "Missing required key: fields")
            })?
            .clone();
        let fields = sort(&fields_json)?;
        if fields.windows(2).any(|w| w[0].1 != w[1].1) {
            return Err(MangoError::invalid(
                "unsupported_mixed_sort",
                "Sorts currently only support a single direction for all fields.",
            ));
        }
        let partial = match index.get("partial_filter_selector") {
            None => json!({}),
            Some(p @ Value::Object(_)) => {
                settee_core::selector::Selector::parse(p)
                    .map_err(crate::request::selector_error)?;
                p.clone()
            }
            Some(other) => {
                return Err(MangoError::invalid(
                    "invalid_selector_json",
                    format!(
                        "Selector must be a JSON object, not: {}",
                        term(other, Style::Bytes)
                    ),
                ))
            }
        };
        let partial_given = index.contains_key("partial_filter_selector");
        let digest = {
            let mut h = Sha1::new();
            h.update(
                json!({"fields": fields_json, "partial_filter_selector": partial}).to_string(),
            );
            hex::encode(h.finalize())
        };
        let (ddoc, name, partitioned) = common(body, &digest)?;
        Ok(NewIndex {
            ddoc,
            name,
            fields_json,
            fields,
            partial,
            partial_given,
            partitioned,
            text: None,
        })
    }

    /// The view CouchDB writes for this index.
    fn view(&self) -> Value {
        let mut map_fields = Map::new();
        for (f, d) in &self.fields {
            map_fields.insert(f.clone(), Value::String(d.as_str().into()));
        }
        let mut def = json!({"fields": self.fields_json});
        let mut stored_partial = json!({});
        if self.partial_given {
            def["partial_filter_selector"] = self.partial.clone();
            if self.partial.as_object().is_some_and(|p| !p.is_empty()) {
                stored_partial = normalize(&self.partial);
            }
        }
        json!({
            "map": {"fields": map_fields, "partial_filter_selector": stored_partial},
            "reduce": "_count",
            "options": {"def": def}
        })
    }

    /// Writes the index into its design document; false when that exact
    /// index is there already.
    pub fn create(&self, db: &Database) -> Result<bool> {
        // A json index is a view; a text index an `indexes` member.
        let (section, view) = match &self.text {
            Some((def, analyzer)) => ("indexes", json!({"index": def, "analyzer": analyzer})),
            None => ("views", self.view()),
        };
        if self.partitioned == Some(true) && !db.partitioned() {
            // CouchDB's answer: its design document validation refuses
            // the option, and the index API reports that as a 500.
            return Err(MangoError::Server {
                error: "error_saving_ddoc",
                reason: "Unknown error while saving the design document: invalid_design_doc".into(),
            });
        }
        let doc = match read(db, &self.ddoc)? {
            None => {
                let mut doc = json!({"_id": self.ddoc, "language": "query", section: {self.name.as_str(): view}});
                if self.partitioned == Some(false) && db.partitioned() {
                    doc["options"] = json!({"partitioned": false});
                }
                doc
            }
            Some(mut doc) => {
                let lang = doc.get("language").cloned();
                if lang.as_ref().and_then(Value::as_str) != Some("query") {
                    let shown =
                        lang.map_or_else(|| "false".to_string(), |l| term(&l, Style::Bytes));
                    return Err(MangoError::invalid(
                        "invalid_ddoc_lang",
                        format!("Existing design doc has an invalid language: {shown}"),
                    ));
                }
                if doc.pointer(&format!("/{section}/{}", pointer_escape(&self.name))) == Some(&view)
                {
                    return Ok(false);
                }
                if !doc.get(section).is_some_and(Value::is_object) {
                    doc[section] = json!({});
                }
                doc[section][self.name.as_str()] = view;
                doc
            }
        };
        write(db, doc)?;
        Ok(true)
    }
}

/// `ddoc`, `name` (defaults from the definition's digest) and
/// `partitioned` of a `POST /db/_index` body.
fn common(body: &Map<String, Value>, digest: &str) -> Result<(String, String, Option<bool>)> {
    let string = |k: &str| -> Result<Option<String>> {
        match body.get(k) {
            None => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Err(MangoError::invalid(
                "invalid_empty_string",
                "Index name or ddoc cannot be empty string",
            )),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(MangoError::invalid(
                "invalid_string",
                format!("Invalid string: {}", term(other, Style::Bytes)),
            )),
        }
    };
    let ddoc = string("ddoc")?;
    let name = string("name")?;
    let partitioned = match body.get("partitioned") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        // CouchDB's own failure (500, its option parser's term).
        Some(other) => {
            return Err(MangoError::Server {
                error: "unknown_error",
                reason: format!(
                    "Unknown Error: mango_opts :: {{invalid_partitioned_value,{}}}",
                    term(other, Style::Bytes)
                ),
            })
        }
    };
    let ddoc = match ddoc {
        Some(d) if d.starts_with("_design/") => d,
        Some(d) => format!("_design/{d}"),
        None => format!("_design/{digest}"),
    };
    Ok((
        ddoc,
        name.unwrap_or_else(|| digest.to_string()),
        partitioned,
    ))
}

fn pointer_escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// `DELETE /db/_index/{ddoc}/{json|text}/{name}`.
pub fn delete(db: &Database, ddoc: &str, kind: Kind, name: &str) -> Result<()> {
    let ddoc = if ddoc.starts_with("_design/") {
        ddoc.to_string()
    } else {
        format!("_design/{ddoc}")
    };
    let missing = || MangoError::NotFound("missing".into());
    let mut doc = read(db, &ddoc)?.ok_or_else(missing)?;
    if !from_ddoc(&doc, false)
        .iter()
        .any(|d| d.name == name && d.kind == kind)
    {
        return Err(missing());
    }
    let section = if kind == Kind::Text {
        "indexes"
    } else {
        "views"
    };
    let members = doc
        .get_mut(section)
        .and_then(Value::as_object_mut)
        .ok_or_else(missing)?;
    members.remove(name);
    if members.is_empty() {
        if let Some(m) = doc.as_object_mut() {
            m.remove(section);
        }
    }
    let left = |k: &str| {
        doc.get(k)
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty())
    };
    if !left("views") && !left("indexes") {
        doc["_deleted"] = Value::Bool(true);
    }
    write(db, doc)
}

/// `POST /db/_index/_bulk_delete`: every json and text index of each design
/// document; `(deleted, failed)` ids, as CouchDB lists them.
pub fn bulk_delete(db: &Database, ids: &[String]) -> Result<(Vec<String>, Vec<String>)> {
    let (mut ok, mut failed) = (Vec::new(), Vec::new());
    for id in ids {
        match read(db, id)? {
            Some(mut doc) if !from_ddoc(&doc, false).is_empty() => {
                doc["_deleted"] = Value::Bool(true);
                match write(db, doc) {
                    Ok(()) => ok.push(id.clone()),
                    Err(_) => failed.push(id.clone()),
                }
            }
            _ => failed.push(id.clone()),
        }
    }
    ok.reverse();
    Ok((ok, failed))
}

/// Design documents and their indexes, for lookups by `use_index`.
pub fn by_ddoc(defs: &[IndexDef]) -> BTreeMap<&str, Vec<&IndexDef>> {
    let mut m: BTreeMap<&str, Vec<&IndexDef>> = BTreeMap::new();
    for d in defs {
        if let Some(dd) = &d.ddoc {
            m.entry(dd.as_str()).or_default().push(d);
        }
    }
    m
}
