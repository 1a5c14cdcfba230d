//! The Settee document engine — CouchDB's document semantics as an
//! embeddable Rust library (what Hovercraft was to CouchDB: the database
//! in-process, no HTTP, no JSON round trip).
//!
//! ```no_run
//! use settee_db::{Engine, EngineOptions, UpdateOptions};
//! use settee_core::doc::Doc;
//! let engine = Engine::open(std::path::Path::new("data"), EngineOptions::default()).unwrap();
//! let db = engine.create_db("mydb").unwrap();
//! let rev = db.put(Doc::new("hello", serde_json::json!({"foo": "bar"})).unwrap()).unwrap();
//! let doc = db.reader().unwrap().get("hello", &Default::default()).unwrap();
//! assert_eq!(doc.rev, rev);
//! ```
//!
//! Architecture invariants (each stated in the module that keeps it):
//! - one writer thread per database, group commit pipelined into a
//!   committer thread ([`writer`], [`committer`]);
//! - acknowledged means durable unless the caller chose otherwise ([`Durability`]);
//! - readers use snapshots: never blocked, never see half a batch ([`reader`]);
//! - the first storage error poisons the engine ([`poison`]);
//! - deterministic revision ids (settee_core::rev).

pub mod atts;
mod batch_buffer;
pub mod blobs;
pub mod committer;
pub mod database;
pub mod engine;
pub mod error;
mod id_blocks;
pub mod index_space;
mod inflight;
pub mod json;
pub mod keys;
pub mod options;
pub mod poison;
pub mod query;
pub mod reader;
mod record_live;
pub mod records;
mod records_fast;
pub mod time_seq;
pub mod update;
pub mod writer;

pub use database::{Database, DbInfo, Sizes, UpdateOptions};
pub use engine::Engine;
pub use error::{DocFailure, Error, Result};
pub use index_space::{IndexBatch, IndexSnapshot, IndexSpace};
pub use options::{Durability, EngineOptions};
pub use reader::{
    AllDocsRow, ChangeRow, DocRead, GetOptions, IdRange, LocalDoc, OpenRev, OpenRevs, RangeCounts,
    Reader,
};
pub use settee_store::rocks::RocksOptions;
pub use writer::{DocResult, PurgeOutcome};
