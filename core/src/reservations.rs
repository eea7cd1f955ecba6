//! Reservations: resources that hold capacity on a node for a while and then are decommissioned,
//! as in ThreeFold's provision engine (seed 003): a `Reservation` on a resource names the node it
//! is reserved on, the resource units it takes (CRU, MRU, HRU, SRU), and when it ends (a duration
//! from creation, or an absolute time). When it ends, or when its owner marks it `toDelete`, the
//! leader submits its decommission, a `delete` operation on the resource, exactly once: the
//! submit and the mark `decommission: op-N` are one atomic step (`Command::Decommission`), and a
//! marked reservation is never due again. A succeeded decommission deletes the resource.
//!
//! `ReservationIndex` is what the leader and readers ask without a scan: the reservations still
//! waiting for their decommission ordered by when they fall due, and per node the workloads (by
//! kind) and units reserved. It is derived from the objects alone (kept in step by every object
//! change, rebuilt from the objects on restore), so it is never written into a snapshot and can
//! never disagree with them. As everywhere in `state`: no clock, no I/O, ordered collections.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use compact_str::CompactString;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::objects::resource::{ObjectKey, Resource};
use crate::operations::OperationId;
use crate::rejection::Rejection;

/// Longest reservation `nodeId`.
pub const RESERVATION_NODE_CHARS_MAX: usize = 253;
/// Longest `durationSeconds`: 10 years.
pub const RESERVATION_DURATION_SECONDS_MAX: u64 = 10 * 366 * 24 * 3600;
/// Largest value of one resource unit on one reservation (2^53, the largest integer every JSON
/// reader holds exactly), so per-node sums of many reservations cannot overflow in practice
/// (they saturate if they ever would).
pub const RESERVATION_UNITS_MAX: u64 = 1 << 53;
/// Most reservations one `Command::Decommission` carries and `State::reservations_due` returns.
pub const DECOMMISSION_ITEMS_MAX: usize = 1000;
/// The idempotency key of a reservation's decommission operation: `decommission/<uid>`.
pub const DECOMMISSION_KEY_PREFIX: &str = "decommission/";

/// The resource units a reservation takes, in the user's own measures (ThreeFold: CRU cores,
/// MRU/HRU/SRU in GB). Integers, so sums are exact and the same on every replica.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Units {
    pub cru: u64,
    pub mru: u64,
    pub hru: u64,
    pub sru: u64,
}

impl Units {
    pub fn is_zero(&self) -> bool {
        *self == Units::default()
    }

    fn fields(&self) -> [(&'static str, u64); 4] {
        [
            ("cru", self.cru),
            ("mru", self.mru),
            ("hru", self.hru),
            ("sru", self.sru),
        ]
    }

    fn saturating_add(self, o: Units) -> Units {
        Units {
            cru: self.cru.saturating_add(o.cru),
            mru: self.mru.saturating_add(o.mru),
            hru: self.hru.saturating_add(o.hru),
            sru: self.sru.saturating_add(o.sru),
        }
    }

    fn saturating_sub(self, o: Units) -> Units {
        Units {
            cru: self.cru.saturating_sub(o.cru),
            mru: self.mru.saturating_sub(o.mru),
            hru: self.hru.saturating_sub(o.hru),
            sru: self.sru.saturating_sub(o.sru),
        }
    }
}

/// The reservation a resource carries (its JSON field `reservation`).
///
/// `nodeId` and `units` are the owner's; the end is `durationSeconds` after the resource's
/// creation (it wins when both are given, so a read-modify-write round trip keeps working) or the
/// absolute `expiresAt`, or never (only `toDelete` ends it). `expiresAt` is shown in either case.
/// `decommission` is set by steward alone, in the step that submits the decommission.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reservation {
    /// The node (ThreeFold's `node_id`) the capacity is reserved on; counters are per node.
    #[serde(default)]
    pub node_id: CompactString,
    /// Seconds from the resource's `creationTimestamp` to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<u64>,
    /// When it ends (ms since the Unix epoch; RFC 3339 in JSON).
    #[serde(default, with = "rfc3339_ms", skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Units::is_zero")]
    pub units: Units,
    /// The owner asks for the decommission now, before the end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub to_delete: bool,
    /// The decommission operation, once submitted (server-set; ignored on input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decommission: Option<OperationId>,
}

