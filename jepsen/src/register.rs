//! The register workload: per-key reads, writes and compare-and-set on steward resources.
//!
//! Key k is the object `Register/default/r<k>` with `spec.value`. All keys are created with value
//! 0 before the clock starts (recorded as ok writes at time 0). A write is an Update without a
//! precondition; a CAS reads the object and, if its value is the expected one, updates it with
//! the revision it read as precondition (Aborted = the CAS failed, definitely). Reads are
//! linearizable gets. Each logical process is bound to one node, as Jepsen clients are.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use steward::client::{Client, Consistency};

use crate::checker::{self, Verdict};
use crate::finding::{self, write_jsonl, Counts, Finding};
use crate::history::{Outcome, RegisterEvent, RegisterOp};
use crate::outcome::classify;
use crate::rng::Rng;

pub const KIND: &str = "Register";

fn object(key: &str, value: i64) -> Value {
    json!({"kind": KIND, "apiVersion": "jepsen/v1", "metadata": {"name": key}, "spec": {"value": value}})
}

fn value_of(obj: &Value) -> Option<i64> {
    obj["spec"]["value"].as_i64()
}

pub fn key_name(k: u64) -> String {
    format!("r{k}")
}

/// Creates every key with value 0 and returns the matching history prefix.
pub async fn init(client: &Client, keys: u64) -> anyhow::Result<Vec<RegisterEvent>> {
    let mut events = vec![];
    for k in 0..keys {
        let key = key_name(k);
        client
            .create(&object(&key, 0))
            .await
            .map_err(|e| anyhow::anyhow!("creating {key}: {e}"))?;
        events.push(RegisterEvent::initial(key, 0));
    }
    Ok(events)
}

/// One logical process: random ops on random keys until `stop`, recorded into `out`.
pub async fn process(
    id: u64,
    client: Client,
    keys: u64,
    seed: u64,
    start: Instant,
    stop: Arc<std::sync::atomic::AtomicBool>,
    out: Arc<Mutex<Vec<RegisterEvent>>>,
) {
    let mut rng = Rng::new(seed.wrapping_mul(1_000_003).wrapping_add(id));
    let mut next_value = (id as i64 + 1) * 1_000_000;
    let ns = |t: Instant| t.duration_since(start).as_nanos() as u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let key = key_name(rng.below(keys));
        let pick = rng.below(10);
        let invoke = Instant::now();
        let mut ev = RegisterEvent {
            process: id,
            key: key.clone(),
            op: RegisterOp::Read,
            value: None,
            expected: None,
            read: None,
            outcome: Outcome::Ok,
            invoke_ns: ns(invoke),
            complete_ns: 0,
            error: String::new(),
        };
        if pick < 5 {
            match client
                .get(KIND, "default", &key, Consistency::Linearizable)
                .await
            {
                Ok(obj) => ev.read = Some(value_of(&obj)),
                Err(e) if e.code() == tonic::Code::NotFound => ev.read = Some(None),
                Err(e) => fail(&mut ev, &e),
            }
        } else if pick < 8 {
            next_value += 1;
            ev.op = RegisterOp::Write;
            ev.value = Some(next_value);
            if let Err(e) = client.update(&object(&key, next_value), 0).await {
                fail(&mut ev, &e);
            }
        } else {
            next_value += 1;
            ev.op = RegisterOp::Cas;
            ev.value = Some(next_value);
            cas(&client, &key, &mut rng, &mut ev).await;
        }
        ev.complete_ns = ns(Instant::now());
        out.lock().unwrap_or_else(|p| p.into_inner()).push(ev);
        if rng.below(4) == 0 {
            tokio::time::sleep(Duration::from_millis(rng.below(5))).await;
        }
    }
}

/// CAS: read, and if the value is the one we expect, update guarded by the revision read.
async fn cas(client: &Client, key: &str, rng: &mut Rng, ev: &mut RegisterEvent) {
    let current = match client
        .get(KIND, "default", key, Consistency::Linearizable)
        .await
    {
        Ok(obj) => obj,
        Err(e) => {
            // Nothing was written: a failed read makes the CAS a definite failure.
            ev.outcome = Outcome::Fail;
            ev.error = format!("read for cas: {e}");
            return;
        }
    };
    let value = value_of(&current);
    // Expect the value we saw most of the time, sometimes a wrong one (a CAS that must fail).
    let expected = match (value, rng.below(5)) {
        (Some(v), 0) => v + 1,
        (Some(v), _) => v,
        (None, _) => 0,
    };
    ev.expected = Some(expected);
    if value != Some(expected) {
        ev.outcome = Outcome::Fail;
        ev.error = "cas: value differs".into();
        return;
    }
    let rv: u64 = current["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let Some(new) = ev.value else { return };
    if let Err(e) = client.update(&object(key, new), rv.max(1)).await {
        fail(ev, &e);
    }
}

fn fail(ev: &mut RegisterEvent, e: &tonic::Status) {
    ev.outcome = classify(e);
    ev.error = format!("{:?}: {}", e.code(), e.message());
}

/// Sorts the history, writes it to `history_file`, and checks it for linearizability within
/// `limit` (UNKNOWN past it); `workload` starts the summary line.
pub fn finding(
    workload: &str,
    mut history: Vec<RegisterEvent>,
    limit: Duration,
    history_file: &std::path::Path,
) -> anyhow::Result<Finding> {
    history.sort_by_key(|e| (e.invoke_ns, e.complete_ns));
    write_jsonl(history_file, &history)?;
    let (verdict, stats) = checker::check_register(&history, limit);
    let counts = Counts::of(history.iter().map(|e| e.outcome));
    let invalid = matches!(verdict, Verdict::Invalid { .. });
    let (word, code) = finding::verdict(matches!(verdict, Verdict::Valid), invalid);
    let anomalies = usize::from(invalid);
    // The initial writes (process u64::MAX) are not the clients'.
    let client_ops: Vec<&RegisterEvent> =
        history.iter().filter(|e| e.process != u64::MAX).collect();
    Ok(Finding {
        summary: format!(
            "{workload}: {} ops ({counts}), {} keys, {} states explored in {:?}, anomalies {anomalies}: {word}",
            history.len(),
            stats.keys,
            stats.states_explored,
            stats.elapsed
        ),
        report: checker::render(&verdict),
        code,
        points: finding::points(&client_ops, |e| (e.invoke_ns, e.complete_ns, e.outcome)),
    })
}
