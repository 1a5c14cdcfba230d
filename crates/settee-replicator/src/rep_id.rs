//! Replication ids as CouchDB 3 computes them (its version 4), so that a
//! replication Settee runs finds the checkpoints CouchDB's replicator left
//! on the same two databases, and the other way round, when both servers
//! share a server uuid.
//!
//! CouchDB hashes (MD5) an Erlang term: `[ServerUuid, SourceInfo,
//! TargetInfo | Filter]`, each endpoint as `{remote, User, Host, Port,
//! Path, Headers, undefined}` (`Port` is the atom `default` for http on
//! 80 or 5984 and https on 443; `Path` keeps the trailing slash CouchDB
//! adds; `Headers` are the endpoint's own headers without Basic auth), in
//! Erlang's external term format as OTP 25 writes it (atoms as `ATOM_EXT`).
//! The id is its hex digest; `+continuous` and `+create_target` are
//! appended for the job's full id. Checked against CouchDB 3.4.3's own ids
//! in the tests below.
//!
//! Invariant: the encoding is a pure function of the replication's
//! definition; credentials other than the user name never enter it.

use md5::{Digest, Md5};
use serde_json::Value;

/// An Erlang term, as far as replication ids need one.
#[derive(Debug, Clone, PartialEq)]
pub enum Term {
    Atom(&'static str),
    /// A binary (`<<"…">>`): JSON strings, the server uuid, filter code.
    Bin(Vec<u8>),
    /// A string (a list of bytes): URL parts, header names and values.
    Str(String),
    Int(i64),
    Float(f64),
    Tuple(Vec<Term>),
    List(Vec<Term>),
}

impl Term {
    /// A JSON value as CouchDB holds it (EJSON): objects are `{[{K, V}…]}`,
    /// strings binaries, `true`/`false`/`null` atoms.
    pub fn from_json(v: &Value) -> Term {
        match v {
            Value::Null => Term::Atom("null"),
            Value::Bool(true) => Term::Atom("true"),
            Value::Bool(false) => Term::Atom("false"),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Term::Int(i),
                None => Term::Float(n.as_f64().unwrap_or(0.0)),
            },
            Value::String(s) => Term::Bin(s.as_bytes().to_vec()),
            Value::Array(a) => Term::List(a.iter().map(Term::from_json).collect()),
            Value::Object(o) => Term::Tuple(vec![Term::List(
                o.iter()
                    .map(|(k, v)| {
                        Term::Tuple(vec![Term::Bin(k.as_bytes().to_vec()), Term::from_json(v)])
                    })
                    .collect(),
            )]),
        }
    }

    /// Erlang's external term format (`term_to_binary/1`), with its
    /// version byte.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![131];
        self.put(&mut out);
        out
    }

    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Term::Atom(a) => {
                out.push(100);
                out.extend_from_slice(&(a.len() as u16).to_be_bytes());
                out.extend_from_slice(a.as_bytes());
            }
            Term::Bin(b) => {
                out.push(109);
                out.extend_from_slice(&(b.len() as u32).to_be_bytes());
                out.extend_from_slice(b);
            }
            Term::Str(s) if s.is_empty() => out.push(106),
            Term::Str(s) if s.len() <= u16::MAX as usize => {
                out.push(107);
                out.extend_from_slice(&(s.len() as u16).to_be_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Term::Str(s) => Term::List(s.bytes().map(|b| Term::Int(b.into())).collect()).put(out),
            Term::Int(i) if (0..=255).contains(i) => {
                out.push(97);
                out.push(*i as u8);
            }
            Term::Int(i) if i32::try_from(*i).is_ok() => {
                out.push(98);
                out.extend_from_slice(&(*i as i32).to_be_bytes());
            }
            Term::Int(i) => {
                // SMALL_BIG_EXT: digits little-endian, then the sign.
                let mut mag = i.unsigned_abs();
                let mut digits = Vec::new();
                while mag > 0 {
                    digits.push((mag & 0xff) as u8);
                    mag >>= 8;
                }
                out.push(110);
                out.push(digits.len() as u8);
                out.push(u8::from(*i < 0));
                out.extend_from_slice(&digits);
            }
            Term::Float(f) => {
                out.push(70);
                out.extend_from_slice(&f.to_bits().to_be_bytes());
            }
            Term::Tuple(items) if items.len() < 256 => {
                out.push(104);
                out.push(items.len() as u8);
                items.iter().for_each(|t| t.put(out));
            }
            Term::Tuple(items) => {
                out.push(105);
                out.extend_from_slice(&(items.len() as u32).to_be_bytes());
                items.iter().for_each(|t| t.put(out));
            }
            Term::List(items) if items.is_empty() => out.push(106),
            Term::List(items) => {
                out.push(108);
                out.extend_from_slice(&(items.len() as u32).to_be_bytes());
                items.iter().for_each(|t| t.put(out));
                out.push(106);
            }
        }
    }
}

