use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

/// A clock the test moves by hand: `wall` can jump anywhere, `monotonic` only forward.
#[derive(Default)]
pub(super) struct HandClock {
    pub(super) wall: AtomicU64,
    pub(super) monotonic: AtomicU64,
}

impl HandClock {
    /// Real time passes: both clocks move.
    pub(super) fn advance(&self, ms: u64) {
        self.monotonic.fetch_add(ms, Ordering::SeqCst);
        self.wall.fetch_add(ms, Ordering::SeqCst);
    }

    /// The wall clock steps by `ms` (negative: back); the monotonic clock does not.
    pub(super) fn step(&self, ms: i64) {
        let wall = self.wall.load(Ordering::SeqCst);
        self.wall
            .store(wall.saturating_add_signed(ms), Ordering::SeqCst);
    }
}

impl Clock for HandClock {
    fn wall_ms(&self) -> u64 {
        self.wall.load(Ordering::SeqCst)
    }
    fn monotonic_ms(&self) -> u64 {
        self.monotonic.load(Ordering::SeqCst)
    }
}

fn clocks() -> (Arc<HandClock>, ClusterClock) {
    let hand = Arc::new(HandClock::default());
    let cluster = ClusterClock::new(hand.clone());
    (hand, cluster)
}

#[test]
fn a_leader_stamps_nothing_until_it_has_applied_an_entry_of_its_term() {
    let (hand, cluster) = clocks();
    assert_eq!(cluster.leader_now(2, true), None, "no anchor yet");
    cluster.applied(5_000, None);
    assert_eq!(
        cluster.leader_now(2, false),
        None,
        "older entries not applied yet"
    );
    hand.advance(300);
    assert_eq!(cluster.leader_now(2, true), Some(5_300));
}

#[test]
fn the_time_since_the_last_applied_entry_is_credited_to_the_new_leader() {
    let (hand, cluster) = clocks();
    cluster.applied(5_000, None);
    // The old leader went quiet, then died; this node's election took 1.5 s more.
    hand.advance(9_000);
    hand.advance(1_500);
    assert_eq!(cluster.leader_now(3, true), Some(15_500));
}

#[test]
fn a_leader_counts_from_its_frozen_anchor_not_from_its_own_entries() {
    let (hand, cluster) = clocks();
    cluster.applied(1_000, None);
    assert_eq!(cluster.leader_now(2, true), Some(1_000));
    hand.advance(40);
    // Its own entry, stamped 1_040, applied 25 ms later: re-anchoring on it would lose 25 ms.
    hand.advance(25);
    cluster.applied(1_040, None);
    assert_eq!(cluster.leader_now(2, true), Some(1_065));
    hand.advance(1_000);
    assert_eq!(cluster.leader_now(2, true), Some(2_065));
}

#[test]
fn a_new_term_counts_from_what_was_applied_last() {
    let (hand, cluster) = clocks();
    cluster.applied(1_000, None);
    assert_eq!(cluster.leader_now(2, true), Some(1_000));
    hand.advance(500);
    cluster.applied(1_500, None);
    // Deposed, then leader again in term 4: from the latest anchor, not term 2's.
    hand.advance(200);
    assert_eq!(cluster.leader_now(4, false), None);
    assert_eq!(cluster.leader_now(4, true), Some(1_700));
}

#[test]
fn an_entry_that_does_not_move_time_still_anchors_the_count() {
    let (hand, cluster) = clocks();
    cluster.applied(1_000, None);
    hand.advance(700);
    // Another leader, whose count lagged 700 ms more, stamped a refresh at 1_000: counting on
    // from the older anchor would reach its deadline 700 ms early.
    cluster.applied(1_000, None);
    assert_eq!(cluster.estimate(), Some(1_000));
    hand.advance(300);
    // The state's time never goes back: a lower reading keeps the time, not the instant.
    cluster.applied(900, None);
    assert_eq!(cluster.estimate(), Some(1_000));
    hand.advance(5);
    assert_eq!(cluster.leader_now(3, true), Some(1_005));
}

#[test]
fn wall_clock_steps_move_nothing() {
    let (hand, cluster) = clocks();
    cluster.applied(1_000, None);
    assert_eq!(cluster.leader_now(2, true), Some(1_000));
    for step in [3_600_000_i64, -7_200_000] {
        let wall = hand.wall.load(Ordering::SeqCst) as i64 + step;
        hand.wall.store(wall.max(0) as u64, Ordering::SeqCst);
        hand.advance(10);
    }
    assert_eq!(cluster.leader_now(2, true), Some(1_020));
    assert_eq!(cluster.estimate(), Some(1_020));
}

#[test]
fn a_new_cluster_starts_at_its_first_leaders_wall_clock() {
    let (hand, cluster) = clocks();
    hand.wall.store(1_800_000_000_000, Ordering::SeqCst);
    cluster.applied(0, None);
    hand.advance(50);
    assert_eq!(cluster.leader_now(2, true), Some(1_800_000_000_050));
    hand.advance(10);
    assert_eq!(cluster.leader_now(2, true), Some(1_800_000_000_060));
    // Once started, a wall-clock step moves nothing.
    hand.wall.store(1_800_003_600_000, Ordering::SeqCst);
    assert_eq!(cluster.leader_now(2, true), Some(1_800_000_000_060));
}

#[test]
fn a_batch_counts_from_when_its_last_entry_reached_the_log_not_from_its_apply() {
    let (hand, cluster) = clocks();
    hand.advance(100);
    cluster.appended(3);
    hand.advance(400);
    cluster.appended(7);
    // Entries 1-5 are applied 2 s after entry 5 arrived (with the batch ending at 7, at 500):
    // a follower learns of the commit late, or only a new leader commits them.
    hand.advance(2_000);
    cluster.applied(1_000, Some(5));
    assert_eq!(cluster.estimate(), Some(1_000 + 2_000));
    // Entries up to 3 arrived at 100, and that batch is done with; 7's is not.
    hand.advance(10);
    cluster.applied(1_000, Some(7));
    assert_eq!(cluster.estimate(), Some(1_000 + 2_010));
    // An arrival it was not told of (a restart's replay): from the apply.
    cluster.applied(1_500, Some(9));
    assert_eq!(cluster.estimate(), Some(1_500));
}

#[test]
fn entries_a_new_leader_replaced_count_from_their_replacements_arrival() {
    let (hand, cluster) = clocks();
    cluster.appended(5);
    hand.advance(1_000);
    // Entries after 3 are dropped and appended again later: 4 and 5 are new entries, stamped
    // after the old ones arrived.
    cluster.truncated(Some(3));
    hand.advance(500);
    cluster.appended(5);
    hand.advance(200);
    cluster.applied(2_000, Some(5));
    assert_eq!(cluster.estimate(), Some(2_000 + 200));
    // Everything dropped: nothing is known, apply time is used.
    cluster.appended(8);
    cluster.truncated(None);
    hand.advance(300);
    cluster.applied(2_000, Some(8));
    assert_eq!(cluster.estimate(), Some(2_000));
}
