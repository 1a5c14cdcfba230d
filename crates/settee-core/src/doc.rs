//! Documents as the engine sees them: an id, the revision being edited,
//! a deleted flag, an optional `_revisions` history, and a body.
//!
//! Invariants:
//! - A [`Body`] is always the text of a JSON object with no top-level
//!   member starting with `_`; the special members are lifted into [`Doc`]
//!   fields by [`Doc::from_json`] (and put back by whoever renders the
//!   document). A body's bytes are what the revision hash covers.
//! - The special members are checked as CouchDB's `couch_doc` checks them:
//!   a non-string `_id` is an illegal id, a `_deleted` that is not a
//!   boolean (or an `_attachments` that is not an object) is a bad special
//!   member, and a `_revisions` names the revision (its first entry),
//!   whatever `_rev` says.
//! - `_local` documents have no revision tree: [`next_local_rev`] is their
//!   whole revision rule (any `0-N` or none is accepted, no conflict).

use serde_json::{Map, Value};
use thiserror::Error;

use crate::att::{self, AttIn};
use crate::name::{validate_doc_id, NameError};
use crate::rev::{Rev, RevParseError};

/// A document body: JSON object text without special members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body(String);

impl Body {
    /// The body `{}`.
    pub fn empty() -> Body {
        Body("{}".to_string())
    }

    /// Serializes a map whose keys the caller has checked (no special
    /// members).
    fn from_checked_map(map: &Map<String, Value>) -> Body {
        // Serializing a map of JSON values to a String cannot fail.
        Body(serde_json::to_string(map).expect("JSON map serializes"))
    }

    /// Wraps stored text. Only the storage layer calls this, with bytes that
    /// were a valid `Body` when written.
    pub fn from_stored(text: String) -> Body {
        Body(text)
    }

    /// Builds a body from a JSON object without special members (but
    /// [`BODY_SPECIALS`]).
    pub fn from_value(value: Value) -> Result<Body, DocError> {
        match value {
            Value::Object(map) => {
                if let Some(k) = map.keys().find(|k| is_special(k)) {
                    return Err(DocError::Validation(format!(
                        "Bad special document member: {k}"
                    )));
                }
                Ok(Body::from_checked_map(&map))
            }
            _ => Err(DocError::BadRequest(
                "Document must be a JSON object".into(),
            )),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The body's text, given up without a copy.
    pub fn into_string(self) -> String {
        self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0 == "{}"
    }

    /// Parses the body into a JSON map.
    pub fn to_map(&self) -> Map<String, Value> {
        // A Body is valid JSON object text by construction; an empty map is
        // the only sane answer should storage have been tampered with.
        serde_json::from_str(&self.0).unwrap_or_default()
    }
}

/// An edit of one document, as submitted to the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doc {
    pub id: String,
    /// `_rev`: with `new_edits=true` the revision being edited (None for a
    /// new document); with `new_edits=false` the revision being stored.
    pub rev: Option<Rev>,
    pub deleted: bool,
    /// `_revisions`: the history ending in `rev`, newest first.
    pub revisions: Option<Vec<Rev>>,
    pub body: Body,
    /// `_attachments`, when the document names any (absent: the revision
    /// has none, whatever its parent had).
    pub atts: Option<Vec<AttIn>>,
}

/// Why a document was refused. Each maps to one CouchDB error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DocError {
    /// 400 bad_request.
    #[error("{0}")]
    BadRequest(String),
    /// 400 doc_validation.
    #[error("{0}")]
    Validation(String),
    /// 400 illegal_docid.
    #[error("{0}")]
    IllegalId(#[from] NameError),
    /// 400 invalid_design_doc (see [`crate::design`]).
    #[error("{0}")]
    InvalidDesignDoc(String),
}

impl From<RevParseError> for DocError {
    fn from(_: RevParseError) -> DocError {
        DocError::BadRequest("Invalid rev format".into())
    }
}

/// Members CouchDB accepts in a document and ignores (they are answers, not inputs).
/// `_`-members CouchDB keeps in a document's body (the replicator's
/// record of a `_replicator` document's state; accepted in any document).
pub const BODY_SPECIALS: &[&str] = &[
    "_replication_state",
    "_replication_state_time",
    "_replication_state_reason",
    "_replication_id",
    "_replication_stats",
];

/// Whether member `k` is special (`_`-prefixed) and not kept in the body.
pub fn is_special(k: &str) -> bool {
    k.starts_with('_') && !BODY_SPECIALS.contains(&k)
}

const IGNORED_SPECIALS: &[&str] = &[
    "_revs_info",
    "_conflicts",
    "_deleted_conflicts",
    "_local_seq",
];

impl Doc {
    /// A new-edit document with a body and no revision.
    pub fn new(id: impl Into<String>, body: Value) -> Result<Doc, DocError> {
        Doc::with_body(id, Body::from_value(body)?)
    }

