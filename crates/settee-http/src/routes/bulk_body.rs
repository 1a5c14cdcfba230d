//! The top level of a `_bulk_docs` body, read in one pass: the documents
//! stay raw text (each is parsed later, on its own), the flags unparsed.
//!
//! Invariants:
//! - The result is what parsing the body as an object of raw members, and
//!   then its `docs` member as an array of raw values, would give — a
//!   repeated member counts once (the last, as in a map), other members
//!   are ignored, a body that is not an object is an error (a data error,
//!   told apart from malformed JSON), and a `docs` that is not an array
//!   reads as `None` with `docs_given` set. One tokenizing pass over the
//!   documents instead of two (the body is most of a request's bytes).
//! - [`BulkBody::parse_plain`] reads the commonest body (compact, every
//!   document plain: see `settee_core::doc_text::PlainDoc`) in one
//!   pass of its own, which also stands for the depth check and for the
//!   judgement that no document can fail to parse (`plain`); it answers
//!   `None` for anything else, never an error, and where it answers, it
//!   answers what [`BulkBody::parse`] would.

use std::fmt;

use serde::de::{
    Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::value::RawValue;
use settee_core::doc_text::PlainDoc;
use settee_core::name::{validate_doc_id, DocKind};

/// The members of a `_bulk_docs` body that the endpoint reads.
#[derive(Debug, Default)]
pub struct BulkBody<'a> {
    /// The documents' text; `None` when absent or not an array.
    pub docs: Option<Vec<&'a str>>,
    /// Whether the body has a `docs` member at all (an array or not).
    pub docs_given: bool,
    pub new_edits: Option<&'a str>,
    pub all_or_nothing: Option<&'a str>,
    /// The documents scanned, when every one is plain with an ordinary id
    /// or none: none can fail to parse (set by [`BulkBody::parse_plain`]
    /// only; `docs` holds their texts).
    pub plain: Option<Vec<PlainDoc<'a>>>,
}

impl<'a> BulkBody<'a> {
    /// The body read the general way. `docs` keeps at most `max_docs + 1`
    /// documents (enough to tell the limit crossed); the rest are only
    /// checked, so memory stays bounded whatever the count.
    pub fn parse(bytes: &'a [u8], max_docs: usize) -> serde_json::Result<BulkBody<'a>> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let body = BodySeed { max: max_docs }.deserialize(&mut de)?;
        de.end()?;
        Ok(body)
    }

    /// The body read in one pass when it is compact, its members are
    /// `docs` (every document plain, with an ordinary id or none),
    /// `new_edits` and `all_or_nothing` (`true` or `false`), each at most
    /// once, and `docs` holds at most `max_docs` documents; `None`
    /// otherwise.
    pub fn parse_plain(bytes: &'a [u8], max_docs: usize) -> Option<BulkBody<'a>> {
        let text = std::str::from_utf8(bytes).ok()?;
        let b = text.as_bytes();
        let mut body = BulkBody::default();
        if b.first() != Some(&b'{') {
            return None;
        }
        let mut i = 1;
        loop {
            let rest = &text[i..];
            if let Some(after) = rest.strip_prefix("\"docs\":[") {
                if body.docs_given {
                    return None;
                }
                i = text.len() - after.len();
                let docs = plain_docs(text, &mut i, max_docs)?;
                body.docs = Some(docs.iter().map(PlainDoc::text).collect());
                body.plain = Some(docs);
                body.docs_given = true;
            } else {
                let (flag, after) = if let Some(after) = rest.strip_prefix("\"new_edits\":") {
                    (&mut body.new_edits, after)
                } else if let Some(after) = rest.strip_prefix("\"all_or_nothing\":") {
                    (&mut body.all_or_nothing, after)
                } else {
                    return None;
                };
                let value = literal(after)?;
                if flag.replace(value).is_some() {
                    return None;
                }
                i = text.len() - after.len() + value.len();
            }
            match b.get(i) {
                Some(b',') => i += 1,
                // Without `docs`, the general reading answers the error.
                Some(b'}') if i + 1 == b.len() && body.docs_given => return Some(body),
                _ => return None,
            }
        }
    }
}

/// The plain documents (at most `max`) of the array whose first element is
/// at `text[*i]`, moving `i` past its `]`.
fn plain_docs<'a>(text: &'a str, i: &mut usize, max: usize) -> Option<Vec<PlainDoc<'a>>> {
    let b = text.as_bytes();
    // Room for documents of 64 bytes or more, never past the limit.
    let mut docs = Vec::with_capacity((b.len() / 64).min(max));
    if b.get(*i) == Some(&b']') {
        *i += 1;
        return Some(docs);
    }
    loop {
        let doc = PlainDoc::at(text, *i)?;
        if let Some(id) = doc.id() {
            if !matches!(validate_doc_id(id), Ok(DocKind::Normal)) {
                return None;
            }
        }
        let end = *i + doc.text().len();
        if docs.len() == max {
            return None;
        }
        docs.push(doc);
        *i = end + 1;
        match b.get(end) {
            Some(b',') => {}
            Some(b']') => return Some(docs),
            _ => return None,
        }
    }
}

