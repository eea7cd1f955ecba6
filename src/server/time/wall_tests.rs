use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::super::tests::HandClock;
use super::*;

/// 2027-01-15T08:00:00Z
const T0: u64 = 1_800_000_000_000;
const HOUR: u64 = 3_600_000;

fn shown(slew_ms_per_s: u64) -> (Arc<HandClock>, ShownClock) {
    let hand = Arc::new(HandClock::default());
    hand.wall.store(T0, Ordering::SeqCst);
    hand.monotonic.store(1_000, Ordering::SeqCst);
    let shown = ShownClock::new(hand.clone(), 500, 2_000, slew_ms_per_s);
    (hand, shown)
}

/// Peers `ids` answer the probe with this node's wall clock plus `ahead_ms` each, with a
/// round trip of 2 ms.
fn probe(hand: &HandClock, shown: &ShownClock, answers: &[(u64, i64)]) {
    for (id, ahead_ms) in answers {
        let sent = hand.monotonic_ms();
        hand.advance(1);
        let wall = hand.wall_ms().saturating_add_signed(*ahead_ms);
        hand.advance(1);
        shown.record(*id, sent, wall);
    }
}

#[test]
fn a_process_that_starts_shows_the_middle_of_the_clocks_at_once() {
    let (hand, shown) = shown(100);
    assert_eq!(shown.now(), T0, "alone: its own clock");
    let (hand2, shown2) = self::shown(100);
    probe(&hand2, &shown2, &[(2, 40), (3, 90)]);
    assert_eq!(
        shown2.now(),
        hand2.wall_ms() + 40,
        "the median of 0, 40, 90"
    );
    hand.advance(1_000);
    assert_eq!(shown.now(), T0 + 1_000, "a right clock is followed exactly");
}

#[test]
fn one_clock_an_hour_off_moves_nothing() {
    let (hand, shown) = shown(100);
    probe(&hand, &shown, &[(2, 10), (3, -10)]);
    let before = shown.now();
    // This node's own clock steps an hour ahead: the middle is another node's.
    hand.step(HOUR as i64);
    hand.advance(1_000);
    assert_eq!(shown.now(), before + 1_000 + 10);
    // And a peer an hour behind is one of the two ends.
    let (hand, shown) = self::shown(100);
    probe(&hand, &shown, &[(2, -(HOUR as i64)), (3, 20)]);
    assert_eq!(shown.now(), hand.wall_ms());
    let outliers: Vec<u64> = shown.outliers(1).iter().map(|(id, _)| *id).collect();
    assert_eq!(outliers, vec![2]);
}

#[test]
fn when_every_clock_steps_the_shown_time_slews() {
    let (hand, shown) = shown(100);
    let start = shown.now();
    // Alone, so the middle is its own clock, which steps an hour ahead.
    hand.step(HOUR as i64);
    hand.advance(1_000);
    assert_eq!(
        shown.now(),
        start + 1_000 + 100,
        "100 ms more per second, no jump"
    );
    hand.advance(9_000);
    assert_eq!(shown.now(), start + 10_000 + 1_000);
    // Back an hour and more: the shown time slows by 100 ms per second, never stops.
    hand.step(-(2 * HOUR as i64));
    hand.advance(1_000);
    assert_eq!(shown.now(), start + 11_000 + 900);
    hand.advance(1_000);
    assert_eq!(shown.now(), start + 12_000 + 800);
}

#[test]
fn a_clock_running_fast_moves_the_shown_time_a_bounded_amount() {
    let (hand, shown) = shown(100);
    let start = shown.now();
    // 4x: three seconds more on the wall clock every real second.
    for _ in 0..10 {
        hand.advance(1_000);
        hand.step(3_000);
        shown.now();
    }
    assert_eq!(shown.now(), start + 10_000 + 1_000);
}

#[test]
fn old_readings_are_not_used() {
    let (hand, shown) = shown(1_000);
    probe(&hand, &shown, &[(2, 300), (3, 300)]);
    assert_eq!(shown.middle_ms(), hand.wall_ms() + 300);
    assert_eq!(shown.offsets().len(), 2);
    // Three probe intervals without an answer.
    hand.advance(6_100);
    assert_eq!(shown.middle_ms(), hand.wall_ms());
    assert!(shown.offsets().is_empty());
    assert!(shown.outliers(1).is_empty());
}

#[test]
fn offsets_say_how_far_each_clock_is() {
    let (hand, shown) = shown(100);
    probe(&hand, &shown, &[(2, 700), (3, -20)]);
    let offsets = shown.offsets();
    let of = |id| {
        offsets
            .iter()
            .find(|o| o.node_id == id)
            .map(|o| o.offset_ms)
    };
    assert_eq!(of(2), Some(700));
    assert_eq!(of(3), Some(-20));
    assert_eq!(shown.outliers(1), vec![(2, 700)]);
    shown.forget(2);
    assert_eq!(shown.offsets().len(), 1);
}
