//! Tests of the watch checker: hand-made histories, each anomaly caught and each valid run passed.

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
