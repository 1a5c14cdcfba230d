//! The Settee members of a nemesis run, each reaching every other member
//! and every etcd member through its own [`Proxy`], so the nemesis can cut
//! any link: node i reaches node j through `links[i][j]` (given to node i
//! as `--peer-url`), and etcd member k through `etcd_links[i][k]` (its
//! `--cluster-etcd`). Clients reach nodes directly.
//!
//! Invariants: a slot keeps its name and data directory for the whole run
//! (a restarted member is the same member); the links into a node follow
//! it to the port it listens on after a restart; every start is bounded.

use std::time::{Duration, Instant};

use super::etcd3::Etcd3;
use super::proxy::{Cut, Proxy};
use crate::common::Server;

/// One member's place.
pub struct Slot {
    pub name: String,
    pub dir: std::path::PathBuf,
    pub server: Option<Server>,
    pub paused: bool,
    /// Decommissioned and stopped: never started again.
    pub retired: bool,
}

pub struct Members {
    pub slots: Vec<Slot>,
    links: Vec<Vec<Option<Proxy>>>,
    etcd_links: Vec<Vec<Proxy>>,
    flags: Vec<String>,
    _tmp: tempfile::TempDir,
}

impl Members {
    /// `slots` places (none started) on `etcd`, every member started with
    /// `flags` besides the cluster's own.
    pub fn new(etcd: &Etcd3, slots: usize, flags: &[&str]) -> Members {
        let tmp = tempfile::tempdir().expect("tempdir");
        let slot_list = (0..slots)
            .map(|i| {
                let dir = tmp.path().join(format!("n{i}"));
                std::fs::create_dir_all(&dir).expect("node dir");
                Slot {
                    name: format!("n{i}@127.0.0.1"),
                    dir,
                    server: None,
                    paused: false,
                    retired: false,
                }
            })
            .collect();
        let links = (0..slots)
            .map(|i| {
                (0..slots)
                    .map(|j| (i != j).then(|| Proxy::start(0)))
                    .collect()
            })
            .collect();
        let etcd_links = (0..slots)
            .map(|_| etcd.client_ports().into_iter().map(Proxy::start).collect())
            .collect();
        Members {
            slots: slot_list,
            links,
            etcd_links,
            flags: flags.iter().map(|s| s.to_string()).collect(),
            _tmp: tmp,
        }
    }

    /// Starts member `i` and waits until it has joined (its `/_up` is
    /// 200). A start refused because etcd still holds the name (the lease
    /// of the process just killed has not run out) is tried again, for at
    /// most `limit`.
    pub fn start(&mut self, i: usize, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        let etcd: Vec<String> = self.etcd_links[i].iter().map(Proxy::url).collect();
        let etcd = etcd.join(",");
        let mut args: Vec<String> = vec![
            "--cluster-etcd".into(),
            etcd,
            "--node".into(),
            self.slots[i].name.clone(),
        ];
        for (j, link) in self.links[i].iter().enumerate() {
            if let Some(p) = link {
                args.push("--peer-url".into());
                args.push(format!("{}={}", self.slots[j].name, p.url()));
            }
        }
        args.extend(self.flags.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut last = String::new();
        while Instant::now() < deadline {
            let mut s = Server::start_in(&self.slots[i].dir, &args);
            let joined = loop {
                if let Ok(Some(status)) = s.child.try_wait() {
                    last = format!("exited: {status}");
                    break false;
                }
                if try_status(s.port, "/_up") == Some(200) {
                    break true;
                }
                if Instant::now() > deadline {
                    last = "did not join in time".into();
                    break false;
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            if joined {
                for row in &self.links {
                    if let Some(Some(p)) = row.get(i) {
                        p.retarget(s.port);
                    }
                }
                self.slots[i].server = Some(s);
                self.slots[i].paused = false;
                return Ok(());
            }
            drop(s);
            std::thread::sleep(Duration::from_millis(300));
        }
        Err(format!(
            "member {} did not start: {last}",
            self.slots[i].name
        ))
    }

    /// SIGKILL of member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(s) = self.slots[i].server.take() {
            s.kill9();
        }
        self.slots[i].paused = false;
    }

    /// SIGTERM of member `i`, waiting for its exit.
    pub fn stop(&mut self, i: usize) {
        if let Some(s) = self.slots[i].server.take() {
            s.stop();
        }
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) of member `i`.
    pub fn pause(&mut self, i: usize, stop: bool) {
        if let Some(s) = &self.slots[i].server {
            let sig = if stop { "-STOP" } else { "-CONT" };
            let ok = std::process::Command::new("kill")
                .arg(sig)
                .arg(s.child.id().to_string())
                .status()
                .is_ok_and(|st| st.success());
            assert!(ok, "kill {sig}");
            self.slots[i].paused = stop;
        }
    }

    /// Cuts (or heals, `None`) every link between member `i` and every
    /// other member, both ways.
    pub fn isolate(&self, i: usize, how: Option<Cut>) {
        for j in 0..self.slots.len() {
            if i != j {
                self.link(i, j, how);
            }
        }
    }

    /// Cuts (or heals) the links between `i` and `j`, both ways.
    pub fn link(&self, i: usize, j: usize, how: Option<Cut>) {
        for p in [&self.links[i][j], &self.links[j][i]].into_iter().flatten() {
            match how {
                Some(c) => p.cut(c),
                None => p.heal(),
            }
        }
    }

    /// Cuts (or heals) member `i`'s links to every etcd member.
    pub fn etcd_link(&self, i: usize, how: Option<Cut>) {
        for p in &self.etcd_links[i] {
            match how {
                Some(c) => p.cut(c),
                None => p.heal(),
            }
        }
    }

    /// Heals every link.
    pub fn heal_all(&self) {
        for row in &self.links {
            for p in row.iter().flatten() {
                p.heal();
            }
        }
        for row in &self.etcd_links {
            for p in row {
                p.heal();
            }
        }
    }

    /// The members running and not paused.
    pub fn running(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|i| self.slots[*i].server.is_some() && !self.slots[*i].paused)
            .collect()
    }

    /// The members that should be part of the cluster at the end (started
    /// at least once and not retired).
    pub fn members(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|i| !self.slots[*i].retired && self.slots[*i].server.is_some())
            .collect()
    }

    /// Member `i`'s server (it must be running).
    pub fn server(&self, i: usize) -> &Server {
        self.slots[i].server.as_ref().expect("a running member")
    }

    /// Each running member's port (for the clients).
    pub fn ports(&self) -> Vec<u16> {
        self.slots
            .iter()
            .filter_map(|s| s.server.as_ref().map(|s| s.port))
            .collect()
    }

    /// The slot of the member named `name`.
    pub fn slot_of(&self, name: &str) -> Option<usize> {
        self.slots.iter().position(|s| s.name == name)
    }
}

/// The status of a `GET` (as admin) to `path` on `port`, `None` when it
/// did not answer within 2 s.
pub fn try_status(port: u16, path: &str) -> Option<u16> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(2))
        .build();
    let (user, password) = crate::common::ADMIN;
    match agent
        .get(&format!("http://127.0.0.1:{port}{path}"))
        .set("Authorization", &crate::common::basic_auth(user, password))
        .call()
    {
        Ok(r) => Some(r.status()),
        Err(ureq::Error::Status(s, _)) => Some(s),
        Err(_) => None,
    }
}
