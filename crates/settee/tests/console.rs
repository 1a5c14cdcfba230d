//! The web console at `/_utils/` in a real browser: Debian's headless
//! Chromium driven over WebDriver (`chromedriver`, fantoccini) against the
//! real binary on a random loopback port.
//!
//! Each test is a person's flow through the pages (log in, create a
//! database, write and edit a document, attach a file, resolve a conflict,
//! query with Mango, log out; a member who is no admin sees no admin
//! action; on a cluster of real members and a real etcd, a node added and
//! the rebalance watched to its end, a killed node marked down), checked
//! in the page and, where the page claims a write, on the server too. Every wait is bounded ([`WAIT`]); the browser reaches no
//! host but 127.0.0.1 (every name resolves to nothing, background
//! networking off). Each test saves a screenshot of its last page under
//! `CARGO_TARGET_TMPDIR/console-screenshots/`, failed or not.

mod cluster_support;
mod common;
#[path = "../../settee-cluster/tests/common/mod.rs"]
mod etcd_common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, ADMIN};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// The longest any step waits for the page.
const WAIT: Duration = Duration::from_secs(15);

type R<T = ()> = Result<T, String>;

/// A chromedriver on a free loopback port, killed on drop.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver (chromium-driver, from scripts/ensure-deps)");
        let deadline = Instant::now() + WAIT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Driver { child, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless Chromium session with its own profile directory.
async fn browser(driver: &Driver, profile: &std::path::Path) -> Client {
    let caps = json!({
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", format!("--user-data-dir={}", profile.display()),
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-default-apps", "--disable-domain-reliability",
                "--disable-client-side-phishing-detection", "--no-pings",
                // No name resolves (127.0.0.1 is left as it is): nothing but the
                // loopback address is reachable.
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            ],
        }
    });
    let Value::Object(caps) = caps else {
        unreachable!()
    };
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a WebDriver session in headless Chromium")
}

/// Polls `check` until it answers `Some`, at most [`WAIT`].
async fn until<T, F, Fut>(what: &str, check: F) -> R<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, String>>,
{
    until_within(WAIT, what, check).await
}

