//! What a design document asks to be indexed: its views (map and reduce),
//! `views.lib`, the options that change rows, and the signature naming the
//! index.
//!
//! Two languages are indexed:
//! - **JavaScript** (`language` absent or `"javascript"`): map and reduce
//!   functions run by `settee_js`.
//! - **Query** (`language: "query"`): CouchDB's Mango `"json"` indexes, as
//!   `POST /db/_index` stores them. Each view's `map` is an object, not a
//!   function:
//!   `{"fields": {"n": "asc", "m": "desc"}, "partial_filter_selector": {…}}`
//!   (`fields` may also be an array of names and `{name: direction}`
//!   objects; other members, like `options.def`, are ignored). It is
//!   mapped natively ([`QueryMap::key`]): a document has one row in the
//!   view when it has *every* field (a member present with `null` counts;
//!   `a.b` reaches into sub-objects, `a\.b` is the member `a.b`, see
//!   `settee_core::selector::field_value`) and matches the partial filter
//!   selector; the row's key is the array of the field values in field
//!   order (an array value is one value, not one row per element), its
//!   value `null`. Design documents are never indexed (as in CouchDB, even
//!   with `include_design`). The direction does not change row order; it is
//!   kept for the Mango planner ([`QueryField::desc`]). Reduces are
//!   built-ins only (Mango's is `_count`). The Mango planner finds what it
//!   needs through [`IndexSpec::is_query`], [`ViewDef::query`],
//!   [`QueryMap::field_names`] and [`QueryMap::partial_filter_selector`];
//!   it queries the view's rows with the ordinary view queries.
//!
//! Invariants:
//! - The signature is a 128-bit hash of a canonical text of exactly what
//!   determines the index's rows and reductions: the language, each view's
//!   map and reduce (by view name, sorted), `views.lib`, and the options
//!   `include_design`, `local_seq` and `collation`. Two design documents
//!   with equal signatures share one index; any change to those parts
//!   gives a new signature (and a new index); other changes (another
//!   member, the `_rev`) do not. A query-language view's map counts as its
//!   fields (names and directions, in order) and its partial filter
//!   selector as canonical JSON (members sorted; absent is `{}`), so
//!   `fields` written as an object or as an array name the same index.
//! - Views are numbered by their position in name order; rows are stored
//!   under that number, which the signature fixes.
//! - A query-language design document that cannot be indexed (no `fields`,
//!   a bad field name or partial filter selector, a JavaScript reduce) is
//!   refused with [`ViewError::InvalidDesignDoc`] when its index is asked
//!   for (CouchDB stores such documents and fails their queries with 500).

use serde_json::{Map, Value};
use settee_core::selector::{field_value, parse_field_path, Selector};
use settee_index::keycodec::Collation;
use settee_index::reduce::Builtin;
use settee_js::{DesignDoc, JsEngine, JsError};
use xxhash_rust::xxh3::xxh3_128;

use crate::error::ViewError;

/// A view's reduce function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reduce {
    Builtin(Builtin),
    /// JavaScript source (run by the engine under the view's name).
    Js,
}

/// One view of an index.
#[derive(Debug, Clone)]
pub struct ViewDef {
    pub name: String,
    /// The map function's source; for a query-language view, the canonical
    /// JSON of its [`QueryMap`] (what its signature covers).
    pub map: String,
    /// A query-language view's map (None for JavaScript).
    pub query: Option<QueryMap>,
    pub reduce: Option<Reduce>,
    /// The reduce source as written (for `_info` and errors).
    pub reduce_source: Option<String>,
    /// The view's key order: its own `options.collation`, else the design
    /// document's.
    pub collation: Collation,
}

impl ViewDef {
    /// A query-language view's map (None for a JavaScript view).
    pub fn query(&self) -> Option<&QueryMap> {
        self.query.as_ref()
    }
}

/// One indexed field of a query-language view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryField {
    /// The field as written: a Mango field name (`a.b`, `x\.y`).
    pub name: String,
    /// Its path segments (`settee_core::selector::parse_field_path`).
    pub path: Vec<String>,
    /// Whether its direction is `"desc"` (anything else is ascending).
    /// Rows are stored in ascending order whatever it is.
    pub desc: bool,
}

