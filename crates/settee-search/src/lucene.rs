//! Lucene's classic query syntax, parsed into a tree the index compiles
//! ([`Node`]). Pure: no index, no analyzer.
//!
//! What it reads: terms, `"phrases"` (with `~slop`), `field:term`,
//! `field:(group)`, `( … )`, `AND`/`&&`, `OR`/`||`, `NOT`/`!`, `+`/`-`,
//! ranges `[a TO b]`, `{a TO b}` (mixed brackets, `*` for an open end),
//! trailing-`*` prefixes, `term~` fuzzy terms, `^boost`, `*:*`,
//! `/regex/` terms, and `\` escapes.
//!
//! Invariants: clauses combine as Lucene's classic parser combines them
//! with OR as the default operator (a conjunction makes its neighbours
//! required, `NOT` and `-` prohibit, `+` requires); a query the parser
//! cannot read is an error naming the query, never a partial tree.

use std::fmt;

/// How a clause takes part in its boolean query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occur {
    Must,
    Should,
    MustNot,
}

/// One end of a range: `*` is [`Bound::Open`].
#[derive(Debug, Clone, PartialEq)]
pub enum Bound {
    Open,
    Included(String),
    Excluded(String),
}

/// A parsed query.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `*:*`.
    All,
    /// A bare term in a field (None: the default field).
    Term {
        field: Option<String>,
        text: String,
    },
    /// A term ending in an unescaped `*`: its text is the prefix.
    Prefix {
        field: Option<String>,
        text: String,
    },
    /// `term~` (edit distance, 2 when not given).
    Fuzzy {
        field: Option<String>,
        text: String,
        distance: u8,
    },
    Phrase {
        field: Option<String>,
        text: String,
        slop: u32,
    },
    Range {
        field: Option<String>,
        lower: Bound,
        upper: Bound,
    },
    /// `/pattern/`: a regular expression a whole term must match.
    Regex {
        field: Option<String>,
        pattern: String,
    },
    Bool(Vec<(Occur, Node)>),
    Boost(Box<Node>, f32),
}

/// Why a query could not be parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub query: String,
    pub detail: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cannot parse '{}': {}", self.query, self.detail)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// A word (escapes resolved) and whether it ended in an unescaped `*`.
    Word(String, bool),
    Quoted(String),
    Colon,
    LParen,
    RParen,
    LBracket(bool),
    RBracket(bool),
    Plus,
    Minus,
    And,
    Or,
    Not,
    Caret(f32),
    Tilde(Option<f32>),
    To,
}

const SPECIAL: &[char] = &[
    ':', '(', ')', '[', ']', '{', '}', '"', '^', '~', '+', '-', '!', '\\', '&', '|',
];

fn lex(q: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = q.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            ':' => {
                out.push(Tok::Colon);
                i += 1
            }
            '(' => {
                out.push(Tok::LParen);
                i += 1
            }
            ')' => {
                out.push(Tok::RParen);
                i += 1
            }
            '[' | '{' => {
                out.push(Tok::LBracket(c == '['));
                i += 1
            }
            ']' | '}' => {
                out.push(Tok::RBracket(c == ']'));
                i += 1
            }
            '+' => {
                out.push(Tok::Plus);
                i += 1
            }
            '-' => {
                out.push(Tok::Minus);
                i += 1
            }
            '!' => {
                out.push(Tok::Not);
                i += 1
            }
            '&' if chars.get(i + 1) == Some(&'&') => {
                out.push(Tok::And);
                i += 2
            }
            '|' if chars.get(i + 1) == Some(&'|') => {
                out.push(Tok::Or);
                i += 2
            }
            '"' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err("Lexical error: unterminated phrase".into()),
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            let n = chars.get(i + 1).ok_or("Lexical error: escape at end")?;
                            s.push(*n);
                            i += 2;
                        }
                        Some(c) => {
                            s.push(*c);
                            i += 1
                        }
                    }
                }
                out.push(Tok::Quoted(s));
            }
            '^' | '~' => {
                i += 1;
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                    i += 1;
                }
                let num: String = chars[start..i].iter().collect();
                let value = if num.is_empty() {
                    None
                } else {
                    Some(
                        num.parse::<f32>()
                            .map_err(|_| format!("Lexical error: bad number '{num}'"))?,
                    )
                };
                if c == '^' {
                    out.push(Tok::Caret(
                        value.ok_or("Lexical error: '^' needs a number")?,
                    ));
                } else {
                    out.push(Tok::Tilde(value));
                }
            }
            _ => {
                let mut s = String::new();
                let mut star = false;
                while i < chars.len() {
                    let c = chars[i];
                    if c.is_whitespace() || (SPECIAL.contains(&c) && c != '\\') {
                        // A '-' or '+' inside a word belongs to it (Lucene's
                        // term characters), as does '!'.
                        if (c == '-' || c == '+' || c == '!') && !s.is_empty() {
                            s.push(c);
                            star = false;
                            i += 1;
                            continue;
                        }
                        break;
                    }
                    if c == '\\' {
                        let n = chars.get(i + 1).ok_or("Lexical error: escape at end")?;
                        s.push(*n);
                        star = false;
                        i += 2;
                        continue;
                    }
                    star = c == '*';
                    s.push(c);
                    i += 1;
                }
                match s.as_str() {
                    "AND" => out.push(Tok::And),
                    "OR" => out.push(Tok::Or),
                    "NOT" => out.push(Tok::Not),
                    "TO" => out.push(Tok::To),
                    _ => out.push(Tok::Word(s, star)),
                }
            }
        }
    }
    Ok(out)
}

