//! The lock workload: clients take READ and WRITE locks with TTLs through any node, refresh
//! them a few times, write an object fenced by a WRITE grant's token, then release them or walk
//! away (so they expire, under the leader's sweeper). Checked at the end:
//! - the reader-writer mutex model of the fault-injection suite (`jepsen::mutex`, as a
//!   library): never two holders at once where one is WRITE, tokens growing in real time;
//! - never early (README "Time"): a grant is lost (a refresh refused as not held, or the lock
//!   granted to another) no sooner than its last acknowledged acquire or refresh was invoked
//!   plus its TTL, on real time, less what the leaders' monotonic clocks may drift
//!   ([`DRIFT_MAX`]), unless its holder asked to release it first;
//! - fencing: the acknowledged writes fenced by one lock's tokens, in the order they took
//!   effect (their revisions), carry tokens that never go down.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jepsen::mutex::{self, Mode};
use rand::rngs::SmallRng;
use rand::RngExt;
use steward::state::{
    Command, Fence, LockCommand, LockLimits, LockMode, LockReply, ObjectCommand, ObjectReply,
    Rejection, Resource, Response,
};

use crate::clock::DRIFT_MAX;
use crate::cluster::{Answer, Cluster};

/// The lock names clients contend for.
const NAMES: u64 = 2;

/// An acknowledged write fenced by a grant's token.
#[derive(Clone, Debug)]
pub struct FencedWrite {
    pub process: u64,
    pub name: String,
    pub token: u64,
    pub invoke_ns: u64,
    /// The revision it took effect at.
    pub revision: u64,
}

/// What the lock clients saw.
#[derive(Default)]
pub struct LockHistory {
    pub grants: Vec<Grant>,
    pub fenced: Vec<FencedWrite>,
}

/// One acknowledged grant and what its holder learned of it afterwards.
#[derive(Clone, Debug)]
pub struct Grant {
    pub process: u64,
    pub name: String,
    pub mode: LockMode,
    pub token: u64,
    pub acquire_invoke_ns: u64,
    pub acquire_complete_ns: u64,
    /// The last acknowledged acquire or refresh: when it was invoked and the TTL it set. A
    /// refresh sets the expiry to its own time plus its TTL, a shorter one too.
    pub proof: (u64, u64),
    /// Refreshes whose outcome is unknown: applied, possibly after later ones, each may have
    /// set the expiry last.
    pub maybe: Vec<(u64, u64)>,
    /// When its holder first asked to release it (whatever the answer).
    pub release_invoke_ns: Option<u64>,
    /// The invocation of the last call that proved it live (a refresh, a fenced write, or a
    /// release that succeeded).
    pub live_until_ns: Option<u64>,
    /// When a refresh refused as not held (or a fenced write refused by its fence) completed:
    /// it had been lost by then.
    pub lost_by_ns: Option<u64>,
}

impl Grant {
    /// Real time before which it may not be lost: its last proof's invocation plus its TTL
    /// over the fastest a clock may run, or sooner if a refresh of unknown outcome may have
    /// set the expiry last, or its release, whichever is first.
    fn held_until_ns(&self) -> u64 {
        let until = |(invoke, ttl_ms): (u64, u64)| {
            invoke + (ttl_ms as f64 * 1e6 / (1.0 + DRIFT_MAX)) as u64
        };
        let by_ttl = self
            .maybe
            .iter()
            .map(|&m| until(m))
            .fold(until(self.proof), u64::min);
        self.release_invoke_ns.map_or(by_ttl, |r| r.min(by_ttl))
    }

    fn conflicts(&self, other: &Grant) -> bool {
        self.name == other.name
            && self.process != other.process
            && (self.mode == LockMode::Write || other.mode == LockMode::Write)
    }
}

fn ms(ns: u64) -> String {
    format!("{}.{:03}s", ns / 1_000_000_000, (ns / 1_000_000) % 1_000)
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "c{}'s {} grant of {} (token {}, acquired {}..{}",
            self.process,
            self.mode,
            self.name,
            self.token,
            ms(self.acquire_invoke_ns),
            ms(self.acquire_complete_ns)
        )?;
        let (invoke, ttl) = self.proof;
        write!(f, ", last proof invoked {} with TTL {ttl} ms", ms(invoke))?;
        write!(f, ", held until at least {})", ms(self.held_until_ns()))
    }
}

