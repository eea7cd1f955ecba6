//! How `steward op ...` and `steward worker list` print operations and workers: tables for
//! people, JSON and YAML (proto field names in lowerCamelCase, raw millisecond times, params and
//! responses as JSON) for programs. Pure; no I/O, no clock: relative times are against the
//! state machine's time in the same reply (`now_ms`), or the operation's own last change.

use serde_json::{json, Value};

use super::lock_render::{ago, expiry, mode_name};
use super::render::Table;
use crate::client::{ListOperationsReply, ListWorkersReply, OperationInfo};
use crate::wire::operation_state_name as state_name;

fn target(op: &OperationInfo) -> String {
    format!("{}/{}/{}", op.kind, op.namespace, op.name)
}

/// The time of an operation's last change.
fn last_change_ms(op: &OperationInfo) -> u64 {
    op.transitions.last().map_or(op.submitted_ms, |t| t.time_ms)
}

fn json_or_text(text: &str) -> Value {
    if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
    }
}

/// ID VERB TARGET STATE ATTEMPT WORKER EPOCH CHANGED, one row per operation.
pub fn ops_table(ops: &[OperationInfo], now_ms: u64) -> Table {
    let mut table = Table::new(&[
        "ID", "VERB", "TARGET", "STATE", "ATTEMPT", "WORKER", "EPOCH", "CHANGED",
    ]);
    for op in ops {
        table.row(vec![
            op.id.clone(),
            op.verb.clone(),
            target(op),
            state_name(op.state),
            op.attempt.to_string(),
            op.worker.clone(),
            op.epoch.to_string(),
            ago(last_change_ms(op), now_ms.max(last_change_ms(op))),
        ]);
    }
    table
}

/// `op get` as text: the fields, then the transitions table.
pub fn op_text(op: &OperationInfo) -> String {
    let policy = op.policy.clone().unwrap_or_default();
    let lock = match policy.lock.as_str() {
        "" => "none".to_string(),
        name => format!("{name} ({})", mode_name(policy.lock_mode)),
    };
    let changed = last_change_ms(op);
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<17}{v}\n"));
    line("Id:", op.id.clone());
    line("Target:", target(op));
    line("Verb:", op.verb.clone());
    line("State:", state_name(op.state));
    line(
        "Attempt:",
        format!("{} of {}", op.attempt, policy.max_attempts),
    );
    line("Worker:", op.worker.clone());
    line("Epoch:", op.epoch.to_string());
    line("Lock:", lock);
    line("Deadline:", expiry(op.deadline_at_ms, changed));
    if !op.idempotency_key.is_empty() {
        line("Idempotency key:", op.idempotency_key.clone());
    }
    if !op.params_json.is_empty() {
        line("Params:", op.params_json.clone());
    }
    if !op.response_json.is_empty() {
        line("Response:", op.response_json.clone());
    }
    if !op.error.is_empty() {
        line("Error:", op.error.clone());
    }
    let mut table = Table::new(&["STATE", "ATTEMPT", "WORKER", "AT"]);
    for t in &op.transitions {
        table.row(vec![
            state_name(t.state),
            t.attempt.to_string(),
            t.worker.clone(),
            ago(t.time_ms, changed),
        ]);
    }
    out.push_str("Transitions:\n");
    out.push_str(&table.render());
    out
}

pub fn op_json(op: &OperationInfo) -> Value {
    let policy = op.policy.clone().unwrap_or_default();
    json!({
        "id": op.id,
        "idempotencyKey": op.idempotency_key,
        "target": {"kind": op.kind, "namespace": op.namespace, "name": op.name, "uid": op.target_uid},
        "verb": op.verb,
        "params": json_or_text(&op.params_json),
        "policy": {
            "lock": policy.lock,
            "lockMode": mode_name(policy.lock_mode),
            "maxAttempts": policy.max_attempts,
            "deadlineMs": policy.deadline_ms,
            "deletesTarget": policy.deletes_target,
        },
        "state": state_name(op.state),
        "attempt": op.attempt,
        "worker": op.worker,
        "epoch": op.epoch,
        "submittedMs": op.submitted_ms,
        "deadlineAtMs": op.deadline_at_ms,
        "transitions": op.transitions.iter().map(|t| json!({
            "state": state_name(t.state),
            "timeMs": t.time_ms,
            "attempt": t.attempt,
            "worker": t.worker,
        })).collect::<Vec<_>>(),
        "response": json_or_text(&op.response_json),
        "error": op.error,
    })
}

pub fn ops_json(reply: &ListOperationsReply) -> Value {
    json!({
        "operations": reply.operations.iter().map(op_json).collect::<Vec<_>>(),
        "nowMs": reply.now_ms,
    })
}

