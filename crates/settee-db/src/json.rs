//! CouchDB's JSON for documents, written straight into a `String`.
//!
//! Invariant: a stored [`Body`] is JSON object text and is spliced into the
//! output as it is — never parsed and re-serialized — after `_id` and `_rev`
//! and before the requested meta members (`_revisions`, `_conflicts`, …).
//! The HTTP layer renders responses with it and the indexes build the
//! documents map functions see with it, so both see the same JSON.

use settee_core::att::{self, AttStub};
use settee_core::revtree::RevStatus;

use crate::reader::DocRead;
use settee_core::rev::{Rev, RevHash};

/// Appends `s` as a JSON string literal.
pub fn push_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    // Most strings (ids, revisions) need no escape: one check, one copy.
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if esc.is_empty() {
            out.push_str(&format!("\\u{b:04x}"));
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Appends a revision as a JSON string.
pub fn push_rev(out: &mut String, rev: &Rev) {
    out.push('"');
    push_u64(out, rev.pos);
    out.push('-');
    match &rev.hash {
        // A digest's text is hex digits: nothing to escape or check.
        RevHash::Digest(_) => rev.hash.with_text(|hex| {
            out.push_str(hex);
            out.push('"');
        }),
        // Hashes of replicated revisions are checked by Rev parsing but may
        // hold any character: escaped by the general path.
        RevHash::Text(hash) => {
            let mut tmp = String::new();
            push_str(&mut tmp, hash);
            out.push_str(&tmp[1..]);
        }
    }
}

pub fn push_u64(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// What to add to a rendered document besides `_id`, `_rev` and the body.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras {
    pub local_seq: bool,
    /// How attachments are shown.
    pub atts: AttView,
}

/// How a rendered document shows its attachments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AttView {
    /// Stubs, as CouchDB shows them by default.
    #[default]
    Stubs,
    /// Stubs with `encoding` and `encoded_length` (`att_encoding_info`).
    EncodingInfo,
    /// Inline base64 `data` (`attachments=true`) for attachments whose
    /// `revpos` is above `since_pos` (`atts_since`; 0 for all), stubs for
    /// the others.
    Data { encoding_info: bool, since_pos: u64 },
}

impl AttView {
    /// The view `attachments` and `att_encoding_info` ask for.
    pub fn from_flags(attachments: bool, encoding_info: bool) -> AttView {
        match (attachments, encoding_info) {
            (true, encoding_info) => AttView::Data {
                encoding_info,
                since_pos: 0,
            },
            (false, true) => AttView::EncodingInfo,
            (false, false) => AttView::Stubs,
        }
    }
}

/// Reads an attachment's identity bytes for [`AttView::Data`].
pub type AttBytes<'a> = dyn FnMut(&AttStub) -> Result<Vec<u8>, String> + 'a;

/// Appends a stored body's members, its attachments shown as `view`
/// says (`bytes` gives the bytes for [`AttView::Data`]; without it data
/// is shown as stubs).
pub fn push_body_with_atts(
    out: &mut String,
    body: &str,
    view: AttView,
    bytes: Option<&mut AttBytes<'_>>,
) -> Result<(), String> {
    if !att::has_stored(body) || (view == AttView::Stubs && !body.contains("\"encoding\":")) {
        push_body_members(out, body);
        return Ok(());
    }
    let Ok((stubs, rest)) = att::split_stored(body) else {
        // Stored stubs that do not parse (never written so) are shown as stored.
        push_body_members(out, body);
        return Ok(());
    };
    push_body_members(out, &rest);
    out.push_str(",\"_attachments\":{");
    let mut bytes = bytes;
    for (i, (name, stub)) in stubs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(out, name);
        out.push(':');
        match (view, bytes.as_mut()) {
            (
                AttView::Data {
                    encoding_info,
                    since_pos,
                },
                Some(read),
            ) if stub.revpos > since_pos => {
                use base64::Engine as _;
                stub.write_head(out);
                out.push_str(",\"data\":\"");
                out.push_str(&base64::engine::general_purpose::STANDARD.encode(read(stub)?));
                out.push('"');
                if encoding_info {
                    stub.write_encoding(out);
                }
                out.push('}');
            }
            (AttView::Data { encoding_info, .. }, _) => stub.write_json(out, encoding_info),
            (view, _) => stub.write_json(out, view == AttView::EncodingInfo),
        }
    }
    out.push('}');
    Ok(())
}

/// Appends the members of a body (without braces), preceded by a comma
/// when it has any.
pub fn push_body_members(out: &mut String, body: &str) {
    let inner = body.trim();
    let inner = inner
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .unwrap_or("");
    if !inner.trim().is_empty() {
        out.push(',');
        out.push_str(inner);
    }
}

/// Renders a document revision as CouchDB does (attachment data, if
/// asked for, shown as stubs: see [`push_doc_with`]).
pub fn push_doc(out: &mut String, d: &DocRead, extras: Extras) {
    // Without a byte source nothing can fail.
    let _ = push_doc_with(out, d, extras, None);
}

