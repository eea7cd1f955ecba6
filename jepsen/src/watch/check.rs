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
mod tests {
    use super::*;

    fn write(
        kind: WriteKind,
        name: &str,
        op: &str,
        revision: Option<u64>,
        outcome: Outcome,
    ) -> WriteOp {
        WriteOp {
            process: 9,
            kind,
            name: name.into(),
            op: op.into(),
            outcome,
            revision,
            invoke_ns: 0,
            complete_ns: 1,
            error: String::new(),
        }
    }

    /// Revisions 10..=14: create a, update a, create b, delete a (acknowledged), update b (unknown).
    fn writes() -> Vec<WriteOp> {
        use WriteKind::*;
        vec![
            write(Create, "a", "o1", Some(10), Outcome::Ok),
            write(Update, "a", "o2", Some(11), Outcome::Ok),
            write(Create, "b", "o3", Some(12), Outcome::Ok),
            write(Delete, "a", "o4", Some(13), Outcome::Ok),
            write(Update, "b", "o5", None, Outcome::Unknown),
            write(Create, "c", "o6", None, Outcome::Fail),
        ]
    }

    fn ev(kind: SeenType, revision: u64, name: &str, op: &str) -> Seen {
        Seen {
            at_ns: 0,
            kind,
            revision,
            name: name.into(),
            op: op.into(),
            object_revision: Some(revision),
        }
    }

    fn bookmark(revision: u64) -> Seen {
        Seen {
            at_ns: 0,
            kind: SeenType::Bookmark,
            revision,
            name: String::new(),
            op: String::new(),
            object_revision: None,
        }
    }

    /// Everything at 10..=14, in order.
    fn all_events() -> Vec<Seen> {
        use SeenType::*;
        vec![
            ev(Added, 10, "a", "o1"),
            ev(Modified, 11, "a", "o2"),
            ev(Added, 12, "b", "o3"),
            ev(Deleted, 13, "a", "o2"),
            ev(Modified, 14, "b", "o5"),
        ]
    }

    fn stream(start_revision: u64, why: Opened, seen: Vec<Seen>) -> Stream {
        Stream {
            node: 1,
            start_revision,
            why,
            opened_ns: 0,
            closed_ns: 1,
            end: String::new(),
            seen,
        }
    }

    fn watcher(id: u64, streams: Vec<Stream>) -> WatcherLog {
        WatcherLog {
            id,
            streams,
            ..WatcherLog::default()
        }
    }

    fn clean() -> Vec<WatcherLog> {
        let mut first = all_events()[..2].to_vec();
        first.push(bookmark(11));
        let mut resumed = all_events()[2..].to_vec();
        resumed.push(bookmark(15));
        vec![
            watcher(0, vec![stream(10, Opened::Initial, all_events())]),
            // Dropped after a bookmark at 11, resumed from 12.
            watcher(
                1,
                vec![
                    stream(10, Opened::Initial, first),
                    stream(12, Opened::Bookmark, resumed),
                ],
            ),
            // Resumed from an older bookmark: 11 comes again, identical.
            watcher(
                2,
                vec![
                    stream(10, Opened::Initial, {
                        let mut v = all_events()[..3].to_vec();
                        v.insert(1, bookmark(10));
                        v
                    }),
                    stream(11, Opened::Bookmark, all_events()[1..].to_vec()),
                ],
            ),
        ]
    }

