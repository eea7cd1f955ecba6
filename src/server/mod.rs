//! A steward node: start-up, shutdown, and the `Node` context every gRPC handler shares.
//!
//! `serve` opens storage, starts Raft, bootstraps a fresh cluster once, and runs the client API
//! and the peer service on their own listeners until SIGTERM / Ctrl-C, beside the tasks that run
//! on every node:
//! - leader-only tasks, which act only while this node leads and only *propose* (apply decides),
//!   each beside the service of its capability: the lock sweeper (`locks/sweeper.rs`), the
//!   operation scheduler (`operations/scheduler.rs`), the operation sweeper with the reservation
//!   decommissions (`operations/sweeper.rs`), the pool reaper and Mason's fulfil/recycle loop
//!   (`pools/reaper.rs`, `pools/mason.rs`);
//! - per-node tasks: the space monitor (`space::run_monitor`: measures the data dir and disk and
//!   proposes the NOSPACE alarm), the health reporter (`metrics::run_health`), the client-limit
//!   forgetter (`client_limits`), `/metrics` when `metrics_addr` is set, and the web console
//!   (`console`) when `console.addr` is.
//!
//! The client API, one place per capability and thin (validate, then `Node::propose` with the
//! family's command, which returns the family's reply, or `Node::read_barrier` + read; answer
//! through the one error table in `errors`): `resources`, `locks`, `operations` +
//! `operations/workers.rs` (lifecycle operations and the workers that run them),
//! `reservations`, `pools` (`LeaseService`, Boskos' API, and Mason), `deployments`
//! (`StatusService`, EMCO's deployment status), `cluster` (status, membership), with `deadline` (the caller's
//! `grpc-timeout`, for code that waits on its behalf), `auth` and `client_limits` as tower layers
//! in front of all of them. Behind them: `node` (propose, read
//! barrier, waits), `route` (a write's way to the leader: held across elections, never sent twice),
//! `forward` (followers' writes batched to the leader), `watch` (the watch hub),
//! `peer` (the peer service: Raft RPCs, forwarded batches, read indexes, status), `space`,
//! `metrics`. `etcd` serves etcd's v3 API (etcdserverpb) on the same port and state.

pub mod auth;
pub mod client_limits;
pub mod cluster;
pub mod coalesce;
pub mod console;
pub mod deadline;
pub mod deployments;
pub mod errors;
pub mod etcd;
pub mod forward;
pub mod locks;
pub mod metrics;
pub mod node;
pub mod operations;
pub mod peer;
pub mod pools;
pub mod read_index;
pub mod reservations;
pub mod resources;
pub mod route;
pub mod space;
pub mod time;
pub mod wait;
pub mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::ServerTlsConfig;
use tonic_health::pb::health_server::{Health, HealthServer};

use crate::config::Config;
use crate::proto::raft_v1::raft_peer_server::RaftPeerServer;
use crate::proto::v1::auth_server::AuthServer;
use crate::proto::v1::cluster_server::ClusterServer;
use crate::proto::v1::lease_service_server::LeaseServiceServer;
use crate::proto::v1::locks_server::LocksServer;
use crate::proto::v1::operations_server::OperationsServer;
use crate::proto::v1::reservations_server::ReservationsServer;
use crate::proto::v1::resources_server::ResourcesServer;
use crate::proto::v1::status_service_server::StatusServiceServer;
use crate::proto::v1::workers_server::WorkersServer;
use crate::raft::log_store::{LogStore, RaftDb};
use crate::raft::network::{PeerChannels, PeerNetworkFactory};
use crate::raft::state_machine::StateMachine;
use crate::raft::types::{NodeAddr, Raft};
use crate::server::watch::WatchHub;
use crate::state::State;

pub use node::Node;
pub use time::{Clock, ClusterClock, SystemClock};

/// Runs one node until SIGTERM / Ctrl-C, then shuts down gracefully. Config already validated.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let running = start(config).await?;
    shutdown_signal().await;
    tracing::info!("shutdown signal received");
    running.shutdown().await;
    Ok(())
}

/// A started node: its context and the tasks serving it.
pub struct RunningNode {
    pub node: Arc<Node>,
    pub client_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    /// Where `/metrics` is served, when `metrics_addr` is set.
    pub metrics_addr: Option<SocketAddr>,
    /// Where the web console is served, when `console.addr` is set.
    pub console_addr: Option<SocketAddr>,
    stop: tokio::sync::watch::Sender<bool>,
    servers: Vec<tokio::task::JoinHandle<()>>,
}

