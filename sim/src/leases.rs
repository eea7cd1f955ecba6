//! The lease workload: clients take etcd leases (the keyspace's `LeaseGrant`) through any node,
//! attach a key to each, keep them alive a few times (now and then too late), read the key, and
//! then revoke them or walk away, so they expire under the leader's lease sweeper. Checked at
//! the end, never early (README "Time"): a lease is not found gone (a keep-alive answered that
//! it no longer exists, a put refused for want of it, or a linearizable read that no longer
//! finds its key) before its last acknowledged grant or keep-alive was invoked plus its TTL, on
//! real time, less what the leaders' monotonic clocks may drift ([`DRIFT_MAX`]), unless its
//! holder asked to revoke it first.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::RngExt;
use steward::state::kv::{Bytes, KvCommand, KvError, KvReply, PutOp, RangeOp, RequestOp, Txn};
use steward::state::{Command, Rejection, Response, State};

use crate::clock::DRIFT_MAX;
use crate::cluster::{Answer, Cluster};

/// One acknowledged lease and what its holder learned of it afterwards.
#[derive(Clone, Debug)]
pub struct Lease {
    pub process: u64,
    pub id: i64,
    /// The last acknowledged grant or keep-alive: when it was invoked and the TTL it answered.
    /// A keep-alive of unknown outcome can only have moved the end later (the TTL is the
    /// lease's own), so it does not count.
    pub proof: (u64, u64),
    /// When its holder first asked to revoke it (whatever the answer).
    pub revoke_invoke_ns: Option<u64>,
    /// When a call that found it gone completed, and which call: it had ended by then.
    pub lost: Option<(u64, &'static str)>,
}

impl Lease {
    /// Real time before which it may not end: its last proof's invocation plus its TTL over the
    /// fastest a clock may run, or its revocation, whichever is first.
    fn held_until_ns(&self) -> u64 {
        let (invoke, ttl_ms) = self.proof;
        let by_ttl = invoke + (ttl_ms as f64 * 1e6 / (1.0 + DRIFT_MAX)) as u64;
        self.revoke_invoke_ns.map_or(by_ttl, |r| r.min(by_ttl))
    }
}

fn ms(ns: u64) -> String {
    format!("{}.{:03}s", ns / 1_000_000_000, (ns / 1_000_000) % 1_000)
}

impl std::fmt::Display for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (invoke, ttl) = self.proof;
        write!(
            f,
            "c{}'s lease {:x} (last proof invoked {} with TTL {ttl} ms, held until at least {})",
            self.process,
            self.id,
            ms(invoke),
            ms(self.held_until_ns())
        )
    }
}

/// The key attached to lease `id`, as the trace shows it.
fn key_name(id: i64) -> String {
    format!("lease/{id:x}")
}

/// The key attached to lease `id`.
fn key_of(id: i64) -> Bytes {
    Bytes::from(key_name(id))
}

/// Whether `key` exists in `state`.
fn exists(state: &State, key: &Bytes) -> Result<bool, String> {
    let op = RangeOp {
        key: key.clone(),
        ..Default::default()
    };
    let found = state
        .kv()
        .range(&op, state.revision())
        .map_err(|e| e.to_string())?;
    Ok(!found.kvs.is_empty())
}

fn lease_gone(answer: &Answer<Response>) -> bool {
    matches!(
        answer,
        Answer::Ok(Response::Rejected(Rejection::Kv(KvError::LeaseNotFound)))
    )
}

