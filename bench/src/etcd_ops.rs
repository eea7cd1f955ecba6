//! The same workloads against etcd's v3 gRPC API, for the side-by-side comparison (issue 5):
//! [`EtcdWorker`] on the generated stubs of etcd's protos (steward's proto/etcd/), driven by
//! [`runner::drive`] exactly like the steward workers. Steward's nodes serve this API too
//! (issue 25), so the same workers drive either system: etcd at etcd's client ports, steward at
//! steward's. `txn` is in `etcd_txn`, `lease-keep-alive` in `etcd_lease`, `watch` (its own
//! driver) in `etcd_watch`.
//!
//! Every value is the JSON document steward stores for the same object ([`names::stored_json`]:
//! the client's document plus uid, resourceVersion, generation and creationTimestamp), so both
//! systems write, replicate and return the same bytes per object; the client fills in that
//! metadata, as a Kubernetes apiserver does before it writes to etcd.
//!
//! | workload | etcd operation | steward operation |
//! |---|---|---|
//! | create | Txn: if the key's create_revision is 0 (absent), Put (a Kubernetes apiserver's create) | Create (fails if it exists) |
//! | update | Txn: if the key's mod_revision is the one of the last update, Put (as Kubernetes does) | Update with resourceVersion |
//! | txn | Txn over the client's 2 keys: if both mod_revisions are the last written, Put both, else Range both | (etcd's API only) |
//! | get / get-serializable | Range of one key, linearizable / `serializable` | Get, linearizable / serializable |
//! | list | Range over the prefix of the 200 list keys, then the label filter in this client (as an apiserver filters what it ranged) | List with the label selector: 100 of the 200 objects of the namespace |
//! | lock / lock-contended | Lock (under one lease per client, granted before the clock) + Unlock | Acquire WRITE + Release |
//! | lease-keep-alive | KeepAlive of the client's lease on its own LeaseKeepAlive stream | (etcd's API only) |
//! | watch | one writer: Txn Put if absent; every client: Watch of the run's prefix | Create; Watch of the namespace |

use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use tonic::transport::Channel;

use crate::args::{Plan, Workload};
use crate::etcd_lease::KeepAliveWorker;
use crate::etcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::etcd_proto::etcdserverpb::kv_client::KvClient;
use crate::etcd_proto::etcdserverpb::lease_client::LeaseClient;
use crate::etcd_proto::etcdserverpb::request_op::Request;
use crate::etcd_proto::etcdserverpb::{
    Compare, LeaseGrantRequest, PutRequest, RangeRequest, RequestOp, TxnRequest, TxnResponse,
};
use crate::etcd_proto::v3lockpb::lock_client::LockClient;
use crate::etcd_proto::v3lockpb::{LockRequest, UnlockRequest};
use crate::etcd_txn::TxnWorker;
use crate::names::{self, RunId, StoredMeta};
use crate::report::code_name;
use crate::runner::{self, Measured};
use crate::servers::Probe;

/// Puts of the `list` set in flight at once while preparing.
const PREPARE_CONCURRENCY: usize = 32;

pub async fn run(
    plan: &Plan,
    run: &RunId,
    channels: &[Channel],
    probe: &Probe,
) -> anyhow::Result<Measured> {
    if plan.workload == Workload::List {
        prepare_list(plan, run, channels).await?;
    }
    let workers = (0..plan.clients)
        .map(|c| EtcdWorker::new(plan, run, c, channels[plan.conn_of_client(c)].clone()))
        .collect();
    runner::drive(plan, workers, probe).await
}

