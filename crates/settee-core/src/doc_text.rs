//! Documents parsed straight from JSON text, without building a
//! `serde_json::Value` tree for the body (the hot path of `_bulk_docs`).
//!
//! Invariant: [`Doc::from_json_text`] returns exactly what
//! [`Doc::from_json`] returns for the same text — the same id, revision,
//! flags, body bytes (so the same revision hash) and the same errors. The
//! body is assembled from the members' raw text only where that text is
//! already what serializing the parsed value would print (no whitespace,
//! escapes, floats or nested objects); anything else is parsed and
//! re-serialized, and a document with a repeated member falls back to the
//! `Value` path altogether. The commonest shape of all (see [`PlainDoc`]:
//! flat, compact, only a string `_id` special) is recognised in one pass
//! over the bytes, its body cut straight from the text; a `PlainDoc`
//! scanned in a larger text (a `_bulk_docs` body) becomes a document
//! without a second scan ([`Doc::from_plain`]).

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::doc::{Body, Doc, DocError, Specials};

/// A member name, borrowed from the input unless it had escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The top-level members of a JSON object, in order, values unparsed.
struct Members<'a>(Vec<(Key<'a>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::with_capacity(m.size_hint().unwrap_or(4));
                while let Some(entry) = m.next_entry::<Key<'de>, &'de RawValue>()? {
                    members.push(entry);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(MembersVisitor)
    }
}

impl Members<'_> {
    fn has_repeated_name(&self) -> bool {
        let names = &self.0;
        if names.len() <= 16 {
            names
                .iter()
                .enumerate()
                .any(|(i, (a, _))| names[..i].iter().any(|(b, _)| a.0 == b.0))
        } else {
            let mut seen = std::collections::HashSet::with_capacity(names.len());
            !names.iter().all(|(k, _)| seen.insert(&*k.0))
        }
    }
}

