//! The lease workload: Boskos-style leasing of a small pool. Each process, over and over, acquires
//! a free resource (free -> busy; a dirty one, which the reaper left, when none is free) under a
//! fresh owner name, holds it for a while heartbeating, and releases it (to free); now and then it
//! "crashes" instead (stops heartbeating, never releases), so the leader's reaper has to take
//! the lease back. Checked: no resource is ever held by two
//! owners whose acquires were both acknowledged and whose holding intervals overlap.
//!
//! When is a lease held? From its acquire's acknowledgement until the first of:
//! - the release being sent;
//! - the answer to the first heartbeat that was refused (the owner learns it lost the lease);
//! - the end of the lease's validity as the owner must assume it: the sending of the last
//!   acknowledged heartbeat (or of the acquire) plus the expiry. The reaper resets a lease only
//!   when the leader's time is past `lastUpdate + expiry`, and `lastUpdate` is stamped after that
//!   heartbeat was sent, so (all processes sharing one host clock, no clock nemesis) a reset never
//!   comes before this point. An owner that keeps using a lease past it would be wrong even with a
//!   correct server, so it never does: `process` stops heartbeating and using it there.
//!
//! So a correct pool can never make two such intervals overlap; a pool that leases a held
//! resource again does, as soon as the second acquire is acknowledged while the first holder
//! still holds it. An acquire whose outcome is unknown is retried with the same request id, which
//! answers the lease it may have taken; if that stays unknown the lease is abandoned, never used,
//! and not checked (it ends at the reaper like a crashed one).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use steward::client::{Client, ErrorReason};
use steward::proto::v1 as pb;

use crate::finding::{self, write_jsonl, Finding};
use crate::history::Outcome;
use crate::outcome::classify;
use crate::rng::Rng;

/// The pool's type.
pub const TYPE: &str = "jepsen-lease";
/// How many resources the pool holds (fewer than the processes, so they compete).
pub const RESOURCES: usize = 3;
/// How long a busy lease may go without a heartbeat before the reaper resets it.
pub const EXPIRY: Duration = Duration::from_secs(2);
/// Between heartbeats while holding.
const HEARTBEAT: Duration = Duration::from_millis(300);
/// Per mille of leases whose holder "crashes".
const CRASH_PER_MILLE: u64 = 60;
/// Overlaps listed in the report (all are counted).
const OVERLAPS_LISTED: usize = 50;

