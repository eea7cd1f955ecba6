//! Time enters apply only through stamps measured in the entry's own term (README "Time",
//! promises 3 and 4): an entry stamped in another term is not applied at all (no time, no
//! grant, no expiry); entries written before issue 24 (no term) count as they always did.

use super::tests::*;
use crate::command::{Command, LockReply, Proposal, Response};
use crate::rejection::Rejection;

fn stamped(time_ms: u64, term: u64, command: Command) -> Proposal {
    Proposal::new(time_ms, Some(term), None, command)
}

#[test]
fn an_expiry_stamped_in_an_older_term_expires_nothing() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, Some(100), 0));
    let old_term = log.term();
    log.new_term();
    let before = log.state.clone();
    // The deposed leader's sweep, long past the ttl, lands in the new term's log.
    let got = log.propose(&stamped(9_000, old_term, sweep(&["d"], 0, 0)));
    assert_eq!(
        got,
        Response::Rejected(Rejection::NotStamped { term: log.term() })
    );
    assert_eq!(log.holders("d").len(), 1, "the holder keeps its lock");
    assert_eq!(log.state.time_ms(), before.time_ms(), "no time moved");
    assert_eq!(log.state.term_started_ms(), None, "no grace started");
}

#[test]
fn nothing_stamped_in_another_term_is_applied() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, Some(100), 0));
    let old_term = log.term();
    log.new_term();
    let before = log.state.clone();
    // A grant or refresh timed by another term's clock could set a deadline early.
    for command in [
        acquire("e", "h2", W, Some(100), 0),
        refresh("d", "h1", 1, Some(100)),
    ] {
        let got = log.propose(&stamped(50_000, old_term, command));
        assert_eq!(
            got,
            Response::Rejected(Rejection::NotStamped { term: log.term() })
        );
    }
    assert_eq!(log.state.time_ms(), before.time_ms());
    assert!(log.state.lock("e").is_none());
    assert_eq!(log.state.term_started_ms(), None);
}

#[test]
fn a_new_leaders_first_stamp_starts_the_grace_from_the_time_it_measured() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, Some(100), 0));
    log.new_term();
    let term = log.term();
    // Its count credits the time since the last entry it applied (server/time.rs).
    log.propose(&stamped(1_500, term, acquire("f", "h3", R, None, 0)));
    assert_eq!(log.state.term_started_ms(), Some(1_500));
    let done = Response::Locks(LockReply::Done { revision: 0 });
    assert_eq!(
        log.propose(&stamped(1_699, term, sweep(&["d"], 200, 0))),
        done
    );
    assert_eq!(log.holders("d").len(), 1);
    assert_eq!(
        log.propose(&stamped(1_700, term, sweep(&["d"], 200, 0))),
        swept(1, 0, 0)
    );
}

#[test]
fn entries_from_before_issue_24_keep_their_wall_clock_time() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, Some(100), 0));
    let legacy = Proposal::new(1_100, None, None, sweep(&["d"], 0, 0));
    assert_eq!(log.propose(&legacy), swept(1, 0, 0));
    assert_eq!(log.state.time_ms(), 1_100);
}

/// What the leader's checkpoints of cluster time wait on (README "Time"): the earliest thing
/// that ends, and nothing once nothing is timed.
#[test]
fn the_next_due_time_is_the_earliest_end_and_none_once_nothing_is_timed() {
    let mut log = Log::new();
    assert_eq!(log.state.next_due_ms(), None);
    log.granted(1_000, acquire("d", "h1", W, Some(100), 0));
    assert_eq!(log.state.next_due_ms(), Some(1_100));
    log.granted(1_050, acquire("e", "h2", W, Some(20), 0));
    assert_eq!(log.state.next_due_ms(), Some(1_070));
    log.granted(1_060, acquire("f", "h3", W, None, 0));
    assert_eq!(
        log.state.next_due_ms(),
        Some(1_070),
        "a holder with no TTL ends never"
    );
    log.run(2_000, sweep(&["d", "e"], 0, 0));
    assert!(log.state.lock("d").is_none() && log.state.lock("e").is_none());
    assert_eq!(
        log.state.next_due_ms(),
        None,
        "only an untimed holder is left"
    );
}