/// [`push_doc`] with attachment bytes, when `extras` asks for them, read
/// from `blobs` (the document's database's).
pub fn push_doc_blobs(
    out: &mut String,
    d: &DocRead,
    extras: Extras,
    blobs: &crate::blobs::Blobs,
) -> crate::Result<()> {
    if !matches!(extras.atts, AttView::Data { .. }) {
        push_doc(out, d, extras);
        return Ok(());
    }
    let mut read = |stub: &AttStub| blobs.identity_bytes(stub).map_err(|e| e.to_string());
    push_doc_with(out, d, extras, Some(&mut read)).map_err(crate::Error::Corrupt)
}

/// [`push_doc`] with a source of attachment bytes for [`AttView::Data`].
pub fn push_doc_with(
    out: &mut String,
    d: &DocRead,
    extras: Extras,
    bytes: Option<&mut AttBytes<'_>>,
) -> Result<(), String> {
    out.reserve(d.body.len() + 96);
    let start = out.len();
    out.push_str("{\"_id\":");
    push_str(out, &d.id);
    out.push_str(",\"_rev\":");
    push_rev(out, &d.rev);
    if let Err(e) = push_body_with_atts(out, d.body.as_str(), extras.atts, bytes) {
        out.truncate(start);
        return Err(e);
    }
    if d.deleted {
        out.push_str(",\"_deleted\":true");
    }
    if let Some(revs) = &d.revisions {
        out.push_str(",\"_revisions\":{\"start\":");
        push_u64(out, revs.first().map_or(0, |r| r.pos));
        out.push_str(",\"ids\":[");
        for (i, r) in revs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            r.hash.with_text(|hash| push_str(out, hash));
        }
        out.push_str("]}");
    }
    if let Some(info) = &d.revs_info {
        out.push_str(",\"_revs_info\":[");
        for (i, (r, s)) in info.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"rev\":");
            push_rev(out, r);
            out.push_str(",\"status\":");
            out.push_str(match s {
                RevStatus::Available => "\"available\"",
                RevStatus::Missing => "\"missing\"",
                RevStatus::Deleted => "\"deleted\"",
            });
            out.push('}');
        }
        out.push(']');
    }
    push_rev_list(out, "_conflicts", &d.conflicts);
    push_rev_list(out, "_deleted_conflicts", &d.deleted_conflicts);
    if extras.local_seq {
        out.push_str(",\"_local_seq\":");
        push_u64(out, d.local_seq);
    }
    out.push('}');
    Ok(())
}

fn push_rev_list(out: &mut String, name: &str, revs: &[Rev]) {
    if revs.is_empty() {
        return;
    }
    out.push_str(",\"");
    out.push_str(name);
    out.push_str("\":[");
    for (i, r) in revs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_rev(out, r);
    }
    out.push(']');
}

pub fn doc_string(d: &DocRead, extras: Extras) -> String {
    let mut out = String::new();
    push_doc(&mut out, d, extras);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use settee_core::doc::Body;

    fn read(body: &str) -> DocRead {
        DocRead {
            id: "a\"b".into(),
            rev: Rev::new(2, "abc"),
            deleted: false,
            body: Body::from_stored(body.into()),
            local_seq: 7,
            revisions: Some(vec![Rev::new(2, "abc"), Rev::new(1, "def")]),
            revs_info: None,
            conflicts: vec![Rev::new(2, "zzz")],
            deleted_conflicts: vec![],
        }
    }

    proptest::proptest! {
        #[test]
        fn revisions_and_strings_render_as_serde_json_does(
            pos in proptest::prelude::any::<u64>(),
            digest in proptest::prelude::any::<[u8; 16]>(),
            text in "[a-z0-9\"\\\\\u{1}\n é]{1,12}",
        ) {
            for rev in [Rev::new(pos, digest.iter().map(|b| format!("{b:02x}")).collect::<String>()), Rev::new(pos, &text)] {
                let mut out = String::new();
                push_rev(&mut out, &rev);
                proptest::prop_assert_eq!(&out, &serde_json::to_string(&rev.to_string()).unwrap());
            }
            let mut out = String::new();
            push_str(&mut out, &text);
            proptest::prop_assert_eq!(out, serde_json::to_string(&text).unwrap());
        }
    }

    #[test]
    fn renders_valid_json() {
        for body in ["{}", r#"{"x":1,"y":[1,2]}"#] {
            let s = doc_string(
                &read(body),
                Extras {
                    local_seq: true,
                    ..Extras::default()
                },
            );
            let v: serde_json::Value = serde_json::from_str(&s).unwrap();
            assert_eq!(v["_id"], "a\"b");
            assert_eq!(v["_rev"], "2-abc");
            assert_eq!(v["_revisions"]["start"], 2);
            assert_eq!(v["_conflicts"][0], "2-zzz");
            assert_eq!(v["_local_seq"], 7);
        }
    }

    #[test]
    fn escapes_control_characters() {
        let mut s = String::new();
        push_str(&mut s, "a\u{1}\n\"é");
        assert_eq!(serde_json::from_str::<String>(&s).unwrap(), "a\u{1}\n\"é");
    }
}
