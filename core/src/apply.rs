//! `apply_effects`, the only code that changes a `State` (`state.rs`): the cross-cutting guard
//! (time, term, auth revision, space, mirror objects) in front of each capability's apply.
//!
//! The Raft state machine calls `apply_effects` once per committed entry, in log order, on every
//! replica (and `apply_blank` for blank and membership entries); readers call `get`/`list`/`lock`
//! on the same `State`. Everything here is deterministic: no clock (time comes from the
//! leader-stamped `ApplyContext::time_ms`), no I/O, no randomness, no hash-order iteration. A
//! `Rejection` is an ordinary `Response`: it leaves objects, revision, retired set and locks
//! exactly as they were (the state's time and term tracking may still advance to the entry's,
//! which is harmless and keeps time monotone across every entry).

use crate::command::{MemberCommand, ObjectCommand, OperationCommand};
use std::sync::Arc;

use crate::command::{Command, Event, Response};

use crate::deployments::DEPLOYMENT_KIND;
pub use crate::effects::{ApplyContext, Effects};
use crate::invariants::{enforce, Before};
use crate::locks::LockContext;
use crate::objects::resource::ObjectKey;
use crate::pools::POOL_KIND;
use crate::rejection::Rejection;
use crate::state::State;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod read_tests;
#[cfg(test)]
mod shown_tests;
#[cfg(test)]
mod tests;

pub use crate::snapshot::SNAPSHOT_FORMAT;

/// Applies one committed command: THE entry that changes `State`. Pure: no clock, I/O or
/// randomness. Never panics on any `Command`. Pushes one `Event` per object change, in revision
/// order, and one `LockEvent` per lock change; a rejected command pushes none. Lock commands
/// never change the store revision.
pub fn apply_effects(
    state: &mut State,
    ctx: &ApplyContext,
    cmd: &Command,
    out: &mut Effects,
) -> Response {
    let before = Before::of(state, out);
    let response = apply_guarded(state, ctx, cmd, out);
    // In every build: a broken invariant stops the node before this entry's answer leaves it.
    enforce(ctx, before.check(state, out));
    response
}

/// `apply_effects` without the invariant checks: the guards, then the capability's apply.
fn apply_guarded(
    state: &mut State,
    ctx: &ApplyContext,
    cmd: &Command,
    out: &mut Effects,
) -> Response {
    if !ctx.stamped {
        // Only the term's own leader's time may enter: nothing of this entry is applied.
        observe_term(state, ctx);
        return Response::Rejected(Rejection::NotStamped { term: ctx.term });
    }
    if let Command::Guarded {
        auth_revision,
        command,
    } = cmd
    {
        if *auth_revision == state.auth.revision {
            return apply_guarded(state, ctx, command, out);
        }
        advance_time(state, ctx);
        observe_term(state, ctx);
        start_term_clock(state, ctx);
        return Response::Rejected(Rejection::AuthChanged {
            authorized_at: *auth_revision,
            now: state.auth.revision,
        });
    }
    advance_time(state, ctx);
    observe_term(state, ctx);
    if let Some(rejection) = mirror_write(cmd).or(state.ensure_space_for(cmd).err()) {
        start_term_clock(state, ctx);
        return Response::Rejected(rejection);
    }
    let events = &mut out.events;
    let response = match cmd {
        Command::Objects(command) => crate::objects::apply::apply(state, ctx, command, events),
        Command::Members(MemberCommand::Retire { node_id }) => {
            state.retired.insert(*node_id);
            Response::Done {
                revision: state.revision,
            }
        }
        Command::Locks(command) => {
            let lock_ctx = LockContext {
                now_ms: state.time_ms,
                log_index: ctx.log_index,
                term_started_ms: state.term_started_ms,
                revision: state.revision,
            };
            state
                .locks
                .apply_command(&lock_ctx, command, &mut out.lock_events)
        }
        Command::Operations(command) => crate::operations::apply::apply(state, ctx, command, out),
        Command::Reservations(command) => {
            crate::operations::apply::apply_reservation(state, ctx, command, out)
        }
        Command::Deployments(command) => {
            crate::deployments::apply::apply(state, ctx, command, events)
        }
        Command::Pools(command) => {
            crate::pools::apply::apply(state, ctx, command, events, &mut out.pool_events)
        }
        // Shown times only (when a user was made, an alarm raised): nothing of theirs expires.
        Command::Auth(action) => Arc::make_mut(&mut state.auth)
            .apply(action, state.shown_ms)
            .map_or_else(Response::Rejected, Response::Auth),
        Command::Alarms(action) => state
            .alarms
            .apply(action, state.shown_ms)
            .map_or_else(Response::Rejected, Response::Alarms),
        Command::Kv(command) => crate::kv::apply::apply(state, ctx, command, &mut out.kv_events),
        Command::Guarded { .. } => unreachable!("unwrapped above"),
    };
    // After the command: a sweep that is itself the term's first stamped entry sees no start,
    // so it expires nothing whatever its grace.
    start_term_clock(state, ctx);
    response
}