async fn prepare_list(plan: &Plan, run: &RunId, channels: &[Channel]) -> anyhow::Result<()> {
    let ns = run.namespace();
    let mut puts = futures::stream::iter(0..names::LIST_MATCHING + names::LIST_OTHERS)
        .map(|i| {
            let mut kv = KvClient::new(channels[i % channels.len()].clone());
            let key = names::etcd_list_key(run, i);
            let (name, labelled) = names::list_object(i);
            let meta = StoredMeta::new(i, 0, 1, 1);
            let value = names::stored_json(&ns, &name, labelled, plan.value_size, None, &meta);
            async move {
                put(&mut kv, key.clone(), value.into_bytes())
                    .await
                    .with_context(|| format!("prepare list: put {key}"))
            }
        })
        .buffer_unordered(PREPARE_CONCURRENCY);
    while let Some(done) = puts.next().await {
        done?;
    }
    Ok(())
}

/// Puts `key`; returns the revision it was written at (its mod_revision).
pub(crate) async fn put(
    kv: &mut KvClient<Channel>,
    key: String,
    value: Vec<u8>,
) -> Result<i64, tonic::Status> {
    let reply = kv
        .put(PutRequest {
            key: key.into_bytes().into(),
            value: value.into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(reply.header.map(|h| h.revision).unwrap_or(0))
}

/// A Txn that puts `value` at `key` if `compare` holds; Ok(Some(revision)) if it did,
/// Ok(None) if the compare failed.
pub(crate) async fn put_if(
    kv: &mut KvClient<Channel>,
    key: &str,
    value: Vec<u8>,
    compare: (CompareTarget, TargetUnion),
) -> Result<Option<i64>, tonic::Status> {
    let txn = TxnRequest {
        compare: vec![Compare {
            result: CompareResult::Equal as i32,
            target: compare.0 as i32,
            key: key.as_bytes().to_vec().into(),
            target_union: Some(compare.1),
            range_end: Default::default(),
        }],
        success: vec![RequestOp {
            request: Some(Request::RequestPut(PutRequest {
                key: key.as_bytes().to_vec().into(),
                value: value.into(),
                ..Default::default()
            })),
        }],
        failure: vec![],
    };
    let reply: TxnResponse = kv.txn(txn).await?.into_inner();
    let revision = reply.header.map(|h| h.revision).unwrap_or(0);
    Ok(reply.succeeded.then_some(revision))
}

/// The key's mod_revision, read linearizably (also: this node has applied every write before).
async fn mod_revision(kv: &mut KvClient<Channel>, key: &str) -> anyhow::Result<i64> {
    let reply = kv
        .range(RangeRequest {
            key: key.as_bytes().to_vec().into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    reply
        .kvs
        .first()
        .map(|kv| kv.mod_revision)
        .with_context(|| format!("{key} not found"))
}

/// One etcd client's connection handles and its own state between operations.
pub enum EtcdWorker {
    Create {
        kv: KvClient<Channel>,
        ns: String,
        prefix: String,
        client: usize,
        seq: u64,
        value_size: usize,
        /// The store revision of this client's last reply: the next document's resourceVersion
        /// (there for the byte count; etcd's own is the key's mod_revision).
        revision: i64,
    },
    Update {
        kv: KvClient<Channel>,
        ns: String,
        client: usize,
        key: String,
        value_size: usize,
        /// Stamped into the spec, as steward's updates are, so every update changes the object.
        seq: u64,
        /// The key's mod_revision after the last successful update (the next one's condition).
        revision: i64,
    },
    Get {
        kv: KvClient<Channel>,
        key: String,
        value: Vec<u8>,
        serializable: bool,
    },
    List {
        kv: KvClient<Channel>,
        start: Vec<u8>,
        end: Vec<u8>,
    },
    Lock {
        lock: LockClient<Channel>,
        lease: LeaseClient<Channel>,
        name: String,
        /// Granted in `prepare`; every Lock of this client is held under it.
        lease_id: i64,
    },
    Txn(TxnWorker),
    KeepAlive(KeepAliveWorker),
}

/// A revision as the u64 a document's resourceVersion is (etcd's are never negative).
pub(crate) fn rv(revision: i64) -> u64 {
    u64::try_from(revision).unwrap_or(0)
}

impl EtcdWorker {
    pub fn new(plan: &Plan, run: &RunId, client: usize, channel: Channel) -> EtcdWorker {
        let ns = run.namespace();
        let prefix = names::etcd_prefix(run);
        let own_key = format!("{prefix}{}", names::own_name(client));
        let kv = || KvClient::new(channel.clone());
        match plan.workload {
            Workload::Create => EtcdWorker::Create {
                kv: kv(),
                ns,
                prefix,
                client,
                seq: 0,
                value_size: plan.value_size,
                revision: 1,
            },
            Workload::Update => EtcdWorker::Update {
                kv: kv(),
                ns,
                client,
                key: own_key,
                value_size: plan.value_size,
                seq: 0,
                revision: 0,
            },
            Workload::Get | Workload::GetSerializable => EtcdWorker::Get {
                kv: kv(),
                key: own_key,
                value: names::stored_json(
                    &ns,
                    &names::own_name(client),
                    false,
                    plan.value_size,
                    None,
                    &StoredMeta::new(client, 0, 1, 1),
                )
                .into_bytes(),
                serializable: plan.workload == Workload::GetSerializable,
            },
            Workload::List => {
                let start = names::etcd_list_prefix(run).into_bytes();
                EtcdWorker::List {
                    kv: kv(),
                    end: names::prefix_end(&start).to_vec(),
                    start,
                }
            }
            Workload::Lock | Workload::LockContended => EtcdWorker::Lock {
                lock: LockClient::new(channel.clone()),
                lease: LeaseClient::new(channel.clone()),
                name: run.lock_name((plan.workload == Workload::Lock).then_some(client)),
                lease_id: 0,
            },
            Workload::Txn => EtcdWorker::Txn(TxnWorker::new(plan, run, client, channel)),
            Workload::LeaseKeepAlive => {
                EtcdWorker::KeepAlive(KeepAliveWorker::new(LeaseClient::new(channel)))
            }
            Workload::Watch => unreachable!("etcd_watch drives it"),
            Workload::Dispatch => unreachable!("refused by args::plan"),
        }
    }
}

impl runner::Worker for EtcdWorker {
    async fn prepare(&mut self) -> anyhow::Result<()> {
        match self {
            EtcdWorker::Update {
                kv,
                ns,
                client,
                key,
                value_size,
                revision,
                ..
            } => {
                let name = names::own_name(*client);
                let meta = StoredMeta::new(*client, 0, 1, 1);
                let value = names::stored_json(ns, &name, false, *value_size, None, &meta);
                *revision = put(kv, key.clone(), value.into_bytes())
                    .await
                    .with_context(|| format!("prepare: put {key}"))?;
            }
            EtcdWorker::Get { kv, key, value, .. } => {
                put(kv, key.clone(), value.clone())
                    .await
                    .with_context(|| format!("prepare: put {key}"))?;
                // As on steward: once this node served a linearizable read, its serializable
                // reads see the key.
                mod_revision(kv, key)
                    .await
                    .with_context(|| format!("prepare: read {key} back"))?;
            }
            EtcdWorker::Lock {
                lease, lease_id, ..
            } => {
                let ttl_s = (names::LOCK_TTL_MS / 1000) as i64;
                *lease_id = lease
                    .lease_grant(LeaseGrantRequest { ttl: ttl_s, id: 0 })
                    .await
                    .context("prepare: grant a lease")?
                    .into_inner()
                    .id;
            }
            EtcdWorker::Txn(w) => w.prepare().await?,
            EtcdWorker::KeepAlive(w) => w.prepare().await?,
            _ => {}
        }
        Ok(())
    }

    async fn step(&mut self) -> Result<(), String> {
        match self {
            EtcdWorker::Create {
                kv,
                ns,
                prefix,
                client,
                seq,
                value_size,
                revision,
            } => {
                let name = names::created_name(*client, *seq);
                let meta = StoredMeta::new(*client, *seq, rv(*revision + 1), 1);
                *seq += 1;
                let value = names::stored_json(ns, &name, false, *value_size, None, &meta);
                let key = format!("{prefix}{name}");
                // Create-if-absent, as steward's create and a Kubernetes apiserver's are: a key
                // that was never created (or was deleted) has create_revision 0.
                let absent = (CompareTarget::Create, TargetUnion::CreateRevision(0));
                match put_if(kv, &key, value.into_bytes(), absent).await {
                    Ok(Some(r)) => {
                        *revision = r;
                        Ok(())
                    }
                    Ok(None) => Err("AlreadyExists".into()),
                    Err(s) => Err(code_name(&s)),
                }
            }
            EtcdWorker::Update {
                kv,
                ns,
                client,
                key,
                value_size,
                seq,
                revision,
            } => {
                *seq += 1;
                let name = names::own_name(*client);
                let meta = StoredMeta::new(*client, 0, rv(*revision + 1), *seq + 1);
                let value = names::stored_json(ns, &name, false, *value_size, Some(*seq), &meta);
                let unchanged = (CompareTarget::Mod, TargetUnion::ModRevision(*revision));
                match put_if(kv, key, value.into_bytes(), unchanged).await {
                    Ok(Some(r)) => {
                        *revision = r;
                        Ok(())
                    }
                    failed => {
                        // A failed condition is steward's Aborted; either way learn the current
                        // mod_revision so the next update can succeed.
                        if let Ok(rev) = mod_revision(kv, key).await {
                            *revision = rev;
                        }
                        Err(match failed {
                            Err(s) => code_name(&s),
                            Ok(_) => "Aborted".into(),
                        })
                    }
                }
            }
            EtcdWorker::Get {
                kv,
                key,
                serializable,
                ..
            } => {
                let reply = kv
                    .range(RangeRequest {
                        key: key.as_bytes().to_vec().into(),
                        serializable: *serializable,
                        ..Default::default()
                    })
                    .await
                    .map_err(|s| code_name(&s))?;
                if reply.get_ref().kvs.len() != 1 {
                    return Err("WrongResult".into());
                }
                Ok(())
            }
            EtcdWorker::List { kv, start, end } => {
                let reply = kv
                    .range(RangeRequest {
                        key: start.clone().into(),
                        range_end: end.clone().into(),
                        ..Default::default()
                    })
                    .await
                    .map_err(|s| code_name(&s))?
                    .into_inner();
                if reply.kvs.len() != names::LIST_MATCHING + names::LIST_OTHERS || reply.more {
                    return Err("WrongResult".into());
                }
                // Steward's label selector, here in the client: keep the labelled documents.
                let mut kept = 0;
                for kv in &reply.kvs {
                    if names::has_list_label(&kv.value).map_err(|_| "WrongResult")? {
                        kept += 1;
                    }
                }
                if kept != names::LIST_MATCHING {
                    return Err("WrongResult".into());
                }
                Ok(())
            }
            EtcdWorker::Lock {
                lock,
                name,
                lease_id,
                ..
            } => {
                let mut req = tonic::Request::new(LockRequest {
                    name: name.as_bytes().to_vec().into(),
                    lease: *lease_id,
                });
                // As long as a steward client waits in line (its wait_ms).
                req.set_timeout(Duration::from_millis(names::LOCK_WAIT_MS));
                let key = lock
                    .lock(req)
                    .await
                    .map_err(|s| code_name(&s))?
                    .into_inner()
                    .key;
                lock.unlock(UnlockRequest { key })
                    .await
                    .map_err(|s| code_name(&s))?;
                Ok(())
            }
            EtcdWorker::Txn(w) => w.step().await,
            EtcdWorker::KeepAlive(w) => w.step().await,
        }
    }
}
