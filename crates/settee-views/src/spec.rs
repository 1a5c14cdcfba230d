//! What a design document asks to be indexed: its views (map and reduce),
//! `views.lib`, the options that change rows, and the signature naming the
//! index.
//!
//! Invariants:
//! - The signature is a 128-bit hash of a canonical text of exactly what
//!   determines the index's rows and reductions: the language, each view's
//!   map and reduce (by view name, sorted), `views.lib`, and the options
//!   `include_design`, `local_seq` and `collation`. Two design documents
//!   with equal signatures share one index; any change to those parts
//!   gives a new signature (and a new index); other changes (another
//!   member, the `_rev`) do not.
//! - Views are numbered by their position in name order; rows are stored
//!   under that number, which the signature fixes.

use serde_json::{Map, Value};
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
    pub map: String,
    pub reduce: Option<Reduce>,
    /// The reduce source as written (for `_info` and errors).
    pub reduce_source: Option<String>,
    /// The view's key order: its own `options.collation`, else the design
    /// document's.
    pub collation: Collation,
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
    pub signature: [u8; 16],
    /// The design document as the JavaScript engine runs it: `_id`,
    /// `language` and `views` only.
    pub js: DesignDoc,
}

impl IndexSpec {
    /// The index of a design document (its JSON, with `_id`). A design
    /// document without views has an index with no views.
    pub fn from_ddoc(ddoc: &Value) -> Result<IndexSpec, ViewError> {
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
        let mut names: Vec<&String> = views_obj.keys().filter(|n| *n != "lib").collect();
        names.sort();
        let mut views = Vec::with_capacity(names.len());
        let mut js_views = Map::new();
        for name in names {
            let v = views_obj[name.as_str()]
                .as_object()
                .ok_or_else(|| bad(&format!("View {name} must be an object")))?;
            let map = v
                .get("map")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(&format!("View {name} must have a map function")))?
                .to_string();
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
            let mut jv = Map::new();
            jv.insert("map".into(), Value::String(map.clone()));
            if let (Some(Reduce::Js), Some(r)) = (&reduce, &reduce_source) {
                jv.insert("reduce".into(), Value::String(r.clone()));
            }
            js_views.insert(name.clone(), Value::Object(jv));
            let view_options = v.get("options").and_then(Value::as_object);
            views.push(ViewDef {
                name: name.clone(),
                map,
                reduce,
                reduce_source,
                collation: collation_of(view_options).unwrap_or(ddoc_collation),
            });
        }
        if views.len() > usize::from(u16::MAX) {
            return Err(bad("too many views in one design document"));
        }
        let lib = views_obj.get("lib").cloned();
        if let Some(lib) = &lib {
            js_views.insert("lib".into(), lib.clone());
        }
        let flag = |k: &str| {
            options
                .and_then(|o| o.get(k))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let include_design = flag("include_design");
        let local_seq = flag("local_seq");
        let signature = signature(&language, &views, lib.as_ref(), include_design, local_seq);
        let mut js_doc = Map::new();
        js_doc.insert("_id".into(), Value::String(ddoc_id.clone()));
        js_doc.insert("language".into(), Value::String(language.clone()));
        js_doc.insert("views".into(), Value::Object(js_views));
        let js = DesignDoc::new(&Value::Object(js_doc)).map_err(ViewError::Js)?;
        Ok(IndexSpec {
            ddoc_id,
            language,
            views,
            include_design,
            local_seq,
            signature,
            js,
        })
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
/// map function (and JavaScript reduce function) compiles; an empty reduce
/// is a missing function. Design documents in another language are not
/// checked (their queries fail instead, as in CouchDB). Awaits the
/// JavaScript workers (never blocks the caller's thread).
pub async fn check_design_doc(js: &JsEngine, ddoc: &Value) -> Result<(), ViewError> {
    let language = ddoc.get("language").and_then(Value::as_str);
    if language.is_some_and(|l| l != "javascript") {
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
