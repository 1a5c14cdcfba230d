//! Password rules (`[chttpd_auth] password_regexp`): the regular
//! expressions a new clear-text password in a user document must match
//! before it is hashed, as CouchDB 3 checks them.
//!
//! The setting is an Erlang list, as CouchDB reads it: each element a
//! string (the expression), a one-tuple `{"Re"}`, or a pair `{"Re",
//! "Reason"}`, strings with Erlang's escapes (so `\d` is written `\\d`).
//! Every expression must match somewhere in the password (unanchored); the
//! first that does not refuses it with 400 `Password does not conform to
//! requirements.`, followed by its reason when it has one.
//!
//! Invariants:
//! - A setting that does not parse, or an expression that does not
//!   compile, refuses every password with CouchDB's 403 `Server cannot
//!   hash passwords at this time.` — never an unchecked password.
//! - Expressions are compiled once, when the setting is read, bounded in
//!   size ([`MAX_RULES_BYTES`]).

use regex::Regex;

use crate::AuthError;

/// The largest setting read, and the compiled size of each expression.
pub const MAX_RULES_BYTES: usize = 64 * 1024;

/// What the setting says.
#[derive(Debug, Clone, Default)]
pub enum PasswordPolicy {
    /// No setting: any password.
    #[default]
    Any,
    /// Each expression, with its reason.
    Rules(Vec<(Regex, Option<String>)>),
    /// A setting that does not parse or compile.
    Invalid,
}

impl PasswordPolicy {
    /// Reads the setting's value (`None`: not set).
    pub fn parse(setting: Option<&str>) -> PasswordPolicy {
        let Some(text) = setting else {
            return PasswordPolicy::Any;
        };
        if text.len() > MAX_RULES_BYTES {
            return PasswordPolicy::Invalid;
        }
        match parse_rules(text) {
            Some(rules) => PasswordPolicy::Rules(rules),
            None => PasswordPolicy::Invalid,
        }
    }

    /// Whether `password` may be stored.
    pub fn check(&self, password: &str) -> Result<(), AuthError> {
        match self {
            PasswordPolicy::Any => Ok(()),
            PasswordPolicy::Invalid => Err(AuthError::forbidden(
                "Server cannot hash passwords at this time.",
            )),
            PasswordPolicy::Rules(rules) => {
                for (re, reason) in rules {
                    if !re.is_match(password) {
                        let mut text = String::from("Password does not conform to requirements.");
                        if let Some(r) = reason {
                            text.push(' ');
                            text.push_str(r);
                        }
                        return Err(AuthError::BadRequest(text));
                    }
                }
                Ok(())
            }
        }
    }
}

/// A small reader of the Erlang terms the setting holds.
struct Terms<'a> {
    s: &'a [u8],
    at: usize,
}

impl Terms<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    /// Consumes `c` (after blanks) if it is next.
    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        if self.s.get(self.at) == Some(&c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// An Erlang string literal, its escapes decoded.
    fn string(&mut self) -> Option<String> {
        if !self.eat(b'"') {
            return None;
        }
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = *self.s.get(self.at)?;
            self.at += 1;
            match c {
                b'"' => return String::from_utf8(out).ok(),
                b'\\' => {
                    let e = *self.s.get(self.at)?;
                    self.at += 1;
                    match e {
                        b'b' => out.push(8),
                        b'd' => out.push(127),
                        b'e' => out.push(27),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b's' => out.push(b' '),
                        b't' => out.push(b'\t'),
                        b'v' => out.push(11),
                        b'0'..=b'7' => {
                            let mut v = u32::from(e - b'0');
                            for _ in 0..2 {
                                match self.s.get(self.at) {
                                    Some(d @ b'0'..=b'7') => {
                                        v = v * 8 + u32::from(d - b'0');
                                        self.at += 1;
                                    }
                                    _ => break,
                                }
                            }
                            push_char(&mut out, v)?;
                        }
                        b'x' => {
                            let mut v = 0u32;
                            let mut n = 0;
                            while n < 2 {
                                let d = char::from(*self.s.get(self.at)?).to_digit(16)?;
                                v = v * 16 + d;
                                self.at += 1;
                                n += 1;
                            }
                            push_char(&mut out, v)?;
                        }
                        b'^' => {
                            let c = *self.s.get(self.at)?;
                            self.at += 1;
                            out.push(c & 31);
                        }
                        other => out.push(other),
                    }
                }
                other => out.push(other),
            }
        }
    }
}

fn push_char(out: &mut Vec<u8>, v: u32) -> Option<()> {
    let c = char::from_u32(v)?;
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    Some(())
}

fn compile(re: &str) -> Option<Regex> {
    regex::RegexBuilder::new(re)
        .size_limit(MAX_RULES_BYTES * 16)
        .build()
        .ok()
}

/// `[Elem, …]` with each `Elem` a string, `{Re}` or `{Re, Reason}`.
fn parse_rules(text: &str) -> Option<Vec<(Regex, Option<String>)>> {
    let mut t = Terms {
        s: text.as_bytes(),
        at: 0,
    };
    if !t.eat(b'[') {
        return None;
    }
    let mut rules = Vec::new();
    if !t.eat(b']') {
        loop {
            let rule = if t.eat(b'{') {
                let re = t.string()?;
                let reason = if t.eat(b',') { Some(t.string()?) } else { None };
                if !t.eat(b'}') {
                    return None;
                }
                (compile(&re)?, reason)
            } else {
                (compile(&t.string()?)?, None)
            };
            rules.push(rule);
            if t.eat(b']') {
                break;
            }
            if !t.eat(b',') {
                return None;
            }
        }
    }
    t.skip_ws();
    (t.at == t.s.len()).then_some(rules)
}

#[cfg(test)]
mod tests {
    use super::PasswordPolicy;

    fn reason(p: &PasswordPolicy, pw: &str) -> Option<String> {
        p.check(pw)
            .err()
            .map(|e| format!("{} {}", e.status(), e.reason()))
    }

    #[test]
    fn every_rule_must_match_and_the_first_failing_names_its_reason() {
        let p = PasswordPolicy::parse(Some(r#"[{".{8,}", "Min length is 8"}, {"[A-Z]+"}, "\\d"]"#));
        assert_eq!(
            reason(&p, "short").as_deref(),
            Some("400 Password does not conform to requirements. Min length is 8")
        );
        assert_eq!(
            reason(&p, "longenough").as_deref(),
            Some("400 Password does not conform to requirements.")
        );
        assert_eq!(reason(&p, "LongEnough1"), None);
    }

    #[test]
    fn a_setting_that_does_not_parse_refuses_every_password() {
        for bad in [
            "garbage",
            "[{\"(\"}]",
            "[\"a\"",
            "[{\"a\", 1}]",
            "[\"a\"] x",
        ] {
            let p = PasswordPolicy::parse(Some(bad));
            assert_eq!(
                reason(&p, "anything").as_deref(),
                Some("403 Server cannot hash passwords at this time."),
                "{bad}"
            );
        }
        assert_eq!(reason(&PasswordPolicy::parse(Some("[]")), "x"), None);
        assert_eq!(reason(&PasswordPolicy::parse(None), "x"), None);
    }

    #[test]
    fn erlang_escapes_are_decoded() {
        let p = PasswordPolicy::parse(Some(r#"["\x41", "\101", "\s"]"#));
        assert_eq!(reason(&p, "A B"), None);
        assert!(reason(&p, "AB").is_some());
    }
}