/// One client holding at most one grant at a time, under the name `c<process>`.
pub async fn client(
    cluster: Arc<Cluster>,
    process: u64,
    mut rng: SmallRng,
    until: tokio::time::Instant,
    out: Arc<Mutex<LockHistory>>,
) {
    let who = format!("c{process}");
    let trace = cluster.trace.clone();
    let via = |rng: &mut SmallRng| cluster.ids[rng.random_range(0..cluster.ids.len())];
    let mut mine: Vec<Grant> = Vec::new();
    let mut fenced: Vec<FencedWrite> = Vec::new();
    while tokio::time::Instant::now() < until {
        let name = format!("l{}", rng.random_range(0..NAMES));
        let mode = if rng.random_bool(0.75) {
            LockMode::Write
        } else {
            LockMode::Read
        };
        let ttl_ms = rng.random_range(200..1_200);
        let node = via(&mut rng);
        trace.log(
            &who,
            format!("acquire {name} {mode} ttl {ttl_ms} ms via n{node}"),
        );
        let invoke = trace.now_ns();
        // An acquire by the same holder re-acquires (refreshes, upgrades or downgrades) what
        // it may still hold of that lock, say after it walked away: that ends the old grant.
        for old in mine.iter_mut().filter(|g| g.name == name) {
            old.release_invoke_ns = Some(old.release_invoke_ns.map_or(invoke, |r| r.min(invoke)));
        }
        let answer = cluster
            .write(
                node,
                Command::Locks(LockCommand::Acquire {
                    name: name.clone(),
                    holder: who.clone(),
                    mode,
                    ttl_ms: Some(ttl_ms),
                    details: serde_json::Value::Null,
                    wait_ms: 0,
                    limits: limits(),
                }),
            )
            .await;
        let complete = trace.now_ns();
        trace.log(&who, shown(&answer));
        let holder = match answer {
            Answer::Ok(Response::Locks(LockReply::Granted { holder })) => holder,
            _ => {
                pause(&mut rng).await;
                continue;
            }
        };
        let mut grant = Grant {
            process,
            name: name.clone(),
            mode,
            token: holder.token,
            acquire_invoke_ns: invoke,
            acquire_complete_ns: complete,
            proof: (invoke, ttl_ms),
            maybe: Vec::new(),
            release_invoke_ns: None,
            live_until_ns: None,
            lost_by_ns: None,
        };
        let mut ttl_ms = ttl_ms;
        for _ in 0..rng.random_range(0..4) {
            // Mostly well within the TTL; now and then past it, so the grant may expire.
            let wait = if rng.random_bool(0.85) {
                rng.random_range(0..ttl_ms * 3 / 5)
            } else {
                rng.random_range(ttl_ms..ttl_ms * 2)
            };
            tokio::time::sleep(Duration::from_millis(wait)).await;
            if mode == LockMode::Write && rng.random_bool(0.5) {
                let node = via(&mut rng);
                let invoke = trace.now_ns();
                match fenced_write(&cluster, node, &who, &name, grant.token).await {
                    Ok(revision) => {
                        grant.live_until_ns = Some(invoke);
                        fenced.push(FencedWrite {
                            process,
                            name: name.clone(),
                            token: grant.token,
                            invoke_ns: invoke,
                            revision,
                        });
                    }
                    Err(true) => {
                        grant.lost_by_ns = Some(trace.now_ns());
                        break;
                    }
                    Err(false) => {}
                }
                continue;
            }
            let next_ttl = rng.random_range(200..1_200);
            let node = via(&mut rng);
            trace.log(
                &who,
                format!(
                    "refresh {name} token {} ttl {next_ttl} ms via n{node}",
                    grant.token
                ),
            );
            let invoke = trace.now_ns();
            let answer = cluster
                .write(
                    node,
                    Command::Locks(LockCommand::Refresh {
                        name: name.clone(),
                        holder: who.clone(),
                        token: grant.token,
                        ttl_ms: Some(next_ttl),
                    }),
                )
                .await;
            let complete = trace.now_ns();
            trace.log(&who, shown(&answer));
            match answer {
                Answer::Ok(Response::Locks(LockReply::Refreshed { .. })) => {
                    grant.proof = (invoke, next_ttl);
                    grant.live_until_ns = Some(invoke);
                    ttl_ms = next_ttl;
                }
                Answer::Ok(Response::Rejected(Rejection::LockNotHeld { .. })) => {
                    grant.lost_by_ns = Some(complete);
                    break;
                }
                Answer::Unknown(_) => grant.maybe.push((invoke, next_ttl)),
                _ => {}
            }
        }
        if grant.lost_by_ns.is_none() && rng.random_bool(0.8) {
            let node = via(&mut rng);
            trace.log(
                &who,
                format!("release {name} token {} via n{node}", grant.token),
            );
            let invoke = trace.now_ns();
            grant.release_invoke_ns = Some(invoke);
            let answer = cluster
                .write(
                    node,
                    Command::Locks(LockCommand::Release {
                        name: name.clone(),
                        holder: who.clone(),
                        token: grant.token,
                    }),
                )
                .await;
            trace.log(&who, shown(&answer));
            match answer {
                Answer::Ok(Response::Locks(LockReply::Released { .. })) => {
                    grant.live_until_ns = Some(invoke);
                }
                Answer::Ok(Response::Rejected(Rejection::LockNotHeld { .. })) => {
                    grant.lost_by_ns = Some(trace.now_ns());
                }
                _ => {}
            }
        } else if grant.lost_by_ns.is_none() {
            trace.log(
                &who,
                format!("walks away from {name} token {}", grant.token),
            );
        }
        mine.push(grant);
        pause(&mut rng).await;
    }
    let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
    out.grants.extend(mine);
    out.fenced.extend(fenced);
}

