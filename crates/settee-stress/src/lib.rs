//! `settee stress`: robustness testing of a CouchDB-compatible server over
//! its HTTP API — hostile requests, then consistency checks, and a
//! many-client soak.
//!
//! Code map:
//! - [`gen`]: the seeded generator of malformed and hostile requests
//!   (request `i` of seed `s` is a pure function of both, so any failure
//!   replays alone);
//! - [`wire`]: a strict HTTP/1.x response reader over raw TCP (the
//!   requests are raw bytes; no client library would send them);
//! - [`check`]: what a response may look like (CouchDB-shaped errors,
//!   JSON where the Content-Type says so, documented 500s);
//! - [`hostile`]: the runner — parallel connections, slow and broken
//!   clients, deadlines, tallies and findings;
//! - [`consistency`]: afterwards, `doc_count` = `_all_docs` = `_changes`,
//!   every listed document reads back, and a normal workload still works;
//! - [`soak`]: many keep-alive clients mixing reads and writes, with
//!   latency percentiles and a no-lost-update check;
//! - [`procwatch`]: the server process seen through `/proc` (alive, RSS
//!   over time, panics in its stderr log) and this process's fd limit;
//! - [`client`]: a small keep-alive client for well-formed requests;
//! - [`target`]: the server URL (loopback only).
//!
//! Invariant: everything is bounded — request counts, durations, bytes
//! per request and per response, findings kept, samples kept — and only
//! loopback servers are targeted.

pub mod check;
pub mod client;
pub mod consistency;
pub mod gen;
pub mod hostile;
pub mod procwatch;
pub mod soak;
pub mod target;
pub mod wire;

pub use hostile::{HostileOptions, HostileReport};
pub use soak::{SoakOptions, SoakReport};
pub use target::Target;