/// Polls `check` until it answers `Some`, at most `limit`.
async fn until_within<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> R<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, String>>,
{
    let deadline = Instant::now() + limit;
    let mut last = String::new();
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = e,
        }
        if Instant::now() > deadline {
            return Err(format!("waited {limit:?} for {what}; last: {last}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The text of `css` once it contains `want`.
async fn text_of(c: &Client, css: &str, want: &str) -> R<String> {
    until(&format!("{css} to contain {want:?}"), || async {
        let e = c.find(Locator::Css(css)).await.map_err(|e| e.to_string())?;
        let t = e.text().await.map_err(|e| e.to_string())?;
        if t.contains(want) {
            Ok(Some(t))
        } else {
            Err(format!("text {t:?}"))
        }
    })
    .await
}

async fn click(c: &Client, css: &str) -> R {
    let e = until(&format!("{css} to be there"), || async {
        c.find(Locator::Css(css))
            .await
            .map(Some)
            .map_err(|e| e.to_string())
    })
    .await?;
    e.click().await.map_err(|e| format!("click {css}: {e}"))
}

async fn type_into(c: &Client, css: &str, text: &str) -> R {
    let e = until(&format!("{css} to be there"), || async {
        c.find(Locator::Css(css))
            .await
            .map(Some)
            .map_err(|e| e.to_string())
    })
    .await?;
    e.send_keys(text)
        .await
        .map_err(|e| format!("type into {css}: {e}"))
}

/// Whether `css` matches nothing (now).
async fn absent(c: &Client, css: &str) -> R<bool> {
    let found = c
        .find_all(Locator::Css(css))
        .await
        .map_err(|e| e.to_string())?;
    Ok(found.is_empty())
}

/// Replaces the text of the CodeMirror editor `editor` (its container's
/// CSS selector) by typing, as a person would: select all, then type.
async fn set_editor(c: &Client, editor: &str, text: &str) -> R {
    let content = format!("{editor} .cm-content");
    click(c, &content).await?;
    // Control-A, release (Null), then the text.
    type_into(c, &content, &format!("\u{e009}a\u{e000}{text}")).await
}

async fn wait_hash(c: &Client, want: &str) -> R {
    until(&format!("the page #{want}"), || async {
        let u = c.current_url().await.map_err(|e| e.to_string())?;
        let h = u.fragment().unwrap_or("").to_string();
        if h == want {
            Ok(Some(()))
        } else {
            Err(format!("at #{h}"))
        }
    })
    .await
}

async fn log_in(c: &Client, s: &Server, name: &str, password: &str) -> R {
    c.goto(&s.url("/_utils")).await.map_err(|e| e.to_string())?;
    // /_utils redirects to /_utils/, which shows the login form.
    until("the login form", || async {
        Ok(c.find(Locator::Css("#login-name")).await.ok())
    })
    .await?;
    let u = c.current_url().await.map_err(|e| e.to_string())?;
    if u.path() != "/_utils/" {
        return Err(format!("/_utils led to {u}"));
    }
    type_into(c, "#login-name", name).await?;
    type_into(c, "#login-password", password).await?;
    click(c, "#login-submit").await?;
    text_of(c, "#whoami", name).await?;
    Ok(())
}

async fn log_out(c: &Client) -> R {
    click(c, "#logout").await?;
    until("the login form after logging out", || async {
        Ok(c.find(Locator::Css("#login-name")).await.ok())
    })
    .await?;
    if !absent(c, "#whoami").await? {
        return Err("still shown as logged in".into());
    }
    // The cookie is gone: the session is anonymous again.
    let who = c
        .execute_async(
            "fetch('/_session').then(r => r.json()).then(arguments[0])",
            vec![],
        )
        .await
        .map_err(|e| e.to_string())?;
    if !who["userCtx"]["name"].is_null() {
        return Err(format!("still a session after logging out: {who}"));
    }
    Ok(())
}

/// Where the screenshots go.
fn shots_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

/// Saves a screenshot of the page now as `name.png` (a moment worth
/// seeing mid-flow; the README's pictures come from these).
async fn shot(c: &Client, name: &str) -> R {
    let png = c.screenshot().await.map_err(|e| e.to_string())?;
    std::fs::write(shots_dir().join(format!("{name}.png")), png).map_err(|e| e.to_string())
}

/// Runs `flow` in a fresh browser, saves a screenshot of the last page as
/// `name.png` (whatever happened), closes the session, then fails if the
/// flow did.
async fn in_browser<F, Fut>(name: &str, flow: F)
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = R>,
{
    // At most two browsers at once (the tests of this file run in
    // parallel; on 2 cores more would only slow each other past WAIT).
    static BROWSERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
    let _slot = BROWSERS.acquire().await.expect("semaphore open");
    let driver = Driver::start();
    let profile = tempfile::tempdir().expect("profile dir");
    let c = browser(&driver, profile.path()).await;
    let started = Instant::now();
    let result = flow(c.clone()).await;
    let dir = shots_dir();
    if let Ok(png) = c.screenshot().await {
        let _ = std::fs::write(dir.join(format!("{name}.png")), png);
    }
    let _ = c.close().await;
    eprintln!(
        "{name}: {:.1} s in the browser, screenshot in {}",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_creates_edits_attaches_resolves_queries_and_logs_out() {
    let s = Server::start();
    let upload = tempfile::tempdir().expect("upload dir");
    let file = upload.path().join("hello.txt");
    std::fs::write(&file, "hello from the console\n").expect("write upload");
    in_browser("admin", |c| async move {
        let c = &c;
        log_in(c, &s, ADMIN.0, ADMIN.1).await?;
        text_of(c, "#whoami", "(server admin)").await?;
        // A single node: no Cluster page linked, and the page says why.
        c.goto(&s.url("/_utils/#/cluster"))
            .await
            .map_err(|e| e.to_string())?;
        text_of(c, "#not-clustered", "a single node, not a member of a cluster").await?;
        if !absent(c, "#nav-cluster").await? {
            return Err("a single node links a Cluster page".into());
        }
        click(c, "header .brand").await?;

        // Create a database.
        click(c, "#create-db").await?;
        type_into(c, "#new-db-name", "console-db").await?;
        click(c, "#new-db-submit").await?;
        wait_hash(c, "/db/console-db").await?;
        text_of(c, "#db-info", "0 documents").await?;
        if s.admin("GET", "/console-db", None).status != 200 {
            return Err("the database was not created".into());
        }

        // Create a document.
        click(c, "#new-doc").await?;
        wait_hash(c, "/db/console-db/new").await?;
        set_editor(c, "#doc-editor", r#"{"_id": "ada", "name": "Ada", "age": 36}"#).await?;
        click(c, "#save-doc").await?;
        wait_hash(c, "/db/console-db/doc/ada").await?;
        text_of(c, "#doc-rev", "1-").await?;

        // Invalid JSON is refused before anything is sent.
        let content = "#doc-editor .cm-content";
        click(c, content).await?;
        type_into(c, content, "\u{e009}\u{e010}\u{e000}oops").await?; // Control-End: the end
        click(c, "#save-doc").await?;
        text_of(c, ".error", "Not valid JSON").await?;
        if !s.admin("GET", "/console-db/ada", None).json()["_rev"]
            .as_str()
            .unwrap_or("")
            .starts_with("1-")
        {
            return Err("an invalid edit reached the server".into());
        }
        // Take it back and add a member before the closing brace instead.
        type_into(c, content, "\u{e003}\u{e003}\u{e003}\u{e003}").await?; // Backspace x4
        type_into(c, content, "\u{e012}").await?; // Left: before the "}"
        type_into(c, content, r#", "city": "London""#).await?;
        click(c, "#save-doc").await?;
        text_of(c, ".notice", "Saved as revision 2-").await?;
        text_of(c, "#doc-rev", "2-").await?;
        let doc = s.admin("GET", "/console-db/ada", None).json();
        if doc["city"] != "London" || doc["name"] != "Ada" {
            return Err(format!("the edit was not saved: {doc}"));
        }

        // Attach a file, then download it through the page's link.
        let input = c
            .find(Locator::Css("#att-file"))
            .await
            .map_err(|e| e.to_string())?;
        input
            .send_keys(file.to_str().expect("utf-8 path"))
            .await
            .map_err(|e| e.to_string())?;
        text_of(c, "#attachments", "hello.txt").await?;
        text_of(c, "#doc-rev", "3-").await?;
        let link = c
            .find(Locator::Css("#attachments a"))
            .await
            .map_err(|e| e.to_string())?;
        let href = link
            .attr("href")
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no href")?;
        let body = c
            .execute_async(
                "fetch(arguments[0]).then(r => r.text()).then(arguments[1])",
                vec![json!(href)],
            )
            .await
            .map_err(|e| e.to_string())?;
        if body != "hello from the console\n" {
            return Err(format!("downloaded {body}"));
        }
        // A file dropped on the drop zone (a drop event as the browser
        // sends it, with the file in its DataTransfer).
        c.execute(
            "const dt = new DataTransfer();
             dt.items.add(new File(['dropped bytes'], 'dropped.txt', {type: 'text/plain'}));
             document.querySelector('.dropzone').dispatchEvent(
                 new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));",
            vec![],
        )
        .await
        .map_err(|e| e.to_string())?;
        text_of(c, "#attachments", "dropped.txt").await?;
        text_of(c, "#doc-rev", "4-").await?;
        let r = s.admin("GET", "/console-db/ada/dropped.txt", None);
        if r.status != 200 || r.body != "dropped bytes" {
            return Err(format!("dropped file stored as {r:?}"));
        }

        // A conflicting revision arrives (as a replication would write it);
        // the page shows it and keeps the one picked.
        let r = s.admin(
            "POST",
            "/console-db/_bulk_docs",
            Some(r#"{"new_edits": false, "docs": [{"_id": "ada", "_rev": "1-ffffffffffffffffffffffffffffffff", "name": "Other Ada"}]}"#),
        );
        if r.status != 201 {
            return Err(format!("conflict not written: {r:?}"));
        }
        c.refresh().await.map_err(|e| e.to_string())?;
        text_of(c, "#conflicts", "1 conflicting revision").await?;
        text_of(c, "#conflicts", "1-ffffffffffffffffffffffffffffffff").await?;
        // The other revision, shown beside the editor (read only).
        click(c, "#conflicts li:nth-child(2) button").await?;
        text_of(c, ".split", "Other Ada").await?;
        shot(c, "admin-conflict").await?;
        // The first entry is the current winner: keep it.
        click(c, "#conflicts li button").await?;
        text_of(c, ".notice", "1 other revision(s) deleted").await?;
        until("the conflicts to go", || async {
            Ok(absent(c, "#conflicts").await?.then_some(()))
        })
        .await?;
        let doc = s
            .admin("GET", "/console-db/ada?conflicts=true", None)
            .json();
        if doc.get("_conflicts").is_some() || doc["city"] != "London" {
            return Err(format!("conflict not resolved as picked: {doc}"));
        }

        // Mango: the query finds the document; the plan names the index.
        s.admin(
            "POST",
            "/console-db",
            Some(r#"{"name": "Grace", "city": "Arlington"}"#),
        );
        c.goto(&s.url("/_utils/#/db/console-db/find"))
            .await
            .map_err(|e| e.to_string())?;
        set_editor(c, "#find-editor", r#"{"selector": {"city": "London"}}"#).await?;
        click(c, "#run-find").await?;
        text_of(c, "#find-results", "1 document(s)").await?;
        text_of(c, "#find-results", "Ada").await?;
        text_of(c, "#find-stats", "Examined 2 document(s)").await?;
        shot(c, "admin-find").await?;
        click(c, "#run-explain").await?;
        text_of(c, "#plan-index", "_all_docs").await?;

        // An index: created in the page, then the plan uses it.
        click(c, "#new-index").await?;
        set_editor(
            c,
            "#index-editor",
            r#"{"index": {"fields": ["city"]}, "name": "by-city", "type": "json"}"#,
        )
        .await?;
        click(c, "#create-index").await?;
        text_of(c, "#indexes", "by-city").await?;
        // The index form closes (the page's layout settles) before the click.
        until("the index form to close", || async {
            Ok(absent(c, "#index-editor").await?.then_some(()))
        })
        .await?;
        click(c, "#run-explain").await?;
        text_of(c, "#plan-index", "by-city").await?;

        log_out(c).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_reads_but_sees_no_admin_action() {
    let s = Server::start();
    let user = json!({"name": "bob", "password": "bob-pw", "roles": [], "type": "user"});
    let r = s.admin(
        "PUT",
        "/_users/org.couchdb.user:bob",
        Some(&user.to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    s.create_db("team");
    let sec =
        r#"{"admins": {"names": [], "roles": []}, "members": {"names": ["bob"], "roles": []}}"#;
    assert_eq!(s.admin("PUT", "/team/_security", Some(sec)).status, 200);
    let r = s.admin("PUT", "/team/note1", Some(r#"{"text": "for bob"}"#));
    assert_eq!(r.status, 201, "{r:?}");
    in_browser("member", |c| async move {
        let c = &c;
        log_in(c, &s, "bob", "bob-pw").await?;
        let who = text_of(c, "#whoami", "bob").await?;
        if who.contains("admin") {
            return Err(format!("bob shown as {who}"));
        }
        c.goto(&s.url("/_utils/#/cluster"))
            .await
            .map_err(|e| e.to_string())?;
        text_of(c, "#cluster-forbidden", "Only server admins").await?;
        click(c, "header .brand").await?;
        // CouchDB lets only admins list databases: the page says so and
        // offers no creation.
        text_of(c, "main", "Only server admins may list the databases").await?;
        if !absent(c, "#create-db").await? {
            return Err("a member is offered to create databases".into());
        }
        type_into(c, "#open-db", "team\n").await?;
        wait_hash(c, "/db/team").await?;
        text_of(c, "#docs-table", "note1").await?;
        // A member may query but not create indexes (design documents).
        click(c, ".tabs a[href='#/db/team/find']").await?;
        text_of(c, "#indexes", "_all_docs").await?;
        if !absent(c, "#new-index").await? {
            return Err("a member is offered to create indexes".into());
        }
        click(c, "#run-find").await?;
        text_of(c, "#find-results", "note1").await?;
        // His account page: the users database is admins-only (CouchDB 3's
        // default), which the page says instead of offering a password form.
        click(c, "#whoami").await?;
        text_of(c, "#account-closed", "admins only").await?;
        if !absent(c, "#my-password").await? {
            return Err("a password form the server would refuse".into());
        }
        log_out(c).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_list_pages_views_run_and_changes_follow() {
    let s = Server::start();
    for i in 0..23 {
        s.create_db(&format!("list-{i:02}"));
    }
    let r = s.admin("PUT", "/other?partitioned=true", None);
    assert_eq!(r.status, 201, "{r:?}");
    let docs = r#"{"docs": [{"_id": "a", "kind": "x"}, {"_id": "b", "kind": "y"}, {"_id": "c", "kind": "x"}]}"#;
    assert_eq!(
        s.admin("POST", "/list-00/_bulk_docs", Some(docs)).status,
        201
    );
    in_browser("lists", |c| async move {
        let c = &c;
        log_in(c, &s, ADMIN.0, ADMIN.1).await?;
        // 26 databases (with _replicator and _users): a first page of 20,
        // then the rest.
        text_of(c, "#db-table", "list-17").await?;
        let t = text_of(c, "#db-table", "_users").await?;
        if t.contains("list-18") || t.contains("other") {
            return Err(format!("more than a page: {t}"));
        }
        click(c, "button[aria-label='Next page']").await?;
        text_of(c, "#db-table", "other").await?;
        text_of(c, "tr[data-db='other']", "yes").await?; // partitioned
                                                         // A prefix filter.
        type_into(c, "#db-filter", "list-1").await?;
        until("ten databases listed", || async {
            let rows = c
                .find_all(Locator::Css("#db-table tbody tr"))
                .await
                .map_err(|e| e.to_string())?;
            Ok((rows.len() == 10).then_some(()))
        })
        .await?;
        if !absent(c, "tr[data-db='list-00']").await? {
            return Err("the filter kept list-00".into());
        }
        text_of(c, "#db-table", "list-15").await?;

        // A design document written in the editor, then its view run,
        // reduced and not.
        c.goto(&s.url("/_utils/#/db/list-00/new"))
            .await
            .map_err(|e| e.to_string())?;
        let ddoc = r#"{"_id": "_design/k", "views": {"by-kind": {"map": "function (d) { if (d.kind) emit(d.kind, 1); }", "reduce": "_count"}}}"#;
        set_editor(c, "#doc-editor", ddoc).await?;
        click(c, "#save-doc").await?;
        wait_hash(c, "/db/list-00/doc/_design%2Fk").await?;
        text_of(c, "#doc-rev", "1-").await?;
        c.goto(&s.url("/_utils/#/db/list-00/views"))
            .await
            .map_err(|e| e.to_string())?;
        text_of(c, "#view-select", "k/by-kind").await?;
        click(c, "#run-view").await?;
        text_of(c, "#view-results", "3").await?; // _count of everything
        click(c, "#view-noreduce").await?;
        click(c, "#run-view").await?;
        text_of(c, "#view-results", "3 row(s) of 3").await?;

        // Changes: the latest, then a write shows up live.
        c.goto(&s.url("/_utils/#/db/list-00/changes"))
            .await
            .map_err(|e| e.to_string())?;
        text_of(c, "#changes-table", "_design/k").await?;
        let r = s.admin("PUT", "/list-00/live-one", Some("{}"));
        if r.status != 201 {
            return Err(format!("write failed: {r:?}"));
        }
        text_of(c, "#changes-table", "live-one").await?;
        Ok(())
    })
    .await;
}

/// The number after `label` in `text` ("read 3.5/s, written 0.0/s").
fn rate_in(text: &str, label: &str) -> Option<f64> {
    let rest = text.split(&format!("{label} ")).nth(1)?;
    rest.split('/').next()?.trim().parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_manages_users_security_replication_config_and_watches_stats() {
    let s = Server::start();
    s.create_db("sec-db");
    s.create_db("rep-src");
    let docs: Vec<Value> = (0..5).map(|i| json!({"_id": format!("d{i}")})).collect();
    let body = json!({ "docs": docs }).to_string();
    assert_eq!(
        s.admin("POST", "/rep-src/_bulk_docs", Some(&body)).status,
        201
    );
    in_browser("server", |c| async move {
        let c = &c;
        log_in(c, &s, ADMIN.0, ADMIN.1).await?;

        // Users: create one, then change the password.
        click(c, "header nav a[href='#/users']").await?;
        type_into(c, "#new-user-name", "carol").await?;
        type_into(c, "#new-user-password", "first-pw").await?;
        type_into(c, "#new-user-roles", "team, ops").await?;
        click(c, "#new-user-submit").await?;
        text_of(c, "#users-table", "carol").await?;
        let u = s
            .admin("GET", "/_users/org.couchdb.user:carol", None)
            .json();
        if u["roles"] != json!(["team", "ops"]) || u.get("password").is_some() {
            return Err(format!("user stored as {u}"));
        }
        type_into(c, "input[aria-label='New password of carol']", "second-pw").await?;
        click(c, "tr[data-user='carol'] td:nth-child(3) button").await?;
        text_of(c, ".notice", "Password of carol changed").await?;
        let login = |pw: &str| {
            s.anon(
                "POST",
                "/_session",
                Some(&json!({"name": "carol", "password": pw}).to_string()),
            )
            .status
        };
        if login("second-pw") != 200 || login("first-pw") != 401 {
            return Err("the new password is not the one that works".into());
        }

        // A database's security: carol becomes a member.
        c.goto(&s.url("/_utils/#/db/sec-db/security"))
            .await
            .map_err(|e| e.to_string())?;
        type_into(c, "#sec-members-names input", "carol").await?;
        click(c, "#sec-members-names button[type='submit']").await?;
        text_of(c, "#sec-members-names", "carol").await?;
        click(c, "#save-security").await?;
        text_of(c, ".notice", "Security saved").await?;
        let sec = s.admin("GET", "/sec-db/_security", None).json();
        if sec["members"]["names"] != json!(["carol"]) {
            return Err(format!("security stored as {sec}"));
        }

        // A one-shot replication of local databases, the target created.
        click(c, "header nav a[href='#/replication']").await?;
        type_into(c, "#rep-source-where", "rep-src").await?;
        type_into(c, "#rep-target-where", "rep-dst").await?;
        click(c, "#rep-create-target").await?;
        click(c, "#rep-start").await?;
        text_of(c, "#rep-result", "5 document(s) written").await?;
        let info = s.admin("GET", "/rep-dst", None).json();
        if info["doc_count"] != 5 {
            return Err(format!("target after replication: {info}"));
        }

        // A continuous one: listed as a running job, it copies a document
        // written meanwhile, and is cancelled from the page.
        c.refresh().await.map_err(|e| e.to_string())?;
        type_into(c, "#rep-source-where", "rep-src").await?;
        type_into(c, "#rep-target-where", "rep-live").await?;
        click(c, "#rep-create-target").await?;
        click(c, "#rep-continuous").await?;
        click(c, "#rep-start").await?;
        text_of(c, "#rep-result", "Continuous replication").await?;
        text_of(c, "#rep-jobs", "rep-live").await?;
        s.admin("PUT", "/rep-src/late", Some("{}"));
        until("the late document to be replicated", || async {
            Ok((s.admin("GET", "/rep-live/late", None).status == 200).then_some(()))
        })
        .await?;
        click(c, "#rep-jobs td button.danger").await?;
        click(c, "#rep-jobs .confirm button.danger").await?;
        until("the job to go", || async {
            let t = c
                .find(Locator::Css("#rep-jobs"))
                .await
                .map_err(|e| e.to_string())?
                .text()
                .await
                .map_err(|e| e.to_string())?;
            Ok(t.contains("No job is running").then_some(()))
        })
        .await?;

        // Configuration: set a value, then change it in its row.
        click(c, "header nav a[href='#/config']").await?;
        type_into(c, "#config-section", "console_test").await?;
        type_into(c, "#config-key", "answer").await?;
        type_into(c, "#config-value", "42").await?;
        click(c, "#config-set").await?;
        text_of(c, "#config-table", "answer").await?;
        let cfg = |s: &Server| {
            s.admin("GET", "/_node/_local/_config/console_test/answer", None)
                .json()
        };
        if cfg(&s) != "42" {
            return Err(format!("config value {}", cfg(&s)));
        }
        let input = "input[aria-label='Value of console_test/answer']";
        type_into(c, input, "\u{e003}\u{e003}43").await?;
        click(
            c,
            "tr[data-key='console_test/answer'] button[type='submit']",
        )
        .await?;
        text_of(c, ".notice", "console_test/answer set").await?;
        if cfg(&s) != "43" {
            return Err(format!("config value after the edit {}", cfg(&s)));
        }

        // Active tasks load (nothing is running now).
        click(c, "header nav a[href='#/tasks']").await?;
        text_of(c, "#tasks-table", "Type").await?;

        // Stats: document reads under load move the chart.
        click(c, "header nav a[href='#/stats']").await?;
        text_of(c, "#chart-docs-now", "read").await?;
        let deadline = Instant::now() + WAIT;
        let mut moved = false;
        while Instant::now() < deadline && !moved {
            for i in 0..50 {
                s.admin("GET", &format!("/rep-src/d{}", i % 5), None);
            }
            let t = c
                .find(Locator::Css("#chart-docs-now"))
                .await
                .map_err(|e| e.to_string())?
                .text()
                .await
                .map_err(|e| e.to_string())?;
            moved = rate_in(&t, "read").is_some_and(|r| r > 0.0);
        }
        if !moved {
            return Err("the reads chart did not move under load".into());
        }
        if absent(c, "#chart-docs canvas").await? {
            return Err("no chart drawn".into());
        }
        // The requests just made are in the request-time chart
        // (`couchdb.request_time` over the server's last 10 s).
        let t = text_of(c, "#chart-latency-now", "p99").await?;
        let p99: Option<f64> = t
            .split("p99 ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|v| v.parse().ok());
        if !p99.is_some_and(|v| v > 0.0) {
            return Err(format!("no request time charted: {t:?}"));
        }
        // The Prometheus endpoint the page links to, read with the session.
        let href = c
            .find(Locator::Css("#prometheus-link"))
            .await
            .map_err(|e| e.to_string())?
            .attr("href")
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no href")?;
        let prom = c
            .execute_async(
                "fetch(arguments[0]).then(r => r.text().then(t => [r.headers.get('content-type'), t])).then(arguments[1])",
                vec![json!(href)],
            )
            .await
            .map_err(|e| e.to_string())?;
        let text = prom[1].as_str().unwrap_or("");
        let reads = text
            .lines()
            .find_map(|l| l.strip_prefix("couchdb_database_reads_total "))
            .and_then(|v| v.parse::<u64>().ok());
        if prom[0] != "text/plain; version=2.0"
            || !text.contains("# TYPE couchdb_httpd_requests_total counter")
            || !text.contains("couchdb_httpd_request_methods{method=\"GET\"}")
            || reads.is_none_or(|n| n < 50)
        {
            return Err(format!("_prometheus answered {prom}"));
        }
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_changes_own_password_where_the_users_db_is_open() {
    let s = Server::start();
    let r = s.admin(
        "PUT",
        "/_node/_local/_config/couchdb/users_db_security_editable",
        Some("\"true\""),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(s.admin("PUT", "/_users/_security", Some("{}")).status, 200);
    let user = json!({"name": "dora", "password": "old-pw", "roles": [], "type": "user"});
    let r = s.admin(
        "PUT",
        "/_users/org.couchdb.user:dora",
        Some(&user.to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    in_browser("account", |c| async move {
        let c = &c;
        log_in(c, &s, "dora", "old-pw").await?;
        click(c, "#whoami").await?;
        type_into(c, "#my-password", "new-pw").await?;
        type_into(c, "#my-password2", "new-pw-typo").await?;
        click(c, "#my-password-submit").await?;
        text_of(c, ".error", "The two passwords differ").await?;
        type_into(
            c,
            "#my-password2",
            "\u{e003}\u{e003}\u{e003}\u{e003}\u{e003}",
        )
        .await?;
        click(c, "#my-password-submit").await?;
        text_of(c, ".notice", "Password changed").await?;
        // Still logged in (the page logged in again with the new password).
        let who = c
            .execute_async(
                "fetch('/_session').then(r => r.json()).then(arguments[0])",
                vec![],
            )
            .await
            .map_err(|e| e.to_string())?;
        if who["userCtx"]["name"] != "dora" {
            return Err(format!("logged out by the password change: {who}"));
        }
        let login = |pw: &str| {
            s.anon(
                "POST",
                "/_session",
                Some(&json!({"name": "dora", "password": pw}).to_string()),
            )
            .status
        };
        if login("new-pw") != 200 || login("old-pw") != 401 {
            return Err("the new password is not the one that works".into());
        }
        log_out(c).await
    })
    .await;
}

/// The shard grid of `db` as the page draws it: range -> holders (full
/// copies, sorted).
async fn grid_of(c: &Client, db: &str) -> R<BTreeMap<String, Vec<String>>> {
    let v = c
        .execute(
            "const out = {};
             document.querySelectorAll(`tr[data-db='${arguments[0]}'] td[data-range]`).forEach(td => {
                 out[td.dataset.range] = [...td.querySelectorAll('.holder:not(.incoming)')]
                     .map(s => s.textContent.replace(' (down)', '')).sort();
             });
             return out;",
            vec![json!(db)],
        )
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// The text of `css` now ("" when absent).
async fn text_now(c: &Client, css: &str) -> R<String> {
    match c.find(Locator::Css(css)).await {
        Ok(e) => e.text().await.map_err(|e| e.to_string()),
        Err(_) => Ok(String::new()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_page_adds_a_node_watches_the_rebalance_and_marks_a_killed_node_down() {
    use cluster_support::{copies, node, per_node};
    const A: &str = "a@127.0.0.1";
    const B: &str = "b@127.0.0.1";
    const C: &str = "c@127.0.0.1";
    let etcd = etcd_common::EtcdServer::start();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("tmp")).collect();
    let a = node(dirs[0].path(), &etcd, A);
    let b = node(dirs[1].path(), &etcd, B);
    // A member's `/_node/_local` names it (the page marks "this node").
    assert_eq!(a.admin("GET", "/_node/_local", None).json()["name"], A);
    let r = a.admin("PUT", "/db?q=4&n=2", None);
    assert_eq!(r.status, 201, "{r:?}");
    let docs: Vec<Value> = (0..100)
        .map(|i| json!({"_id": format!("d{i:03}")}))
        .collect();
    let r = a.admin(
        "POST",
        "/db/_bulk_docs",
        Some(&json!({"docs": docs}).to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let health = |n: &str| format!("tr[data-node='{n}'] .health");
    in_browser("cluster", |c| async move {
        let c = &c;
        let mut b = Some(b);
        log_in(c, &a, ADMIN.0, ADMIN.1).await?;
        click(c, "#nav-cluster").await?;
        wait_hash(c, "/cluster").await?;
        text_of(c, "#cluster-summary", "2 node(s), 2 up, 0 down").await?;
        text_of(c, "#cluster-summary", &format!("seen through {A}")).await?;
        text_of(c, &health(A), "up").await?;
        text_of(c, &health(B), "up").await?;
        // The grid is the server's map: every range on a and b.
        let want = copies(&a, "db");
        if want.len() != 4 || want.values().any(|ns| ns != &[A, B]) {
            return Err(format!("unexpected map {want:?}"));
        }
        until("the grid to show the map", || async {
            let g = grid_of(c, "db").await?;
            Ok((g == want).then_some(()))
        })
        .await?;
        text_of(c, "#balance", "0 of 4 shard(s) under-replicated").await?;
        text_of(c, &format!("tr[data-node='{A}'] td.num"), "4").await?;

        // Paused, a node that joins gets nothing until it is let in.
        click(c, "#rebalance-pause").await?;
        text_of(c, ".notice", "Rebalancing paused").await?;
        text_of(c, "#rebalance-state", "paused").await?;
        if a.admin("GET", "/_cluster/rebalance", None).json()["paused"] != json!(true) {
            return Err("the page's pause did not reach the server".into());
        }
        let node_c = tokio::task::block_in_place(|| node(dirs[2].path(), &etcd, C));
        text_of(c, &health(C), "up").await?;
        text_of(c, "#cluster-summary", "3 node(s), 3 up, 0 down").await?;
        text_of(c, &format!("tr[data-node='{C}'] td.num"), "0").await?;
        text_of(
            c,
            "#balance",
            "uneven across the nodes that take copies: db",
        )
        .await?;

        // Decommission asks first; the mark reaches the server; "keep"
        // takes it off again.
        click(c, &format!("tr[data-node='{C}'] button.danger")).await?;
        text_of(
            c,
            &format!("tr[data-node='{C}'] .confirm"),
            "Move every copy off",
        )
        .await?;
        click(c, &format!("tr[data-node='{C}'] .confirm button.danger")).await?;
        text_of(c, ".notice", "is being decommissioned").await?;
        text_of(c, &health(C), "leaving").await?;
        let state = |s: &common::Server| {
            s.admin("GET", &format!("/_node/_local/_nodes/{C}"), None)
                .json()["state"]
                .clone()
        };
        if state(&a) != json!("leaving") {
            return Err(format!(
                "decommissioned in the page, the server says {}",
                state(&a)
            ));
        }
        click(c, &format!("tr[data-node='{C}'] .keep-node")).await?;
        text_of(c, &health(C), "up").await?;

        // Added by name through the form (the server says it is live).
        type_into(c, "#add-node-name", C).await?;
        click(c, "#add-node-submit").await?;
        text_of(c, ".notice", &format!("{C} is a member and takes copies")).await?;
        if state(&a) != json!("live") {
            return Err(format!("added in the page, the server says {}", state(&a)));
        }
        shot(c, "cluster-joined").await?;

        // Resumed: the rebalance runs to its end and the grid shows c's
        // copies, as the server's map has them.
        click(c, "#rebalance-resume").await?;
        text_of(c, ".notice", "Rebalancing resumed").await?;
        let done = until_within(
            Duration::from_secs(90),
            "the rebalance to finish",
            || async {
                let st = text_now(c, "#rebalance-state").await?;
                let figures = text_now(c, "#rebalance-figures").await?;
                let g = grid_of(c, "db").await?;
                let server = tokio::task::block_in_place(|| copies(&a, "db"));
                let counts = per_node(&g);
                let spread = counts
                    .values()
                    .max()
                    .zip(counts.values().min())
                    .map(|(h, l)| h - l);
                if st.starts_with("balanced")
                    && g == server
                    && counts.len() == 3
                    && spread == Some(1)
                {
                    Ok(Some(figures))
                } else {
                    Err(format!("{st}; {figures}; grid {g:?}; server {server:?}"))
                }
            },
        )
        .await?;
        if done.starts_with("0 move(s) done") {
            return Err(format!("balanced with no move counted: {done}"));
        }
        text_of(c, "#balance", "0 of 4 shard(s) under-replicated").await?;
        text_of(c, "#balance", "copies within one of each other").await?;
        shot(c, "cluster-balanced").await?;

        // b killed: the page marks it down within seconds, and the cells
        // it holds as under-replicated.
        let held_by_b = copies(&a, "db")
            .values()
            .filter(|ns| ns.iter().any(|n| n == B))
            .count();
        let killed = Instant::now();
        b.take().expect("b").kill9();
        text_of(c, &health(B), "down").await?;
        let took = killed.elapsed();
        if took > Duration::from_secs(10) {
            return Err(format!("b shown down {took:?} after it was killed"));
        }
        text_of(c, "#cluster-summary", "3 node(s), 2 up, 1 down").await?;
        until("b's cells marked under-replicated", || async {
            let under = c
                .find_all(Locator::Css("tr[data-db='db'] td.under"))
                .await
                .map_err(|e| e.to_string())?
                .len();
            Ok((under == held_by_b).then_some(()))
        })
        .await?;
        text_of(
            c,
            "#balance",
            &format!("{held_by_b} of 4 shard(s) under-replicated"),
        )
        .await?;
        eprintln!("b shown down {took:?} after SIGKILL");
        // At a phone's width, then back (the last screenshot is the
        // laptop's).
        let set_size =
            |w, h| async move { c.set_window_size(w, h).await.map_err(|e| e.to_string()) };
        set_size(390, 844).await?;
        text_of(c, &health(B), "down").await?;
        shot(c, "cluster-phone").await?;
        set_size(1280, 900).await?;
        drop(node_c);
        Ok(())
    })
    .await;
}
