//! Invariants whose breaking would corrupt the replicated state, checked after every entry in
//! every build, release included.
//!
//! A bug that let one of these slip would not fail loudly: the node would store, snapshot and
//! serve a state that parts from what clients were promised (a revision reused, a watcher missing
//! an event, a fencing token handed out twice). So, as TigerBeetle does, the node stops instead:
//! [`enforce`] panics, the node's panic hook aborts the process before the entry's response or
//! effects leave it, and a restart replays the same entry and stops again, until an operator
//! looks. Each check is a few comparisons per entry.

use std::fmt;

use crate::effects::{ApplyContext, Effects};
use crate::state::State;

/// What the checks compare against: the state and effects before the entry.
#[derive(Clone, Copy, Debug)]
pub struct Before {
    revision: u64,
    events: usize,
    kv_events: usize,
    token: u64,
    time_ms: u64,
    shown_ms: u64,
}

impl Before {
    /// Takes the marks before an entry is applied.
    pub fn of(state: &State, out: &Effects) -> Before {
        Before {
            revision: state.revision,
            events: out.events.len(),
            kv_events: out.kv_events.len(),
            token: state.locks.last_token(),
            time_ms: state.time_ms,
            shown_ms: state.shown_ms,
        }
    }

    /// Checks what the entry did: the store revision never goes backwards; each revision it
    /// took has exactly one object event, in order, numbered after the last, or else the entry
    /// is a keyspace txn that took one revision for all its key events; the fencing token
    /// counter never goes backwards; state time never runs backwards.
    pub fn check(&self, state: &State, out: &Effects) -> Result<(), Violation> {
        if state.revision < self.revision {
            return Err(Violation(format!(
                "the store revision went backwards, from {} to {}",
                self.revision, state.revision
            )));
        }
        let new = out.events.get(self.events..).unwrap_or_default();
        let taken = state.revision - self.revision;
        let kv_new = out.kv_events.get(self.kv_events..).unwrap_or_default();
        if !kv_new.is_empty() {
            let next = crate::kv::apply::write_revision(self.revision);
            let all_at_next = kv_new.iter().all(|e| e.kv.mod_revision == next);
            if !new.is_empty() || self.revision + taken != next || !all_at_next {
                return Err(Violation(format!(
                    "{} key events and {} object events for {taken} new revisions ({} -> {}): \
                     a keyspace txn takes exactly one (revision 2 in an empty store), for all \
                     its key events",
                    kv_new.len(),
                    new.len(),
                    self.revision,
                    state.revision
                )));
            }
            return self.check_clocks(state);
        }
        if u64::try_from(new.len()).ok() != Some(taken) {
            return Err(Violation(format!(
                "{} object events for {taken} new revisions ({} -> {}): one event per revision",
                new.len(),
                self.revision,
                state.revision
            )));
        }
        for (n, event) in (1..).zip(new) {
            // No overflow: `n` <= `taken`, and `self.revision + taken` is `state.revision`.
            let expected = self.revision + n;
            if event.revision != expected {
                return Err(Violation(format!(
                    "an object event at revision {} where revision {expected} was next",
                    event.revision
                )));
            }
        }
        self.check_clocks(state)
    }

    /// The fencing token counter and the clocks: never backwards.
    fn check_clocks(&self, state: &State) -> Result<(), Violation> {
        let token = state.locks.last_token();
        if token < self.token {
            return Err(Violation(format!(
                "the fencing token counter went backwards, from {} to {token}",
                self.token
            )));
        }
        if state.time_ms < self.time_ms {
            return Err(Violation(format!(
                "state time ran backwards, from {} to {} ms",
                self.time_ms, state.time_ms
            )));
        }
        // Shown time moves with cluster time, so it is checked when that moved.
        let behind = state.time_ms > self.time_ms && state.shown_ms < state.time_ms;
        if state.shown_ms < self.shown_ms || behind {
            return Err(Violation(format!(
                "the shown time ran backwards or fell behind cluster time: from {} to {} ms \
                 (cluster time {} ms)",
                self.shown_ms, state.shown_ms, state.time_ms
            )));
        }
        Ok(())
    }
}

