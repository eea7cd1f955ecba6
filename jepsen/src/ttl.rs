//! The ttl workload: steward's two promises about time (issue 24, README "Time"), checked from
//! the holders' side while wall clocks are stepped and slowed on the leader and on followers.
//!
//! Each process takes, over and over, one kind of hold (by its id: `kind_of`):
//! - `lock`: a WRITE lock with a `TTL` on one of `LOCKS` shared names, waiting in line for it, so
//!   a lock given to another holder shows in the history; each refresh is followed by a write
//!   fenced with the grant's token;
//! - `pool`: a lease of one of `RESOURCES` resources of the pool type `POOL_TYPE` (fewer than the
//!   processes that lease them), busy leases expiring after `TTL`; a resource the reaper took
//!   back (reset to `dirty`) is leased from `dirty` when nothing is `free`, as Boskos' janitor
//!   would clean it;
//! - `worker`: a worker registration with a `TTL`, under a fresh worker id each time.
//!
//! It refreshes the hold right after the acquire and then every `REFRESH` (TTL / 5) for a
//! seeded while, recording each call's sending and answer (ns since the run's start, the
//! history's clock) and outcome; then it releases, or, one time in two, goes silent like a
//! crashed holder and polls with linearizable reads every `POLL` until the hold is gone,
//! recording every read. Refusals that say the hold is gone (LOCK_NOT_HELD, FENCE_REJECTED,
//! POOL_NOT_OWNER, a worker NotFound) are marked `lost`.
//!
//! The checker (`check`) judges the history against the promises:
//! 1. never early: a holder keeps what it holds until at least the sending of its last
//!    acknowledged acquire or refresh + TTL, so nothing may show it lost before that;
//! 2. late by a bound: a silent hold is gone within TTL + one election timeout (the longest a
//!    follower waits for a dead leader before it campaigns) + one sweep interval, while a quorum
//!    is up.
//!
//! Here: the history's types, the pool and objects it needs (`init`), and the processes. Beside
//! it: `calls.rs` (each kind's acquire, refresh, release and read), `check.rs` (the checker and
//! the finding), `report.rs` (what it reports) and `tests.rs` (hand-made histories, good and
//! bad).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use steward::client::Client;

use crate::history::Outcome;
use crate::rng::Rng;

mod calls;
mod check;
mod report;
#[cfg(test)]
mod tests;

pub use check::{check, excused_windows, finding, Bounds};
pub use report::{lateness_table, EarlyLoss, KindLateness, LateRelease, Stats, TtlReport};

/// Every hold's TTL: the lock's TTL, the pool type's busy expiry, the worker's TTL.
pub const TTL: Duration = Duration::from_secs(3);
/// Between two refreshes of a hold (TTL / 5: four may fail before the hold is at risk).
pub const REFRESH: Duration = Duration::from_millis(600);
/// Between two reads of a silent hold, plus up to `POLL_JITTER`.
pub const POLL: Duration = Duration::from_millis(60);
const POLL_JITTER_MS: u64 = 30;
/// A silent hold that is not gone this long after its deadline is given up on (reported as
/// unresolved; judged late if its reads say so).
pub const POLL_GIVE_UP: Duration = Duration::from_secs(20);
/// The shared lock names; the lock processes spread over them and wait in line.
pub const LOCKS: [&str; 2] = ["jepsen-ttl-0", "jepsen-ttl-1"];
/// The nodes' lock-delay in ttl runs (the default is 5 s): a lock that expired goes to the next
/// in line soon after, so an early expiry shows as the lock given to another while still held,
/// and silent holders do not keep the lock processes waiting most of the run.
pub const LOCK_DELAY: Duration = Duration::from_millis(300);
/// How long a lock acquire waits in line.
const LOCK_WAIT: Duration = Duration::from_secs(4);
/// The kind of the objects written fenced with a lock's token (one per lock, named like it).
pub const FENCE_KIND: &str = "TtlFence";
/// The pool's type, and how many resources it has (fewer than the processes that lease).
pub const POOL_TYPE: &str = "jepsen-ttl";
pub const RESOURCES: usize = 2;
/// What the workers say they handle (no operation is ever submitted for it).
pub const WORKER_HANDLES: [&str; 1] = ["TtlProbe:noop"];
/// Per mille of holds that go silent instead of releasing.
const SILENT_PER_MILLE: u64 = 500;
/// How long a hold is refreshed before its release or silence: 0.5 to 5 s.
const HOLD_MS_MIN: u64 = 500;
const HOLD_MS_SPREAD: u64 = 4_500;

/// What kind of hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Lock,
    Pool,
    Worker,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Lock, Kind::Pool, Kind::Worker];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Pool => "pool",
            Kind::Worker => "worker",
        }
    }
}

/// The kind of hold process `id` takes: lock, pool, worker, lock, ...
pub fn kind_of(id: u64) -> Kind {
    Kind::ALL[(id % 3) as usize]
}

/// What a step of a hold did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// The acquire (lock grant, pool lease, worker registration). A pool acquire retried after
    /// an unknown outcome is one step from the first sending to the answer.
    Acquire,
    /// A refresh (lock refresh, pool heartbeat, worker heartbeat): moves the deadline.
    Refresh,
    /// A lock holder's write fenced with its token: proves the grant live, moves nothing.
    Write,
    Release,
    /// A linearizable read of a silent hold.
    Read,
}