/// One endpoint as it enters the id.
#[derive(Debug, Clone)]
pub struct EndpointInfo {
    /// The user name (from the URL or Basic credentials), if any.
    pub user: Option<String>,
    pub host: String,
    /// `None` for the scheme's default port (and 5984 over http).
    pub port: Option<u16>,
    /// The URL's path with CouchDB's trailing slash (`/db/`).
    pub path: String,
    /// The endpoint's own headers, without Basic authorization.
    pub headers: Vec<(String, String)>,
}

impl EndpointInfo {
    /// From a database URL (without credentials) and the user name.
    pub fn new(url: &url::Url, user: Option<&str>, headers: &[(String, String)]) -> EndpointInfo {
        let port = match (url.scheme(), url.port_or_known_default()) {
            ("http", Some(80 | 5984)) | ("https", Some(443)) => None,
            (_, p) => p,
        };
        let mut path = url.path().to_string();
        if !path.ends_with('/') && url.query().is_none() {
            path.push('/');
        }
        EndpointInfo {
            user: user.map(str::to_string),
            host: url.host_str().unwrap_or_default().to_string(),
            port,
            path,
            headers: headers
                .iter()
                .filter(|(k, v)| {
                    !(k.eq_ignore_ascii_case("authorization")
                        && v.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("basic ")))
                })
                .cloned()
                .collect(),
        }
    }

    fn term(&self) -> Term {
        Term::Tuple(vec![
            Term::Atom("remote"),
            self.user.clone().map_or(Term::Atom("undefined"), Term::Str),
            Term::Str(self.host.clone()),
            self.port
                .map_or(Term::Atom("default"), |p| Term::Int(p.into())),
            Term::Str(self.path.clone()),
            Term::List(
                self.headers
                    .iter()
                    .map(|(k, v)| Term::Tuple(vec![Term::Str(k.clone()), Term::Str(v.clone())]))
                    .collect(),
            ),
            Term::Atom("undefined"),
        ])
    }
}

/// What a replication's filter adds to its id.
#[derive(Debug, Clone)]
pub enum FilterPart {
    None,
    DocIds(Vec<String>),
    Selector(Value),
    /// A JavaScript filter: its source code and the query parameters.
    Code {
        code: String,
        query_params: Value,
    },
    /// The `_view` filter: its name and query parameters.
    View {
        name: String,
        query_params: Value,
    },
}

/// A client database handle as it enters the id (its URL, the user of its
/// credentials, its headers) — what `_replicate` with that URL computes.
pub fn db_info(db: &settee_client::Db) -> EndpointInfo {
    EndpointInfo::new(
        db.url(),
        db.credentials().map(|c| c.user.as_str()),
        db.headers(),
    )
}

/// The base replication id (32 hex digits): the `_local/` checkpoint id.
pub fn base_id(
    server_uuid: &str,
    src: &EndpointInfo,
    dst: &EndpointInfo,
    filter: &FilterPart,
) -> String {
    let mut parts = vec![
        Term::Bin(server_uuid.as_bytes().to_vec()),
        src.term(),
        dst.term(),
    ];
    match filter {
        FilterPart::None => {}
        FilterPart::DocIds(ids) => parts.push(Term::List(
            ids.iter()
                .map(|i| Term::Bin(i.as_bytes().to_vec()))
                .collect(),
        )),
        FilterPart::Selector(s) => parts.push(Term::from_json(s)),
        FilterPart::Code { code, query_params } => {
            parts.push(Term::Bin(code.as_bytes().to_vec()));
            parts.push(Term::from_json(query_params));
        }
        FilterPart::View { name, query_params } => {
            parts.push(Term::Bin(name.as_bytes().to_vec()));
            parts.push(Term::from_json(query_params));
        }
    }
    hex::encode(Md5::digest(Term::List(parts).encode()))
}

