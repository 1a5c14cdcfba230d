//! `settee-conformance`: record goldens from the reference CouchDB, or check
//! a server against them.
//!
//! ```text
//! settee-conformance record URL [--dir tests/conformance] [--only GLOB]
//! settee-conformance check  URL [--dir tests/conformance] [--only GLOB]
//! settee-conformance gen-mango [--seed N] [--count M]   (scenarios to stdout)
//! settee-conformance gen-shapes [--pending]             (the request-shape corpus to stdout)
//! ```
//! URL carries the admin: `http://admin:admin@127.0.0.1:5984`. Recording
//! sets CouchDB's `[cluster] q` to 1 first (one shard: `_changes` in update
//! order, as a single-node Settee has it).

use std::path::PathBuf;
use std::process::ExitCode;

use settee_conformance::{check, corpus, record, Target};

/// `gen-mango [--seed N] [--count M]`: the generated Mango corpus on stdout.
fn gen_mango(args: &[String]) -> ExitCode {
    let usage = "usage: settee-conformance gen-mango [--seed N] [--count M]";
    let (mut seed, mut count) = (1u64, 120usize);
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1);
        let ok = match (args[i].as_str(), v) {
            ("--seed", Some(v)) => v.parse().map(|n| seed = n).is_ok(),
            ("--count", Some(v)) => v.parse().map(|n| count = n).is_ok(),
            _ => false,
        };
        if !ok {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
        i += 2;
    }
    print!("{}", corpus::gen_mango(seed, count));
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("gen-shapes") && args.len() <= 2 {
        let pending = match args.get(1).map(String::as_str) {
            None => false,
            Some("--pending") => true,
            Some(_) => {
                eprintln!("usage: settee-conformance gen-shapes [--pending]");
                return ExitCode::from(2);
            }
        };
        print!("{}", settee_conformance::shapes::gen_shapes(pending));
        return ExitCode::SUCCESS;
    }
    if args.first().map(String::as_str) == Some("gen-mango") {
        return gen_mango(&args[1..]);
    }
    let usage = "usage: settee-conformance record|check URL [--dir DIR] [--only GLOB] | gen-mango [--seed N] [--count M] | gen-shapes [--pending]";
    if args.len() < 2 {
        eprintln!("{usage}");
        return ExitCode::from(2);
    }
    let mut dir = PathBuf::from("tests/conformance");
    let mut only: Option<String> = None;
    let mut i = 2;
    while i < args.len() {
        match (args[i].as_str(), args.get(i + 1)) {
            ("--dir", Some(v)) => dir = PathBuf::from(v),
            ("--only", Some(v)) => only = Some(v.clone()),
            _ => {
                eprintln!("{usage}");
                return ExitCode::from(2);
            }
        }
        i += 2;
    }
    let t = match Target::from_url(&args[1]) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match args[0].as_str() {
        "record" => {
            if let Err(e) = t.admin_request("PUT", "/_node/_local/_config/cluster/q", Some("\"1\""))
            {
                eprintln!("setting [cluster] q=1: {e}");
                return ExitCode::FAILURE;
            }
            match record(&dir, &t, only.as_deref(), &mut |l| eprintln!("{l}")) {
                Ok(failed) if failed.is_empty() => ExitCode::SUCCESS,
                Ok(failed) => {
                    eprintln!("{} scenarios failed to run", failed.len());
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
        "check" => match check(&dir, &t, only.as_deref()) {
            Ok(rep) => {
                print!("{rep}");
                if rep.ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("{usage}");
            ExitCode::from(2)
        }
    }
}