/// One watched change: `op-17 Director/default/d1 create in_progress attempt=1 worker=w1`.
pub fn event_line(op: &OperationInfo) -> String {
    let mut line = format!(
        "{} {} {} {} attempt={}",
        op.id,
        target(op),
        op.verb,
        state_name(op.state),
        op.attempt
    );
    if !op.worker.is_empty() {
        line.push_str(&format!(" worker={} epoch={}", op.worker, op.epoch));
    }
    line.push('\n');
    line
}

/// ID ALIVE CAPACITY ASSIGNED EXPIRES HANDLES.
pub fn workers_table(reply: &ListWorkersReply) -> Table {
    let mut table = Table::new(&["ID", "ALIVE", "CAPACITY", "ASSIGNED", "EXPIRES", "HANDLES"]);
    for w in &reply.workers {
        table.row(vec![
            w.id.clone(),
            if w.alive { "yes" } else { "no" }.to_string(),
            w.capacity.to_string(),
            w.assigned.len().to_string(),
            expiry(w.expires_at_ms, reply.now_ms),
            w.handles.join(","),
        ]);
    }
    table
}

pub fn workers_json(reply: &ListWorkersReply) -> Value {
    let workers: Vec<Value> = reply
        .workers
        .iter()
        .map(|w| {
            json!({
                "id": w.id,
                "handles": w.handles,
                "capacity": w.capacity,
                "ttlMs": w.ttl_ms,
                "registeredMs": w.registered_ms,
                "lastHeartbeatMs": w.last_heartbeat_ms,
                "expiresAtMs": w.expires_at_ms,
                "alive": w.alive,
                "assigned": w.assigned,
            })
        })
        .collect();
    json!({"workers": workers, "nowMs": reply.now_ms})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{OperationPolicy, OperationState, OperationTransition, WorkerInfo};

    fn op() -> OperationInfo {
        OperationInfo {
            id: "op-7".into(),
            kind: "Director".into(),
            namespace: "default".into(),
            name: "d1".into(),
            verb: "create".into(),
            params_json: r#"{"plan":"small"}"#.into(),
            policy: Some(OperationPolicy {
                lock: "Director/default/d1".into(),
                lock_mode: crate::client::LockMode::Write as i32,
                max_attempts: 3,
                deadline_ms: 0,
                deletes_target: false,
            }),
            state: OperationState::InProgress as i32,
            attempt: 1,
            worker: "w1".into(),
            epoch: 12,
            submitted_ms: 1_000,
            transitions: vec![
                OperationTransition {
                    state: OperationState::Queued as i32,
                    time_ms: 1_000,
                    attempt: 1,
                    worker: String::new(),
                },
                OperationTransition {
                    state: OperationState::InProgress as i32,
                    time_ms: 3_000,
                    attempt: 1,
                    worker: "w1".into(),
                },
            ],
            ..OperationInfo::default()
        }
    }

    #[test]
    fn operations_print_as_tables_lines_and_json() {
        let table = ops_table(&[op()], 5_000).render();
        assert_eq!(
            table,
            "ID     VERB     TARGET                STATE         ATTEMPT   WORKER   EPOCH   CHANGED\n\
             op-7   create   Director/default/d1   in_progress   1         w1       12      2s ago\n"
        );
        assert_eq!(
            event_line(&op()),
            "op-7 Director/default/d1 create in_progress attempt=1 worker=w1 epoch=12\n"
        );
        let text = op_text(&op());
        assert!(
            text.contains("Lock:            Director/default/d1 (WRITE)\n"),
            "{text}"
        );
        assert!(text.contains("Attempt:         1 of 3\n"), "{text}");
        let j = op_json(&op());
        assert_eq!(j["params"]["plan"], "small");
        assert_eq!(j["state"], "in_progress");
        assert_eq!(j["response"], Value::Null);
    }

    #[test]
    fn workers_print_alive_and_expiry_against_state_time() {
        let reply = ListWorkersReply {
            workers: vec![WorkerInfo {
                id: "w1".into(),
                handles: vec!["Director:create".into(), "Director:delete".into()],
                capacity: 2,
                ttl_ms: 10_000,
                expires_at_ms: 15_000,
                alive: true,
                assigned: vec!["op-7".into()],
                ..WorkerInfo::default()
            }],
            now_ms: 5_000,
        };
        assert_eq!(
            workers_table(&reply).render(),
            "ID   ALIVE   CAPACITY   ASSIGNED   EXPIRES   HANDLES\n\
             w1   yes     2          1          in 10s    Director:create,Director:delete\n"
        );
    }
}
