//! `TestCluster`: real `steward serve` processes on 127.0.0.1 with free ports and temp dirs.
//!
//! Nodes are separate processes so a test can kill -9 one (`Child::kill` sends SIGKILL) and
//! restart it on the same data dir. Every wait is on a condition with a deadline, never a bare
//! sleep. Processes are killed when the cluster is dropped. A node that exits on its own ends any
//! wait for a leader at once, naming it with its log tail.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use steward::config::{Config, Limits, LocksConfig, MemberConfig, OperationsConfig, RaftConfig};
use steward::proto::v1::cluster_client::ClusterClient;
use steward::proto::v1::resources_client::ResourcesClient;
use steward::proto::v1::*;
use tonic::transport::Channel;

#[path = "../support/skip.rs"]
mod skip;
pub use skip::skip_or_fail;

pub type Res = ResourcesClient<Channel>;

/// A port nothing listens on now and no other test of this process was given, in
/// 10000..20000: under the kernel's ephemeral range (32768.. here), so no outgoing connection can
/// take it between this check and the node's bind. Ports from bind(:0) came from that range: a
/// node then found its port taken by a connection (Address already in use), or one node got the
/// same port twice, and its cluster never formed. `steward dev`'s test uses 20000..30000.
pub fn free_port() -> u16 {
    const FIRST: u32 = 10_000;
    const COUNT: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id() % COUNT;
    for _ in 0..COUNT {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(FIRST + (start + n) % COUNT).expect("under 20000");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 10000..20000");
}

/// Whether `etcdctl` (API v3) runs here; if not, `test` is skipped (or fails in CI, where
/// .ci/run installs Debian's etcd-client).
pub fn have_etcdctl(test: &str) -> bool {
    let found = Command::new("etcdctl")
        .arg("version")
        .env("ETCDCTL_API", "3")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        skip_or_fail(
            test,
            "etcdctl is not installed (apt-get install etcd-client)",
        );
    }
    found
}

/// Polls `f` until it returns Some, or panics with `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub struct TestNode {
    pub config: Config,
    pub config_path: PathBuf,
    /// The running process. In a mutex so that a wait through `&TestCluster` can see that it
    /// exited (`try_wait` needs `&mut`).
    child: Option<Mutex<Child>>,
    /// More environment for its process (libfaketime, for one).
    pub env: Vec<(String, String)>,
}

/// A node that exited while nobody had stopped it.
pub struct Exited {
    pub id: u64,
    pub status: ExitStatus,
    pub log_tail: String,
}

impl Exited {
    /// Whether the node exited because its port was taken before it could bind it.
    fn lost_its_port(&self) -> bool {
        self.log_tail.contains("cannot listen on") && self.log_tail.contains("already in use")
    }
}

impl std::fmt::Display for Exited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node {} exited ({}) while the harness waited for a leader; its log ends:\n{}",
            self.id, self.status, self.log_tail
        )
    }
}

/// How long one status call of a wait for a leader may take before the wait polls again.
const STATUS_POLL_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a cluster start is tried when a node lost its port before binding it.
const START_TRIES: usize = 3;

pub struct TestCluster {
    pub dir: tempfile::TempDir,
    pub nodes: BTreeMap<u64, TestNode>,
    pub raft: RaftConfig,
    /// Set by `use_tls`: the throw-away CA and certificates the nodes serve with; the
    /// harness's own channels present the `admin` client certificate.
    pub pki: Option<steward::tls::GeneratedPki>,
}

/// The client certificates `use_tls` makes.
pub const TLS_CLIENTS: [&str; 3] = ["admin", "other", "third"];
/// `use_tls` also signs a node certificate for this id, which is never a member.
pub const TLS_OUTSIDER: u64 = 99;

/// Fast timings for tests; `snapshot_every` small forces snapshots and log purging. The
/// heartbeat is production's 100 ms, not faster: openraft gives heartbeats and appends the
/// heartbeat interval as their deadline, and at 50 ms a quarter of a debug build's heartbeats
/// timed out on two busy cores, which once held a follower's linearizable read (ReadIndex waits
/// for a quorum of acknowledgements) past its 10 s deadline.
pub fn test_raft(snapshot_every: u64, keep: u64) -> RaftConfig {
    RaftConfig {
        heartbeat_interval_ms: 100,
        election_timeout_ms_min: 900,
        election_timeout_ms_max: 1200,
        snapshot_logs_since_last: snapshot_every,
        log_behind_snapshot_max: keep,
        rpc_timeout_ms: 1000,
        ..RaftConfig::default()
    }
}