/// Writes object `Guarded/default/<name>` fenced by `token` of lock `name` (updated, or created
/// the first time): its revision, or whether the fence refused it (`Err(true)`: the grant is
/// not live) or it failed otherwise.
async fn fenced_write(
    cluster: &Cluster,
    via: steward::raft::types::NodeId,
    who: &str,
    name: &str,
    token: u64,
) -> Result<u64, bool> {
    let trace = &cluster.trace;
    let mut object = Resource::new("v1", "Guarded", "default", name);
    object
        .metadata
        .annotations
        .insert("token".into(), token.to_string());
    let fence = || {
        Some(Fence {
            lock: name.to_string(),
            token,
        })
    };
    trace.log(who, format!("fenced write {name} token {token} via n{via}"));
    let mut answer = cluster
        .write(
            via,
            Command::Objects(ObjectCommand::Update {
                object: object.clone(),
                expected_revision: None,
                fence: fence(),
            }),
        )
        .await;
    if matches!(
        answer,
        Answer::Ok(Response::Rejected(Rejection::NotFound { .. }))
    ) {
        answer = cluster
            .write(
                via,
                Command::Objects(ObjectCommand::Create {
                    object,
                    fence: fence(),
                }),
            )
            .await;
    }
    trace.log(who, shown(&answer));
    match answer {
        Answer::Ok(Response::Objects(ObjectReply::Object { revision, .. })) => Ok(revision),
        Answer::Ok(Response::Rejected(Rejection::FenceRejected { .. })) => Err(true),
        _ => Err(false),
    }
}

async fn pause(rng: &mut SmallRng) {
    tokio::time::sleep(Duration::from_micros(rng.random_range(0..50_000))).await;
}

/// A node's default lock limits, carried in each acquire as the server does.
fn limits() -> LockLimits {
    let l = steward::config::LocksConfig::default();
    LockLimits {
        holders_max: l.holders_max,
        waiters_max: l.waiters_max,
        locks_max: l.locks_max,
        details_bytes_max: l.details_bytes_max,
    }
}

fn shown(answer: &Answer<Response>) -> String {
    match answer {
        Answer::Ok(Response::Rejected(r)) => format!("refused: {r}"),
        Answer::Ok(Response::Locks(LockReply::Granted { holder })) => format!(
            "granted token {}, expires at {:?}",
            holder.token, holder.expires_at_ms
        ),
        Answer::Ok(Response::Locks(LockReply::Refreshed { holder })) => {
            format!("refreshed, expires at {:?}", holder.expires_at_ms)
        }
        Answer::Ok(Response::Locks(LockReply::Released { token })) => {
            format!("released token {token}")
        }
        Answer::Ok(Response::Objects(ObjectReply::Object { revision, .. })) => {
            format!("written at revision {revision}")
        }
        Answer::Ok(r) => format!("ok {r:?}"),
        Answer::Fail(e) => format!("fail: {e}"),
        Answer::Unknown(e) => format!("unknown: {e}"),
    }
}

