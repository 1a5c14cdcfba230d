//! The JSON design functions are given, built as CouchDB builds it.
//!
//! CouchDB hands documents to its query server as
//! `couch_doc:to_json_obj(Doc, [revs])`: `_id`, `_rev` (when there is one),
//! `_deleted: true` (for deletions), the body's members, then
//! `_revisions` (`{"start": N, "ids": [...]}`, newest first) when the
//! revision path is not empty. What that path holds differs by caller
//! (checked against CouchDB 3.4.3):
//! - `newDoc` of `validate_doc_update`: the edit as submitted — `_rev` is
//!   the revision being edited (the new one is not made yet) and
//!   `_revisions` what the client sent (just that revision when it sent
//!   only `_rev`); a new document has neither.
//! - `oldDoc`: the stored revision with its whole path.
//! - a changes filter's `doc`: the leaf with a path of that leaf alone.

use serde_json::{Map, Value};
use settee_core::att::{AttIn, AttKind};
use settee_core::doc::{revisions_json, Body, Doc};
use settee_core::rev::Rev;
use settee_db::DocRead;

/// `newDoc`: an edit as submitted, its attachments as stubs (those it
/// keeps described as `old`, the stored revision it edits, has them).
pub fn edit_json(doc: &Doc, old: Option<&Value>) -> Value {
    let mut v = edit_json_bare(doc);
    if let (Some(atts), Value::Object(out)) = (&doc.atts, &mut v) {
        out.insert("_attachments".into(), att_stubs_json(atts, old));
    }
    v
}

/// The stubs a validation function sees for an edit's attachments.
fn att_stubs_json(atts: &[AttIn], old: Option<&Value>) -> Value {
    let mut out = Map::with_capacity(atts.len());
    for a in atts {
        let stub = match &a.kind {
            AttKind::Stub { .. } => old
                .and_then(|o| o.get("_attachments"))
                .and_then(|o| o.get(&a.name))
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"stub": true})),
            AttKind::Stored(s, _) => {
                let mut text = String::new();
                s.write_json(&mut text, false);
                serde_json::from_str(&text).unwrap_or(Value::Null)
            }
            AttKind::Data {
                content_type, data, ..
            } => serde_json::json!({
                "content_type": content_type, "length": data.len(), "stub": true
            }),
            AttKind::Follows {
                content_type,
                length,
                ..
            } => serde_json::json!({
                "content_type": content_type, "length": length, "stub": true
            }),
        };
        out.insert(a.name.clone(), stub);
    }
    Value::Object(out)
}

fn edit_json_bare(doc: &Doc) -> Value {
    let single;
    let path: &[Rev] = match (&doc.revisions, &doc.rev) {
        (Some(revs), _) => revs,
        (None, Some(rev)) => {
            single = [rev.clone()];
            &single
        }
        (None, None) => &[],
    };
    with_meta(&doc.id, doc.rev.as_ref(), doc.deleted, &doc.body, path)
}

/// `oldDoc`: a stored revision, read with its path (`revs: true`).
pub fn stored_json(read: &DocRead) -> Value {
    let single;
    let path: &[Rev] = match &read.revisions {
        Some(revs) => revs,
        None => {
            single = [read.rev.clone()];
            &single
        }
    };
    with_meta(&read.id, Some(&read.rev), read.deleted, &read.body, path)
}

fn with_meta(id: &str, rev: Option<&Rev>, deleted: bool, body: &Body, path: &[Rev]) -> Value {
    let members = body.to_map();
    let mut out = Map::with_capacity(members.len() + 4);
    out.insert("_id".into(), Value::String(id.to_string()));
    if let Some(rev) = rev {
        out.insert("_rev".into(), Value::String(rev.to_string()));
    }
    if deleted {
        out.insert("_deleted".into(), Value::Bool(true));
    }
    out.extend(members);
    if !path.is_empty() {
        out.insert("_revisions".into(), revisions_json(path));
    }
    Value::Object(out)
}

/// A leaf as a changes filter sees it, as JSON text (spliced from the
/// stored body without parsing it).
pub fn leaf_text(id: &str, rev: &Rev, deleted: bool, body: &Body) -> String {
    let text = body.as_str().trim();
    // A Body is the text of a JSON object: `{` members `}`.
    let inner = text
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or("")
        .trim();
    let id_json = Value::String(id.to_string()).to_string();
    let rev_text = rev.to_string();
    let hash = rev.hash.to_string();
    let mut out = String::with_capacity(inner.len() + id_json.len() + 2 * rev_text.len() + 64);
    out.push_str("{\"_id\":");
    out.push_str(&id_json);
    out.push_str(",\"_rev\":\"");
    out.push_str(&rev_text);
    out.push('"');
    if deleted {
        out.push_str(",\"_deleted\":true");
    }
    if !inner.is_empty() {
        out.push(',');
        out.push_str(inner);
    }
    out.push_str(",\"_revisions\":{\"start\":");
    out.push_str(&rev.pos.to_string());
    out.push_str(",\"ids\":[\"");
    out.push_str(&hash);
    out.push_str("\"]}}");
    out
}

