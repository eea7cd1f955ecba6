//! The etcd-register workload: the register workload over etcd's KV API, as jepsen.etcd runs it
//! against etcd.
//!
//! Key k is the etcd key `/jepsen/r<k>`, holding its value in decimal. All keys are put with 0
//! before the clock starts (recorded as ok writes at time 0). A read is a linearizable Range; a
//! write is a Put; a compare-and-set reads the key and, when it holds the value expected, sends a
//! Txn that puts the new value only if the key is unchanged: half the time compared by value
//! (`value == expected`), half by the mod_revision read. A Txn that answers `succeeded: false`
//! is a definite failure; so is a CAS whose read already shows another value (nothing is sent).
//! One time in five the CAS expects a value it did not read, and then always sends the value
//! compare, which must fail. Values are unique per write, so a mod_revision that still matches
//! means the value is still the one read: both compares are the same CAS.
//!
//! The history is the register workload's, checked by the same linearizability checker.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use steward::proto::etcd::compare::TargetUnion;
use steward::proto::etcd::kv_client::KvClient;
use tonic::transport::Channel;
use tonic::Code;

use super::{equal, get, put, put_op, txn, value_of};
use crate::history::{Outcome, RegisterEvent, RegisterOp};
use crate::outcome::classify;
use crate::register::key_name;
use crate::rng::Rng;

/// The pause after an answer that the node is unavailable (down, cut off, no longer a member).
const BACKOFF: Duration = Duration::from_millis(100);

/// The etcd key of register `name`.
pub fn etcd_key(name: &str) -> String {
    format!("/jepsen/{name}")
}

/// Puts every key with value 0 and returns the matching history prefix.
pub async fn init(endpoint: &str, keys: u64) -> anyhow::Result<Vec<RegisterEvent>> {
    let mut kv = KvClient::new(super::channel(endpoint)?);
    let mut events = vec![];
    for k in 0..keys {
        let name = key_name(k);
        put(&mut kv, &etcd_key(&name), "0".into())
            .await
            .map_err(|e| anyhow::anyhow!("putting {}: {e}", etcd_key(&name)))?;
        events.push(RegisterEvent::initial(name, 0));
    }
    Ok(events)
}

/// One logical process bound to `endpoint`: random ops on random keys until `stop`.
pub async fn process(
    id: u64,
    endpoint: String,
    keys: u64,
    seed: u64,
    start: Instant,
    stop: Arc<std::sync::atomic::AtomicBool>,
    out: Arc<Mutex<Vec<RegisterEvent>>>,
) {
    let mut kv = match super::channel(&endpoint) {
        Ok(channel) => KvClient::new(channel),
        Err(e) => {
            tracing::error!(%endpoint, error = %e, "etcd-register: no channel");
            return;
        }
    };
    let mut rng = Rng::new(seed.wrapping_mul(1_000_003).wrapping_add(id));
    let mut next_value = (id as i64 + 1) * 1_000_000;
    let ns = |t: Instant| t.duration_since(start).as_nanos() as u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let name = key_name(rng.below(keys));
        let key = etcd_key(&name);
        let pick = rng.below(10);
        let mut ev = RegisterEvent {
            process: id,
            key: name,
            op: RegisterOp::Read,
            value: None,
            expected: None,
            read: None,
            outcome: Outcome::Ok,
            invoke_ns: ns(Instant::now()),
            complete_ns: 0,
            error: String::new(),
        };
        let error = if pick < 5 {
            match get(&mut kv, &key).await {
                Ok(found) => {
                    ev.read = Some(found.as_ref().and_then(value_of));
                    None
                }
                Err(e) => Some(fail(&mut ev, e)),
            }
        } else if pick < 8 {
            next_value += 1;
            ev.op = RegisterOp::Write;
            ev.value = Some(next_value);
            let put = put(&mut kv, &key, next_value.to_string()).await;
            put.err().map(|e| fail(&mut ev, e))
        } else {
            next_value += 1;
            ev.op = RegisterOp::Cas;
            ev.value = Some(next_value);
            cas(&mut kv, &key, &mut rng, &mut ev).await
        };
        ev.complete_ns = ns(Instant::now());
        out.lock().unwrap_or_else(|p| p.into_inner()).push(ev);
        // A node that is down answers at once; back off rather than fill the history.
        if error == Some(Code::Unavailable) {
            tokio::time::sleep(BACKOFF).await;
        } else if rng.below(4) == 0 {
            tokio::time::sleep(Duration::from_millis(rng.below(5))).await;
        }
    }
}

/// CAS: read, then a Txn guarded by the value or the mod_revision read. The code of the error
/// it met, if any.
async fn cas(
    kv: &mut KvClient<Channel>,
    key: &str,
    rng: &mut Rng,
    ev: &mut RegisterEvent,
) -> Option<Code> {
    let new = ev.value?;
    let current = match get(kv, key).await {
        Ok(found) => found,
        Err(e) => {
            // Nothing was written: a failed read makes the CAS a definite failure.
            ev.outcome = Outcome::Fail;
            ev.error = format!("read for cas: {:?}: {}", e.code(), e.message());
            return Some(e.code());
        }
    };
    let value = current.as_ref().and_then(value_of);
    let wrong = rng.below(5) == 0;
    let expected = match (value, wrong) {
        (Some(v), true) => v + 1,
        (Some(v), false) => v,
        (None, _) => 0,
    };
    ev.expected = Some(expected);
    let by_value = wrong || rng.below(2) == 0;
    let compare = match (&current, by_value) {
        (_, true) => equal(
            key,
            TargetUnion::Value(expected.to_string().into_bytes().into()),
        ),
        (Some(kv), false) if value == Some(expected) => {
            equal(key, TargetUnion::ModRevision(kv.mod_revision))
        }
        _ => {
            ev.outcome = Outcome::Fail;
            ev.error = "cas: value differs".into();
            return None;
        }
    };
    match txn(kv, vec![compare], vec![put_op(key, new.to_string(), 0)]).await {
        Ok(reply) if reply.succeeded => None,
        Ok(_) => {
            ev.outcome = Outcome::Fail;
            ev.error = match by_value {
                true => "cas: txn compare on the value failed".into(),
                false => "cas: txn compare on mod_revision failed".into(),
            };
            None
        }
        Err(e) => Some(fail(ev, e)),
    }
}

/// Records `e` on the event; its code.
fn fail(ev: &mut RegisterEvent, e: tonic::Status) -> Code {
    ev.outcome = classify(&e);
    ev.error = format!("{:?}: {}", e.code(), e.message());
    e.code()
}
