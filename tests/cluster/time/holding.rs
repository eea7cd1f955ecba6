//! What the time tests hold (a lock, a pool lease, a worker) and the two things they do with
//! it, the same for every kind: keep it refreshed on time (`keep_all`), and, once refreshes stop,
//! watch it end (`watch_ends`) and check the end against the two promises of README "Time":
//! never before (send of the last acknowledged refresh) + TTL, and no later than that + TTL +
//! one election timeout max + one sweep interval of the loop that ends it (two after a change
//! of leader in the quiet time: time.rs says why).
//!
//! Every refresh and every probe goes through a `Client` of all the nodes, so a killed leader
//! or an election only delays them. A refresh whose outcome is unknown (no answer, no leader)
//! is sent again until one is acknowledged: only a refusal (FailedPrecondition, NotFound) means
//! the holder lost what it held. The last refresh sent is thus always the last acknowledged one,
//! and the end is measured from its send.

use std::future::Future;
use std::time::{Duration, Instant};

use steward::client::{Client, Consistency, LockMode};
use steward::config::Config;
use steward::proto::v1 as pb;
use tokio::sync::watch;
use tonic::{Code, Status};

/// How long after an unanswered refresh it is sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How often the end is polled.
const POLL_EVERY: Duration = Duration::from_millis(20);
/// What the end may take beyond the bound: a sweep's own proposal and apply on two busy cores
/// running a debug build, and a new leader's lag behind its predecessor's count (it counts
/// from when it applied the last entry, which is after that entry was stamped). After a quiet
/// leader change both come twice (the sweep that starts the grace, the one that ends it); with
/// other builds beside it (load 8 on 2 cores) a lock ended up to 1.6 s past its deadline there,
/// 0.8 s over the bound without slack.
pub const SLACK: Duration = Duration::from_millis(1_500);

/// The pool type of the test lease; its `busy` state expires after the lease's TTL.
const LEASE_TYPE: &str = "time-vm";
/// The holder of the lock, the owner of the lease.
const HOLDER: &str = "h1";

/// One thing held, by kind, with what its refreshes and probes name.
#[derive(Debug)]
pub enum Held {
    /// A WRITE grant of lock `name`.
    Lock { name: String, token: u64 },
    /// Pool resource `name` of type `rtype`, leased `busy` to `owner` (Boskos' heartbeat is an
    /// update naming that state).
    Lease {
        rtype: String,
        name: String,
        owner: String,
    },
    /// A registered worker: it heartbeats; once expired, the sweep removes it.
    Worker { id: String },
}

impl Held {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Held::Lock { .. } => "lock",
            Held::Lease { .. } => "pool lease",
            Held::Worker { .. } => "worker",
        }
    }

    /// The kind and its name: `lock t`, `pool lease vm-1`, `worker w-1`.
    pub(crate) fn what(&self) -> String {
        match self {
            Held::Lock { name, .. } | Held::Lease { name, .. } => {
                format!("{} {name}", self.kind())
            }
            Held::Worker { id } => format!("worker {id}"),
        }
    }

    /// One refresh: the lock's refresh, the lease's update, the worker's heartbeat.
    async fn refresh(&self, client: &Client, ttl: Duration) -> Result<(), Status> {
        match self {
            Held::Lock { name, token } => client
                .lock_refresh(name, HOLDER, *token, Some(ttl))
                .await
                .map(drop),
            Held::Lease { name, owner, .. } => {
                let update = pb::PoolUpdateRequest {
                    name: name.clone(),
                    owner: owner.clone(),
                    state: "busy".into(),
                    user_data: Default::default(),
                };
                client.pool_update(update).await.map(drop)
            }
            Held::Worker { id } => client.worker_heartbeat(id).await.map(drop),
        }
    }

    /// A linearizable read: whether it is still held (the lock by this token, the lease by its
    /// owner in `busy`, the worker registered). Err: no answer, ask again.
    pub(crate) async fn probe(&self, client: &Client) -> Result<bool, Status> {
        let linear = Consistency::Linearizable;
        match self {
            Held::Lock { name, token } => match client.lock_get(name, linear).await {
                Ok(info) => Ok(info.holders.iter().any(|h| h.token == *token)),
                Err(s) if s.code() == Code::NotFound => Ok(false),
                Err(s) => Err(s),
            },
            Held::Lease { rtype, name, owner } => {
                let list = client.pool_list(rtype, "", "", linear).await?;
                let mine = |r: &pb::PoolResource| r.owner == *owner && r.state == "busy";
                Ok(list.resources.iter().any(|r| r.name == *name && mine(r)))
            }
            Held::Worker { id } => {
                let list = client.worker_list(linear).await?;
                Ok(list.workers.iter().any(|w| w.id == *id))
            }
        }
    }

    /// How often the leader loop that ends this kind runs (the nodes' config).
    pub(crate) fn sweep_interval(&self, config: &Config) -> Duration {
        Duration::from_millis(match self {
            Held::Lock { .. } => config.locks.sweep_interval_ms,
            Held::Lease { .. } => config.pools.reap_interval_ms,
            Held::Worker { .. } => config.operations.sweep_interval_ms,
        })
    }
}

