//! The steward request/response workloads (all but `watch` and `dispatch`, which have their own
//! drivers, and the etcd-only `txn` and `lease-keep-alive`): each client is a [`StewardWorker`]
//! on steward's generated gRPC stubs, driven by [`runner::drive`].

use anyhow::Context;
use futures::StreamExt;
use steward::proto::v1::locks_client::LocksClient;
use steward::proto::v1::resources_client::ResourcesClient;
use steward::proto::v1::{
    AcquireRequest, Consistency, CreateRequest, GetRequest, ListRequest, LockMode, ReleaseRequest,
    UpdateRequest,
};
use tonic::transport::Channel;

use crate::args::{Plan, Workload};
use crate::names::{self, RunId, KIND};
use crate::report::code_name;
use crate::runner::{self, Measured};
use crate::servers::Probe;

/// Creates of the `list` set in flight at once while preparing.
const PREPARE_CONCURRENCY: usize = 32;

pub async fn run(
    plan: &Plan,
    run: &RunId,
    channels: &[Channel],
    probe: &Probe,
) -> anyhow::Result<Measured> {
    let ns = run.namespace();
    if plan.workload == Workload::List {
        prepare_list(plan, &ns, channels).await?;
    }
    let workers = (0..plan.clients)
        .map(|c| StewardWorker::new(plan, run, c, channels[plan.conn_of_client(c)].clone()))
        .collect();
    runner::drive(plan, workers, probe).await
}

/// Creates the `list` workload's objects: [`names::LIST_MATCHING`] with the label, as many
/// without, over all connections.
async fn prepare_list(plan: &Plan, ns: &str, channels: &[Channel]) -> anyhow::Result<()> {
    let count = names::LIST_MATCHING + names::LIST_OTHERS;
    let mut creates = futures::stream::iter(0..count)
        .map(|i| {
            let mut res = ResourcesClient::new(channels[i % channels.len()].clone());
            let (name, labelled) = names::list_object(i);
            let body = names::object_json(ns, &name, labelled, plan.value_size, None);
            async move {
                create(&mut res, body)
                    .await
                    .with_context(|| format!("prepare list: create {KIND}/{ns}/{name}"))
            }
        })
        .buffer_unordered(PREPARE_CONCURRENCY);
    while let Some(created) = creates.next().await {
        created?;
    }
    Ok(())
}

async fn create(res: &mut ResourcesClient<Channel>, body: String) -> Result<u64, tonic::Status> {
    let reply = res
        .create(CreateRequest {
            object_json: body,
            fence: None,
        })
        .await?;
    Ok(reply.into_inner().revision)
}

/// One steward client's connection handles and its own state between operations.
pub enum StewardWorker {
    Create {
        res: ResourcesClient<Channel>,
        ns: String,
        client: usize,
        seq: u64,
        value_size: usize,
    },
    Update {
        res: ResourcesClient<Channel>,
        ns: String,
        name: String,
        value_size: usize,
        /// Stamped into the spec, so that every update changes the object.
        seq: u64,
        /// The resourceVersion of the last successful update (the precondition of the next).
        revision: u64,
    },
    Get {
        res: ResourcesClient<Channel>,
        ns: String,
        name: String,
        body: String,
        consistency: Consistency,
    },
    List {
        res: ResourcesClient<Channel>,
        ns: String,
    },
    Lock {
        locks: LocksClient<Channel>,
        name: String,
        holder: String,
    },
}

impl StewardWorker {
    pub fn new(plan: &Plan, run: &RunId, client: usize, channel: Channel) -> StewardWorker {
        let ns = run.namespace();
        let res = || ResourcesClient::new(channel.clone());
        let own =
            || names::object_json(&ns, &names::own_name(client), false, plan.value_size, None);
        match plan.workload {
            Workload::Create => StewardWorker::Create {
                res: res(),
                ns: ns.clone(),
                client,
                seq: 0,
                value_size: plan.value_size,
            },
            Workload::Update => StewardWorker::Update {
                res: res(),
                ns: ns.clone(),
                name: names::own_name(client),
                value_size: plan.value_size,
                seq: 0,
                revision: 0,
            },
            Workload::Get | Workload::GetSerializable => StewardWorker::Get {
                res: res(),
                body: own(),
                ns: ns.clone(),
                name: names::own_name(client),
                consistency: if plan.workload == Workload::Get {
                    Consistency::Linearizable
                } else {
                    Consistency::Serializable
                },
            },
            Workload::List => StewardWorker::List { res: res(), ns },
            Workload::Lock | Workload::LockContended => StewardWorker::Lock {
                locks: LocksClient::new(channel.clone()),
                name: run.lock_name((plan.workload == Workload::Lock).then_some(client)),
                holder: run.holder(client),
            },
            Workload::Watch | Workload::Dispatch => unreachable!("these have their own driver"),
            Workload::Txn | Workload::LeaseKeepAlive => unreachable!("refused by args::plan"),
        }
    }
}

