//! The golden conformance harness.
//!
//! `tests/conformance/` holds scenarios (`scenarios/*.scn`, see
//! [`scenario`]), the responses the reference CouchDB gave to them
//! (`golden/*.json`, recorded by [`record`], normalised by [`normalize`]),
//! and `DIFFERENCES.md`, the allowed differences, each with its reason.
//! [`check`] runs the scenarios against another server and reports every
//! difference not allowed, every allowed difference that no longer occurs,
//! and every scenario whose golden is missing or was recorded from other text.
//!
//! [`corpus`] generates scenario files (the Mango `_find` corpus) from a
//! seed; they are recorded and checked like hand-written ones.
//!
//! Invariant: goldens are facts about CouchDB -- only [`record`] writes them,
//! from a live server's responses, never by hand or from Settee.

pub mod compare;
pub mod corpus;
pub mod http;
pub mod normalize;
pub mod run;
pub mod scenario;
pub mod shapes;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde_json::{Map, Value};

pub use run::Target;
pub use scenario::Scenario;

/// Loads every scenario under `dir/scenarios`, keeping those whose id
/// matches `only` (a glob).
pub fn load(dir: &Path, only: Option<&str>) -> Result<Vec<Scenario>, String> {
    let all = scenario::load_dir(&dir.join("scenarios")).map_err(|e| e.to_string())?;
    Ok(all
        .into_iter()
        .filter(|s| only.is_none_or(|g| compare::glob(g, &s.id)))
        .collect())
}

fn golden_path(dir: &Path, area: &str) -> std::path::PathBuf {
    dir.join("golden").join(format!("{area}.json"))
}

fn read_golden(dir: &Path, area: &str) -> Result<Map<String, Value>, String> {
    let p = golden_path(dir, area);
    match std::fs::read_to_string(&p) {
        Ok(t) => match serde_json::from_str(&t) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(format!("{} is not a JSON object", p.display())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Map::new()),
        Err(e) => Err(format!("{}: {e}", p.display())),
    }
}

/// Runs the scenarios against the reference server and writes their goldens
/// (other scenarios' goldens in the same files are kept; goldens of
/// scenarios that no longer exist are dropped). Returns what failed to run.
pub fn record(
    dir: &Path,
    t: &Target,
    only: Option<&str>,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<String>, String> {
    let all = load(dir, None)?;
    let mut by_area: BTreeMap<String, Vec<&Scenario>> = BTreeMap::new();
    for s in &all {
        by_area.entry(s.area.clone()).or_default().push(s);
    }
    std::fs::create_dir_all(dir.join("golden")).map_err(|e| e.to_string())?;
    let mut failed = Vec::new();
    for (area, scs) in by_area {
        // Files with nothing selected are left alone (recordings of other
        // areas may run at the same time).
        if !scs
            .iter()
            .any(|s| only.is_none_or(|g| compare::glob(g, &s.id)))
        {
            continue;
        }
        let old = read_golden(dir, &area)?;
        let mut out = Map::new();
        for s in scs {
            let selected = only.is_none_or(|g| compare::glob(g, &s.id));
            if !selected {
                if let Some(v) = old.get(&s.id) {
                    out.insert(s.id.clone(), v.clone());
                }
                continue;
            }
            match run::run(t, s) {
                Ok(steps) => {
                    log(&format!("recorded {}", s.id));
                    let mut e = Map::new();
                    e.insert("title".into(), Value::String(s.title.clone()));
                    e.insert("hash".into(), Value::String(s.hash.clone()));
                    e.insert("steps".into(), Value::Array(steps));
                    out.insert(s.id.clone(), Value::Object(e));
                }
                Err(err) => {
                    log(&format!("FAILED {}: {err}", s.id));
                    failed.push(format!("{}: {err}", s.id));
                }
            }
        }
        let text = serde_json::to_string_pretty(&Value::Object(out)).map_err(|e| e.to_string())?;
        std::fs::write(golden_path(dir, &area), text + "\n").map_err(|e| e.to_string())?;
    }
    Ok(failed)
}

/// What a check found.
#[derive(Debug, Default)]
pub struct Report {
    pub scenarios: usize,
    pub passed: usize,
    /// Passed only thanks to allowed differences.
    pub allowed: usize,
    /// (scenario id, title, differences not allowed).
    pub failures: Vec<(String, String, Vec<compare::Diff>)>,
    /// Scenarios that could not be checked (no golden, stale golden, run error).
    pub errors: Vec<String>,
    /// DIFFERENCES.md entries that matched nothing.
    pub stale: Vec<compare::Allowed>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.failures.is_empty() && self.errors.is_empty() && self.stale.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (id, title, diffs) in &self.failures {
            writeln!(f, "DIFFERS {id} ({title}):")?;
            for d in diffs {
                writeln!(
                    f,
                    "    {}: CouchDB {} / here {}",
                    d.path, d.expected, d.actual
                )?;
            }
        }
        for e in &self.errors {
            writeln!(f, "ERROR {e}")?;
        }
        for s in &self.stale {
            writeln!(
                f,
                "STALE DIFFERENCES.md:{}: `{}` `{}` matches no difference any more: remove it",
                s.line, s.scenario, s.path
            )?;
        }
        writeln!(
            f,
            "conformance: {} scenarios, {} as CouchDB ({} of them with listed differences), {} differ, {} errors, {} stale entries",
            self.scenarios,
            self.passed,
            self.allowed,
            self.failures.len(),
            self.errors.len(),
            self.stale.len()
        )
    }
}