/// Something held with a TTL, and when its last acknowledged acquire or refresh was sent.
#[derive(Debug)]
pub struct Holding {
    pub held: Held,
    pub ttl: Duration,
    pub last_acked_send: Instant,
    /// Acknowledged refreshes, for the report.
    pub refreshes: u32,
}

impl Holding {
    fn taken(held: Held, ttl: Duration, sent: Instant) -> Holding {
        Holding {
            held,
            ttl,
            last_acked_send: sent,
            refreshes: 0,
        }
    }

    /// When it may end at the earliest.
    pub fn deadline(&self) -> Instant {
        self.last_acked_send + self.ttl
    }

    /// Refreshes until one is acknowledged, then reads that it is held; Err when a refusal
    /// says it was lost.
    async fn refresh(&mut self, client: &Client) -> Result<(), String> {
        loop {
            let sent = Instant::now();
            match self.held.refresh(client, self.ttl).await {
                Ok(()) => {
                    self.last_acked_send = sent;
                    self.refreshes += 1;
                    break;
                }
                Err(s) if matches!(s.code(), Code::FailedPrecondition | Code::NotFound) => {
                    let refusal = format!("refresh refused, {:?}: {}", s.code(), s.message());
                    return Err(self.lost(Instant::now(), &refusal));
                }
                // An unknown outcome (a killed node, no leader yet): send it again.
                Err(_) => tokio::time::sleep(RETRY_PAUSE).await,
            }
        }
        match self.held.probe(client).await {
            Ok(false) => Err(self.lost(Instant::now(), "a read after the refresh shows it ended")),
            _ => Ok(()),
        }
    }

    /// What a refusal (or a read) answered at `at` tells: it ended before then, so inside its
    /// TTL when `at` is.
    fn lost(&self, at: Instant, what: &str) -> String {
        let since = at - self.last_acked_send;
        let verdict = if since < self.ttl {
            "inside its TTL: promise 1 broken"
        } else {
            "past its TTL: the test ran too slowly to tell"
        };
        format!(
            "{} (TTL {:?}) lost {since:?} after its last acknowledged refresh was sent, {verdict} \
             ({} refreshes acknowledged before): {what}",
            self.held.kind(),
            self.ttl,
            self.refreshes
        )
    }
}

/// Acquires WRITE lock `name` for `ttl`.
pub async fn take_lock(client: &Client, name: &str, ttl: Duration) -> Holding {
    let sent = Instant::now();
    let grant = client
        .lock_acquire(name, LockMode::Write, HOLDER, Some(ttl), None, None)
        .await
        .expect("acquire");
    let token = grant.holder.expect("holder").token;
    let name = name.to_string();
    Holding::taken(Held::Lock { name, token }, ttl, sent)
}

/// Makes `name` the pool's one resource, free, its `busy` state expiring after `ttl`, and
/// leases it.
pub async fn take_lease(client: &Client, name: &str, ttl: Duration) -> Holding {
    let mut sync = pb::PoolSyncRequest {
        resources: vec![pb::PoolSyncEntry {
            name: name.into(),
            r#type: LEASE_TYPE.into(),
            state: "free".into(),
        }],
        ..Default::default()
    };
    let expiry_ms = u64::try_from(ttl.as_millis()).expect("fits");
    sync.expiry.insert(
        LEASE_TYPE.into(),
        pb::PoolTypeExpiry {
            expiry_ms: [("busy".to_string(), expiry_ms)].into(),
        },
    );
    client.pool_sync(sync).await.expect("sync");
    let sent = Instant::now();
    let lease = client
        .pool_acquire(LEASE_TYPE, "free", "busy", HOLDER, "")
        .await
        .expect("acquire");
    assert_eq!(lease.resource.expect("resource").name, name);
    let name = name.to_string();
    let held = Held::Lease {
        rtype: LEASE_TYPE.into(),
        name,
        owner: HOLDER.into(),
    };
    Holding::taken(held, ttl, sent)
}

