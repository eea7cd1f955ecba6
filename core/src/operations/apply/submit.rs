//! Submits: a client's operation (idempotent by key, behind the target's earlier ones, under the
//! server's policy) and the leader's decommission of a reservation that is due.

use super::*;

/// A borrowed `Command::OpSubmit`.
pub(super) struct Submit<'a> {
    pub(super) target: &'a ObjectKey,
    pub(super) verb: &'a str,
    pub(super) params: &'a Value,
    pub(super) idempotency_key: Option<&'a str>,
    pub(super) create: Option<&'a Resource>,
    pub(super) policy: &'a OpPolicy,
    pub(super) limits: &'a OpLimits,
    /// The target's reservation is marked with this operation (a `Decommission`).
    pub(super) decommission: bool,
}

/// Queues a new operation (id `op-<log index>`) and shows it on its target, which must exist,
/// or is created by this step when the submit carries it.
pub(super) fn submit(
    state: &mut State,
    ctx: &ApplyContext,
    req: &Submit<'_>,
    out: &mut Effects,
) -> Result<Response, Rejection> {
    check_target(req.target)?;
    check_verb("verb", req.verb)?;
    check_params(req.params, req.limits)?;
    check_policy(req.policy, req.limits)?;
    if let Some(key) = req.idempotency_key {
        check_idempotency_key(key)?;
        if let Some(first) = state.ops.by_key(key) {
            return repeated(first, req);
        }
    }
    check_room(state, req.target, req.limits)?;
    let now = state.time_ms;
    let mut op = Operation {
        id: OperationId(ctx.log_index),
        idempotency_key: req.idempotency_key.map(str::to_string),
        target: req.target.clone(),
        target_uid: String::new(),
        verb: req.verb.to_string(),
        params: req.params.clone(),
        policy: req.policy.clone(),
        state: OpState::Queued,
        attempt: 1,
        worker: None,
        epoch: 0,
        submitted_ms: now,
        deadline_at_ms: req.policy.deadline_ms.map(|d| now.saturating_add(d)),
        transitions: Vec::new(),
        result: None,
    };
    op.enter(OpState::Queued, now);
    debug_assert!(state.ops.get(op.id).is_none(), "one submit per log entry");
    match req.create {
        Some(object) => {
            let key = object.key();
            if key != *req.target {
                return Err(Rejection::Invalid {
                    field: "create".to_string(),
                    rule: format!("must be the target {} (got {key})", req.target),
                });
            }
            let mut object = object.clone();
            target::show(&mut object, &op);
            // The step's first change, all or nothing; nothing after it can fail.
            let created = apply_object_op(state, ctx, ObjectOp::Create(&object))
                .map_err(|r| under("create", r))?;
            op.target_uid = created.object.metadata.uid.to_string();
            emit(&mut out.events, &created);
        }
        None => {
            let current = state.objects.get(req.target);
            let current = current.ok_or_else(|| Rejection::NotFound {
                key: req.target.clone(),
            })?;
            op.target_uid = current.metadata.uid.to_string();
            let mut write = target::prepare(state, &op, false)?;
            if req.decommission {
                // A new operation always changes the target's `status.operation`.
                debug_assert!(matches!(write, target::TargetWrite::Put(_)));
                target::mark_decommission(&mut write, op.id);
            }
            target::write(state, ctx, write, &mut out.events);
        }
    }
    let stored = publish(state, op, out);
    evict(state, req.limits);
    Ok(Response::Operations(OperationReply::Submitted {
        operation: stored,
        created: true,
    }))
}

/// Submits the decommission of the reservation on `target` if it is due now and was not
/// submitted yet, and marks the reservation with it in the same step.
pub(super) fn decommission(
    state: &mut State,
    ctx: &ApplyContext,
    target: &ObjectKey,
    (verb, policy): (&str, &OpPolicy),
    limits: &OpLimits,
    out: &mut Effects,
) -> Result<Response, Rejection> {
    check_target(target)?;
    let object = state
        .objects
        .get(target)
        .ok_or_else(|| Rejection::NotFound {
            key: target.clone(),
        })?;
    let not_due = |reason: String| Rejection::ReservationNotDue {
        key: target.clone(),
        reason,
    };
    let Some(reservation) = object.reservation.as_deref() else {
        return Err(not_due("the object has no reservation".to_string()));
    };
    if let Some(id) = reservation.decommission {
        return Err(not_due(format!("its decommission {id} was submitted")));
    }
    if !reservation.is_due(state.time_ms) {
        let reason = match reservation.expires_at {
            Some(at) => format!(
                "it ends at {}, after this entry's time {}",
                format_time_ms(at),
                format_time_ms(state.time_ms)
            ),
            None => "it has no end and is not marked toDelete".to_string(),
        };
        return Err(not_due(reason));
    }
    let key = format!("{DECOMMISSION_KEY_PREFIX}{}", object.metadata.uid);
    let reason = if reservation.to_delete {
        "toDelete"
    } else {
        "expired"
    };
    let params = json!({ "decommission": { "reason": reason } });
    let req = Submit {
        target,
        verb,
        params: &params,
        idempotency_key: Some(&key),
        create: None,
        policy,
        limits,
        decommission: true,
    };
    submit(state, ctx, &req, out)
}

/// A submit whose idempotency key is taken: the first operation if it asked the same, else a
/// refusal (a key reused for other work is a client bug).
pub(super) fn repeated(first: &Operation, req: &Submit<'_>) -> Result<Response, Rejection> {
    if first.target == *req.target && first.verb == req.verb && first.params == *req.params {
        return Ok(Response::Operations(OperationReply::Submitted {
            operation: first.clone(),
            created: false,
        }));
    }
    Err(Rejection::Invalid {
        field: "idempotency_key".to_string(),
        rule: format!(
            "already used by {} ({} {}) with another target, verb or params",
            first.id, first.verb, first.target
        ),
    })
}

/// `operations.active_max` and `operations.per_target_max`.
pub(super) fn check_room(
    state: &State,
    target: &ObjectKey,
    limits: &OpLimits,
) -> Result<(), Rejection> {
    let active = state.ops.active_len();
    if active >= usize_of(limits.active_max) {
        let what = format!("{active} operations have not ended");
        let max = limits.active_max;
        return Err(at_limit("operations", what, "operations.active_max", max));
    }
    let on_target = state.ops.active_on(target).count();
    if on_target >= usize_of(limits.per_target_max) {
        let what = format!("{on_target} operations on {target} have not ended");
        let max = limits.per_target_max;
        return Err(at_limit("target", what, "operations.per_target_max", max));
    }
    Ok(())
}
