//! One search index on tantivy: its files, its schema, its updater and
//! the compilation of a parsed query into tantivy's queries.
//!
//! Layout: a tantivy index in a directory of its own (named by the
//! index's signature). Fixed schema, dynamic field names: `_id` (exact,
//! fast: the tie-breaker of every sort), one JSON field per analyzer the
//! index names (`t0`, `t1`, …) for text fields, `s` for string fields
//! (exact tokens, fast: sorts and `counts`), `d` for double fields
//! (numbers, fast: sorts, ranges and `ranges`), and `stored`, the JSON of
//! a document's stored values. A Clouseau-style index (`_search`) has
//! three more: `o`, a copy of each string value (exact, fast: sorts and
//! groups, never searched), and `fs`/`fd`, the strings and numbers
//! indexed with `facet: true` (fast: `counts`, `drilldown`, `ranges`);
//! its `s` holds the strings indexed `not_analyzed` (and booleans). Field
//! names are escaped into JSON paths ([`path_of`]) so no name is read as
//! a nested path.
//!
//! Invariants:
//! - **Consistent with the database.** Every commit carries, as its
//!   payload, the update and purge sequences the index has read up to and
//!   the types each field name was indexed as ([`Meta`]); tantivy commits
//!   a payload atomically with the documents, so after a crash the index
//!   reopens at its last commit and reads the changes after it again
//!   (documents are replaced by id, so reading one twice is harmless).
//! - **One updater at a time** (the update lock); queries read the last
//!   reloaded searcher and never wait for an update they did not ask for.
//! - **Bounded memory:** the writer's heap is [`WRITER_HEAP_PER_THREAD`]
//!   per indexing thread, at most [`WRITER_THREADS_MAX`] threads, and the
//!   writer lives only while an update runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use settee_db::json::{push_doc, Extras};
use settee_db::{Database, GetOptions, Reader};
use settee_js::{DesignDoc, JsEngine};
use settee_views::follow::{Follower, Position};
use settee_views::index::Progress;
use tantivy::query::{
    AllQuery, BooleanQuery, BoostQuery, EmptyQuery, FuzzyTermQuery, InvertedIndexRangeQuery,
    Occur as TOccur, PhrasePrefixQuery, PhraseQuery, Query, RangeQuery, TermQuery,
};
use tantivy::schema::{
    Field as TField, IndexRecordOption, JsonObjectOptions, Schema, TextFieldIndexing, FAST, STORED,
    STRING,
};
use tantivy::{IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use crate::analyzer;
use crate::error::{Result, SearchError};
use crate::fields::{fields_of, native_fields_of, search_fields_of, Field, FieldValue, Kind};
use crate::lucene::{Bound, Node, Occur};
use crate::spec::{Flavor, IndexSpec};

/// Writer heap per indexing thread (tantivy's minimum is 15 MB).
pub const WRITER_HEAP_PER_THREAD: usize = 24 << 20;

/// Most indexing threads of one index's writer.
pub const WRITER_THREADS_MAX: usize = 4;

/// Documents read and indexed per batch (and per commit).
pub const UPDATE_BATCH: usize = 2000;

/// Documents per index-function call at least.
const CALL_CHUNK_MIN: usize = 64;

/// What each commit records beside the documents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub update_seq: u64,
    pub purge_seq: u64,
    /// Field name → the types it was indexed as.
    pub types: BTreeMap<String, BTreeSet<Kind>>,
    /// The names of string fields indexed with `facet: true`
    /// (Clouseau-style indexes).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub facets: BTreeSet<String>,
}

/// The schema's fields.
#[derive(Debug, Clone)]
pub(crate) struct Fields {
    pub id: TField,
    /// The document's partition (partitioned indexes).
    pub partition: TField,
    pub stored: TField,
    pub s: TField,
    pub d: TField,
    /// One text field per analyzer, in [`IndexSpec::analyzers`] order.
    pub texts: Vec<TField>,
    /// Clouseau-style indexes: sort copies of strings, string facets,
    /// number facets.
    pub o: Option<TField>,
    pub fs: Option<TField>,
    pub fd: Option<TField>,
}

