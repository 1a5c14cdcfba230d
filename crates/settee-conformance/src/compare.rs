//! Comparison of two normalised step records, and the list of allowed
//! differences (`DIFFERENCES.md`).
//!
//! A difference has a path: `N:status`, `N:header.NAME`, `N:body.a.0.b`
//! (N is the 1-based step), or `steps` when the step counts differ. JSON
//! objects compare without regard to key order; arrays in order.
//!
//! `DIFFERENCES.md` lines of the form
//! ``- `SCENARIO-GLOB` `PATH-GLOB`: reason`` allow the differences they
//! match (`*` matches any run of characters). Invariant: every entry must
//! match at least one actual difference, or the check fails -- the list
//! only shrinks, it cannot hide a fixed bug or a typo.

use serde_json::Value;

/// One difference between golden and actual.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    pub path: String,
    pub expected: String,
    pub actual: String,
}

/// Differences between golden and actual records of one scenario.
pub fn scenario(golden: &[Value], actual: &[Value]) -> Vec<Diff> {
    let mut out = Vec::new();
    if golden.len() != actual.len() {
        out.push(Diff {
            path: "steps".into(),
            expected: golden.len().to_string(),
            actual: actual.len().to_string(),
        });
    }
    for (i, (g, a)) in golden.iter().zip(actual).enumerate() {
        let n = i + 1;
        value(&format!("{n}:status"), &g["status"], &a["status"], &mut out);
        value(
            &format!("{n}:header"),
            &g["headers"],
            &a["headers"],
            &mut out,
        );
        value(&format!("{n}:body"), &g["body"], &a["body"], &mut out);
    }
    out
}

fn short(v: Option<&Value>) -> String {
    match v {
        None => "(absent)".into(),
        Some(v) => {
            let s = v.to_string();
            if s.len() > 300 {
                let mut end = 300;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                format!("{}…", &s[..end])
            } else {
                s
            }
        }
    }
}

fn value(path: &str, g: &Value, a: &Value, out: &mut Vec<Diff>) {
    match (g, a) {
        (Value::Object(gm), Value::Object(am)) => {
            for (k, gv) in gm {
                let p = format!("{path}.{k}");
                match am.get(k) {
                    Some(av) => value(&p, gv, av, out),
                    None => out.push(Diff {
                        path: p,
                        expected: short(Some(gv)),
                        actual: short(None),
                    }),
                }
            }
            for (k, av) in am {
                if !gm.contains_key(k) {
                    out.push(Diff {
                        path: format!("{path}.{k}"),
                        expected: short(None),
                        actual: short(Some(av)),
                    });
                }
            }
        }
        (Value::Array(ga), Value::Array(aa)) if ga.len() == aa.len() => {
            for (i, (gv, av)) in ga.iter().zip(aa).enumerate() {
                value(&format!("{path}.{i}"), gv, av, out);
            }
        }
        (Value::Number(gn), Value::Number(an)) if gn.as_f64() == an.as_f64() => {}
        _ if g == a => {}
        _ => out.push(Diff {
            path: path.to_string(),
            expected: short(Some(g)),
            actual: short(Some(a)),
        }),
    }
}

/// One allowed difference.
#[derive(Debug, Clone)]
pub struct Allowed {
    pub scenario: String,
    pub path: String,
    pub reason: String,
    pub line: usize,
}

/// Parses the entries of DIFFERENCES.md.
pub fn parse_allowed(text: &str) -> Result<Vec<Allowed>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some(rest) = line.strip_prefix("- `") else {
            continue;
        };
        let bad = || {
            format!(
                "DIFFERENCES.md:{}: expected - `SCENARIO` `PATH`: reason",
                i + 1
            )
        };
        let (sc, rest) = rest.split_once('`').ok_or_else(bad)?;
        let rest = rest.trim_start().strip_prefix('`').ok_or_else(bad)?;
        let (path, rest) = rest.split_once('`').ok_or_else(bad)?;
        let reason = rest.trim_start().strip_prefix(':').ok_or_else(bad)?.trim();
        if reason.is_empty() {
            return Err(format!(
                "DIFFERENCES.md:{}: an entry needs its reason",
                i + 1
            ));
        }
        out.push(Allowed {
            scenario: sc.to_string(),
            path: path.to_string(),
            reason: reason.to_string(),
            line: i + 1,
        });
    }
    Ok(out)
}

/// `*` matches any run of characters (including none).
pub fn glob(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let mut rest = s;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(p) => rest = &rest[p + part.len()..],
                None => return false,
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn object_order_does_not_matter_but_values_do() {
        let g = vec![json!({"status":200,"headers":{},"body":{"a":1,"b":[1,2]}})];
        let a = vec![json!({"status":200,"headers":{},"body":{"b":[1,2],"a":1}})];
        assert!(scenario(&g, &a).is_empty());
        let a = vec![json!({"status":201,"headers":{"x":"y"},"body":{"b":[2,1]}})];
        let d: Vec<String> = scenario(&g, &a).into_iter().map(|d| d.path).collect();
        assert_eq!(
            d,
            vec![
                "1:status",
                "1:header.x",
                "1:body.a",
                "1:body.b.0",
                "1:body.b.1"
            ]
        );
    }

    #[test]
    fn globs_and_entries() {
        assert!(glob("docs.*", "docs.put"));
        assert!(glob("*:body.reason", "3:body.reason"));
        assert!(!glob("*:body.reason", "3:body.error"));
        assert!(glob("a*b*c", "axxbyyc"));
        let e = parse_allowed("# x\n- `a.*` `*:status`: why\n").unwrap();
        assert_eq!(e[0].scenario, "a.*");
        assert_eq!(e[0].reason, "why");
        assert!(parse_allowed("- `a` `b`:\n").is_err());
    }
}
