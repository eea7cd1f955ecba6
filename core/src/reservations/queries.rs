//! Reads of the reservations, and what the leader's decommission sweeper asks.

use crate::objects::resource::ObjectKey;
use crate::reservations::{ReservationIndex, DECOMMISSION_ITEMS_MAX};
use crate::state::State;

impl State {
    /// The reservations whose decommission is due at `now_ms` (marked `toDelete`, or past their
    /// end) and not yet submitted, earliest first, at most `DECOMMISSION_ITEMS_MAX`. For the
    /// leader's sweeper; apply re-checks each.
    pub fn reservations_due(&self, now_ms: u64) -> Vec<ObjectKey> {
        self.reservations.due(now_ms, DECOMMISSION_ITEMS_MAX)
    }

    /// Per-node reservation counters and the due index.
    pub fn reservations(&self) -> &ReservationIndex {
        &self.reservations
    }
}
