//! The pure check of the watch workload (see the parent module's docs for what it judges).

use super::*;

/// What an event says, for comparing two observations of one revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventDesc {
    #[serde(rename = "type")]
    pub kind: SeenType,
    pub name: String,
    /// The write that made it. None for an acknowledged delete: the deleted object carries the
    /// op of the write before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
}

impl EventDesc {
    fn of_seen(s: &Seen) -> EventDesc {
        EventDesc {
            kind: s.kind,
            name: s.name.clone(),
            op: Some(s.op.clone()),
        }
    }

    fn of_write(w: &WriteOp) -> EventDesc {
        EventDesc {
            kind: w.kind.event(),
            name: w.name.clone(),
            op: (w.kind != WriteKind::Delete).then(|| w.op.clone()),
        }
    }

    fn agrees(&self, other: &EventDesc) -> bool {
        self.kind == other.kind
            && self.name == other.name
            && (self.op.is_none() || other.op.is_none() || self.op == other.op)
    }
}

/// Where the check learned of an event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "by", rename_all = "lowercase")]
pub enum Source {
    /// An acknowledged write.
    Write {
        op: String,
    },
    Watcher {
        watcher: u64,
        stream: usize,
    },
}

/// One thing that must not happen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "anomaly", rename_all = "snake_case")]
pub enum Anomaly {
    /// A stream delivered a revision twice.
    Duplicate {
        watcher: u64,
        stream: usize,
        node: u64,
        revision: u64,
    },
    /// A stream delivered an event not above everything it delivered before it (events, and
    /// bookmarks, which claim every event up to them was sent).
    Reorder {
        watcher: u64,
        stream: usize,
        node: u64,
        revision: u64,
        after: u64,
    },
    BeforeStart {
        watcher: u64,
        stream: usize,
        node: u64,
        revision: u64,
        start_revision: u64,
    },
    /// A stream covered `revision` (delivered an event or bookmark at or past it) without
    /// delivering the event known to be there.
    Gap {
        watcher: u64,
        stream: usize,
        node: u64,
        start_revision: u64,
        covered_to: u64,
        revision: u64,
        missing: EventDesc,
        known_from: Source,
    },
    /// Two observations of one revision differ.
    Disagreement {
        revision: u64,
        first: EventDesc,
        first_from: Source,
        second: EventDesc,
        second_from: Source,
    },
    /// An event that no attempted write explains.
    Phantom {
        watcher: u64,
        stream: usize,
        revision: u64,
        event: EventDesc,
        why: String,
    },
    /// An event whose object's resourceVersion is not the event's revision.
    ObjectRevision {
        watcher: u64,
        stream: usize,
        revision: u64,
        object_revision: Option<u64>,
    },
    /// Two acknowledged writes were given the same revision.
    RevisionReused { revision: u64, ops: Vec<String> },
}

/// One watcher, in numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WatcherSummary {
    pub id: u64,
    pub streams: usize,
    pub resumed_after_failure: usize,
    pub resumed_from_bookmark: usize,
    pub refused_resumes: usize,
    pub setup_failures: u64,
    pub events: usize,
    pub bookmarks: usize,
    /// Events delivered again after a resume from a bookmark older than the last event seen.
    pub redelivered: usize,
    /// Bookmarks below their stream's start revision − 1 (a node behind the revision the
    /// stream started at reports its own, lower revision). Allowed, but a client that resumes
    /// from the last revision it was sent would go backwards.
    pub bookmarks_below_start: usize,
    /// The highest revision up to which the watcher saw every event.
    pub covered_to: u64,
}

#[derive(Debug, Serialize)]
pub struct WatchReport {
    /// R + 1, where every watcher started.
    pub from_revision: u64,
    /// The linearizable list's revision after the heal.
    pub final_revision: u64,
    pub writes_acknowledged: usize,
    pub writes_failed: usize,
    pub writes_unknown: usize,
    /// Distinct revisions any watcher delivered an event for.
    pub revisions_seen: usize,
    pub watchers: Vec<WatcherSummary>,
    pub anomaly_count: usize,
    /// The first `ANOMALIES_SHOWN`.
    pub anomalies: Vec<Anomaly>,
    /// Why the verdict cannot be VALID even without anomalies.
    pub unknown: Vec<String>,
}

impl WatchReport {
    pub fn valid(&self) -> bool {
        self.anomaly_count == 0 && self.unknown.is_empty()
    }

