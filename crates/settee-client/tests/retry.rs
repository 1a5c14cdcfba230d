//! The client against a scripted loopback HTTP server: transient answers
//! (503, a dropped connection) are retried with backoff, CouchDB error
//! bodies become typed errors, credentials travel as Basic auth and never
//! appear in messages, and a stalled answer is a timeout.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use settee_client::{Client, ClientOptions, Db, Error, RetryPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Serves `script[i]` to the i-th connection (one request each); an empty
/// string closes the connection without answering; "STALL" never answers.
/// Returns the port and the request heads seen.
async fn scripted(script: Vec<&'static str>) -> (u16, Arc<std::sync::Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let n = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let i = n.fetch_add(1, Ordering::SeqCst);
            let answer = script.get(i).copied().unwrap_or("");
            let seen = seen2.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let k = s.read(&mut buf).await.unwrap_or(0);
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf[..k]).into_owned());
                if answer == "STALL" {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    return;
                }
                if !answer.is_empty() {
                    let _ = s.write_all(answer.as_bytes()).await;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    (port, seen)
}

fn resp(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn client(retries: u32) -> Client {
    Client::new(ClientOptions {
        request_timeout: Duration::from_millis(500),
        retry: RetryPolicy {
            retries,
            backoff_first: Duration::from_millis(10),
            backoff_max: Duration::from_millis(50),
            retry_timeouts: true,
        },
        ..ClientOptions::default()
    })
    .unwrap()
}

#[tokio::test]
async fn transient_failures_are_retried() {
    let ok = leak(resp(
        "200 OK",
        r#"{"db_name":"db","doc_count":7,"update_seq":"7-abc"}"#,
    ));
    let busy = leak(resp(
        "503 Service Unavailable",
        r#"{"error":"unavailable","reason":"busy"}"#,
    ));
    let (port, seen) = scripted(vec![busy, "", ok]).await;
    let db = Db::new(
        client(3),
        &format!("http://u:p%40ss@127.0.0.1:{port}/db"),
        "",
    )
    .unwrap();
    let info = db.info().await.unwrap();
    assert_eq!(info.doc_count, 7);
    assert_eq!(info.update_seq, serde_json::json!("7-abc"));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    // Basic auth with the decoded password (u:p@ss).
    assert!(
        seen[0].contains("authorization: Basic dTpwQHNz"),
        "{}",
        seen[0]
    );
}

#[tokio::test]
async fn couch_errors_are_typed_and_not_retried() {
    let nf = leak(resp(
        "404 Object Not Found",
        r#"{"error":"not_found","reason":"Database does not exist."}"#,
    ));
    let (port, seen) = scripted(vec![nf, nf]).await;
    let db = Db::new(
        client(3),
        &format!("http://u:secret@127.0.0.1:{port}/db"),
        "",
    )
    .unwrap();
    let e = db.info().await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
    match &e {
        Error::Couch { error, reason, .. } => {
            assert_eq!(error, "not_found");
            assert_eq!(reason, "Database does not exist.");
        }
        other => panic!("{other:?}"),
    }
    assert!(!e.to_string().contains("secret"), "{e}");
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn retries_run_out_and_stalls_time_out() {
    let busy = leak(resp("500 Internal Server Error", "oops"));
    let (port, seen) = scripted(vec![busy, busy, busy, busy]).await;
    let db = Db::new(client(2), &format!("http://127.0.0.1:{port}/db"), "").unwrap();
    let e = db.info().await.unwrap_err();
    assert_eq!(e.status(), Some(500));
    assert!(e.is_transient());
    assert_eq!(seen.lock().unwrap().len(), 3, "1 attempt + 2 retries");

    let (port, _) = scripted(vec!["STALL"]).await;
    let db = Db::new(client(0), &format!("http://127.0.0.1:{port}/db"), "").unwrap();
    let e = db.info().await.unwrap_err();
    assert!(e.is_timeout(), "{e:?}");
}

#[tokio::test]
async fn refused_connections_are_connect_errors() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let db = Db::new(client(1), &format!("http://127.0.0.1:{port}/db"), "").unwrap();
    let e = db.info().await.unwrap_err();
    assert!(matches!(e, Error::Connect { .. }), "{e:?}");
}

#[test]
fn backoff_grows_and_is_capped() {
    let p = RetryPolicy {
        retries: 10,
        backoff_first: Duration::from_millis(100),
        backoff_max: Duration::from_secs(1),
        retry_timeouts: true,
    };
    assert!(p.delay(1) <= Duration::from_millis(125));
    assert!(p.delay(3) >= Duration::from_millis(300));
    assert!(p.delay(30) <= Duration::from_millis(1250));
}