impl RunningNode {
    /// Stops accepting requests, stops Raft, and waits for the servers to finish.
    pub async fn shutdown(self) {
        self.node.hub.close_all();
        let _ = self.stop.send(true);
        if let Err(e) = self.node.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        for s in self.servers {
            let _ = tokio::time::timeout(Duration::from_secs(5), s).await;
        }
        tracing::info!("node stopped");
    }
}

/// Opens storage, starts Raft and the gRPC servers, and bootstraps a fresh cluster.
pub async fn start(config: Config) -> anyhow::Result<RunningNode> {
    crate::bugs::check_env()?;
    // NOT_APPLIED's RetryInfo: about the time a new leader takes to appear.
    errors::set_election_timeout(Duration::from_millis(config.raft.election_timeout_ms_min));
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create data_dir {}", config.data_dir.display()))?;
    let client_listener = TcpListener::bind(&config.client_addr)
        .await
        .with_context(|| format!("cannot listen on client_addr {}", config.client_addr))?;
    let peer_listener = TcpListener::bind(&config.peer_addr)
        .await
        .with_context(|| format!("cannot listen on peer_addr {}", config.peer_addr))?;
    let metrics_listener = match &config.metrics_addr {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on metrics_addr {addr}"))?,
        ),
        None => None,
    };
    let console_tcp = match &config.console.addr {
        Some(addr) => Some((
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on console.addr {addr}"))?,
            console::server_config(&config.tls)?,
        )),
        None => None,
    };
    let console_addr = match &console_tcp {
        Some((l, _)) => Some(l.local_addr()?),
        None => None,
    };
    let client_addr = client_listener.local_addr()?;
    let peer_addr = peer_listener.local_addr()?;
    let metrics_addr = match &metrics_listener {
        Some(l) => Some(l.local_addr()?),
        None => None,
    };

    let node_metrics = Arc::new(crate::metrics::Metrics::new());
    let db = RaftDb::open_observed(&config.data_dir, node_metrics)
        .context("cannot open the raft database")?;
    let hub = Arc::new(watch::WatchHub::new(&config.limits));
    let time = Arc::new(ClusterClock::new(Arc::new(SystemClock::new())));
    let observer = Arc::new(time::Observers {
        hub: hub.clone(),
        time: time.clone(),
    });
    let sm = StateMachine::open(db.clone(), observer.clone())
        .context("cannot open the state machine")?;
    let state = sm.state();
    starts_from(
        &state.read().unwrap_or_else(|p| p.into_inner()),
        &hub,
        &time,
    );
    let log_store = LogStore::open(db.clone())
        .context("cannot open the raft log")?
        .observed_by(observer.clone());

    let tls = crate::tls::NodeTls::load(&config.tls)?;
    if tls.is_none() {
        tracing::warn!("serving without TLS (tls.plaintext = true): anyone who reaches the ports can read and write");
    }
    let rpc_timeout = Duration::from_millis(config.raft.rpc_timeout_ms);
    let channels = PeerChannels::new(
        rpc_timeout,
        tls.as_ref().map(|t| t.peer_client.clone()),
        config.limits.peer_message_bytes_max,
    );
    let network = PeerNetworkFactory {
        channels: channels.clone(),
        rpc_timeout,
    };
    let raft_config =
        Arc::new(crate::raft::types::raft_settings(&config.raft).context("invalid raft settings")?);
    let raft = Raft::new(config.id, raft_config, network, log_store, sm)
        .await
        .context("cannot start raft")?;

    let node = Arc::new(Node::new(
        config.clone(),
        raft,
        state,
        hub,
        channels,
        time,
        db,
    ));
    let client_server = server_builder(tls.as_ref().map(|t| t.client_api.clone()), "client API")?;
    let peer_server = server_builder(tls.map(|t| t.peer_server), "peer")?;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let console_listener = match console_tcp {
        Some((listener, tls)) => Some(console::ConsoleListener::start(
            listener,
            tls,
            stop_rx.clone(),
        )?),
        None => None,
    };
    let max_msg = config.limits.request_bytes_max;
    let max_answer = config.limits.peer_message_bytes_max;
    let (health, health_service) = tonic_health::server::health_reporter();
    let mut servers = vec![
        tokio::spawn(serve_client_api(
            node.clone(),
            client_listener,
            stop_rx.clone(),
            (max_msg, max_answer),
            health_service,
            client_server,
        )),
        tokio::spawn(metrics::run_health(node.clone(), health, stop_rx.clone())),
        tokio::spawn(serve_peer(
            node.clone(),
            peer_listener,
            stop_rx.clone(),
            peer_server,
        )),
        tokio::spawn(locks::run_sweeper(node.clone(), stop_rx.clone())),
        tokio::spawn(etcd::lease::run_sweeper(node.clone(), stop_rx.clone())),
        tokio::spawn(etcd::compactor::run_compactor(
            node.clone(),
            stop_rx.clone(),
        )),
        tokio::spawn(operations::run_scheduler(node.clone(), stop_rx.clone())),
        tokio::spawn(operations::run_op_sweeper(node.clone(), stop_rx.clone())),
        tokio::spawn(pools::run_reaper(node.clone(), stop_rx.clone())),
        tokio::spawn(pools::run_mason(node.clone(), stop_rx.clone())),
        tokio::spawn(space::run_monitor(node.clone(), stop_rx.clone())),
        tokio::spawn(time::probe::run_probe(node.clone(), stop_rx.clone())),
    ];
    if let Some(listener) = console_listener {
        servers.push(tokio::spawn(console::serve(
            node.clone(),
            listener,
            stop_rx.clone(),
        )));
    }
    if let Some(listener) = metrics_listener {
        servers.push(tokio::spawn(metrics::serve_metrics(
            node.clone(),
            listener,
            stop_rx,
        )));
    }
    bootstrap(&node, &config).await?;
    tracing::info!(id = config.id, %client_addr, %peer_addr, ?metrics_addr, ?console_addr, "node started");
    Ok(RunningNode {
        node,
        client_addr,
        peer_addr,
        metrics_addr,
        console_addr,
        stop,
        servers,
    })
}

