//! CouchDB views: the map/reduce indexes of design documents, built
//! incrementally from a database's changes and queried with CouchDB's
//! view options.
//!
//! - [`spec`]: what a design document asks to be indexed, and the
//!   signature that names its index;
//! - [`layout`]: the index's keys and records in its database's index
//!   space (`settee_db::IndexSpace`);
//! - [`follow`]: the updater loop every index built from a database's
//!   changes shares (views here, search indexes in settee-search);
//! - [`index`]: one index and its incremental, crash-safe updater (map
//!   functions run in parallel on the JavaScript engine);
//! - [`args`]: a query's arguments, parsed and checked as CouchDB does
//!   (shared with `_all_docs`);
//! - [`query`]: answering a query from an index snapshot, streamed;
//! - [`registry`]: the server's views by database and design document;
//!   `auto`: background updates of the indexes in use after writes.
//!
//! **Architecture invariants:** this crate knows neither the storage engine
//! (it writes through `settee_db::IndexSpace`) nor the JavaScript engine
//! (it calls `settee_js`); rows are ordered by `settee_index::keycodec`
//! and reduced by `settee_index::reduce` or JavaScript.

pub mod args;
mod auto;
pub mod blocks;
pub mod error;
pub mod follow;
pub mod index;
pub mod layout;
mod offsets;
pub mod query;
mod reducer;
pub mod registry;
pub mod spec;

pub use args::{Update, ViewArgs, ViewKind};
pub use error::{Result, ViewError};
pub use index::Index;
pub use query::Out;
pub use registry::Views;
pub use spec::{check_design_doc, IndexSpec};
