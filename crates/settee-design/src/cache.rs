//! The validate functions of every database, cached.
//!
//! Owns [`ValidatorCache`]: per database name, the design documents that
//! have a `validate_doc_update` (in id order, compiled as
//! [`DesignDoc`]s), with the design generation and incarnation they were
//! read at. Invariants:
//! - An entry is used only while the database still reports the
//!   generation and `created_us` it was read at; the generation is read
//!   before the design documents, so an entry can be older than its tag
//!   says but never newer — and a newer write has moved the generation on.
//! - A database without validate functions has an entry too (empty): its
//!   writes cost one atomic load and one lookup, no storage read.
//! - At most `cache_bytes_max` bytes of design documents are kept (each
//!   entry weighs its documents' text plus a constant), least recently
//!   used first out, in [`SHARDS`] shards. An entry heavier than a shard
//!   (8 MiB by default) is not kept: that database's design documents are
//!   read again for every write.

use std::sync::Arc;

use quick_cache::sync::{Cache, DefaultLifecycle};
use quick_cache::{DefaultHashBuilder, OptionsBuilder, Weighter};
use serde_json::Value;
use settee_core::name::DESIGN_PREFIX;
use settee_db::{Database, GetOptions};
use settee_js::{DesignDoc, JsError};

use crate::{DesignConfig, DesignError};

/// Shards of the cache: few, so that each can hold a database with large
/// design documents (the default, four per CPU, would leave a shard a
/// few hundred KiB on a large machine); lookups take a shard's read lock.
const SHARDS: usize = 8;

/// What an entry weighs besides its design documents' text.
const ENTRY_WEIGHT: u64 = 256;

/// The first id after every `_design/` id.
const DESIGN_END: &str = "_design0";

/// A validate function: the design document compiled, or why it cannot be
/// (its language is not JavaScript): every write is then refused with it.
pub(crate) type Func = Result<DesignDoc, JsError>;

/// The validate functions of one database, as of one generation.
struct Entry {
    generation: u64,
    created_us: u64,
    funcs: Arc<[Func]>,
    weight: u64,
}

#[derive(Clone)]
struct ByBytes;

impl Weighter<String, Arc<Entry>> for ByBytes {
    fn weight(&self, key: &String, entry: &Arc<Entry>) -> u64 {
        entry.weight + key.len() as u64
    }
}

pub(crate) struct ValidatorCache {
    entries: Cache<String, Arc<Entry>, ByBytes>,
}

impl ValidatorCache {
    pub(crate) fn new(config: &DesignConfig) -> ValidatorCache {
        let options = OptionsBuilder::new()
            .shards(SHARDS)
            .estimated_items_capacity(config.cache_dbs_estimate.max(1))
            .weight_capacity(config.cache_bytes_max.max(ENTRY_WEIGHT))
            .build()
            .expect("capacities are set");
        ValidatorCache {
            entries: Cache::with_options(
                options,
                ByBytes,
                DefaultHashBuilder::default(),
                DefaultLifecycle::default(),
            ),
        }
    }

    /// The validate functions of `db` as of now (empty when it has none).
    pub(crate) fn get(&self, db: &Database) -> Result<Arc<[Func]>, DesignError> {
        // Read before the design documents are (see the module doc).
        let generation = db.design_generation();
        if let Some(e) = self.entries.get(db.name()) {
            if e.generation == generation && e.created_us == db.created_us() {
                return Ok(e.funcs.clone());
            }
        }
        let entry = load(db, generation)?;
        let funcs = entry.funcs.clone();
        self.entries.insert(db.name().to_string(), Arc::new(entry));
        Ok(funcs)
    }
}

/// Reads the design documents of `db` that have a `validate_doc_update`.
fn load(db: &Database, generation: u64) -> Result<Entry, DesignError> {
    let created_us = db.created_us();
    let reader = db.reader()?;
    let mut funcs = Vec::new();
    let mut weight = ENTRY_WEIGHT;
    for row in reader.change_rows_in(DESIGN_PREFIX, DESIGN_END)? {
        if row.deleted() {
            continue;
        }
        let doc = match reader.get(&row.id, &GetOptions::default()) {
            Ok(doc) => doc,
            Err(settee_db::Error::NotFound(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        // Cheap test first: most design documents have no validate function.
        if !doc.body.as_str().contains("\"validate_doc_update\"") {
            continue;
        }
        let mut body = doc.body.to_map();
        if !body.contains_key("validate_doc_update") {
            continue;
        }
        weight += doc.body.len() as u64;
        body.insert("_id".into(), Value::String(doc.id.clone()));
        body.insert("_rev".into(), Value::String(doc.rev.to_string()));
        funcs.push(DesignDoc::new(&Value::Object(body)));
    }
    Ok(Entry {
        generation,
        created_us,
        funcs: funcs.into(),
        weight,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use settee_core::doc::Doc;
    use settee_db::{Engine, EngineOptions};
    use settee_store::mem::MemStore;

    use super::*;

    #[test]
    fn the_cache_stays_within_its_bytes() {
        let engine = Engine::with_store(Arc::new(MemStore::new()), EngineOptions::default());
        let config = DesignConfig {
            cache_bytes_max: 200_000,
            cache_dbs_estimate: 16,
        };
        let cache = ValidatorCache::new(&config);
        let padding = "x".repeat(10_000);
        let dbs: Vec<Database> = (0..60)
            .map(|i| {
                let db = engine.create_db(&format!("db{i}")).unwrap();
                let ddoc = json!({"_id": "_design/v", "validate_doc_update": "function(){}", "pad": padding});
                db.put(Doc::from_json(ddoc, || "x".into()).unwrap()).unwrap();
                db
            })
            .collect();
        for _ in 0..2 {
            for db in &dbs {
                assert_eq!(cache.get(db).unwrap().len(), 1);
                assert!(cache.entries.weight() <= config.cache_bytes_max);
            }
        }
        // A database without functions costs an entry of its own, small.
        let plain = engine.create_db("plain").unwrap();
        assert!(cache.get(&plain).unwrap().is_empty());
        let e = cache.entries.get("plain").unwrap();
        assert_eq!(e.weight, ENTRY_WEIGHT);
    }
}