/// Runs the scenarios against `t` and compares with the goldens.
pub fn check(dir: &Path, t: &Target, only: Option<&str>) -> Result<Report, String> {
    let scs = load(dir, only)?;
    let allowed_text = std::fs::read_to_string(dir.join("DIFFERENCES.md")).unwrap_or_default();
    let allowed = compare::parse_allowed(&allowed_text)?;
    let mut used = vec![false; allowed.len()];
    let mut goldens: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let mut rep = Report::default();
    for s in &scs {
        rep.scenarios += 1;
        if !goldens.contains_key(&s.area) {
            goldens.insert(s.area.clone(), read_golden(dir, &s.area)?);
        }
        let Some(g) = goldens[&s.area].get(&s.id) else {
            rep.errors
                .push(format!("{}: no golden (record it against CouchDB)", s.id));
            continue;
        };
        if g["hash"].as_str() != Some(s.hash.as_str()) {
            rep.errors.push(format!(
                "{}: the golden was recorded from other scenario text (re-record it)",
                s.id
            ));
            continue;
        }
        let actual = match run::run(t, s) {
            Ok(a) => a,
            Err(e) => {
                rep.errors.push(format!("{}: {e}", s.id));
                continue;
            }
        };
        let golden_steps = g["steps"].as_array().cloned().unwrap_or_default();
        let diffs = compare::scenario(&golden_steps, &actual);
        let mut left = Vec::new();
        let mut any_allowed = false;
        for d in diffs {
            let mut ok = false;
            for (i, a) in allowed.iter().enumerate() {
                if compare::glob(&a.scenario, &s.id) && compare::glob(&a.path, &d.path) {
                    used[i] = true;
                    ok = true;
                }
            }
            if ok {
                any_allowed = true;
            } else {
                left.push(d);
            }
        }
        if left.is_empty() {
            rep.passed += 1;
            if any_allowed {
                rep.allowed += 1;
            }
        } else {
            rep.failures.push((s.id.clone(), s.title.clone(), left));
        }
    }
    if only.is_none() {
        rep.stale = allowed
            .into_iter()
            .zip(used)
            .filter(|(_, u)| !u)
            .map(|(a, _)| a)
            .collect();
    }
    Ok(rep)
}