/// One lease attempt and what became of it.
#[derive(Clone, Debug, Serialize)]
pub struct Lease {
    pub process: u64,
    pub owner: String,
    /// The resource the acquire answered (empty when it did not).
    pub resource: String,
    /// The owner the acquire's answer named (must be `owner`).
    pub answered_owner: String,
    pub acquire: Outcome,
    pub acquire_invoke_ns: u64,
    pub acquire_complete_ns: u64,
    /// Heartbeats acknowledged / refused / unknown.
    pub heartbeats_ok: u32,
    pub heartbeats_refused: u32,
    pub heartbeats_unknown: u32,
    /// The end of the holding interval (see the module docs).
    pub held_until_ns: u64,
    /// How it ended: "released", "lost" (a heartbeat refused), "expired" (validity ran out
    /// before the hold did), "crashed", "refused" (an unknown acquire proved not taken),
    /// "abandoned" (the acquire stayed unknown).
    pub end: &'static str,
    pub release: Option<Outcome>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

fn ns(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

/// Creates the pool: `RESOURCES` free resources of `TYPE` whose busy leases expire.
pub async fn init(client: &Client) -> anyhow::Result<()> {
    create_pool(client, TYPE, "res", RESOURCES, EXPIRY).await
}

/// Creates a pool of `count` free resources `<prefix>-<i>` of `pool_type` whose busy leases
/// expire after `expiry` without a heartbeat (the lease and ttl workloads).
pub async fn create_pool(
    client: &Client,
    pool_type: &str,
    prefix: &str,
    count: usize,
    expiry: Duration,
) -> anyhow::Result<()> {
    let msg = pb::PoolSyncRequest {
        resources: (0..count)
            .map(|i| pb::PoolSyncEntry {
                name: format!("{prefix}-{i}"),
                r#type: pool_type.into(),
                state: "free".into(),
            })
            .collect(),
        expiry: [(
            pool_type.to_string(),
            pb::PoolTypeExpiry {
                expiry_ms: [("busy".to_string(), expiry.as_millis() as u64)].into(),
            },
        )]
        .into(),
        dynamic: Vec::new(),
    };
    client
        .pool_sync(msg)
        .await
        .map_err(|e| anyhow::anyhow!("creating the pool: {e}"))?;
    Ok(())
}

pub async fn process(
    id: u64,
    client: Client,
    seed: u64,
    start: Instant,
    stop: Arc<std::sync::atomic::AtomicBool>,
    out: Arc<Mutex<Vec<Lease>>>,
) {
    let mut rng = Rng::new(seed.wrapping_mul(1_000_003).wrapping_add(id));
    let mut attempt = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        attempt += 1;
        let owner = format!("p{id}-{attempt}");
        let lease = one_lease(id, &owner, &client, &mut rng, start, &stop).await;
        if let Some(lease) = lease {
            out.lock().unwrap_or_else(|p| p.into_inner()).push(lease);
        }
    }
}

/// One acquire (retried while nothing is free), hold, and release or crash. `None` when the run
/// stopped before anything was leased.
async fn one_lease(
    id: u64,
    owner: &str,
    client: &Client,
    rng: &mut Rng,
    start: Instant,
    stop: &std::sync::atomic::AtomicBool,
) -> Option<Lease> {
    let mut lease = Lease {
        process: id,
        owner: owner.to_string(),
        resource: String::new(),
        answered_owner: String::new(),
        acquire: Outcome::Fail,
        acquire_invoke_ns: 0,
        acquire_complete_ns: 0,
        heartbeats_ok: 0,
        heartbeats_refused: 0,
        heartbeats_unknown: 0,
        held_until_ns: 0,
        end: "abandoned",
        release: None,
        error: String::new(),
    };
    // Acquire: retried while nothing is free. An unknown outcome is asked again with the same
    // request id until the answer is definite: the lease it took, or a refusal (sent within the
    // expiry of the first sending, a refusal proves no lease is held under this request id; one
    // still in flight may land later, and is then never used).
    let mut unknown_tries = 0;
    // Leases the reaper took back are reset to `dirty` (pools.reset_state): with nothing free,
    // the next try takes a dirty one, as Boskos' janitor would clean it, so crashed holders do
    // not drain the pool for the rest of the run.
    let mut from = "free";
    let reply = loop {
        if stop.load(std::sync::atomic::Ordering::Relaxed) && lease.acquire != Outcome::Unknown {
            return None;
        }
        let invoke = ns(start);
        if lease.acquire != Outcome::Unknown {
            lease.acquire_invoke_ns = invoke;
        }
        match client.pool_acquire(TYPE, from, "busy", owner, "r").await {
            Ok(reply) => {
                lease.acquire = Outcome::Ok;
                lease.acquire_complete_ns = ns(start);
                break reply;
            }
            Err(e) => {
                lease.error = format!("{:?}: {}", e.code(), e.message());
                let outcome = classify(&e);
                let asked_in_time = ns(start) < lease.acquire_invoke_ns + EXPIRY.as_nanos() as u64;
                match (lease.acquire, outcome) {
                    (Outcome::Unknown, Outcome::Fail) if asked_in_time => {
                        lease.acquire = Outcome::Fail;
                        lease.end = "refused";
                        lease.acquire_complete_ns = ns(start);
                        return Some(lease);
                    }
                    (Outcome::Unknown, _) if unknown_tries >= 8 || !asked_in_time => {
                        lease.acquire_complete_ns = ns(start);
                        return Some(lease);
                    }
                    (Outcome::Unknown, _) => {
                        unknown_tries += 1;
                        tokio::time::sleep(Duration::from_millis(150)).await;
                    }
                    (_, Outcome::Unknown) => {
                        lease.acquire = Outcome::Unknown;
                        unknown_tries = 0;
                        tokio::time::sleep(Duration::from_millis(150)).await;
                    }
                    // Nothing in `from` (at once, or within the acquire's wait): try the other
                    // state soon.
                    _ if matches!(
                        steward::client::reason(&e),
                        Some(ErrorReason::PoolEmpty | ErrorReason::PoolWaitExpired)
                    ) =>
                    {
                        from = if from == "free" { "dirty" } else { "free" };
                        tokio::time::sleep(Duration::from_millis(10 + rng.below(30))).await;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }
    };
    let r = reply.resource.unwrap_or_default();
    lease.resource = r.name.clone();
    lease.answered_owner = r.owner.clone();
    // Validity as the owner must assume it: from the acquire's sending.
    let mut valid_until = lease.acquire_invoke_ns + EXPIRY.as_nanos() as u64;
    let hold = Duration::from_millis(50 + rng.below(600));
    let crash = rng.below(1000) < CRASH_PER_MILLE;
    let hold_until = ns(start) + hold.as_nanos() as u64;
    loop {
        let now = ns(start);
        if now >= valid_until {
            lease.held_until_ns = valid_until;
            lease.end = "expired";
            return Some(lease);
        }
        if now >= hold_until {
            break;
        }
        if crash {
            // Gone silent: it holds (as far as it knows) until its validity ends.
            lease.held_until_ns = valid_until;
            lease.end = "crashed";
            return Some(lease);
        }
        tokio::time::sleep(HEARTBEAT.min(Duration::from_nanos(hold_until - now))).await;
        if ns(start) >= hold_until {
            break;
        }
        let sent = ns(start);
        if sent >= valid_until {
            continue;
        }
        let hb = pb::PoolUpdateRequest {
            name: r.name.clone(),
            owner: owner.to_string(),
            state: "busy".into(),
            user_data: Default::default(),
        };
        match client.pool_update(hb).await {
            Ok(_) => {
                lease.heartbeats_ok += 1;
                valid_until = sent + EXPIRY.as_nanos() as u64;
            }
            Err(e) if classify(&e) == Outcome::Fail => {
                // It learns of the loss now; it stopped using the lease at its validity's end
                // if that came first (a heartbeat stuck in a partition arrives after the reset).
                lease.heartbeats_refused += 1;
                lease.held_until_ns = ns(start).min(valid_until);
                lease.end = "lost";
                lease.error = format!("{:?}: {}", e.code(), e.message());
                return Some(lease);
            }
            Err(_) => lease.heartbeats_unknown += 1,
        }
    }
    let sent = ns(start);
    lease.held_until_ns = sent.min(valid_until);
    lease.end = "released";
    lease.release = Some(match client.pool_release(&r.name, owner, "free").await {
        Ok(_) => Outcome::Ok,
        Err(e) => classify(&e),
    });
    Some(lease)
}

/// Two acknowledged leases of one resource whose holding intervals overlap.
#[derive(Clone, Debug, Serialize)]
pub struct Overlap {
    pub resource: String,
    pub first: String,
    pub second: String,
    /// The second was acknowledged this long before the first stopped holding.
    pub overlap_ns: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct LeaseReport {
    pub leases: usize,
    pub acquired: usize,
    pub unknown: usize,
    pub ends: BTreeMap<&'static str, usize>,
    pub heartbeats_ok: u64,
    pub heartbeats_refused: u64,
    /// Every overlap found; `overlaps` lists the first `OVERLAPS_LISTED`.
    pub overlap_count: usize,
    pub overlaps: Vec<Overlap>,
    /// Acknowledged acquires that answered a resource of another owner, or none.
    pub wrong_answers: Vec<String>,
}

impl LeaseReport {
    pub fn valid(&self) -> bool {
        self.overlap_count == 0 && self.wrong_answers.is_empty()
    }

    pub fn summary(&self) -> String {
        let ends: Vec<String> = self.ends.iter().map(|(k, v)| format!("{v} {k}")).collect();
        format!(
            "lease: {} attempts ({} acquired, {} unknown; {}), {} heartbeats ({} refused), anomalies {} ({} overlapping leases, {} wrong answers): {}",
            self.leases,
            self.acquired,
            self.unknown,
            ends.join(", "),
            self.heartbeats_ok + self.heartbeats_refused,
            self.heartbeats_refused,
            self.overlap_count + self.wrong_answers.len(),
            self.overlap_count,
            self.wrong_answers.len(),
            if self.valid() { "VALID" } else { "INVALID" }
        )
    }
}

pub fn check(leases: &[Lease]) -> LeaseReport {
    let mut report = LeaseReport {
        leases: leases.len(),
        ..LeaseReport::default()
    };
    let mut by_resource: BTreeMap<&str, Vec<&Lease>> = BTreeMap::new();
    for l in leases {
        *report.ends.entry(l.end).or_default() += 1;
        report.heartbeats_ok += u64::from(l.heartbeats_ok);
        report.heartbeats_refused += u64::from(l.heartbeats_refused);
        match l.acquire {
            Outcome::Ok => report.acquired += 1,
            Outcome::Unknown => report.unknown += 1,
            Outcome::Fail => {}
        }
        if l.acquire != Outcome::Ok {
            continue;
        }
        if l.resource.is_empty() || l.answered_owner != l.owner {
            report.wrong_answers.push(format!(
                "{} acquired {:?} answered for owner {:?}",
                l.owner, l.resource, l.answered_owner
            ));
            continue;
        }
        by_resource.entry(&l.resource).or_default().push(l);
    }
    for (resource, mut ls) in by_resource {
        ls.sort_by_key(|l| l.acquire_complete_ns);
        // Against every earlier lease still holding when this one was acknowledged.
        for (i, later) in ls.iter().enumerate() {
            for earlier in &ls[..i] {
                if earlier.owner != later.owner && earlier.held_until_ns > later.acquire_complete_ns
                {
                    report.overlap_count += 1;
                    if report.overlaps.len() >= OVERLAPS_LISTED {
                        continue;
                    }
                    report.overlaps.push(Overlap {
                        resource: resource.to_string(),
                        first: earlier.owner.clone(),
                        second: later.owner.clone(),
                        overlap_ns: earlier.held_until_ns - later.acquire_complete_ns,
                    });
                }
            }
        }
    }
    report
}

/// Writes the leases to `history_file` and checks them (no overlap, right answers).
pub fn finding(leases: &[Lease], history_file: &std::path::Path) -> anyhow::Result<Finding> {
    write_jsonl(history_file, leases)?;
    let report = check(leases);
    let (_, code) = finding::verdict(report.valid(), true);
    Ok(Finding {
        summary: report.summary(),
        report: serde_json::to_string_pretty(&report)?,
        code,
        points: finding::points(leases, |l| {
            (l.acquire_invoke_ns, l.acquire_complete_ns, l.acquire)
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(owner: &str, resource: &str, acked: u64, held_until: u64) -> Lease {
        Lease {
            process: 0,
            owner: owner.into(),
            resource: resource.into(),
            answered_owner: owner.into(),
            acquire: Outcome::Ok,
            acquire_invoke_ns: acked.saturating_sub(1),
            acquire_complete_ns: acked,
            heartbeats_ok: 0,
            heartbeats_refused: 0,
            heartbeats_unknown: 0,
            held_until_ns: held_until,
            end: "released",
            release: Some(Outcome::Ok),
            error: String::new(),
        }
    }

    #[test]
    fn sequential_leases_pass_and_overlapping_ones_fail() {
        let ok = vec![
            lease("a", "r0", 10, 20),
            lease("b", "r0", 25, 40),
            lease("c", "r1", 15, 50),
            lease("d", "r0", 41, 60),
        ];
        assert!(check(&ok).valid(), "{:?}", check(&ok));
        // b acknowledged at 25 while a held r0 until 30.
        let double = vec![lease("a", "r0", 10, 30), lease("b", "r0", 25, 40)];
        let report = check(&double);
        assert_eq!(report.overlaps.len(), 1, "{report:?}");
        assert_eq!(report.overlap_count, 1);
        assert_eq!(report.overlaps[0].overlap_ns, 5);
        assert!(!report.valid());
        // Unknown acquires are not held.
        let mut unknown = lease("b", "r0", 25, 40);
        unknown.acquire = Outcome::Unknown;
        assert!(check(&[lease("a", "r0", 10, 30), unknown]).valid());
        // An answer naming another owner is wrong.
        let mut wrong = lease("a", "r0", 10, 20);
        wrong.answered_owner = "z".into();
        assert_eq!(check(&[wrong]).wrong_answers.len(), 1);
    }

    /// The report lists the first `OVERLAPS_LISTED` overlaps and counts them all.
    #[test]
    fn overlaps_are_counted_past_the_listed_ones() {
        // Twelve owners of r0 at once: each overlaps every earlier one, 66 pairs.
        let leases: Vec<Lease> = (0..12)
            .map(|i| lease(&format!("o{i}"), "r0", 10 + i, 100))
            .collect();
        let report = check(&leases);
        assert_eq!(report.overlap_count, 66);
        assert_eq!(report.overlaps.len(), OVERLAPS_LISTED);
        assert!(report
            .summary()
            .contains("anomalies 66 (66 overlapping leases"));
        assert!(!report.valid());
    }
}