/// A query-language (Mango `"json"` index) view's map, run natively.
#[derive(Debug, Clone)]
pub struct QueryMap {
    /// The key's fields, in key order (`map.fields`' member order).
    pub fields: Vec<QueryField>,
    /// `map.partial_filter_selector` as written; `{}` when absent or
    /// `null`.
    partial_filter: Value,
    /// The partial filter parsed; None when it is empty (every document).
    filter: Option<Selector>,
}

impl QueryMap {
    /// Parses a view's `map` object; `Err` is the reason it cannot be
    /// indexed.
    pub fn parse(map: &Value) -> Result<QueryMap, String> {
        let obj = map
            .as_object()
            .ok_or("`map` must be an object in a query-language design document")?;
        let direction = |d: &Value| d.as_str() == Some("desc");
        let mut fields = Vec::new();
        let mut add = |name: &str, desc: bool| -> Result<(), String> {
            let path = parse_field_path(name).map_err(|e| e.to_string())?;
            fields.push(QueryField {
                name: name.to_string(),
                path,
                desc,
            });
            Ok(())
        };
        match obj.get("fields") {
            Some(Value::Object(f)) => {
                for (name, dir) in f {
                    add(name, direction(dir))?;
                }
            }
            Some(Value::Array(list)) => {
                for item in list {
                    match item {
                        Value::String(name) => add(name, false)?,
                        Value::Object(o) if o.len() == 1 => {
                            for (name, dir) in o {
                                add(name, direction(dir))?;
                            }
                        }
                        _ => {
                            return Err(format!(
                                "invalid index field {item}: a field name or {{\"name\": \"asc\"|\"desc\"}}"
                            ))
                        }
                    }
                }
            }
            None | Some(Value::Null) => return Err("`map` has no `fields`".into()),
            Some(_) => return Err("`fields` must be an object or an array".into()),
        }
        let partial_filter = match obj.get("partial_filter_selector") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(v) => v.clone(),
        };
        let filter = match &partial_filter {
            Value::Object(o) if o.is_empty() => None,
            v => Some(
                Selector::parse(v).map_err(|e| format!("invalid partial_filter_selector: {e}"))?,
            ),
        };
        Ok(QueryMap {
            fields,
            partial_filter,
            filter,
        })
    }

    /// The fields' names (dotted Mango field names), in key order.
    pub fn field_names(&self) -> Vec<&str> {
        self.fields.iter().map(|f| f.name.as_str()).collect()
    }

    /// The partial filter selector's JSON (`{}` when there is none).
    pub fn partial_filter_selector(&self) -> &Value {
        &self.partial_filter
    }

    /// Whether the view has a partial filter selector (a non-empty one).
    pub fn has_partial_filter(&self) -> bool {
        self.filter.is_some()
    }

    /// The key of a document's row (a JSON object as its map sees it,
    /// with `_id`), or None when the document has no row: it lacks a
    /// field or fails the partial filter. Design documents are left out
    /// by the caller.
    pub fn key(&self, doc: &Value) -> Option<Value> {
        let mut key = Vec::with_capacity(self.fields.len());
        for f in &self.fields {
            key.push(field_value(doc, &f.path)?.clone());
        }
        if let Some(filter) = &self.filter {
            if !filter.matches(doc) {
                return None;
            }
        }
        Some(Value::Array(key))
    }

    /// The canonical text the signature covers: the fields (name and
    /// direction, in order) and the partial filter with members sorted.
    fn canonical(&self) -> String {
        let fields: Vec<Value> = self
            .fields
            .iter()
            .map(|f| {
                let dir = if f.desc { "desc" } else { "asc" };
                Value::Array(vec![Value::String(f.name.clone()), dir.into()])
            })
            .collect();
        let mut out = String::from("{\"fields\":");
        out.push_str(&Value::Array(fields).to_string());
        out.push_str(",\"partial_filter_selector\":");
        canonical_json(&self.partial_filter, &mut out);
        out.push('}');
        out
    }
}

/// JSON text with every object's members sorted by name.
fn canonical_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut members: Vec<(&String, &Value)> = m.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        v => out.push_str(&v.to_string()),
    }
}