impl TestCluster {
    /// Starts `n` nodes that bootstrap together, and waits for a leader.
    pub async fn start(n: u64) -> TestCluster {
        Self::start_with(n, test_raft(10_000, 1_000), Limits::default()).await
    }

    pub async fn start_with(n: u64, raft: RaftConfig, limits: Limits) -> TestCluster {
        Self::start_with_locks(n, raft, limits, LocksConfig::default()).await
    }

    pub async fn start_with_locks(
        n: u64,
        raft: RaftConfig,
        limits: Limits,
        locks: LocksConfig,
    ) -> TestCluster {
        Self::start_with_all(n, raft, limits, locks, OperationsConfig::default()).await
    }

    pub async fn start_with_operations(
        n: u64,
        raft: RaftConfig,
        operations: OperationsConfig,
    ) -> TestCluster {
        let locks = LocksConfig::default();
        Self::start_with_all(n, raft, Limits::default(), locks, operations).await
    }

    async fn start_with_all(
        n: u64,
        raft: RaftConfig,
        limits: Limits,
        locks: LocksConfig,
        operations: OperationsConfig,
    ) -> TestCluster {
        Self::start_fresh(|| {
            Self::prepare_with(
                n,
                raft.clone(),
                limits.clone(),
                locks.clone(),
                operations.clone(),
            )
        })
        .await
    }

    /// Starts every node of a cluster `prepare` makes, and waits for a leader. `free_port`
    /// hands a port out once per test process and only if nothing listens on it, but another
    /// process (a second test run, any service) can still bind it before the node does; the
    /// node then exits at once, and fresh ports are the remedy, not a longer wait. Any other
    /// exit fails the start at once, with the node's log, instead of a 30 s wait for a leader
    /// that cannot come.
    async fn start_fresh(prepare: impl Fn() -> TestCluster) -> TestCluster {
        Self::try_start_fresh(prepare)
            .await
            .unwrap_or_else(|exited| panic!("{exited}"))
    }

    /// `start_fresh`, but a node that exited (for want of a port `START_TRIES` times, or for
    /// any other reason once) is returned, not a panic.
    async fn try_start_fresh(prepare: impl Fn() -> TestCluster) -> Result<TestCluster, Exited> {
        let mut attempt = 1;
        loop {
            let mut cluster = prepare();
            let ids: Vec<u64> = cluster.nodes.keys().copied().collect();
            for id in &ids {
                cluster.spawn(*id);
            }
            match cluster.try_wait_leader_among(&ids).await {
                Ok(_) => return Ok(cluster),
                Err(exited) if exited.lost_its_port() && attempt < START_TRIES => {
                    eprintln!("start {attempt} of {START_TRIES} failed, new ports: {exited}");
                    attempt += 1;
                }
                Err(exited) => return Err(exited),
            }
        }
    }

    /// Starts `n` nodes whose configs `edit` changed first (the test defaults otherwise), and
    /// waits for a leader.
    pub async fn start_edited(n: u64, edit: impl Fn(&mut Config)) -> TestCluster {
        Self::start_fresh(|| {
            let mut cluster = Self::prepare(n);
            cluster.edit_configs(&edit);
            cluster
        })
        .await
    }

    /// Rewrites every node's config with `edit`. Before the nodes start.
    fn edit_configs(&mut self, edit: &impl Fn(&mut Config)) {
        let configs: Vec<Config> = self.nodes.values().map(|n| n.config.clone()).collect();
        for mut config in configs {
            edit(&mut config);
            self.add_node_config(config);
        }
    }

    /// Writes the configs of `n` nodes that bootstrap together, and starts none of them (a
    /// test may build their data dirs first, as `steward snapshot restore` does).
    pub fn prepare(n: u64) -> TestCluster {
        Self::prepare_with(
            n,
            test_raft(10_000, 1_000),
            Limits::default(),
            LocksConfig::default(),
            OperationsConfig::default(),
        )
    }

