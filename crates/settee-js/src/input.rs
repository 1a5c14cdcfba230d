//! Documents as callers pass them: values or JSON text.
//!
//! Owns [`JsonDoc`] and the assembly of a batch of documents into the one
//! JSON array text a worker parses. Invariant: every document that reaches
//! JavaScript is a syntactically valid JSON object (text is checked here, on
//! the caller's thread); a document that is not gets its own error and is
//! left out of the batch, so it cannot spoil the others.

use serde_json::value::RawValue;
use serde_json::Value;

/// A document given to map or filter functions: a [`serde_json::Value`], or
/// the document's JSON text (`str`, `String`, [`RawValue`]). Text is passed
/// to JavaScript as it is, without building a value tree in Rust.
pub trait JsonDoc {
    /// Appends the document's JSON text to `out`, or says why it is not a
    /// JSON object.
    fn write_json(&self, out: &mut String) -> Result<(), String>;
}

impl JsonDoc for Value {
    fn write_json(&self, out: &mut String) -> Result<(), String> {
        if !self.is_object() {
            return Err("a document must be a JSON object".into());
        }
        // Writing into a String cannot fail, and a Value always serialises.
        out.push_str(&serde_json::to_string(self).map_err(|e| e.to_string())?);
        Ok(())
    }
}

impl JsonDoc for str {
    fn write_json(&self, out: &mut String) -> Result<(), String> {
        let raw: &RawValue =
            serde_json::from_str(self).map_err(|e| format!("document is not valid JSON: {e}"))?;
        raw.write_json(out)
    }
}

impl JsonDoc for String {
    fn write_json(&self, out: &mut String) -> Result<(), String> {
        self.as_str().write_json(out)
    }
}

impl JsonDoc for RawValue {
    fn write_json(&self, out: &mut String) -> Result<(), String> {
        let text = self.get().trim();
        if !text.starts_with('{') {
            return Err("a document must be a JSON object".into());
        }
        out.push_str(text);
        Ok(())
    }
}

impl JsonDoc for Box<RawValue> {
    fn write_json(&self, out: &mut String) -> Result<(), String> {
        (**self).write_json(out)
    }
}

impl<T: JsonDoc + ?Sized> JsonDoc for &T {
    fn write_json(&self, out: &mut String) -> Result<(), String> {
        (**self).write_json(out)
    }
}

/// A batch of documents as one JSON array text, and which of the inputs
/// are in it.
pub(crate) struct Batch {
    pub json: String,
    /// For every input, `Ok(())` if it is in `json` (in input order), or why not.
    pub accepted: Vec<Result<(), String>>,
    pub count: usize,
}

pub(crate) fn batch<D: JsonDoc>(docs: &[D]) -> Batch {
    let mut json = String::with_capacity(docs.len() * 64 + 2);
    json.push('[');
    let mut accepted = Vec::with_capacity(docs.len());
    let mut count = 0;
    for doc in docs {
        let mark = json.len();
        if count > 0 {
            json.push(',');
        }
        match doc.write_json(&mut json) {
            Ok(()) => {
                count += 1;
                accepted.push(Ok(()));
            }
            Err(e) => {
                json.truncate(mark);
                accepted.push(Err(e));
            }
        }
    }
    json.push(']');
    Batch {
        json,
        accepted,
        count,
    }
}

/// The length of `s` in UTF-16 code units: what JavaScript's `length` says.
pub(crate) fn utf16_len(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.encode_utf16().count()
    }
}