    /// A new-edit document with an already-built body (cheap when many
    /// documents share one body).
    pub fn with_body(id: impl Into<String>, body: Body) -> Result<Doc, DocError> {
        let id = id.into();
        validate_doc_id(&id)?;
        Ok(Doc {
            id,
            rev: None,
            deleted: false,
            revisions: None,
            body,
            atts: None,
        })
    }

    /// Parses a JSON document as clients send it. `fallback_id` supplies
    /// an id when the document has no `_id` (CouchDB generates a UUID).
    pub fn from_json(value: Value, fallback_id: impl FnOnce() -> String) -> Result<Doc, DocError> {
        let Value::Object(mut map) = value else {
            return Err(DocError::BadRequest(
                "Document must be a JSON object".into(),
            ));
        };
        let specials = Specials::lift(&mut map, fallback_id)?;
        Ok(specials.into_doc(Body::from_checked_map(&map)))
    }
}

/// The special members of a document, lifted out of its JSON object.
pub(crate) struct Specials {
    id: String,
    rev: Option<Rev>,
    deleted: bool,
    revisions: Option<Vec<Rev>>,
    atts: Option<Vec<AttIn>>,
}

impl Specials {
    /// Removes and checks every `_` member of `map`; any left that CouchDB
    /// does not know is an error (400 doc_validation).
    pub(crate) fn lift(
        map: &mut Map<String, Value>,
        fallback_id: impl FnOnce() -> String,
    ) -> Result<Specials, DocError> {
        let id = map.shift_remove("_id");
        Specials::lift_with_id(id, map, fallback_id)
    }

    /// [`Specials::lift`] with the `_id` member already taken out of `map`.
    pub(crate) fn lift_with_id(
        id: Option<Value>,
        map: &mut Map<String, Value>,
        fallback_id: impl FnOnce() -> String,
    ) -> Result<Specials, DocError> {
        let id = match id {
            Some(Value::String(s)) => s,
            Some(_) => return Err(DocError::IllegalId(NameError::NotString)),
            None => fallback_id(),
        };
        validate_doc_id(&id)?;
        if map.is_empty() {
            // The common case of `_bulk_docs`: no special member but `_id`.
            return Ok(Specials {
                id,
                rev: None,
                deleted: false,
                revisions: None,
                atts: None,
            });
        }
        let rev = match map.shift_remove("_rev") {
            Some(Value::String(s)) => Some(s.parse::<Rev>()?),
            Some(Value::Null) | None => None,
            Some(_) => return Err(DocError::BadRequest("Invalid rev format".into())),
        };
        let deleted = match map.shift_remove("_deleted") {
            Some(Value::Bool(b)) => b,
            None => false,
            Some(_) => return Err(bad_special("_deleted")),
        };
        let revisions = match map.shift_remove("_revisions") {
            Some(v) => Some(parse_revisions(&v)?),
            None => None,
        };
        // Like CouchDB: the history, when given, names the revision (and
        // a `_rev` beside it is not looked at again).
        let rev = match &revisions {
            Some(revs) => revs.first().cloned(),
            None => rev,
        };
        let atts = match map.shift_remove("_attachments") {
            None => None,
            Some(v) => att::parse(v)?,
        };
        for k in IGNORED_SPECIALS {
            map.shift_remove(*k);
        }
        if let Some(k) = map.keys().find(|k| is_special(k)) {
            return Err(bad_special(k));
        }
        Ok(Specials {
            id,
            rev,
            deleted,
            revisions,
            atts,
        })
    }