/// `userCtx`: `{"db": …, "name": … or null, "roles": […]}`.
pub fn user_ctx(db: &str, name: Option<&str>, roles: &[String]) -> Value {
    serde_json::json!({"db": db, "name": name, "roles": roles})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rev(s: &str) -> Rev {
        s.parse().unwrap()
    }

    #[test]
    fn a_new_document_has_no_rev_and_no_revisions() {
        let doc = Doc::from_json(json!({"_id": "d1", "x": 1}), || "g".into()).unwrap();
        assert_eq!(edit_json(&doc, None), json!({"_id": "d1", "x": 1}));
        // Member order as CouchDB: _id first.
        assert!(edit_json(&doc, None)
            .to_string()
            .starts_with("{\"_id\":\"d1\""));
    }

    #[test]
    fn an_edit_names_the_revision_it_edits() {
        let doc = Doc::from_json(
            json!({"_id": "d2", "_rev": "1-0785e9eb543380151003dc452c3a001a", "x": 2}),
            || "g".into(),
        )
        .unwrap();
        let v = edit_json(&doc, None);
        assert_eq!(
            v.to_string(),
            r#"{"_id":"d2","_rev":"1-0785e9eb543380151003dc452c3a001a","x":2,"_revisions":{"start":1,"ids":["0785e9eb543380151003dc452c3a001a"]}}"#
        );
    }

    #[test]
    fn a_deletion_says_so_after_the_rev() {
        let doc = Doc {
            id: "d".into(),
            rev: Some(rev("1-abc")),
            deleted: true,
            revisions: None,
            body: Body::empty(),
            atts: None,
        };
        assert_eq!(
            edit_json(&doc, None).to_string(),
            r#"{"_id":"d","_rev":"1-abc","_deleted":true,"_revisions":{"start":1,"ids":["abc"]}}"#
        );
    }

    #[test]
    fn revisions_sent_are_passed_on() {
        let doc = Doc::from_json(
            json!({"_id": "g", "_rev": "3-ccc", "_revisions": {"start": 3, "ids": ["ccc", "bbb", "abc"]}, "dump": 1}),
            || "x".into(),
        )
        .unwrap();
        assert_eq!(
            edit_json(&doc, None)["_revisions"],
            json!({"start": 3, "ids": ["ccc", "bbb", "abc"]})
        );
    }

    #[test]
    fn stored_revisions_carry_their_whole_path() {
        let read = DocRead {
            id: "del1".into(),
            rev: rev("2-d9b"),
            deleted: true,
            body: Body::empty(),
            local_seq: 2,
            revisions: Some(vec![rev("2-d9b"), rev("1-7a7")]),
            revs_info: None,
            conflicts: vec![],
            deleted_conflicts: vec![],
        };
        assert_eq!(
            stored_json(&read).to_string(),
            r#"{"_id":"del1","_rev":"2-d9b","_deleted":true,"_revisions":{"start":2,"ids":["d9b","7a7"]}}"#
        );
    }

    #[test]
    fn a_filtered_leaf_is_valid_json_with_its_own_revision() {
        let body = Body::from_value(json!({"n": 4, "v": "a\"b"})).unwrap();
        let text = leaf_text("d\"4", &rev("2-2cc2"), false, &body);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            json!({"_id": "d\"4", "_rev": "2-2cc2", "n": 4, "v": "a\"b",
                   "_revisions": {"start": 2, "ids": ["2cc2"]}})
        );
        let text = leaf_text("d2", &rev("2-6b4c"), true, &Body::empty());
        assert_eq!(
            text,
            r#"{"_id":"d2","_rev":"2-6b4c","_deleted":true,"_revisions":{"start":2,"ids":["6b4c"]}}"#
        );
    }

    #[test]
    fn user_ctx_has_couchdb_shape() {
        assert_eq!(
            user_ctx("v3", None, &[]),
            json!({"db": "v3", "name": null, "roles": []})
        );
        assert_eq!(
            user_ctx("v1", Some("admin"), &["_admin".to_string()]),
            json!({"db": "v1", "name": "admin", "roles": ["_admin"]})
        );
    }
}
