//! After a run: are the databases it wrote consistent, and does the server
//! still serve a normal workload?
//!
//! For every database whose name starts with the run's prefix:
//! `GET /db`'s `doc_count` equals both `_all_docs`' `total_rows` and its
//! number of rows; `_changes` lists each document once, its live rows are
//! exactly `_all_docs`' ids and its deleted rows number `doc_del_count`;
//! every document `_all_docs` lists reads back with `GET` at the revision
//! `_all_docs` names. Then a fresh database gets a small normal workload
//! (creates, a bulk write, reads, updates, deletes) whose every answer is
//! checked, and is deleted.
//!
//! Invariants: read-only on the run's databases; bounded (at most
//! [`PROBLEMS_MAX`] problems kept, documents read by `parallel` clients).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::client::{doc_path, Client, ClientError};
use crate::target::Target;

/// Problems kept in full.
pub const PROBLEMS_MAX: usize = 50;

#[derive(Debug, Clone, Default, Serialize)]
pub struct DbFigures {
    pub doc_count: u64,
    pub doc_del_count: u64,
    pub all_docs_rows: u64,
    pub changes_rows: u64,
}

/// What the check found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ConsistencyReport {
    pub dbs: BTreeMap<String, DbFigures>,
    pub docs_read: u64,
    pub problems: Vec<String>,
    pub problem_count: u64,
    pub workload_error: Option<String>,
    pub duration_s: f64,
}

impl ConsistencyReport {
    pub fn ok(&self) -> bool {
        self.problem_count == 0 && self.workload_error.is_none()
    }

    fn problem(&mut self, p: String) {
        self.problem_count += 1;
        if self.problems.len() < PROBLEMS_MAX {
            self.problems.push(p);
        }
    }

    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let docs: u64 = self.dbs.values().map(|d| d.doc_count).sum();
        let _ = writeln!(
            o,
            "  consistency: {} databases, {} documents, {} read back, {} problems ({:.1} s); normal workload afterwards: {}",
            self.dbs.len(),
            docs,
            self.docs_read,
            self.problem_count,
            self.duration_s,
            self.workload_error.as_deref().unwrap_or("ok")
        );
        for (name, d) in &self.dbs {
            let _ = writeln!(
                o,
                "    {name}: doc_count {} (deleted {}), _all_docs rows {}, _changes rows {}",
                d.doc_count, d.doc_del_count, d.all_docs_rows, d.changes_rows
            );
        }
        for p in self.problems.iter().take(20) {
            let _ = writeln!(o, "    problem: {p}");
        }
        o
    }
}

/// Checks the databases named `prefix…` and runs the normal workload.
pub async fn check(target: &Target, prefix: &str, parallel: usize) -> ConsistencyReport {
    let began = Instant::now();
    let mut rep = ConsistencyReport::default();
    let mut c = Client::new(target);
    let dbs = match c.json("GET", "/_all_dbs", None).await {
        Ok(Value::Array(a)) => a
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .filter(|n| n.starts_with(prefix))
            .collect::<Vec<_>>(),
        Ok(v) => {
            rep.problem(format!("_all_dbs is not an array: {v}"));
            Vec::new()
        }
        Err(e) => {
            rep.problem(format!("_all_dbs failed: {e}"));
            Vec::new()
        }
    };
    for db in dbs {
        if let Err(e) = check_db(&mut c, target, &db, parallel, &mut rep).await {
            rep.problem(format!("{db}: {e}"));
        }
    }
    if let Err(e) = workload(&mut c, &format!("{prefix}after")).await {
        rep.workload_error = Some(e.to_string());
    }
    rep.duration_s = began.elapsed().as_secs_f64();
    rep
}

fn count(v: &Value, key: &str) -> Result<u64, ClientError> {
    v[key]
        .as_u64()
        .ok_or_else(|| ClientError(format!("no integer {key} in {v}")))
}