/// A field name as a JSON path segment: letters, digits and `_` as they
/// are, every other byte as `~` and two hex digits.
pub fn path_of(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("~{b:02x}"));
        }
    }
    out
}

/// One index and its update lock.
pub struct SearchIndex {
    pub spec: Arc<IndexSpec>,
    dir: PathBuf,
    index: tantivy::Index,
    reader: IndexReader,
    pub(crate) f: Fields,
    meta: RwLock<Meta>,
    update_lock: Mutex<()>,
    pub progress: Progress,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("ddoc", &self.spec.ddoc_id)
            .field("name", &self.spec.name)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn schema(spec: &IndexSpec) -> (Schema, Fields) {
    let mut b = Schema::builder();
    let id = b.add_text_field("_id", STRING | STORED | FAST);
    let partition = b.add_text_field("_partition", STRING);
    let stored = b.add_text_field("stored", STORED);
    let raw = TextFieldIndexing::default()
        .set_tokenizer("raw")
        .set_index_option(IndexRecordOption::Basic);
    let s = b.add_json_field(
        "s",
        JsonObjectOptions::default()
            .set_indexing_options(raw.clone())
            .set_fast("raw"),
    );
    let d = b.add_json_field(
        "d",
        JsonObjectOptions::default()
            .set_indexing_options(raw)
            .set_fast("raw"),
    );
    let clouseau = spec.flavor == Flavor::Clouseau;
    let exact = |b: &mut tantivy::schema::SchemaBuilder, name: &str| {
        b.add_json_field(
            name,
            JsonObjectOptions::default()
                .set_indexing_options(
                    TextFieldIndexing::default()
                        .set_tokenizer("raw")
                        .set_index_option(IndexRecordOption::Basic),
                )
                .set_fast("raw"),
        )
    };
    let o = clouseau.then(|| exact(&mut b, "o"));
    let fs = clouseau.then(|| exact(&mut b, "fs"));
    let fd = clouseau.then(|| exact(&mut b, "fd"));
    let texts = (0..spec.analyzers().len())
        .map(|i| {
            b.add_json_field(
                &format!("t{i}"),
                JsonObjectOptions::default().set_indexing_options(
                    TextFieldIndexing::default()
                        .set_tokenizer(&format!("a{i}"))
                        .set_index_option(IndexRecordOption::WithFreqsAndPositions),
                ),
            )
        })
        .collect();
    (
        b.build(),
        Fields {
            id,
            partition,
            stored,
            s,
            d,
            texts,
            o,
            fs,
            fd,
        },
    )
}

impl SearchIndex {
    /// Opens the index in `dir`, creating it when there is none.
    pub fn open(spec: Arc<IndexSpec>, dir: &Path) -> Result<SearchIndex> {
        std::fs::create_dir_all(dir)?;
        let (schema, f) = schema(&spec);
        let mmap = tantivy::directory::MmapDirectory::open(dir)
            .map_err(|e| SearchError::Index(e.to_string()))?;
        let index = tantivy::Index::open_or_create(mmap, schema)?;
        for (i, name) in spec.analyzers().iter().enumerate() {
            let a = analyzer::build(name).ok_or_else(|| {
                SearchError::BadRequest(format!("{name} is not a valid analyzer"))
            })?;
            index.tokenizers().register(&format!("a{i}"), a);
        }
        let meta = match index.load_metas()?.payload {
            Some(p) => serde_json::from_str(&p)
                .map_err(|e| SearchError::Index(format!("commit payload: {e}")))?,
            None => Meta::default(),
        };
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(SearchIndex {
            spec,
            dir: dir.to_path_buf(),
            index,
            reader,
            f,
            meta: RwLock::new(meta),
            update_lock: Mutex::new(()),
            progress: Progress::default(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the last commit recorded.
    pub fn meta(&self) -> Meta {
        self.meta.read().clone()
    }

    pub fn searcher(&self) -> tantivy::Searcher {
        self.reader.searcher()
    }

    /// Whether an update is running now.
    pub fn updater_running(&self) -> bool {
        self.progress.running.load(Ordering::Relaxed)
    }

    /// The index's files' total size in bytes.
    pub fn disk_size(&self) -> u64 {
        std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Brings the index up to the database's latest state, running the
    /// index function of `ddoc`. Blocking.
    pub fn update(&self, db: &Database, js: &JsEngine, ddoc: &DesignDoc) -> Result<Meta> {
        let _guard = self.update_lock.lock();
        let p = &self.progress;
        p.running.store(true, Ordering::Relaxed);
        p.changes_done.store(0, Ordering::Relaxed);
        p.total_changes.store(0, Ordering::Relaxed);
        let result = self.update_locked(db, js, ddoc);
        p.running.store(false, Ordering::Relaxed);
        result
    }

    fn update_locked(&self, db: &Database, js: &JsEngine, ddoc: &DesignDoc) -> Result<Meta> {
        let meta = self.meta();
        let (update_seq, purge_seq) = db.seqs();
        if meta.update_seq >= update_seq && meta.purge_seq >= purge_seq {
            return Ok(meta);
        }
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, WRITER_THREADS_MAX);
        let writer: IndexWriter = self
            .index
            .writer_with_num_threads(threads, threads * WRITER_HEAP_PER_THREAD)?;
        let at = Position {
            seq: meta.update_seq,
            purge_seq: meta.purge_seq,
        };
        let mut follower = Updater {
            index: self,
            js,
            ddoc,
            writer,
            meta,
        };
        let reached =
            settee_views::follow::catch_up(db, at, UPDATE_BATCH, &self.progress, &mut follower);
        let Updater { writer, meta, .. } = follower;
        writer.wait_merging_threads()?;
        reached?;
        self.reader.reload()?;
        Ok(meta)
    }

    /// The analyzer of text field `name`: its position among the index's
    /// text fields.
    fn text_field_of(&self, name: &str) -> TField {
        let analyzers = self.spec.analyzers();
        let a = self.spec.analyzer_of(name);
        let i = analyzers.iter().position(|x| x == a).unwrap_or(0);
        self.f.texts[i]
    }

    fn analyze(&self, name: &str, text: &str) -> Vec<String> {
        let analyzers = self.spec.analyzers();
        let a = self.spec.analyzer_of(name);
        let i = analyzers.iter().position(|x| x == a).unwrap_or(0);
        match self.index.tokenizers().get(&format!("a{i}")) {
            Some(mut t) => analyzer::tokens(&mut t, text),
            None => Vec::new(),
        }
    }

    /// The tokens field `name`'s analyzer makes of `text`.
    pub(crate) fn analyze_text(&self, name: &str, text: &str) -> Vec<String> {
        self.analyze(name, text)
    }

    /// The tokens field `name`'s analyzer makes of `text`, each with its
    /// byte offsets in `text`.
    pub(crate) fn analyze_offsets(&self, name: &str, text: &str) -> Vec<(usize, usize, String)> {
        let analyzers = self.spec.analyzers();
        let a = self.spec.analyzer_of(name);
        let i = analyzers.iter().position(|x| x == a).unwrap_or(0);
        use tantivy::tokenizer::TokenStream as _;
        let Some(mut t) = self.index.tokenizers().get(&format!("a{i}")) else {
            return Vec::new();
        };
        let mut stream = t.token_stream(text);
        let mut out = Vec::new();
        while stream.advance() {
            let tok = stream.token();
            out.push((tok.offset_from, tok.offset_to, tok.text.clone()));
        }
        out
    }

    /// The exact term `text` of text field `name` (as its analyzer's one
    /// token would be: Mango text indexes' keyword-analyzed leaves and
    /// `$fieldnames`).
    pub(crate) fn text_term(&self, name: &str, text: &str) -> Term {
        self.json_str(self.text_field_of(name), name, text)
    }

    /// The term of number `v` in number field `name`.
    pub(crate) fn number_term(&self, name: &str, v: f64) -> Term {
        self.json_f64(name, v)
    }

    /// The term `text` of exact string field `name` (booleans too).
    pub(crate) fn string_term(&self, name: &str, text: &str) -> Term {
        self.json_str(self.f.s, name, text)
    }

    /// `query` confined to partition `p`.
    pub fn in_partition(&self, query: Box<dyn Query>, p: &str) -> Box<dyn Query> {
        // Scored 0: the hits keep their relevance.
        let only: Box<dyn Query> = Box::new(BoostQuery::new(
            Box::new(TermQuery::new(
                Term::from_field_text(self.f.partition, p),
                IndexRecordOption::Basic,
            )),
            0.0,
        ));
        Box::new(BooleanQuery::new(vec![
            (TOccur::Must, query),
            (TOccur::Must, only),
        ]))
    }

    /// The tantivy query of a parsed query, with `meta`'s field types.
    pub fn compile(&self, node: &Node, meta: &Meta) -> Result<Box<dyn Query>> {
        Ok(match node {
            Node::All => Box::new(AllQuery),
            Node::Bool(clauses) => {
                let mut out = Vec::with_capacity(clauses.len());
                for (occur, n) in clauses {
                    let o = match occur {
                        Occur::Must => TOccur::Must,
                        Occur::Should => TOccur::Should,
                        Occur::MustNot => TOccur::MustNot,
                    };
                    out.push((o, self.compile(n, meta)?));
                }
                Box::new(BooleanQuery::new(out))
            }
            Node::Boost(n, b) => Box::new(BoostQuery::new(self.compile(n, meta)?, *b)),
            Node::Term { field, text } => {
                // Clouseau reads an unquoted number as a number, whatever
                // the field holds.
                let number = self.clouseau() && is_number(text);
                self.per_kind(field, meta, |kind, name| match (number, kind) {
                    (true, Kind::Double) | (false, _) => self.term_query(kind, name, text),
                    (true, _) => Ok(None),
                })?
            }
            Node::Phrase { field, text, slop } => self.per_kind(field, meta, |kind, name| {
                Ok(match kind {
                    Kind::Text => {
                        let terms: Vec<Term> = self
                            .analyze(name, text)
                            .iter()
                            .map(|t| self.json_str(self.text_field_of(name), name, t))
                            .collect();
                        match terms.len() {
                            0 => None,
                            1 => Some(Box::new(TermQuery::new(
                                terms[0].clone(),
                                IndexRecordOption::WithFreqs,
                            )) as Box<dyn Query>),
                            _ => {
                                let mut q = PhraseQuery::new(terms);
                                q.set_slop(*slop);
                                Some(Box::new(q))
                            }
                        }
                    }
                    _ => self.term_query(kind, name, text)?,
                })
            })?,
            Node::Prefix { field, text } => self.per_kind(field, meta, |kind, name| {
                let term = match kind {
                    Kind::Text => {
                        self.json_str(self.text_field_of(name), name, &text.to_lowercase())
                    }
                    Kind::String => self.json_str(self.f.s, name, &self.expanded(text)),
                    Kind::Double | Kind::Stored => return Ok(None),
                };
                let mut q = PhrasePrefixQuery::new(vec![term]);
                q.set_max_expansions(u32::MAX);
                Ok(Some(Box::new(q) as Box<dyn Query>))
            })?,
            Node::Fuzzy {
                field,
                text,
                distance,
            } => self.per_kind(field, meta, |kind, name| {
                let term = match kind {
                    Kind::Text => {
                        self.json_str(self.text_field_of(name), name, &text.to_lowercase())
                    }
                    Kind::String => self.json_str(self.f.s, name, &self.expanded(text)),
                    Kind::Double | Kind::Stored => return Ok(None),
                };
                Ok(Some(
                    Box::new(FuzzyTermQuery::new(term, *distance, true)) as Box<dyn Query>
                ))
            })?,
            // What Mango's queries ask (`$fieldnames:/.*/`, any field
            // name at all) is read; other expressions are refused.
            Node::Regex { field, pattern } if pattern == ".*" => self.compile(
                &Node::Prefix {
                    field: field.clone(),
                    text: String::new(),
                },
                meta,
            )?,
            Node::Regex { pattern, .. } => {
                return Err(SearchError::BadRequest(format!(
                    "regular expression /{pattern}/ is not supported"
                )))
            }
            Node::Range {
                field,
                lower,
                upper,
            } => {
                // Clouseau: a range of numbers (or open ends) is numeric.
                let numeric = |b: &Bound| match b {
                    Bound::Open => true,
                    Bound::Included(s) | Bound::Excluded(s) => is_number(s),
                };
                let number = self.clouseau() && numeric(lower) && numeric(upper);
                self.per_kind(field, meta, |kind, name| match (number, kind) {
                    (true, Kind::Double) => self.range_query(kind, name, lower, upper),
                    (true, _) => Ok(None),
                    (false, Kind::Double) if self.clouseau() => Ok(None),
                    (false, _) => self.range_query(kind, name, lower, upper),
                })?
            }
        })
    }

    fn clouseau(&self) -> bool {
        self.spec.flavor == Flavor::Clouseau
    }

    /// The text of a prefix, fuzzy or range term for an exact field:
    /// Clouseau's parser (Lucene 4's) lowercases such terms.
    fn expanded(&self, text: &str) -> String {
        if self.clouseau() {
            text.to_lowercase()
        } else {
            text.to_string()
        }
    }

    /// The query of `field` (the default field when None) made for each
    /// type the field was indexed as, any of them matching.
    fn per_kind(
        &self,
        field: &Option<String>,
        meta: &Meta,
        mut make: impl FnMut(Kind, &str) -> Result<Option<Box<dyn Query>>>,
    ) -> Result<Box<dyn Query>> {
        let name = field.as_deref().unwrap_or("default");
        let mut parts: Vec<(TOccur, Box<dyn Query>)> = Vec::new();
        if let Some(kinds) = meta.types.get(name) {
            for kind in kinds {
                if let Some(q) = make(*kind, name)? {
                    parts.push((TOccur::Should, q));
                }
            }
        }
        Ok(match parts.len() {
            0 => Box::new(EmptyQuery),
            1 => parts.pop().map(|p| p.1).expect("one part"),
            _ => Box::new(BooleanQuery::new(parts)),
        })
    }

    fn json_str(&self, field: TField, name: &str, text: &str) -> Term {
        let mut t = Term::from_field_json_path(field, &path_of(name), false);
        t.append_type_and_str(text);
        t
    }

    fn json_f64(&self, name: &str, v: f64) -> Term {
        let mut t = Term::from_field_json_path(self.f.d, &path_of(name), false);
        t.append_type_and_fast_value(v);
        t
    }

    fn term_query(&self, kind: Kind, name: &str, text: &str) -> Result<Option<Box<dyn Query>>> {
        Ok(match kind {
            Kind::Text => {
                let mut terms: Vec<(TOccur, Box<dyn Query>)> = self
                    .analyze(name, text)
                    .iter()
                    .map(|t| {
                        let q: Box<dyn Query> = Box::new(TermQuery::new(
                            self.json_str(self.text_field_of(name), name, t),
                            IndexRecordOption::WithFreqs,
                        ));
                        (TOccur::Should, q)
                    })
                    .collect();
                match terms.len() {
                    0 => None,
                    1 => terms.pop().map(|t| t.1),
                    _ => Some(Box::new(BooleanQuery::new(terms))),
                }
            }
            // Clouseau analyzes the text with the field's analyzer and
            // looks for what it makes among the exact tokens.
            Kind::String if self.clouseau() => {
                let mut terms: Vec<(TOccur, Box<dyn Query>)> = self
                    .analyze(name, text)
                    .iter()
                    .map(|t| {
                        let q: Box<dyn Query> = Box::new(TermQuery::new(
                            self.json_str(self.f.s, name, t),
                            IndexRecordOption::Basic,
                        ));
                        (TOccur::Should, q)
                    })
                    .collect();
                match terms.len() {
                    0 => None,
                    1 => terms.pop().map(|t| t.1),
                    _ => Some(Box::new(BooleanQuery::new(terms))),
                }
            }
            Kind::String => Some(Box::new(TermQuery::new(
                self.json_str(self.f.s, name, text),
                IndexRecordOption::Basic,
            ))),
            Kind::Double => parse_number(text).map(|v| {
                let t = self.json_f64(name, v);
                Box::new(RangeQuery::new(
                    std::ops::Bound::Included(t.clone()),
                    std::ops::Bound::Included(t),
                )) as Box<dyn Query>
            }),
            Kind::Stored => None,
        })
    }

    fn range_query(
        &self,
        kind: Kind,
        name: &str,
        lower: &Bound,
        upper: &Bound,
    ) -> Result<Option<Box<dyn Query>>> {
        use std::ops::Bound as B;
        Ok(match kind {
            Kind::Double => {
                let end = |b: &Bound, open: f64| -> Result<B<Term>> {
                    let num = |s: &str| {
                        parse_number(s).ok_or_else(|| {
                            SearchError::BadRequest(format!(
                                "Cannot parse '{s}' as a number for the range of {name}"
                            ))
                        })
                    };
                    Ok(match b {
                        Bound::Open => B::Included(self.json_f64(name, open)),
                        Bound::Included(s) => B::Included(self.json_f64(name, num(s)?)),
                        Bound::Excluded(s) => B::Excluded(self.json_f64(name, num(s)?)),
                    })
                };
                Some(Box::new(RangeQuery::new(
                    end(lower, f64::NEG_INFINITY)?,
                    end(upper, f64::INFINITY)?,
                )))
            }
            Kind::String | Kind::Text => {
                let field = if kind == Kind::String {
                    self.f.s
                } else {
                    self.text_field_of(name)
                };
                let norm = |s: &str| {
                    if kind == Kind::Text || self.clouseau() {
                        s.to_lowercase()
                    } else {
                        s.to_string()
                    }
                };
                let end = |b: &Bound, low: bool| -> B<Term> {
                    match b {
                        // The path alone sorts before every value in it.
                        Bound::Open if low => B::Included(self.json_str(field, name, "")),
                        Bound::Open => B::Excluded({
                            let mut t = Term::from_field_json_path(field, &path_of(name), false);
                            t.append_type_and_str("\u{10FFFF}");
                            t
                        }),
                        Bound::Included(s) => B::Included(self.json_str(field, name, &norm(s))),
                        Bound::Excluded(s) => B::Excluded(self.json_str(field, name, &norm(s))),
                    }
                };
                Some(Box::new(InvertedIndexRangeQuery::new(
                    end(lower, true),
                    end(upper, false),
                )))
            }
            Kind::Stored => None,
        })
    }
}

/// Whether Clouseau's query parser reads `s` as a number (Java's double
/// syntax: a sign, digits with a fraction and exponent, `NaN`,
/// `Infinity`, a trailing `d` or `f`).
pub fn is_number(s: &str) -> bool {
    let s = s.trim_matches(|c: char| c <= ' ');
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    if s == "NaN" || s == "Infinity" {
        return true;
    }
    let s = s.strip_suffix(['f', 'F', 'd', 'D']).unwrap_or(s);
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((a, b)) => (digits(a) && (b.is_empty() || digits(b))) || (a.is_empty() && digits(b)),
        None => digits(mantissa),
    };
    let exp_ok = exp.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    mantissa_ok && exp_ok
}

/// A number as Lucene's double parser reads it (`Infinity`, `-Infinity`).
pub fn parse_number(s: &str) -> Option<f64> {
    match s {
        "Infinity" | "+Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        _ => s
            .trim_end_matches(['f', 'F', 'd', 'D'])
            .parse::<f64>()
            .ok()
            .filter(|v| !v.is_nan()),
    }
}

/// The fields of each input document of a Mango text index (made
/// natively), at its position among `n` documents.
fn mango_fields(def: &Value, inputs: &[(usize, String)], n: usize) -> Vec<Option<Vec<Field>>> {
    let def = crate::mango_text::MangoTextDef::from_json(def);
    let mut out: Vec<Option<Vec<Field>>> = vec![None; n];
    for (i, json) in inputs {
        let Ok(doc) = serde_json::from_str::<Value>(json) else {
            continue;
        };
        if let Some(calls) = def.calls(&doc) {
            out[*i] = native_fields_of(calls).ok();
        }
    }
    out
}

/// The search index as the shared updater loop drives it.
struct Updater<'a> {
    index: &'a SearchIndex,
    js: &'a JsEngine,
    ddoc: &'a DesignDoc,
    writer: IndexWriter,
    meta: Meta,
}

impl Updater<'_> {
    fn commit(&mut self) -> Result<()> {
        let payload = serde_json::to_string(&self.meta)
            .map_err(|e| SearchError::Index(format!("commit payload: {e}")))?;
        let mut prepared = self.writer.prepare_commit()?;
        prepared.set_payload(&payload);
        prepared.commit()?;
        *self.index.meta.write() = self.meta.clone();
        Ok(())
    }

    /// The fields of each document of `ids` (sorted, deduplicated; not
    /// deleted), from the index function; None for a document with none.
    fn fields(&self, reader: &Reader, ids: &[String]) -> Result<Vec<Option<Vec<Field>>>> {
        let opts = GetOptions::default();
        let mut inputs: Vec<(usize, String)> = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            match reader.get(id, &opts) {
                Ok(d) if !d.deleted => {
                    let mut json = String::with_capacity(d.body.len() + 64);
                    push_doc(&mut json, &d, Extras::default());
                    inputs.push((i, json));
                }
                Ok(_) | Err(settee_db::Error::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(def) = &self.index.spec.mango {
            return Ok(mango_fields(def, &inputs, ids.len()));
        }
        let workers = self.js.config().workers.max(1);
        let chunk = inputs.len().div_ceil(workers).max(CALL_CHUNK_MIN);
        let (ddoc, name, js) = (self.ddoc, &self.index.spec.name, self.js);
        let section = self.index.spec.flavor.section();
        let read = match self.index.spec.flavor {
            Flavor::Nouveau => fields_of,
            Flavor::Clouseau => search_fields_of,
        };
        let parts: Vec<Result<settee_js::IndexOutput>> = std::thread::scope(|s| {
            let handles: Vec<_> = inputs
                .chunks(chunk.max(1))
                .map(|c| {
                    s.spawn(move || {
                        let docs: Vec<&str> = c.iter().map(|(_, j)| j.as_str()).collect();
                        js.index_docs(ddoc, section, name, &docs)
                            .map_err(SearchError::from)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(SearchError::Index("index worker panicked".into())))
                })
                .collect()
        });
        let mut out: Vec<Option<Vec<Field>>> = vec![None; ids.len()];
        let mut results = Vec::with_capacity(inputs.len());
        for part in parts {
            results.extend(part?.docs);
        }
        for ((i, _), result) in inputs.iter().zip(results) {
            let id = &ids[*i];
            match result.map_err(|e| e.to_string()).and_then(read) {
                Ok(fields) => out[*i] = Some(fields),
                Err(e) => tracing::info!(ddoc = %self.index.spec.ddoc_id,
                    index = %self.index.spec.name, doc = %id, error = %e,
                    "index function failed for a document; it is not indexed"),
            }
        }
        Ok(out)
    }

    fn document(&mut self, id: &str, fields: Vec<Field>) -> Result<TantivyDocument> {
        use tantivy::schema::OwnedValue as O;
        let f = &self.index.f;
        let mut doc = TantivyDocument::new();
        doc.add_text(f.id, id);
        let mut texts: Vec<BTreeMap<String, Vec<O>>> = vec![BTreeMap::new(); f.texts.len()];
        let mut strings: BTreeMap<String, Vec<O>> = BTreeMap::new();
        let mut doubles: BTreeMap<String, Vec<O>> = BTreeMap::new();
        let mut sorts: BTreeMap<String, Vec<O>> = BTreeMap::new();
        let mut facet_s: BTreeMap<String, Vec<O>> = BTreeMap::new();
        let mut facet_d: BTreeMap<String, Vec<O>> = BTreeMap::new();
        let mut stored = serde_json::Map::new();
        let analyzers = self.index.spec.analyzers();
        let clouseau = self.index.spec.flavor == Flavor::Clouseau;
        for field in fields {
            let path = path_of(&field.name);
            match (&field.kind, &field.value) {
                (Kind::Text, FieldValue::Str(s)) => {
                    let a = self.index.spec.analyzer_of(&field.name);
                    let i = analyzers.iter().position(|x| x == a).unwrap_or(0);
                    texts[i]
                        .entry(path.clone())
                        .or_default()
                        .push(O::Str(s.clone()));
                }
                (Kind::String, FieldValue::Str(s)) => strings
                    .entry(path.clone())
                    .or_default()
                    .push(O::Str(s.clone())),
                (Kind::Double, FieldValue::Num(n)) => {
                    doubles.entry(path.clone()).or_default().push(O::F64(*n))
                }
                _ => {}
            }
            if clouseau {
                match (&field.kind, &field.value) {
                    (Kind::Text | Kind::String, FieldValue::Str(s)) => {
                        sorts
                            .entry(path.clone())
                            .or_default()
                            .push(O::Str(s.clone()));
                        if field.facet && !s.is_empty() {
                            facet_s.entry(path).or_default().push(O::Str(s.clone()));
                            self.meta.facets.insert(field.name.clone());
                        }
                    }
                    (Kind::Double, FieldValue::Num(n)) if field.facet => {
                        facet_d.entry(path).or_default().push(O::F64(*n))
                    }
                    _ => {}
                }
            }
            if field.store && clouseau {
                // Clouseau answers a repeated name's values as a list,
                // the last value first.
                let v = field.value.to_json();
                match stored.get_mut(&field.name) {
                    None => {
                        stored.insert(field.name.clone(), v);
                    }
                    Some(Value::Array(list)) => list.insert(0, v),
                    Some(old) => *old = Value::Array(vec![v, old.take()]),
                }
            } else if field.store {
                stored.insert(field.name.clone(), field.value.to_json());
            }
            self.meta
                .types
                .entry(field.name)
                .or_default()
                .insert(field.kind);
        }
        let object = |m: BTreeMap<String, Vec<O>>| -> BTreeMap<String, O> {
            m.into_iter()
                .map(|(k, mut v)| {
                    let v = if v.len() == 1 {
                        v.pop().expect("one value")
                    } else {
                        O::Array(v)
                    };
                    (k, v)
                })
                .collect()
        };
        for (i, m) in texts.into_iter().enumerate() {
            if !m.is_empty() {
                doc.add_object(f.texts[i], object(m));
            }
        }
        if !strings.is_empty() {
            doc.add_object(f.s, object(strings));
        }
        if !doubles.is_empty() {
            doc.add_object(f.d, object(doubles));
        }
        for (field, m) in [(f.o, sorts), (f.fs, facet_s), (f.fd, facet_d)] {
            if let (Some(field), false) = (field, m.is_empty()) {
                doc.add_object(field, object(m));
            }
        }
        doc.add_text(f.stored, Value::Object(stored).to_string());
        Ok(doc)
    }
}

impl Follower for Updater<'_> {
    type Error = SearchError;

    fn reset(&mut self) -> Result<()> {
        self.writer.delete_all_documents()?;
        self.meta = Meta::default();
        self.commit()
    }

    fn apply(&mut self, reader: &Reader, ids: Vec<(String, bool)>, next: Position) -> Result<()> {
        let mut ids: Vec<(String, bool)> = ids
            .into_iter()
            .filter(|(id, _)| !id.starts_with("_design/"))
            .collect();
        ids.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        ids.dedup_by(|a, b| a.0 == b.0);
        for (id, _) in &ids {
            self.writer
                .delete_term(Term::from_field_text(self.index.f.id, id));
        }
        let live: Vec<String> = ids
            .into_iter()
            .filter(|(_, deleted)| !deleted)
            .map(|(id, _)| id)
            .collect();
        let fields = self.fields(reader, &live)?;
        for (id, fields) in live.iter().zip(fields) {
            let Some(fields) = fields.filter(|f| !f.is_empty()) else {
                continue;
            };
            let partition = settee_core::name::partition_of(id);
            if self.index.spec.partitioned && partition.is_none() {
                continue;
            }
            let mut doc = self.document(id, fields)?;
            if let (true, Some(p)) = (self.index.spec.partitioned, partition) {
                doc.add_text(self.index.f.partition, p);
            }
            self.writer.add_document(doc)?;
        }
        self.meta.update_seq = next.seq;
        self.meta.purge_seq = next.purge_seq;
        self.commit()
    }
}
