//! Routing: CouchDB's URL space mapped to handlers, one module per group.
//!
//! Invariant: routing looks only at decoded path segments and the method,
//! and routes a request sent elsewhere (rewrites, partitions) again in a
//! loop, never by nesting;
//! every handler checks its method with [`allow`] first (405 with `Allow`
//! otherwise) and its permission through [`crate::auth`] before touching a
//! database.

pub mod all_docs;
pub mod att;
pub mod auto_purge;
pub mod bulk;
pub mod bulk_body;
pub mod changes;
pub mod cluster;
pub mod cluster_setup;
pub mod db;
pub mod doc;
pub mod form_upload;
pub mod list;
pub mod mango;
pub mod partition;
pub mod replicate;
pub mod rewrite;
pub mod search;
pub mod server;
pub mod show;
pub mod update;
pub mod users_db;
pub mod view;

use axum::http::{Method, StatusCode};
use axum::response::Response;

use crate::error::{ApiError, ApiResult};
use crate::request::Req;
use crate::state::App;

/// 405 unless the request's method is one of `methods` (`allow_header` is
/// the same list as CouchDB spells it, e.g. "GET,HEAD").
pub fn allow(req: &Req, methods: &[Method], allow_header: &'static str) -> ApiResult<()> {
    if methods.contains(&req.method) {
        Ok(())
    } else {
        Err(ApiError::method_not_allowed(allow_header))
    }
}

/// [`allow`] for methods named by string (COPY has no constant).
pub fn allow_names(req: &Req, methods: &[&str], allow_header: &'static str) -> ApiResult<()> {
    if methods.contains(&req.method.as_str()) {
        Ok(())
    } else {
        Err(ApiError::method_not_allowed(allow_header))
    }
}

/// What routing a request came to: an answer, or the path to route it
/// to next (a rewrite, a partition's endpoint).
pub enum Routed {
    Answer(Response),
    Again(Vec<String>),
}

/// Routes a request to its handler, and again wherever a handler sends it
/// ([`Routed::Again`]): a loop, so routings never nest on the stack
/// (rewrites bound their count, `rewrite::REWRITE_LIMIT`).
pub async fn dispatch(app: &App, req: &mut Req, segs: &[String]) -> ApiResult<Response> {
    let mut segs = segs.to_vec();
    loop {
        match route(app, req, &segs).await? {
            Routed::Answer(r) => return Ok(r),
            Routed::Again(next) => segs = next,
        }
    }
}