/// A broken invariant, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Stops the node on a violation (see the module doc); does nothing otherwise.
pub fn enforce(ctx: &ApplyContext, result: Result<(), Violation>) {
    if let Err(violation) = result {
        // The one panic of the core, on purpose: going on would replicate a corrupt state.
        #[allow(clippy::panic)]
        {
            panic!(
                "replicated-state invariant violated applying log index {} (term {}): {violation}; \
                 stopping before the entry's response or effects leave this node",
                ctx.log_index, ctx.term
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::command::{Event, EventType};
    use crate::objects::resource::Resource;

    fn event(revision: u64) -> Event {
        Event {
            event_type: EventType::Added,
            revision,
            object: Arc::new(Resource::new("v1", "Director", "default", "x")),
            prev: None,
        }
    }

    fn state(revision: u64, time_ms: u64) -> State {
        State {
            revision,
            time_ms,
            shown_ms: time_ms,
            ..State::default()
        }
    }

    fn effects(revisions: &[u64]) -> Effects {
        Effects {
            events: revisions.iter().copied().map(event).collect(),
            ..Effects::default()
        }
    }

    #[test]
    fn an_entry_that_keeps_every_invariant_passes() {
        let before = Before::of(&state(4, 10), &effects(&[4]));
        assert_eq!(before.check(&state(6, 10), &effects(&[4, 5, 6])), Ok(()));
        assert_eq!(before.check(&state(4, 11), &effects(&[4])), Ok(()));
    }

    #[test]
    fn a_revision_going_backwards_trips() {
        let before = Before::of(&state(4, 10), &effects(&[]));
        let err = before.check(&state(3, 10), &effects(&[])).unwrap_err();
        assert!(err.0.contains("went backwards, from 4 to 3"), "{err}");
    }

    #[test]
    fn a_revision_without_its_event_trips() {
        let before = Before::of(&state(4, 10), &effects(&[]));
        let err = before.check(&state(5, 10), &effects(&[])).unwrap_err();
        assert!(
            err.0.contains("0 object events for 1 new revisions"),
            "{err}"
        );
        let err = before.check(&state(4, 10), &effects(&[5])).unwrap_err();
        assert!(
            err.0.contains("1 object events for 0 new revisions"),
            "{err}"
        );
    }

    #[test]
    fn an_event_out_of_order_trips() {
        let before = Before::of(&state(4, 10), &effects(&[]));
        let err = before.check(&state(6, 10), &effects(&[6, 5])).unwrap_err();
        assert!(
            err.0.contains("at revision 6 where revision 5 was next"),
            "{err}"
        );
    }

    #[test]
    fn a_token_going_backwards_trips() {
        let mut with_token = state(1, 10);
        with_token.locks.set_last_token_for_test(9);
        let before = Before::of(&with_token, &effects(&[]));
        let err = before.check(&state(1, 10), &effects(&[])).unwrap_err();
        assert!(
            err.0
                .contains("fencing token counter went backwards, from 9 to 0"),
            "{err}"
        );
    }

    #[test]
    fn time_running_backwards_trips() {
        let before = Before::of(&state(1, 10), &effects(&[]));
        let err = before.check(&state(1, 9), &effects(&[])).unwrap_err();
        assert!(err.0.contains("state time ran backwards"), "{err}");
    }

    #[test]
    fn a_shown_time_going_backwards_or_behind_cluster_time_trips() {
        let before = Before::of(&state(4, 10), &effects(&[]));
        let back = State {
            shown_ms: 9,
            ..state(4, 10)
        };
        let err = before.check(&back, &effects(&[])).unwrap_err();
        assert!(err.0.contains("shown time ran backwards"), "{err}");
        let behind = State {
            shown_ms: 10,
            ..state(4, 12)
        };
        let err = before.check(&behind, &effects(&[])).unwrap_err();
        assert!(err.0.contains("fell behind cluster time"), "{err}");
    }

    #[test]
    #[should_panic(expected = "replicated-state invariant violated applying log index 7")]
    fn a_violation_stops_the_node() {
        let ctx = ApplyContext {
            log_index: 7,
            term: 2,
            time_ms: 0,
            stamped: true,
            wall_ms: None,
        };
        enforce(&ctx, Err(Violation("test".into())));
    }
}
