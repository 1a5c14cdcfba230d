//! A TCP proxy the nemesis controls: one loopback port forwarding to a
//! target port that may change (a restarted node listens elsewhere), and
//! a switch that cuts the link as a network partition would.
//!
//! - [`Cut::Refuse`]: existing connections are shut down, new ones closed
//!   at once (a host that answers with resets).
//! - [`Cut::Blackhole`]: existing connections are shut down, new ones are
//!   accepted and then nothing passes (packets dropped): the other side
//!   waits for its own timeouts. Held connections close when the link is
//!   healed.
//!
//! Invariants: at most [`MAX_CONNS`] connections at once (more are closed
//! at accept); nothing is forwarded while cut; every thread ends when the
//! proxy is dropped (its accept loop is woken by a connection to itself).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Connections a proxy holds at once, at most.
pub const MAX_CONNS: usize = 512;

/// How a cut link behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    Refuse,
    Blackhole,
}

const UP: u8 = 0;
const REFUSE: u8 = 1;
const BLACKHOLE: u8 = 2;

#[derive(Default)]
struct State {
    target: AtomicU16,
    mode: AtomicU8,
    stop: AtomicBool,
    /// Every open connection's streams (both sides), by connection id.
    conns: Mutex<Vec<(u64, TcpStream)>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl State {
    fn shut_all(&self) {
        let conns = std::mem::take(&mut *self.conns.lock().unwrap_or_else(|p| p.into_inner()));
        for (_, s) in conns {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn track(&self, id: u64, s: &TcpStream) -> bool {
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        if conns.len() >= MAX_CONNS * 2 {
            return false;
        }
        if let Ok(c) = s.try_clone() {
            conns.push((id, c));
        }
        true
    }

    fn forget(&self, id: u64) {
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(i, _)| *i != id);
    }
}

/// A proxy on a loopback port.
pub struct Proxy {
    pub port: u16,
    state: Arc<State>,
}

impl Proxy {
    /// A proxy to `target` (0: nowhere yet, connections are closed).
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a proxy port");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State::default());
        state.target.store(target, Ordering::SeqCst);
        let st = state.clone();
        std::thread::spawn(move || accept_loop(listener, st));
        Proxy { port, state }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Forwards to `target` from now on (connections to the old one are
    /// shut down).
    pub fn retarget(&self, target: u16) {
        if self.state.target.swap(target, Ordering::SeqCst) != target {
            self.state.shut_all();
        }
    }

    /// Cuts the link.
    pub fn cut(&self, how: Cut) {
        let mode = match how {
            Cut::Refuse => REFUSE,
            Cut::Blackhole => BLACKHOLE,
        };
        self.state.mode.store(mode, Ordering::SeqCst);
        self.state.shut_all();
    }

    /// Lets traffic pass again (held blackholed connections are closed).
    pub fn heal(&self) {
        if self.state.mode.swap(UP, Ordering::SeqCst) == BLACKHOLE {
            self.state.shut_all();
        }
    }

    pub fn is_cut(&self) -> bool {
        self.state.mode.load(Ordering::SeqCst) != UP
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.state.shut_all();
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(
            &format!("127.0.0.1:{}", self.port).parse().expect("addr"),
            Duration::from_millis(200),
        );
    }
}

fn accept_loop(listener: TcpListener, st: Arc<State>) {
    for conn in listener.incoming() {
        if st.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = conn else { continue };
        let id = st.next_id.fetch_add(1, Ordering::SeqCst);
        match st.mode.load(Ordering::SeqCst) {
            REFUSE => continue,
            BLACKHOLE => {
                // Held open, nothing read or written, until healed or cut
                // again (shut_all closes it).
                st.track(id, &client);
                continue;
            }
            _ => {}
        }
        let target = st.target.load(Ordering::SeqCst);
        if target == 0 {
            continue;
        }
        let addr = format!("127.0.0.1:{target}").parse().expect("addr");
        let Ok(server) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            continue;
        };
        if !st.track(id, &client) || !st.track(id, &server) {
            st.forget(id);
            continue;
        }
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
            st.forget(id);
            continue;
        };
        let st1 = st.clone();
        let st2 = st.clone();
        std::thread::spawn(move || pump(client, server, &st1, id));
        std::thread::spawn(move || pump(s2, c2, &st2, id));
    }
}

/// Copies `from` to `to` while the link is up; shuts both down at the end.
fn pump(mut from: TcpStream, mut to: TcpStream, st: &State, id: u64) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if st.mode.load(Ordering::SeqCst) != UP || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
    st.forget(id);
}