async fn check_db(
    c: &mut Client,
    target: &Target,
    db: &str,
    parallel: usize,
    rep: &mut ConsistencyReport,
) -> Result<(), ClientError> {
    let enc =
        percent_encoding::utf8_percent_encode(db, percent_encoding::NON_ALPHANUMERIC).to_string();
    let info = c.json("GET", &format!("/{enc}"), None).await?;
    let doc_count = count(&info, "doc_count")?;
    let doc_del_count = count(&info, "doc_del_count")?;
    let all = c.json("GET", &format!("/{enc}/_all_docs"), None).await?;
    let rows = all["rows"]
        .as_array()
        .ok_or_else(|| ClientError(format!("{db}: _all_docs has no rows")))?;
    let total_rows = count(&all, "total_rows")?;
    let mut revs: HashMap<String, String> = HashMap::with_capacity(rows.len());
    for r in rows {
        let id = r["id"].as_str().unwrap_or_default().to_string();
        let rev = r["value"]["rev"].as_str().unwrap_or_default().to_string();
        if id.is_empty() || rev.is_empty() {
            rep.problem(format!("{db}: _all_docs row without id or rev: {r}"));
        }
        if revs.insert(id.clone(), rev).is_some() {
            rep.problem(format!("{db}: _all_docs lists {id:?} twice"));
        }
    }
    if total_rows != doc_count || rows.len() as u64 != doc_count {
        rep.problem(format!(
            "{db}: doc_count {doc_count}, _all_docs total_rows {total_rows}, rows {}",
            rows.len()
        ));
    }
    let changes = c.json("GET", &format!("/{enc}/_changes"), None).await?;
    let results = changes["results"]
        .as_array()
        .ok_or_else(|| ClientError(format!("{db}: _changes has no results")))?;
    let mut seen: HashSet<&str> = HashSet::with_capacity(results.len());
    let mut live: HashSet<&str> = HashSet::new();
    let mut deleted = 0u64;
    for r in results {
        let id = r["id"].as_str().unwrap_or_default();
        if !seen.insert(id) {
            rep.problem(format!("{db}: _changes lists {id:?} more than once"));
        }
        if r["deleted"].as_bool() == Some(true) {
            deleted += 1;
        } else {
            live.insert(id);
            let rev = r["changes"][0]["rev"].as_str().unwrap_or_default();
            match revs.get(id) {
                Some(r) if r == rev => {}
                Some(r) => rep.problem(format!(
                    "{db}: {id:?} is at {r} in _all_docs but {rev} in _changes"
                )),
                None => rep.problem(format!(
                    "{db}: {id:?} is live in _changes but not in _all_docs"
                )),
            }
        }
    }
    for id in revs.keys() {
        if !live.contains(id.as_str()) {
            rep.problem(format!(
                "{db}: {id:?} is in _all_docs but not live in _changes"
            ));
        }
    }
    if deleted != doc_del_count {
        rep.problem(format!(
            "{db}: doc_del_count {doc_del_count} but {deleted} deleted rows in _changes"
        ));
    }
    rep.dbs.insert(
        db.to_string(),
        DbFigures {
            doc_count,
            doc_del_count,
            all_docs_rows: rows.len() as u64,
            changes_rows: results.len() as u64,
        },
    );
    // Every listed document reads back at the listed revision.
    let list: Vec<(String, String)> = revs.into_iter().collect();
    let chunk = list.len().div_ceil(parallel.max(1)).max(1);
    let mut tasks = tokio::task::JoinSet::new();
    for part in list.chunks(chunk) {
        let part = part.to_vec();
        let (target, db) = (target.clone(), db.to_string());
        tasks.spawn(async move {
            let mut c = Client::new(&target);
            let mut problems = Vec::new();
            let mut read = 0u64;
            for (id, rev) in part {
                read += 1;
                match c.request("GET", &doc_path(&db, &id), None).await {
                    Ok(r) if r.status == 200 => {
                        let got = r
                            .json()
                            .and_then(|v| v["_rev"].as_str().map(str::to_string));
                        if got.as_deref() != Some(rev.as_str()) {
                            problems.push(format!(
                                "{db}: GET {id:?} gives _rev {got:?}, _all_docs says {rev}"
                            ));
                        }
                    }
                    Ok(r) => problems.push(format!(
                        "{db}: GET {id:?} listed in _all_docs answers {} {}",
                        r.status,
                        crate::check::preview(&r.body, 120)
                    )),
                    Err(e) => problems.push(format!("{db}: GET {id:?}: {e}")),
                }
            }
            (read, problems)
        });
    }
    while let Some(done) = tasks.join_next().await {
        if let Ok((read, problems)) = done {
            rep.docs_read += read;
            for p in problems {
                rep.problem(p);
            }
        }
    }
    Ok(())
}

