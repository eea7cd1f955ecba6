//! The human-readable report of a `Verdict`: for a failure, the failing key's history as a
//! timeline table, then the longest linearization found and where it got stuck.

use std::fmt::Write;

use super::model::{step_of, Value};
use super::Verdict;
use crate::history::{Outcome, RegisterEvent, RegisterOp};

/// Errors longer than this are cut in the table; the JSON history keeps them whole.
const ERROR_CHARS_MAX: usize = 60;
/// How many not-linearized ops the "stuck" line names before summarising.
const STUCK_LISTED_MAX: usize = 20;

/// Renders a Verdict for humans (the failing key's history as a timeline table, one op per line,
/// with invoke/complete ms, process, op, values, outcome; then the longest linearization).
pub fn render(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Valid => "VALID: every key's history is linearizable\n".to_string(),
        Verdict::Unknown { reason } => format!("UNKNOWN: linearizability not decided: {reason}\n"),
        Verdict::Invalid {
            key,
            history,
            longest_linearization,
        } => {
            let mut out = format!(
                "INVALID: key {key:?} is not linearizable ({} events)\n\n",
                history.len()
            );
            timeline(&mut out, history);
            linearization(&mut out, history, longest_linearization);
            out
        }
    }
}

fn timeline(out: &mut String, history: &[RegisterEvent]) {
    let _ = writeln!(
        out,
        "{:>5}  {:>12}  {:>12}  {:>7}  {:<5}  {:<16}  outcome",
        "#", "invoke ms", "complete ms", "process", "op", "values"
    );
    for (i, event) in history.iter().enumerate() {
        let _ = writeln!(
            out,
            "{:>5}  {:>12}  {:>12}  {:>7}  {:<5}  {:<16}  {}",
            i,
            ms(event.invoke_ns),
            ms(event.complete_ns),
            event.process,
            op_name(event.op),
            values(event),
            outcome(event)
        );
    }
}

fn linearization(out: &mut String, history: &[RegisterEvent], longest: &[usize]) {
    let required = history.iter().filter(|e| e.outcome == Outcome::Ok).count();
    let placed_required = longest
        .iter()
        .filter(|&&i| history[i].outcome == Outcome::Ok)
        .count();
    let _ = writeln!(
        out,
        "\nLongest linearization found: {} op(s) ({placed_required} of the {required} ok ops; \
         failed ops and unknown reads are ignored, unknown writes are optional):",
        longest.len()
    );
    let mut state: Value = None;
    let _ = writeln!(
        out,
        "  start                    register = {}",
        value(state)
    );
    for &i in longest {
        let event = &history[i];
        // The search only ever records steps the model accepted; replaying them cannot fail.
        if let Some(next) = step_of(event).and_then(|step| step.apply(state)) {
            state = next;
        }
        let _ = writeln!(
            out,
            "  #{:<5} {:<5} {:<12}  register = {}",
            i,
            op_name(event.op),
            values(event),
            value(state)
        );
    }
    let mut placed = vec![false; history.len()];
    for &i in longest {
        placed[i] = true;
    }
    let stuck: Vec<String> = history
        .iter()
        .enumerate()
        .filter(|&(i, e)| e.outcome == Outcome::Ok && !placed[i])
        .map(|(i, e)| format!("#{i} {} {}", op_name(e.op), values(e)))
        .collect();
    let _ = write!(
        out,
        "Then (register = {}) no remaining ok op can be placed; not linearized: ",
        value(state)
    );
    let listed = stuck.len().min(STUCK_LISTED_MAX);
    let _ = write!(out, "{}", stuck[..listed].join(", "));
    if stuck.len() > listed {
        let _ = write!(out, ", ... ({} more)", stuck.len() - listed);
    }
    out.push('\n');
}

fn ms(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000_000, (ns % 1_000_000) / 1_000)
}

fn op_name(op: RegisterOp) -> &'static str {
    match op {
        RegisterOp::Read => "read",
        RegisterOp::Write => "write",
        RegisterOp::Cas => "cas",
    }
}

fn value(v: Value) -> String {
    match v {
        Some(v) => v.to_string(),
        None => "absent".to_string(),
    }
}

fn values(event: &RegisterEvent) -> String {
    match event.op {
        RegisterOp::Read => match event.read {
            Some(read) => format!("-> {}", value(read)),
            None => "-> ?".to_string(),
        },
        RegisterOp::Write => value(event.value),
        RegisterOp::Cas => format!("{} -> {}", value(event.expected), value(event.value)),
    }
}

fn outcome(event: &RegisterEvent) -> String {
    let label = match (event.outcome, event.op) {
        (Outcome::Ok, _) => return "ok".to_string(),
        (Outcome::Fail, _) => "fail (ignored)",
        (Outcome::Unknown, RegisterOp::Read) => "unknown (ignored)",
        (Outcome::Unknown, _) => "unknown (may take effect later)",
    };
    if event.error.is_empty() {
        return label.to_string();
    }
    let error: String = event.error.chars().take(ERROR_CHARS_MAX).collect();
    let cut = if event.error.chars().count() > ERROR_CHARS_MAX {
        "..."
    } else {
        ""
    };
    format!("{label}: {error}{cut}")
}
