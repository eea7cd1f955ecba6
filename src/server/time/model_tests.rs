//! A model of the whole time path (README "Time", promises 1 and 3), checked on arbitrary
//! leader changes and clock readings: three nodes, each with its own `ClusterClock` on a
//! hand-moved clock (monotonic clocks at the speed of real time from different origins, wall
//! clocks stepped anywhere), one log applied by the real core apply, followers that receive
//! entries (the log store tells the clock when) and apply them late (the way a node's count
//! loses time), elections of caught-up nodes only (as Raft's vote rule), every proposal stamped by the real `leader_now`, and proposals that a leader stamped
//! and only appended after it was elected again (the one way a stamp of another term reaches
//! the log).
//!
//! The property: a holder never loses its lock before its last acknowledged refresh (sent at
//! the real time its leader stamped it) + TTL.
//!
//! `STEWARD_UNSAFE_BUG=stale-term-time cargo test -p steward --features unsafe-bugs --lib
//! time::model` must fail: apply then takes another term's stamp, whose count did not lose
//! what the current term's did.

use std::sync::Arc;

use proptest::prelude::*;

use super::tests::HandClock;
use super::ClusterClock;
use crate::state::{
    apply, apply_blank, ApplyContext, Command, LockCommand, LockLimits, LockMode, LockReply,
    Proposal, Response, State,
};

const LOCK: &str = "L";
const HOLDER: &str = "h";
const LIMITS: LockLimits = LockLimits {
    holders_max: 4,
    waiters_max: 4,
    locks_max: 8,
    details_bytes_max: 256,
};

#[derive(Clone, Debug)]
enum Step {
    /// Real time passes on every node.
    Advance(u64),
    /// A node's wall clock steps (ms, negative: back).
    WallJump(usize, i64),
    /// A node receives everything appended so far, now, and applies it.
    Replicate(usize),
    /// A node receives everything appended so far, now, and applies none of it yet (a
    /// follower that has not learnt of the commit).
    Receive(usize),
    /// A node wins the next term (it catches up first, as only an up-to-date node can).
    Elect(usize),
    /// The holder acquires (or refreshes) through the leader.
    Refresh(u64),
    /// The leader sweeps expired holders.
    Sweep,
    /// The leader stamps a sweep and is held up before appending it.
    Stall,
    /// The held-up proposal reaches the log, if its node leads now.
    Unstall,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u64..4_000).prop_map(Step::Advance),
        1 => (0usize..3, -3_600_000i64..3_600_000).prop_map(|(n, d)| Step::WallJump(n, d)),
        2 => (0usize..3).prop_map(Step::Replicate),
        2 => (0usize..3).prop_map(Step::Receive),
        2 => (0usize..3).prop_map(Step::Elect),
        4 => (500u64..5_000).prop_map(Step::Refresh),
        3 => Just(Step::Sweep),
        1 => Just(Step::Stall),
        1 => Just(Step::Unstall),
    ]
}

struct NodeSim {
    hand: Arc<HandClock>,
    clock: ClusterClock,
    /// Entries of `Sim::times` this node has applied.
    applied: usize,
    /// Entries of `Sim::times` in this node's log.
    received: usize,
}

struct Sim {
    real_ms: u64,
    nodes: Vec<NodeSim>,
    state: State,
    /// The state's time after each entry of the log, and whether it was a proposal (blank
    /// entries do not tell the clock: `StateMachine::apply_batch`).
    times: Vec<(u64, bool)>,
    term: u64,
    leader: Option<usize>,
    held: Option<(usize, Proposal)>,
    /// The holder's token, the real time its last acknowledged refresh was sent, its TTL.
    holding: Option<(u64, u64, u64)>,
}

