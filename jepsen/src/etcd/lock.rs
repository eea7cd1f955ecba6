//! The etcd-lock workload: a counter incremented under etcd locks, each held by a lease, fenced
//! by the lock key's creation revision (what clientv3/concurrency's `Mutex.IsOwner` compares).
//!
//! Each process keeps a session: a lease of [`TTL`] kept alive on a LeaseKeepAlive stream (a new
//! one when the old is found gone). Even processes lock with the v3lock `Lock` RPC (the server
//! waits); odd ones run clientv3/concurrency's Mutex themselves on the KV and Watch APIs: put
//! `/jepsen/lock/<lease in hex>` under the lease if absent, wait until every key of the prefix
//! created before theirs is deleted (a Range with max_create_revision, then a Watch of the last
//! such key from the Range's revision), then check they are the owner. Both kinds of contender
//! queue on the same keys. Holding, a process reads the counter and writes it + 1 in a Txn that
//! requires its lock key's create_revision to be its token and the counter's mod_revision to be
//! the one read, then releases with a Txn that deletes its key under the same fence. A Txn that
//! answers `succeeded: false` is a definite failure.
//!
//! Checked as the lock workload is (`lockrmw::check`): the mutex model over the grants (a grant
//! is held for sure from its acquire's completion to the invocation of its last acknowledged
//! fenced call), tokens in real-time order, and the counter against the acknowledged and unknown
//! increments.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use steward::proto::etcd::compare::TargetUnion;
use steward::proto::etcd::kv_client::KvClient;
use steward::proto::etcd::lease_client::LeaseClient;
use steward::proto::etcd::range_request::{SortOrder, SortTarget};
use steward::proto::etcd::response_op::Response as OpReply;
use steward::proto::etcd::watch_client::WatchClient;
use steward::proto::etcd::watch_create_request::FilterType;
use steward::proto::etcd::watch_request::RequestUnion;
use steward::proto::etcd::{
    Compare, LeaseGrantRequest, LeaseKeepAliveRequest, RangeRequest, TxnRequest,
    WatchCreateRequest, WatchRequest,
};
use steward::proto::mvccpb::event::EventType;
use steward::proto::v3lockpb::lock_client::LockClient;
use steward::proto::v3lockpb::LockRequest;
use steward::state::kv::prefix_end;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::{Code, Status};

use super::{delete_op, equal, get, get_op, put, put_op, txn, value_of, within, CALL_TIMEOUT};
use crate::lockrmw::{call, Call, Hold, Increment};
use crate::mutex::Mode;

/// The lock's name (v3lock) and so its keys' prefix, `/jepsen/lock/`.
pub const LOCK: &str = "/jepsen/lock";
/// The counter the holders increment.
pub const COUNTER: &str = "/jepsen/counter";
/// The session lease's TTL.
pub const TTL: Duration = Duration::from_secs(5);
/// How long an acquire waits in line before giving up (and deleting its key).
const WAIT: Duration = Duration::from_secs(5);