/// The job's full id: the base id with `+continuous` and `+create_target`.
pub fn full_id(base: &str, continuous: bool, create_target: bool) -> String {
    let mut id = base.to_string();
    if continuous {
        id.push_str("+continuous");
    }
    if create_target {
        id.push_str("+create_target");
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(url: &str, user: Option<&str>) -> EndpointInfo {
        EndpointInfo::new(&url::Url::parse(url).unwrap(), user, &[])
    }

    /// Recorded from CouchDB 3.4.3 (server uuid cfca7405…): POST
    /// /_replicate {"source":"http://admin:admin@127.0.0.1:5990/rsrc",
    /// "target":"http://admin:admin@127.0.0.1:5990/rdst"} checkpointed in
    /// `_local/ed21ced4a74ec568eee142ab49ac2b9c`.
    #[test]
    fn as_couchdb_computes_it() {
        let id = base_id(
            "cfca74055263a47987d6b95994ca0d31",
            &info("http://127.0.0.1:5990/rsrc", Some("admin")),
            &info("http://127.0.0.1:5990/rdst", Some("admin")),
            &FilterPart::None,
        );
        assert_eq!(id, "ed21ced4a74ec568eee142ab49ac2b9c");
        assert_eq!(
            full_id(&id, true, true),
            "ed21ced4a74ec568eee142ab49ac2b9c+continuous+create_target"
        );
    }

    #[test]
    fn default_ports_and_paths() {
        let a = info("http://h:5984/db", None);
        assert_eq!((a.port, a.path.as_str()), (None, "/db/"));
        let b = info("https://h/a%2Fb/", Some("u"));
        assert_eq!((b.port, b.path.as_str()), (None, "/a%2Fb/"));
        assert_eq!(info("https://h:6984/db", None).port, Some(6984));
        let h = EndpointInfo::new(
            &url::Url::parse("http://h/db").unwrap(),
            None,
            &[
                ("Authorization".into(), "Basic eDp5".into()),
                ("X-Token".into(), "t".into()),
            ],
        );
        assert_eq!(h.headers, vec![("X-Token".to_string(), "t".to_string())]);
    }

    #[test]
    fn term_encoding() {
        assert_eq!(Term::Atom("ok").encode(), vec![131, 100, 0, 2, b'o', b'k']);
        assert_eq!(
            Term::Str("ab".into()).encode(),
            vec![131, 107, 0, 2, b'a', b'b']
        );
        assert_eq!(Term::Int(300).encode(), vec![131, 98, 0, 0, 1, 44]);
        assert_eq!(
            Term::Int(1 << 40).encode(),
            vec![131, 110, 6, 0, 0, 0, 0, 0, 0, 1]
        );
        assert_eq!(Term::List(vec![]).encode(), vec![131, 106]);
        assert_eq!(
            Term::from_json(&serde_json::json!({"a": [true]})).encode(),
            vec![
                131, 104, 1, 108, 0, 0, 0, 1, 104, 2, 109, 0, 0, 0, 1, b'a', 108, 0, 0, 0, 1, 100,
                0, 4, b't', b'r', b'u', b'e', 106, 106
            ]
        );
    }

    #[test]
    fn filters_change_the_id() {
        let (s, t) = (info("http://h/a", None), info("http://h/b", None));
        let none = base_id("u", &s, &t, &FilterPart::None);
        let ids = base_id("u", &s, &t, &FilterPart::DocIds(vec!["x".into()]));
        let sel = base_id(
            "u",
            &s,
            &t,
            &FilterPart::Selector(serde_json::json!({"x": 1})),
        );
        assert!(none != ids && ids != sel && none != sel);
        assert_eq!(none.len(), 32);
    }
}