impl Reservation {
    /// When the leader should submit the decommission: now (`Some(0)`) when marked `toDelete`,
    /// at `expiresAt` otherwise; `None` when it never falls due or already was decommissioned.
    pub fn due_ms(&self) -> Option<u64> {
        if self.decommission.is_some() {
            return None;
        }
        if self.to_delete {
            return Some(0);
        }
        self.expires_at
    }

    /// Whether the decommission is due at `now_ms`.
    pub fn is_due(&self, now_ms: u64) -> bool {
        self.due_ms().is_some_and(|due| due <= now_ms)
    }
}

/// Checks a client's reservation and gives the one to store: server-set fields from `current`
/// (the stored reservation, on an update) and the end computed from `created_ms` (the resource's
/// creation, in cluster time), rounded up to the next whole second so `expiresAt` shows
/// exactly: never before `durationSeconds` after the create (README "Time", promise 1).
pub fn settle(
    given: &Reservation,
    current: Option<&Reservation>,
    created_ms: u64,
) -> Result<Reservation, Rejection> {
    let node = &given.node_id;
    if node.is_empty() {
        return Err(invalid("reservation.nodeId", "required".to_string()));
    }
    if node.len() > RESERVATION_NODE_CHARS_MAX || node.chars().any(|c| c.is_control()) {
        return Err(invalid(
            "reservation.nodeId",
            format!(
                "at most {RESERVATION_NODE_CHARS_MAX} characters, no control characters \
                 (got {} characters)",
                node.len()
            ),
        ));
    }
    for (unit, value) in given.units.fields() {
        if value > RESERVATION_UNITS_MAX {
            return Err(invalid(
                &format!("reservation.units.{unit}"),
                format!("at most {RESERVATION_UNITS_MAX} (got {value})"),
            ));
        }
    }
    let mut next = Reservation {
        decommission: None,
        ..given.clone()
    };
    if let Some(seconds) = given.duration_seconds {
        if seconds == 0 || seconds > RESERVATION_DURATION_SECONDS_MAX {
            return Err(invalid(
                "reservation.durationSeconds",
                format!("must be 1..={RESERVATION_DURATION_SECONDS_MAX} (got {seconds})"),
            ));
        }
        let base = created_ms.div_ceil(1000).saturating_mul(1000);
        next.expires_at = Some(base.saturating_add(seconds * 1000));
    }
    let Some(current) = current else {
        return Ok(next);
    };
    if current.node_id != next.node_id {
        return Err(invalid(
            "reservation.nodeId",
            format!("cannot change (reserved on {:?})", current.node_id),
        ));
    }
    next.decommission = current.decommission;
    if let Some(id) = current.decommission {
        if next != *current {
            return Err(invalid(
                "reservation",
                format!("cannot change after its decommission ({id}) was submitted"),
            ));
        }
    }
    Ok(next)
}

fn invalid(field: &str, rule: String) -> Rejection {
    Rejection::Invalid {
        field: field.to_string(),
        rule,
    }
}

/// What is reserved on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NodeReservations {
    /// Reservations (workloads) on the node.
    pub workloads: u64,
    /// The same by resource kind (ThreeFold counts workloads per type).
    pub by_kind: BTreeMap<CompactString, u64>,
    pub units: Units,
}

impl NodeReservations {
    fn add(&mut self, kind: &CompactString, units: Units) {
        self.workloads = self.workloads.saturating_add(1);
        let count = self.by_kind.entry(kind.clone()).or_default();
        *count = count.saturating_add(1);
        self.units = self.units.saturating_add(units);
    }

