//! A stored document as much as a selector reads of it: only the top-level
//! members the selector names are built as JSON values, the rest of the
//! stored text is skipped unparsed into values. `_find` matches this
//! partial document first and builds the whole one only for documents
//! that match, so a scan that rejects most documents builds few trees.
//!
//! Invariant: a selector matches a document's partial form exactly when it
//! matches the whole document, because a selector's outcome depends only
//! on the members it names ([`crate::select::all_fields`]). Special members
//! other than `_id` and `_rev` (`_conflicts`, `_deleted`, …) are not in the
//! stored body: a selector naming one is matched on the whole document.

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};
use settee_core::selector::split_field_path;
use settee_db::DocRead;

use crate::defs::doc_value;
use crate::error::{MangoError, Result};
use crate::select::all_fields;

/// The top-level members a selector reads.
#[derive(Debug, Clone)]
pub struct Members {
    names: BTreeSet<String>,
    /// The selector names a member only the whole document has.
    whole: bool,
}

impl Members {
    /// The members the normalised selector `norm` names.
    pub fn of(norm: &Value) -> Members {
        let mut fields = BTreeSet::new();
        all_fields(norm, &mut fields);
        let mut names = BTreeSet::new();
        let mut whole = false;
        for f in fields {
            if let Some(first) = split_field_path(&f).into_iter().next() {
                whole |= first.starts_with('_') && first != "_id" && first != "_rev";
                names.insert(first);
            }
        }
        Members { names, whole }
    }

    /// `d` with only these members (the whole document when one of them
    /// is not in the stored body).
    pub fn of_doc(&self, d: &DocRead) -> Result<Value> {
        if self.whole {
            return doc_value(d);
        }
        let mut out = Map::new();
        if self.names.contains("_id") {
            out.insert("_id".into(), Value::String(d.id.clone()));
        }
        if self.names.contains("_rev") {
            out.insert("_rev".into(), Value::String(d.rev.to_string()));
        }
        let mut de = serde_json::Deserializer::from_str(d.body.as_str());
        Picker {
            names: &self.names,
            out: &mut out,
        }
        .deserialize(&mut de)
        .map_err(|e| MangoError::Server {
            error: "unknown_error",
            reason: e.to_string(),
        })?;
        Ok(Value::Object(out))
    }
}

/// Visits a JSON object, keeping the members named.
struct Picker<'a> {
    names: &'a BTreeSet<String>,
    out: &'a mut Map<String, Value>,
}

impl<'de> DeserializeSeed<'de> for Picker<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> std::result::Result<(), D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Picker<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        while let Some(name) = map.next_key_seed(Wanted(self.names))? {
            match name {
                Some(name) => {
                    let v: Value = map.next_value()?;
                    self.out.insert(name, v);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// A member name: `Some` (owned) when it is one of the names kept.
struct Wanted<'a>(&'a BTreeSet<String>);

impl<'de> DeserializeSeed<'de> for Wanted<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(
        self,
        de: D,
    ) -> std::result::Result<Option<String>, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Wanted<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<Option<String>, E> {
        Ok(self.0.contains(s).then(|| s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use settee_core::doc::Doc;
    use settee_core::selector::Selector;

    use crate::select::normalize;

    fn stored(doc: &Value) -> DocRead {
        let d = Doc::from_json(doc.clone(), String::new).expect("a document");
        DocRead {
            id: d.id.clone(),
            rev: "1-0123456789abcdef0123456789abcdef".parse().expect("a rev"),
            deleted: false,
            body: d.body.clone(),
            local_seq: 1,
            revisions: None,
            revs_info: None,
            conflicts: Vec::new(),
            deleted_conflicts: Vec::new(),
        }
    }

    #[test]
    fn keeps_only_the_members_named() {
        let d = stored(&json!({"_id": "x", "a": {"b": [1, 2]}, "c": "skip", "d\"e": 3, "f": null}));
        let m = Members::of(&normalize(
            &json!({"a.b": {"$size": 2}, "$or": [{"d\"e": 3}, {"_id": "y"}]}),
        ));
        assert_eq!(
            m.of_doc(&d).unwrap(),
            json!({"_id": "x", "a": {"b": [1, 2]}, "d\"e": 3})
        );
        let conflicts = Members::of(&normalize(&json!({"_conflicts": {"$exists": false}})));
        assert_eq!(conflicts.of_doc(&d).unwrap()["c"], "skip", "whole");
    }

    #[test]
    fn a_selector_matches_the_partial_document_as_the_whole() {
        let docs = [
            json!({"_id": "a", "n": 1, "t": "x", "o": {"p": [1, {"q": 2}]}}),
            json!({"_id": "b", "n": "1", "tags": ["x", "y"], "e": {}}),
            json!({"_id": "c"}),
            json!({"_id": "d", "n": null, "t": ["x"], "o.p": 4}),
        ];
        let selectors = [
            json!({}),
            json!({"n": 1}),
            json!({"n": {"$exists": false}}),
            json!({"$nor": [{"t": "x"}, {"n": {"$type": "string"}}]}),
            json!({"o": {"p": {"$elemMatch": {"q": 2}}}}),
            json!({"o\\.p": 4}),
            json!({"tags": {"$all": ["y"]}, "e": {"$eq": {}}}),
            json!({"_id": {"$gt": "b"}, "t": {"$not": {"$eq": "x"}}}),
            json!({"$or": [{"n": {"$lt": 2}}, {"o.p.1.q": 2}]}),
            json!({"_rev": {"$regex": "^1-"}}),
        ];
        for s in &selectors {
            let sel = Selector::parse(s).expect("a selector");
            let m = Members::of(&normalize(s));
            for doc in &docs {
                let d = stored(doc);
                let whole = doc_value(&d).unwrap();
                assert_eq!(
                    sel.matches(&m.of_doc(&d).unwrap()),
                    sel.matches(&whole),
                    "{s} on {doc}"
                );
            }
        }
    }
}
