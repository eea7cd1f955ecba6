//! The register workload: clients read, write and compare-and-set a few keys of the etcd
//! keyspace through any node, one call at a time each. Their history is checked for
//! linearizability by the fault-injection suite's checker (`jepsen::checker`), and the
//! revisions of acknowledged writes must grow in real-time order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jepsen::history::{Outcome, RegisterEvent, RegisterOp};
use rand::rngs::SmallRng;
use rand::RngExt;
use steward::state::kv::{
    Bytes, Compare, CompareOp, CompareTarget, KvCommand, KvReply, PutOp, RangeOp, RequestOp, Txn,
};
use steward::state::{Command, Response, State};

use crate::cluster::{Answer, Cluster};

/// An acknowledged write: when it ran and the revision it got.
#[derive(Clone, Debug)]
pub struct AckedWrite {
    pub process: u64,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    pub revision: u64,
}

/// What the clients saw.
#[derive(Default)]
pub struct Histories {
    pub events: Vec<RegisterEvent>,
    pub writes: Vec<AckedWrite>,
}

fn key(k: u64) -> Bytes {
    Bytes::from(jepsen::register::key_name(k))
}

fn value_of(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

fn read_key(state: &State, key: &Bytes) -> Result<Option<i64>, String> {
    let op = RangeOp {
        key: key.clone(),
        ..Default::default()
    };
    let found = state
        .kv()
        .range(&op, state.revision())
        .map_err(|e| e.to_string())?;
    match found.kvs.first() {
        None => Ok(None),
        Some(kv) => value_of(&kv.value)
            .map(Some)
            .ok_or_else(|| format!("not a number: {:?}", kv.value)),
    }
}

/// One client: calls until `until` (simulated), recording each call once it ends.
pub async fn client(
    cluster: Arc<Cluster>,
    process: u64,
    mut rng: SmallRng,
    keys: u64,
    until: tokio::time::Instant,
    out: Arc<Mutex<Histories>>,
) {
    let who = format!("c{process}");
    let trace = cluster.trace.clone();
    let mut next = 0i64;
    let mut seen = std::collections::BTreeMap::new();
    while tokio::time::Instant::now() < until {
        let k = rng.random_range(0..keys);
        let via = cluster.ids[rng.random_range(0..cluster.ids.len())];
        let roll = rng.random_range(0..10);
        let invoke_ns = trace.now_ns();
        next += 1;
        let value = i64::try_from(process).unwrap_or(0) * 1_000_000 + next;
        let mut event = RegisterEvent {
            process,
            key: jepsen::register::key_name(k),
            op: RegisterOp::Read,
            value: None,
            expected: None,
            read: None,
            outcome: Outcome::Unknown,
            invoke_ns,
            complete_ns: 0,
            error: String::new(),
        };
        let mut revision = None;
        if roll < 5 {
            trace.log(&who, format!("read {} via n{via}", event.key));
            let key = key(k);
            match cluster.read(via, move |s| read_key(s, &key)).await {
                Answer::Ok(Ok(v)) => {
                    event.outcome = Outcome::Ok;
                    event.read = Some(v);
                    if let Some(v) = v {
                        seen.insert(k, v);
                    }
                }
                Answer::Ok(Err(e)) => {
                    event.outcome = Outcome::Unknown;
                    event.error = e;
                }
                Answer::Fail(e) => {
                    event.outcome = Outcome::Fail;
                    event.error = e;
                }
                Answer::Unknown(e) => event.error = e,
            }
        } else {
            let put = RequestOp::Put(PutOp {
                key: key(k),
                value: Bytes::from(value.to_string()),
                ..Default::default()
            });
            let mut txn = Txn {
                success: vec![put],
                ..Default::default()
            };
            event.value = Some(value);
            if roll < 8 {
                event.op = RegisterOp::Write;
                trace.log(&who, format!("write {} {value} via n{via}", event.key));
            } else {
                // The value this client last saw there, as a client of a register would.
                let expected = seen.get(&k).copied().unwrap_or(value - 1);
                event.op = RegisterOp::Cas;
                event.expected = Some(expected);
                txn.compare = vec![Compare {
                    key: key(k),
                    range_end: Bytes::new(),
                    op: CompareOp::Equal,
                    target: CompareTarget::Value(Bytes::from(expected.to_string())),
                }];
                trace.log(
                    &who,
                    format!("cas {} {expected}->{value} via n{via}", event.key),
                );
            }
            let command = Command::Kv(KvCommand::Txn(txn));
            match cluster.write(via, command).await {
                Answer::Ok(Response::Kv(KvReply::Txn(result))) if result.succeeded => {
                    event.outcome = Outcome::Ok;
                    revision = Some(result.revision);
                    seen.insert(k, value);
                }
                Answer::Ok(Response::Kv(KvReply::Txn(_))) => {
                    event.outcome = Outcome::Fail;
                    event.error = "compare failed".into();
                }
                Answer::Ok(Response::Rejected(r)) => {
                    event.outcome = Outcome::Fail;
                    event.error = r.to_string();
                }
                Answer::Ok(other) => {
                    event.error = format!("unexpected answer {other:?}");
                }
                Answer::Fail(e) => {
                    event.outcome = Outcome::Fail;
                    event.error = e;
                }
                Answer::Unknown(e) => event.error = e,
            }
        }
        event.complete_ns = trace.now_ns();
        let shown = match (event.outcome, &event.read) {
            (Outcome::Ok, Some(v)) => format!("ok {v:?}"),
            (Outcome::Ok, None) => format!("ok rev {}", revision.unwrap_or(0)),
            (Outcome::Fail, _) => format!("fail: {}", event.error),
            (Outcome::Unknown, _) => format!("unknown: {}", event.error),
        };
        trace.log(&who, shown);
        {
            let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(revision) = revision {
                out.writes.push(AckedWrite {
                    process,
                    invoke_ns,
                    complete_ns: event.complete_ns,
                    revision,
                });
            }
            out.events.push(event);
        }
        tokio::time::sleep(Duration::from_micros(rng.random_range(0..20_000))).await;
    }
}

/// Acknowledged writes must take revisions in real-time order: one that completed before
/// another was invoked has the smaller revision.
pub fn check_revisions(writes: &[AckedWrite]) -> Option<String> {
    let mut by_complete: Vec<&AckedWrite> = writes.iter().collect();
    by_complete.sort_by_key(|w| (w.complete_ns, w.revision));
    let mut by_invoke: Vec<&AckedWrite> = writes.iter().collect();
    by_invoke.sort_by_key(|w| (w.invoke_ns, w.revision));
    let mut done = 0;
    let mut highest: Option<&AckedWrite> = None;
    for w in by_invoke {
        while done < by_complete.len() && by_complete[done].complete_ns < w.invoke_ns {
            let c = by_complete[done];
            if highest.is_none_or(|h| c.revision > h.revision) {
                highest = Some(c);
            }
            done += 1;
        }
        if let Some(h) = highest {
            if w.revision <= h.revision {
                return Some(format!(
                    "revisions out of real-time order: c{}'s write acknowledged at revision {} \
                     (done at {} ns) before c{}'s write began (at {} ns), which got revision {}",
                    h.process, h.revision, h.complete_ns, w.process, w.invoke_ns, w.revision
                ));
            }
        }
    }
    None
}
