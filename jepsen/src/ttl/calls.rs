//! Each kind's calls, timed and classified into `Step`s: acquire, refresh, the lock's fenced
//! write, release, and the linearizable read of a silent hold. A refusal is `lost` only when its
//! reason says the hold is gone; every other error keeps its `outcome` classification.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use steward::client::{reason, Client, Consistency, ErrorReason, Fence, LockMode};
use steward::proto::v1 as pb;
use tonic::Status;

use super::{fence_object, ns, Hold, Kind, Op, Step, LOCK_WAIT, POOL_TYPE, TTL, WORKER_HANDLES};
use crate::history::Outcome;
use crate::outcome::classify;
use crate::rng::Rng;

/// Attempts of an acquire whose outcome stayed unknown before it is abandoned (a pool lease
/// asked again with its request id, a worker registered again).
const UNKNOWN_TRIES: u32 = 8;

/// One process's calls for holds of `kind`.
pub(super) struct Calls<'a> {
    pub(super) client: &'a Client,
    pub(super) kind: Kind,
    pub(super) start: Instant,
}

/// What an acquire got: the target it answered, the lock token, and its steps.
pub(super) struct Acquired {
    pub(super) target: String,
    pub(super) token: u64,
    pub(super) steps: Vec<Step>,
}

/// Whether `status` says the hold is gone: the lock token no longer holds, the fence refused
/// it, the lease has another owner (or none), the worker is not registered.
fn says_lost(kind: Kind, status: &Status) -> bool {
    match (kind, reason(status)) {
        (Kind::Lock, Some(ErrorReason::LockNotHeld | ErrorReason::FenceRejected)) => true,
        (Kind::Pool, Some(ErrorReason::PoolNotOwner)) => true,
        (Kind::Worker, Some(ErrorReason::NotFound)) => true,
        (Kind::Worker, None) => status.code() == tonic::Code::NotFound,
        _ => false,
    }
}

