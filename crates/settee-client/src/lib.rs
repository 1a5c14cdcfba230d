//! settee-client: a CouchDB HTTP client shared by Settee's operator tools
//! (and, later, the replicator). It talks to any CouchDB-compatible server.
//!
//! - [`Client`]: one pooled, keep-alive HTTP client (reqwest over rustls):
//!   custom CA file, client certificate and key, HTTP(S) proxy, connect and
//!   request timeouts, retries with exponential backoff and jitter on
//!   connection errors, timeouts and 5xx answers ([`ClientOptions`]).
//! - [`Db`]: one database URL with its credentials and typed calls
//!   (`_all_docs`, `_changes`, `_bulk_get`, `_bulk_docs`, `_local` docs, …).
//!   Documents travel as raw JSON ([`serde_json::value::RawValue`]) so the
//!   tools copy bytes, not re-serialised trees.
//! - [`Error`]: typed errors; CouchDB's `{"error","reason"}` bodies become
//!   [`Error::Couch`] with the status.
//! - [`adapt::Sizer`]: run-time choice of page and batch sizes from
//!   measured throughput, request-size limits (413) and stalls (timeouts).
//!
//! Invariant: credentials never appear in URLs this crate prints
//! ([`Db::display`], error messages); they travel only in the
//! `Authorization` header.

pub mod adapt;
mod client;
mod db;
mod error;
pub mod types;

pub use client::{Client, ClientOptions, Credentials, RetryPolicy};
pub use db::{display_url, parse_db_url, seq_param, ChangesFilter, ChangesQuery, Db};
pub use error::Error;
