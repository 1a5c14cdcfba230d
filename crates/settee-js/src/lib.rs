//! CouchDB's JavaScript query-server environment, embedded: map, reduce and
//! rereduce, search index functions (`index(...)` calls), `validate_doc_update`,
//! changes filters and `_view` filters,
//! with the globals CouchDB gives design functions (`emit`, `log`, `sum`,
//! `toJSON`, `isArray`, `JSON`, `require` of CommonJS modules).
//!
//! A [`JsEngine`] is a pool of worker threads, each with its own JavaScript
//! runtime; calls are jobs on a bounded queue, with a blocking and an async
//! form. A [`DesignDoc`] is compiled once per worker and cached (bounded,
//! least recently used first) under a hash of its content. Every call has a
//! timeout and every runtime a memory limit.
//!
//! **Architecture Invariant:** nothing outside this crate knows which
//! JavaScript engine runs underneath (QuickJS, through `rquickjs`; see
//! docs/adr/0004-javascript-engine.md). The API speaks std types,
//! `serde_json` values or JSON text, and [`JsError`]; only `runtime.rs`
//! names the engine.
//!
//! ```
//! use serde_json::json;
//! use settee_js::{DesignDoc, JsConfig, JsEngine};
//!
//! let engine = JsEngine::new(JsConfig { workers: 1, ..JsConfig::default() }).unwrap();
//! let ddoc = DesignDoc::new(&json!({
//!     "_id": "_design/app",
//!     "views": {"by_type": {"map": "function (doc) { emit(doc.type, 1); }"}}
//! })).unwrap();
//! let out = engine.map_docs(&ddoc, &["by_type"], &[json!({"_id": "a", "type": "post"})]).unwrap();
//! assert_eq!(out.docs[0].as_ref().unwrap()[0], vec![(json!("post"), json!(1))]);
//! ```

mod config;
mod ddoc;
mod engine;
mod error;
mod input;
mod pool;
mod runtime;
mod stats;

pub use config::JsConfig;
pub use ddoc::DesignDoc;
pub use engine::{IndexOutput, JsEngine, MapOutput, ViewRows};
pub use error::{JsError, ValidateError};
pub use input::JsonDoc;
pub use runtime::ListIo;
pub use stats::JsStats;

pub(crate) use pool::block_on as pool_block_on;
