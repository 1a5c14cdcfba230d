//! Idle polling: keeps the machine's CPUs from going to sleep for a short
//! window after each request, so the next wake-up (the next request, a
//! finished fsync, the client reading its answer) does not pay for waking a
//! halted CPU.
//!
//! On virtual machines whose guests halt idle vCPUs (no guest halt polling),
//! waking a sleeping vCPU costs tens of microseconds — on the machine the
//! benchmarks run on, a loopback round trip takes ~100 µs with idle vCPUs
//! and ~40 µs with busy ones. This is the trade ScyllaDB's
//! `--idle-poll-time-us` and KVM's guest halt polling make: CPU time that
//! would have been idle is spent spinning, bought back as latency for
//! serial clients.
//!
//! Only serial traffic of short requests is helped. When requests overlap,
//! the CPUs are busy anyway and the short gaps between them are better left
//! to the kernel. When requests take longer than [`LONG_REQUEST`] on
//! average, a wake-up is a small part of each, while a spinning CPU slows
//! the one doing the work (on a host that runs both vCPUs on one physical
//! core, a spinner takes execution resources from its sibling: polling cut
//! serial `_all_docs` paging of 2,000 documents by a quarter). Either
//! suspends polling for [`PAUSE`]. The average (an exponentially weighted
//! one, 1/8 per request) keeps an occasional slow fsync from suspending
//! polling for a stream of short writes.
//!
//! Invariants:
//! - one spinner thread per CPU the process may run on, pinned to it, at
//!   `SCHED_IDLE` priority: it only ever runs when that CPU has nothing
//!   else to do, and any woken thread preempts it at once;
//! - a spinner spins only while a request is in flight or one ended within
//!   the last `window`, no two requests overlapped and the average request
//!   was not longer than [`LONG_REQUEST`] within the last [`PAUSE`];
//!   otherwise it parks. A spinner parked for idleness is
//!   unparked by the next request that starts alone (no lost wake-up: the
//!   spinner announces that it sleeps and then re-reads the activity
//!   counter, [`IdlePoll::begin`] bumps the counter and then reads the
//!   announcement, both sequentially consistent); one parked because of
//!   overlap or a long request wakes by itself after [`PAUSE`];
//! - the request path pays a few atomic operations per request, and a wake-up
//!   call only when a spinner sleeps; dropping the last handle stops the
//!   spinners.

// The scheduler calls (affinity, SCHED_IDLE) have no safe wrapper in libc.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// Handle to the spinners; cheap to clone into request handlers.
#[derive(Clone)]
pub struct IdlePoll {
    owner: Arc<Owner>,
}

impl std::fmt::Debug for IdlePoll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdlePoll")
            .field("window", &self.owner.shared.window)
            .field("spinners", &self.spinners())
            .finish()
    }
}

/// How long spinners stay parked after requests overlapped or one was long.
pub const PAUSE: Duration = Duration::from_millis(10);

/// Requests that take longer than this on average suspend polling.
pub const LONG_REQUEST: Duration = Duration::from_millis(1);

struct Shared {
    /// Bumped when a request starts alone and when the last one ends.
    activity: AtomicU64,
    /// Requests being served.
    in_flight: AtomicUsize,
    /// Bumped when a request started while another was in flight, or ended
    /// with the average above [`LONG_REQUEST`]; every spinner that sees it change
    /// parks for [`PAUSE`].
    suspend_epoch: AtomicU64,
    /// A bump is pending for the spinners to see: requests need not bump
    /// again (keeps the shared counter out of the per-request path).
    suspend_pending: AtomicBool,
    /// Spinners parked for idleness (or about to park).
    sleeping: AtomicUsize,
    /// Pauses taken because requests overlapped or ran long.
    pauses: AtomicU64,
    /// Exponentially weighted average of request durations, in µs.
    average_us: AtomicU64,
    stop: AtomicBool,
    window: Duration,
}

