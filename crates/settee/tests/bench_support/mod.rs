//! Shared by the `bench_*` tests: runs the real `settee bench` bounded in
//! time and returns its outcome and output.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `settee bench ARGS` (bounded), returns (success, stdout, stderr).
pub fn bench(args: &[&str], limit: Duration) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_settee"))
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start settee bench");
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let (out, err) = (read(Box::new(out)), read(Box::new(err)));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("settee bench did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.success(), out.join().unwrap(), err.join().unwrap())
}
