//! The parts of Erlang's semantics that CouchDB's built-in reductions show
//! to users: number arithmetic (exact integers, floats that may not
//! overflow), how error messages print terms (`io_lib:format`'s `~w` and
//! `~p`), and the external term size that `_sum`'s `reduce_limit` check
//! measures.
//!
//! JSON values are seen as CouchDB decodes them: `null`/`true`/`false` are
//! atoms, strings binaries, arrays lists, and an object is `{Members}`, a
//! one-element tuple holding a list of `{Name, Value}` tuples.
//!
//! **Invariant:** for the terms built here (no atoms other than
//! `null`/`true`/`false`, no tagged tuples, records or maps) the printers
//! produce the bytes OTP 25.2's `io_lib:format` produces (the OTP shipped
//! with CouchDB 3.4.3); the tests hold cases recorded from it.

use std::cmp::Ordering;

use serde_json::{Number, Value};

/// An Erlang number: integers are exact (here up to `i128`; Erlang's are
/// unbounded), floats are finite.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Num {
    Int(i128),
    Float(f64),
}

/// An Erlang runtime error that CouchDB's reducer lets escape (HTTP 500
/// with the error's name).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Crash {
    pub error: &'static str,
    pub reason: String,
}

impl Num {
    pub fn from_json(n: &Number) -> Num {
        if let Some(u) = n.as_u64() {
            Num::Int(i128::from(u))
        } else if let Some(i) = n.as_i64() {
            Num::Int(i128::from(i))
        } else {
            Num::Float(n.as_f64().unwrap_or(0.0))
        }
    }

    /// The JSON number. Integers beyond 64 bits (which Erlang keeps exact)
    /// become the nearest float: `serde_json` has no wider integers.
    pub fn to_json(self) -> Value {
        match self {
            Num::Int(i) => {
                if let Ok(u) = u64::try_from(i) {
                    Value::from(u)
                } else if let Ok(s) = i64::try_from(i) {
                    Value::from(s)
                } else {
                    Value::from(i as f64)
                }
            }
            Num::Float(f) => Value::from(f),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    pub fn add(self, other: Num) -> Result<Num, Crash> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Ok(a
                .checked_add(b)
                .map_or_else(|| Num::Float(a as f64 + b as f64), Num::Int)),
            _ => float_result(self.as_f64() + other.as_f64(), "+", self, other),
        }
    }

    pub fn mul(self, other: Num) -> Result<Num, Crash> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Ok(a
                .checked_mul(b)
                .map_or_else(|| Num::Float(a as f64 * b as f64), Num::Int)),
            _ => float_result(self.as_f64() * other.as_f64(), "*", self, other),
        }
    }

    /// Comparison by value, exact across integers and floats.
    pub fn cmp_value(self, other: Num) -> Ordering {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a.cmp(&b),
            (Num::Float(f), Num::Float(g)) => f.partial_cmp(&g).unwrap_or(Ordering::Equal),
            (Num::Int(i), Num::Float(f)) => compare_int_float(i, f),
            (Num::Float(f), Num::Int(i)) => compare_int_float(i, f).reverse(),
        }
    }

    /// `erlang:min/2`: the first argument when they compare equal.
    pub fn min(self, other: Num) -> Num {
        if other.cmp_value(self) == Ordering::Less {
            other
        } else {
            self
        }
    }

    /// `erlang:max/2`: the first argument when they compare equal.
    pub fn max(self, other: Num) -> Num {
        if other.cmp_value(self) == Ordering::Greater {
            other
        } else {
            self
        }
    }

    pub fn is_int_zero(self) -> bool {
        self == Num::Int(0)
    }
}

/// Erlang floats cannot be infinite or NaN: the operation fails instead.
fn float_result(f: f64, op: &str, a: Num, b: Num) -> Result<Num, Crash> {
    if f.is_finite() {
        Ok(Num::Float(f))
    } else {
        let args = Term::List(vec![Term::Num(a), Term::Num(b)]);
        Err(Crash {
            error: "badarith",
            reason: format!("[{{erlang,'{op}',{}}}]", write(&args)),
        })
    }
}

