//! A real etcd for the tests: `/usr/bin/etcd` (Debian's etcd-server,
//! installed by scripts/ensure-deps) on two free loopback ports with a
//! temporary data directory, killed and removed when dropped.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use settee_cluster::{Etcd, EtcdConfig};

pub struct EtcdServer {
    child: Child,
    pub url: String,
    pub client_addr: SocketAddr,
    _dir: tempfile::TempDir,
}

/// A loopback port nothing listened on a moment ago (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl EtcdServer {
    /// Starts etcd and waits (at most 20 s) until it accepts connections.
    /// Tries again on other ports if it exits at start (a port taken
    /// between choosing and binding it).
    pub fn start() -> EtcdServer {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start() {
                Ok(s) => return s,
                Err(e) => last = e,
            }
        }
        panic!("etcd did not start: {last}");
    }

    fn try_start() -> Result<EtcdServer, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (client, peer) = (free_port(), free_port());
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log")).map_err(|e| e.to_string())?;
        let mut child = Command::new("etcd")
            .arg("--name")
            .arg("t")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--listen-client-urls")
            .arg(&url)
            .arg("--advertise-client-urls")
            .arg(&url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(format!("t={peer_url}"))
            .arg("--logger")
            .arg("zap")
            .arg("--log-level")
            .arg("warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| {
                format!("cannot run etcd (scripts/ensure-deps installs etcd-server): {e}")
            })?;
        let client_addr: SocketAddr = format!("127.0.0.1:{client}")
            .parse()
            .map_err(|e| format!("{e}"))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.path().join("etcd.log")).unwrap_or_default();
                return Err(format!("etcd exited at start ({status}): {log}"));
            }
            if TcpStream::connect_timeout(&client_addr, Duration::from_millis(200)).is_ok() {
                return Ok(EtcdServer {
                    child,
                    url,
                    client_addr,
                    _dir: dir,
                });
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err("etcd did not listen within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn config(&self) -> EtcdConfig {
        EtcdConfig::new(vec![self.url.clone()])
    }

    /// A client, once etcd answers linearizable requests (it has elected
    /// itself leader): at most 20 s.
    pub async fn connect(&self) -> Etcd {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut config = self.config();
            config.connect_timeout = Duration::from_millis(500);
            config.request_timeout = Duration::from_secs(1);
            let ready = match Etcd::connect(config).await {
                Ok(etcd) => settee_cluster::settings::get(&etcd).await.map(|_| ()),
                Err(e) => Err(e),
            };
            match ready {
                Ok(()) => {
                    return Etcd::connect(self.config())
                        .await
                        .expect("connect to the test etcd")
                }
                Err(e) if Instant::now() > deadline => panic!("etcd not ready within 20 s: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Kills etcd at once (SIGKILL), as a crash.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits at most `limit` for `cond`, checking every 20 ms; returns how long it took.
pub async fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}