/// Stops and joins the spinners when the last handle goes.
struct Owner {
    shared: Arc<Shared>,
    threads: Vec<Thread>,
    handles: Vec<JoinHandle<()>>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for t in &self.threads {
            t.unpark();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

impl IdlePoll {
    /// Starts one spinner per CPU this process may use. `window` is how long
    /// after the last activity the spinners keep polling.
    pub fn start(window: Duration) -> std::io::Result<IdlePoll> {
        let shared = Arc::new(Shared {
            activity: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            suspend_epoch: AtomicU64::new(0),
            suspend_pending: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            pauses: AtomicU64::new(0),
            average_us: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            window,
        });
        let mut threads = Vec::new();
        let mut handles = Vec::new();
        for cpu in allowed_cpus() {
            let s = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("idle-poll-{cpu}"))
                .spawn(move || {
                    pin_to_cpu_at_idle_priority(cpu);
                    spin(&s);
                })?;
            threads.push(h.thread().clone());
            handles.push(h);
        }
        Ok(IdlePoll {
            owner: Arc::new(Owner {
                shared,
                threads,
                handles,
            }),
        })
    }

    /// A request starts; the returned guard marks its end when dropped.
    pub fn begin(&self) -> InFlight {
        let s = &self.owner.shared;
        if s.in_flight.fetch_add(1, Ordering::SeqCst) > 0 {
            s.suspend_polling();
        } else {
            s.activity.fetch_add(1, Ordering::SeqCst);
            if s.sleeping.load(Ordering::SeqCst) > 0 {
                for t in &self.owner.threads {
                    t.unpark();
                }
            }
        }
        InFlight {
            shared: s.clone(),
            started: Instant::now(),
        }
    }

    /// Number of spinner threads (one per usable CPU).
    pub fn spinners(&self) -> usize {
        self.owner.threads.len()
    }

    /// Spinners currently parked for idleness (for tests and diagnostics).
    pub fn parked(&self) -> usize {
        self.owner.shared.sleeping.load(Ordering::SeqCst)
    }

    /// Pauses the spinners took so far because requests overlapped or ran
    /// long on average (for tests and diagnostics).
    pub fn pauses(&self) -> u64 {
        self.owner.shared.pauses.load(Ordering::SeqCst)
    }
}

/// A request being served (see [`IdlePoll::begin`]).
pub struct InFlight {
    shared: Arc<Shared>,
    started: Instant,
}

impl Shared {
    fn suspend_polling(&self) {
        if !self.suspend_pending.load(Ordering::Relaxed) {
            self.suspend_pending.store(true, Ordering::Relaxed);
            self.suspend_epoch.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let took = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        // Racing updates may lose one sample; the average stays an average.
        let before = self.shared.average_us.load(Ordering::Relaxed);
        let average = before - before / 8 + took / 8;
        self.shared.average_us.store(average, Ordering::Relaxed);
        if u128::from(average) > LONG_REQUEST.as_micros() {
            self.shared.suspend_polling();
        }
        if self.shared.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            // The window starts when the last request ends.
            self.shared.activity.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn spin(s: &Shared) {
    // Counters start at zero: whatever happened before this thread ran
    // counts as a change.
    let mut seen = 0;
    let mut since = Instant::now();
    let mut suspend_seen = 0;
    while !s.stop.load(Ordering::Relaxed) {
        let suspend = s.suspend_epoch.load(Ordering::Relaxed);
        if suspend != suspend_seen {
            suspend_seen = suspend;
            s.suspend_pending.store(false, Ordering::Relaxed);
            s.pauses.fetch_add(1, Ordering::SeqCst);
            std::thread::park_timeout(PAUSE);
            seen = s.activity.load(Ordering::SeqCst);
            since = Instant::now();
            continue;
        }
        let now_seen = s.activity.load(Ordering::Relaxed);
        if now_seen != seen || s.in_flight.load(Ordering::Relaxed) > 0 {
            seen = now_seen;
            since = Instant::now();
        } else if since.elapsed() >= s.window {
            s.sleeping.fetch_add(1, Ordering::SeqCst);
            // Re-read after announcing: a request that raced with the
            // announcement is seen here, or it sees the announcement.
            if s.activity.load(Ordering::SeqCst) == seen && !s.stop.load(Ordering::SeqCst) {
                std::thread::park();
            }
            s.sleeping.fetch_sub(1, Ordering::SeqCst);
            seen = s.activity.load(Ordering::SeqCst);
            since = Instant::now();
            continue;
        }
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }
}

/// The CPUs in this process's affinity mask (all CPUs if it cannot be read).
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bit mask that sched_getaffinity fills in; the
    // size passed is its own size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect();
            if !cpus.is_empty() {
                return cpus;
            }
        }
    }
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// Best effort: a spinner that cannot be pinned or lowered still works, it
/// only competes less politely.
fn pin_to_cpu_at_idle_priority(cpu: usize) {
    // SAFETY: both calls take pointers to properly initialised local values
    // and affect only the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            tracing::debug!(cpu, "idle poll: cannot pin spinner");
        }
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 {
            tracing::debug!(cpu, "idle poll: cannot lower spinner to SCHED_IDLE");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait_until(mut f: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    #[test]
    fn spinners_park_when_idle_and_wake_on_a_request() {
        let p = IdlePoll::start(Duration::from_millis(200)).unwrap();
        let n = p.spinners();
        assert!(n >= 1);
        assert!(wait_until(|| p.parked() == n), "spinners never parked");
        drop(p.begin());
        assert!(
            wait_until(|| p.parked() < n),
            "a request did not wake the spinners"
        );
        assert!(
            wait_until(|| p.parked() == n),
            "spinners did not park again after the window"
        );
    }

    #[test]
    fn spinners_keep_polling_while_a_request_is_in_flight() {
        let p = IdlePoll::start(Duration::from_micros(300)).unwrap();
        let n = p.spinners();
        assert!(wait_until(|| p.parked() == n));
        let req = p.begin();
        assert!(wait_until(|| p.parked() == 0), "spinners did not wake");
        // Longer than the window: a slow request (an fsync) keeps them up.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(p.parked(), 0, "spinners parked during a request");
        drop(req);
        assert!(wait_until(|| p.parked() == n));
    }

    #[test]
    fn long_requests_on_average_suspend_polling() {
        let p = IdlePoll::start(Duration::from_secs(60)).unwrap();
        let n = p.spinners();
        // A short request alone: no pause.
        drop(p.begin());
        // One slow request (an fsync that took 2 ms) among short ones does
        // not lift the average above the limit.
        let slow = p.begin();
        std::thread::sleep(LONG_REQUEST * 2);
        drop(slow);
        std::thread::sleep(PAUSE * 2);
        assert_eq!(p.pauses(), 0, "one slow request paused polling");
        // A run of long requests does.
        for _ in 0..20 {
            let long = p.begin();
            std::thread::sleep(LONG_REQUEST * 3);
            drop(long);
        }
        assert!(
            wait_until(|| p.pauses() >= n as u64),
            "long requests did not pause them"
        );
    }

    #[test]
    fn overlapping_requests_suspend_polling() {
        let p = IdlePoll::start(Duration::from_secs(60)).unwrap();
        let n = p.spinners();
        let first = p.begin();
        assert!(wait_until(|| p.parked() == 0), "spinners did not wake");
        // While requests overlap, the spinners keep parking for a pause.
        let second = p.begin();
        assert!(
            wait_until(|| p.pauses() >= n as u64),
            "overlap did not pause the spinners"
        );
        // While requests keep overlapping, the spinners keep pausing.
        let before = p.pauses();
        assert!(
            wait_until(|| {
                drop(p.begin());
                p.pauses() >= before + n as u64
            }),
            "continued overlap did not pause them again"
        );
        drop(second);
        drop(first);
    }

    #[test]
    fn dropping_the_last_handle_stops_the_spinners() {
        let p = IdlePoll::start(Duration::from_secs(60)).unwrap();
        let clone = p.clone();
        drop(p.begin());
        drop(p);
        // Still owned by the clone: spinners keep running.
        assert!(!clone.owner.shared.stop.load(Ordering::SeqCst));
        let shared = clone.owner.shared.clone();
        drop(clone); // joins the threads, so this returns only once they end
        assert!(shared.stop.load(Ordering::SeqCst));
        assert_eq!(shared.sleeping.load(Ordering::SeqCst), 0);
    }
}