fn compare_int_float(i: i128, f: f64) -> Ordering {
    let whole = f.trunc();
    let whole_int = whole as i128;
    i.cmp(&whole_int)
        .then_with(|| 0.0_f64.partial_cmp(&(f - whole)).unwrap_or(Ordering::Equal))
}

/// The Erlang terms CouchDB's reducers print.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Term<'a> {
    Atom(&'static str),
    Num(Num),
    Bin(&'a [u8]),
    List(Vec<Term<'a>>),
    Tuple(Vec<Term<'a>>),
}

impl<'a> Term<'a> {
    pub fn from_json(v: &'a Value) -> Term<'a> {
        match v {
            Value::Null => Term::Atom("null"),
            Value::Bool(true) => Term::Atom("true"),
            Value::Bool(false) => Term::Atom("false"),
            Value::Number(n) => Term::Num(Num::from_json(n)),
            Value::String(s) => Term::Bin(s.as_bytes()),
            Value::Array(items) => Term::List(items.iter().map(Term::from_json).collect()),
            Value::Object(members) => Term::Tuple(vec![Term::proplist(members.iter())]),
        }
    }

    /// `[{Name, Value}, ...]`, the inside of an object.
    pub fn proplist(members: impl Iterator<Item = (&'a String, &'a Value)>) -> Term<'a> {
        Term::List(
            members
                .map(|(k, v)| Term::Tuple(vec![Term::Bin(k.as_bytes()), Term::from_json(v)]))
                .collect(),
        )
    }
}

// ---------------------------------------------------------------------------
// ~w: io_lib:write
// ---------------------------------------------------------------------------

/// `io_lib:format("~w", [Term])`.
pub(crate) fn write(term: &Term<'_>) -> String {
    let mut out = String::new();
    write_into(term, &mut out);
    out
}

fn write_into(term: &Term<'_>, out: &mut String) {
    match term {
        Term::Atom(a) => out.push_str(a),
        Term::Num(n) => out.push_str(&format_num(*n)),
        Term::Bin(bytes) => {
            out.push_str("<<");
            for (i, b) in bytes.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&b.to_string());
            }
            out.push_str(">>");
        }
        Term::List(items) => write_seq(items, '[', ']', out),
        Term::Tuple(items) => write_seq(items, '{', '}', out),
    }
}

fn write_seq(items: &[Term<'_>], open: char, close: char, out: &mut String) {
    out.push(open);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_into(item, out);
    }
    out.push(close);
}

fn format_num(n: Num) -> String {
    match n {
        Num::Int(i) => i.to_string(),
        Num::Float(f) => format_float(f),
    }
}

/// Erlang's shortest float form (`io_lib:write/1`, `float_to_list(F,
/// [short])`): the shortest digits that read back as `f`, written in plain
/// notation (always with a `.`) unless scientific notation is shorter, or
/// the float is an integer of 2^53 or more.
pub(crate) fn format_float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let sign = if f < 0.0 { "-" } else { "" };
    // Rust's `{:e}` is the shortest round-trip form: "d.ddde±x".
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` has an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` exponent is an integer");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let len = digits.len() as i32;
    // value = digits * 10^place
    let place = exp - (len - 1);
    let scientific = if len == 1 {
        format!("{digits}.0e{exp}")
    } else {
        format!("{}.{}e{exp}", &digits[..1], &digits[1..])
    };
    let plain = if place < 0 {
        if exp >= 0 {
            let point = (len + place) as usize;
            Some(format!("{}.{}", &digits[..point], &digits[point..]))
        } else {
            let fixed = format!("0.{}{digits}", "0".repeat((-exp - 1) as usize));
            (fixed.len() <= scientific.len()).then_some(fixed)
        }
    } else {
        let fixed = format!("{digits}{}.0", "0".repeat(place as usize));
        (fixed.len() <= scientific.len() && f.abs() < 9007199254740992.0).then_some(fixed)
    };
    format!("{sign}{}", plain.unwrap_or(scientific))
}

