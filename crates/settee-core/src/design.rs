//! Design documents: the checks CouchDB 3 makes before it stores one
//! (`couch_mrview:validate/2`), with its exact reasons.
//!
//! Invariants:
//! - [`validate`] is a function of the document's members alone; a design
//!   document it refuses is answered 400 `invalid_design_doc` and never
//!   stored.
//! - The checks run in CouchDB's order and report the first failure as
//!   CouchDB does: the member types (`filters`, `language`, `lists`,
//!   `options`, `rewrites`, `shows`, `updates`, `validate_doc_update`,
//!   `views`, in that order), then every view but `lib` having a `map`,
//!   then `options.partitioned` (true only in a partitioned database),
//!   then the built-in reduce functions' names.
//! - Not checked: whether JavaScript functions compile (CouchDB asks its
//!   query server; a map or reduce function that does not compile is
//!   stored here).

use serde_json::{Map, Value};

use crate::doc::DocError;

/// A JSON type a member may be required to have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Object,
    String,
    Array,
    Boolean,
    /// A view's `map`: an object in a `query` (Mango) design document, a
    /// string (function source) in any other.
    MapFn,
}

/// One step of a member path: a named member, or every member of an object.
#[derive(Debug, Clone, Copy)]
enum Step {
    Key(&'static str, &'static [Ty]),
    Any(&'static [Ty]),
}

use Step::{Any, Key};
use Ty::{Array, Boolean, MapFn, Object};

const OBJECT: &[Ty] = &[Object];
const STRING: &[Ty] = &[Ty::String];
const BOOLEAN: &[Ty] = &[Boolean];
const OBJECT_OR_STRING: &[Ty] = &[Ty::String, Object];
const ARRAY_OR_STRING: &[Ty] = &[Array, Ty::String];
const MAP_FN: &[Ty] = &[MapFn];

/// The member paths CouchDB checks, in its order
/// (`couch_mrview:validate_ddoc_fields/1`).
const PATHS: &[&[Step]] = &[
    &[Key("filters", OBJECT), Any(OBJECT_OR_STRING)],
    &[Key("language", STRING)],
    &[Key("lists", OBJECT), Any(OBJECT_OR_STRING)],
    &[Key("options", OBJECT)],
    &[Key("options", OBJECT), Key("include_design", BOOLEAN)],
    &[Key("options", OBJECT), Key("local_seq", BOOLEAN)],
    &[Key("options", OBJECT), Key("partitioned", BOOLEAN)],
    &[Key("rewrites", ARRAY_OR_STRING)],
    &[Key("shows", OBJECT), Any(OBJECT_OR_STRING)],
    &[Key("updates", OBJECT), Any(OBJECT_OR_STRING)],
    &[Key("validate_doc_update", STRING)],
    &[Key("views", OBJECT), Key("lib", OBJECT)],
    &[Key("views", OBJECT), Any(OBJECT), Key("map", MAP_FN)],
    &[Key("views", OBJECT), Any(OBJECT), Key("reduce", STRING)],
];

/// Built-in reduce functions (CouchDB accepts any name starting with one
/// of these).
const BUILTIN_REDUCES: &[&str] = &["_sum", "_count", "_stats", "_approx_count_distinct"];

fn invalid(reason: String) -> DocError {
    DocError::InvalidDesignDoc(reason)
}

/// Checks a design document's members (special members may be present;
/// they are not looked at).
pub fn validate(doc: &Map<String, Value>, db_partitioned: bool) -> Result<(), DocError> {
    let query = doc.get("language").and_then(Value::as_str) == Some("query");
    for path in PATHS {
        if let Err((at, types)) = check(doc, path, &mut Vec::new(), query) {
            return Err(invalid(format!(
                "`{}` field must have {} type",
                at.join("."),
                type_names(types)
            )));
        }
    }
    let views = doc.get("views").and_then(Value::as_object);
    for (name, view) in views.into_iter().flatten() {
        if name != "lib" && view.get("map").is_none() {
            return Err(invalid(format!("View `{name}` must contain map function")));
        }
    }
    let partitioned = doc
        .get("options")
        .and_then(|o| o.get("partitioned"))
        .and_then(Value::as_bool);
    if partitioned == Some(true) && !db_partitioned {
        return Err(invalid(
            "partitioned option cannot be true in a non-partitioned database.".into(),
        ));
    }
    // CouchDB looks at the functions only through a query server for the
    // document's language; it has none for other languages and stores
    // such design documents unchecked.
    let language = doc
        .get("language")
        .and_then(Value::as_str)
        .unwrap_or("javascript");
    if matches!(language, "javascript" | "coffeescript" | "query") {
        for (_, view) in views.into_iter().flatten() {
            if view.get("map").is_none() {
                continue;
            }
            if let Some(reduce) = view.get("reduce").and_then(Value::as_str) {
                if reduce.starts_with('_') && !BUILTIN_REDUCES.iter().any(|b| reduce.starts_with(b))
                {
                    return Err(invalid(format!(
                        "`{reduce}` is not a supported reduce function."
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Walks `path` from `node`: every member it names that is present must
/// have one of its types. On failure, the member path and the types.
fn check<'a>(
    node: &'a Map<String, Value>,
    path: &[Step],
    at: &mut Vec<&'a str>,
    query: bool,
) -> Result<(), (Vec<&'a str>, &'static [Ty])> {
    let Some((step, rest)) = path.split_first() else {
        return Ok(());
    };
    match *step {
        Key(name, types) => check_member(node, name, types, rest, at, query),
        Any(types) => {
            for name in node.keys() {
                check_member(node, name, types, rest, at, query)?;
            }
            Ok(())
        }
    }
}

fn check_member<'a>(
    node: &'a Map<String, Value>,
    name: &str,
    types: &'static [Ty],
    rest: &[Step],
    at: &mut Vec<&'a str>,
    query: bool,
) -> Result<(), (Vec<&'a str>, &'static [Ty])> {
    // An absent member is fine; so is one of a listed type.
    let Some((name, value)) = node.get_key_value(name) else {
        return Ok(());
    };
    at.push(name);
    if !types.iter().any(|t| has_type(value, *t, query)) {
        let failed = at.clone();
        at.pop();
        let types = if types == MAP_FN {
            if query {
                OBJECT
            } else {
                STRING
            }
        } else {
            types
        };
        return Err((failed, types));
    }
    let r = match value {
        Value::Object(inner) => check(inner, rest, at, query),
        // Only objects have members to check further.
        _ => Ok(()),
    };
    at.pop();
    r
}

fn has_type(v: &Value, t: Ty, query: bool) -> bool {
    match t {
        Object => v.is_object(),
        Ty::String => v.is_string(),
        Array => v.is_array(),
        Boolean => v.is_boolean(),
        MapFn => {
            if query {
                v.is_object()
            } else {
                v.is_string()
            }
        }
    }
}

fn type_names(types: &[Ty]) -> String {
    types
        .iter()
        .map(|t| match t {
            Object => "object",
            Ty::String | MapFn => "string",
            Array => "array",
            Boolean => "boolean",
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reason(v: Value) -> Option<String> {
        match validate(v.as_object().unwrap(), false) {
            Ok(()) => None,
            Err(DocError::InvalidDesignDoc(r)) => Some(r),
            Err(e) => panic!("unexpected {e:?}"),
        }
    }

    #[test]
    fn accepts_well_formed_design_documents() {
        for ok in [
            json!({}),
            json!({"_id": "_design/x", "_rev": "1-a"}),
            json!({"language": "javascript", "views": {"v": {"map": "function(doc){}"}}}),
            json!({"views": {"v": {"map": "f", "reduce": "_sum"}, "lib": {"x": "y"}}}),
            json!({"views": {"v": {"map": "f", "reduce": "_count_whatever"}}}),
            json!({"views": {"v": {"map": "f", "reduce": "function(k,v){}"}}}),
            json!({"options": {"local_seq": true, "partitioned": false}, "views": {}}),
            json!({"filters": {"f": "x", "g": {}}, "shows": {}, "lists": {"l": "x"}}),
            json!({"updates": {"u": "x"}, "rewrites": [], "validate_doc_update": "f"}),
            json!({"rewrites": "function(req){}"}),
            json!({"language": "query", "views": {"v": {"map": {"fields": {}}}}}),
            // CouchDB has no query server for other languages: unchecked.
            json!({"language": "python", "views": {"v": {"map": "f", "reduce": "_bad"}}}),
            json!({"meta": {"owner": "x"}, "views": {"v": {"map": "f", "other": 1}}}),
        ] {
            assert_eq!(reason(ok.clone()), None, "{ok}");
        }
    }

    #[test]
    fn refuses_with_couchdbs_reasons() {
        let cases = [
            (json!({"views": "x"}), "`views` field must have object type"),
            (
                json!({"views": null}),
                "`views` field must have object type",
            ),
            (
                json!({"views": {"v": "function(doc){}"}}),
                "`views.v` field must have object type",
            ),
            (
                json!({"views": {"v": {"reduce": "_count"}}}),
                "View `v` must contain map function",
            ),
            (
                json!({"views": {"v": {"map": 1}}}),
                "`views.v.map` field must have string type",
            ),
            (
                json!({"language": "query", "views": {"v": {"map": "f"}}}),
                "`views.v.map` field must have object type",
            ),
            (
                json!({"views": {"v": {"map": "f", "reduce": 1}}}),
                "`views.v.reduce` field must have string type",
            ),
            (
                json!({"views": {"lib": "x"}}),
                "`views.lib` field must have object type",
            ),
            (
                json!({"language": 1}),
                "`language` field must have string type",
            ),
            (
                json!({"options": "x"}),
                "`options` field must have object type",
            ),
            (
                json!({"options": {"local_seq": 1}}),
                "`options.local_seq` field must have boolean type",
            ),
            (
                json!({"options": {"include_design": "yes"}}),
                "`options.include_design` field must have boolean type",
            ),
            (
                json!({"options": {"partitioned": true}}),
                "partitioned option cannot be true in a non-partitioned database.",
            ),
            (
                json!({"filters": []}),
                "`filters` field must have object type",
            ),
            (
                json!({"filters": {"f": 1}}),
                "`filters.f` field must have string or object type",
            ),
            (
                json!({"lists": {"a": "x", "b": []}}),
                "`lists.b` field must have string or object type",
            ),
            (
                json!({"shows": {"s": null}}),
                "`shows.s` field must have string or object type",
            ),
            (
                json!({"updates": "x"}),
                "`updates` field must have object type",
            ),
            (
                json!({"rewrites": {}}),
                "`rewrites` field must have array or string type",
            ),
            (
                json!({"validate_doc_update": {}}),
                "`validate_doc_update` field must have string type",
            ),
            (
                json!({"views": {"v": {"map": "f", "reduce": "_median"}}}),
                "`_median` is not a supported reduce function.",
            ),
        ];
        for (doc, want) in cases {
            assert_eq!(reason(doc.clone()).as_deref(), Some(want), "{doc}");
        }
    }

    #[test]
    fn reports_the_first_failure_in_couchdbs_order() {
        // Types before the map requirement, `filters` before `language`,
        // views in document order.
        assert_eq!(
            reason(json!({"language": 1, "filters": 2})).as_deref(),
            Some("`filters` field must have object type")
        );
        assert_eq!(
            reason(json!({"views": {"a": {"reduce": "_sum"}, "b": 3}})).as_deref(),
            Some("`views.b` field must have object type")
        );
        // Depth first: a view's members before the next view.
        assert_eq!(
            reason(json!({"views": {"a": {"map": 1}, "b": 3}})).as_deref(),
            Some("`views.a.map` field must have string type")
        );
        assert_eq!(
            reason(json!({"views": {"a": {"reduce": "_sum"}, "b": {"map": 1}}})).as_deref(),
            Some("`views.b.map` field must have string type")
        );
        assert_eq!(
            reason(json!({"views": {"v": {"map": "f", "reduce": "_x"}}, "options": {"partitioned": true}}))
                .as_deref(),
            Some("partitioned option cannot be true in a non-partitioned database.")
        );
    }
}