/// A fresh cluster bootstraps exactly once: the smallest-id initial member, with an empty log.
async fn bootstrap(node: &Node, config: &Config) -> anyhow::Result<()> {
    let Some(first) = config.initial_members.iter().map(|m| m.id).min() else {
        return Ok(());
    };
    if first != config.id || node.raft.is_initialized().await? {
        return Ok(());
    }
    let members: BTreeMap<u64, NodeAddr> = config
        .initial_members
        .iter()
        .map(|m| {
            (
                m.id,
                NodeAddr {
                    peer_addr: m.peer_addr.clone(),
                    client_addr: m.client_addr.clone(),
                },
            )
        })
        .collect();
    tracing::info!(members = ?members.keys().collect::<Vec<_>>(), "bootstrapping a new cluster");
    node.raft
        .initialize(members)
        .await
        .context("cannot initialize the cluster")?;
    Ok(())
}

async fn serve_client_api(
    node: Arc<Node>,
    listener: TcpListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
    (max_msg, max_answer): (usize, usize),
    health: HealthServer<impl Health>,
    builder: tonic::transport::Server,
) {
    let resources = ResourcesServer::new(resources::ResourcesService::new(node.clone()))
        .max_decoding_message_size(max_msg)
        .max_encoding_message_size(max_answer);
    let locks = LocksServer::new(locks::LocksService::new(node.clone()));
    let operations = OperationsServer::new(operations::OperationsService::new(node.clone()))
        .max_decoding_message_size(max_msg);
    let workers = WorkersServer::new(operations::workers::WorkersService::new(node.clone()))
        .max_decoding_message_size(max_msg);
    let reservations =
        ReservationsServer::new(reservations::ReservationsService::new(node.clone()));
    let deployments = StatusServiceServer::new(deployments::DeploymentsService::new(node.clone()))
        .max_decoding_message_size(max_msg)
        .max_encoding_message_size(max_answer);
    let pools = LeaseServiceServer::new(pools::PoolsService::new(node.clone()))
        .max_decoding_message_size(max_msg)
        .max_encoding_message_size(max_answer);
    let etcd_kv =
        crate::proto::etcd::kv_server::KvServer::new(etcd::kv::KvService::new(node.clone()))
            .max_decoding_message_size(etcd::decoding_limit(&node))
            .max_encoding_message_size(max_answer);
    let etcd_watch = crate::proto::etcd::watch_server::WatchServer::new(
        etcd::watch::WatchService::new(node.clone()),
    )
    .max_decoding_message_size(etcd::decoding_limit(&node))
    .max_encoding_message_size(max_answer);
    let etcd_lease = crate::proto::etcd::lease_server::LeaseServer::new(
        etcd::lease::LeaseService::new(node.clone()),
    )
    .max_decoding_message_size(etcd::decoding_limit(&node))
    .max_encoding_message_size(max_answer);
    let etcd_cluster = crate::proto::etcd::cluster_server::ClusterServer::new(
        etcd::maintenance::MaintenanceService::new(node.clone()),
    );
    let etcd_maintenance = crate::proto::etcd::maintenance_server::MaintenanceServer::new(
        etcd::maintenance::MaintenanceService::new(node.clone()),
    )
    .max_encoding_message_size(max_answer);
    let etcd_lock = crate::proto::v3lockpb::lock_server::LockServer::new(
        etcd::lock::LockService::new(node.clone()),
    );
    let etcd_election = crate::proto::v3electionpb::election_server::ElectionServer::new(
        etcd::lock::ElectionService::new(node.clone()),
    )
    .max_decoding_message_size(etcd::decoding_limit(&node));
    let etcd_auth = crate::proto::etcd::auth_server::AuthServer::new(etcd::auth::AuthService::new(
        node.clone(),
    ));
    let layer = metrics::GrpcMetricsLayer::new(node.metrics.clone());
    let limits = client_limits::ClientLimitsLayer::new(&node.config.limits, node.metrics.clone());
    tokio::spawn(client_limits::run_forgetter(limits.clone(), stop.clone()));
    let auth_layer = auth::AuthLayer::new(node.clone());
    let auth_api = AuthServer::new(auth::AuthApi::new(node.clone()));
    let cluster = ClusterServer::new(cluster::ClusterService::new(node));
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::proto::CLIENT_API_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let (reflection_v1, reflection_v1alpha) =
        match (reflection().build_v1(), reflection().build_v1alpha()) {
            (Ok(v1), Ok(v1alpha)) => (v1, v1alpha),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "cannot build the reflection service");
                return;
            }
        };
    let incoming = coalesce::incoming(TcpIncoming::from(listener).with_nodelay(Some(true)));
    let result = builder
        // Outermost: even a refusal of the layers below, or of tonic itself, carries ErrorInfo.
        .layer(errors::DetailsLayer)
        .layer(deadline::DeadlineLayer)
        .layer(layer)
        .layer(limits)
        .layer(auth_layer)
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(resources)
        .add_service(locks)
        .add_service(operations)
        .add_service(workers)
        .add_service(reservations)
        .add_service(deployments)
        .add_service(pools)
        .add_service(cluster)
        .add_service(auth_api)
        .add_service(etcd_kv)
        .add_service(etcd_watch)
        .add_service(etcd_lease)
        .add_service(etcd_cluster)
        .add_service(etcd_maintenance)
        .add_service(etcd_lock)
        .add_service(etcd_election)
        .add_service(etcd_auth)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "client API server failed");
    }
}