// ---------------------------------------------------------------------------
// ~p: io_lib_pretty
// ---------------------------------------------------------------------------

/// The line length `~p` fills.
const LINE_LENGTH: usize = 80;

/// `io_lib:format("~p", [Term])` when the text before `~p` on its line is
/// `column - 1` characters long (Erlang counts columns from 1).
pub(crate) fn pretty(term: &Term<'_>, column: usize) -> Vec<u8> {
    let layout = Layout::of(term);
    let mut out = Vec::new();
    let ll = LINE_LENGTH as isize;
    let col = column as isize;
    if (layout.len as isize) < ll - col {
        layout.write(&mut out);
    } else {
        let mut p = Printer {
            out: &mut out,
            max: layout.len as isize,
        };
        let indent = " ".repeat(column.saturating_sub(1));
        p.pp(&layout, col, &indent, 0, 0);
    }
    out
}

/// `io_lib_pretty`'s intermediate form: each term with its one-line length.
struct Layout {
    kind: Kind,
    len: usize,
}

enum Kind {
    /// Text printed as-is; io_lib_pretty may put several on one line.
    Flat(Vec<u8>),
    List(Vec<Layout>),
    Tuple(Vec<Layout>),
    /// A binary printed as numbers, which may wrap between bytes.
    Bytes(Vec<String>),
}

impl Layout {
    fn of(term: &Term<'_>) -> Layout {
        match term {
            Term::Atom(a) => Layout::flat(a.as_bytes().to_vec()),
            Term::Num(n) => Layout::flat(format_num(*n).into_bytes()),
            Term::List(items) if items.is_empty() => Layout::flat(b"[]".to_vec()),
            Term::List(items) => match printable_list(items) {
                Some(chars) => Layout::flat(quote_latin1(&chars)),
                None => Layout::seq(items, Kind::List),
            },
            Term::Tuple(items) if items.is_empty() => Layout::flat(b"{}".to_vec()),
            Term::Tuple(items) => Layout::seq(items, Kind::Tuple),
            Term::Bin([]) => Layout::flat(b"<<>>".to_vec()),
            Term::Bin(bytes) if bytes.iter().all(|&b| is_printable_latin1(b)) => {
                let mut text = b"<<".to_vec();
                text.extend(quote_latin1(bytes));
                text.extend_from_slice(b">>");
                Layout::flat(text)
            }
            Term::Bin(bytes) => {
                let parts: Vec<String> = bytes.iter().map(u8::to_string).collect();
                let len = 4 + parts.iter().map(String::len).sum::<usize>() + parts.len() - 1;
                Layout {
                    kind: Kind::Bytes(parts),
                    len,
                }
            }
        }
    }

    fn flat(text: Vec<u8>) -> Layout {
        Layout {
            len: text.len(),
            kind: Kind::Flat(text),
        }
    }

    fn seq(items: &[Term<'_>], make: fn(Vec<Layout>) -> Kind) -> Layout {
        let children: Vec<Layout> = items.iter().map(Layout::of).collect();
        let len = 2 + children.iter().map(|c| c.len).sum::<usize>() + children.len() - 1;
        Layout {
            kind: make(children),
            len,
        }
    }

    /// Flat text: `io_lib_pretty`'s `?ATM`, what may share a line.
    fn is_atomic(&self) -> bool {
        matches!(self.kind, Kind::Flat(_))
    }

    fn write(&self, out: &mut Vec<u8>) {
        match &self.kind {
            Kind::Flat(text) => out.extend_from_slice(text),
            Kind::List(items) => Layout::write_seq(items, b'[', b']', out),
            Kind::Tuple(items) => Layout::write_seq(items, b'{', b'}', out),
            Kind::Bytes(parts) => {
                out.extend_from_slice(b"<<");
                out.extend_from_slice(parts.join(",").as_bytes());
                out.extend_from_slice(b">>");
            }
        }
    }

    fn write_seq(items: &[Layout], open: u8, close: u8, out: &mut Vec<u8>) {
        out.push(open);
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            item.write(out);
        }
        out.push(close);
    }
}

