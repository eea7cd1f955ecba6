//! Random lock command sequences (with fenced writes, sweeps, leader changes and clocks that jump
//! back) through `apply_effects`, against a reference model built only from what the responses
//! and `LockEvent`s say. Checked after every step: many READ holders or one WRITE holder; every
//! new grant's token is above every token before it; the state's holders are exactly the model's
//! live grants; a fenced write applies iff the model has its token as a live WRITE holder; release
//! and refresh succeed iff the model has that grant; no expiry inside the grace, no grant inside a
//! lock-delay, queue grants in FIFO order; no grant ever goes to a waiter whose wait had ended at
//! the entry's time, and no wait expires early (the steps make such waiters common: cancels that
//! never come, time jumps past waits, sweeps that skip the lock); a rejection changes nothing;
//! `locks_due` agrees with a full scan; and snapshots round-trip.

use crate::command::{LockCommand, ObjectCommand};
use crate::command::{LockReply, ObjectReply};
use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::apply::{apply_blank, apply_effects};
use crate::command::{Command, Response};
use crate::effects::{ApplyContext, Effects};
use crate::objects::resource::Resource;
use crate::state::State;

const NAMES: [&str; 3] = ["a", "b", "c"];
const HOLDERS: [&str; 3] = ["h1", "h2", "h3"];
/// Small, so the limits are reached often.
const LIMITS: LockLimits = LockLimits {
    holders_max: 2,
    waiters_max: 2,
    locks_max: 2,
    details_bytes_max: 64,
};

/// How a step picks a token.
#[derive(Clone, Copy, Debug)]
enum Pick {
    /// The holder's live token on that lock, if the model knows one.
    Own,
    /// Some token up to one past the last issued (often stale, sometimes never issued).
    Any(u64),
}

#[derive(Clone, Debug)]
enum Step {
    Acquire {
        name: usize,
        holder: usize,
        write: bool,
        ttl_ms: Option<u64>,
        wait_ms: u64,
    },
    Refresh {
        name: usize,
        holder: usize,
        token: Pick,
        ttl_ms: Option<u64>,
    },
    Release {
        name: usize,
        holder: usize,
        token: Pick,
    },
    /// Cancel the `pick`-th wait seen so far; `other` names another holder than the waiter.
    Cancel { pick: usize, other: bool },
    Sweep {
        names: Vec<usize>,
        grace_ms: u64,
        lock_delay_ms: u64,
    },
    /// Create a fresh object fenced by `name:token`.
    Fenced { name: usize, token: Pick },
    /// A leader change: a blank entry of the next term.
    NewTerm,
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![3 => Just(Pick::Own), 1 => (0u64..64).prop_map(Pick::Any)]
}

fn step() -> impl Strategy<Value = Step> {
    let name = 0..NAMES.len();
    let holder = 0..HOLDERS.len();
    let ttl = prop_oneof![Just(None), (1u64..400).prop_map(Some)];
    let wait = prop_oneof![Just(0u64), 1u64..100, 1u64..600];
    prop_oneof![
        6 => (name.clone(), holder.clone(), any::<bool>(), ttl.clone(), wait).prop_map(
            |(name, holder, write, ttl_ms, wait_ms)| Step::Acquire { name, holder, write, ttl_ms, wait_ms }
        ),
        2 => (name.clone(), holder.clone(), pick(), ttl).prop_map(
            |(name, holder, token, ttl_ms)| Step::Refresh { name, holder, token, ttl_ms }
        ),
        3 => (name.clone(), holder, pick()).prop_map(
            |(name, holder, token)| Step::Release { name, holder, token }
        ),
        2 => (0usize..16, prop::bool::weighted(0.2)).prop_map(
            |(pick, other)| Step::Cancel { pick, other }
        ),
        3 => (prop::sample::subsequence(vec![0, 1, 2], 0..=3), 0u64..300, 0u64..300).prop_map(
            |(names, grace_ms, lock_delay_ms)| Step::Sweep { names, grace_ms, lock_delay_ms }
        ),
        3 => (name, pick()).prop_map(|(name, token)| Step::Fenced { name, token }),
        1 => Just(Step::NewTerm),
    ]
}

/// How far the leader's clock moves before a step: mostly a little, sometimes past every wait.
fn time_step() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..300, 1 => 300u64..1_500]
}