    pub(crate) fn into_doc(self, body: Body) -> Doc {
        Doc {
            id: self.id,
            rev: self.rev,
            deleted: self.deleted,
            revisions: self.revisions,
            body,
            atts: self.atts,
        }
    }
}

impl Body {
    /// Wraps text built by [`crate::doc_text`], which produces exactly what
    /// serializing the same members would.
    pub(crate) fn from_built(text: String) -> Body {
        Body(text)
    }
}

/// A revision as CouchDB's `couch_doc:parse_rev` reads any, `_local` ones
/// included: `<integer>-<anything>`; else 400 "Invalid rev format".
pub fn rev_parts(rev: &str) -> Result<(u64, &str), DocError> {
    let invalid = || DocError::BadRequest("Invalid rev format".into());
    let (pos, id) = rev.split_once('-').ok_or_else(invalid)?;
    if !pos.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    Ok((pos.parse().map_err(|_| invalid())?, id))
}

/// CouchDB's refusal of a special member it does not accept as given.
fn bad_special(name: &str) -> DocError {
    DocError::Validation(format!("Bad special document member: {name}"))
}

/// The revision number a write of a `_local` document gets, given the
/// `_rev` it was sent with (`0-N` then), as CouchDB 3 does it: no
/// revision check at all. A deletion is always `0-0` (whatever revision
/// it names); otherwise `0-N` gives `N+1` and no revision gives 1.
///
/// A `_rev` that is not `<integer>-<anything>` is CouchDB's 400 "Invalid
/// rev format". One whose position is not 0 or whose id is not a number
/// (`1-abc`, `0-x`) makes CouchDB itself fail with a 500 ("Invalid rev
/// format"); here it is the same clean 400.
pub fn next_local_rev(rev: Option<&str>, deleted: bool) -> Result<u64, DocError> {
    let invalid = || DocError::BadRequest("Invalid rev format".into());
    let Some(rev) = rev else {
        return Ok(if deleted { 0 } else { 1 });
    };
    let (pos, id) = rev_parts(rev)?;
    if deleted {
        return Ok(0);
    }
    if pos != 0 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let n: u64 = id.parse().map_err(|_| invalid())?;
    n.checked_add(1).ok_or_else(invalid)
}

/// Parses `{"start": N, "ids": [hash, ...]}` into revisions, newest first,
/// refusing a malformed history with CouchDB's `doc_validation` reasons.
pub fn parse_revisions(v: &Value) -> Result<Vec<Rev>, DocError> {
    let invalid = |m: &str| DocError::Validation(m.to_string());
    if !v.is_object() {
        return Err(bad_special("_revisions"));
    }
    let start = v
        .get("start")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid("_revisions.start isn't an integer."))?;
    let ids = v
        .get("ids")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("_revisions.ids isn't a array."))?;
    if ids.iter().any(|h| !h.is_string()) {
        return Err(invalid("RevId isn't a string"));
    }
    if ids.is_empty() || (ids.len() as u64) > start || start > crate::rev::REV_POS_MAX {
        return Err(DocError::BadRequest(
            "_revisions must be {\"start\": N, \"ids\": [...]}".into(),
        ));
    }
    ids.iter()
        .enumerate()
        .map(|(i, h)| match h.as_str() {
            Some(h) if !h.is_empty() && h.len() <= crate::rev::REV_HASH_BYTES_MAX => {
                Ok(Rev::new(start - i as u64, h))
            }
            _ => Err(invalid("RevId isn't a string")),
        })
        .collect()
}

