//! The shown time (README "Time", promise 5): creationTimestamp and other displayed times follow
//! the wall-clock time the leader shows, never run backwards and never fall behind cluster time;
//! a reservation's end stays on cluster time whatever the display does.

use serde_json::json;

use super::tests::{create, director, key};
use super::*;
use crate::command::{Command, ObjectCommand, ObjectReply, Response};
use crate::objects::resource::Resource;
use crate::reservations::Reservation;
use crate::state::State;

/// 2026-11-22T10:00:00Z
const T0: u64 = 1_795_341_600_000;

struct Log {
    state: State,
    events: Vec<crate::command::Event>,
    index: u64,
}

impl Log {
    fn new() -> Log {
        Log {
            state: State::new(),
            events: Vec::new(),
            index: 0,
        }
    }

    /// An entry of term 2 stamped at cluster time `time_ms`, showing `wall_ms`.
    fn run(&mut self, time_ms: u64, wall_ms: Option<u64>, cmd: &Command) -> Response {
        self.run_in(2, 2, time_ms, wall_ms, cmd)
    }

    fn run_in(
        &mut self,
        term: u64,
        stamp_term: u64,
        time_ms: u64,
        wall_ms: Option<u64>,
        cmd: &Command,
    ) -> Response {
        self.index += 1;
        let proposal = crate::Proposal::new(time_ms, Some(stamp_term), wall_ms, cmd.clone());
        let ctx = ApplyContext::of_proposal(self.index, term, &proposal);
        apply(&mut self.state, &ctx, cmd, &mut self.events)
    }

    fn created(&mut self, name: &str, time_ms: u64, wall_ms: Option<u64>) -> Resource {
        match self.run(time_ms, wall_ms, &create(director(name))) {
            Response::Objects(ObjectReply::Object { object, .. }) => object,
            other => panic!("expected a create, got {other:?}"),
        }
    }
}

/// An entry that changes nothing but time: a delete of nothing (refused, time moves).
fn noop() -> Command {
    Command::Objects(ObjectCommand::Delete {
        key: key("nothing"),
        expected_revision: None,
        fence: None,
    })
}

#[test]
fn the_shown_time_follows_the_leaders_wall_clock_and_creation_times_show_it() {
    let mut log = Log::new();
    // Cluster time lags the wall (an election, a whole-cluster restart): the object shows the
    // wall clock.
    let object = log.created("a", T0, Some(T0 + 3_600_000));
    assert_eq!(log.state.shown_ms(), T0 + 3_600_000);
    assert_eq!(
        object.metadata.creation_timestamp.as_str(),
        "2026-11-22T11:00:00Z"
    );
    assert_eq!(
        log.state.time_ms(),
        T0,
        "cluster time is not moved by the display"
    );
}

#[test]
fn the_shown_time_never_runs_backwards() {
    let mut log = Log::new();
    log.run(T0, Some(T0 + 10_000), &noop());
    // The next leader shows an earlier time: the display waits for it.
    log.run(T0 + 1_000, Some(T0 + 4_000), &noop());
    assert_eq!(log.state.shown_ms(), T0 + 10_000);
    let object = log.created("b", T0 + 2_000, Some(T0 + 5_000));
    assert_eq!(
        object.metadata.creation_timestamp.as_str(),
        "2026-11-22T10:00:10Z"
    );
    log.run(T0 + 3_000, Some(T0 + 12_000), &noop());
    assert_eq!(log.state.shown_ms(), T0 + 12_000);
}

#[test]
fn the_shown_time_is_never_behind_cluster_time() {
    let mut log = Log::new();
    // Every wall clock set back before the cluster started: the display keeps cluster time.
    log.run(T0, Some(T0 - 86_400_000), &noop());
    assert_eq!(log.state.shown_ms(), T0);
    log.run(T0 + 500, Some(T0 - 86_000_000), &noop());
    assert_eq!(log.state.shown_ms(), T0 + 500);
}

#[test]
fn without_a_reading_the_shown_time_moves_as_cluster_time_moves() {
    let mut log = Log::new();
    log.run(T0, Some(T0 + 60_000), &noop());
    log.run(T0 + 2_500, None, &noop());
    assert_eq!(log.state.shown_ms(), T0 + 62_500);
    // An entry that moves no time moves no display either.
    log.run(T0 + 1_000, None, &noop());
    assert_eq!(log.state.shown_ms(), T0 + 62_500);
}

#[test]
fn another_terms_stamp_moves_no_shown_time() {
    let mut log = Log::new();
    log.run_in(3, 3, T0, Some(T0 + 1_000), &noop());
    let got = log.run_in(4, 3, T0 + 5_000, Some(T0 + 90_000), &noop());
    assert!(matches!(got, Response::Rejected(_)), "{got:?}");
    assert_eq!(log.state.shown_ms(), T0 + 1_000);
}

#[test]
fn a_reservations_end_is_cluster_time_whatever_the_display_shows() {
    let mut log = Log::new();
    let mut object = director("r");
    let reservation: Reservation =
        serde_json::from_value(json!({ "nodeId": "n1", "durationSeconds": 60 })).unwrap();
    object.reservation = Some(Box::new(reservation));
    // The display is an hour ahead of cluster time (a restart): the end is 60 s of cluster
    // time after the create, not 60 s after the shown creation time.
    let cmd = create(object.clone());
    let Response::Objects(ObjectReply::Object { object: stored, .. }) =
        log.run(T0, Some(T0 + 3_600_000), &cmd)
    else {
        panic!("create failed");
    };
    let end = stored.reservation.as_ref().and_then(|r| r.expires_at);
    assert_eq!(end, Some(T0 + 60_000));
    // An update that restates the reservation keeps the end it had.
    let mut again = stored.clone();
    again.metadata.resource_version = 0;
    let update = Command::Objects(ObjectCommand::Update {
        object: again,
        expected_revision: None,
        fence: None,
    });
    let Response::Objects(ObjectReply::Object {
        object: updated, ..
    }) = log.run(T0 + 10_000, Some(T0 + 3_610_000), &update)
    else {
        panic!("update failed");
    };
    assert_eq!(
        updated.reservation.as_ref().and_then(|r| r.expires_at),
        Some(T0 + 60_000)
    );
}

#[test]
fn snapshots_keep_the_shown_time_and_older_ones_take_cluster_time() {
    let mut log = Log::new();
    log.run(T0, Some(T0 + 7_000), &noop());
    let mut bytes = Vec::new();
    log.state.write_snapshot(&mut bytes).unwrap();
    let restored = State::read_snapshot(&bytes[..]).unwrap();
    assert_eq!(restored.shown_ms(), T0 + 7_000);
    // A snapshot from before the display clock: its time was a wall-clock time.
    let mut old: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    old.as_object_mut().unwrap().remove("shown_ms");
    let old = serde_json::to_vec(&old).unwrap();
    let restored = State::read_snapshot(&old[..]).unwrap();
    assert_eq!(restored.shown_ms(), T0);
}
