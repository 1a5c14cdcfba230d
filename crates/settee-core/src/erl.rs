//! Rendering JSON values as CouchDB's error reasons show them: Erlang
//! terms of the decoded JSON (`<<97>>` for the string "a", `{[{K,V}]}` for
//! an object), written either as bytes (`~w`) or, where CouchDB prints
//! them, readably (`~p`: `<<"a">>`).
//!
//! Invariant: output is bounded by [`MAX_CHARS`] (longer renderings are cut
//! and end in `...`), so a huge argument cannot bloat an error.

use serde_json::Value;

/// Longest rendering returned.
pub const MAX_CHARS: usize = 2000;

/// How strings are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `~w`: `<<97,98>>`.
    Bytes,
    /// `~p`: `<<"ab">>`.
    Readable,
}

/// The Erlang term text of `v`.
pub fn term(v: &Value, style: Style) -> String {
    let mut out = String::new();
    write(&mut out, v, style);
    if out.chars().count() > MAX_CHARS {
        let cut: String = out.chars().take(MAX_CHARS).collect();
        return format!("{cut}...");
    }
    out
}

fn write(out: &mut String, v: &Value, style: Style) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n)),
        Value::String(s) => binary(out, s, style),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(out, item, style);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push_str("{[");
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push('{');
                binary(out, k, style);
                out.push(',');
                write(out, item, style);
                out.push('}');
            }
            out.push_str("]}");
        }
    }
}

fn binary(out: &mut String, s: &str, style: Style) {
    out.push_str("<<");
    let readable =
        style == Style::Readable && !s.is_empty() && s.bytes().all(|b| (0x20..0x7f).contains(&b));
    if readable {
        out.push('"');
        for c in s.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
    } else {
        for (i, b) in s.bytes().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&b.to_string());
        }
    }
    out.push_str(">>");
}

/// Integers as digits; other numbers as Erlang prints floats (`1.5`,
/// `2.0`, `1.0e21`).
fn number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    let s = format!("{f:?}");
    if let Some((mantissa, exp)) = s.split_once('e') {
        let mantissa = if mantissa.contains('.') {
            mantissa.to_string()
        } else {
            format!("{mantissa}.0")
        };
        return format!("{mantissa}e{exp}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn terms_as_couchdb_prints_them() {
        assert_eq!(term(&json!("x"), Style::Bytes), "<<120>>");
        assert_eq!(term(&json!(""), Style::Bytes), "<<>>");
        assert_eq!(term(&json!({"a": 1}), Style::Bytes), "{[{<<97>>,1}]}");
        assert_eq!(term(&json!({}), Style::Bytes), "{[]}");
        assert_eq!(
            term(&json!([2, 1.5, null, true]), Style::Bytes),
            "[2,1.5,null,true]"
        );
        assert_eq!(term(&json!(2.0), Style::Bytes), "2.0");
        assert_eq!(term(&json!("n"), Style::Readable), "<<\"n\">>");
        assert_eq!(
            term(&json!({"n": "asc"}), Style::Readable),
            "{[{<<\"n\">>,<<\"asc\">>}]}"
        );
        assert_eq!(term(&json!("é"), Style::Readable), "<<195,169>>");
    }
}