/// Renders `{"start": N, "ids": [...]}` for a path, newest first.
pub fn revisions_json<'a>(path: impl IntoIterator<Item = &'a Rev>) -> Value {
    let mut start = 0;
    let mut ids = Vec::new();
    for (i, r) in path.into_iter().enumerate() {
        if i == 0 {
            start = r.pos;
        }
        ids.push(Value::String(r.hash.to_string()));
    }
    serde_json::json!({"start": start, "ids": ids})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn no_id() -> String {
        "generated".into()
    }

    #[test]
    fn lifts_special_members_and_keeps_order() {
        let d = Doc::from_json(
            json!({"_id":"a","_rev":"2-x","z":1,"a":2,"_revisions":{"start":2,"ids":["x","y"]},"_conflicts":[]}),
            no_id,
        )
        .unwrap();
        assert_eq!(d.id, "a");
        assert_eq!(d.rev, Some(Rev::new(2, "x")));
        assert_eq!(d.revisions, Some(vec![Rev::new(2, "x"), Rev::new(1, "y")]));
        assert_eq!(d.body.as_str(), r#"{"z":1,"a":2}"#);
        assert!(!d.deleted);
    }

    #[test]
    fn generates_missing_id() {
        assert_eq!(
            Doc::from_json(json!({"a":1}), no_id).unwrap().id,
            "generated"
        );
    }

    #[test]
    fn rejects_bad_input() {
        let cases = [
            json!([1]),
            json!({"_id": 5}),
            json!({"_id": "_bad"}),
            json!({"_id": "a", "_rev": "nope"}),
            json!({"_id": "a", "_foo": 1}),
            json!({"_id": "a", "_deleted": "yes"}),
            json!({"_id": "a", "_attachments": {"f": {"data": "!"}}}),
        ];
        for c in cases {
            assert!(Doc::from_json(c.clone(), no_id).is_err(), "{c}");
        }
        assert!(matches!(
            Doc::from_json(json!({"_id":"a","_foo":1}), no_id),
            Err(DocError::Validation(m)) if m == "Bad special document member: _foo"
        ));
    }

    #[test]
    fn special_member_errors_are_couchdbs() {
        let err = |v: Value| Doc::from_json(v, no_id).unwrap_err();
        assert_eq!(
            err(json!({"_id": 1})),
            DocError::IllegalId(NameError::NotString)
        );
        assert_eq!(
            err(json!({"_id": null})),
            DocError::IllegalId(NameError::NotString)
        );
        assert_eq!(
            err(json!({"_id": "a", "_deleted": "yes"})),
            DocError::Validation("Bad special document member: _deleted".into())
        );
        assert_eq!(
            err(json!({"_id": "a", "_attachments": "x"})),
            DocError::Validation("Bad special document member: _attachments".into())
        );
    }

    #[test]
    fn revisions_name_the_revision() {
        let d = Doc::from_json(
            json!({"_id": "a", "_revisions": {"start": 2, "ids": ["x", "y"]}}),
            no_id,
        )
        .unwrap();
        assert_eq!(d.rev, Some(Rev::new(2, "x")));
        // Over a `_rev` that disagrees, as CouchDB's couch_doc.
        let d = Doc::from_json(
            json!({"_id": "a", "_rev": "2-z", "_revisions": {"start": 3, "ids": ["x", "y"]}}),
            no_id,
        )
        .unwrap();
        assert_eq!(d.rev, Some(Rev::new(3, "x")));
        assert_eq!(d.revisions.unwrap().len(), 2);
    }

    #[test]
    fn local_revisions_count_from_the_given_one() {
        assert_eq!(next_local_rev(None, false), Ok(1));
        assert_eq!(next_local_rev(Some("0-0"), false), Ok(1));
        assert_eq!(next_local_rev(Some("0-1"), false), Ok(2));
        assert_eq!(next_local_rev(Some("0-7"), false), Ok(8));
        // A deletion is 0-0 whatever it names, as long as it is a rev.
        assert_eq!(next_local_rev(None, true), Ok(0));
        assert_eq!(next_local_rev(Some("0-5"), true), Ok(0));
        assert_eq!(next_local_rev(Some("3-abc"), true), Ok(0));
        let invalid = Err(DocError::BadRequest("Invalid rev format".into()));
        for bad in [
            "abc", "", "-1", "x-1", "1-aaaa", "0-x", "0-", "0-+1", "0--1",
        ] {
            assert_eq!(next_local_rev(Some(bad), false), invalid, "{bad}");
        }
        for bad in ["abc", "x-1", "-1"] {
            assert_eq!(next_local_rev(Some(bad), true), invalid, "{bad}");
        }
        assert_eq!(
            next_local_rev(Some(&format!("0-{}", u64::MAX)), false),
            invalid
        );
        assert_eq!(rev_parts("0-1"), Ok((0, "1")));
        assert_eq!(rev_parts("12-ab-c"), Ok((12, "ab-c")));
        assert_eq!(rev_parts("+1-a"), invalid.map(|_| (0, "")));
    }

    #[test]
    fn revisions_round_trip() {
        let revs = vec![Rev::new(3, "c"), Rev::new(2, "b")];
        assert_eq!(parse_revisions(&revisions_json(&revs)).unwrap(), revs);
    }
}