/// Everything the lock history proves wrong, one line each.
pub fn check(history: &LockHistory) -> Vec<String> {
    let grants = &history.grants;
    let mut found = Vec::new();
    // The mutex model, one lock at a time.
    let mut by_name: BTreeMap<&str, Vec<mutex::Grant>> = BTreeMap::new();
    for g in grants {
        by_name.entry(&g.name).or_default().push(mutex::Grant {
            process: g.process,
            mode: match g.mode {
                LockMode::Read => Mode::Read,
                LockMode::Write => Mode::Write,
            },
            token: g.token,
            acquire_invoke_ns: g.acquire_invoke_ns,
            acquire_complete_ns: g.acquire_complete_ns,
            live_until_ns: g.live_until_ns,
            possibly_until_ns: g.held_until_ns(),
        });
    }
    for (name, grants) in &by_name {
        let report = mutex::check(grants);
        for o in report.overlaps.iter().take(3) {
            found.push(format!("lock {name}: {o}"));
        }
        for t in report.token_inversions.iter().take(3) {
            found.push(format!("lock {name}: {t}"));
        }
    }
    // Never early.
    for g in grants {
        let until = g.held_until_ns();
        if let Some(lost) = g.lost_by_ns.filter(|&lost| lost < until) {
            found.push(format!(
                "lock lost early: {g} was refused as not held by {}",
                ms(lost)
            ));
        }
        let taken = grants.iter().find(|h| {
            g.conflicts(h) && h.acquire_invoke_ns > g.acquire_complete_ns && {
                h.acquire_complete_ns < until
            }
        });
        if let Some(h) = taken {
            found.push(format!("lock lost early: {g} was granted to another: {h}"));
        }
    }
    // Fencing: by revision, one lock's fenced writes never go back to an older token.
    let mut fenced: Vec<&FencedWrite> = history.fenced.iter().collect();
    fenced.sort_by_key(|w| (w.name.clone(), w.revision));
    for pair in fenced.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.name == b.name && b.token < a.token {
            found.push(format!(
                "fencing broken on lock {}: c{}'s write fenced by token {} took effect at \
                 revision {}, after c{}'s fenced by the newer token {} at revision {}",
                a.name, b.process, b.token, b.revision, a.process, a.token, a.revision
            ));
        }
    }
    found.truncate(10);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn history(grants: Vec<Grant>) -> LockHistory {
        LockHistory {
            grants,
            fenced: Vec::new(),
        }
    }

    #[test]
    fn a_write_fenced_by_an_older_token_after_a_newer_one_is_flagged() {
        let write = |process, token, revision| FencedWrite {
            process,
            name: "l0".into(),
            token,
            invoke_ns: 0,
            revision,
        };
        let ok = LockHistory {
            grants: Vec::new(),
            fenced: vec![write(1, 3, 10), write(2, 5, 12), write(2, 5, 13)],
        };
        assert_eq!(check(&ok), Vec::<String>::new());
        let broken = LockHistory {
            grants: Vec::new(),
            fenced: vec![write(1, 3, 14), write(2, 5, 12)],
        };
        let found = check(&broken);
        assert!(
            found.iter().any(|f| f.contains("fencing broken")),
            "{found:?}"
        );
    }

    fn grant(process: u64, mode: LockMode, token: u64, from_ms: u64, ttl_ms: u64) -> Grant {
        Grant {
            process,
            name: "l0".into(),
            mode,
            token,
            acquire_invoke_ns: from_ms * MS,
            acquire_complete_ns: (from_ms + 10) * MS,
            proof: (from_ms * MS, ttl_ms),
            maybe: Vec::new(),
            release_invoke_ns: None,
            live_until_ns: None,
            lost_by_ns: None,
        }
    }

    #[test]
    fn a_grant_taken_before_its_ttl_is_early_and_after_it_is_not() {
        let a = grant(1, LockMode::Write, 1, 0, 1_000);
        // 1 000 ms over a clock 1 % fast is 990.1 ms of real time.
        let early = grant(2, LockMode::Write, 2, 900, 500);
        let found = check(&history(vec![a.clone(), early]));
        assert!(
            found.iter().any(|f| f.contains("granted to another")),
            "{found:?}"
        );
        let late = grant(2, LockMode::Write, 2, 985, 500);
        assert_eq!(check(&history(vec![a.clone(), late])), Vec::<String>::new());
        // READ beside READ is no loss.
        let reader = |p, t| grant(p, LockMode::Read, t, 0, 1_000);
        let mut second = reader(2, 2);
        second.acquire_invoke_ns = 100 * MS;
        second.acquire_complete_ns = 110 * MS;
        assert_eq!(
            check(&history(vec![reader(1, 1), second])),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_release_or_a_shorter_refresh_of_unknown_outcome_ends_the_promise_sooner() {
        let mut a = grant(1, LockMode::Write, 1, 0, 1_000);
        a.release_invoke_ns = Some(400 * MS);
        let after = grant(2, LockMode::Write, 2, 450, 500);
        assert_eq!(
            check(&history(vec![a.clone(), after.clone()])),
            Vec::<String>::new()
        );
        let mut b = grant(1, LockMode::Write, 1, 0, 1_000);
        b.maybe.push((300 * MS, 100));
        assert_eq!(
            check(&history(vec![b.clone(), after])),
            Vec::<String>::new()
        );
        // Refused as not held before the promise ran out: early.
        let mut c = grant(1, LockMode::Write, 1, 0, 1_000);
        c.proof = (500 * MS, 1_000);
        c.lost_by_ns = Some(1_200 * MS);
        let found = check(&history(vec![c]));
        assert!(
            found.iter().any(|f| f.contains("refused as not held")),
            "{found:?}"
        );
    }
}
