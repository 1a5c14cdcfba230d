//! A three-member etcd cluster on loopback (Debian's `etcd`, installed by
//! scripts/ensure-deps), whose members the nemesis kills and restarts.
//!
//! Invariants: each member keeps its ports and data directory for the
//! whole run (a restarted member rejoins as itself); every start waits at
//! most 30 s; members are killed when the cluster is dropped.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::etcd_common::free_port;

struct Member {
    name: String,
    client: u16,
    peer: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// The members and what they were started with.
pub struct Etcd3 {
    members: Vec<Member>,
    initial: String,
    _tmp: tempfile::TempDir,
}

impl Etcd3 {
    /// Starts three members and waits until each accepts connections.
    pub fn start() -> Etcd3 {
        let tmp = tempfile::tempdir().expect("tempdir");
        let members: Vec<Member> = (0..3)
            .map(|i| Member {
                name: format!("e{i}"),
                client: free_port(),
                peer: free_port(),
                dir: tmp.path().join(format!("e{i}")),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut e = Etcd3 {
            members,
            initial,
            _tmp: tmp,
        };
        for i in 0..3 {
            e.spawn(i);
        }
        for i in 0..3 {
            e.wait_listening(i);
        }
        e
    }

    /// Each member's client port.
    pub fn client_ports(&self) -> Vec<u16> {
        self.members.iter().map(|m| m.client).collect()
    }

    fn spawn(&mut self, i: usize) {
        let initial = self.initial.clone();
        let m = &mut self.members[i];
        std::fs::create_dir_all(&m.dir).expect("etcd dir");
        let client = format!("http://127.0.0.1:{}", m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(m.dir.join("etcd.log"))
            .expect("etcd log");
        let child = Command::new("etcd")
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(m.dir.join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-token", "settee-nemesis"])
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("run etcd (scripts/ensure-deps installs etcd-server)");
        m.child = Some(child);
    }

    fn wait_listening(&mut self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = format!("127.0.0.1:{}", self.members[i].client)
            .parse()
            .expect("addr");
        while Instant::now() < deadline {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            if let Some(Ok(Some(status))) = self.members[i].child.as_mut().map(Child::try_wait) {
                let log = std::fs::read_to_string(self.members[i].dir.join("etcd.log"))
                    .unwrap_or_default();
                panic!("etcd member {i} exited ({status}): {log}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("etcd member {i} did not listen within 30 s");
    }

    /// SIGKILL of member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data directory.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        self.wait_listening(i);
    }
}

impl Drop for Etcd3 {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
