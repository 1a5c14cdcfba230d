//! Client CPU accounting: user + system CPU time of this process
//! (`getrusage(RUSAGE_SELF)`, all threads), so every result can show how
//! much CPU the load generator itself used. On a 2-core machine shared with
//! the server this is what tells whether the client was the bottleneck.

use std::time::{Duration, Instant};

/// CPU time (user + system) this process has used so far.
pub fn process_cpu() -> Duration {
    rusage_cpu(libc::RUSAGE_SELF)
}

/// CPU time (user + system) of this process's terminated, waited-for children.
pub fn children_cpu() -> Duration {
    rusage_cpu(libc::RUSAGE_CHILDREN)
}

/// User + system time `getrusage(who)` reports; zero if the call fails.
#[allow(unsafe_code)]
fn rusage_cpu(who: libc::c_int) -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a complete `rusage` into the pointer we pass;
    // RUSAGE_SELF and RUSAGE_CHILDREN are always valid, so on success the
    // value is initialised.
    let rc = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
    if rc != 0 {
        return Duration::ZERO;
    }
    // SAFETY: rc == 0 means the kernel filled the struct (and it was zeroed).
    let u = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Wall clock and client CPU over a measured phase.
#[derive(Debug, Clone, Copy)]
pub struct Measure {
    started: Instant,
    cpu_started: Duration,
}

/// What a [`Measure`] saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct Measured {
    pub wall: Duration,
    pub cpu: Duration,
}

impl Measure {
    pub fn start() -> Measure {
        Measure {
            started: Instant::now(),
            cpu_started: process_cpu(),
        }
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    pub fn finish(&self) -> Measured {
        Measured {
            wall: self.started.elapsed(),
            cpu: process_cpu().saturating_sub(self.cpu_started),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        let m = Measure::start();
        let mut x = 0u64;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let got = m.finish();
        assert!(got.cpu >= Duration::from_millis(10), "{got:?}");
        assert!(got.wall >= Duration::from_millis(30));
    }
}