impl runner::Worker for StewardWorker {
    /// Untimed set-up: the object a client updates or reads.
    async fn prepare(&mut self) -> anyhow::Result<()> {
        match self {
            StewardWorker::Update {
                res,
                ns,
                name,
                value_size,
                revision,
                ..
            } => {
                let body = names::object_json(ns, name, false, *value_size, None);
                *revision = create(res, body)
                    .await
                    .with_context(|| format!("prepare: create {KIND}/{ns}/{name}"))?;
            }
            StewardWorker::Get {
                res,
                ns,
                name,
                body,
                ..
            } => {
                create(res, body.clone())
                    .await
                    .with_context(|| format!("prepare: create {KIND}/{ns}/{name}"))?;
                // A linearizable read through this client's node returns once that node has
                // applied the create, so its serializable reads find the object from now on.
                current_revision(res, ns, name)
                    .await
                    .with_context(|| format!("prepare: read {KIND}/{ns}/{name} back"))?;
            }
            _ => {}
        }
        Ok(())
    }

    /// One timed operation; `Err` is the report's error code.
    async fn step(&mut self) -> Result<(), String> {
        match self {
            StewardWorker::Create {
                res,
                ns,
                client,
                seq,
                value_size,
            } => {
                // A new name even after a failure: an unknown outcome may have created it.
                let name = names::created_name(*client, *seq);
                *seq += 1;
                let body = names::object_json(ns, &name, false, *value_size, None);
                create(res, body).await.map(drop).map_err(|s| code_name(&s))
            }
            StewardWorker::Update {
                res,
                ns,
                name,
                value_size,
                seq,
                revision,
            } => {
                *seq += 1;
                let body = names::object_json(ns, name, false, *value_size, Some(*seq));
                let updated = res
                    .update(UpdateRequest {
                        object_json: body,
                        expected_revision: *revision,
                        fence: None,
                    })
                    .await;
                match updated {
                    Ok(reply) => {
                        *revision = reply.into_inner().revision;
                        Ok(())
                    }
                    Err(status) => {
                        // The outcome may be unknown: learn the current version (untimed
                        // beyond this failed operation) so the next update can succeed.
                        if let Ok(rv) = current_revision(res, ns, name).await {
                            *revision = rv;
                        }
                        Err(code_name(&status))
                    }
                }
            }
            StewardWorker::Get {
                res,
                ns,
                name,
                consistency,
                ..
            } => {
                let reply = res
                    .get(GetRequest {
                        kind: KIND.into(),
                        namespace: ns.clone(),
                        name: name.clone(),
                        consistency: *consistency as i32,
                    })
                    .await
                    .map_err(|s| code_name(&s))?;
                if reply.get_ref().object_json.is_empty() {
                    return Err("WrongResult".into());
                }
                Ok(())
            }
            StewardWorker::List { res, ns } => {
                let reply = res
                    .list(ListRequest {
                        kind: KIND.into(),
                        namespace: ns.clone(),
                        label_selector: names::list_selector(),
                        limit: 0,
                        continue_token: String::new(),
                        consistency: Consistency::Linearizable as i32,
                    })
                    .await
                    .map_err(|s| code_name(&s))?
                    .into_inner();
                if reply.objects_json.len() != names::LIST_MATCHING
                    || !reply.continue_token.is_empty()
                {
                    return Err("WrongResult".into());
                }
                Ok(())
            }
            StewardWorker::Lock {
                locks,
                name,
                holder,
            } => {
                let grant = locks
                    .acquire(AcquireRequest {
                        name: name.clone(),
                        mode: LockMode::Write as i32,
                        holder: holder.clone(),
                        ttl_ms: names::LOCK_TTL_MS,
                        details_json: String::new(),
                        wait_ms: names::LOCK_WAIT_MS,
                    })
                    .await
                    .map_err(|s| code_name(&s))?
                    .into_inner();
                let token = grant.holder.ok_or("WrongResult")?.token;
                locks
                    .release(ReleaseRequest {
                        name: name.clone(),
                        holder: holder.clone(),
                        token,
                    })
                    .await
                    .map_err(|s| code_name(&s))?;
                Ok(())
            }
        }
    }
}

/// The object's resourceVersion, read linearizably.
async fn current_revision(
    res: &mut ResourcesClient<Channel>,
    ns: &str,
    name: &str,
) -> anyhow::Result<u64> {
    let reply = res
        .get(GetRequest {
            kind: KIND.into(),
            namespace: ns.into(),
            name: name.into(),
            consistency: Consistency::Linearizable as i32,
        })
        .await?
        .into_inner();
    let obj: serde_json::Value = serde_json::from_str(&reply.object_json)?;
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .context("no resourceVersion")
}
