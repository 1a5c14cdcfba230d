//! Settee's pure document model: database names, document ids, revision ids,
//! revision trees (merge, stem, winner), document validation, CouchDB JSON
//! collation and the Mango selector matcher.
//!
//! **Architecture invariant:** this crate does no I/O and has no global state;
//! every function is deterministic. Storage, threads and the wire protocol live
//! in the crates above it.

pub mod att;
pub mod collate;
pub mod couch_rev;
pub mod design;
pub mod doc;
pub mod doc_text;
pub mod erl;
pub mod fields;
pub mod name;
pub mod rev;
pub mod revtree;
pub mod selector;