    pub fn invalid(&self) -> bool {
        self.anomaly_count > 0
    }
}

/// The events known to exist, by revision, and where each was first learned.
type Known = BTreeMap<u64, (EventDesc, Source)>;

/// Checks the watchers' logs against each other and against the writes (see the module docs).
pub fn check(
    from_revision: u64,
    final_revision: u64,
    writes: &[WriteOp],
    watchers: &[WatcherLog],
) -> WatchReport {
    let mut anomalies = vec![];
    let known = known_events(writes, watchers, &mut anomalies);
    let mut summaries = vec![];
    let mut unknown = vec![];
    for w in watchers {
        summaries.push(check_watcher(w, from_revision, &known, &mut anomalies));
        for r in &w.refusals {
            unknown.push(format!(
                "watcher {}: node {} refused a resume from revision {} with OutOfRange ({})",
                w.id, r.node, r.start_revision, r.message
            ));
        }
    }
    for s in &summaries {
        if s.covered_to < final_revision {
            unknown.push(format!(
                "watcher {} saw every event only up to revision {}, not to the final {final_revision}",
                s.id, s.covered_to
            ));
        }
    }
    let count = |o: Outcome| writes.iter().filter(|w| w.outcome == o).count();
    let anomaly_count = anomalies.len();
    anomalies.truncate(ANOMALIES_SHOWN);
    WatchReport {
        from_revision,
        final_revision,
        writes_acknowledged: count(Outcome::Ok),
        writes_failed: count(Outcome::Fail),
        writes_unknown: count(Outcome::Unknown),
        revisions_seen: revisions_seen(watchers),
        watchers: summaries,
        anomaly_count,
        anomalies,
        unknown,
    }
}

/// Distinct revisions any watcher delivered an event for.
fn revisions_seen(watchers: &[WatcherLog]) -> usize {
    watchers
        .iter()
        .flat_map(|w| &w.streams)
        .flat_map(|s| &s.seen)
        .filter(|s| s.kind != SeenType::Bookmark)
        .map(|s| s.revision)
        .collect::<BTreeSet<u64>>()
        .len()
}

/// Every event known to exist: acknowledged writes first, then every watcher's observations.
/// Flags revisions given to two writes, observations that disagree with what is known, and
/// events no write explains.
fn known_events(
    writes: &[WriteOp],
    watchers: &[WatcherLog],
    anomalies: &mut Vec<Anomaly>,
) -> Known {
    let mut known = Known::new();
    for w in writes.iter().filter(|w| w.outcome == Outcome::Ok) {
        let Some(rev) = w.revision else { continue };
        match known.get(&rev) {
            Some((_, Source::Write { op })) => anomalies.push(Anomaly::RevisionReused {
                revision: rev,
                ops: vec![op.clone(), w.op.clone()],
            }),
            _ => {
                known.insert(
                    rev,
                    (EventDesc::of_write(w), Source::Write { op: w.op.clone() }),
                );
            }
        }
    }
    let by_op: HashMap<&str, &WriteOp> = writes.iter().map(|w| (w.op.as_str(), w)).collect();
    for w in watchers {
        for (i, s) in w.streams.iter().enumerate() {
            for seen in s.seen.iter().filter(|s| s.kind != SeenType::Bookmark) {
                let desc = EventDesc::of_seen(seen);
                let here = Source::Watcher {
                    watcher: w.id,
                    stream: i,
                };
                if seen.object_revision != Some(seen.revision) {
                    anomalies.push(Anomaly::ObjectRevision {
                        watcher: w.id,
                        stream: i,
                        revision: seen.revision,
                        object_revision: seen.object_revision,
                    });
                }
                match known.get(&seen.revision) {
                    Some((first, first_from)) => {
                        if !first.agrees(&desc) {
                            anomalies.push(Anomaly::Disagreement {
                                revision: seen.revision,
                                first: first.clone(),
                                first_from: first_from.clone(),
                                second: desc,
                                second_from: here,
                            });
                        }
                    }
                    None => {
                        if let Some(why) = unexplained(&desc, seen.revision, &by_op, writes) {
                            anomalies.push(Anomaly::Phantom {
                                watcher: w.id,
                                stream: i,
                                revision: seen.revision,
                                event: desc.clone(),
                                why,
                            });
                        }
                        known.insert(seen.revision, (desc, here));
                    }
                }
            }
        }
    }
    known
}

