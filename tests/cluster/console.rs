//! The web console (issue 28) on a real 3-node cluster, looked at through a follower.
//!
//! In a real browser: headless Chromium, driven over WebDriver (Debian's chromium and
//! chromium-driver; .ci/run installs them), asserting on the DOM: after a write, a lock acquire,
//! an operation submit and a pool acquire made through the CLI, the open page shows it within
//! 2 s; a lock's TTL counts down; a killed node shows as down, and as serving once it is back.
//! With `STEWARD_CONSOLE_SCREENSHOTS=<dir>` the run also saves a PNG of each page there (the
//! README's pictures: `scripts/console-screenshots.sh`).
//!
//! Over plain HTTP: with authentication on, no page or stream answers without credentials, a
//! read-only user sees everything, a user limited to a namespace sees only its namespace, a
//! worker-only user is refused; a bad address is refused with the field; past
//! console.streams_max a stream is refused.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client as Browser, ClientBuilder};
use http_body_util::BodyExt;
use serde_json::json;
use steward::client::{Client, LockMode};
use steward::proto::v1 as pb;

use crate::harness::*;

/// The time the issue gives a page to show a change.
const SHOWN_WITHIN: Duration = Duration::from_secs(2);

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// chromedriver and the headless browser it drives; both end when this is dropped.
struct Chromium {
    driver: Child,
    browser: Option<Browser>,
}

