//! Tests of the operations checker: hand-made histories, each anomaly caught and each valid run passed.

use super::*;

fn submit(key: &str, id: &str, outcome: Outcome, created: bool) -> Record {
    Record::Submit(SubmitEvent {
        process: 0,
        key: key.into(),
        target: "t0".into(),
        verb: "update".into(),
        outcome,
        id: id.into(),
        created,
        repeat: false,
        invoke_ns: 0,
        complete_ns: 1,
        error: String::new(),
    })
}

fn delivery(op: &str, attempt: u32, epoch: u64, worker: &str) -> Record {
    Record::Delivery(Delivery {
        worker: worker.into(),
        op: op.into(),
        target: "t0".into(),
        attempt,
        epoch,
        abort: false,
        repeat: false,
        at_ns: 2,
    })
}

fn effect(op: &str, attempt: u32, epoch: u64, worker: &str, result: EffectResult) -> Record {
    Record::Effect(EffectEvent {
        worker: worker.into(),
        op: op.into(),
        target: "t0".into(),
        attempt,
        epoch,
        result,
        invoke_ns: 3,
        complete_ns: 4,
        error: String::new(),
    })
}

fn report_ev(op: &str, epoch: u64, worker: &str, outcome: Outcome, at: u64) -> Record {
    Record::Report(ReportEvent {
        worker: worker.into(),
        op: op.into(),
        attempt: 1,
        epoch,
        report: ReportKind::Succeeded,
        outcome,
        stale: outcome == Outcome::Fail,
        invoke_ns: at,
        complete_ns: at + 1,
        error: String::new(),
    })
}

fn entry(op: &str, attempt: u32, epoch: u64, worker: &str) -> EffectEntry {
    EffectEntry {
        op: op.into(),
        attempt,
        epoch,
        worker: worker.into(),
    }
}

fn final_op(id: &str, state: FinalState, attempt: u32, epoch: u64) -> FinalOp {
    FinalOp {
        id: id.into(),
        key: format!("k-{id}"),
        target: "t0".into(),
        verb: "update".into(),
        state,
        attempt,
        epoch,
        worker: "w1".into(),
    }
}

/// op-5 taken over once (w1 died after its effect in epoch 3; w2 ran it in epoch 7), then
/// op-9 in epoch 8.
fn valid_run() -> (
    Vec<Record>,
    Vec<FinalOp>,
    BTreeMap<String, Vec<EffectEntry>>,
) {
    let records = vec![
        submit("k-op-5", "op-5", Outcome::Ok, true),
        submit("k-op-5", "op-5", Outcome::Ok, false),
        submit("k-op-9", "", Outcome::Unknown, false),
        delivery("op-5", 1, 3, "w1"),
        effect("op-5", 1, 3, "w1", EffectResult::Ok),
        delivery("op-5", 2, 7, "w2"),
        delivery("op-5", 2, 7, "w2"),
        effect("op-5", 2, 7, "w2", EffectResult::Ok),
        report_ev("op-5", 7, "w2", Outcome::Ok, 5),
        delivery("op-9", 1, 8, "w2"),
        effect("op-9", 1, 8, "w2", EffectResult::Ok),
    ];
    let finals = vec![
        final_op("op-5", FinalState::Succeeded, 2, 7),
        final_op("op-9", FinalState::Succeeded, 1, 8),
    ];
    let log = vec![
        entry("op-5", 1, 3, "w1"),
        entry("op-5", 2, 7, "w2"),
        entry("op-9", 1, 8, "w2"),
    ];
    (records, finals, BTreeMap::from([("t0".to_string(), log)]))
}

#[test]
fn a_takeover_with_one_effect_per_epoch_is_valid() {
    let (records, finals, logs) = valid_run();
    let report = check(&records, &finals, &logs);
    assert!(report.valid(), "{report:?}");
    assert_eq!(report.attempts_over_one, 1);
    assert_eq!(report.repeated_submits_ok, 0);
    assert!(report.settled);
}