/// Why no attempted write can have made this event at this revision (None: one can). Only
/// called for revisions no acknowledged write has.
fn unexplained(
    desc: &EventDesc,
    revision: u64,
    by_op: &HashMap<&str, &WriteOp>,
    writes: &[WriteOp],
) -> Option<String> {
    if desc.kind == SeenType::Deleted {
        let possible = writes.iter().any(|w| {
            w.kind == WriteKind::Delete
                && w.name == desc.name
                && (w.outcome == Outcome::Unknown
                    || (w.outcome == Outcome::Ok && w.revision == Some(revision)))
        });
        return (!possible).then(|| format!("no delete of {} with an unknown outcome", desc.name));
    }
    let op = desc.op.as_deref().unwrap_or_default();
    let Some(w) = by_op.get(op) else {
        return Some(format!("no write has op {op:?}"));
    };
    if w.kind.event() != desc.kind || w.name != desc.name {
        return Some(format!("write {op} was a {:?} of {}", w.kind, w.name));
    }
    match w.outcome {
        Outcome::Fail => Some(format!("write {op} was refused ({})", w.error)),
        Outcome::Ok => Some(format!(
            "write {op} was acknowledged at revision {:?}",
            w.revision
        )),
        Outcome::Unknown => None,
    }
}

/// One watcher: order within each stream, gaps within what each stream covered, and how far
/// its streams together reached.
fn check_watcher(
    w: &WatcherLog,
    from_revision: u64,
    known: &Known,
    anomalies: &mut Vec<Anomaly>,
) -> WatcherSummary {
    let mut sum = WatcherSummary {
        id: w.id,
        streams: w.streams.len(),
        refused_resumes: w.refusals.len(),
        setup_failures: w.setup_failures,
        ..WatcherSummary::default()
    };
    // Every event up to `covered` has been seen by this watcher.
    let mut covered = from_revision.saturating_sub(1);
    for (i, s) in w.streams.iter().enumerate() {
        match s.why {
            Opened::Initial => {}
            Opened::Failure => sum.resumed_after_failure += 1,
            Opened::Bookmark => sum.resumed_from_bookmark += 1,
        }
        let (revs, covered_to) = check_stream(w.id, i, s, anomalies, &mut sum);
        // A stream that delivered nothing at or past its start covers nothing.
        let covers = if covered_to >= s.start_revision {
            known.range(s.start_revision..=covered_to)
        } else {
            known.range(0..0)
        };
        for (&rev, (desc, from)) in covers {
            if !revs.contains(&rev) {
                anomalies.push(Anomaly::Gap {
                    watcher: w.id,
                    stream: i,
                    node: s.node,
                    start_revision: s.start_revision,
                    covered_to,
                    revision: rev,
                    missing: desc.clone(),
                    known_from: from.clone(),
                });
            }
        }
        sum.redelivered += revs.range(..=covered).count();
        // A stream that starts past `covered + 1` would leave revisions unwatched; the watcher
        // never does that, and then `covered` simply stops growing (UNKNOWN if short of final).
        if s.start_revision <= covered + 1 {
            covered = covered.max(covered_to);
        }
    }
    sum.covered_to = covered;
    sum
}

/// Order within one stream. Returns the revisions of its events and the revision it covered to.
fn check_stream(
    watcher: u64,
    stream: usize,
    s: &Stream,
    anomalies: &mut Vec<Anomaly>,
    sum: &mut WatcherSummary,
) -> (BTreeSet<u64>, u64) {
    let mut revs = BTreeSet::new();
    let mut top = s.start_revision.saturating_sub(1);
    for seen in &s.seen {
        let rev = seen.revision;
        if seen.kind == SeenType::Bookmark {
            sum.bookmarks += 1;
            if rev < s.start_revision.saturating_sub(1) {
                sum.bookmarks_below_start += 1;
            }
            top = top.max(rev);
            continue;
        }
        sum.events += 1;
        let node = s.node;
        if rev < s.start_revision {
            anomalies.push(Anomaly::BeforeStart {
                watcher,
                stream,
                node,
                revision: rev,
                start_revision: s.start_revision,
            });
        } else if revs.contains(&rev) {
            anomalies.push(Anomaly::Duplicate {
                watcher,
                stream,
                node,
                revision: rev,
            });
        } else if rev <= top {
            anomalies.push(Anomaly::Reorder {
                watcher,
                stream,
                node,
                revision: rev,
                after: top,
            });
        }
        revs.insert(rev);
        top = top.max(rev);
    }
    (revs, top)
}

#[cfg(test)]
mod tests;