/// What the model knows, learned only from responses and events.
#[derive(Debug, Default)]
struct Model {
    /// (lock, holder) -> (mode, token) of every live grant.
    grants: BTreeMap<(String, String), (LockMode, u64)>,
    /// The highest token issued.
    issued: u64,
    /// Every queued acquire: (lock, holder, wait id).
    waits: Vec<(String, String, u64)>,
    /// Wait id -> `wait_until_ms` of each queued acquire not yet granted, cancelled or expired.
    open_waits: BTreeMap<u64, u64>,
    /// Per lock, the wait id of its last grant from the queue: FIFO means these only grow.
    last_queue_grant: BTreeMap<String, u64>,
    /// Per lock, the end of the lock-delay its last WRITE expiry started.
    delay_until: BTreeMap<String, u64>,
    term: u64,
    term_started_ms: Option<u64>,
}

impl Model {
    fn token(&self, name: &str, holder: &str, pick: Pick) -> u64 {
        let own = self.grants.get(&(name.to_string(), holder.to_string()));
        match (pick, own) {
            (Pick::Own, Some(&(_, token))) => token,
            (Pick::Own, None) => self.issued,
            (Pick::Any(k), _) => k % (self.issued + 2),
        }
    }

    fn holds(&self, name: &str, holder: &str, token: u64) -> bool {
        let grant = self.grants.get(&(name.to_string(), holder.to_string()));
        grant.is_some_and(|&(_, t)| t == token)
    }

    /// A fenced write must apply iff this holds.
    fn live_writer(&self, name: &str, token: u64) -> bool {
        let mut on_lock = self.grants.iter().filter(|((n, _), _)| n == name);
        on_lock.any(|(_, &(mode, t))| mode == LockMode::Write && t == token)
    }

    fn holders_of(&self, name: &str) -> Vec<(String, LockMode, u64)> {
        let on_lock = self.grants.iter().filter(|((n, _), _)| n == name);
        on_lock.map(|((_, h), &(m, t))| (h.clone(), m, t)).collect()
    }
}

/// Everything one step needs to judge what happened.
struct Judge<'a> {
    model: &'a mut Model,
    before: &'a State,
    now: u64,
    /// `Some((grace passed, lock_delay_ms))` when the step is a sweep.
    sweep: Option<(bool, u64)>,
}

impl Judge<'_> {
    /// Feeds one event to the model, checking it against the rules.
    fn event(&mut self, e: &LockEvent) -> Result<(), TestCaseError> {
        let model = &mut *self.model;
        let key = (e.name.clone(), e.holder.clone());
        match e.event_type {
            LockEventType::Granted => {
                let refresh = model.grants.get(&key) == Some(&(e.mode, e.token));
                if refresh {
                    prop_assert!(e.wait_id.is_some(), "a silent refresh emitted Granted");
                } else {
                    prop_assert!(
                        e.token > model.issued,
                        "token {} not above {}",
                        e.token,
                        model.issued
                    );
                    model.issued = e.token;
                }
                model.grants.insert(key, (e.mode, e.token));
                let holders = model.holders_of(&e.name);
                let writers = holders
                    .iter()
                    .filter(|(_, m, _)| *m == LockMode::Write)
                    .count();
                prop_assert!(
                    writers == 0 || holders.len() == 1,
                    "exclusion broken: {holders:?}"
                );
                prop_assert!(holders.len() <= LIMITS.holders_max as usize);
                let delay = model.delay_until.get(&e.name).copied().unwrap_or(0);
                prop_assert!(
                    self.now >= delay,
                    "granted at {} inside lock-delay to {delay}",
                    self.now
                );
                if let Some(wait_id) = e.wait_id {
                    let last = model.last_queue_grant.insert(e.name.clone(), wait_id);
                    prop_assert!(last.is_none_or(|last| wait_id > last), "queue not FIFO");
                    let until = model.open_waits.remove(&wait_id);
                    prop_assert!(until.is_some(), "granted wait {wait_id} is not open");
                    prop_assert!(
                        until.is_some_and(|until| until > self.now),
                        "granted wait {wait_id} at {}, its wait had ended at {until:?}",
                        self.now
                    );
                }
            }
            LockEventType::Released | LockEventType::Expired => {
                prop_assert_eq!(model.grants.remove(&key), Some((e.mode, e.token)));
                if e.event_type == LockEventType::Expired {
                    let Some((past_grace, lock_delay_ms)) = self.sweep else {
                        return Err(TestCaseError::fail("expired outside a sweep"));
                    };
                    prop_assert!(past_grace, "expired inside the grace");
                    let was = self.before.lock(&e.name).and_then(|l| l.holder(&e.holder));
                    let expiry = was.and_then(|h| h.expires_at_ms);
                    prop_assert!(expiry.is_some_and(|t| t <= self.now), "expired early");
                    if e.mode == LockMode::Write && lock_delay_ms > 0 {
                        model
                            .delay_until
                            .insert(e.name.clone(), self.now + lock_delay_ms);
                    }
                }
            }
            LockEventType::WaitCancelled | LockEventType::WaitExpired => {
                prop_assert_eq!(e.token, 0);
                let until = e.wait_id.and_then(|w| model.open_waits.remove(&w));
                prop_assert!(
                    until.is_some(),
                    "wait {:?} ended twice or never was",
                    e.wait_id
                );
                if e.event_type == LockEventType::WaitExpired {
                    prop_assert!(
                        until.is_some_and(|until| until <= self.now),
                        "expired early"
                    );
                }
            }
        }
        Ok(())
    }
}