/// The refusal of a resource write (or an operation) aimed at a deployment's mirror object: those
/// change only with their deployment (`Command::Deployments`), or mirror and table would part.
fn mirror_write(cmd: &Command) -> Option<Rejection> {
    let refuse = |key: &ObjectKey| {
        let api = match key.kind.as_str() {
            DEPLOYMENT_KIND => {
                "mirror deployments and change only through the StatusService API \
                                (steward deployment ...)"
            }
            POOL_KIND
            | crate::pools::POOL_CLAIM_KIND
            | crate::pools::VIRTUAL_CONFIG_KIND
            | crate::pools::DYNAMIC_KIND
            | crate::pools::CONSTRUCT_KIND => {
                "are leased and synced only through the LeaseService API (steward pool ...)"
            }
            _ => return None,
        };
        Some(Rejection::Invalid {
            field: "kind".to_string(),
            rule: format!(
                "{} objects {api}; {key} cannot be written directly",
                key.kind
            ),
        })
    };
    match cmd {
        Command::Objects(ObjectCommand::Create { object, .. })
        | Command::Objects(ObjectCommand::Update { object, .. })
        | Command::Objects(ObjectCommand::UpdateStatus { object, .. }) => refuse(&object.key()),
        Command::Objects(ObjectCommand::Delete { key, .. }) => refuse(key),
        // The leader's Mason task submits the construct operations on their objects.
        Command::Operations(OperationCommand::Submit { target: key, .. })
            if key.kind == crate::pools::CONSTRUCT_KIND =>
        {
            None
        }
        Command::Operations(OperationCommand::Submit { target: key, .. }) => refuse(key),
        Command::Objects(ObjectCommand::Txn { ops, .. }) => {
            ops.iter().find_map(|op| refuse(&op.key()))
        }
        Command::Operations(
            OperationCommand::RegisterWorker { .. }
            | OperationCommand::Heartbeat { .. }
            | OperationCommand::DeregisterWorker { .. }
            | OperationCommand::Assign { .. }
            | OperationCommand::Report { .. }
            | OperationCommand::Abort { .. }
            | OperationCommand::Sweep { .. },
        )
        | Command::Locks(_)
        | Command::Reservations(_)
        | Command::Deployments(_)
        | Command::Pools(_)
        | Command::Auth(_)
        | Command::Alarms(_)
        | Command::Members(_)
        | Command::Kv(_)
        | Command::Guarded { .. } => None,
    }
}

/// `apply_effects` for callers that only care about objects (resource-only tools and tests):
/// lock events are dropped. The Raft state machine must use `apply_effects`, or waiting
/// acquires and lock watchers would never hear of grants.
pub fn apply(
    state: &mut State,
    ctx: &ApplyContext,
    cmd: &Command,
    events: &mut Vec<Event>,
) -> Response {
    let mut out = Effects {
        events: std::mem::take(events),
        ..Effects::default()
    };
    let response = apply_effects(state, ctx, cmd, &mut out);
    *events = out.events;
    response
}

/// Applies a blank or membership entry: only the time and the term advance (such entries carry
/// no leader time, so they never start the term's grace clock).
pub fn apply_blank(state: &mut State, ctx: &ApplyContext) {
    advance_time(state, ctx);
    observe_term(state, ctx);
}

/// Only a stamp measured in the entry's own term moves time (README "Time", promise 3), and the
/// shown time with it (`shown_time`).
fn advance_time(state: &mut State, ctx: &ApplyContext) {
    if ctx.stamped {
        let time_ms = state.time_ms.max(ctx.time_ms);
        state.shown_ms = shown_time(
            state.shown_ms,
            time_ms - state.time_ms,
            time_ms,
            ctx.wall_ms,
        );
        state.time_ms = time_ms;
    }
}

/// The shown time after an entry that moved cluster time by `elapsed_ms` to `time_ms`, given
/// the wall-clock time its leader shows (`wall_ms`): that time when it has one, else the
/// shown time moved on as cluster time moved; never backwards, and never behind cluster time,
/// so a time computed from a shown time (a reservation's end) is never early on cluster time.
fn shown_time(shown_ms: u64, elapsed_ms: u64, time_ms: u64, wall_ms: Option<u64>) -> u64 {
    let next = wall_ms.unwrap_or_else(|| shown_ms.saturating_add(elapsed_ms));
    next.max(shown_ms).max(time_ms)
}

/// A newer term resets the term's start (the new leader has not stamped anything yet).
fn observe_term(state: &mut State, ctx: &ApplyContext) {
    if ctx.term > state.term {
        state.term = ctx.term;
        state.term_started_ms = None;
    }
}

/// The first time-stamped entry of the current term starts its clock at the state time (not the
/// raw entry time: that may lag behind a previous leader's clock, and measuring the grace from
/// it would shorten the grace).
fn start_term_clock(state: &mut State, ctx: &ApplyContext) {
    if ctx.stamped && ctx.term == state.term && state.term_started_ms.is_none() {
        state.term_started_ms = Some(state.time_ms);
    }
}