impl Sim {
    fn new(origins: [u64; 3], walls: [u64; 3]) -> Sim {
        let nodes = origins
            .iter()
            .zip(walls)
            .map(|(origin, wall)| {
                let hand = Arc::new(HandClock::default());
                hand.monotonic
                    .store(*origin, std::sync::atomic::Ordering::SeqCst);
                hand.wall.store(wall, std::sync::atomic::Ordering::SeqCst);
                let clock = ClusterClock::new(hand.clone());
                // As a node starts (server/mod.rs): the time of the state it opened.
                clock.applied(0, None);
                NodeSim {
                    clock,
                    hand,
                    applied: 0,
                    received: 0,
                }
            })
            .collect();
        Sim {
            real_ms: 0,
            nodes,
            state: State::new(),
            times: Vec::new(),
            term: 1,
            leader: None,
            held: None,
            holding: None,
        }
    }

    /// Node `n` receives what it has not, now, as one batch.
    fn receive(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        if node.received < self.times.len() {
            node.received = self.times.len();
            node.clock.appended(node.received as u64);
        }
    }

    /// Node `n` receives what it has not, and applies it all as one batch.
    fn replicate(&mut self, n: usize) {
        self.receive(n);
        let node = &mut self.nodes[n];
        let batch = &self.times[node.applied..node.received];
        if batch.iter().any(|(_, proposal)| *proposal) {
            let (time_ms, _) = self.times[node.received - 1];
            node.clock.applied(time_ms, Some(node.received as u64));
        }
        node.applied = node.received;
    }

    /// Appends an entry of the current term, applied at once by the leader.
    fn append(&mut self, proposal: &Proposal) -> Response {
        let index = self.times.len() as u64 + 1;
        let ctx = ApplyContext::of_proposal(index, self.term, proposal);
        let mut events = Vec::new();
        let response = apply(&mut self.state, &ctx, &proposal.command, &mut events);
        self.times.push((self.state.time_ms(), true));
        if let Some(l) = self.leader {
            self.replicate(l);
        }
        response
    }

    fn stamp(&self) -> Option<(usize, u64)> {
        let l = self.leader?;
        let time_ms = self.nodes[l].clock.leader_now(self.term, true)?;
        Some((l, time_ms))
    }

    fn proposal(&self, time_ms: u64, term: u64, command: Command) -> Proposal {
        Proposal::new(time_ms, Some(term), None, command)
    }

    /// Fails if the holder lost its lock before its last acknowledged refresh + TTL.
    fn check(&mut self, what: &str) -> Result<(), TestCaseError> {
        let Some((token, sent_ms, ttl_ms)) = self.holding else {
            return Ok(());
        };
        let held = self
            .state
            .lock(LOCK)
            .is_some_and(|l| l.holders.iter().any(|h| h.token == token));
        if !held {
            prop_assert!(
                self.real_ms >= sent_ms + ttl_ms,
                "early loss after {what}: the refresh sent at {sent_ms} ms (TTL {ttl_ms} ms) \
                 was lost at {} ms, {} ms early",
                self.real_ms,
                sent_ms + ttl_ms - self.real_ms
            );
            self.holding = None;
        }
        Ok(())
    }