/// Everything an index of a design document is made of.
#[derive(Debug, Clone)]
pub struct IndexSpec {
    pub ddoc_id: String,
    pub language: String,
    /// In name order; a view's position is its number.
    pub views: Vec<ViewDef>,
    pub include_design: bool,
    pub local_seq: bool,
    /// A partitioned index (a design document of a partitioned database
    /// without `options.partitioned: false`): its rows are kept by
    /// partition (see `crate::layout`) and queried one partition at a time.
    pub partitioned: bool,
    pub signature: [u8; 16],
    /// The design document as the JavaScript engine runs it: `_id`,
    /// `language` and `views` only. For a query-language design document,
    /// one without views: nothing of it runs.
    pub js: DesignDoc,
}

impl IndexSpec {
    /// The index of a design document (its JSON, with `_id`). A design
    /// document without views has an index with no views.
    pub fn from_ddoc(ddoc: &Value) -> Result<IndexSpec, ViewError> {
        IndexSpec::from_ddoc_in(ddoc, false)
    }

    /// The index of a design document of a database that is partitioned
    /// (`db_partitioned`) or not: in a partitioned database a design
    /// document is partitioned unless its `options.partitioned` is false.
    pub fn from_ddoc_in(ddoc: &Value, db_partitioned: bool) -> Result<IndexSpec, ViewError> {
        let bad = |r: &str| ViewError::InvalidDesignDoc(r.to_string());
        let obj = ddoc
            .as_object()
            .ok_or_else(|| bad("design document must be an object"))?;
        let ddoc_id = obj
            .get("_id")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("design document without _id"))?
            .to_string();
        let language = match obj.get("language") {
            None | Some(Value::Null) => "javascript".to_string(),
            Some(Value::String(l)) => l.clone(),
            Some(_) => return Err(bad("`language` must be a string")),
        };
        let empty = Map::new();
        let views_obj = match obj.get("views") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(v)) => v,
            Some(_) => return Err(bad("`views` is not an object")),
        };
        let options = obj.get("options").and_then(Value::as_object);
        let collation_of = |o: Option<&Map<String, Value>>| match o.and_then(|o| o.get("collation"))
        {
            Some(Value::String(c)) if c == "raw" => Some(Collation::Raw),
            Some(_) => Some(Collation::Couch),
            None => None,
        };
        let ddoc_collation = collation_of(options).unwrap_or(Collation::Couch);
        let query = language == "query";
        let mut names: Vec<&String> = views_obj.keys().filter(|n| *n != "lib").collect();
        names.sort();
        let mut views = Vec::with_capacity(names.len());
        let mut js_views = Map::new();
        for name in names {
            let v = views_obj[name.as_str()]
                .as_object()
                .ok_or_else(|| bad(&format!("View {name} must be an object")))?;
            let (map, query_map) = if query {
                let raw = v
                    .get("map")
                    .ok_or_else(|| bad(&format!("View {name} must have a map function")))?;
                let q = QueryMap::parse(raw).map_err(|r| bad(&format!("View {name}: {r}")))?;
                (q.canonical(), Some(q))
            } else {
                let map = v
                    .get("map")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(&format!("View {name} must have a map function")))?;
                (map.to_string(), None)
            };
            let reduce_source = match v.get("reduce") {
                None | Some(Value::Null) => None,
                Some(Value::String(r)) => Some(r.clone()),
                Some(_) => return Err(bad(&format!("View {name} reduce must be a string"))),
            };
            let reduce = match &reduce_source {
                None => None,
                Some(r) if r.trim_start().starts_with('_') => Some(Reduce::Builtin(
                    Builtin::from_source(r.trim_start())
                        .map_err(|e| ViewError::InvalidDesignDoc(e.to_string()))?,
                )),
                Some(_) => Some(Reduce::Js),
            };
            if query && reduce == Some(Reduce::Js) {
                return Err(bad(&format!(
                    "View {name}: the reduce of a query-language view must be a built-in one (_count, _sum, _stats)"
                )));
            }
            if !query {
                let mut jv = Map::new();
                jv.insert("map".into(), Value::String(map.clone()));
                if let (Some(Reduce::Js), Some(r)) = (&reduce, &reduce_source) {
                    jv.insert("reduce".into(), Value::String(r.clone()));
                }
                js_views.insert(name.clone(), Value::Object(jv));
            }
            let view_options = v.get("options").and_then(Value::as_object);
            views.push(ViewDef {
                name: name.clone(),
                map,
                query: query_map,
                reduce,
                reduce_source,
                collation: collation_of(view_options).unwrap_or(ddoc_collation),
            });
        }
        if views.len() > usize::from(u16::MAX) {
            return Err(bad("too many views in one design document"));
        }
        // Query-language views have no use for `lib` (CouchDB fails them
        // when there is one; here it is ignored).
        let lib = views_obj.get("lib").filter(|_| !query).cloned();
        if let Some(lib) = &lib {
            js_views.insert("lib".into(), lib.clone());
        }
        let flag = |k: &str| {
            options
                .and_then(|o| o.get(k))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        // Mango never indexes design documents.
        let include_design = flag("include_design") && !query;
        let local_seq = flag("local_seq");
        let partitioned = db_partitioned
            && options
                .and_then(|o| o.get("partitioned"))
                .and_then(Value::as_bool)
                != Some(false);
        let mut signature = signature(&language, &views, lib.as_ref(), include_design, local_seq);
        if partitioned {
            // Another index than the same definition's global one (rows
            // kept by partition); global signatures stay as they were.
            signature = xxh3_128(&[&signature[..], b"|partitioned"].concat()).to_be_bytes();
        }
        let mut js_doc = Map::new();
        js_doc.insert("_id".into(), Value::String(ddoc_id.clone()));
        if !query {
            js_doc.insert("language".into(), Value::String(language.clone()));
        }
        js_doc.insert("views".into(), Value::Object(js_views));
        let js = DesignDoc::new(&Value::Object(js_doc)).map_err(ViewError::Js)?;
        Ok(IndexSpec {
            ddoc_id,
            language,
            views,
            include_design,
            local_seq,
            partitioned,
            signature,
            js,
        })
    }

    /// Whether this is a query-language design document (Mango `"json"`
    /// indexes, mapped natively; every view has a [`ViewDef::query`]).
    pub fn is_query(&self) -> bool {
        self.language == "query"
    }

    /// The view called `name`.
    pub fn view(&self, name: &str) -> Option<&ViewDef> {
        self.view_number(name)
            .and_then(|n| self.views.get(usize::from(n)))
    }

    /// The number of the view called `name`.
    pub fn view_number(&self, name: &str) -> Option<u16> {
        self.views
            .binary_search_by(|v| v.name.as_str().cmp(name))
            .ok()
            .and_then(|i| u16::try_from(i).ok())
    }

    /// The signature as CouchDB shows one: 32 hex digits.
    pub fn signature_hex(&self) -> String {
        hex::encode(self.signature)
    }

    /// The design document's name (its id without `_design/`).
    pub fn ddoc_name(&self) -> &str {
        self.ddoc_id
            .strip_prefix("_design/")
            .unwrap_or(&self.ddoc_id)
    }
}