fn acquire_command(
    name: &str,
    holder: &str,
    mode: LockMode,
    ttl_ms: Option<u64>,
    wait_ms: u64,
) -> Command {
    Command::Locks(LockCommand::Acquire {
        name: name.into(),
        holder: holder.into(),
        mode,
        ttl_ms,
        details: serde_json::json!({ "resourceType": "directors" }),
        wait_ms,
        limits: LIMITS,
    })
}

/// The command for a step, and what the model predicts about its response.
fn command(model: &Model, step: &Step, index: u64) -> (Command, Option<bool>) {
    match step {
        Step::Acquire {
            name,
            holder,
            write,
            ttl_ms,
            wait_ms,
        } => {
            let mode = if *write {
                LockMode::Write
            } else {
                LockMode::Read
            };
            let cmd = acquire_command(NAMES[*name], HOLDERS[*holder], mode, *ttl_ms, *wait_ms);
            (cmd, None)
        }
        Step::Refresh {
            name,
            holder,
            token,
            ttl_ms,
        } => {
            let (name, holder) = (NAMES[*name], HOLDERS[*holder]);
            let token = model.token(name, holder, *token);
            let cmd = Command::Locks(LockCommand::Refresh {
                name: name.into(),
                holder: holder.into(),
                token,
                ttl_ms: *ttl_ms,
            });
            (cmd, Some(model.holds(name, holder, token)))
        }
        Step::Release {
            name,
            holder,
            token,
        } => {
            let (name, holder) = (NAMES[*name], HOLDERS[*holder]);
            let token = model.token(name, holder, *token);
            let cmd = Command::Locks(LockCommand::Release {
                name: name.into(),
                holder: holder.into(),
                token,
            });
            (cmd, Some(model.holds(name, holder, token)))
        }
        Step::Cancel { pick, other } => {
            let (name, holder, wait_id) = match model.waits.get(pick % model.waits.len().max(1)) {
                Some((n, h, w)) => (n.clone(), h.clone(), *w),
                None => ("a".to_string(), "h1".to_string(), 1),
            };
            let holder = if *other { format!("{holder}x") } else { holder };
            let cmd = Command::Locks(LockCommand::CancelWait {
                name,
                holder,
                wait_id,
            });
            (cmd, None)
        }
        Step::Sweep {
            names,
            grace_ms,
            lock_delay_ms,
        } => {
            let cmd = Command::Locks(LockCommand::Sweep {
                names: names.iter().map(|&i| NAMES[i].to_string()).collect(),
                grace_ms: *grace_ms,
                lock_delay_ms: *lock_delay_ms,
            });
            (cmd, None)
        }
        Step::Fenced { name, token } => {
            let lock = NAMES[*name];
            let token = match token {
                Pick::Own => {
                    let on_lock = model.grants.iter().find(|((n, _), _)| n == lock);
                    on_lock.map_or(model.issued, |(_, &(_, t))| t)
                }
                Pick::Any(k) => k % (model.issued + 2),
            };
            let object = Resource::new("v1", "Director", "default", &format!("o{index}"));
            let fence = Some(Fence {
                lock: lock.into(),
                token,
            });
            (
                Command::Objects(ObjectCommand::Create { object, fence }),
                Some(model.live_writer(lock, token)),
            )
        }
        Step::NewTerm => unreachable!("a leader change is a blank entry, not a command"),
    }
}