fn expect(cond: bool, what: impl FnOnce() -> String) -> Result<(), ClientError> {
    if cond {
        Ok(())
    } else {
        Err(ClientError(what()))
    }
}

/// A small normal workload on a fresh database, every answer checked.
async fn workload(c: &mut Client, db: &str) -> Result<(), ClientError> {
    let path = format!("/{db}");
    let _ = c.request("DELETE", &path, None).await?;
    c.json("PUT", &path, None).await?;
    let mut revs = BTreeMap::new();
    for i in 0..50 {
        let id = format!("w{i:03}");
        let v = c
            .json(
                "PUT",
                &format!("{path}/{id}"),
                Some(format!("{{\"i\":{i}}}").as_bytes()),
            )
            .await?;
        revs.insert(id, v["rev"].as_str().unwrap_or_default().to_string());
    }
    let docs: Vec<String> = (50..100)
        .map(|i| format!("{{\"_id\":\"w{i:03}\",\"i\":{i}}}"))
        .collect();
    let bulk = c
        .json(
            "POST",
            &format!("{path}/_bulk_docs"),
            Some(format!("{{\"docs\":[{}]}}", docs.join(",")).as_bytes()),
        )
        .await?;
    for r in bulk.as_array().into_iter().flatten() {
        expect(r["ok"] == Value::Bool(true), || {
            format!("bulk write failed: {r}")
        })?;
        revs.insert(
            r["id"].as_str().unwrap_or_default().to_string(),
            r["rev"].as_str().unwrap_or_default().to_string(),
        );
    }
    expect(revs.len() == 100, || {
        format!("{} documents written, 100 expected", revs.len())
    })?;
    for (id, rev) in &revs {
        let d = c.json("GET", &format!("{path}/{id}"), None).await?;
        expect(d["_rev"].as_str() == Some(rev), || {
            format!("{id}: read {d}, wrote {rev}")
        })?;
    }
    for i in 0..10 {
        let id = format!("w{i:03}");
        let body = format!("{{\"_rev\":\"{}\",\"i\":{i},\"updated\":true}}", revs[&id]);
        let v = c
            .json("PUT", &format!("{path}/{id}"), Some(body.as_bytes()))
            .await?;
        expect(
            v["rev"].as_str().is_some_and(|r| r.starts_with("2-")),
            || format!("update of {id}: {v}"),
        )?;
        revs.insert(id, v["rev"].as_str().unwrap_or_default().to_string());
    }
    for i in 90..95 {
        let id = format!("w{i:03}");
        c.json("DELETE", &format!("{path}/{id}?rev={}", revs[&id]), None)
            .await?;
    }
    let info = c.json("GET", &path, None).await?;
    expect(
        info["doc_count"] == 95 && info["doc_del_count"] == 5,
        || format!("after the workload: {info}"),
    )?;
    let all = c.json("GET", &format!("{path}/_all_docs"), None).await?;
    expect(all["total_rows"] == 95, || {
        format!(
            "_all_docs after the workload: total_rows {}",
            all["total_rows"]
        )
    })?;
    let ch = c.json("GET", &format!("{path}/_changes"), None).await?;
    expect(
        ch["results"].as_array().is_some_and(|a| a.len() == 100),
        || {
            format!(
                "_changes after the workload: {} rows",
                ch["results"].as_array().map_or(0, Vec::len)
            )
        },
    )?;
    c.json("DELETE", &path, None).await?;
    Ok(())
}