impl Calls<'_> {
    fn ns(&self) -> u64 {
        ns(self.start)
    }

    /// A step for a write-like call (refresh, fenced write, release) and its result.
    fn step<T>(&self, op: Op, invoke_ns: u64, result: &Result<T, Status>) -> Step {
        let complete_ns = self.ns();
        let (outcome, lost, error) = match result {
            Ok(_) => (Outcome::Ok, false, String::new()),
            Err(e) => {
                let outcome = classify(e);
                let lost = outcome == Outcome::Fail && says_lost(self.kind, e);
                (outcome, lost, format!("{:?}: {}", e.code(), e.message()))
            }
        };
        Step {
            op,
            outcome,
            invoke_ns,
            complete_ns,
            lost,
            released: false,
            error,
        }
    }

    /// Acquires a hold for `holder` (`lock`: on lock `target`), retrying while it is refused
    /// (busy, nothing free); `None` if the run stops first or the outcome stays unknown.
    pub(super) async fn acquire(
        &self,
        holder: &str,
        target: &str,
        rng: &mut Rng,
        stop: &AtomicBool,
    ) -> Option<Acquired> {
        match self.kind {
            Kind::Lock => self.acquire_lock(holder, target, stop).await,
            Kind::Pool => self.acquire_lease(holder, rng, stop).await,
            Kind::Worker => self.register(holder, stop).await,
        }
    }

    /// A WRITE grant, waiting in line up to `LOCK_WAIT`. An unknown outcome is abandoned: the
    /// grant, if made, ends by its TTL.
    async fn acquire_lock(&self, holder: &str, lock: &str, stop: &AtomicBool) -> Option<Acquired> {
        while !stop.load(Ordering::Relaxed) {
            let invoke_ns = self.ns();
            let result = self
                .client
                .lock_acquire(
                    lock,
                    LockMode::Write,
                    holder,
                    Some(TTL),
                    None,
                    Some(LOCK_WAIT),
                )
                .await;
            let step = self.step(Op::Acquire, invoke_ns, &result);
            match result {
                Ok(grant) => {
                    let token = grant.holder.map(|h| h.token).unwrap_or_default();
                    return Some(Acquired {
                        target: lock.to_string(),
                        token,
                        steps: vec![step],
                    });
                }
                Err(_) if step.outcome == Outcome::Unknown => return None,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        None
    }

    /// A lease from `free`, else from `dirty` (the reaper's reset state). An unknown outcome is
    /// asked again with the same request id, which answers the lease it may have taken; the
    /// step runs from the first sending (the lease's stamp is after it) to the answer.
    async fn acquire_lease(
        &self,
        owner: &str,
        rng: &mut Rng,
        stop: &AtomicBool,
    ) -> Option<Acquired> {
        while !stop.load(Ordering::Relaxed) {
            for from in ["free", "dirty"] {
                let invoke_ns = self.ns();
                let mut result = self
                    .client
                    .pool_acquire(POOL_TYPE, from, "busy", owner, owner)
                    .await;
                let mut tries = 0;
                while matches!(&result, Err(e) if classify(e) == Outcome::Unknown) {
                    tries += 1;
                    let late = self.ns() > invoke_ns + TTL.as_nanos() as u64 / 2;
                    if tries >= UNKNOWN_TRIES || late {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    result = self
                        .client
                        .pool_acquire(POOL_TYPE, from, "busy", owner, owner)
                        .await;
                }
                let step = self.step(Op::Acquire, invoke_ns, &result);
                match result {
                    Ok(reply) => {
                        let r = reply.resource.unwrap_or_default();
                        if r.owner != owner || r.name.is_empty() {
                            // Not this workload's anomaly to judge (the lease workload's is);
                            // the lease is not used.
                            tracing::warn!(owner, answered = %r.owner, "a lease for another owner");
                            return None;
                        }
                        return Some(Acquired {
                            target: r.name,
                            token: 0,
                            steps: vec![step],
                        });
                    }
                    Err(e) if reason(&e) == Some(ErrorReason::PoolEmpty) => continue,
                    Err(_) => break,
                }
            }
            tokio::time::sleep(Duration::from_millis(20 + rng.below(30))).await;
        }
        None
    }

    /// A worker registration with `TTL`, registered again after an unknown outcome (each
    /// attempt is a step: a late one can only move the deadline later).
    async fn register(&self, worker: &str, stop: &AtomicBool) -> Option<Acquired> {
        let mut steps = vec![];
        while !stop.load(Ordering::Relaxed) && steps.len() < UNKNOWN_TRIES as usize {
            let invoke_ns = self.ns();
            let result = self
                .client
                .worker_register(worker, &WORKER_HANDLES, 1, TTL)
                .await;
            let step = self.step(Op::Acquire, invoke_ns, &result);
            let outcome = step.outcome;
            steps.push(step);
            match outcome {
                Outcome::Ok => {
                    return Some(Acquired {
                        target: worker.to_string(),
                        token: 0,
                        steps,
                    })
                }
                Outcome::Fail => tokio::time::sleep(Duration::from_millis(50)).await,
                Outcome::Unknown => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        None
    }

    pub(super) async fn refresh(&self, hold: &Hold) -> Step {
        let invoke_ns = self.ns();
        let c = self.client;
        match self.kind {
            Kind::Lock => {
                let r = c
                    .lock_refresh(&hold.target, &hold.holder, hold.token, Some(TTL))
                    .await;
                self.step(Op::Refresh, invoke_ns, &r)
            }
            Kind::Pool => {
                let msg = pb::PoolUpdateRequest {
                    name: hold.target.clone(),
                    owner: hold.holder.clone(),
                    state: "busy".into(),
                    user_data: Default::default(),
                };
                let r = c.pool_update(msg).await;
                self.step(Op::Refresh, invoke_ns, &r)
            }
            Kind::Worker => {
                let r = c.worker_heartbeat(&hold.holder).await;
                self.step(Op::Refresh, invoke_ns, &r)
            }
        }
    }

    /// Locks: writes the lock's fence object, fenced with the grant's token.
    pub(super) async fn fenced_write(&self, hold: &Hold) -> Step {
        let invoke_ns = self.ns();
        let fence = Some(Fence {
            lock: hold.target.clone(),
            token: hold.token,
        });
        let object = fence_object(&hold.target, &hold.holder, hold.token);
        let r = self.client.update_fenced(&object, 0, fence).await;
        self.step(Op::Write, invoke_ns, &r)
    }

    pub(super) async fn release(&self, hold: &Hold) -> Step {
        let invoke_ns = self.ns();
        let c = self.client;
        match self.kind {
            Kind::Lock => {
                let r = c.lock_release(&hold.target, &hold.holder, hold.token).await;
                self.step(Op::Release, invoke_ns, &r)
            }
            Kind::Pool => {
                let r = c.pool_release(&hold.target, &hold.holder, "free").await;
                self.step(Op::Release, invoke_ns, &r)
            }
            Kind::Worker => {
                let r = c.worker_deregister(&hold.holder).await;
                self.step(Op::Release, invoke_ns, &r)
            }
        }
    }

    /// A linearizable read: is the hold still there?
    pub(super) async fn read(&self, hold: &Hold) -> Step {
        let invoke_ns = self.ns();
        let c = self.client;
        let lin = Consistency::Linearizable;
        // (lost, released) from a successful read.
        let shown: Result<(bool, bool), Status> = match self.kind {
            Kind::Lock => match c.lock_get(&hold.target, lin).await {
                Ok(info) => {
                    let held = info
                        .holders
                        .iter()
                        .any(|h| h.token == hold.token && h.holder == hold.holder);
                    Ok((!held, !held))
                }
                // Nobody holds or waits: gone.
                Err(e) if reason(&e) == Some(ErrorReason::NotFound) => Ok((true, true)),
                Err(e) => Err(e),
            },
            Kind::Pool => c.pool_list(POOL_TYPE, "", "", lin).await.map(|reply| {
                let held = reply
                    .resources
                    .iter()
                    .any(|r| r.name == hold.target && r.owner == hold.holder && r.state == "busy");
                (!held, !held)
            }),
            Kind::Worker => c.worker_list(lin).await.map(|reply| {
                match reply.workers.iter().find(|w| w.id == hold.holder) {
                    Some(w) => (!w.alive, false),
                    None => (true, true),
                }
            }),
        };
        let complete_ns = self.ns();
        let (outcome, (lost, released), error) = match shown {
            Ok(shown) => (Outcome::Ok, shown, String::new()),
            Err(e) => (
                classify(&e),
                (false, false),
                format!("{:?}: {}", e.code(), e.message()),
            ),
        };
        Step {
            op: Op::Read,
            outcome,
            invoke_ns,
            complete_ns,
            lost,
            released,
            error,
        }
    }
}
