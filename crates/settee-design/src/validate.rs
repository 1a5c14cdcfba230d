//! `validate_doc_update` for a write, as CouchDB 3.4 runs it.
//!
//! Owns [`Validators`] (the functions one write must pass) and
//! [`WriteCtx`] (who writes, and the security object). Invariants (each
//! checked against CouchDB 3.4.3):
//! - Design documents and `_local` documents are not validated (writing a
//!   design document needs a database admin instead).
//! - Every function runs, in design-document id order; the first refusal
//!   is the answer.
//! - `oldDoc` is the revision the edit replaces: with `new_edits=true` the
//!   leaf named by `_rev` (a deleted leaf too), `null` for a new document
//!   or the recreation of a deleted one; with `new_edits=false` the
//!   nearest ancestor, in the `_revisions` sent, whose body is stored
//!   (`null` when there is none).
//! - An edit the engine will refuse as a conflict anyway (a `_rev` that is
//!   not a leaf, no `_rev` for a live document) is not validated, nor is a
//!   replicated revision the database already has: CouchDB answers
//!   `conflict` (or success) for those without running the functions.
//! - The revision tree and the old body are read from one snapshot; the
//!   engine re-checks the edit against the latest state when it applies it
//!   (a concurrent edit turns a validated one into a conflict).

use std::sync::{Arc, OnceLock};

use futures_util::stream::{self, StreamExt};
use serde_json::Value;
use settee_core::doc::Doc;
use settee_core::name::{DESIGN_PREFIX, LOCAL_PREFIX};
use settee_db::{Database, GetOptions, Reader};
use settee_js::{JsEngine, JsError, ValidateError};

use crate::cache::Func;
use crate::docs::{edit_json, stored_json, user_ctx};
use crate::DesignError;

/// Who makes a write, and the database's security object: what
/// `validate_doc_update` gets as `userCtx` (with the database name) and
/// `secObj`.
#[derive(Debug, Clone)]
pub struct WriteCtx {
    pub name: Option<String>,
    pub roles: Vec<String>,
    /// The security object as `GET /{db}/_security` answers it.
    pub security: Value,
}

/// The `validate_doc_update` functions of a database, ready to judge writes.
#[derive(Clone)]
pub struct Validators {
    js: Arc<JsEngine>,
    db: String,
    funcs: Arc<[Func]>,
}

impl std::fmt::Debug for Validators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validators")
            .field("db", &self.db)
            .field("functions", &self.funcs.len())
            .finish()
    }
}

/// What an edit replaces, as far as validation is concerned.
enum Prior {
    /// Not validated: the engine decides (a conflict, or a revision the
    /// database already has).
    Skip,
    /// `oldDoc` (`None`: `null`).
    Old(Option<Value>),
}

impl Validators {
    pub(crate) fn new(js: Arc<JsEngine>, db: &str, funcs: Arc<[Func]>) -> Validators {
        Validators {
            js,
            db: db.to_string(),
            funcs,
        }
    }

    /// How many functions a write must pass (at least one).
    pub fn len(&self) -> usize {
        self.funcs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }

    /// Validates one edit of `db` (`new_edits` as the write will be made).
    /// Reads the edit's old revision; runs JavaScript on the engine's
    /// workers, never on the caller's thread.
    pub async fn validate(
        &self,
        db: &Database,
        doc: &Doc,
        new_edits: bool,
        ctx: &WriteCtx,
    ) -> Result<(), DesignError> {
        if !validated(&doc.id) {
            return Ok(());
        }
        let prior = prior(&db.reader()?, doc, new_edits)?;
        self.run(doc, prior, ctx).await
    }