/// Parses `q`.
pub fn parse(q: &str) -> Result<Node, ParseError> {
    let err = |detail: String| ParseError {
        query: q.to_string(),
        detail,
    };
    let toks = lex(q).map_err(err)?;
    let mut p = Parser { toks, at: 0 };
    let node = p.query(None).map_err(err)?;
    if p.at < p.toks.len() {
        return Err(err(format!(
            "Encountered \"{}\" at token {}",
            p.describe(),
            p.at + 1
        )));
    }
    Ok(node)
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
}

enum Conj {
    None,
    And,
    Or,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn describe(&self) -> String {
        match self.peek() {
            None => "<EOF>".into(),
            Some(t) => format!("{t:?}"),
        }
    }

    /// Clauses up to `)` or the end, combined as Lucene's classic parser
    /// combines them.
    fn query(&mut self, field: Option<&str>) -> Result<Node, String> {
        let mut clauses: Vec<(Occur, Node)> = Vec::new();
        let mut first = true;
        loop {
            match self.peek() {
                None | Some(Tok::RParen) => break,
                _ => {}
            }
            let conj = match self.peek() {
                Some(Tok::And) if !first => {
                    self.at += 1;
                    Conj::And
                }
                Some(Tok::Or) if !first => {
                    self.at += 1;
                    Conj::Or
                }
                Some(Tok::And | Tok::Or) => {
                    return Err(format!("Encountered \"{}\" at the start", self.describe()))
                }
                _ => Conj::None,
            };
            let modifier = match self.peek() {
                Some(Tok::Plus) => {
                    self.at += 1;
                    Some(Occur::Must)
                }
                Some(Tok::Minus | Tok::Not) => {
                    self.at += 1;
                    Some(Occur::MustNot)
                }
                _ => None,
            };
            let node = self.clause(field)?;
            // Lucene's addClause: a conjunction changes the clause before.
            if let Some(last) = clauses.last_mut() {
                match conj {
                    Conj::And if last.0 == Occur::Should => last.0 = Occur::Must,
                    _ => {}
                }
            }
            let occur = match (modifier, &conj) {
                (Some(Occur::MustNot), _) => Occur::MustNot,
                (Some(Occur::Must), _) => Occur::Must,
                (_, Conj::And) => Occur::Must,
                _ => Occur::Should,
            };
            clauses.push((occur, node));
            first = false;
        }
        match clauses.len() {
            0 => Err("Encountered \"<EOF>\": a query needs a clause".into()),
            1 if clauses[0].0 != Occur::MustNot => Ok(clauses.pop().map(|c| c.1).expect("one")),
            _ => Ok(Node::Bool(clauses)),
        }
    }

