//! The golden conformance check: every scenario in `tests/conformance`
//! runs against a fresh Settee and is compared with what the reference
//! CouchDB 3.4.3 answered (the goldens); a difference fails unless
//! `tests/conformance/DIFFERENCES.md` lists it with its reason, and a listed
//! difference that no longer occurs fails too.

mod common;

use std::path::Path;

use common::{Server, ADMIN};
use settee_conformance::{check, Target};

#[test]
fn settee_answers_as_couchdb_does() {
    let s = Server::start();
    let t = Target {
        addr: format!("127.0.0.1:{}", s.port),
        admin: (ADMIN.0.to_string(), ADMIN.1.to_string()),
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance");
    let rep = check(&dir, &t, None).expect("scenarios and goldens load");
    println!("{rep}");
    assert!(rep.scenarios > 0, "no scenarios found in {}", dir.display());
    assert!(rep.ok(), "{rep}");
}