/// CouchDB's check of a design document's views when it is saved: every
/// map function (and JavaScript or CoffeeScript reduce function) compiles; an empty reduce
/// is a missing function. Design documents in another language are not
/// checked (their queries fail instead, as in CouchDB; a query-language
/// one that cannot be indexed is refused by its queries with
/// `invalid_design_doc`, where CouchDB answers 500). Awaits the
/// JavaScript workers (never blocks the caller's thread).
pub async fn check_design_doc(js: &JsEngine, ddoc: &Value) -> Result<(), ViewError> {
    let language = ddoc.get("language").and_then(Value::as_str);
    if language.is_some_and(|l| l != "javascript" && l != "coffeescript") {
        return Ok(());
    }
    let spec = IndexSpec::from_ddoc(ddoc)?;
    for v in &spec.views {
        if v.reduce_source.as_deref() == Some("") {
            return Err(ViewError::NotFound("missing function".into()));
        }
        let failed = |kind: &str, e: JsError| match e {
            JsError::Compilation { reason } => ViewError::Js(JsError::Compilation {
                reason: format!(
                    "Compilation of the {kind} function in the '{}' view failed: {reason}",
                    v.name
                ),
            }),
            e => ViewError::Js(e),
        };
        js.compile_view_async(&spec.js, &v.name, false)
            .await
            .map_err(|e| failed("map", e))?;
        if v.reduce == Some(Reduce::Js) {
            js.compile_view_async(&spec.js, &v.name, true)
                .await
                .map_err(|e| failed("reduce", e))?;
        }
    }
    Ok(())
}

