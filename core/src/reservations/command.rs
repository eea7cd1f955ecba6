//! The reservation command: the leader's decommission of a reservation that is due.

use serde::{Deserialize, Serialize};

use crate::objects::resource::ObjectKey;
use crate::operations::{OpLimits, OpPolicy};

/// A reservation command (`Command::Reservations`), applied by `operations/apply.rs` (a
/// decommission is an operation submitted with the reservation's mark, in one step).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ReservationCommand {
    /// Proposed by the leader for a key `State::reservations_due` gave it: submit the
    /// decommission (`verb` under `policy`, idempotency key `decommission/<uid>`) of the
    /// reservation on `target` and mark the reservation with it, in one step. Apply re-checks
    /// that it is due at this entry's time and not yet decommissioned.
    Decommission {
        target: ObjectKey,
        verb: String,
        policy: OpPolicy,
        limits: OpLimits,
    },
}