    /// Validates the edits of one request, answering for each in order.
    /// The old revisions are read from one snapshot; up to one call per
    /// JavaScript worker (twice that) runs at a time. Once a function has
    /// run out of time, the documents not yet validated get that error
    /// without running it again (a function that loops forever costs a
    /// request a few timeouts, not one per document).
    pub async fn validate_all(
        &self,
        db: &Database,
        docs: &[Doc],
        new_edits: bool,
        ctx: &WriteCtx,
    ) -> Result<Vec<Result<(), DesignError>>, DesignError> {
        let reader = db.reader()?;
        let mut priors = Vec::with_capacity(docs.len());
        for doc in docs {
            priors.push(if validated(&doc.id) {
                prior(&reader, doc, new_edits)?
            } else {
                Prior::Skip
            });
        }
        drop(reader);
        let parallel = self.js.config().workers.max(1) * 2;
        // The calls made first (futures do nothing until polled), then
        // run: a stream combinator's closure over borrowed arguments would
        // make the caller's future not `Send`.
        let timed_out: OnceLock<ValidateError> = OnceLock::new();
        let calls: Vec<_> = docs
            .iter()
            .zip(priors)
            .map(|(doc, prior)| {
                let timed_out = &timed_out;
                async move {
                    if let Some(e) = timed_out.get() {
                        return Err(DesignError::Refused(e.clone()));
                    }
                    let r = self.run(doc, prior, ctx).await;
                    if let Err(DesignError::Refused(
                        e @ ValidateError::Js(JsError::Timeout { .. }),
                    )) = &r
                    {
                        // The first timeout wins; later ones change nothing.
                        let _ = timed_out.set(e.clone());
                    }
                    r
                }
            })
            .collect();
        Ok(stream::iter(calls).buffered(parallel).collect().await)
    }

    /// Runs every function over one edit; the first refusal wins.
    async fn run(&self, doc: &Doc, prior: Prior, ctx: &WriteCtx) -> Result<(), DesignError> {
        let Prior::Old(old) = prior else {
            return Ok(());
        };
        let new = edit_json(doc, old.as_ref());
        let user = user_ctx(&self.db, ctx.name.as_deref(), &ctx.roles);
        for func in self.funcs.iter() {
            let ddoc = func
                .as_ref()
                .map_err(|e| DesignError::Refused(ValidateError::Js(e.clone())))?;
            self.js
                .validate_async(ddoc, &new, old.as_ref(), &user, &ctx.security)
                .await
                .map_err(DesignError::Refused)?;
        }
        Ok(())
    }
}

/// Whether writes of this id are validated at all.
fn validated(id: &str) -> bool {
    !id.starts_with(DESIGN_PREFIX) && !id.starts_with(LOCAL_PREFIX)
}

/// What `doc` replaces (see the module doc).
fn prior(reader: &Reader, doc: &Doc, new_edits: bool) -> Result<Prior, DesignError> {
    let Some(tree) = reader.rev_tree(&doc.id)? else {
        // Nothing stored: an edit naming a revision is a conflict.
        return Ok(if new_edits && doc.rev.is_some() {
            Prior::Skip
        } else {
            Prior::Old(None)
        });
    };
    let read = |rev: &settee_core::rev::Rev| -> Result<Option<Value>, DesignError> {
        let opts = GetOptions {
            rev: Some(rev.clone()),
            revs: true,
            ..GetOptions::default()
        };
        match reader.get(&doc.id, &opts) {
            Ok(found) => Ok(Some(stored_json(&found))),
            // Not stored (compacted away, or never had a body here).
            Err(settee_db::Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    };
    if new_edits {
        return match &doc.rev {
            Some(rev) if tree.is_leaf(rev) => Ok(Prior::Old(read(rev)?)),
            Some(_) => Ok(Prior::Skip),
            None => match tree.winner() {
                Some(w) if !w.deleted => Ok(Prior::Skip),
                _ => Ok(Prior::Old(None)),
            },
        };
    }
    let Some(rev) = &doc.rev else {
        return Ok(Prior::Old(None));
    };
    if tree.contains(rev) {
        return Ok(Prior::Skip);
    }
    for ancestor in doc.revisions.iter().flatten().skip(1) {
        if tree.contains(ancestor) {
            if let Some(old) = read(ancestor)? {
                return Ok(Prior::Old(Some(old)));
            }
        }
    }
    Ok(Prior::Old(None))
}
