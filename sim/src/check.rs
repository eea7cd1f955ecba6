//! Invariants checked as the run goes, every few simulated milliseconds:
//! - at most one leader per leader id. steward's openraft orders leader ids as (term, node)
//!   (`leader_id_adv`): a voter that granted (T, n2) may grant (T, n3) after it, which is
//!   greater, so a term can have two leaders one after the other, and for a moment both think
//!   they lead (the older is deposed as soon as it hears of the newer). A leader id, not a term,
//!   is what names one leadership and its log ids; the trace notes a term's second leader;
//! - a committed entry never changes: every node that applies index i applied the same log id
//!   there as every other node, in every incarnation;
//! - a node's state revision never goes back while it runs;
//!
//! and at the end, once the cluster is healed and caught up, every node's state is the same.

use std::collections::BTreeMap;

use steward::raft::types::{LogId, NodeId, ServerState};
use steward::state::kv::{Bytes, RangeOp};
use steward::state::State;

use crate::cluster::View;
use crate::trace::Trace;

#[derive(Default)]
pub struct Invariants {
    /// term -> the nodes that led in it.
    leaders: BTreeMap<u64, std::collections::BTreeSet<NodeId>>,
    /// index -> the log id (and the hash of the entry's bytes) applied there, by whichever node
    /// applied it first.
    applied: BTreeMap<u64, ((LogId, u64), NodeId)>,
    /// (node, incarnation) -> the last index checked.
    cursors: BTreeMap<(NodeId, u64), u64>,
    /// (node, incarnation) -> its vote as last seen (shown in the trace when it changes).
    votes: BTreeMap<(NodeId, u64), String>,
    /// (node, incarnation) -> the last state revision seen.
    revisions: BTreeMap<(NodeId, u64), u64>,
    pub violations: Vec<String>,
}

impl Invariants {
    fn violation(&mut self, trace: &Trace, what: String) {
        trace.log("CHK", format!("VIOLATION: {what}"));
        self.violations.push(what);
    }

    pub fn observe(&mut self, views: &[View], trace: &Trace) {
        for v in views {
            let m = &v.metrics;
            let vote = format!("{} {:?}", m.vote, m.state);
            if self.votes.get(&(v.node, v.incarnation)) != Some(&vote) {
                trace.log(&format!("n{}", v.node), format!("vote {vote}"));
                self.votes.insert((v.node, v.incarnation), vote);
            }
            if m.state == ServerState::Leader {
                let term = m.current_term;
                let leader = m.vote.leader_id().node_id;
                if leader != v.node {
                    self.violation(
                        trace,
                        format!("n{} leads with n{leader}'s vote {}", v.node, m.vote),
                    );
                }
                let leaders = self.leaders.entry(term).or_default();
                if leaders.insert(v.node) {
                    let others: Vec<String> = leaders
                        .iter()
                        .filter(|&&n| n != v.node)
                        .map(|n| format!("n{n}"))
                        .collect();
                    let note = if others.is_empty() {
                        String::new()
                    } else {
                        format!(" (after {} in the same term)", others.join(", "))
                    };
                    trace.log(&format!("n{}", v.node), format!("leads term {term}{note}"));
                }
            }
            let key = (v.node, v.incarnation);
            let last = self.revisions.insert(key, v.revision).unwrap_or(0);
            if v.revision < last {
                self.violation(
                    trace,
                    format!(
                        "n{}'s revision went back from {last} to {}",
                        v.node, v.revision
                    ),
                );
            }
            let applied = m.last_applied.map_or(0, |l| l.index);
            let from = self.cursors.get(&key).map_or(0, |c| c + 1);
            if applied < from {
                continue;
            }
            let ids: Vec<(u64, (LogId, u64))> = {
                let ids = v.ids.lock().unwrap_or_else(|p| p.into_inner());
                ids.range(from..=applied).map(|(i, id)| (*i, *id)).collect()
            };
            for (index, id) in ids {
                match self.applied.get(&index) {
                    None => {
                        self.applied.insert(index, (id, v.node));
                    }
                    Some(&(first, by)) if first != id => self.violation(
                        trace,
                        format!(
                            "committed entry {index} changed: n{by} applied {} (bytes {:x}), n{} \
                             applied {} (bytes {:x})",
                            first.0, first.1, v.node, id.0, id.1
                        ),
                    ),
                    Some(_) => {}
                }
            }
            self.cursors.insert(key, applied);
        }
    }
}

/// What a node's state holds, to compare nodes at the same applied index.
pub fn fingerprint(state: &State) -> String {
    let all = RangeOp {
        key: Bytes::from_static(b"\0"),
        range_end: Bytes::from_static(b"\0"),
        ..Default::default()
    };
    match state.kv().range(&all, state.revision()) {
        Ok(found) => {
            let kvs: Vec<String> = found
                .kvs
                .iter()
                .map(|kv| {
                    format!(
                        "{}={}@{}/{}/{}",
                        String::from_utf8_lossy(&kv.key),
                        String::from_utf8_lossy(&kv.value),
                        kv.create_revision,
                        kv.mod_revision,
                        kv.version
                    )
                })
                .collect();
            format!("revision {} {}", state.revision(), kvs.join(" "))
        }
        Err(e) => format!("revision {} unreadable: {e}", state.revision()),
    }
}
