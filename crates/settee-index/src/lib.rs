//! Settee's indexes, shared by views and Mango: rows kept in CouchDB
//! collation order in an ordered key-value store, maintained incrementally,
//! with reductions.
//!
//! So far this crate holds the pure foundation:
//!
//! * [`keycodec`] — an order-preserving byte encoding of view keys and row
//!   keys (key + document id), and the byte bounds of CouchDB's
//!   `startkey`/`endkey`/`*_docid`/`inclusive_end`/`descending` queries and
//!   of `group_level` groups;
//! * [`reduce`] — CouchDB's built-in reduce functions (`_count`, `_sum`,
//!   `_stats`, `_approx_count_distinct`) with storable partial reductions.
//!
//! **Architecture invariant:** no I/O, no threads, no clocks. Everything here
//! is a deterministic function of its inputs, like `settee-core`, so that
//! property tests can compare it against simple models.

pub mod keycodec;
pub mod reduce;