/// `true` or `false` at the start of `text`.
fn literal(text: &str) -> Option<&'static str> {
    ["true", "false"].into_iter().find(|l| text.starts_with(l))
}

enum Field {
    Docs,
    NewEdits,
    AllOrNothing,
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Field, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E>(self, v: &str) -> Result<Field, E> {
                Ok(match v {
                    "docs" => Field::Docs,
                    "new_edits" => Field::NewEdits,
                    "all_or_nothing" => Field::AllOrNothing,
                    _ => Field::Other,
                })
            }
        }
        d.deserialize_str(FieldVisitor)
    }
}

/// The `docs` member: an array of raw documents (at most `max + 1` of
/// them kept, the rest only checked), or anything else.
struct Docs<'a>(Option<Vec<&'a str>>);

/// Reads [`Docs`], keeping at most `max + 1` documents (the seed is its
/// own visitor: both need only the limit).
struct DocsSeed {
    max: usize,
}

impl<'de> DeserializeSeed<'de> for DocsSeed {
    type Value = Docs<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Docs<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DocsSeed {
    type Value = Docs<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Docs<'de>, A::Error> {
        let mut docs = Vec::new();
        while docs.len() <= self.max {
            match s.next_element::<&'de RawValue>()? {
                Some(doc) => docs.push(doc.get()),
                None => return Ok(Docs(Some(docs))),
            }
        }
        // Past the limit: the rest is only checked, so that a body of many
        // tiny documents costs no memory per document.
        while s.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Docs(Some(docs)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Docs<'de>, A::Error> {
        while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Docs(None))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Docs<'de>, E> {
        Ok(Docs(None))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Docs<'de>, E> {
        Ok(Docs(None))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Docs<'de>, E> {
        Ok(Docs(None))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Docs<'de>, E> {
        Ok(Docs(None))
    }
    fn visit_str<E>(self, _: &str) -> Result<Docs<'de>, E> {
        Ok(Docs(None))
    }
    fn visit_unit<E>(self) -> Result<Docs<'de>, E> {
        Ok(Docs(None))
    }
}

/// Reads a [`BulkBody`] whose `docs` keeps at most `max + 1` documents
/// (its own visitor, as [`DocsSeed`]).
struct BodySeed {
    max: usize,
}