    /// One clause: `field:` something, a group, or a term.
    fn clause(&mut self, field: Option<&str>) -> Result<Node, String> {
        let mut field = field.map(str::to_string);
        if let (Some(Tok::Word(w, _)), Some(Tok::Colon)) =
            (self.toks.get(self.at), self.toks.get(self.at + 1))
        {
            let w = w.clone();
            self.at += 2;
            if w == "*" {
                if let Some(Tok::Word(v, _)) = self.peek() {
                    if v == "*" {
                        self.at += 1;
                        return self.boosted(Node::All);
                    }
                }
            }
            field = Some(w);
        }
        let node = match self.next() {
            Some(Tok::LParen) => {
                let inner = self.query(field.as_deref())?;
                match self.next() {
                    Some(Tok::RParen) => inner,
                    _ => return Err("Encountered \"<EOF>\": expected \")\"".into()),
                }
            }
            Some(Tok::Quoted(text)) => {
                let slop = match self.peek() {
                    Some(Tok::Tilde(n)) => {
                        let n = n.unwrap_or(0.0);
                        self.at += 1;
                        n as u32
                    }
                    _ => 0,
                };
                Node::Phrase { field, text, slop }
            }
            Some(Tok::LBracket(incl)) => self.range(field, incl)?,
            Some(Tok::Word(text, star)) => match self.peek() {
                Some(Tok::Tilde(n)) => {
                    let d = n.map_or(2.0, |n| if n >= 1.0 { n } else { 2.0 });
                    self.at += 1;
                    Node::Fuzzy {
                        field,
                        text,
                        distance: d.clamp(0.0, 2.0) as u8,
                    }
                }
                _ if text.len() >= 2 && text.starts_with('/') && text.ends_with('/') => {
                    Node::Regex {
                        field,
                        pattern: text[1..text.len() - 1].to_string(),
                    }
                }
                _ if text == "*" => Node::Prefix {
                    field,
                    text: String::new(),
                },
                _ if star => Node::Prefix {
                    field,
                    text: text[..text.len() - 1].to_string(),
                },
                _ => Node::Term { field, text },
            },
            other => {
                return Err(format!(
                    "Encountered \"{}\"",
                    other.map_or_else(|| "<EOF>".to_string(), |t| format!("{t:?}"))
                ))
            }
        };
        self.boosted(node)
    }

    fn boosted(&mut self, node: Node) -> Result<Node, String> {
        if let Some(Tok::Caret(b)) = self.peek() {
            let b = *b;
            self.at += 1;
            return Ok(Node::Boost(Box::new(node), b));
        }
        Ok(node)
    }