    fn kinds(r: &WatchReport) -> Vec<&'static str> {
        r.anomalies
            .iter()
            .map(|a| match a {
                Anomaly::Duplicate { .. } => "duplicate",
                Anomaly::Reorder { .. } => "reorder",
                Anomaly::BeforeStart { .. } => "before_start",
                Anomaly::Gap { .. } => "gap",
                Anomaly::Disagreement { .. } => "disagreement",
                Anomaly::Phantom { .. } => "phantom",
                Anomaly::ObjectRevision { .. } => "object_revision",
                Anomaly::RevisionReused { .. } => "revision_reused",
            })
            .collect()
    }

    #[test]
    fn a_clean_history_passes() {
        let r = check(10, 14, &writes(), &clean());
        assert!(r.valid(), "{r:#?}");
        assert_eq!(r.watchers[1].resumed_from_bookmark, 1);
        assert_eq!(r.watchers[2].redelivered, 2);
        assert_eq!(r.revisions_seen, 5);
    }

    #[test]
    fn a_gap_after_a_bookmark_resume_is_flagged() {
        let mut logs = clean();
        // The resumed stream skips 12, which watcher 0 saw and an acknowledged write made.
        logs[1].streams[1].seen.remove(0);
        let r = check(10, 14, &writes(), &logs);
        assert_eq!(kinds(&r), vec!["gap"], "{r:#?}");
        assert!(matches!(
            &r.anomalies[0],
            Anomaly::Gap {
                watcher: 1,
                stream: 1,
                revision: 12,
                ..
            }
        ));
    }

    #[test]
    fn a_bookmark_that_claims_too_much_is_a_gap() {
        let mut logs = clean();
        // Watcher 0 stops after 10 but is told "everything up to 12 was sent".
        logs[0].streams[0].seen = vec![all_events()[0].clone(), bookmark(12)];
        logs[0]
            .streams
            .push(stream(13, Opened::Bookmark, all_events()[3..].to_vec()));
        let r = check(10, 14, &writes(), &logs);
        assert_eq!(kinds(&r), vec!["gap", "gap"], "{r:#?}");
    }

    #[test]
    fn a_stream_that_covers_nothing_is_fine() {
        let mut logs = clean();
        // A resume on a node still behind: only bookmarks below the start, or nothing at all.
        let behind = stream(12, Opened::Bookmark, vec![bookmark(9), bookmark(9)]);
        logs[1].streams.insert(1, behind);
        logs[1]
            .streams
            .insert(1, stream(12, Opened::Failure, vec![]));
        let r = check(10, 14, &writes(), &logs);
        assert!(r.valid(), "{r:#?}");
        assert_eq!(r.watchers[1].bookmarks_below_start, 2);
    }

    #[test]
    fn a_duplicate_is_flagged() {
        let mut logs = clean();
        let again = logs[0].streams[0].seen[2].clone();
        logs[0].streams[0].seen.insert(3, again);
        let r = check(10, 14, &writes(), &logs);
        assert_eq!(kinds(&r), vec!["duplicate"], "{r:#?}");
    }

    #[test]
    fn a_reorder_is_flagged() {
        let mut logs = clean();
        logs[0].streams[0].seen.swap(1, 2);
        let r = check(10, 14, &writes(), &logs);
        assert_eq!(kinds(&r), vec!["reorder"], "{r:#?}");
        // An event at or below a bookmark already sent is out of order too.
        let mut logs = clean();
        logs[2].streams[0].seen.swap(0, 1);
        let r = check(10, 14, &writes(), &logs);
        assert_eq!(kinds(&r), vec!["reorder"], "{r:#?}");
    }

    #[test]
    fn a_disagreement_between_watchers_is_flagged() {
        let mut logs = clean();
        // Watcher 2's resumed stream says 14 was a delete of b; watcher 0 says an update.
        logs[2].streams[1].seen[3] = ev(SeenType::Deleted, 14, "b", "o3");
        let r = check(10, 14, &writes(), &logs);
        assert!(kinds(&r).contains(&"disagreement") && !r.valid(), "{r:#?}");
        // Disagreeing with an acknowledged write at its revision is flagged too.
        let mut logs = clean();
        logs[0].streams[0].seen[1] = ev(SeenType::Modified, 11, "a", "o5");
        let r = check(10, 14, &writes(), &logs);
        assert!(kinds(&r).contains(&"disagreement"), "{r:#?}");
    }

    #[test]
    fn a_missing_acknowledged_write_is_flagged() {
        // Nobody saw 13 (the acknowledged delete of a), though every stream covered it.
        let mut logs = clean();
        for w in &mut logs {
            for s in &mut w.streams {
                s.seen
                    .retain(|e| e.revision != 13 || e.kind == SeenType::Bookmark);
            }
        }
        let r = check(10, 14, &writes(), &logs);
        assert!(!r.valid());
        assert!(r.anomalies.iter().all(|a| matches!(
            a,
            Anomaly::Gap {
                revision: 13,
                known_from: Source::Write { .. },
                ..
            }
        )));
        assert_eq!(r.anomaly_count, 3, "{r:#?}");
    }

    #[test]
    fn events_no_write_explains_are_flagged() {
        let mut logs = clean();
        // The refused create of c shows up, past what the other streams covered.
        logs[0].streams[0]
            .seen
            .push(ev(SeenType::Added, 16, "c", "o6"));
        let r = check(10, 14, &writes(), &logs);
        assert_eq!(kinds(&r), vec!["phantom"], "{r:#?}");
    }

    #[test]
    fn a_watcher_that_falls_short_or_is_refused_is_unknown() {
        let mut logs = clean();
        logs[0].streams[0].seen.truncate(3);
        logs[1].refusals.push(Refusal {
            node: 2,
            start_revision: 12,
            at_ns: 0,
            message: "compacted".into(),
        });
        let r = check(10, 14, &writes(), &logs);
        assert!(!r.valid() && !r.invalid(), "{r:#?}");
        assert_eq!(r.unknown.len(), 2, "{r:#?}");
    }

    #[test]
    fn the_history_lines_parse_back() {
        let logs = clean();
        let lines = records(&writes(), &logs);
        let back: Vec<Seen> = lines
            .iter()
            .filter(|l| l["record"] == "seen")
            .map(|l| serde_json::from_value(l["seen"].clone()).expect("seen"))
            .collect();
        let all: Vec<Seen> = logs
            .iter()
            .flat_map(|w| &w.streams)
            .flat_map(|s| s.seen.clone())
            .collect();
        assert_eq!(back, all);
    }
}