#[test]
fn a_double_effect_in_one_epoch_is_invalid() {
    let (mut records, finals, mut logs) = valid_run();
    records.push(effect("op-5", 2, 7, "w2", EffectResult::Ok));
    let report = check(&records, &finals, &logs);
    assert!(
        matches!(report.anomalies[..], [Anomaly::DoubleEffect { ref op, epoch: 7, acknowledged: 2, in_log: 1 }] if op == "op-5"),
        "{report:?}"
    );
    // The same seen only in the log (an unacknowledged write applied next to an acked one).
    let (records, _, _) = valid_run();
    logs.get_mut("t0")
        .expect("log")
        .insert(2, entry("op-5", 2, 7, "w2"));
    let report = check(&records, &finals, &logs);
    assert!(!report.valid());
    assert!(report
        .anomalies
        .iter()
        .any(|a| matches!(a, Anomaly::DoubleEffect { in_log: 2, .. })));
}

#[test]
fn a_stuck_or_missing_operation_is_invalid() {
    let (records, mut finals, logs) = valid_run();
    finals[1].state = FinalState::Other("InProgress".into());
    let report = check(&records, &finals, &logs);
    assert!(!report.settled);
    assert_eq!(
        report.anomalies,
        vec![Anomaly::Stuck {
            id: "op-9".into(),
            state: "InProgress".into()
        }]
    );
    let (records, mut finals, logs) = valid_run();
    finals.remove(0);
    let report = check(&records, &finals, &logs);
    assert!(report
        .anomalies
        .iter()
        .any(|a| matches!(a, Anomaly::Missing { id, .. } if id == "op-5")));
}

#[test]
fn a_repeated_key_answering_another_id_is_invalid() {
    let (mut records, finals, logs) = valid_run();
    records.push(submit("k-op-5", "op-6", Outcome::Ok, false));
    let report = check(&records, &finals, &logs);
    assert!(report.anomalies.iter().any(|a| matches!(a,
        Anomaly::IdempotencyMismatch { key, ids } if key == "k-op-5" && ids.len() == 2)));
    let (mut records, finals, logs) = valid_run();
    records.push(submit("k-op-5", "op-5", Outcome::Ok, true));
    let report = check(&records, &finals, &logs);
    assert!(report
        .anomalies
        .iter()
        .any(|a| matches!(a, Anomaly::CreatedTwice { .. })));
}

#[test]
fn a_fenced_out_worker_or_a_shared_epoch_is_invalid() {
    // The old holder's write landed after the new holder's.
    let (records, finals, mut logs) = valid_run();
    logs.get_mut("t0").expect("log").swap(0, 1);
    let report = check(&records, &finals, &logs);
    assert!(report
        .anomalies
        .iter()
        .any(|a| matches!(a, Anomaly::TargetOrder { .. })));
    // One epoch delivered to two workers; epochs going back with attempts.
    let (mut records, finals, logs) = valid_run();
    records.push(delivery("op-5", 2, 7, "w3"));
    records.push(delivery("op-5", 3, 6, "w3"));
    let report = check(&records, &finals, &logs);
    assert!(report
        .anomalies
        .iter()
        .any(|a| matches!(a, Anomaly::DeliveredTwice { .. })));
    assert!(report
        .anomalies
        .iter()
        .any(|a| matches!(a, Anomaly::EpochOrder { .. })));
    // A success accepted after the store refused that assignment's fence.
    let (mut records, finals, logs) = valid_run();
    records.push(effect("op-5", 1, 3, "w1", EffectResult::FenceRefused));
    records.push(report_ev("op-5", 3, "w1", Outcome::Ok, 10));
    let report = check(&records, &finals, &logs);
    assert!(report
        .anomalies
        .iter()
        .any(|a| matches!(a, Anomaly::ReportAfterFenceRefused { .. })));
}

#[test]
fn lost_and_missing_effects_are_invalid() {
    let (records, finals, mut logs) = valid_run();
    logs.get_mut("t0").expect("log").pop();
    let report = check(&records, &finals, &logs);
    assert!(report
        .anomalies
        .iter()
        .any(|a| matches!(a, Anomaly::LostEffect { .. })));
    assert!(report
        .anomalies
        .iter()
        .any(|a| matches!(a, Anomaly::SucceededWithoutEffect { .. })));
}