fn signature(
    language: &str,
    views: &[ViewDef],
    lib: Option<&Value>,
    include_design: bool,
    local_seq: bool,
) -> [u8; 16] {
    // A canonical text: fixed member order, views in name order, `lib` in
    // serde_json's (insertion) order, which is the stored document's.
    let mut text = String::new();
    let s = |v: &str| Value::String(v.to_string()).to_string();
    text.push_str(settee_core::collate::COLLATOR_VERSION);
    text.push('|');
    text.push_str(&s(language));
    for v in views {
        text.push('|');
        text.push_str(&s(&v.name));
        text.push(':');
        text.push_str(&s(&v.map));
        text.push(':');
        text.push_str(&v.reduce_source.as_deref().map(s).unwrap_or_default());
        text.push_str(if v.collation == Collation::Raw {
            ":raw"
        } else {
            ":"
        });
    }
    text.push('|');
    text.push_str(&lib.map(Value::to_string).unwrap_or_default());
    text.push_str(&format!("|{include_design}|{local_seq}"));
    xxh3_128(text.as_bytes()).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn signature_follows_what_changes_rows() {
        let a = json!({"_id": "_design/a", "views": {"v": {"map": "function(d){emit(1)}"}}});
        let b = json!({"_id": "_design/b", "_rev": "1-x", "other": 1,
            "views": {"v": {"map": "function(d){emit(1)}"}}});
        let c = json!({"_id": "_design/a", "views": {"v": {"map": "function(d){emit(2)}"}}});
        let d = json!({"_id": "_design/a", "options": {"collation": "raw"},
            "views": {"v": {"map": "function(d){emit(1)}"}}});
        let e = json!({"_id": "_design/a",
            "views": {"v": {"map": "function(d){emit(1)}", "options": {"collation": "raw"}}}});
        let sig = |v: &Value| IndexSpec::from_ddoc(v).unwrap().signature;
        assert_eq!(sig(&a), sig(&b));
        assert_ne!(sig(&a), sig(&c));
        assert_ne!(sig(&a), sig(&d));
        assert_eq!(sig(&d), sig(&e));
    }

    #[test]
    fn views_in_name_order_with_their_reduces() {
        let s = IndexSpec::from_ddoc(&json!({"_id": "_design/a", "views": {
            "z": {"map": "m", "reduce": "_sum"},
            "a": {"map": "m", "reduce": "function(k,v){return 1}"},
            "lib": {"x": "exports.y = 1"}
        }}))
        .unwrap();
        let names: Vec<&str> = s.views.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["a", "z"]);
        assert_eq!(s.views[0].reduce, Some(Reduce::Js));
        assert_eq!(s.views[1].reduce, Some(Reduce::Builtin(Builtin::Sum)));
        assert_eq!(s.view_number("z"), Some(1));
        assert_eq!(s.view_number("lib"), None);
    }

    #[test]
    fn javascript_signatures_do_not_change() {
        // Stored indexes are named by these: pinned.
        let a = json!({"_id": "_design/a", "views": {
            "v": {"map": "function(d){emit(1)}", "reduce": "_count"},
            "lib": {"x": "exports.y = 1"}}, "options": {"local_seq": true}});
        let spec = IndexSpec::from_ddoc(&a).unwrap();
        assert!(!spec.is_query());
        assert!(spec.views[0].query().is_none());
        // The canonical text, as it was before query-language views.
        let text = format!(
            "{}|\"javascript\"|\"v\":\"function(d){{emit(1)}}\":\"_count\":|{}|false|true",
            settee_core::collate::COLLATOR_VERSION,
            json!({"x": "exports.y = 1"})
        );
        assert_eq!(spec.signature, xxh3_128(text.as_bytes()).to_be_bytes());
    }

    fn mango(views: Value) -> Value {
        json!({"_id": "_design/i", "language": "query", "views": views})
    }

    #[test]
    fn query_views_are_parsed_with_their_fields_in_order() {
        let spec = IndexSpec::from_ddoc(&mango(json!({
            "n": {"map": {"fields": {"n": "asc", "a.b": "desc", "x\\.y": "asc"},
                          "partial_filter_selector": {"k": {"$gt": 0}}},
                  "reduce": "_count",
                  "options": {"def": {"fields": ["n", {"a.b": "desc"}, "x\\.y"]}}},
            "m": {"map": {"fields": {"z": "asc"}}, "reduce": "_count"},
            "lib": {"map": {"fields": {"n": "asc"}}}
        })))
        .unwrap();
        assert!(spec.is_query());
        assert!(!spec.include_design);
        let names: Vec<&str> = spec.views.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["m", "n"]);
        let q = spec.view("n").and_then(ViewDef::query).unwrap();
        assert_eq!(q.field_names(), ["n", "a.b", "x\\.y"]);
        assert_eq!(q.fields[1].path, ["a", "b"]);
        assert_eq!(q.fields[2].path, ["x.y"]);
        assert_eq!(
            q.fields.iter().map(|f| f.desc).collect::<Vec<_>>(),
            [false, true, false]
        );
        assert_eq!(q.partial_filter_selector(), &json!({"k": {"$gt": 0}}));
        assert!(q.has_partial_filter());
        assert_eq!(spec.views[1].reduce, Some(Reduce::Builtin(Builtin::Count)));
        let m = spec.view("m").and_then(ViewDef::query).unwrap();
        assert_eq!(m.partial_filter_selector(), &json!({}));
        assert!(!m.has_partial_filter());
        assert!(spec.view("lib").is_none());
    }

    #[test]
    fn query_keys_follow_mango_json_indexes() {
        let q = QueryMap::parse(&json!({"fields": {"n": "asc", "a.b": "asc", "x\\.y": "asc"}}))
            .unwrap();
        let key = |d: Value| q.key(&d);
        assert_eq!(
            key(json!({"_id": "d", "n": 1, "a": {"b": [1, 2]}, "x.y": {"z": 1}})),
            Some(json!([1, [1, 2], {"z": 1}]))
        );
        assert_eq!(
            key(json!({"n": null, "a": {"b": null}, "x.y": null})),
            Some(json!([null, null, null]))
        );
        for missing in [
            json!({"a": {"b": 1}, "x.y": 1}),
            json!({"n": 1, "a": {"c": 1}, "x.y": 1}),
            json!({"n": 1, "a": [{"b": 1}], "x.y": 1}),
            json!({"n": 1, "a": {"b": 1}, "x": {"y": 1}}),
            json!({"n": 1, "a": 5, "x.y": 1}),
        ] {
            assert_eq!(key(missing.clone()), None, "{missing}");
        }
        let filtered = QueryMap::parse(&json!({"fields": {"n": "asc"},
            "partial_filter_selector": {"k": {"$gt": 0}, "_id": {"$ne": "skip"}}}))
        .unwrap();
        assert_eq!(
            filtered.key(&json!({"_id": "a", "n": 1, "k": 1})),
            Some(json!([1]))
        );
        assert_eq!(filtered.key(&json!({"_id": "a", "n": 1, "k": 0})), None);
        assert_eq!(filtered.key(&json!({"_id": "a", "n": 1})), None);
        assert_eq!(filtered.key(&json!({"_id": "skip", "n": 1, "k": 1})), None);
        let none = QueryMap::parse(&json!({"fields": {}})).unwrap();
        assert_eq!(none.key(&json!({"_id": "a"})), Some(json!([])));
    }

    #[test]
    fn query_signatures_name_equal_definitions_alike() {
        let sig = |views: Value| IndexSpec::from_ddoc(&mango(views)).unwrap().signature;
        let base = sig(json!({"n": {"map": {"fields": {"a": "asc", "b": "asc"},
            "partial_filter_selector": {"x": 1, "y": {"$gt": 2}}}, "reduce": "_count",
            "options": {"def": {"fields": ["a", "b"]}}}}));
        // The same definition, written differently.
        assert_eq!(
            base,
            sig(json!({"n": {"map": {"fields": ["a", {"b": "asc"}],
                "partial_filter_selector": {"y": {"$gt": 2}, "x": 1}}, "reduce": "_count"}}))
        );
        let unfiltered = sig(json!({"n": {"map": {"fields": {"a": "asc"}}, "reduce": "_count"}}));
        assert_eq!(
            unfiltered,
            sig(
                json!({"n": {"map": {"fields": {"a": "asc"}, "partial_filter_selector": {}},
                "reduce": "_count"}})
            )
        );
        for other in [
            json!({"n": {"map": {"fields": {"b": "asc", "a": "asc"},
                "partial_filter_selector": {"x": 1, "y": {"$gt": 2}}}, "reduce": "_count"}}),
            json!({"n": {"map": {"fields": {"a": "asc", "b": "desc"},
                "partial_filter_selector": {"x": 1, "y": {"$gt": 2}}}, "reduce": "_count"}}),
            json!({"n": {"map": {"fields": {"a": "asc", "b": "asc"},
                "partial_filter_selector": {"x": 1, "y": {"$gt": 3}}}, "reduce": "_count"}}),
            json!({"m": {"map": {"fields": {"a": "asc", "b": "asc"},
                "partial_filter_selector": {"x": 1, "y": {"$gt": 2}}}, "reduce": "_count"}}),
        ] {
            assert_ne!(base, sig(other.clone()), "{other}");
        }
        // Not the signature of a JavaScript design document.
        let js = json!({"_id": "_design/i", "views": {"n": {"map": unfiltered_map(), "reduce": "_count"}}});
        assert_ne!(IndexSpec::from_ddoc(&js).unwrap().signature, unfiltered);
    }

    fn unfiltered_map() -> String {
        QueryMap::parse(&json!({"fields": {"a": "asc"}}))
            .unwrap()
            .canonical()
    }

    #[test]
    fn query_views_that_cannot_be_indexed_are_refused() {
        for (views, reason) in [
            (json!({"v": {"map": {}}}), "View v: `map` has no `fields`"),
            (json!({"v": {"map": {"fields": "x"}}}), "View v: `fields` must be an object or an array"),
            (json!({"v": {"map": "function(d){}"}}), "View v: `map` must be an object in a query-language design document"),
            (json!({"v": {"map": {"fields": {"a..b": "asc"}}}}), "View v: Invalid field name: a..b"),
            (json!({"v": {"map": {"fields": [1]}}}), "View v: invalid index field 1: a field name or {\"name\": \"asc\"|\"desc\"}"),
            (json!({"v": {"map": {"fields": {"a": "asc"}, "partial_filter_selector": {"$bogus": 1}}}}),
                "View v: invalid partial_filter_selector: Invalid operator: $bogus"),
            (json!({"v": {"map": {"fields": {"a": "asc"}, "partial_filter_selector": 3}}}),
                "View v: invalid partial_filter_selector: Selector must be a JSON object, not: 3"),
            (json!({"v": {"map": {"fields": {"a": "asc"}}, "reduce": "function(k, v){ return 1; }"}}),
                "View v: the reduce of a query-language view must be a built-in one (_count, _sum, _stats)"),
        ] {
            match IndexSpec::from_ddoc(&mango(views.clone())) {
                Err(ViewError::InvalidDesignDoc(r)) => assert_eq!(r, reason, "{views}"),
                other => panic!("{views}: {other:?}"),
            }
        }
    }

    #[test]
    fn bad_design_documents_are_refused() {
        for bad in [
            json!({"_id": "_design/a", "views": {"v": {}}}),
            json!({"_id": "_design/a", "views": {"v": {"map": "m", "reduce": "_nope"}}}),
            json!({"_id": "_design/a", "views": 3}),
        ] {
            assert!(IndexSpec::from_ddoc(&bad).is_err(), "{bad}");
        }
    }
}
