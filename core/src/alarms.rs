//! Alarms: a condition one node raised through the log that changes what the whole cluster
//! accepts until an operator disarms it (etcd's NOSPACE alarm).
//!
//! A node whose data directory outgrows `limits.quota_bytes`, or whose file system has less
//! than `limits.disk_reserve_bytes` free, proposes `AlarmAction::Raise`; while any `NoSpace`
//! alarm is in the table, apply refuses every command that may grow the state
//! (`Command::may_grow`) with `Rejection::NoSpace`, and deletes, releases, heartbeats and reports
//! still pass, so space can be won back. Alarms are never cleared by the node that raised them:
//! `steward alarm disarm` does, after `steward compact`, and a node still over its quota raises
//! its alarm again.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::rejection::Rejection;

/// Most alarms held at once (one per node and kind; a cluster has a handful of nodes).
pub const ALARMS_MAX: usize = 64;

/// Longest reason kept with an alarm, in characters; a longer one is cut.
pub const ALARM_REASON_CHARS_MAX: usize = 512;

/// What an alarm is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AlarmKind {
    /// A node's data directory is over its quota or its disk is nearly full.
    NoSpace,
}

impl fmt::Display for AlarmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AlarmKind::NoSpace => "NOSPACE",
        })
    }
}

impl AlarmKind {
    /// Parses the name `Display` writes (any case).
    pub fn parse(name: &str) -> Option<AlarmKind> {
        name.eq_ignore_ascii_case("NOSPACE")
            .then_some(AlarmKind::NoSpace)
    }
}

/// One raised alarm.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alarm {
    pub node_id: u64,
    pub kind: AlarmKind,
    /// State time (leader-stamped) when it was raised.
    pub raised_ms: u64,
    /// What the node saw, e.g. "data dir 9.1 MiB > limits.quota_bytes 8.0 MiB".
    pub reason: String,
}

impl fmt::Display for Alarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on node {}: {}", self.kind, self.node_id, self.reason)
    }
}

/// A change to the alarm table (`Command::Alarm`).
/// What an alarm command answers: every raised alarm after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlarmReply {
    pub alarms: Vec<Alarm>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AlarmAction {
    /// Raised by `node_id` itself; raising one that is already raised changes nothing.
    Raise {
        node_id: u64,
        kind: AlarmKind,
        reason: String,
    },
    /// Clears the alarms of `node_id` (every node's when `None`) of `kind` (every kind when
    /// `None`).
    Disarm {
        node_id: Option<u64>,
        kind: Option<AlarmKind>,
    },
}

impl fmt::Display for AlarmAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlarmAction::Raise { node_id, kind, .. } => {
                write!(f, "alarm-raise {kind} on node {node_id}")
            }
            AlarmAction::Disarm { node_id, kind } => {
                f.write_str("alarm-disarm")?;
                match kind {
                    Some(kind) => write!(f, " {kind}")?,
                    None => f.write_str(" all kinds")?,
                }
                match node_id {
                    Some(id) => write!(f, " on node {id}"),
                    None => f.write_str(" on every node"),
                }
            }
        }
    }
}

/// The raised alarms, by (node, kind).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AlarmTable {
    alarms: BTreeMap<(u64, AlarmKind), Alarm>,
}

impl AlarmTable {
    /// Rebuilds a table from `alarms` (a snapshot's list).
    pub fn from_list(alarms: Vec<Alarm>) -> AlarmTable {
        AlarmTable {
            alarms: alarms
                .into_iter()
                .map(|a| ((a.node_id, a.kind), a))
                .collect(),
        }
    }

    /// Every alarm, by node then kind.
    pub fn iter(&self) -> impl Iterator<Item = &Alarm> {
        self.alarms.values()
    }

    pub fn is_empty(&self) -> bool {
        self.alarms.is_empty()
    }

    /// Whether `node_id` has raised `kind`.
    pub fn has(&self, node_id: u64, kind: AlarmKind) -> bool {
        self.alarms.contains_key(&(node_id, kind))
    }

    /// The first NOSPACE alarm (lowest node id), if any.
    pub fn no_space(&self) -> Option<&Alarm> {
        self.alarms.values().find(|a| a.kind == AlarmKind::NoSpace)
    }

