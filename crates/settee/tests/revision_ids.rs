//! Revision ids as CouchDB computes them (issue 37): the same edits made on
//! the reference CouchDB 3.4.3 and on Settee get the same revision ids.
//! The corpus — generated bodies (numbers of every width and form,
//! escapes, unicode, nesting, empty containers, key orders), inline
//! attachments, a standalone attachment upload, an update carrying stubs,
//! a deletion — and CouchDB's answers are recorded in
//! tests/conformance/revision_ids.json by
//! tests/conformance/record_revision_ids.py; here the real binary gets the
//! same requests and must answer every revision id the same.

mod common;

use common::{Server, ADMIN};
use serde_json::Value;

#[test]
fn every_recorded_edit_gets_couchdbs_revision_id() {
    let golden: Value =
        serde_json::from_str(include_str!("../../../tests/conformance/revision_ids.json"))
            .expect("golden file");
    let cases = golden["cases"].as_array().expect("cases");
    assert!(
        cases.len() >= 100,
        "the corpus is generated, not hand-picked"
    );
    let s = Server::start();
    let agent = common::agent();
    let call = |method: &str, path: &str, ctype: &str, body: &[u8]| {
        let r = common::call(
            &agent,
            method,
            &s.url(path),
            Some(ADMIN),
            &[("Content-Type", ctype)],
            Some(body),
        );
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        (
            r.status,
            v["rev"].as_str().unwrap_or_default().to_string(),
            r.body,
        )
    };
    assert_eq!(call("PUT", "/revs", "application/json", b"").0, 201);
    let mut differing = Vec::new();
    let json = "application/json";
    for c in cases {
        let id = c["id"].as_str().unwrap();
        let path = format!("/revs/{id}");
        let (status, rev, body) =
            call("PUT", &path, json, c["create"].as_str().unwrap().as_bytes());
        assert_eq!(status, 201, "{id}: {body}");
        if rev != c["rev1"] {
            differing.push(format!("{id} create: {rev} vs CouchDB's {}", c["rev1"]));
            continue;
        }
        if let Some(a) = c.get("att_put") {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(a["data_b64"].as_str().unwrap())
                .expect("golden base64");
            let att = format!("{path}/{}?rev={rev}", a["name"].as_str().unwrap());
            let (status, r, body) = call("PUT", &att, a["content_type"].as_str().unwrap(), &bytes);
            assert_eq!(status, 201, "{id}: {body}");
            if r != a["rev"] {
                differing.push(format!("{id} attachment: {r} vs CouchDB's {}", a["rev"]));
                continue;
            }
        }
        let (status, r, body) = call("PUT", &path, json, c["update"].as_str().unwrap().as_bytes());
        assert_eq!(status, 201, "{id}: {body}");
        if r != c["rev2"] {
            differing.push(format!("{id} update: {r} vs CouchDB's {}", c["rev2"]));
            continue;
        }
        let (status, r, body) = call("DELETE", &format!("{path}?rev={r}"), json, b"");
        assert_eq!(status, 200, "{id}: {body}");
        if r != c["rev3"] {
            differing.push(format!("{id} delete: {r} vs CouchDB's {}", c["rev3"]));
        }
    }
    assert!(
        differing.is_empty(),
        "{} of {} cases differ:\n{}",
        differing.len(),
        cases.len(),
        differing.join("\n")
    );
}
