//! What members of the users database who are not its admins may do
//! there. The database is admin-only by default; an admin who opens it
//! (`[couchdb] users_db_security_editable` and a `_security` naming
//! members, or none) lets users sign up and keep their own document, as in
//! CouchDB 3.4 (recorded in tests/conformance/scenarios/users_open.scn):
//!
//! - a user reads, updates and deletes only `org.couchdb.user:` + their own
//!   name; anyone else's document — for anonymous requesters every one —
//!   is 404 `missing`, as if it did not exist (also through `_bulk_get`,
//!   and `_find`, which finds only the requester's own document);
//! - design documents are for db admins (reading one: 403 "Only
//!   administrators can view design docs in the users database.");
//!   `_local` documents and COPY answer 404 `missing`;
//! - listings (`_all_docs`, `_changes`, `_design_docs`, `_local_docs`)
//!   are for server admins (401, checked where they are served).
//!
//! Writes go through [`crate::auth::users_db_write`] (CouchDB's rules for
//! user documents). Invariant: a requester who is not a db admin of
//! `_users` never receives another user's document, in whole or in part.

use axum::http::{Method, StatusCode};

use crate::auth::{db_security, USERS_DB};
use crate::error::{ApiError, ApiResult};
use crate::request::Req;

/// The one user document a request to the users database may see, when
/// it is restricted to its own: `Some(None)` for an anonymous requester
/// (no document at all), `Some(Some(id))` for a user, `None` when the
/// request is not restricted (another database, or a db admin).
pub fn own_doc_only(req: &Req, db: &str) -> Option<Option<String>> {
    if db != USERS_DB || db_security(req).is_admin(&req.user) {
        return None;
    }
    Some(
        req.user
            .name
            .as_deref()
            .map(settee_auth::users::user_doc_id),
    )
}

/// Whether a restricted request ([`own_doc_only`]) may see document `id`.
pub fn may_see(own: &Option<Option<String>>, id: &str) -> bool {
    match own {
        None => true,
        Some(own) => own.as_deref() == Some(id),
    }
}

/// The users database lists its documents (`_all_docs`, `_changes`…) to
/// server admins only; CouchDB checks this before membership: 401 "You are
/// not a server admin.".
pub fn listing(req: &Req, db: &str) -> ApiResult<()> {
    if db == USERS_DB {
        crate::auth::require_admin(&req.user)?;
    }
    Ok(())
}

/// The refusals of requests to `_users/{rest…}` that CouchDB makes before
/// any handler runs. Only for members (a stranger hears the membership
/// refusal from the handler) who are not db admins.
pub fn gate(req: &Req, rest: &[&str]) -> ApiResult<()> {
    let sec = db_security(req);
    if !sec.is_member(&req.user) || sec.is_admin(&req.user) {
        return Ok(());
    }
    let reading = matches!(req.method, Method::GET | Method::HEAD);
    let missing = || Err(ApiError::not_found("missing"));
    match rest {
        ["_local", ..] => missing(),
        // Writing one is for db admins (its handler says so).
        ["_design", _] if !reading => Ok(()),
        // Reading one, or its views, attachments and info.
        ["_design", ..] => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "Only administrators can view design docs in the users database.",
        )),
        [id, ..] if !id.starts_with('_') => {
            if req.method.as_str() == "COPY" {
                return missing();
            }
            // A document write meets the user-document rules later (a
            // stranger's is a 404 there too); an attachment needs the
            // document to be the requester's own.
            let writes_own_rules =
                rest.len() == 1 && matches!(req.method, Method::PUT | Method::POST);
            let own = own_doc_only(req, USERS_DB);
            if !writes_own_rules && !may_see(&own, id) {
                return missing();
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_own_document_is_seen() {
        let own = Some(Some("org.couchdb.user:joe".to_string()));
        assert!(may_see(&own, "org.couchdb.user:joe"));
        assert!(!may_see(&own, "org.couchdb.user:ann"));
        assert!(!may_see(&Some(None), "org.couchdb.user:joe"));
        assert!(may_see(&None, "org.couchdb.user:ann"));
    }
}