/// The characters of a list `~p` prints as a string: a non-empty list of
/// printable Latin-1 character codes.
fn printable_list(items: &[Term<'_>]) -> Option<Vec<u8>> {
    items
        .iter()
        .map(|item| match item {
            Term::Num(Num::Int(c)) => u8::try_from(*c).ok().filter(|&b| is_printable_latin1(b)),
            _ => None,
        })
        .collect()
}

/// `io_lib:printable_latin1_list/1`'s characters.
fn is_printable_latin1(c: u8) -> bool {
    matches!(c, 0x20..=0x7e | 0xa0..=0xff | b'\n' | b'\r' | b'\t' | 0x0b | 0x08 | 0x0c | 0x1b)
}

/// `io_lib:write_string/2` of printable Latin-1 characters, quoted.
fn quote_latin1(chars: &[u8]) -> Vec<u8> {
    let mut out = vec![b'"'];
    for &c in chars {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x0b => out.extend_from_slice(b"\\v"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0x1b => out.extend_from_slice(b"\\e"),
            c => out.push(c),
        }
    }
    out.push(b'"');
    out
}

/// The layout algorithm of `io_lib_pretty:pp/8` for lists, untagged tuples
/// and binaries. Columns are 1-based; `max` is the `M` of io_lib_pretty
/// (with no `chars_limit`, the term's one-line length).
struct Printer<'o> {
    out: &'o mut Vec<u8>,
    max: isize,
}

/// After the last element come the closing brackets: their count is the
/// "last depth"; with more elements, a comma follows instead.
fn last_depth(more: bool, ld: isize) -> isize {
    if more {
        0
    } else {
        ld + 1
    }
}

impl Printer<'_> {
    fn fits(&self, l: &Layout, col: isize, ld: isize, w: isize) -> bool {
        let len = l.len as isize;
        len < LINE_LENGTH as isize - col - ld && len + w + ld <= self.max
    }

    fn pp(&mut self, l: &Layout, col: isize, indent: &str, ld: isize, w: isize) {
        if self.fits(l, col, ld, w) {
            l.write(self.out);
            return;
        }
        match &l.kind {
            Kind::List(items) => {
                self.out.push(b'[');
                self.pp_list(items, col + 1, &format!("{indent} "), ld, w + 1);
                self.out.push(b']');
            }
            Kind::Tuple(items) => {
                self.out.push(b'{');
                self.pp_list(items, col + 1, &format!("{indent} "), ld, w + 1);
                self.out.push(b'}');
            }
            Kind::Bytes(parts) => self.pp_bytes(parts, col + 2, &format!("{indent}  "), ld, w),
            Kind::Flat(text) => self.out.extend_from_slice(text),
        }
    }

    fn pp_list(&mut self, items: &[Layout], col0: isize, indent: &str, ld: isize, w: isize) {
        let Some((first, rest)) = items.split_first() else {
            return;
        };
        let first_width = self.pp_element(first, col0, indent, last_depth(!rest.is_empty(), ld), w);
        let mut col = col0 + first_width;
        let mut w = w + first_width;
        for (i, item) in rest.iter().enumerate() {
            let ld1 = last_depth(i + 1 < rest.len(), ld);
            let elen = 1 + item.len as isize;
            let room = LINE_LENGTH as isize - col;
            let same_line = item.is_atomic()
                && if ld1 == 0 {
                    elen + 1 < room && w + elen < self.max
                } else {
                    elen < room - ld1 && w + elen + ld1 <= self.max
                };
            if same_line {
                self.out.push(b',');
                item.write(self.out);
                col += elen;
                w += elen;
            } else {
                self.out.push(b',');
                self.out.push(b'\n');
                self.out.extend_from_slice(indent.as_bytes());
                let width = self.pp_element(item, col0, indent, ld1, 0);
                col = col0 + width;
                w = width;
            }
        }
    }

    /// Prints one element; returns its width, or the line length to force
    /// the next element onto a new line.
    fn pp_element(&mut self, l: &Layout, col: isize, indent: &str, ld: isize, w: isize) -> isize {
        if self.fits(l, col, ld, w) && l.is_atomic() {
            l.write(self.out);
            l.len as isize
        } else {
            self.pp(l, col, indent, ld, w);
            LINE_LENGTH as isize
        }
    }

    /// `io_lib_pretty:pp_binary/7`: bytes fill lines of at least 8 columns.
    fn pp_bytes(&mut self, parts: &[String], col: isize, indent: &str, ld: isize, w: isize) {
        let n0 = 8.max((LINE_LENGTH as isize - col).min(self.max - 4 - w) - ld);
        let mut n = n0;
        self.out.extend_from_slice(b"<<");
        for (i, part) in parts.iter().enumerate() {
            if i + 1 < parts.len() {
                let len = part.len() as isize + 1;
                if n - len < 0 {
                    self.out.push(b'\n');
                    self.out.extend_from_slice(indent.as_bytes());
                    n = n0 - len;
                } else {
                    n -= len;
                }
                self.out.extend_from_slice(part.as_bytes());
                self.out.push(b',');
            } else {
                if part.len() as isize > n {
                    self.out.push(b'\n');
                    self.out.extend_from_slice(indent.as_bytes());
                }
                self.out.extend_from_slice(part.as_bytes());
            }
        }
        self.out.extend_from_slice(b">>");
    }
}