fn ns(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

/// Puts the counter at 0.
pub async fn init(endpoint: &str) -> anyhow::Result<()> {
    let mut kv = KvClient::new(super::channel(endpoint)?);
    put(&mut kv, COUNTER, "0".into())
        .await
        .map_err(|e| anyhow::anyhow!("putting {COUNTER}: {e}"))
}

/// The counter's value, read linearizably through any node, retried for up to a minute until
/// the healed cluster answers.
pub async fn final_counter(endpoints: &[String]) -> anyhow::Result<i64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    loop {
        let mut kv = KvClient::new(super::channel(&endpoints[i % endpoints.len()])?);
        match get(&mut kv, COUNTER).await {
            Ok(Some(found)) => {
                return value_of(&found).ok_or_else(|| anyhow::anyhow!("{COUNTER}: not a number"))
            }
            Ok(None) => anyhow::bail!("{COUNTER} is gone"),
            Err(e) if Instant::now() < deadline => {
                tracing::warn!(error = %e, "final read of the counter failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                i += 1;
            }
            Err(e) => anyhow::bail!("final read of {COUNTER}: {e}"),
        }
    }
}

/// A lease and the task that keeps it alive; the task ends with the session.
struct Session {
    lease: i64,
    /// Cleared when a keep-alive answers that the lease is gone.
    alive: Arc<AtomicBool>,
    keeper: tokio::task::JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

impl Session {
    async fn grant(channel: &Channel) -> Result<Session, Status> {
        let mut leases = LeaseClient::new(channel.clone());
        let granted = within(
            CALL_TIMEOUT,
            leases.lease_grant(LeaseGrantRequest {
                ttl: TTL.as_secs() as i64,
                id: 0,
            }),
        )
        .await?;
        let alive = Arc::new(AtomicBool::new(true));
        let keeper = tokio::spawn(keep_alive(leases, granted.id, alive.clone()));
        Ok(Session {
            lease: granted.id,
            alive,
            keeper,
        })
    }

    fn alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }
}

/// Sends a keep-alive every third of the TTL on one stream, reopened after an error, until an
/// answer says the lease is gone (TTL 0).
async fn keep_alive(mut leases: LeaseClient<Channel>, lease: i64, alive: Arc<AtomicBool>) {
    let every = TTL / 3;
    loop {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let opened = within(
            CALL_TIMEOUT,
            leases.lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx)),
        )
        .await;
        if let Ok(mut answers) = opened {
            loop {
                if tx.send(LeaseKeepAliveRequest { id: lease }).await.is_err() {
                    break;
                }
                match tokio::time::timeout(CALL_TIMEOUT, answers.next()).await {
                    Ok(Some(Ok(answer))) if answer.ttl <= 0 => {
                        alive.store(false, Ordering::Relaxed);
                        return;
                    }
                    Ok(Some(Ok(_))) => tokio::time::sleep(every).await,
                    _ => break,
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// etcd's answer to a request under a lease that no longer exists.
fn lease_gone(status: &Status) -> bool {
    status.code() == Code::NotFound || status.message().contains("session is expired")
}

/// One process bound to `endpoint`: acquire, increment, release, until `stop`.
pub async fn process(
    id: u64,
    endpoint: String,
    start: Instant,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<Hold>>>,
) {
    let channel = match super::channel(&endpoint) {
        Ok(channel) => channel,
        Err(e) => {
            tracing::error!(%endpoint, error = %e, "etcd-lock: no channel");
            return;
        }
    };
    let mut kv = KvClient::new(channel.clone());
    let mut session: Option<Session> = None;
    while !stop.load(Ordering::Relaxed) {
        let lease = match &session {
            Some(s) if s.alive() => s.lease,
            _ => match Session::grant(&channel).await {
                Ok(s) => session.insert(s).lease,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acquire_invoke_ns = ns(start);
        let acquired = match id % 2 {
            0 => lock_rpc(&channel, &mut kv, lease).await,
            _ => mutex(&channel, &mut kv, lease).await,
        };
        let acquire_complete_ns = ns(start);
        let (key, token) = match acquired {
            Ok(Some(held)) => held,
            Ok(None) => continue,
            Err(e) => {
                if lease_gone(&e) {
                    session = None;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let write = increment(&mut kv, &key, token, start).await;
        let release = fenced(start, &mut kv, &key, token, vec![delete_op(key.as_bytes())]).await;
        let hold = Hold {
            process: id,
            mode: Mode::Write,
            token: token as u64,
            ttl_ms: TTL.as_millis() as u64,
            acquire_invoke_ns,
            acquire_complete_ns,
            write: write.map(|(read, call)| Increment { read, call }),
            reads: vec![],
            release,
        };
        out.lock().unwrap_or_else(|p| p.into_inner()).push(hold);
    }
}

/// The v3lock Lock RPC, waiting up to [`WAIT`]; then a Range of the key it answered for its
/// creation revision, the token. `None` when the key is already gone (its lease ended).
async fn lock_rpc(
    channel: &Channel,
    kv: &mut KvClient<Channel>,
    lease: i64,
) -> Result<Option<(String, i64)>, Status> {
    let mut locks = LockClient::new(channel.clone());
    let request = LockRequest {
        name: LOCK.as_bytes().to_vec().into(),
        lease,
    };
    let locked = within(WAIT, locks.lock(request)).await?;
    let key = String::from_utf8_lossy(&locked.key).into_owned();
    Ok(get(kv, &key)
        .await?
        .map(|found| (key, found.create_revision)))
}

/// clientv3/concurrency's Mutex.Lock on the KV and Watch APIs, waiting up to [`WAIT`]: on
/// giving up (or finding the key lost), its key is deleted and `None` returned.
async fn mutex(
    channel: &Channel,
    kv: &mut KvClient<Channel>,
    lease: i64,
) -> Result<Option<(String, i64)>, Status> {
    let key = format!("{LOCK}/{lease:x}");
    let entered = txn_full(
        kv,
        vec![equal(&key, TargetUnion::CreateRevision(0))],
        vec![put_op(&key, String::new(), lease)],
        vec![get_op(key.as_bytes())],
    )
    .await?;
    let token = match entered.succeeded {
        true => entered.header.map_or(0, |h| h.revision),
        false => match entered.responses.first().and_then(|r| r.response.as_ref()) {
            Some(OpReply::ResponseRange(range)) => {
                range.kvs.first().map_or(0, |found| found.create_revision)
            }
            _ => 0,
        },
    };
    if token <= 0 {
        return Ok(None);
    }
    let owner = tokio::time::timeout(WAIT, async {
        wait_deletes(channel, kv, token).await?;
        let first = range_prefix(kv, 0, SortOrder::Ascend).await?;
        Ok::<bool, Status>(first.is_some_and(|(_, rev, _)| rev == token))
    })
    .await;
    match owner {
        Ok(Ok(true)) => Ok(Some((key, token))),
        Ok(Ok(false)) => {
            give_up(kv, &key).await;
            Ok(None)
        }
        Ok(Err(e)) => {
            give_up(kv, &key).await;
            Err(e)
        }
        Err(_) => {
            give_up(kv, &key).await;
            Ok(None)
        }
    }
}

/// Deletes a waiter's key, best effort (a key left behind ends with its lease, or is found
/// again by this session's next acquire, as concurrency's is).
async fn give_up(kv: &mut KvClient<Channel>, key: &str) {
    let _ = txn(kv, vec![], vec![delete_op(key.as_bytes())]).await;
}

/// A Txn with both branches.
async fn txn_full(
    kv: &mut KvClient<Channel>,
    compare: Vec<Compare>,
    success: Vec<steward::proto::etcd::RequestOp>,
    failure: Vec<steward::proto::etcd::RequestOp>,
) -> Result<steward::proto::etcd::TxnResponse, Status> {
    let request = TxnRequest {
        compare,
        success,
        failure,
    };
    within(CALL_TIMEOUT, kv.txn(request)).await
}

/// The first (ascending) or last (descending) key of the lock's prefix by creation revision,
/// among those created at or before `max_create` (0: all): (key, create_revision, the Range's
/// revision).
async fn range_prefix(
    kv: &mut KvClient<Channel>,
    max_create: i64,
    order: SortOrder,
) -> Result<Option<(Vec<u8>, i64, i64)>, Status> {
    let prefix = format!("{LOCK}/").into_bytes();
    let request = RangeRequest {
        range_end: prefix_end(&prefix),
        key: prefix.into(),
        limit: 1,
        sort_order: order as i32,
        sort_target: SortTarget::Create as i32,
        max_create_revision: max_create,
        ..RangeRequest::default()
    };
    let reply = within(CALL_TIMEOUT, kv.range(request)).await?;
    let revision = reply.header.map_or(0, |h| h.revision);
    Ok(reply
        .kvs
        .into_iter()
        .next()
        .map(|found| (found.key.to_vec(), found.create_revision, revision)))
}

/// concurrency's waitDeletes: until no key of the prefix was created before `token`, watching
/// the last such key for its deletion each time.
async fn wait_deletes(
    channel: &Channel,
    kv: &mut KvClient<Channel>,
    token: i64,
) -> Result<(), Status> {
    // max_create_revision 0 would mean "no bound"; no etcd write takes revision 1 anyway.
    if token <= 1 {
        return Ok(());
    }
    loop {
        let Some((last, _, revision)) = range_prefix(kv, token - 1, SortOrder::Descend).await?
        else {
            return Ok(());
        };
        wait_delete(channel, last, revision + 1).await?;
    }
}

/// Watches `key` from `from` until an event deletes it (the watch replays one that already
/// happened), or the watch is cancelled (then the caller looks again).
async fn wait_delete(channel: &Channel, key: Vec<u8>, from: i64) -> Result<(), Status> {
    let mut watches = WatchClient::new(channel.clone());
    let create = WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key: key.into(),
            start_revision: from,
            filters: vec![FilterType::Noput as i32],
            ..WatchCreateRequest::default()
        })),
    };
    // The request stream stays open while the watch lives.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(create)
        .await
        .map_err(|_| Status::internal("watch request stream closed"))?;
    let mut events = within(
        CALL_TIMEOUT,
        watches.watch(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
    .await?;
    while let Some(reply) = events.next().await {
        let reply = reply?;
        if reply.canceled
            || reply
                .events
                .iter()
                .any(|e| e.r#type == EventType::Delete as i32)
        {
            return Ok(());
        }
    }
    drop(tx);
    Err(Status::unavailable("the watch stream ended"))
}

/// Reads the counter and writes it + 1 under the fence of the lock key's creation revision and
/// the counter's mod_revision; `None` when the read failed (nothing was written).
async fn increment(
    kv: &mut KvClient<Channel>,
    key: &str,
    token: i64,
    start: Instant,
) -> Option<(i64, Call)> {
    let counter = get(kv, COUNTER).await.ok()??;
    let read = value_of(&counter)?;
    let write = put_op(COUNTER, (read + 1).to_string(), 0);
    let mut fence = vec![equal(
        COUNTER,
        TargetUnion::ModRevision(counter.mod_revision),
    )];
    fence.insert(0, equal(key, TargetUnion::CreateRevision(token)));
    let call = fenced_with(start, kv, fence, vec![write]).await;
    Some((read, call))
}

/// A Txn of `ops` fenced by `key`'s creation revision being `token`, timed and classified.
async fn fenced(
    start: Instant,
    kv: &mut KvClient<Channel>,
    key: &str,
    token: i64,
    ops: Vec<steward::proto::etcd::RequestOp>,
) -> Call {
    let fence = vec![equal(key, TargetUnion::CreateRevision(token))];
    fenced_with(start, kv, fence, ops).await
}

async fn fenced_with(
    start: Instant,
    kv: &mut KvClient<Channel>,
    fence: Vec<Compare>,
    ops: Vec<steward::proto::etcd::RequestOp>,
) -> Call {
    // A Txn whose compares failed is refused like a fenced write of steward's (FailedPrecondition:
    // definitely not applied).
    let fenced = async {
        match txn(kv, fence, ops).await {
            Ok(reply) if reply.succeeded => Ok(()),
            Ok(_) => Err(Status::failed_precondition("txn compares failed")),
            Err(e) => Err(e),
        }
    };
    call(start, fenced).await
}