/// Whether `raw` (valid JSON) is byte for byte what serde_json prints for
/// the value it denotes. Conservative: `false` only costs a re-parse.
fn is_canonical(raw: &str) -> bool {
    let b = raw.as_bytes();
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        let c = b[i];
        if in_str {
            match c {
                b'"' => in_str = false,
                b'\\' => return false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match c {
            b'"' => in_str = true,
            // A nested object may repeat a name, which the Value path collapses.
            b'{' | b' ' | b'\t' | b'\n' | b'\r' => return false,
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                if !prints_as_written(&b[start..i]) {
                    return false;
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    true
}

/// Whether the number text `num` (valid JSON) is what serde_json prints
/// for it: floats are re-printed, "-0" becomes "0", long integers may not
/// fit 64 bits.
fn prints_as_written(num: &[u8]) -> bool {
    num.len() <= 18 && num != b"-0" && !num.iter().any(|c| matches!(c, b'.' | b'e' | b'E' | b'+'))
}

/// Appends `name` as a JSON string, escaped as serde_json escapes it.
fn push_name(out: &mut String, name: &str) {
    if name.bytes().all(|c| c >= 0x20 && c != b'"' && c != b'\\') {
        out.push('"');
        out.push_str(name);
        out.push('"');
    } else {
        // Serializing a str cannot fail.
        out.push_str(&serde_json::to_string(name).expect("a str serializes"));
    }
}

fn bad_json(e: serde_json::Error) -> DocError {
    DocError::BadRequest(format!("Invalid document: {e}"))
}

/// A document of the plain shape most `_bulk_docs` documents have,
/// recognised in one pass over the bytes: an object with no whitespace
/// outside strings, no escapes, no nested objects, only integers of at
/// most 18 characters (not `-0`), distinct member names and no special
/// member but a string `_id`. Every such text is valid JSON and already
/// canonical, so the body is the text without its `_id` member (and one
/// comma beside it), the span kept in `cut`. Anything else goes the
/// general way, errors included.
#[derive(Debug, Clone, Copy)]
pub struct PlainDoc<'a> {
    text: &'a str,
    /// The `_id` value's text between its quotes.
    id: Option<(u32, u32)>,
    /// What the body lacks of the text: `text[cut.0..cut.1]`.
    cut: (u32, u32),
}

/// The most members a plain document has (more go the general way).
const PLAIN_MEMBERS: usize = 32;

/// How deep a plain document nests (the object and its arrays).
pub const PLAIN_DEPTH: usize = 65;

impl<'a> PlainDoc<'a> {
    /// The plain document starting at `text[at]` (text may follow it);
    /// `None` when none starts there. Every plain document is valid JSON,
    /// nested at most [`PLAIN_DEPTH`] deep.
    pub fn at(text: &'a str, at: usize) -> Option<PlainDoc<'a>> {
        let rest = text.get(at..)?;
        // Offsets within a document are u32: a longer one goes the
        // general way.
        let text = rest.get(..rest.len().min(u32::MAX as usize))?;
        let b = text.as_bytes();
        if b.first() != Some(&b'{') {
            return None;
        }
        let mut names: [&str; PLAIN_MEMBERS] = [""; PLAIN_MEMBERS];
        let mut n_names = 0;
        let mut id = None;
        let mut cut = (0, 0);
        let mut i = 1;
        if b.get(i) == Some(&b'}') {
            return Some(PlainDoc {
                text: &text[..2],
                id,
                cut,
            });
        }
        loop {
            let start = i;
            let name_end = plain_string(b, i)?;
            let name = &text[start + 1..name_end - 1];
            if b.get(name_end) != Some(&b':') {
                return None;
            }
            let value_start = name_end + 1;
            let end = plain_value(b, value_start, 0)?;
            if n_names == PLAIN_MEMBERS || names[..n_names].contains(&name) {
                return None;
            }
            names[n_names] = name;
            n_names += 1;
            let next = b.get(end).copied();
            if name == "_id" {
                if b[value_start] != b'"' {
                    return None;
                }
                id = Some((value_start as u32 + 1, end as u32 - 1));
                let (start, end) = (start as u32, end as u32);
                cut = match next {
                    // Members follow: the comma after it goes.
                    Some(b',') => (start, end + 1),
                    // The only member.
                    _ if start == 1 => (start, end),
                    // The last of several: the comma before it goes.
                    _ => (start - 1, end),
                };
            } else if name.starts_with('_') {
                return None;
            }
            match next {
                Some(b',') => i = end + 1,
                Some(b'}') => {
                    return Some(PlainDoc {
                        text: &text[..end + 1],
                        id,
                        cut,
                    })
                }
                _ => return None,
            }
        }
    }

    /// The document's text.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// The `_id` given, if any.
    pub fn id(&self) -> Option<&'a str> {
        self.id
            .map(|(from, to)| &self.text[from as usize..to as usize])
    }

    /// The body: the text without its `_id` member.
    fn body(&self) -> String {
        let (from, to) = (self.cut.0 as usize, self.cut.1 as usize);
        let mut body = String::with_capacity(self.text.len() - (to - from));
        body.push_str(&self.text[..from]);
        body.push_str(&self.text[to..]);
        body
    }
}

/// The end (past the closing quote) of a string without escapes or
/// control characters starting at `i`.
fn plain_string(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let rest = &b[i + 1..];
    // Member names and ids are short: a byte loop finds their end sooner
    // than a `memchr` call and a second pass over the bytes.
    for (j, &c) in rest.iter().take(SHORT_STRING).enumerate() {
        match c {
            b'"' => return Some(i + j + 2),
            b'\\' | 0..=0x1f => return None,
            _ => {}
        }
    }
    let len = SHORT_STRING + memchr::memchr(b'"', rest.get(SHORT_STRING..)?)?;
    if rest[SHORT_STRING..len]
        .iter()
        .any(|&c| c < 0x20 || c == b'\\')
    {
        return None;
    }
    Some(i + len + 2)
}

/// Strings up to this long are scanned byte by byte (see [`plain_string`]).
const SHORT_STRING: usize = 24;

/// The end of a plain value (see [`PlainDoc`]) starting at `i`: a plain
/// string, a canonical integer, a literal or an array of plain values.
fn plain_value(b: &[u8], i: usize, depth: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => plain_string(b, i),
        b't' => b[i..].starts_with(b"true").then_some(i + 4),
        b'f' => b[i..].starts_with(b"false").then_some(i + 5),
        b'n' => b[i..].starts_with(b"null").then_some(i + 4),
        b'-' | b'0'..=b'9' => {
            let digits = i + usize::from(b[i] == b'-');
            let end = digits
                + b[digits..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .count();
            // A valid integer (no leading zero), not the start of a float.
            let ok = end > digits
                && (b[digits] != b'0' || end == digits + 1)
                && !matches!(b.get(end), Some(b'.' | b'e' | b'E'))
                && prints_as_written(&b[i..end]);
            ok.then_some(end)
        }
        b'[' if depth + 1 < PLAIN_DEPTH => {
            let mut j = i + 1;
            if b.get(j) == Some(&b']') {
                return Some(j + 1);
            }
            loop {
                j = plain_value(b, j, depth + 1)?;
                match b.get(j) {
                    Some(b',') => j += 1,
                    Some(b']') => return Some(j + 1),
                    _ => return None,
                }
            }
        }
        _ => None,
    }
}

/// The general path: the whole text parsed into a value. Also taken when
/// a member's text does not parse by itself (a number out of range), so
/// that the error names its place in the whole text, as this path does.
fn value_path(text: &str, fallback_id: impl FnOnce() -> String) -> Result<Doc, DocError> {
    let value: Value = serde_json::from_str(text).map_err(bad_json)?;
    Doc::from_json(value, fallback_id)
}

impl Doc {
    /// The document a [`PlainDoc`] denotes: what [`Doc::from_json_text`]
    /// returns for its text, without scanning it again.
    pub fn from_plain(
        doc: PlainDoc<'_>,
        fallback_id: impl FnOnce() -> String,
    ) -> Result<Doc, DocError> {
        let id = doc.id().map(|s| Value::String(s.to_string()));
        let specials = Specials::lift_with_id(id, &mut Map::new(), fallback_id)?;
        Ok(specials.into_doc(Body::from_built(doc.body())))
    }

    /// [`Doc::from_json`] of the JSON text `text`, without building the
    /// body's value tree when it can (see the module doc).
    pub fn from_json_text(
        text: &str,
        fallback_id: impl FnOnce() -> String,
    ) -> Result<Doc, DocError> {
        if let Some(doc) = PlainDoc::at(text, 0).filter(|d| d.text.len() == text.len()) {
            return Doc::from_plain(doc, fallback_id);
        }
        let members = match serde_json::from_str::<Members<'_>>(text) {
            Ok(m) if !m.has_repeated_name() => m,
            // Not an object, or a repeated member: the general path decides.
            _ => return value_path(text, fallback_id),
        };
        let mut specials = Map::new();
        let mut id = None;
        let mut body = String::with_capacity(text.len());
        body.push('{');
        for (Key(name), raw) in members.0 {
            if name == "_id" {
                // A string without escapes is its text between the quotes
                // (control characters would not have parsed).
                let raw = raw.get();
                id = Some(
                    match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
                        Some(s) if !s.contains('\\') => Value::String(s.to_string()),
                        _ => match serde_json::from_str(raw) {
                            Ok(v) => v,
                            Err(_) => return value_path(text, fallback_id),
                        },
                    },
                );
                continue;
            }
            if crate::doc::is_special(&name) {
                let Ok(value) = serde_json::from_str::<Value>(raw.get()) else {
                    return value_path(text, fallback_id);
                };
                specials.insert(name.into_owned(), value);
                continue;
            }
            if body.len() > 1 {
                body.push(',');
            }
            push_name(&mut body, &name);
            body.push(':');
            if is_canonical(raw.get()) {
                body.push_str(raw.get());
            } else {
                let Ok(value) = serde_json::from_str::<Value>(raw.get()) else {
                    return value_path(text, fallback_id);
                };
                body.push_str(&serde_json::to_string(&value).map_err(bad_json)?);
            }
        }
        body.push('}');
        let specials = Specials::lift_with_id(id, &mut specials, fallback_id)?;
        Ok(specials.into_doc(Body::from_built(body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The id and body of `text` if it is one plain document.
    fn plain(text: &str) -> Option<(Option<&str>, String)> {
        let doc = PlainDoc::at(text, 0)?;
        (doc.text.len() == text.len()).then(|| (doc.id(), doc.body()))
    }
    use proptest::prelude::*;

    fn both(text: &str) -> (Result<Doc, DocError>, Result<Doc, DocError>) {
        let slow = serde_json::from_str::<Value>(text)
            .map_err(bad_json)
            .and_then(|v| Doc::from_json(v, || "gen".into()));
        (Doc::from_json_text(text, || "gen".into()), slow)
    }

    #[test]
    fn same_as_the_value_path_on_edge_cases() {
        let cases = [
            r#"{"_id":"a","foo":"bar"}"#,
            r#"{ "_id" : "a" , "foo" : [1, 2, {"x": 1.50}] }"#,
            r#"{"_id":"a","n":-0,"m":1e3,"k":12345678901234567890,"s":"\u0041\n"}"#,
            r#"{"_id":"a","o":{"d":1,"d":2}}"#,
            r#"{"_id":"a","x":1,"x":2}"#,
            r#"{"_id":"a","we\"ird":true,"\u00e9":null,"é":[]}"#,
            r#"{"_id":"a","_rev":"1-x","_revisions":{"start":1,"ids":["x"]},"v":1}"#,
            r#"{"_id":"a","_deleted":true}"#,
            r#"{"foo":"no id"}"#,
            r#"{"_id":"a","_foo":1}"#,
            r#"{"_id":5}"#,
            r#"{"_id":"a\"b","x":1}"#,
            r#"{"_id":"\u0041","x":1}"#,
            r#"{"_id":"é","x":1}"#,
            r#"{"_id":""}"#,
            r#"{"_id":null}"#,
            r#"{"_id":"_design/x","x":1}"#,
            r#"{"_id":"_bad"}"#,
            r#"{"x":1,"_id":"late"}"#,
            r#"{"_id":"a","_rev":"bad"}"#,
            r#"{"_id":"a","_attachments":{"f":{}}}"#,
            r#"[1]"#,
            r#""text""#,
        ];
        for c in cases {
            let (fast, slow) = both(c);
            assert_eq!(fast, slow, "{c}");
        }
        let (fast, _) = both(r#"{ "_id" : "a" , "foo" : [1, 2, {"x": 1.50}] }"#);
        assert_eq!(fast.unwrap().body.as_str(), r#"{"foo":[1,2,{"x":1.5}]}"#);
    }

    #[test]
    fn plain_documents_take_the_one_pass_path() {
        let yes = [
            (r#"{"_id":"a","foo":"bar"}"#, Some("a"), r#"{"foo":"bar"}"#),
            (
                r#"{"n":-12,"_id":"b","l":[1,[true,null],"é"]}"#,
                Some("b"),
                r#"{"n":-12,"l":[1,[true,null],"é"]}"#,
            ),
            (r#"{"x":0,"":[]}"#, None, r#"{"x":0,"":[]}"#),
            ("{}", None, "{}"),
        ];
        for (text, id, body) in yes {
            assert_eq!(plain(text), Some((id, body.to_string())), "{text}");
        }
        let no = [
            r#"{"_id":"a", "foo":"bar"}"#,
            r#"{"_id":"a","o":{"x":1}}"#,
            r#"{"_id":"a","f":1.5}"#,
            r#"{"_id":"a","n":-0}"#,
            r#"{"_id":"a","n":01}"#,
            r#"{"_id":"a","n":1234567890123456789}"#,
            r#"{"_id":"a\"b"}"#,
            r#"{"_id":"a","_rev":"1-x"}"#,
            r#"{"_id":5}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":1}x"#,
            r#"{"a":1,}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":tru}"#,
            "[1]",
        ];
        for text in no {
            assert_eq!(plain(text), None, "{text}");
        }
    }

    #[test]
    fn plain_documents_are_found_inside_a_text() {
        let text = r#"[{"a":1,"_id":"x"},{"_id":"y"},{}]"#;
        let first = PlainDoc::at(text, 1).unwrap();
        assert_eq!(first.text(), r#"{"a":1,"_id":"x"}"#);
        assert_eq!(
            (first.id(), first.body().as_str()),
            (Some("x"), r#"{"a":1}"#)
        );
        let second = PlainDoc::at(text, 19).unwrap();
        assert_eq!((second.id(), second.body().as_str()), (Some("y"), "{}"));
        let third = PlainDoc::at(text, 31).unwrap();
        assert_eq!((third.text(), third.id()), ("{}", None));
        // Not at a document, past the end, or inside a character.
        assert!(PlainDoc::at(text, 0).is_none());
        assert!(PlainDoc::at(text, text.len() + 1).is_none());
        assert!(PlainDoc::at("é{}", 1).is_none());
    }

    #[test]
    fn long_strings_are_checked_past_the_byte_loop() {
        for len in [0, 1, SHORT_STRING - 1, SHORT_STRING, SHORT_STRING + 1, 200] {
            let s = "x".repeat(len);
            let text = format!(r#"{{"_id":"{s}","{s}":"{s}"}}"#);
            let (fast, slow) = both(&text);
            assert_eq!(fast, slow, "{text}");
            if len > 0 {
                assert!(plain(&text).is_some(), "{text}");
            }
            for bad in ["\\n", "\u{1}", "\""] {
                for at in [0, len / 2, len] {
                    let mut v = s.clone();
                    v.insert_str(at, bad);
                    let text = format!(r#"{{"a":"{v}"}}"#);
                    assert_eq!(plain(&text), None, "{text:?}");
                    let (fast, slow) = both(&text);
                    assert_eq!(fast, slow, "{text:?}");
                }
            }
        }
    }

    /// A value of the shapes [`PlainDoc`] accepts, and a few it does not.
    fn plainish_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1000i64..1000).prop_map(Value::from),
            "[a-z é]{0,6}".prop_map(Value::String),
            Just(Value::from(0.5)),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                4 => prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                1 => prop::collection::vec(("[a-z]{1,2}", inner), 0..2)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// Compact object text from members in the given order (names may
    /// repeat), `_id` inserted at `at` when given.
    fn compact(members: &[(String, Value)], id: Option<(&str, usize)>) -> String {
        let mut parts: Vec<String> = members
            .iter()
            .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), v))
            .collect();
        if let Some((id, at)) = id {
            parts.insert(at.min(parts.len()), format!("\"_id\":{}", Value::from(id)));
        }
        format!("{{{}}}", parts.join(","))
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[a-z\"\\\\ é\n]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-z_\"]{1,3}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn one_pass_path_equals_value_path(
            members in prop::collection::vec(("[a-z_]{0,2}", plainish_value()), 0..6),
            id in prop::option::of(("[a-z_]{0,3}", 0usize..6)),
            edit in prop::option::of((any::<prop::sample::Index>(), 0usize..3, prop::sample::select(
                vec![' ', '"', '\\', ',', ':', '{', '}', '[', ']', '-', '0', '.', 'e', 'x', '\u{1}'],
            ))),
        ) {
            let mut text = compact(&members, id.as_ref().map(|(s, at)| (s.as_str(), *at)));
            // One byte inserted, replaced or removed somewhere: mostly
            // invalid or unusual texts, which must fare as on the value path.
            if let Some((at, how, c)) = edit {
                let mut bytes = text.clone().into_bytes();
                let i = at.index(bytes.len() + 1);
                match how {
                    0 => bytes.insert(i, c as u8),
                    1 if i < bytes.len() => bytes[i] = c as u8,
                    _ if i < bytes.len() => drop(bytes.remove(i)),
                    _ => {}
                }
                match String::from_utf8(bytes) {
                    Ok(t) => text = t,
                    Err(_) => return Ok(()),
                }
            }
            let (fast, slow) = both(&text);
            prop_assert_eq!(fast, slow, "{}", text);
        }

        #[test]
        fn fast_path_equals_value_path(
            members in prop::collection::vec(("[a-z_]{1,4}", json_value()), 0..6),
            id in "[a-z]{1,4}",
            pretty in any::<bool>(),
        ) {
            let mut map: Map<String, Value> = members.into_iter().collect();
            map.insert("_id".into(), Value::String(id));
            let value = Value::Object(map);
            let text = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                serde_json::to_string(&value).unwrap()
            };
            let (fast, slow) = both(&text);
            prop_assert_eq!(fast, slow);
        }
    }
}