async fn route(app: &App, req: &mut Req, segs: &[String]) -> ApiResult<Routed> {
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    if let Some(first) = s.first() {
        // A shard copy is the cluster's own: no client names one.
        if settee_core::name::is_shard_db_name(first) && !req.internal {
            return Err(ApiError::not_found("Database does not exist."));
        }
        if let Some(c) = app.coordinator() {
            if cluster::is_clustered(req, first) {
                return cluster::handle(c, req, segs).await.map(Routed::Answer);
            }
        }
    }
    if let Some(c) = app.coordinator() {
        match s.as_slice() {
            ["_membership"] => return cluster::membership(c, req).await.map(Routed::Answer),
            ["_up"] => {
                if let Some(down) = server::storage_down(app) {
                    allow(req, &[Method::GET, Method::HEAD], "GET,HEAD")?;
                    return Ok(Routed::Answer(down));
                }
                return cluster::up(c, req).map(Routed::Answer);
            }
            ["_cluster", "rebalance"] => {
                return cluster::rebalance(c, req).await.map(Routed::Answer)
            }
            ["_node", "_local", "_nodes", name] => {
                return cluster::node_doc(c, req, name).await.map(Routed::Answer)
            }
            ["_node", "_local", "_dbs", db] => {
                return cluster::dbs_doc(c, req, db).await.map(Routed::Answer)
            }
            _ => {}
        }
    }
    // A database's requests are judged by its security object.
    if let Some(first) = s.first() {
        let system = matches!(*first, "_users" | "_replicator" | "_global_changes");
        if !first.starts_with('_') || system {
            req.security = app.security_of(first);
        }
    }
    if let ["_users", rest @ ..] = s.as_slice() {
        users_db::gate(req, rest)?;
    }
    let answer = match s.as_slice() {
        [] => server::welcome(app, req),
        ["_up"] => server::up(app, req),
        ["_all_dbs"] => server::all_dbs(app, req).await,
        ["_dbs_info"] => server::dbs_info(app, req).await,
        ["_uuids"] => server::uuids(app, req),
        ["_session"] => server::session(app, req).await,
        // Boxed: its future is several times larger than any other
        // handler's, and an unboxed one would size every request's.
        ["_replicate"] => Box::pin(replicate::replicate(app, req)).await,
        ["_scheduler", "jobs"] => replicate::scheduler_jobs(app, req),
        ["_scheduler", "docs", rest @ ..] => replicate::scheduler_docs(app, req, rest),
        ["_active_tasks"] => server::active_tasks(app, req),
        ["_membership"] => server::membership(req),
        ["_cluster_setup"] => cluster_setup::cluster_setup(app, req).await,
        ["_search_analyze"] => search::analyze(req).await,
        ["_node", node, rest @ ..] => server::node(app, req, node, rest).await,
        ["favicon.ico"] => Ok(server::favicon()),
        ["_utils", ..] => Err(ApiError::not_found("missing")),
        // Any other `_name` is no handler and no database CouchDB could have
        // (except its system databases): 404, unless it is a creation attempt,
        // which the name check refuses.
        [name, rest @ ..]
            if name.starts_with('_')
                && !matches!(*name, "_users" | "_replicator" | "_global_changes")
                && !(rest.is_empty() && req.method == Method::PUT) =>
        {
            Err(ApiError::not_found("Database does not exist."))
        }
        [db] => {
            let r = db::db(app, req, db).await;
            cluster::mark_foreign(app, req, db, r)
        }
        [db, "_all_docs"] => {
            let r = all_docs::handle(app, req, db, all_docs::Kind::All).await;
            cluster::mark_foreign(app, req, db, r)
        }
        [db, "_design_docs"] => {
            let r = all_docs::handle(app, req, db, all_docs::Kind::Design).await;
            cluster::mark_foreign(app, req, db, r)
        }
        [db, "_local_docs"] => all_docs::handle(app, req, db, all_docs::Kind::Local).await,
        // CouchDB 2 dropped temporary views: every method is told so.
        [db, "_temp_view"] => {
            app.db(db)?;
            Err(ApiError::new(
                StatusCode::GONE,
                "gone",
                "Temporary views are not supported in CouchDB",
            ))
        }
        [db, "_all_docs", "queries"] => all_docs::queries(app, req, db, all_docs::Kind::All).await,
        [db, "_design_docs", "queries"] => {
            all_docs::queries(app, req, db, all_docs::Kind::Design).await
        }
        [db, "_local_docs", "queries"] => {
            all_docs::queries(app, req, db, all_docs::Kind::Local).await
        }
        [db, "_changes"] => changes::handle(app, req, db).await,
        [db, "_bulk_docs"] => bulk::bulk_docs(app, req, db).await,
        [db, "_bulk_get"] => bulk::bulk_get(app, req, db).await,
        [db, "_revs_diff"] => bulk::revs_diff(app, req, db, false).await,
        [db, "_missing_revs"] => bulk::revs_diff(app, req, db, true).await,
        [db, "_purge"] => db::purge(app, req, db).await,
        [db, "_purged_infos"] => db::purged_infos(app, req, db).await,
        [db, "_purged_infos_limit"] => db::purged_infos_limit(app, req, db).await,
        [db, "_compact"] => db::compact(app, req, db).await,
        [db, "_compact", ddoc] => db::compact_views(app, req, db, ddoc).await,
        [db, "_compact", "_design", ..] => {
            app.db(db)?;
            Err(ApiError::not_found("missing"))
        }
        [db, "_view_cleanup"] => view::cleanup(app, req, db).await,
        [db, "_nouveau_cleanup" | "_search_cleanup"] => search::cleanup(app, req, db).await,
        [db, "_ensure_full_commit"] => db::ensure_full_commit(app, req, db).await,
        [db, "_revs_limit"] => db::revs_limit(app, req, db).await,
        [db, "_security"] => db::security(app, req, db).await,
        [db, "_auto_purge"] => auto_purge::handle(app, req, db).await,
        [db, "_partition", rest @ ..] => return partition::handle(app, req, db, rest).await,
        [db, "_find"] => mango::find(app, req, db).await,
        [db, "_explain"] => mango::explain(app, req, db).await,
        [db, "_index"] => mango::index(app, req, db).await,
        [db, "_index", "_bulk_delete"] => mango::bulk_delete(app, req, db).await,
        [db, "_index", "_design", ddoc, kind, name] | [db, "_index", ddoc, kind, name] => {
            let ddoc = ddoc.strip_prefix("_design/").unwrap_or(ddoc);
            mango::delete(app, req, db, ddoc, kind, name).await
        }
        [db, "_find" | "_index" | "_explain", ..] => {
            app.db(db)?;
            Err(ApiError::not_found("missing"))
        }
        [db, "_design", name] => doc::handle(app, req, db, format!("_design/{name}")).await,
        [db, "_design", _, "_view"] | [db, "_design", _, "_view", ""] => {
            app.db(db)?;
            Err(ApiError::method_not_allowed(view::ALLOW))
        }
        [db, "_design", ddoc, "_view", view] => view::query(app, req, db, ddoc, view).await,
        [db, "_design", ddoc, "_view", view, "queries"] => {
            view::queries(app, req, db, ddoc, view).await
        }
        [db, "_design", ddoc, "_info"] => view::info(app, req, db, ddoc).await,
        [db, "_design", ddoc, "_nouveau", index] => search::query(app, req, db, ddoc, index).await,
        [db, "_design", ddoc, "_nouveau_info", index] => {
            search::info(app, req, db, ddoc, index).await
        }
        [db, "_design", ddoc, "_search", index] => search::search(app, req, db, ddoc, index).await,
        [db, "_design", ddoc, kind @ ("_search_info" | "_search_disk_size"), index] => {
            search::search_info(app, req, db, ddoc, kind, index).await
        }
        [db, "_design", ddoc, "_show", rest @ ..] => show::show(app, req, db, ddoc, rest, &s).await,
        [db, "_design", ddoc, "_update", rest @ ..] => {
            update::update(app, req, db, ddoc, rest, &s).await
        }
        [db, "_design", ddoc, "_list", rest @ ..] => list::list(app, req, db, ddoc, rest, &s).await,
        [db, "_design", ddoc, "_rewrite", rest @ ..] => {
            return rewrite::rewrite(app, req, db, ddoc, rest, &s).await
        }
        [db, "_local", _, _, ..] => {
            app.db(db)?;
            Err(ApiError::bad_request(
                "_local documents do not accept attachments.",
            ))
        }
        [db, "_local", rest @ ..] if !rest.is_empty() => {
            doc::handle(app, req, db, format!("_local/{}", rest.join("/"))).await
        }
        [db, id] => doc::handle(app, req, db, (*id).to_string()).await,
        // Any other name under a design document is an attachment's (as
        // CouchDB reads `_design/d/_x`).
        [db, "_design", ddoc, name @ ..] if !name.is_empty() => {
            att::handle(app, req, db, format!("_design/{ddoc}"), name.join("/")).await
        }
        [db, id, name @ ..] if !id.starts_with('_') && !name.is_empty() => {
            att::handle(app, req, db, (*id).to_string(), name.join("/")).await
        }
        // An attachment of a document whose id no document may have
        // (`/db/_foo/a.txt`): CouchDB refuses the implicit creation and
        // finds nothing to read or delete.
        [db, id, name @ ..] if !name.is_empty() && !DB_ENDPOINTS.contains(id) => {
            app.db(db)?;
            if req.method == Method::PUT {
                settee_core::name::validate_doc_id(id)?;
            }
            Err(ApiError::not_found("missing"))
        }
        [db, ..] => {
            app.db(db)?;
            Err(ApiError::not_implemented())
        }
    };
    answer.map(Routed::Answer)
}

/// The database-level endpoints (a path below one of them that no route
/// takes is an unknown request of that endpoint, not an attachment).
const DB_ENDPOINTS: &[&str] = &[
    "_all_docs",
    "_auto_purge",
    "_bulk_docs",
    "_bulk_get",
    "_changes",
    "_compact",
    "_design_docs",
    "_ensure_full_commit",
    "_explain",
    "_find",
    "_index",
    "_local_docs",
    "_missing_revs",
    "_nouveau_cleanup",
    "_partition",
    "_purge",
    "_purged_infos_limit",
    "_revs_diff",
    "_revs_limit",
    "_search_cleanup",
    "_security",
    "_shards",
    "_sync_shards",
    "_temp_view",
    "_view_cleanup",
];