    fn range(&mut self, field: Option<String>, lower_incl: bool) -> Result<Node, String> {
        let end = |t: Option<Tok>| -> Result<(String, bool), String> {
            match t {
                Some(Tok::Word(w, _)) => Ok((w, false)),
                Some(Tok::Quoted(w)) => Ok((w, true)),
                // A negative number's sign was lexed apart.
                other => Err(format!("Encountered {other:?} in a range")),
            }
        };
        let signed = |p: &mut Parser| -> Result<(String, bool), String> {
            if p.peek() == Some(&Tok::Minus) {
                p.at += 1;
                let (w, q) = end(p.next())?;
                return Ok((format!("-{w}"), q));
            }
            end(p.next())
        };
        let (lo, lo_quoted) = signed(self)?;
        if self.next() != Some(Tok::To) {
            return Err("Encountered a range without TO".into());
        }
        let (hi, hi_quoted) = signed(self)?;
        let upper_incl = match self.next() {
            Some(Tok::RBracket(incl)) => incl,
            _ => return Err("Encountered an unterminated range".into()),
        };
        let bound = |v: String, quoted: bool, incl: bool| {
            if v == "*" && !quoted {
                Bound::Open
            } else if incl {
                Bound::Included(v)
            } else {
                Bound::Excluded(v)
            }
        };
        Ok(Node::Range {
            field,
            lower: bound(lo, lo_quoted, lower_incl),
            upper: bound(hi, hi_quoted, upper_incl),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(f: Option<&str>, s: &str) -> Node {
        Node::Term {
            field: f.map(str::to_string),
            text: s.into(),
        }
    }

    #[test]
    fn terms_fields_and_phrases() {
        assert_eq!(parse("foo").unwrap(), t(None, "foo"));
        assert_eq!(parse("title:foo").unwrap(), t(Some("title"), "foo"));
        assert_eq!(parse("*:*").unwrap(), Node::All);
        assert_eq!(
            parse("title:\"a b\"~2").unwrap(),
            Node::Phrase {
                field: Some("title".into()),
                text: "a b".into(),
                slop: 2
            }
        );
        assert_eq!(
            parse("l*").unwrap(),
            Node::Prefix {
                field: None,
                text: "l".into()
            }
        );
        assert_eq!(parse(r"a\:b").unwrap(), t(None, "a:b"));
        assert_eq!(parse("foo-bar").unwrap(), t(None, "foo-bar"));
    }

    #[test]
    fn boolean_combination_is_lucenes() {
        use Occur::*;
        assert_eq!(
            parse("a AND b").unwrap(),
            Node::Bool(vec![(Must, t(None, "a")), (Must, t(None, "b"))])
        );
        assert_eq!(
            parse("a OR b").unwrap(),
            Node::Bool(vec![(Should, t(None, "a")), (Should, t(None, "b"))])
        );
        assert_eq!(
            parse("a b -c +d").unwrap(),
            Node::Bool(vec![
                (Should, t(None, "a")),
                (Should, t(None, "b")),
                (MustNot, t(None, "c")),
                (Must, t(None, "d"))
            ])
        );
        assert_eq!(
            parse("a AND NOT b").unwrap(),
            Node::Bool(vec![(Must, t(None, "a")), (MustNot, t(None, "b"))])
        );
        assert_eq!(
            parse("x:(a OR b) AND c").unwrap(),
            Node::Bool(vec![
                (
                    Must,
                    Node::Bool(vec![
                        (Should, t(Some("x"), "a")),
                        (Should, t(Some("x"), "b"))
                    ])
                ),
                (Must, t(None, "c"))
            ])
        );
        assert_eq!(
            parse("NOT a").unwrap(),
            Node::Bool(vec![(MustNot, t(None, "a"))])
        );
    }

    #[test]
    fn ranges() {
        assert_eq!(
            parse("n:[1 TO 5}").unwrap(),
            Node::Range {
                field: Some("n".into()),
                lower: Bound::Included("1".into()),
                upper: Bound::Excluded("5".into())
            }
        );
        assert_eq!(
            parse("n:[-Infinity TO -2.5]").unwrap(),
            Node::Range {
                field: Some("n".into()),
                lower: Bound::Included("-Infinity".into()),
                upper: Bound::Included("-2.5".into())
            }
        );
        assert_eq!(
            parse("n:{* TO 3]").unwrap(),
            Node::Range {
                field: Some("n".into()),
                lower: Bound::Open,
                upper: Bound::Included("3".into())
            }
        );
    }

    #[test]
    fn malformed_queries_are_errors() {
        for q in [
            "", "(", "a AND", "title:(a", "\"open", "n:[1 TO", "n:[1 5]", "AND a", "a^", ")",
        ] {
            let e = parse(q).expect_err(q);
            assert!(e.to_string().starts_with(&format!("Cannot parse '{q}'")));
        }
    }

    /// Generated: any conjunction of field terms parses to a boolean of
    /// exactly those terms, each required (or prohibited) as written.
    #[test]
    fn generated_conjunctions_keep_every_clause() {
        let words = ["alpha", "beta", "gamma", "delta", "e1", "z9"];
        let mut seed = 7u64;
        for _ in 0..300 {
            let n = 2 + (seed % 4) as usize;
            let mut q = String::new();
            let mut want = Vec::new();
            for i in 0..n {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let w = words[(seed >> 33) as usize % words.len()];
                let neg = i > 0 && (seed >> 20).is_multiple_of(3);
                if i > 0 {
                    q.push_str(" AND ");
                }
                if neg {
                    q.push_str("NOT ");
                }
                q.push_str(&format!("f{i}:{w}"));
                want.push((
                    if neg { Occur::MustNot } else { Occur::Must },
                    t(Some(&format!("f{i}")), w),
                ));
            }
            assert_eq!(parse(&q).unwrap(), Node::Bool(want), "{q}");
        }
    }
}
