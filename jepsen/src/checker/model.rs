//! The register model, and the preparation of one key's history for the search.
//!
//! Pure: no clock, no I/O. Called by `checker::check_register` (per key) and by `render` (to
//! replay a linearization).

use std::collections::{HashMap, HashSet};

use crate::history::{Outcome, RegisterEvent, RegisterOp};

/// What a register holds; `None` = the key is absent (the initial state).
pub type Value = Option<i64>;

/// The effect of one operation on the register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A read that returned this value.
    Read(Value),
    /// An unconditional write. `None` would delete the key; the workload never sends it, but the
    /// model stays total instead of rejecting it.
    Write(Value),
    /// A compare-and-set that took effect iff the register held `expected`. The brief's
    /// "current == Some(expected)" generalised to the recorded `Option`: `expected: None` means
    /// "only if absent" (create-if-absent).
    Cas { expected: Value, value: Value },
}

impl Step {
    /// The state after this step, or `None` if the step cannot happen in `state`.
    pub fn apply(self, state: Value) -> Option<Value> {
        match self {
            Step::Read(seen) => (seen == state).then_some(state),
            Step::Write(value) => Some(value),
            Step::Cas { expected, value } => (expected == state).then_some(value),
        }
    }

    /// The value this step makes current, if it sets one.
    fn sets(self) -> Option<Value> {
        match self {
            Step::Read(_) => None,
            Step::Write(value) | Step::Cas { value, .. } => Some(value),
        }
    }

    /// The value this step needs to see, if it observes the state.
    fn observes(self) -> Option<Value> {
        match self {
            Step::Read(seen) => Some(seen),
            Step::Write(_) => None,
            Step::Cas { expected, .. } => Some(expected),
        }
    }
}

/// The model step of a recorded event. `None` for an ok read without a recorded value (the only
/// shape of event that cannot be checked; `prepare` reports it as malformed).
pub fn step_of(event: &RegisterEvent) -> Option<Step> {
    match event.op {
        RegisterOp::Read => event.read.map(Step::Read).or_else(|| {
            // An unknown or failed read legitimately has nothing recorded.
            (event.outcome != Outcome::Ok).then_some(Step::Read(None))
        }),
        RegisterOp::Write => Some(Step::Write(event.value)),
        RegisterOp::Cas => Some(Step::Cas {
            expected: event.expected,
            value: event.value,
        }),
    }
}

/// One operation the search must place (`Ok`) or may place (`Unknown`).
#[derive(Clone, Debug)]
pub struct SearchOp {
    /// Index into the key's history (invoke order), for the report.
    pub index: usize,
    pub step: Step,
    pub invoke_ns: u64,
    /// `None` = unknown outcome: it may take effect at any time after invoke, or never.
    pub complete_ns: Option<u64>,
}

impl SearchOp {
    /// Must be linearized (acknowledged), as opposed to optional (unknown outcome).
    pub fn required(&self) -> bool {
        self.complete_ns.is_some()
    }
}

/// Turns one key's history (invoke order) into the operations the search works on:
/// - `Fail`: never took effect, dropped (a failed CAS included);
/// - `Unknown` read: carries no information, dropped;
/// - `Unknown` write / CAS: optional, with no completion time;
/// - `Unknown` write / CAS whose value no kept read returns and no kept CAS expects: dropped,
///   repeatedly until nothing changes. Sound: in any linearization that contains such an op,
///   nothing observes the register between it and the next op that sets it (an observer would
///   have to see its value), so removing it leaves a linearization of everything else. This keeps
///   timed-out writes nobody saw (the common case under faults) out of the search;
/// - `Unknown` write / CAS of a value no other op writes (and not absent, the initial state) that
///   an ok read or ok CAS observed: it took effect, before the earliest such observer completed.
///   It becomes required, with that completion as its own. Exact, not a heuristic: only it could
///   have made the value current. The workload writes unique values, so with this every unknown
///   op is either dropped or bounded, and none stays optional for ever — which is what makes
///   the search blow up (each optional op doubles the linearized sets that can be reached).
///
/// Errors name the first malformed event.
pub fn prepare(history: &[&RegisterEvent]) -> Result<Vec<SearchOp>, String> {
    let mut ops = Vec::with_capacity(history.len());
    for (index, event) in history.iter().enumerate() {
        if event.complete_ns < event.invoke_ns {
            return Err(format!(
                "event {index} (process {}) completes at {} ns, before its invoke at {} ns",
                event.process, event.complete_ns, event.invoke_ns
            ));
        }
        let step = step_of(event).ok_or_else(|| {
            format!(
                "event {index} (process {}) is an ok read with no value recorded",
                event.process
            )
        })?;
        let complete_ns = match event.outcome {
            Outcome::Fail => continue,
            Outcome::Unknown if event.op == RegisterOp::Read => continue,
            Outcome::Unknown => None,
            Outcome::Ok => Some(event.complete_ns),
        };
        ops.push(SearchOp {
            index,
            step,
            invoke_ns: event.invoke_ns,
            complete_ns,
        });
    }
    drop_unobserved_unknowns(&mut ops);
    bound_observed_unique_unknowns(&mut ops);
    Ok(ops)
}

fn drop_unobserved_unknowns(ops: &mut Vec<SearchOp>) {
    loop {
        let observed: HashSet<Value> = ops.iter().filter_map(|op| op.step.observes()).collect();
        let before = ops.len();
        ops.retain(|op| {
            op.required()
                || op
                    .step
                    .sets()
                    .is_some_and(|value| observed.contains(&value))
        });
        if ops.len() == before {
            return;
        }
    }
}

fn bound_observed_unique_unknowns(ops: &mut [SearchOp]) {
    let mut setters: HashMap<Value, usize> = HashMap::new();
    let mut first_observed_ns: HashMap<Value, u64> = HashMap::new();
    for op in ops.iter() {
        if let Some(value) = op.step.sets() {
            *setters.entry(value).or_default() += 1;
        }
        if let (Some(value), Some(complete_ns)) = (op.step.observes(), op.complete_ns) {
            let first = first_observed_ns.entry(value).or_insert(complete_ns);
            *first = (*first).min(complete_ns);
        }
    }
    for op in ops.iter_mut().filter(|op| !op.required()) {
        let Some(value @ Some(_)) = op.step.sets() else {
            continue;
        };
        if setters.get(&value) != Some(&1) {
            continue;
        }
        if let Some(&observed_ns) = first_observed_ns.get(&value) {
            // An observer that completed before this op was even invoked makes the history
            // invalid; clamping keeps the window well-formed and the search then finds it.
            op.complete_ns = Some(observed_ns.max(op.invoke_ns));
        }
    }
}