impl<'de> DeserializeSeed<'de> for BodySeed {
    type Value = BulkBody<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<BulkBody<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BodySeed {
    type Value = BulkBody<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<BulkBody<'de>, A::Error> {
        let mut body = BulkBody::default();
        while let Some(field) = m.next_key::<Field>()? {
            match field {
                Field::Docs => {
                    body.docs = m.next_value_seed(DocsSeed { max: self.max })?.0;
                    body.docs_given = true;
                }
                Field::NewEdits => {
                    body.new_edits = Some(m.next_value::<&'de RawValue>()?.get());
                }
                Field::AllOrNothing => {
                    body.all_or_nothing = Some(m.next_value::<&'de RawValue>()?.get());
                }
                Field::Other => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::{json, Value};

    use settee_core::doc::Doc;

    use super::*;

    /// What a reading found: the documents' text, whether `docs` was
    /// there, and the two flags' text (`Err` when the body was refused).
    type Found = Result<(Option<Vec<String>>, bool, Option<String>, Option<String>), ()>;

    /// The two-pass reading this module replaces.
    fn two_pass(text: &str) -> Found {
        let map: BTreeMap<String, &RawValue> = serde_json::from_str(text).map_err(|_| ())?;
        let docs = map
            .get("docs")
            .and_then(|d| serde_json::from_str::<Vec<&RawValue>>(d.get()).ok())
            .map(|v| v.iter().map(|r| r.get().to_string()).collect());
        let raw = |k: &str| map.get(k).map(|r| r.get().to_string());
        Ok((
            docs,
            map.contains_key("docs"),
            raw("new_edits"),
            raw("all_or_nothing"),
        ))
    }

    fn found(b: BulkBody<'_>) -> Found {
        let docs = b.docs.map(|v| v.iter().map(|r| (*r).to_string()).collect());
        let raw = |r: Option<&str>| r.map(str::to_string);
        Ok((docs, b.docs_given, raw(b.new_edits), raw(b.all_or_nothing)))
    }

    fn one_pass(text: &str) -> Found {
        found(BulkBody::parse(text.as_bytes(), usize::MAX).map_err(|_| ())?)
    }

    /// What the plain reading finds, checked against the general one
    /// wherever it answers; `None` where it does not.
    fn plain_pass(text: &str) -> Option<Found> {
        let b = BulkBody::parse_plain(text.as_bytes(), usize::MAX)?;
        let plain = b.plain.clone().expect("plain documents");
        let texts: Vec<&str> = plain.iter().map(PlainDoc::text).collect();
        assert_eq!(Some(texts), b.docs, "{text}");
        // Each document is what the general parse makes of its text, and
        // an ordinary one.
        for d in plain {
            let value = serde_json::from_str::<Value>(d.text()).unwrap();
            let doc = Doc::from_plain(d, || "gen".into());
            assert_eq!(doc, Doc::from_json(value, || "gen".into()), "{text}");
            let id = doc.unwrap().id;
            assert!(
                matches!(validate_doc_id(&id), Ok(DocKind::Normal)),
                "{text}"
            );
        }
        // A plain body passes the depth check.
        assert!(
            crate::request::check_depth(text.as_bytes()).is_ok(),
            "{text}"
        );
        let f = found(b);
        assert_eq!(f, one_pass(text), "{text}");
        Some(f)
    }

    #[test]
    fn reads_as_the_two_pass_parse_did() {
        for text in [
            r#"{"docs":[{"_id":"a"},{"b":[1,2]}],"new_edits":false}"#,
            r#"{"docs":[]}"#,
            r#"{"new_edits":true}"#,
            r#"{"docs":"text","all_or_nothing":true}"#,
            r#"{"docs":{"a":[1]},"x":{"y":2}}"#,
            r#"{"docs":null}"#,
            r#"{"docs":1.5}"#,
            r#"{"docs":-3}"#,
            r#"{"docs":[1],"docs":[2,3]}"#,
            r#"{"do\u0063s":[{"z":1}]}"#,
            r#"{ "docs" : [ {"a" : 1} , 2 ] }"#,
            r#"[[{"a":1}],true]"#,
            r#""docs""#,
            r#"{"docs":[1,]}"#,
            r#"{"docs":[1]"#,
            r#"{"docs":[1]} x"#,
        ] {
            assert_eq!(one_pass(text), two_pass(text), "{text}");
        }
        assert_eq!(
            one_pass(r#"{"docs":[{"a":1}, 2]}"#).unwrap().0,
            Some(vec![r#"{"a":1}"#.to_string(), "2".to_string()])
        );
        assert!(one_pass("[]").is_err());
        assert!(BulkBody::parse(b"[]", 10).unwrap_err().is_data());
        assert!(!BulkBody::parse(b"{", 10).unwrap_err().is_data());
        assert!(one_pass(r#"{"docs":null}"#).unwrap().1);
        assert!(!one_pass(r#"{"x":1}"#).unwrap().1);
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            "[a-z_]{0,4}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z_]{0,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_body_reads_as_the_two_pass_parse_did(
            members in prop::collection::vec(
                (prop_oneof![
                    Just("docs".to_string()),
                    Just("new_edits".to_string()),
                    Just("all_or_nothing".to_string()),
                    "[a-z_]{0,6}",
                ], value()),
                0..5,
            ),
            docs in prop::collection::vec(value(), 0..4),
        ) {
            // Member names may repeat: built as text, not as a map.
            let mut text = String::from("{");
            let mut all: Vec<(String, Value)> = members;
            all.push(("docs".to_string(), Value::from(docs)));
            all.rotate_right(1);
            for (i, (k, v)) in all.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                text.push_str(&json!(k).to_string());
                text.push(':');
                text.push_str(&v.to_string());
            }
            text.push('}');
            prop_assert_eq!(one_pass(&text), two_pass(&text), "{}", text);
            plain_pass(&text);
        }

        /// Plain-looking bodies, some with one byte changed: wherever the
        /// plain reading answers, it answers as the general one, and every
        /// document it lets through parses (see `plain_pass`).
        #[test]
        fn plain_reading_agrees_and_its_documents_parse(
            docs in prop::collection::vec(
                (prop::option::of(prop_oneof![
                    "[a-z0-9]{1,4}",
                    Just("_design/d".to_string()),
                    Just("_local/l".to_string()),
                    Just("_x".to_string()),
                ]), prop::collection::vec(("[a-z_]{1,3}", value()), 0..3), 0usize..4),
                0..4,
            ),
            flags in prop::collection::vec(
                (prop_oneof![Just("new_edits"), Just("all_or_nothing")], any::<bool>()),
                0..3,
            ),
            edit in prop::option::of((any::<prop::sample::Index>(), prop::sample::select(
                vec![' ', '"', '\\', ',', ':', '{', '}', '[', ']', '0', 'x', '_'],
            ))),
        ) {
            let docs: Vec<String> = docs
                .into_iter()
                .map(|(id, members, id_at)| {
                    // The id first, last, between members or alone.
                    let mut parts: Vec<String> =
                        members.iter().map(|(k, v)| format!("{}:{v}", json!(k))).collect();
                    if let Some(id) = id {
                        parts.insert(id_at.min(parts.len()), format!("\"_id\":{}", json!(id)));
                    }
                    format!("{{{}}}", parts.join(","))
                })
                .collect();
            let mut members = vec![format!("\"docs\":[{}]", docs.join(","))];
            members.extend(flags.iter().map(|(k, v)| format!("\"{k}\":{v}")));
            let mut text = format!("{{{}}}", members.join(","));
            if let Some((at, c)) = edit {
                let i = at.index(text.len());
                if text.is_char_boundary(i) {
                    text.insert(i, c);
                }
            }
            plain_pass(&text);
        }
    }

    #[test]
    fn plain_bodies_read_in_one_pass() {
        let yes = [
            r#"{"docs":[{"_id":"a","foo":"bar"},{"x":[1,null]}]}"#,
            r#"{"docs":[]}"#,
            r#"{"docs":[{"a":1,"_id":"x"},{"a":1,"_id":"y","b":[]},{"_id":"z"},{}]}"#,
            r#"{"new_edits":true,"docs":[{}],"all_or_nothing":false}"#,
        ];
        for text in yes {
            assert!(plain_pass(text).is_some(), "{text}");
        }
        let no = [
            r#"{"docs":[{"_id":"_design/a"}]}"#,
            r#"{"docs":[{"_id":"_local/a"}]}"#,
            r#"{"docs":[{"_id":"_a"}]}"#,
            r#"{"docs":[{"_rev":"1-a"}]}"#,
            r#"{"docs":[{"a":1.5}]}"#,
            r#"{"docs":[{"a":{"b":1}}]}"#,
            r#"{"docs":[{"a":1}] }"#,
            "{\"docs\":[{\"a\":1}]}\n",
            r#"{"docs":[{"a":1},]}"#,
            r#"{"docs":[{"a":1}],"docs":[]}"#,
            r#"{"docs":[1]}"#,
            r#"{"docs":"x"}"#,
            r#"{"new_edits":"true","docs":[]}"#,
            r#"{"new_edits":true,"new_edits":false}"#,
            r#"{"other":1,"docs":[]}"#,
            r#"{"new_edits":false}"#,
            r#"{}"#,
            r#"[]"#,
            r#"{"docs":[{"a":"\u0041"}]}"#,
        ];
        for text in no {
            assert!(plain_pass(text).is_none(), "{text}");
        }
        assert!(BulkBody::parse_plain(b"{\"docs\":[{\"a\":\"\xff\"}]}", 10).is_none());
    }

    #[test]
    fn documents_past_the_limit_are_checked_but_not_kept() {
        let body = |n: usize, tail: &str| {
            let docs = vec!["{}"; n].join(",");
            format!(r#"{{"docs":[{docs}{tail}],"new_edits":false}}"#)
        };
        // The plain reading holds at most the limit; past it, the general
        // one keeps one more than the limit and reads the rest of the body.
        let exact = body(3, "");
        assert_eq!(
            BulkBody::parse_plain(exact.as_bytes(), 3)
                .unwrap()
                .docs
                .unwrap()
                .len(),
            3
        );
        assert!(BulkBody::parse_plain(body(4, "").as_bytes(), 3).is_none());
        let many = body(1000, "");
        let b = BulkBody::parse(many.as_bytes(), 3).unwrap();
        assert_eq!((b.docs.unwrap().len(), b.new_edits), (4, Some("false")));
        assert_eq!(
            BulkBody::parse(exact.as_bytes(), 3)
                .unwrap()
                .docs
                .unwrap()
                .len(),
            3
        );
        // A malformed document past the limit still fails the body.
        assert!(BulkBody::parse(body(10, ",{").as_bytes(), 3).is_err());
        assert!(BulkBody::parse(body(10, ",tru").as_bytes(), 3).is_err());
    }
}