async fn serve_peer(
    node: Arc<Node>,
    listener: TcpListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
    builder: tonic::transport::Server,
) {
    let gate = node.clone();
    let max_bytes = node.config.limits.peer_message_bytes_max;
    let peer = RaftPeerServer::new(peer::PeerService::new(node))
        .max_decoding_message_size(max_bytes)
        .max_encoding_message_size(max_bytes);
    let peer = tonic::service::interceptor::InterceptedService::new(peer, move |req| {
        peer::admit(&gate, req)
    });
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    // A leader's append stream waits on its follower for as long as the leader lives; pings
    // close a connection whose other end is gone (a node killed or cut off), with its streams,
    // instead of keeping it until this node stops.
    let result = builder
        .http2_keepalive_interval(Some(crate::raft::network::KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(crate::raft::network::KEEPALIVE_TIMEOUT))
        .add_service(peer)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "peer server failed");
    }
}

/// A server builder, with TLS when given; fails when the certificates cannot be used.
fn server_builder(
    tls: Option<ServerTlsConfig>,
    what: &str,
) -> anyhow::Result<tonic::transport::Server> {
    let builder = tonic::transport::Server::builder();
    match tls {
        None => Ok(builder),
        Some(tls) => builder
            .tls_config(tls)
            .with_context(|| format!("{what}: cannot use the TLS certificate and key")),
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = ctrl_c => {},
                        _ = term.recv() => {},
                    }
                }
                Err(_) => {
                    let _ = ctrl_c.await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = ctrl_c.await;
        }
    }
}

/// What a node's watch hub and cluster clock start from: the state it opened with (its
/// snapshot and the log applied after it). A watch from "now" starts after that revision, and
/// the count of cluster time goes on from the last applied stamp.
pub fn starts_from(state: &State, hub: &WatchHub, time: &ClusterClock) {
    hub.reset_to(state.revision());
    hub.set_auth_revision(state.auth().revision);
    time.applied(state.time_ms(), None);
}