/// Registers worker `id` with `ttl`, for a kind nothing submits.
pub async fn take_worker(client: &Client, id: &str, ttl: Duration) -> Holding {
    let sent = Instant::now();
    client
        .worker_register(id, &["TimeTest:noop"], 1, ttl)
        .await
        .expect("register");
    let id = id.to_string();
    Holding::taken(Held::Worker { id }, ttl, sent)
}

/// Refreshes every holding, each `every`, while `until` runs; then each once more, so a phase
/// ends just after an acknowledged refresh. Err lists what was lost.
pub async fn keep_all(
    holdings: &mut [Holding],
    client: &Client,
    every: Duration,
    until: impl Future<Output = ()>,
) -> Result<(), String> {
    let (stop, stopped) = watch::channel(false);
    let keeps = holdings
        .iter_mut()
        .map(|h| keep(h, client, every, stopped.clone()));
    let stopper = async {
        until.await;
        stop.send_replace(true);
    };
    let (results, ()) = tokio::join!(futures::future::join_all(keeps), stopper);
    let lost: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    if lost.is_empty() {
        Ok(())
    } else {
        Err(lost.join("\n"))
    }
}

async fn keep(
    h: &mut Holding,
    client: &Client,
    every: Duration,
    mut stopped: watch::Receiver<bool>,
) -> Result<(), String> {
    loop {
        let last = tokio::select! {
            _ = tokio::time::sleep(every) => false,
            _ = stopped.wait_for(|s| *s) => true,
        };
        h.refresh(client).await?;
        if last {
            return Ok(());
        }
    }
}

/// Polls every holding (no more refreshes) until it ends, and checks each end against the
/// bound: no sooner than its deadline, no later than its last acknowledged refresh's send +
/// TTL + `raft.election_timeout_ms_max` + `sweeps` of its sweep interval (+ `SLACK`). Prints
/// each window; Err lists the ends out of bound. One election timeout, not the two an election
/// after a leader's death may take (README "Time", bound 2): the tests end in leaderships moved
/// by transfer, which skips the leader lease and the timeout.
///
/// A linearizable read takes effect between its send and its reply, so the end lies between
/// the send of the last probe that saw it held and the reply of the first that saw it ended.
/// Each check fires only on proof, however slow the probes on a busy machine: early when a
/// reply saying "ended" came before the deadline, late when a probe sent after the bound still
/// saw it held.
pub async fn watch_ends(
    holdings: &[Holding],
    client: &Client,
    config: &Config,
    sweeps: u32,
) -> Result<(), String> {
    let ends = holdings
        .iter()
        .map(|h| watch_end(h, client, config, sweeps));
    let ends = futures::future::join_all(ends).await;
    let out: Vec<String> = ends.into_iter().filter_map(Result::err).collect();
    if out.is_empty() {
        Ok(())
    } else {
        Err(out.join("\n"))
    }
}

async fn watch_end(
    h: &Holding,
    client: &Client,
    config: &Config,
    sweeps: u32,
) -> Result<(), String> {
    let election_max = Duration::from_millis(config.raft.election_timeout_ms_max);
    let over = election_max + h.held.sweep_interval(config) * sweeps;
    let latest = h.deadline() + over + SLACK;
    // The last probe sent that still saw it held: it ended after this.
    let mut held_seen = h.last_acked_send;
    let ended_seen = loop {
        let sent = Instant::now();
        match h.held.probe(client).await {
            Ok(true) => held_seen = sent,
            Ok(false) => break Instant::now(),
            Err(_) => {}
        }
        if Instant::now() > latest + Duration::from_secs(10) {
            let kind = h.held.kind();
            return Err(format!(
                "{kind} still held {:?} after its deadline",
                h.deadline().elapsed()
            ));
        }
        tokio::time::sleep(POLL_EVERY).await;
    };
    let window = format!(
        "{} (TTL {:?}, {} refreshes): ended {} to {} ms after last acknowledged refresh send + TTL \
         (bound + {} ms, + {} ms slack)",
        h.held.kind(),
        h.ttl,
        h.refreshes,
        signed_ms(held_seen, h.deadline()),
        signed_ms(ended_seen, h.deadline()),
        over.as_millis(),
        SLACK.as_millis()
    );
    eprintln!("time: {window}");
    if ended_seen < h.deadline() {
        return Err(format!("early, promise 1 broken: {window}"));
    }
    if held_seen > latest {
        return Err(format!("late, promise 2 broken: {window}"));
    }
    Ok(())
}

/// `t - origin` in ms, negative when `t` is before it.
fn signed_ms(t: Instant, origin: Instant) -> i128 {
    match t.checked_duration_since(origin) {
        Some(after) => i128::try_from(after.as_millis()).expect("fits"),
        None => -i128::try_from((origin - t).as_millis()).expect("fits"),
    }
}