    fn run(&mut self, step: &Step) -> Result<(), TestCaseError> {
        match *step {
            Step::Advance(ms) => {
                self.real_ms += ms;
                for node in &self.nodes {
                    node.hand.advance(ms);
                }
            }
            Step::WallJump(n, delta) => self.nodes[n].hand.step(delta),
            Step::Replicate(n) => self.replicate(n),
            Step::Receive(n) => self.receive(n),
            Step::Elect(n) => {
                self.replicate(n);
                self.term += 1;
                self.leader = Some(n);
                let index = self.times.len() as u64 + 1;
                let ctx = ApplyContext::unstamped(index, self.term, self.state.time_ms());
                apply_blank(&mut self.state, &ctx);
                self.times.push((self.state.time_ms(), false));
                self.replicate(n);
            }
            Step::Refresh(ttl_ms) => {
                let Some((_, time_ms)) = self.stamp() else {
                    return Ok(());
                };
                let command = Command::Locks(match self.holding {
                    Some((token, _, _)) => LockCommand::Refresh {
                        name: LOCK.into(),
                        holder: HOLDER.into(),
                        token,
                        ttl_ms: Some(ttl_ms),
                    },
                    None => LockCommand::Acquire {
                        name: LOCK.into(),
                        holder: HOLDER.into(),
                        mode: LockMode::Write,
                        ttl_ms: Some(ttl_ms),
                        details: serde_json::Value::Null,
                        wait_ms: 0,
                        limits: LIMITS,
                    },
                });
                let proposal = self.proposal(time_ms, self.term, command);
                let response = self.append(&proposal);
                match response {
                    Response::Locks(
                        LockReply::Granted { holder } | LockReply::Refreshed { holder },
                    ) => self.holding = Some((holder.token, self.real_ms, ttl_ms)),
                    _ => self.check("a refused refresh")?,
                }
            }
            Step::Sweep => {
                let Some((_, time_ms)) = self.stamp() else {
                    return Ok(());
                };
                let proposal = self.proposal(time_ms, self.term, sweep());
                self.append(&proposal);
                self.check("a sweep")?;
            }
            Step::Stall => {
                if let (None, Some((l, time_ms))) = (&self.held, self.stamp()) {
                    self.held = Some((l, self.proposal(time_ms, self.term, sweep())));
                }
            }
            Step::Unstall => {
                if let Some((n, proposal)) = self.held.take() {
                    if self.leader == Some(n) {
                        self.append(&proposal);
                        self.check("a sweep stamped in an earlier term")?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn sweep() -> Command {
    Command::Locks(LockCommand::Sweep {
        names: vec![LOCK.to_string()],
        grace_ms: 0,
        lock_delay_ms: 0,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_lock_is_lost_before_its_last_acknowledged_refresh_plus_ttl(
        origins in prop::array::uniform3(0u64..1_000_000),
        walls in prop::array::uniform3(1_700_000_000_000u64..1_900_000_000_000),
        steps in prop::collection::vec(step(), 1..80),
    ) {
        // Deliberately broken builds only (README "Fault injection"): the bug the model must find.
        crate::bugs::check_env().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut sim = Sim::new(origins, walls);
        for step in &steps {
            sim.run(step)?;
        }
    }
}

/// The first run found this: node 2 counted on from an anchor older than the refresh node 0
/// stamped (without moving the state's time) after catching up 1 s late, and swept the lock
/// 1 s early. Fixed in `ClusterClock::applied`: every applied entry anchors the count.
#[test]
fn a_count_from_an_older_anchor_does_not_expire_a_slower_leaders_refresh_early() {
    let mut sim = Sim::new([0, 0, 0], [1_700_000_000_000; 3]);
    let steps = [
        Step::Elect(2),
        Step::Refresh(500),
        Step::Advance(1_048),
        Step::Elect(0),
        Step::Refresh(3_736),
        Step::Advance(2_688),
        Step::Elect(2),
        // The first stamped entry of a term expires nothing (core's grace); the second does.
        Step::Sweep,
        Step::Sweep,
    ];
    for step in &steps {
        sim.run(step).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The run that found the need for a stamp's term: node 2 stamped a sweep while it led, was
/// held up until it led again, and then appended it. Its count in the earlier term did not
/// lose what its count in the later one did, so taking that stamp would end node 0's refresh
/// early. Kept as a test of its own because the property's persisted seeds replay other steps
/// whenever `Step` changes; CI runs it with `stale-term-time`, which must fail it.
#[test]
fn a_sweep_stamped_in_an_earlier_term_does_not_expire_a_later_refresh_early() {
    crate::bugs::check_env().unwrap_or_else(|e| panic!("{e}"));
    let mut sim = Sim::new(
        [0, 0, 0],
        [1_700_000_000_000, 1_700_000_000_000, 1_700_000_004_882],
    );
    let steps = [
        Step::Elect(2),
        Step::Stall,
        Step::Elect(0),
        Step::Refresh(500),
        Step::Elect(2),
        Step::Refresh(500),
        Step::Unstall,
    ];
    for step in &steps {
        sim.run(step).unwrap_or_else(|e| panic!("{e}"));
    }
}