/// The names `locks_due` must return, by a full scan.
fn due_by_scan(state: &State, now: u64) -> Vec<String> {
    let mut due: Vec<(u64, String)> = state
        .locks()
        .filter_map(|l| l.next_due_ms().map(|d| (d, l.name.clone())))
        .filter(|(d, _)| *d <= now)
        .collect();
    due.sort();
    due.into_iter()
        .map(|(_, n)| n)
        .take(LOCK_SWEEP_NAMES_MAX)
        .collect()
}

/// Runs one generated case.
fn run(steps: &[(u64, bool, Step)]) -> Result<(), TestCaseError> {
    let mut state = State::new();
    let mut model = Model {
        term: 1,
        ..Model::default()
    };
    let mut clock = 1_000u64;
    for (i, (dt, slow, step)) in steps.iter().enumerate() {
        let index = i as u64 + 1;
        // A slow leader stamps a time behind the state's; the state keeps the larger one.
        clock += dt;
        let time_ms = if *slow {
            clock.saturating_sub(700)
        } else {
            clock
        };
        if let Step::NewTerm = step {
            model.term += 1;
            model.term_started_ms = None;
            let ctx = ApplyContext {
                log_index: index,
                term: model.term,
                time_ms: state.time_ms(),
                stamped: true,
                wall_ms: None,
            };
            apply_blank(&mut state, &ctx);
            prop_assert_eq!(state.term_started_ms(), None);
            continue;
        }
        let (cmd, expect_ok) = command(&model, step, index);
        let before = state.clone();
        let ctx = ApplyContext {
            log_index: index,
            term: model.term,
            time_ms,
            stamped: true,
            wall_ms: None,
        };
        let mut effects = Effects::default();
        let response = apply_effects(&mut state, &ctx, &cmd, &mut effects);
        let now = state.time_ms();
        prop_assert_eq!(now, before.time_ms().max(time_ms));
        let sweep = match step {
            Step::Sweep {
                grace_ms,
                lock_delay_ms,
                ..
            } => {
                let past = model.term_started_ms.is_some_and(|s| now >= s + grace_ms);
                Some((past, *lock_delay_ms))
            }
            _ => None,
        };

        // The response against the model's prediction.
        let rejected = matches!(response, Response::Rejected(_));
        match (step, &response) {
            (Step::Fenced { .. }, Response::Objects(ObjectReply::Object { .. })) => {
                prop_assert_eq!(expect_ok, Some(true))
            }
            (Step::Fenced { .. }, Response::Rejected(Rejection::FenceRejected { .. })) => {
                prop_assert_eq!(expect_ok, Some(false))
            }
            (Step::Release { .. }, Response::Locks(LockReply::Released { .. }))
            | (Step::Refresh { .. }, Response::Locks(LockReply::Refreshed { .. })) => {
                prop_assert_eq!(expect_ok, Some(true))
            }
            (
                Step::Release { .. } | Step::Refresh { .. },
                Response::Rejected(Rejection::LockNotHeld { .. }),
            ) => {
                prop_assert_eq!(expect_ok, Some(false))
            }
            (Step::Sweep { .. }, Response::Locks(LockReply::Done { .. })) => {
                prop_assert!(!sweep.is_some_and(|s| s.0))
            }
            (Step::Sweep { .. }, Response::Locks(LockReply::Swept { .. })) => {
                prop_assert!(sweep.is_some_and(|s| s.0))
            }
            (
                Step::Cancel { .. },
                Response::Locks(LockReply::Done { .. })
                | Response::Locks(LockReply::WaitCancelled { .. }),
            ) => {}
            (
                Step::Acquire {
                    name,
                    holder,
                    write,
                    ..
                },
                response,
            ) => {
                let (name, holder) = (NAMES[*name], HOLDERS[*holder]);
                let asked = if *write {
                    LockMode::Write
                } else {
                    LockMode::Read
                };
                let own = model
                    .grants
                    .get(&(name.to_string(), holder.to_string()))
                    .copied();
                let others = model
                    .holders_of(name)
                    .into_iter()
                    .filter(|(h, _, _)| h != holder);
                let others: Vec<_> = others.collect();
                let conflict = others.iter().any(|(_, m, _)| *m == LockMode::Write)
                    || (asked == LockMode::Write && !others.is_empty());
                match response {
                    Response::Locks(LockReply::Granted { holder: h }) => {
                        prop_assert!(!conflict, "granted {asked} over {others:?}");
                        prop_assert_eq!(h.mode, asked);
                        match own {
                            Some((mode, token)) if mode == asked => prop_assert_eq!(h.token, token),
                            _ => prop_assert_eq!(h.token, model.issued + 1),
                        }
                        if own.is_none() {
                            let waiting = |l: &Lock| {
                                let live = l.waiters.iter().filter(|w| w.wait_until_ms > now);
                                live.count()
                            };
                            let queue = before.lock(name).map_or(0, waiting);
                            prop_assert_eq!(queue, 0, "a newcomer jumped the queue");
                        }
                    }
                    Response::Locks(LockReply::Queued { wait_id, .. }) => {
                        prop_assert_eq!(*wait_id, index);
                        model
                            .waits
                            .push((name.to_string(), holder.to_string(), index));
                        let Step::Acquire { wait_ms, .. } = step else {
                            unreachable!("matched above")
                        };
                        model.open_waits.insert(index, now + wait_ms);
                    }
                    Response::Rejected(
                        Rejection::LockBusy { .. }
                        | Rejection::LockDelayed { .. }
                        | Rejection::TooLarge { .. },
                    ) => {}
                    other => prop_assert!(false, "acquire answered {other:?}"),
                }
            }
            (_, other) => prop_assert!(false, "{cmd} answered {other:?}"),
        }

        // The events, one by one, against the rules; then the whole state against the model.
        let mut judge = Judge {
            model: &mut model,
            before: &before,
            now,
            sweep,
        };
        for e in &effects.lock_events {
            prop_assert_eq!(e.time_ms, now);
            judge.event(e)?;
        }
        if model.term_started_ms.is_none() {
            model.term_started_ms = Some(now);
        }
        if rejected {
            prop_assert!(effects.is_empty());
            prop_assert_eq!(&state.with_clock_of(&before), &before);
        }
        let live: Vec<(String, String, LockMode, u64)> = state
            .locks()
            .flat_map(|l| {
                l.holders
                    .iter()
                    .map(|h| (l.name.clone(), h.holder.clone(), h.mode, h.token))
            })
            .collect();
        let mut want: Vec<_> = model
            .grants
            .iter()
            .map(|((n, h), &(m, t))| (n.clone(), h.clone(), m, t))
            .collect();
        let mut live_sorted = live.clone();
        live_sorted.sort();
        want.sort();
        prop_assert_eq!(live_sorted, want);
        prop_assert_eq!(state.last_lock_token(), model.issued);
        prop_assert_eq!(state.term_started_ms(), model.term_started_ms);
        prop_assert!(state.lock_count() <= LIMITS.locks_max as usize);
        let queued = state.locks().flat_map(|l| l.waiters.iter());
        let queued: BTreeMap<u64, u64> = queued.map(|w| (w.wait_id, w.wait_until_ms)).collect();
        prop_assert_eq!(
            &queued,
            &model.open_waits,
            "the queues are not the open waits"
        );
        for lock in state.locks() {
            prop_assert_eq!(lock.check_invariants(model.issued), Ok(()));
            prop_assert!(lock.waiters.len() <= LIMITS.waiters_max as usize);
            prop_assert!(
                !lock.is_idle(now) || lock.delay_until_ms.is_some(),
                "an idle entry stayed"
            );
        }
        if let (Some((true, _)), Step::Sweep { names, .. }) = (sweep, step) {
            for lock in names.iter().filter_map(|&n| state.lock(NAMES[n])) {
                let late = lock.holders.iter().filter_map(|h| h.expires_at_ms);
                let late = late.chain(lock.waiters.iter().map(|w| w.wait_until_ms));
                prop_assert!(late.min().is_none_or(|t| t > now), "a sweep left {lock:?}");
            }
        }
        for probe in [now, now + 100, u64::MAX] {
            prop_assert_eq!(state.locks_due(probe), due_by_scan(&state, probe));
        }
    }
    let restored = State::from_snapshot_bytes(&state.to_snapshot_bytes());
    prop_assert_eq!(restored, Ok(state));
    Ok(())
}

proptest! {
    // No regression files: shrunk failures become table tests next to the code instead.
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn apply_agrees_with_the_lock_model(
        steps in prop::collection::vec((time_step(), prop::bool::weighted(0.1), step()), 1..80)
    ) {
        run(&steps)?;
    }
}