/// One client holding at most one lease at a time, under the name `c<process>`.
pub async fn client(
    cluster: Arc<Cluster>,
    process: u64,
    mut rng: SmallRng,
    until: tokio::time::Instant,
    out: Arc<Mutex<Vec<Lease>>>,
) {
    let who = format!("c{process}");
    let trace = cluster.trace.clone();
    let via = |rng: &mut SmallRng| cluster.ids[rng.random_range(0..cluster.ids.len())];
    let mut mine: Vec<Lease> = Vec::new();
    let mut next: i64 = 0;
    while tokio::time::Instant::now() < until {
        next += 1;
        // Unique per client and per try: a grant of unknown outcome may have taken its id.
        let id = (i64::try_from(process).unwrap_or(0) << 32) | next;
        let ttl_ms = rng.random_range(200..1_200);
        let node = via(&mut rng);
        trace.log(
            &who,
            format!("grant lease {id:x} ttl {ttl_ms} ms via n{node}"),
        );
        let invoke = trace.now_ns();
        let answer = cluster
            .write(node, Command::Kv(KvCommand::LeaseGrant { id, ttl_ms }))
            .await;
        trace.log(&who, shown(&answer));
        let ttl_ms = match answer {
            Answer::Ok(Response::Kv(KvReply::Lease { ttl_ms, .. })) => ttl_ms,
            _ => {
                pause(&mut rng).await;
                continue;
            }
        };
        let mut lease = Lease {
            process,
            id,
            proof: (invoke, ttl_ms),
            revoke_invoke_ns: None,
            lost: None,
        };
        let mut attached = false;
        for round in 0..rng.random_range(1..5) {
            if round > 0 {
                // Mostly well within the TTL; now and then past it, so the lease may end.
                let wait = if rng.random_bool(0.85) {
                    rng.random_range(0..ttl_ms * 3 / 5)
                } else {
                    rng.random_range(ttl_ms..ttl_ms * 2)
                };
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            let node = via(&mut rng);
            if !attached {
                trace.log(
                    &who,
                    format!("put {} with lease {id:x} via n{node}", key_name(id)),
                );
                let put = RequestOp::Put(PutOp {
                    key: key_of(id),
                    value: Bytes::from(who.clone()),
                    lease: id,
                    ..Default::default()
                });
                let txn = Txn {
                    success: vec![put],
                    ..Default::default()
                };
                let answer = cluster.write(node, Command::Kv(KvCommand::Txn(txn))).await;
                let complete = trace.now_ns();
                trace.log(&who, shown(&answer));
                if lease_gone(&answer) {
                    lease.lost = Some((complete, "a put with it was refused: lease not found"));
                    break;
                }
                attached = matches!(answer, Answer::Ok(Response::Kv(KvReply::Txn(_))));
            } else if rng.random_bool(0.3) {
                trace.log(&who, format!("read {} via n{node}", key_name(id)));
                let key = key_of(id);
                let answer = cluster.read(node, move |s| exists(s, &key)).await;
                let complete = trace.now_ns();
                match answer {
                    Answer::Ok(Ok(true)) => trace.log(&who, "ok: the key is there"),
                    Answer::Ok(Ok(false)) => {
                        trace.log(&who, "ok: the key is gone");
                        lease.lost = Some((complete, "a read no longer found its key"));
                        break;
                    }
                    Answer::Ok(Err(e)) | Answer::Fail(e) => trace.log(&who, format!("fail: {e}")),
                    Answer::Unknown(e) => trace.log(&who, format!("unknown: {e}")),
                }
            } else {
                trace.log(&who, format!("keep lease {id:x} alive via n{node}"));
                let invoke = trace.now_ns();
                let answer = cluster
                    .write(
                        node,
                        Command::Kv(KvCommand::LeaseKeepAlives { ids: vec![id] }),
                    )
                    .await;
                let complete = trace.now_ns();
                trace.log(&who, shown(&answer));
                match answer {
                    Answer::Ok(Response::Kv(KvReply::LeasesKept { ttls_ms, .. })) => {
                        match ttls_ms.first().copied().flatten() {
                            Some(ttl) => lease.proof = (invoke, ttl),
                            None => {
                                lease.lost = Some((complete, "a keep-alive found it gone"));
                                break;
                            }
                        }
                    }
                    answer if lease_gone(&answer) => {
                        lease.lost = Some((complete, "a keep-alive found it gone"));
                        break;
                    }
                    _ => {}
                }
            }
        }
        if lease.lost.is_none() && rng.random_bool(0.7) {
            let node = via(&mut rng);
            trace.log(&who, format!("revoke lease {id:x} via n{node}"));
            lease.revoke_invoke_ns = Some(trace.now_ns());
            let answer = cluster
                .write(node, Command::Kv(KvCommand::LeaseRevoke { id }))
                .await;
            trace.log(&who, shown(&answer));
        } else if lease.lost.is_none() {
            trace.log(&who, format!("walks away from lease {id:x}"));
        }
        mine.push(lease);
        pause(&mut rng).await;
    }
    out.lock().unwrap_or_else(|p| p.into_inner()).extend(mine);
}

async fn pause(rng: &mut SmallRng) {
    tokio::time::sleep(Duration::from_micros(rng.random_range(0..50_000))).await;
}

fn shown(answer: &Answer<Response>) -> String {
    match answer {
        Answer::Ok(Response::Rejected(r)) => format!("refused: {r}"),
        Answer::Ok(Response::Kv(KvReply::Lease { ttl_ms, .. })) => {
            format!("granted, ttl {ttl_ms} ms")
        }
        Answer::Ok(Response::Kv(KvReply::LeasesKept { ttls_ms, .. })) => {
            format!("kept alive: {ttls_ms:?}")
        }
        Answer::Ok(Response::Kv(KvReply::LeasesEnded { ids, revision })) => {
            format!("ended {ids:x?} at revision {revision}")
        }
        Answer::Ok(Response::Kv(KvReply::Txn(t))) => format!("written at revision {}", t.revision),
        Answer::Ok(r) => format!("ok {r:?}"),
        Answer::Fail(e) => format!("fail: {e}"),
        Answer::Unknown(e) => format!("unknown: {e}"),
    }
}

/// Every lease that ended early, one line each.
pub fn check(leases: &[Lease]) -> Vec<String> {
    let mut found: Vec<String> = leases
        .iter()
        .filter_map(|l| {
            let (lost, how) = l.lost?;
            (lost < l.held_until_ns())
                .then(|| format!("lease ended early: {l}: {how} by {}", ms(lost)))
        })
        .collect();
    found.truncate(10);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn lease(proof_ms: u64, ttl_ms: u64, lost_ms: Option<u64>) -> Lease {
        Lease {
            process: 1,
            id: 7,
            proof: (proof_ms * MS, ttl_ms),
            revoke_invoke_ns: None,
            lost: lost_ms.map(|l| (l * MS, "a keep-alive found it gone")),
        }
    }

    #[test]
    fn a_lease_found_gone_before_its_ttl_is_early_and_after_it_or_a_revoke_is_not() {
        // 1 000 ms over a clock 1 % fast is 990.1 ms of real time.
        let found = check(&[lease(100, 1_000, Some(1_080))]);
        assert!(found.iter().any(|f| f.contains("ended early")), "{found:?}");
        assert_eq!(
            check(&[lease(100, 1_000, Some(1_095))]),
            Vec::<String>::new()
        );
        assert_eq!(check(&[lease(100, 1_000, None)]), Vec::<String>::new());
        let mut revoked = lease(100, 1_000, Some(500));
        revoked.revoke_invoke_ns = Some(400 * MS);
        assert_eq!(check(&[revoked]), Vec::<String>::new());
    }
}
