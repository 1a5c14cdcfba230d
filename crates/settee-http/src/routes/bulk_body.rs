//! The top level of a `_bulk_docs` body, read in one pass: the documents
//! stay raw text (each is parsed later, on its own), the flags unparsed.
//!
//! Invariant: the result is what parsing the body as an object of raw
//! members, and then its `docs` member as an array of raw values, would
//! give — a repeated member counts once (the last, as in a map), other
//! members are ignored, a body that is not an object is an error (a data
//! error, told apart from malformed JSON), and a `docs` that is not an
//! array reads as `None` with `docs_given` set. One tokenizing pass over
//! the documents instead of two (the body is most of a request's bytes).

use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// The members of a `_bulk_docs` body that the endpoint reads.
#[derive(Debug, Default)]
pub struct BulkBody<'a> {
    /// The documents' text; `None` when absent or not an array.
    pub docs: Option<Vec<&'a RawValue>>,
    /// Whether the body has a `docs` member at all (an array or not).
    pub docs_given: bool,
    pub new_edits: Option<&'a RawValue>,
    pub all_or_nothing: Option<&'a RawValue>,
}

impl<'a> BulkBody<'a> {
    pub fn parse(bytes: &'a [u8]) -> serde_json::Result<BulkBody<'a>> {
        serde_json::from_slice(bytes)
    }
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

/// The `docs` member: an array of raw documents, or anything else.
struct Docs<'a>(Option<Vec<&'a RawValue>>);

impl<'de> Deserialize<'de> for Docs<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Docs<'de>, D::Error> {
        struct DocsVisitor;
        impl<'de> Visitor<'de> for DocsVisitor {
            type Value = Docs<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Docs<'de>, A::Error> {
                let mut docs = Vec::with_capacity(s.size_hint().unwrap_or(0));
                while let Some(doc) = s.next_element::<&'de RawValue>()? {
                    docs.push(doc);
                }
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
        d.deserialize_any(DocsVisitor)
    }
}

impl<'de> Deserialize<'de> for BulkBody<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<BulkBody<'de>, D::Error> {
        struct BodyVisitor;
        impl<'de> Visitor<'de> for BodyVisitor {
            type Value = BulkBody<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<BulkBody<'de>, A::Error> {
                let mut body = BulkBody::default();
                while let Some(field) = m.next_key::<Field>()? {
                    match field {
                        Field::Docs => {
                            body.docs = m.next_value::<Docs<'de>>()?.0;
                            body.docs_given = true;
                        }
                        Field::NewEdits => body.new_edits = Some(m.next_value()?),
                        Field::AllOrNothing => body.all_or_nothing = Some(m.next_value()?),
                        Field::Other => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(body)
            }
        }
        d.deserialize_map(BodyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::{json, Value};

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

    fn one_pass(text: &str) -> Found {
        let b = BulkBody::parse(text.as_bytes()).map_err(|_| ())?;
        let docs = b
            .docs
            .map(|v| v.iter().map(|r| r.get().to_string()).collect());
        let raw = |r: Option<&RawValue>| r.map(|r| r.get().to_string());
        Ok((docs, b.docs_given, raw(b.new_edits), raw(b.all_or_nothing)))
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
        assert!(BulkBody::parse(b"[]").unwrap_err().is_data());
        assert!(!BulkBody::parse(b"{").unwrap_err().is_data());
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
        }
    }
}