    fn prepare_with(
        n: u64,
        raft: RaftConfig,
        limits: Limits,
        locks: LocksConfig,
        operations: OperationsConfig,
    ) -> TestCluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let members: Vec<MemberConfig> = (1..=n)
            .map(|id| MemberConfig {
                id,
                peer_addr: format!("127.0.0.1:{}", free_port()),
                client_addr: format!("127.0.0.1:{}", free_port()),
            })
            .collect();
        let mut cluster = TestCluster {
            dir,
            nodes: BTreeMap::new(),
            raft: raft.clone(),
            pki: None,
        };
        for m in &members {
            let config = Config {
                id: m.id,
                client_addr: m.client_addr.clone(),
                peer_addr: m.peer_addr.clone(),
                data_dir: cluster.dir.path().join(format!("node{}", m.id)),
                initial_members: members.clone(),
                raft: raft.clone(),
                limits: limits.clone(),
                locks: locks.clone(),
                operations: operations.clone(),
                status: Default::default(),
                pools: Default::default(),
                time: Default::default(),
                etcd: Default::default(),
                console: Default::default(),
                tls: steward::config::TlsConfig::plaintext(),
                metrics_addr: Some(format!("127.0.0.1:{}", free_port())),
            };
            cluster.add_node_config(config);
        }
        cluster
    }

    /// Starts `n` nodes serving mutual TLS (client certificates required on both ports), and
    /// waits for a leader.
    pub async fn start_tls(n: u64) -> TestCluster {
        Self::start_tls_with(n, Limits::default()).await
    }

    /// `start_tls` with these limits.
    pub async fn start_tls_with(n: u64, limits: Limits) -> TestCluster {
        Self::start_fresh(|| {
            let mut cluster = Self::prepare_with(
                n,
                test_raft(10_000, 1_000),
                limits.clone(),
                LocksConfig::default(),
                OperationsConfig::default(),
            );
            cluster.use_tls();
            cluster
        })
        .await
    }

    /// `start_tls`, with every node's config changed by `edit` first.
    pub async fn start_tls_edited(n: u64, edit: impl Fn(&mut Config)) -> TestCluster {
        Self::start_fresh(|| {
            let mut cluster = Self::prepare(n);
            cluster.use_tls();
            cluster.edit_configs(&edit);
            cluster
        })
        .await
    }

    /// The CA's file, and client certificate `name`'s (certificate, key); None without TLS.
    pub fn client_files(&self, name: &str) -> Option<(PathBuf, PathBuf, PathBuf)> {
        let pki = self.pki.as_ref()?;
        let files = &pki.clients.iter().find(|(n, _)| n == name)?.1;
        Some((pki.ca.clone(), files.cert.clone(), files.key.clone()))
    }

    /// Makes a throw-away CA with a certificate per node and `TLS_CLIENTS`, and rewrites every
    /// node's config to serve mutual TLS with them. Before the nodes start.
    pub fn use_tls(&mut self) {
        let mut ids: Vec<u64> = self.nodes.keys().copied().collect();
        ids.push(TLS_OUTSIDER);
        let clients: Vec<String> = TLS_CLIENTS.iter().map(|c| c.to_string()).collect();
        let pki = steward::tls::generate(
            &self.dir.path().join("certs"),
            &ids,
            &["127.0.0.1".to_string(), "localhost".to_string()],
            &clients,
        )
        .expect("certificates");
        let configs: Vec<Config> = self
            .nodes
            .values()
            .map(|n| {
                let files = &pki
                    .nodes
                    .iter()
                    .find(|(id, _)| *id == n.config.id)
                    .expect("cert")
                    .1;
                Config {
                    tls: steward::config::TlsConfig {
                        plaintext: false,
                        ca_file: Some(pki.ca.clone()),
                        cert_file: Some(files.cert.clone()),
                        key_file: Some(files.key.clone()),
                        client_cert_required: true,
                    },
                    ..n.config.clone()
                }
            })
            .collect();
        for config in configs {
            self.add_node_config(config);
        }
        self.pki = Some(pki);
    }

    /// The client TLS of client certificate `name` (one of `TLS_CLIENTS`); None without TLS.
    pub fn client_tls(&self, name: &str) -> Option<steward::tls::ClientTls> {
        let pki = self.pki.as_ref()?;
        let files = &pki
            .clients
            .iter()
            .find(|(n, _)| n == name)
            .expect("client cert")
            .1;
        Some(
            steward::tls::ClientTls::from_files(&pki.ca, Some(&files.cert), Some(&files.key))
                .expect("client tls"),
        )
    }

    /// Node `id`'s config file.
    pub fn config_path(&self, id: u64) -> PathBuf {
        self.nodes[&id].config_path.clone()
    }

    fn add_node_config(&mut self, config: Config) {
        let config_path = self.dir.path().join(format!("node{}.toml", config.id));
        std::fs::write(&config_path, toml::to_string(&config).expect("config toml"))
            .expect("write config");
        self.nodes.insert(
            config.id,
            TestNode {
                config,
                config_path,
                child: None,
                env: Vec::new(),
            },
        );
    }

    /// Writes the config of a fresh node that joins later (no initial members).
    pub fn prepare_joiner(&mut self, id: u64) -> (String, String) {
        let first = self.nodes.values().next().map(|n| n.config.clone());
        let limits = first.as_ref().map(|c| c.limits.clone()).unwrap_or_default();
        let locks = first.as_ref().map(|c| c.locks.clone()).unwrap_or_default();
        let operations = first.map(|c| c.operations).unwrap_or_default();
        let config = Config {
            id,
            client_addr: format!("127.0.0.1:{}", free_port()),
            peer_addr: format!("127.0.0.1:{}", free_port()),
            data_dir: self.dir.path().join(format!("node{id}")),
            initial_members: vec![],
            raft: self.raft.clone(),
            limits,
            locks,
            operations,
            status: Default::default(),
            pools: Default::default(),
            time: Default::default(),
            etcd: Default::default(),
            console: Default::default(),
            tls: steward::config::TlsConfig::plaintext(),
            metrics_addr: None,
        };
        let addrs = (config.peer_addr.clone(), config.client_addr.clone());
        self.add_node_config(config);
        addrs
    }

    /// Starts (or restarts) node `id` as a child process.
    pub fn spawn(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).expect("known node");
        assert!(node.child.is_none(), "node {id} is already running");
        let log =
            std::fs::File::create(self.dir.path().join(format!("node{id}.log"))).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_steward"))
            .args(["serve", "--config"])
            .arg(&node.config_path)
            .env(
                "RUST_LOG",
                std::env::var("STEWARD_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(node.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn steward");
        node.child = Some(Mutex::new(child));
    }

    /// kill -9.
    pub fn kill(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).expect("known node");
        if let Some(child) = node.child.take() {
            let mut child = child.into_inner().unwrap_or_else(|p| p.into_inner());
            child.kill().expect("SIGKILL");
            let _ = child.wait();
        }
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, ...) to node `id`'s process.
    pub fn signal(&self, id: u64, signal: libc::c_int) {
        let node = &self.nodes[&id];
        let child = node.child.as_ref().expect("node is running");
        let pid = child.lock().unwrap_or_else(|p| p.into_inner()).id();
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        assert_eq!(unsafe { libc::kill(pid as libc::pid_t, signal) }, 0, "kill");
    }

    pub fn client_addr(&self, id: u64) -> String {
        self.nodes[&id].config.client_addr.clone()
    }

    /// Where node `id` serves `GET /metrics`.
    pub fn metrics_addr(&self, id: u64) -> String {
        self.nodes[&id]
            .config
            .metrics_addr
            .clone()
            .expect("metrics_addr")
    }

    /// Where node `id` serves the web console (`console.addr`).
    pub fn console_addr(&self, id: u64) -> String {
        self.nodes[&id]
            .config
            .console
            .addr
            .clone()
            .expect("console.addr")
    }

    pub fn endpoint(&self, id: u64) -> String {
        match self.pki {
            Some(_) => format!("https://{}", self.client_addr(id)),
            None => format!("http://{}", self.client_addr(id)),
        }
    }

    pub fn running(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.child.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    pub async fn channel(&self, id: u64) -> Channel {
        let mut endpoint =
            tonic::transport::Endpoint::from_shared(self.endpoint(id)).expect("endpoint");
        if let Some(tls) = self.client_tls(TLS_CLIENTS[0]) {
            endpoint = endpoint.tls_config(tls.config()).expect("tls config");
        }
        endpoint
            .connect_timeout(Duration::from_secs(1))
            .timeout(Duration::from_secs(10))
            .connect_lazy()
    }

    pub async fn res(&self, id: u64) -> Res {
        ResourcesClient::new(self.channel(id).await)
    }

    pub async fn locks(&self, id: u64) -> steward::proto::v1::locks_client::LocksClient<Channel> {
        steward::proto::v1::locks_client::LocksClient::new(self.channel(id).await)
    }

    pub async fn cluster(&self, id: u64) -> ClusterClient<Channel> {
        ClusterClient::new(self.channel(id).await)
    }

    /// Waits until every running node reports the same leader, and returns it.
    pub async fn wait_leader(&self) -> u64 {
        self.wait_leader_among(&self.running()).await
    }

    /// Waits until nodes `ids` report the same running leader, and returns it; panics, with
    /// its log, as soon as one of them has exited.
    pub async fn wait_leader_among(&self, ids: &[u64]) -> u64 {
        self.try_wait_leader_among(ids)
            .await
            .unwrap_or_else(|exited| panic!("{exited}"))
    }

    /// `wait_leader_among`, but a node that exited is returned, not a panic.
    async fn try_wait_leader_among(&self, ids: &[u64]) -> Result<u64, Exited> {
        let ids = ids.to_vec();
        wait_for(
            "a leader all nodes agree on",
            Duration::from_secs(30),
            || {
                let ids = ids.clone();
                async move {
                    if let Some(exited) = self.exited(&ids) {
                        return Some(Err(exited));
                    }
                    let mut leader = None;
                    for id in ids {
                        let mut c = self.cluster(id).await;
                        // A short cap, not the channel's 10 s: the port may be held by a
                        // process that accepts and never answers (a node lost it to one), and
                        // the next round must come soon to see that the node exited.
                        let status = tokio::time::timeout(
                            STATUS_POLL_TIMEOUT,
                            c.status(ClusterStatusRequest {}),
                        )
                        .await
                        .ok()?
                        .ok()?
                        .into_inner();
                        let me = status.nodes.iter().find(|n| n.id == id)?;
                        if me.leader_id == 0 || leader.is_some_and(|l| l != me.leader_id) {
                            return None;
                        }
                        leader = Some(me.leader_id);
                    }
                    leader.filter(|l| self.running().contains(l)).map(Ok)
                }
            },
        )
        .await
    }

    /// The first of nodes `ids` whose process has exited, with its exit status and log tail.
    pub fn exited(&self, ids: &[u64]) -> Option<Exited> {
        ids.iter().find_map(|&id| {
            let child = self.nodes.get(&id)?.child.as_ref()?;
            let status = child
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .try_wait()
                .ok()??;
            let log = std::fs::read_to_string(self.dir.path().join(format!("node{id}.log")))
                .unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let log_tail = lines[lines.len().saturating_sub(20)..].join("\n");
            Some(Exited {
                id,
                status,
                log_tail,
            })
        })
    }

    /// A node's own applied index (from its status).
    pub async fn applied(&self, id: u64) -> Option<u64> {
        let mut c = self.cluster(id).await;
        let status = c.status(ClusterStatusRequest {}).await.ok()?.into_inner();
        status
            .nodes
            .iter()
            .find(|n| n.id == id)
            .map(|n| n.applied_index)
    }

    pub async fn followers(&self) -> Vec<u64> {
        let leader = self.wait_leader().await;
        self.running()
            .into_iter()
            .filter(|id| *id != leader)
            .collect()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            if let Some(c) = node.child.take() {
                let mut c = c.into_inner().unwrap_or_else(|p| p.into_inner());
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if std::thread::panicking() {
            // Keep the logs of a failed test for reading.
            let path = self.dir.path().to_path_buf();
            eprintln!("test cluster logs kept in {}", path.display());
            let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir"));
            let _ = dir.keep();
        }
    }
}

/// A Director object with a 256-byte-ish spec and the given labels.
pub fn director(name: &str, labels: &[(&str, &str)]) -> String {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    serde_json::json!({
        "kind": "Director",
        "apiVersion": "deployment.servicefabrik.io/v1alpha1",
        "metadata": {"name": name, "labels": labels},
        "spec": {"options": "x".repeat(200)},
    })
    .to_string()
}

pub fn parse(json: &str) -> serde_json::Value {
    serde_json::from_str(json).expect("server returned JSON")
}

pub fn rv(obj: &serde_json::Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion is a string")
        .parse()
        .expect("numeric resourceVersion")
}

pub async fn create(c: &mut Res, json: String) -> Result<serde_json::Value, tonic::Status> {
    c.create(CreateRequest {
        object_json: json,
        ..Default::default()
    })
    .await
    .map(|r| parse(&r.into_inner().object_json))
}

pub async fn get(
    c: &mut Res,
    name: &str,
    consistency: Consistency,
) -> Result<serde_json::Value, tonic::Status> {
    c.get(GetRequest {
        kind: "Director".into(),
        namespace: "default".into(),
        name: name.into(),
        consistency: consistency as i32,
    })
    .await
    .map(|r| parse(&r.into_inner().object_json))
}

/// Lists every Director (all pages), linearizably, from node `c`.
pub async fn list_all(c: &mut Res, selector: &str, page: u32) -> (Vec<serde_json::Value>, u64) {
    list_all_with(c, selector, page, Consistency::Linearizable).await
}

/// Lists every Director (all pages) from node `c` with `consistency`: `Serializable` reads what
/// that node itself has applied.
pub async fn list_all_with(
    c: &mut Res,
    selector: &str,
    page: u32,
    consistency: Consistency,
) -> (Vec<serde_json::Value>, u64) {
    let mut items = vec![];
    let mut token = String::new();
    loop {
        let reply = c
            .list(ListRequest {
                kind: "Director".into(),
                namespace: String::new(),
                label_selector: selector.into(),
                limit: page,
                continue_token: token,
                consistency: consistency as i32,
            })
            .await
            .expect("list")
            .into_inner();
        items.extend(reply.objects_json.iter().map(|j| parse(j)));
        if reply.continue_token.is_empty() {
            return (items, reply.revision);
        }
        token = reply.continue_token;
    }
}

/// Acknowledged writes of a background load, with the time each was acknowledged.
#[derive(Default)]
pub struct Acks {
    /// (when the request was sent, when it was acknowledged, name)
    pub names: Vec<(Instant, Instant, String)>,
    pub errors: usize,
}

/// Writers creating distinct Directors through the given endpoints (rotating on error) until
/// `stop` is set. Only acknowledged creates are recorded.
pub struct Load {
    pub acks: std::sync::Arc<std::sync::Mutex<Acks>>,
    pub endpoints: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    pub fn start(endpoints: Vec<String>, writers: usize, prefix: &str) -> Load {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let acks = Arc::new(Mutex::new(Acks::default()));
        let endpoints = Arc::new(Mutex::new(endpoints));
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..writers)
            .map(|w| {
                let (acks, endpoints, stop) = (acks.clone(), endpoints.clone(), stop.clone());
                let prefix = prefix.to_string();
                tokio::spawn(async move {
                    let mut seq = 0u64;
                    let mut pick = w;
                    while !stop.load(Ordering::Relaxed) {
                        let ep = {
                            let eps = endpoints.lock().expect("endpoints");
                            eps[pick % eps.len()].clone()
                        };
                        let channel = tonic::transport::Endpoint::from_shared(ep)
                            .expect("endpoint")
                            .connect_timeout(Duration::from_millis(500))
                            .timeout(Duration::from_secs(3))
                            .connect_lazy();
                        let mut c = ResourcesClient::new(channel);
                        loop {
                            if stop.load(Ordering::Relaxed) {
                                return;
                            }
                            let name = format!("{prefix}-{w}-{seq}");
                            seq += 1;
                            let sent = Instant::now();
                            match create(&mut c, director(&name, &[("load", "yes")])).await {
                                Ok(_) => acks.lock().expect("acks").names.push((
                                    sent,
                                    Instant::now(),
                                    name,
                                )),
                                Err(_) => {
                                    acks.lock().expect("acks").errors += 1;
                                    pick += 1;
                                    tokio::time::sleep(Duration::from_millis(20)).await;
                                    break;
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            acks,
            endpoints,
            stop,
            tasks,
        }
    }

    pub fn acked(&self) -> usize {
        self.acks.lock().expect("acks").names.len()
    }

    pub async fn wait_acked(&self, n: usize) {
        wait_for(
            &format!("{n} acknowledged writes"),
            Duration::from_secs(60),
            || async { (self.acked() >= n).then_some(()) },
        )
        .await
    }

    pub async fn stop(self) -> Acks {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.tasks {
            let _ = t.await;
        }
        std::sync::Arc::try_unwrap(self.acks)
            .map(|m| m.into_inner().expect("acks"))
            .unwrap_or_default()
    }
}

/// Every acknowledged name is present in `items`.
pub fn assert_all_present(acks: &Acks, items: &[serde_json::Value]) {
    let present: std::collections::BTreeSet<&str> = items
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    let missing: Vec<&str> = acks
        .names
        .iter()
        .map(|(_, _, n)| n.as_str())
        .filter(|n| !present.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged writes lost: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
}

/// Another process binds node 2's client port between `free_port` and the node's own bind: the
/// node exits, and the start is tried again on fresh ports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_whose_node_lost_its_port_is_tried_again_on_fresh_ports() {
    let taken: Mutex<Vec<TcpListener>> = Mutex::default();
    let cluster = TestCluster::start_fresh(|| {
        let cluster = TestCluster::prepare(3);
        let mut taken = taken.lock().expect("taken");
        if taken.is_empty() {
            taken.push(TcpListener::bind(cluster.client_addr(2)).expect("bind"));
        }
        cluster
    })
    .await;
    let taken = taken.into_inner().expect("taken");
    let lost = taken[0].local_addr().expect("addr").to_string();
    assert_ne!(
        cluster.client_addr(2),
        lost,
        "the second start has new ports"
    );
    assert!(cluster.exited(&[1, 2, 3]).is_none());
}

/// A node that exits at start for any other reason ends the start at once, named, with its log
/// (it had been a 30 s wait "for a leader all nodes agree on").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_exits_at_start_fails_the_start_with_its_log() {
    let started = TestCluster::try_start_fresh(|| {
        let cluster = TestCluster::prepare(3);
        // A file where node 3's data dir should be: it cannot create it, and exits.
        std::fs::write(cluster.dir.path().join("node3"), "not a directory").expect("write");
        cluster
    })
    .await;
    let exited = started.err().expect("node 3 cannot start");
    assert_eq!(exited.id, 3);
    assert!(!exited.status.success());
    assert!(
        exited.log_tail.contains("cannot create data_dir"),
        "{}",
        exited.log_tail
    );
}

#[test]
fn assert_all_present_passes_on_every_ack_and_names_a_lost_one() {
    let at = Instant::now();
    let acks = Acks {
        names: ["k-0-0", "k-0-1", "k-1-0"]
            .iter()
            .map(|n| (at, at, n.to_string()))
            .collect(),
        errors: 0,
    };
    let object = |name: &str| serde_json::json!({"metadata": {"name": name}});
    // Every ack present, beside a write that was never acknowledged (an unknown outcome).
    let all: Vec<_> = ["k-1-0", "k-0-0", "k-0-1", "k-1-1"]
        .into_iter()
        .map(object)
        .collect();
    assert_all_present(&acks, &all);
    let lost: Vec<_> = ["k-0-0", "k-1-0", "k-1-1"]
        .into_iter()
        .map(object)
        .collect();
    let failed = std::panic::catch_unwind(|| assert_all_present(&acks, &lost))
        .expect_err("an acknowledged write is missing");
    let message = failed
        .downcast_ref::<String>()
        .expect("a formatted message");
    assert!(
        message.contains("1 acknowledged writes lost") && message.contains("k-0-1"),
        "{message}"
    );
}

/// Runs the `steward` binary against `endpoint` with `args` (in `dir` when given, off the async
/// runtime); asserts it succeeded and returns its standard output.
pub async fn steward_cli(endpoint: &str, dir: Option<&str>, args: &[&str]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_steward"));
    cmd.arg("--endpoints").arg(endpoint).args(args);
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let what = format!("steward {}", args.join(" "));
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run steward"))
        .await
        .expect("join");
    assert!(out.status.success(), "{what}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8 output")
}