/// `couch_util:to_binary/1` of a term, as CouchDB puts an error's reason
/// into a response: a list that is an iolist as its bytes, anything else
/// as `~p`.
pub(crate) fn to_binary(term: &Term<'_>) -> String {
    fn iolist(term: &Term<'_>, out: &mut Vec<u8>) -> bool {
        match term {
            Term::Num(Num::Int(i)) => u8::try_from(*i).map(|b| out.push(b)).is_ok(),
            Term::Bin(bytes) => {
                out.extend_from_slice(bytes);
                true
            }
            Term::List(items) => items.iter().all(|item| iolist(item, out)),
            _ => false,
        }
    }
    let bytes = match term {
        Term::Bin(bytes) => bytes.to_vec(),
        Term::Atom(a) => a.as_bytes().to_vec(),
        Term::List(_) => {
            let mut out = Vec::new();
            if iolist(term, &mut out) {
                out
            } else {
                pretty(term, 1)
            }
        }
        _ => pretty(term, 1),
    };
    String::from_utf8_lossy(&bytes).into_owned()
}

// ---------------------------------------------------------------------------
// External term format size
// ---------------------------------------------------------------------------

/// `erlang:external_size/1`: the size of the term in Erlang's external
/// term format, version byte included.
pub(crate) fn external_size(term: &Term<'_>) -> usize {
    1 + encoded_size(term)
}

fn encoded_size(term: &Term<'_>) -> usize {
    match term {
        // ATOM_EXT
        Term::Atom(a) => 3 + a.len(),
        Term::Num(Num::Int(i)) => {
            if (0..=255).contains(i) {
                2 // SMALL_INTEGER_EXT
            } else if i32::try_from(*i).is_ok() {
                5 // INTEGER_EXT
            } else {
                // SMALL_BIG_EXT: tag, length, sign, little-endian digits.
                let magnitude = i.unsigned_abs();
                3 + (128 - magnitude.leading_zeros() as usize).div_ceil(8)
            }
        }
        // NEW_FLOAT_EXT
        Term::Num(Num::Float(_)) => 9,
        // BINARY_EXT
        Term::Bin(bytes) => 5 + bytes.len(),
        // NIL_EXT
        Term::List(items) if items.is_empty() => 1,
        Term::List(items) => {
            let bytes_only = items.len() < 65536
                && items
                    .iter()
                    .all(|t| matches!(t, Term::Num(Num::Int(0..=255))));
            if bytes_only {
                3 + items.len() // STRING_EXT
            } else {
                // LIST_EXT, elements, NIL_EXT tail
                5 + items.iter().map(encoded_size).sum::<usize>() + 1
            }
        }
        Term::Tuple(items) => {
            let header = if items.len() < 256 { 2 } else { 5 };
            header + items.iter().map(encoded_size).sum::<usize>()
        }
    }
}
