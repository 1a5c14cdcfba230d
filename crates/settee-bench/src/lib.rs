//! `settee bench`: a profiling suite for CouchDB-compatible servers, after
//! the "High Performance" chapter of *CouchDB: The Definitive Guide*.
//!
//! The crate owns everything but the command line: the scenario table
//! ([`scenarios`], one small module per scenario), the HTTP load client
//! ([`client`], one keep-alive HTTP/1.1 connection per simulated client,
//! pre-encoded bodies), the load drivers ([`load`]), statistics
//! ([`stats`]), the zipfian key generator ([`zipf`]), client CPU accounting
//! ([`cpu`]), a local server's peak memory ([`rss`]), starting Settee
//! servers for fault tolerance ([`spawn`]), rendering ([`report`], [`plots`]), the progress bar ([`progress`]) and
//! the run itself ([`runner`]), which interleaves servers scenario by
//! scenario so that comparisons survive a noisy machine.
//!
//! Invariant: every scenario works on fresh databases it creates and deletes
//! itself; nothing here touches a database it did not create.

pub mod client;
pub mod cpu;
pub mod error;
pub mod load;
pub mod machine;
pub mod plots;
pub mod progress;
pub mod report;
pub mod rss;
pub mod runner;
pub mod scenarios;
pub mod spawn;
pub mod stats;
pub mod targets;
pub mod zipf;

pub use error::BenchError;
pub use runner::{run, Options};
