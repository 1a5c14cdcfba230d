//! What holds the automatic purge back on this server (settee-purger's
//! `Holds`): the view and Mango indexes of a database (how far they have
//! read it, and how far they have applied its purges) and the replication
//! jobs this server runs whose source is that database (their checkpoints),
//! plus the purger's settings read from `[couch_auto_purge_plugin]`.
//! A `_replicator` document whose job has not started reading (starting,
//! or crashing before it could) holds the whole database.
//!
//! Invariant: a job whose source is this server's database holds the
//! purge at its checkpoint, so a replication never misses a deletion the
//! purge would otherwise have removed before the job read it. A source is
//! this server's database when its URL names this server's port on a
//! loopback address or the address it listens on.

use std::sync::Weak;
use std::time::Duration;

use serde_json::Value;
use settee_db::Database;
use settee_purger::{Hold, Holds, Settings, Ttl};

use crate::config::Config;
use crate::state::AppState;

/// The server's holds; weak, so the purger does not keep the server alive.
pub struct ServerHolds(pub Weak<AppState>);

/// The leading number of a sequence (`"12-g1AAA…"`, `"12"`, `12`).
fn seq_number(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => {
            let digits: &str = s.split('-').next().unwrap_or("");
            digits.parse().ok()
        }
        _ => None,
    }
}

/// The database a URL names on this server, if it names one.
fn local_db(app: &AppState, url: &url::Url) -> Option<String> {
    let addr = app.local_addr.get()?;
    if url.port_or_known_default() != Some(addr.port()) {
        return None;
    }
    let ours = match url.host()? {
        url::Host::Ipv4(ip) => ip.is_loopback() || std::net::IpAddr::V4(ip) == addr.ip(),
        url::Host::Ipv6(ip) => ip.is_loopback() || std::net::IpAddr::V6(ip) == addr.ip(),
        url::Host::Domain(d) => d == "localhost",
    };
    if !ours {
        return None;
    }
    let mut segments = url.path_segments()?.filter(|s| !s.is_empty());
    let first = segments.next()?;
    if segments.next().is_some() {
        return None;
    }
    percent_encoding::percent_decode_str(first)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

impl Holds for ServerHolds {
    fn hold(&self, db: &Database) -> Hold {
        let Some(app) = self.0.upgrade() else {
            // The server is going away: hold everything.
            return Hold {
                seq: Some(0),
                purge_seq: None,
                by: Some("shutdown".into()),
            };
        };
        let mut hold = Hold::default();
        match app.views.purge_hold(db) {
            Ok(Some((seq, purge_seq, ddoc))) => {
                hold.seq = Some(seq);
                hold.purge_seq = Some(purge_seq);
                hold.by = Some(ddoc);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(db = %db.name(), error = %e, "auto purge: cannot read the indexes");
                hold.seq = Some(0);
                hold.by = Some("indexes unreadable".into());
            }
        }
        for (url, checkpoint) in app.replicator.source_checkpoints() {
            if local_db(&app, &url).as_deref() != Some(db.name()) {
                continue;
            }
            let seq = seq_number(&checkpoint).unwrap_or(0);
            if hold.seq.is_none_or(|s| seq < s) {
                hold.seq = Some(seq);
                hold.by = Some(format!("replication from {}", db.name()));
            }
        }
        // A document's job that has not started reading (its target
        // unreachable, say) resumes from a checkpoint not known here:
        // nothing of the database may go until it has read.
        for url in app.replicator_docs.unstarted_sources() {
            if local_db(&app, &url).as_deref() == Some(db.name()) {
                hold.seq = Some(0);
                hold.by = Some(format!("a _replicator job from {} not started", db.name()));
            }
        }
        hold
    }
}

/// A whole number of seconds from a `{num}_{unit}` setting.
fn period(v: Option<String>) -> Option<Duration> {
    match settee_purger::ttl::parse_setting(v?.trim())? {
        Ttl::Secs(s) => Some(Duration::from_secs(u64::try_from(s).ok()?)),
        Ttl::Infinity => None,
    }
}

/// `[couch_auto_purge_plugin]`: `deleted_document_ttl` (the server's
/// default TTL), `max_batch_size`, and Settee's `check_interval` (a
/// `{num}_{unit}` period, or `check_interval_ms`) and `max_docs_per_sec`.
/// A value that does not parse leaves the default.
pub fn settings(config: &Config) -> Settings {
    const S: &str = "couch_auto_purge_plugin";
    let d = Settings::default();
    let number = |k: &str| config.get(S, k).and_then(|v| v.trim().parse::<u64>().ok());
    Settings {
        default_ttl: config
            .get(S, "deleted_document_ttl")
            .and_then(|v| settee_purger::ttl::parse_default(&v)),
        max_batch_size: number("max_batch_size")
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| *n > 0)
            .unwrap_or(d.max_batch_size),
        interval: number("check_interval_ms")
            .map(Duration::from_millis)
            .or_else(|| period(config.get(S, "check_interval")))
            .filter(|d| !d.is_zero())
            .unwrap_or(d.interval),
        max_docs_per_sec: number("max_docs_per_sec")
            .filter(|n| *n > 0)
            .unwrap_or(d.max_docs_per_sec),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sequences() {
        assert_eq!(seq_number(&json!(12)), Some(12));
        assert_eq!(seq_number(&json!("12")), Some(12));
        assert_eq!(seq_number(&json!("12-g1AAAA")), Some(12));
        assert_eq!(seq_number(&json!("x")), None);
        assert_eq!(seq_number(&json!(null)), None);
    }
}