/// One call of a hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub op: Op,
    pub outcome: Outcome,
    /// ns since the run's start.
    pub invoke_ns: u64,
    pub complete_ns: u64,
    /// The step proves the hold lost: a refusal that says so (outcome Fail), or a read (outcome
    /// Ok) that did not show it held (a worker listed but not alive included).
    #[serde(default, skip_serializing_if = "is_false")]
    pub lost: bool,
    /// Reads only: the hold is gone altogether (for a worker: no longer listed, its work taken
    /// back; for a lock or a lease the same as `lost`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub released: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// How a hold ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum End {
    /// Its release was sent.
    Released,
    /// A refresh or fenced write was refused as lost.
    Lost,
    /// It went silent and a read showed it gone.
    Silent,
    /// It went silent and no read showed it gone before `POLL_GIVE_UP`.
    Unresolved,
}

impl End {
    pub fn as_str(self) -> &'static str {
        match self {
            End::Released => "released",
            End::Lost => "lost",
            End::Silent => "silent",
            End::Unresolved => "unresolved",
        }
    }
}

/// One acknowledged acquire and everything its holder did with it, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub process: u64,
    pub kind: Kind,
    /// The lock holder, pool owner or worker id (fresh for every hold).
    pub holder: String,
    /// The lock name, resource name or worker id.
    pub target: String,
    /// Locks: the grant's fencing token.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub token: u64,
    pub ttl_ms: u64,
    /// The acquire first (outcome Ok; earlier unknown attempts of a worker's registration
    /// before it), then refreshes, writes, the release or the reads.
    pub steps: Vec<Step>,
    pub end: End,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn ns(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The pool (`RESOURCES` free resources of `POOL_TYPE`, busy leases expiring after `TTL`) and one
/// fence object per lock.
pub async fn init(client: &Client) -> anyhow::Result<()> {
    crate::lease::create_pool(client, POOL_TYPE, "ttl-res", RESOURCES, TTL).await?;
    for lock in LOCKS {
        client
            .create(&fence_object(lock, "", 0))
            .await
            .map_err(|e| anyhow::anyhow!("creating the fence object {lock}: {e}"))?;
    }
    Ok(())
}

/// The object a holder of `lock` writes under its fence.
fn fence_object(lock: &str, holder: &str, token: u64) -> serde_json::Value {
    json!({
        "kind": FENCE_KIND,
        "apiVersion": "jepsen/v1",
        "metadata": {"name": lock},
        "spec": {"holder": holder, "token": token},
    })
}

/// Runs process `id` until `stop`: holds of its kind, one after another, each pushed to `out`
/// when it ends. A silent hold still being polled at `stop` is polled to its end.
pub async fn process(
    id: u64,
    client: Client,
    seed: u64,
    start: Instant,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<Hold>>>,
) {
    let mut rng = Rng::new(seed.wrapping_mul(2_000_003).wrapping_add(id));
    let kind = kind_of(id);
    let mut attempt = 0u64;
    while !stop.load(Ordering::Relaxed) {
        attempt += 1;
        let holder = format!("ttl-p{id}-{attempt}");
        let calls = calls::Calls {
            client: &client,
            kind,
            start,
        };
        if let Some(hold) = one_hold(id, &calls, &holder, &mut rng, &stop).await {
            out.lock().unwrap_or_else(|p| p.into_inner()).push(hold);
        }
    }
}

/// One hold: acquire, refresh on time for a seeded while, then release or go silent and poll.
/// `None` when nothing was acquired (the run stopped, or the acquire stayed unknown).
async fn one_hold(
    id: u64,
    calls: &calls::Calls<'_>,
    holder: &str,
    rng: &mut Rng,
    stop: &AtomicBool,
) -> Option<Hold> {
    let target = match calls.kind {
        Kind::Lock => LOCKS[rng.below(LOCKS.len() as u64) as usize].to_string(),
        Kind::Pool | Kind::Worker => String::new(),
    };
    let acquired = calls.acquire(holder, &target, rng, stop).await?;
    let mut hold = Hold {
        process: id,
        kind: calls.kind,
        holder: holder.to_string(),
        target: acquired.target,
        token: acquired.token,
        ttl_ms: TTL.as_millis() as u64,
        steps: acquired.steps,
        end: End::Released,
    };
    let hold_for = Duration::from_millis(HOLD_MS_MIN + rng.below(HOLD_MS_SPREAD));
    let silent = rng.below(1000) < SILENT_PER_MILLE;
    let until = Instant::now() + hold_for;
    // Refresh at once (a lock granted after a long wait may be near its TTL already), then on
    // time: each refresh `REFRESH` after the sending of the one before.
    loop {
        let sent = Instant::now();
        let refresh = calls.refresh(&hold).await;
        let lost = refresh.lost;
        hold.steps.push(refresh);
        if !lost && calls.kind == Kind::Lock {
            let write = calls.fenced_write(&hold).await;
            let lost_write = write.lost;
            hold.steps.push(write);
            if lost_write {
                hold.end = End::Lost;
                return Some(hold);
            }
        }
        if lost {
            hold.end = End::Lost;
            return Some(hold);
        }
        if Instant::now() >= until || stop.load(Ordering::Relaxed) {
            break;
        }
        tokio::time::sleep_until((sent + REFRESH).into()).await;
    }
    if !silent || stop.load(Ordering::Relaxed) {
        let release = calls.release(&hold).await;
        hold.end = match release.lost {
            true => End::Lost,
            false => End::Released,
        };
        hold.steps.push(release);
        return Some(hold);
    }
    let give_up = Instant::now() + TTL + POLL_GIVE_UP;
    loop {
        let read = calls.read(&hold).await;
        let released = read.released;
        hold.steps.push(read);
        if released {
            hold.end = End::Silent;
            return Some(hold);
        }
        if Instant::now() >= give_up {
            hold.end = End::Unresolved;
            return Some(hold);
        }
        tokio::time::sleep(POLL + Duration::from_millis(rng.below(POLL_JITTER_MS))).await;
    }
}