    /// Applies `action` at state time `now_ms`; answers every alarm after it.
    pub fn apply(&mut self, action: &AlarmAction, now_ms: u64) -> Result<AlarmReply, Rejection> {
        match action {
            AlarmAction::Raise {
                node_id,
                kind,
                reason,
            } => {
                if !self.alarms.contains_key(&(*node_id, *kind)) {
                    if self.alarms.len() >= ALARMS_MAX {
                        return Err(Rejection::TooLarge {
                            field: "alarms".to_string(),
                            rule: format!("at most {ALARMS_MAX} alarms are held at once"),
                        });
                    }
                    let alarm = Alarm {
                        node_id: *node_id,
                        kind: *kind,
                        raised_ms: now_ms,
                        reason: reason.chars().take(ALARM_REASON_CHARS_MAX).collect(),
                    };
                    self.alarms.insert((*node_id, *kind), alarm);
                }
            }
            AlarmAction::Disarm { node_id, kind } => self.alarms.retain(|(n, k), _| {
                !(node_id.is_none_or(|id| id == *n) && kind.is_none_or(|kind| kind == *k))
            }),
        }
        Ok(AlarmReply {
            alarms: self.iter().cloned().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raise(node_id: u64, reason: &str) -> AlarmAction {
        AlarmAction::Raise {
            node_id,
            kind: AlarmKind::NoSpace,
            reason: reason.to_string(),
        }
    }

    fn listed(r: Result<AlarmReply, Rejection>) -> Vec<(u64, u64, String)> {
        match r {
            Ok(AlarmReply { alarms }) => alarms
                .into_iter()
                .map(|a| (a.node_id, a.raised_ms, a.reason))
                .collect(),
            other => panic!("expected alarms, got {other:?}"),
        }
    }

    #[test]
    fn raise_is_idempotent_and_disarm_clears_by_node_or_all() {
        let mut t = AlarmTable::default();
        assert_eq!(
            listed(t.apply(&raise(2, "full"), 10)),
            [(2, 10, "full".into())]
        );
        // Raised again later: the first stays as it was.
        assert_eq!(
            listed(t.apply(&raise(2, "fuller"), 20)),
            [(2, 10, "full".into())]
        );
        listed(t.apply(&raise(1, "also"), 30));
        assert_eq!(t.no_space().map(|a| a.node_id), Some(1));
        let disarm_2 = AlarmAction::Disarm {
            node_id: Some(2),
            kind: Some(AlarmKind::NoSpace),
        };
        assert_eq!(listed(t.apply(&disarm_2, 40)), [(1, 30, "also".into())]);
        assert!(t.has(1, AlarmKind::NoSpace) && !t.has(2, AlarmKind::NoSpace));
        let disarm_all = AlarmAction::Disarm {
            node_id: None,
            kind: None,
        };
        assert!(listed(t.apply(&disarm_all, 50)).is_empty());
        assert!(t.no_space().is_none() && t.is_empty());
    }

    #[test]
    fn reasons_are_cut_and_the_table_is_bounded() {
        let mut t = AlarmTable::default();
        let long = "x".repeat(ALARM_REASON_CHARS_MAX + 10);
        t.apply(&raise(1, &long), 1).expect("raised");
        assert_eq!(
            t.iter().next().map(|a| a.reason.len()),
            Some(ALARM_REASON_CHARS_MAX)
        );
        for id in 2..=ALARMS_MAX as u64 {
            t.apply(&raise(id, "r"), 1).expect("raised");
        }
        let over = t.apply(&raise(ALARMS_MAX as u64 + 1, "r"), 1);
        assert!(
            matches!(&over, Err(Rejection::TooLarge { field, .. }) if field == "alarms"),
            "{over:?}"
        );
        // Raising one already held is not refused at the limit.
        assert!(matches!(t.apply(&raise(1, "r"), 2), Ok(AlarmReply { .. })));
        assert_eq!(AlarmKind::parse("nospace"), Some(AlarmKind::NoSpace));
        assert_eq!(AlarmKind::parse("corrupt"), None);
    }
}