impl Drop for Chromium {
    fn drop(&mut self) {
        if let Some(browser) = self.browser.take() {
            // Closing the session ends the browser; chromedriver ends with its kill.
            let handle = tokio::runtime::Handle::current();
            let _ = std::thread::spawn(move || handle.block_on(browser.close())).join();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Chromium {
    fn page(&self) -> &Browser {
        self.browser.as_ref().expect("browser")
    }
}

/// Headless Chromium, or None (the test is skipped, and fails in CI) without chromedriver.
async fn chromium(test: &str) -> Option<Chromium> {
    let Some(driver) = find_program("chromedriver") else {
        skip_or_fail(
            test,
            "chromedriver is not installed (apt-get install chromium chromium-driver)",
        );
        return None;
    };
    let port = free_port();
    let driver = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let mut chromium = Chromium {
        driver,
        browser: None,
    };
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_string(),
        json!({"args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--window-size=1280,860",
        ]}),
    );
    let url = format!("http://127.0.0.1:{port}");
    let browser = wait_for(
        "chromedriver to start a browser",
        Duration::from_secs(30),
        || {
            let caps = caps.clone();
            let url = url.clone();
            async move {
                let connector = hyper_util::client::legacy::connect::HttpConnector::new();
                ClientBuilder::new(connector)
                    .capabilities(caps)
                    .connect(&url)
                    .await
                    .ok()
            }
        },
    )
    .await;
    chromium.browser = Some(browser);
    Some(chromium)
}

/// The text of the first element `css` selects, if there is one.
async fn text(page: &Browser, css: &str) -> Option<String> {
    let found = page
        .execute(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            vec![json!(css)],
        )
        .await
        .expect("script");
    found.as_str().map(str::to_string)
}

/// Waits until the element `css` selects holds `want`; returns how long that took. Panics after
/// `within`, with what the page showed.
async fn shows(page: &Browser, css: &str, want: &str, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if text(page, css).await.is_some_and(|t| t.contains(want)) {
            return start.elapsed();
        }
        if start.elapsed() > within {
            let main = text(page, "main").await.unwrap_or_default();
            panic!("{css} did not show {want:?} within {within:?}; the page shows:\n{main}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn open(page: &Browser, url: &str) {
    page.goto(url).await.expect("goto");
    // Live once the stream is open: changes from here on reach the page.
    shows(page, "#live", "live", Duration::from_secs(5)).await;
}

async fn screenshot(page: &Browser, name: &str) {
    let Some(dir) = std::env::var_os("STEWARD_CONSOLE_SCREENSHOTS") else {
        return;
    };
    let png = page.screenshot().await.expect("screenshot");
    let path = PathBuf::from(dir).join(format!("{name}.png"));
    std::fs::write(&path, png).expect("write screenshot");
}

/// "29.3s", "4m10s" as ms.
fn ms_of(text: &str) -> u64 {
    let text = text.trim();
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse().expect("ms");
    }
    if let Some((m, s)) = text.split_once('m') {
        let s: f64 = s.trim_end_matches('s').parse().expect("s");
        return m.parse::<u64>().expect("m") * 60_000 + (s * 1000.0) as u64;
    }
    let s: f64 = text.trim_end_matches('s').parse().expect("seconds");
    (s * 1000.0) as u64
}

async fn start_with_console() -> TestCluster {
    TestCluster::start_edited(3, |c| {
        c.console.addr = Some(format!("127.0.0.1:{}", free_port()));
    })
    .await
}

async fn cli(endpoint: &str, args: &[&str]) -> Duration {
    let start = Instant::now();
    steward_cli(endpoint, None, args).await;
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_on_a_follower_sees_writes_locks_operations_pools_and_nodes_live() {
    let test = "a_browser_on_a_follower_sees_writes_locks_operations_pools_and_nodes_live";
    let Some(chromium) = chromium(test).await else {
        return;
    };
    let page = chromium.page();
    let mut cluster = start_with_console().await;
    let followers = cluster.followers().await;
    let (watcher, other) = (followers[0], followers[1]);
    let endpoint = cluster.endpoint(watcher);
    let console = format!("http://{}", cluster.console_addr(watcher));
    let dir = tempfile::tempdir().expect("dir");

    // Cluster: every member, the leader.
    open(page, &format!("{console}/cluster")).await;
    shows(page, "#leader", "node ", SHOWN_WITHIN).await;
    for id in 1..=3 {
        shows(
            page,
            &format!("tr[data-node='{id}']"),
            "serving",
            SHOWN_WITHIN,
        )
        .await;
    }
    screenshot(page, "cluster").await;

    // Resources: an object written through the CLI appears on the open list.
    open(page, &format!("{console}/resources/Director")).await;
    let file = dir.path().join("d.json");
    std::fs::write(&file, director("console-d1", &[("app", "web")])).expect("write");
    cli(&endpoint, &["apply", "-f", file.to_str().expect("path")]).await;
    let took = shows(page, "tr[data-name='console-d1']", "app=web", SHOWN_WITHIN).await;
    eprintln!("object shown {took:?} after the CLI returned");
    screenshot(page, "resources").await;

    // Locks: a holder with its TTL, counting down.
    open(page, &format!("{console}/locks")).await;
    cli(
        &endpoint,
        &[
            "lock",
            "acquire",
            "console-lock",
            "--mode",
            "write",
            "--holder",
            "ops@console",
            "--ttl",
            "60s",
        ],
    )
    .await;
    let lock = "tbody[data-lock='console-lock']";
    shows(page, lock, "ops@console", SHOWN_WITHIN).await;
    let ttl = format!("{lock} span.ttl");
    let first = ms_of(&text(page, &ttl).await.expect("a TTL"));
    assert!(first > 50_000 && first <= 60_000, "TTL left {first} ms");
    let later = wait_for("the TTL to count down", SHOWN_WITHIN, || async {
        let now = ms_of(&text(page, &ttl).await?);
        (now < first).then_some(now)
    })
    .await;
    assert!(first - later < 5_000, "{first} -> {later}");
    screenshot(page, "locks").await;

    // Operations: a submitted operation in its target's queue.
    open(page, &format!("{console}/operations")).await;
    let create = director("op-target", &[]);
    cli(
        &endpoint,
        &[
            "op",
            "submit",
            "create",
            "Director/op-target",
            "--create",
            &create,
        ],
    )
    .await;
    let queue = "tbody[data-target='Director/default/op-target']";
    shows(page, queue, "queued", SHOWN_WITHIN).await;
    screenshot(page, "operations").await;

    // Pools: counts after a sync, and a lease after an acquire.
    open(page, &format!("{console}/pools")).await;
    let pools = dir.path().join("resources.yaml");
    std::fs::write(
        &pools,
        "resources:\n- type: gce-project\n  state: free\n  names: [p-1, p-2, p-3]\n",
    )
    .expect("write");
    cli(
        &endpoint,
        &["pool", "sync", "-f", pools.to_str().expect("path")],
    )
    .await;
    shows(
        page,
        "tr[data-type='gce-project'] td[data-state='free']",
        "3",
        SHOWN_WITHIN,
    )
    .await;
    cli(
        &endpoint,
        &[
            "pool",
            "acquire",
            "--type",
            "gce-project",
            "--state",
            "free",
            "--dest",
            "busy",
            "--owner",
            "console-test",
        ],
    )
    .await;
    shows(page, "#leases", "console-test", SHOWN_WITHIN).await;
    shows(
        page,
        "tr[data-type='gce-project'] td[data-state='busy']",
        "1",
        SHOWN_WITHIN,
    )
    .await;
    screenshot(page, "pools").await;

    // Deployments: a deployment with its resources, summary and drill-down.
    let api = Client::connect(std::slice::from_ref(&endpoint)).expect("client");
    open(page, &format!("{console}/deployments")).await;
    api.deployment_create(pb::CreateDeploymentRequest {
        name: "edge".into(),
        project: "p1".into(),
        composite_app: "edge-app".into(),
        composite_app_version: "v1".into(),
        composite_profile: "prof".into(),
        ..Default::default()
    })
    .await
    .expect("deployment");
    shows(
        page,
        "tr[data-deployment='default/edge']",
        "p1 / edge-app",
        SHOWN_WITHIN,
    )
    .await;
    api.deployment_add_resources(pb::AddDeploymentResourcesRequest {
        namespace: String::new(),
        name: "edge".into(),
        resources: ["web", "db"]
            .iter()
            .map(|name| pb::DeploymentAppResource {
                app: "shop".into(),
                cluster: "east".into(),
                gvk: Some(pb::Gvk {
                    group: "apps".into(),
                    version: "v1".into(),
                    kind: "Deployment".into(),
                }),
                name: name.to_string(),
                metadata_json: json!({"name": name}).to_string(),
                spec_json: json!({"replicas": 1}).to_string(),
            })
            .collect(),
    })
    .await
    .expect("resources");
    shows(
        page,
        "tr[data-deployment='default/edge'] td.num",
        "2",
        SHOWN_WITHIN,
    )
    .await;
    open(page, &format!("{console}/deployments/default/edge")).await;
    shows(
        page,
        "table[data-app='shop'] tbody[data-cluster='east']",
        "2 resources",
        SHOWN_WITHIN,
    )
    .await;
    shows(page, "tr[data-resource='db']", "Deployment", SHOWN_WITHIN).await;
    screenshot(page, "deployment").await;

    // Reservations: the counters of a node after a reserving create.
    open(page, &format!("{console}/reservations")).await;
    api.create(&json!({
        "kind": "Container",
        "apiVersion": "provision.threefold.io/v1",
        "metadata": {"name": "c1"},
        "spec": {},
        "reservation": {"nodeId": "node-a", "units": {"cru": 2, "mru": 4, "sru": 50}},
    }))
    .await
    .expect("reserve");
    shows(page, "tr[data-node='node-a']", "50", SHOWN_WITHIN).await;

    // A node killed shows as down, and as serving again once it is back.
    open(page, &format!("{console}/cluster")).await;
    let row = |health: &str| format!("tr[data-node='{other}'][data-health='{health}']");
    cluster.kill(other);
    shows(page, &row("down"), "down", Duration::from_secs(10)).await;
    screenshot(page, "cluster-node-down").await;
    cluster.spawn(other);
    shows(page, &row("serving"), "serving", Duration::from_secs(20)).await;
}

/// A plain HTTP GET of the console: status and body (the first `limit` bytes of a stream).
async fn get(url: &str, credentials: Option<(&str, &str)>, limit: usize) -> (u16, String) {
    use base64::Engine;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let mut request = http::Request::get(url);
    if let Some((user, token)) = credentials {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"));
        request = request.header("authorization", format!("Basic {basic}"));
    }
    let response = client
        .request(request.body(http_body_util::Empty::new()).expect("request"))
        .await
        .expect("response");
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    let read = async {
        while bytes.len() < limit {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        bytes.extend_from_slice(&data);
                    }
                }
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// Opens a stream and reads it until the task is aborted.
async fn hold(url: &str) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let request = http::Request::get(url)
        .body(http_body_util::Empty::new())
        .expect("request");
    let response = client.request(request).await.expect("response");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    while let Some(Ok(_)) = body.frame().await {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_pages_need_credentials_and_show_what_the_user_reads() {
    let cluster = start_with_console().await;
    let followers = cluster.followers().await;
    let open = Client::connect(&[cluster.endpoint(followers[0])]).expect("client");
    let console = format!("http://{}", cluster.console_addr(followers[0]));
    let object = |namespace: &str, name: &str| {
        let mut d: serde_json::Value = serde_json::from_str(&director(name, &[])).expect("json");
        d["metadata"]["namespace"] = json!(namespace);
        d
    };
    open.create(&object("team-a", "a-one"))
        .await
        .expect("create");
    open.create(&object("team-b", "b-one"))
        .await
        .expect("create");
    let mut tokens = std::collections::BTreeMap::new();
    for (name, role) in [
        ("root", "admin"),
        ("reader", "read-only"),
        ("alice", "read-write:team-a"),
        ("bosh", "worker"),
    ] {
        let reply = open
            .user_add(name, &[role.to_string()], false)
            .await
            .expect("user add");
        tokens.insert(name, reply.token);
    }
    open.auth_enable(true).await.expect("enable");
    let page = |path: &str| format!("{console}{path}");
    wait_for(
        "auth on at the follower",
        Duration::from_secs(10),
        || async { (get(&page("/cluster"), None, usize::MAX).await.0 == 401).then_some(()) },
    )
    .await;

    // No credentials, a wrong token: nothing answers, pages or streams, and the refusal asks
    // the browser for credentials.
    for path in [
        "/cluster",
        "/resources",
        "/resources/Director",
        "/locks",
        "/operations",
        "/pools",
        "/events?view=/locks",
        "/",
    ] {
        let (status, body) = get(&page(path), None, usize::MAX).await;
        if path == "/" {
            assert_eq!(status, 303, "{path}: {body}");
            continue;
        }
        assert_eq!(status, 401, "{path}: {body}");
        assert!(body.starts_with("unauthenticated: "), "{path}: {body}");
        let (status, _) = get(&page(path), Some(("reader", "not-the-secret")), usize::MAX).await;
        assert_eq!(status, 401, "{path} with a wrong secret");
    }

    // Read-only: everything, both namespaces. The password may be the token or its secret.
    let reader = tokens["reader"].as_str();
    let secret = reader.strip_prefix("reader.").expect("token");
    for password in [reader, secret] {
        let (status, body) = get(
            &page("/resources/Director"),
            Some(("reader", password)),
            usize::MAX,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("a-one") && body.contains("b-one"), "{body}");
    }
    let (status, body) = get(
        &page("/events?view=/resources/Director"),
        Some(("reader", reader)),
        4096,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("event: page") && body.contains("b-one"),
        "{body}"
    );

    // Limited to team-a: only team-a, on the list, the object page and the stream.
    let alice = ("alice", tokens["alice"].as_str());
    let (status, body) = get(&page("/resources/Director"), Some(alice), usize::MAX).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("a-one") && !body.contains("b-one"), "{body}");
    let (_, body) = get(
        &page("/resources/Director?namespace=team-b"),
        Some(alice),
        usize::MAX,
    )
    .await;
    assert!(!body.contains("b-one"), "{body}");
    let (_, body) = get(
        &page("/resources/Director/team-b/b-one"),
        Some(alice),
        usize::MAX,
    )
    .await;
    assert!(
        !body.contains("\"b-one\"") && body.contains("Not found"),
        "{body}"
    );
    let (_, body) = get(&page("/resources"), Some(alice), usize::MAX).await;
    assert!(body.contains("Director"), "{body}");
    let (_, body) = get(&page("/events?view=/resources/Director"), Some(alice), 4096).await;
    assert!(body.contains("a-one") && !body.contains("b-one"), "{body}");

    // A worker reads nothing here.
    let (status, body) = get(
        &page("/locks"),
        Some(("bosh", tokens["bosh"].as_str())),
        usize::MAX,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("no role that reads"), "{body}");

    // Bad addresses: the field and the rule.
    let root = ("root", tokens["root"].as_str());
    let (status, body) = get(
        &page("/resources/Director?selector=a%3D%3D%3Db"),
        Some(root),
        usize::MAX,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.starts_with("selector: "), "{body}");
    let (status, body) = get(&page("/nothing"), Some(root), usize::MAX).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_limit_are_refused_and_one_render_serves_them_all() {
    let cluster = TestCluster::start_edited(3, |c| {
        c.console.addr = Some(format!("127.0.0.1:{}", free_port()));
        c.console.streams_max = 3;
    })
    .await;
    let follower = cluster.followers().await[0];
    let console = format!("http://{}", cluster.console_addr(follower));
    let url = format!("{console}/events?view=/locks");
    let mut streams = Vec::new();
    for _ in 0..3 {
        let url = url.clone();
        streams.push(tokio::spawn(async move { hold(&url).await }));
    }
    let metrics = format!("http://{}/metrics", cluster.metrics_addr(follower));
    let gauge = |text: &str, name: &str| -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    wait_for("three open streams", Duration::from_secs(10), || async {
        let (_, text) = get(&metrics, None, usize::MAX).await;
        (gauge(&text, "steward_console_streams ") == Some(3.0)).then_some(())
    })
    .await;
    let (status, body) = get(&url, None, usize::MAX).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("console.streams_max: "), "{body}");

    // Three streams of one page, under a stream of lock changes: about one render per change
    // interval, not three.
    let (_, before) = get(&metrics, None, usize::MAX).await;
    let renders_before = gauge(&before, "steward_console_renders_total ").expect("renders");
    let client = Client::connect(&[cluster.endpoint(follower)]).expect("client");
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < Duration::from_secs(3) {
        n += 1;
        client
            .lock_acquire(
                &format!("l-{n}"),
                LockMode::Write,
                "h",
                Some(Duration::from_secs(30)),
                None,
                None,
            )
            .await
            .expect("acquire");
    }
    let (_, after) = get(&metrics, None, usize::MAX).await;
    let renders =
        gauge(&after, "steward_console_renders_total ").expect("renders") - renders_before;
    // 500 ms apart: about 6 in 3 s for all three streams; a render per stream would be 18.
    assert!(
        renders <= 10.0,
        "{renders} renders for {n} changes seen by 3 streams"
    );
    for s in streams {
        s.abort();
    }
}

/// A GET over TLS, as a browser with (or without) a client certificate makes it: the status
/// code and body, or why the connection failed.
async fn https_get(
    addr: &str,
    path: &str,
    ca: &std::path::Path,
    client: Option<(&std::path::Path, &std::path::Path)>,
) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(cert.expect("ca pem")).expect("ca cert");
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(cert)
                    .expect("cert")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("cert pem"),
                PrivateKeyDer::from_pem_file(key).expect("key"),
            )
            .expect("client auth"),
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    tls.read_to_end(&mut response)
        .await
        .map_err(|e| e.to_string())?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {response}"))?;
    Ok((status, response))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_console_answers_a_client_certificate_and_no_one_without() {
    let cluster = TestCluster::start_tls_edited(3, |c| {
        c.console.addr = Some(format!("127.0.0.1:{}", free_port()));
    })
    .await;
    let follower = cluster.followers().await[0];
    let addr = cluster.console_addr(follower);
    let (ca, cert, key) = cluster.client_files("admin").expect("TLS");

    let (status, body) = https_get(&addr, "/cluster", &ca, Some((&cert, &key)))
        .await
        .expect("HTTPS with a client certificate");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("id=\"members\""), "{body}");

    // tls.client_cert_required: the handshake fails without one, and plain HTTP gets nothing.
    let refused = https_get(&addr, "/cluster", &ca, None).await;
    assert!(refused.is_err(), "{refused:?}");
    let plain = async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        tcp.write_all(b"GET /cluster HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let mut answer = Vec::new();
        let _ = tcp.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    };
    let answer = tokio::time::timeout(Duration::from_secs(15), plain)
        .await
        .expect("the node ends a plain-HTTP connection to its TLS port");
    assert!(!answer.contains("200 OK"), "{answer}");
}