    fn remove(&mut self, kind: &CompactString, units: Units) {
        self.workloads = self.workloads.saturating_sub(1);
        if let Some(count) = self.by_kind.get_mut(kind) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.by_kind.remove(kind);
            }
        }
        self.units = self.units.saturating_sub(units);
    }
}

/// The reservations still to decommission by due time, and what each node has reserved; see the
/// module docs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReservationIndex {
    /// (due ms, key) of every reservation with a `due_ms`.
    pending: imbl::OrdSet<(u64, ObjectKey)>,
    nodes: imbl::OrdMap<CompactString, NodeReservations>,
}

impl ReservationIndex {
    /// Keeps the index in step with one object change: `before` is the stored object that is
    /// replaced or removed (if any), `after` the one stored now (if any).
    pub fn replace(&mut self, before: Option<&Resource>, after: Option<&Resource>) {
        if let Some((object, r)) = before.and_then(with_reservation) {
            let key = object.key();
            if let Some(due) = r.due_ms() {
                self.pending.remove(&(due, key));
            }
            let empty = self.nodes.get_mut(&r.node_id).map(|node| {
                node.remove(&object.kind, r.units);
                node.workloads == 0
            });
            if empty == Some(true) {
                self.nodes.remove(&r.node_id);
            }
        }
        if let Some((object, r)) = after.and_then(with_reservation) {
            if let Some(due) = r.due_ms() {
                self.pending.insert((due, object.key()));
            }
            let node = self.nodes.entry(r.node_id.clone()).or_default();
            node.add(&object.kind, r.units);
        }
    }

    /// The earliest time a reservation is due.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.pending.get_min().map(|(at, _)| *at)
    }

    /// The reservations due at `now_ms`, earliest first, at most `max`.
    pub fn due(&self, now_ms: u64, max: usize) -> Vec<ObjectKey> {
        self.pending
            .iter()
            .take_while(|(due, _)| *due <= now_ms)
            .take(max)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// Reservations waiting for their decommission (due or not).
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// What one node has reserved.
    pub fn node(&self, node_id: &str) -> Option<&NodeReservations> {
        self.nodes.get(node_id)
    }

    /// Every node with a reservation, in node id order.
    pub fn nodes(&self) -> impl Iterator<Item = (&CompactString, &NodeReservations)> {
        self.nodes.iter()
    }
}

fn with_reservation(object: &Resource) -> Option<(&Resource, &Reservation)> {
    object.reservation.as_deref().map(|r| (object, r))
}

/// `Option<u64>` ms since the Unix epoch as an RFC 3339 string: whole seconds when the time is
/// whole seconds (`2026-11-22T10:00:00Z`), else milliseconds. Input: any RFC 3339 time at or
/// after the epoch.
pub mod command;
mod rfc3339_ms {
    use super::*;

    /// The last second humantime can print.
    const MS_MAX: u64 = 253_402_300_799_999;

    pub fn serialize<S: Serializer>(value: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(ms) => s.collect_str(&format(*ms)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        parse(&text).map(Some).map_err(serde::de::Error::custom)
    }

    pub fn format(ms: u64) -> String {
        let ms = ms.min(MS_MAX);
        let time = UNIX_EPOCH + Duration::from_millis(ms);
        match ms % 1000 {
            0 => humantime::format_rfc3339_seconds(time).to_string(),
            _ => humantime::format_rfc3339_millis(time).to_string(),
        }
    }

    pub fn parse(text: &str) -> Result<u64, String> {
        let time = humantime::parse_rfc3339_weak(text)
            .map_err(|e| format!("reservation.expiresAt: {text:?} is not an RFC 3339 time: {e}"))?;
        let since = time
            .duration_since(UNIX_EPOCH)
            .map_err(|_| format!("reservation.expiresAt: {text:?} is before 1970"))?;
        u64::try_from(since.as_millis())
            .map_err(|_| format!("reservation.expiresAt: {text:?} is too far away"))
    }
}

pub use rfc3339_ms::format as format_time_ms;

mod queries;
#[cfg(test)]
mod tests;
