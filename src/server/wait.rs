//! The one wait every waiting RPC uses: a queued lock acquire, a queued pool acquire.
//!
//! A waiter is already in the replicated queue (fair: apply grants in queue order); what waits
//! here is only its caller, for the event that says how its wait ended. The rules are the same
//! for every queue:
//! - an event about this waiter ends the wait with the caller's answer;
//! - missed events (the subscriber lagged) are not a loss: the caller asks the state where its
//!   waiter stands, and the wait goes on only if it still waits;
//! - at the caller's time limit the waiter's cancel is proposed, and the caller reads its reply
//!   (a grant that came at the last moment is answered, not lost);
//! - if the caller goes away first (its RPC dropped), the cancel is still proposed, from a task
//!   of its own (`CancelOnDrop`), so no abandoned waiter is ever granted.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast::{self, error::RecvError, Receiver};
use tonic::Status;

use crate::server::errors;
use crate::server::node::{CancelOnDrop, Node};
use crate::state::{Command, Response};

/// How a wait ended. (Short-lived, one per wait: its size does not matter.)
#[allow(clippy::large_enum_variant)]
pub enum Waited<T> {
    /// An event, or the state after missed events, answered it.
    Answered(T),
    /// The time ran out; the response to the cancel proposed then.
    TimedOut(Response),
}

/// One waiter's wait: its events, and the cancels for its two ways of giving up.
pub struct Wait<E> {
    /// Subscribed before the waiter was queued, so no event about it can be missed.
    pub events: Receiver<E>,
    /// Proposed if the caller goes away before the wait ends.
    pub on_drop: Command,
    /// Proposed when the time runs out.
    pub at_deadline: Command,
    /// For the log line if the cancel on drop fails.
    pub what: &'static str,
    /// How long the caller waits.
    pub wait: Duration,
}

impl<E: Clone> Wait<E> {
    /// Waits until `on_event` answers an event, `on_lagged` answers after missed events, or the
    /// time runs out (see the module doc).
    pub async fn run<T>(
        mut self,
        node: &Arc<Node>,
        mut on_event: impl FnMut(&E) -> Option<T>,
        mut on_lagged: impl FnMut() -> Option<T>,
    ) -> Result<Waited<T>, Status> {
        let mut guard = CancelOnDrop::new(node.clone(), self.on_drop, self.what);
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            let answer = tokio::select! {
                ev = self.events.recv() => match ev {
                    Ok(event) => on_event(&event),
                    Err(RecvError::Lagged(_)) => on_lagged(),
                    Err(RecvError::Closed) => return Err(errors::shutting_down()),
                },
                _ = tokio::time::sleep_until(deadline) => {
                    guard.disarm();
                    let response = node.propose_command(self.at_deadline).await?;
                    return Ok(Waited::TimedOut(response));
                }
            };
            if let Some(answer) = answer {
                guard.disarm();
                return Ok(Waited::Answered(answer));
            }
        }
    }
}

/// Below this many channels `WaitChannels` does not sweep unused ones.
const SWEEP_MIN: usize = 64;

/// Events for waiting callers, one channel per key (a lock and holder: `WatchHub`'s lock
/// waits): an event wakes only the callers waiting on its key. (Pool acquires still wait on the
/// broadcast of pool events: their claim's name, the natural key, is known only once applied.) One broadcast to every waiter of the node woke
/// each of them on every event: with 64 clients queued for one lock, about 21 tasks per node
/// for each grant, release and queued acquire, to find the event was not theirs.
///
/// A channel lives while a receiver does: `send` drops one it finds unused, and `subscribe`
/// sweeps unused ones once there are twice as many channels as after the last sweep, so the
/// map stays within about twice the callers waiting.
pub struct WaitChannels<K, E> {
    inner: Mutex<Channels<K, E>>,
    /// Events one channel holds for a caller that has not read them; past it the caller
    /// lags and asks the state where its wait stands.
    capacity: usize,
}

struct Channels<K, E> {
    by_key: BTreeMap<K, broadcast::Sender<E>>,
    sweep_at: usize,
}

impl<K: Ord, E: Clone> WaitChannels<K, E> {
    pub fn new(capacity: usize) -> WaitChannels<K, E> {
        WaitChannels {
            inner: Mutex::new(Channels {
                by_key: BTreeMap::new(),
                sweep_at: SWEEP_MIN,
            }),
            capacity: capacity.max(1),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Channels<K, E>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver of the events sent for `key` from now on.
    pub fn subscribe(&self, key: K) -> Receiver<E> {
        let mut inner = self.inner();
        if inner.by_key.len() >= inner.sweep_at {
            inner.by_key.retain(|_, tx| tx.receiver_count() > 0);
            inner.sweep_at = (inner.by_key.len() * 2).max(SWEEP_MIN);
        }
        let capacity = self.capacity;
        inner
            .by_key
            .entry(key)
            .or_insert_with(|| broadcast::channel(capacity).0)
            .subscribe()
    }

    /// Sends `event` to the receivers of `key`, if it has any.
    pub fn send<Q>(&self, key: &Q, event: E)
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let mut inner = self.inner();
        let unused = match inner.by_key.get(key) {
            Some(tx) => tx.send(event).is_err(),
            None => false,
        };
        if unused {
            inner.by_key.remove(key);
        }
    }

    /// Channels kept (with a receiver, or not yet swept).
    pub fn channels(&self) -> usize {
        self.inner().by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_reaches_only_its_key_s_receivers() {
        let waits: WaitChannels<String, u32> = WaitChannels::new(4);
        let mut a1 = waits.subscribe("a".to_string());
        let mut a2 = waits.subscribe("a".to_string());
        let mut b = waits.subscribe("b".to_string());
        waits.send("a", 1);
        waits.send("c", 9); // nobody waits on c: nothing kept for it
        assert_eq!(a1.try_recv(), Ok(1));
        assert_eq!(a2.try_recv(), Ok(1));
        assert!(b.try_recv().is_err());
        assert_eq!(waits.channels(), 2);
    }

    #[test]
    fn a_caller_that_falls_behind_is_told_it_lagged() {
        let waits: WaitChannels<String, u32> = WaitChannels::new(2);
        let mut a = waits.subscribe("a".to_string());
        for i in 0..3 {
            waits.send("a", i);
        }
        assert!(matches!(
            a.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(1))
        ));
        assert_eq!(a.try_recv(), Ok(1));
    }

    #[test]
    fn channels_without_receivers_go() {
        let waits: WaitChannels<u64, u32> = WaitChannels::new(4);
        // Dropped on the next event for its key.
        drop(waits.subscribe(1));
        waits.send(&1, 0);
        assert_eq!(waits.channels(), 0);
        // Never sent to: swept once the map doubles, so it stays within twice the live ones.
        let live: Vec<_> = (0..10).map(|k| waits.subscribe(k)).collect();
        for k in 10..1000 {
            drop(waits.subscribe(k));
            assert!(waits.channels() <= SWEEP_MIN.max(2 * live.len()) + 1);
        }
        assert!(waits.channels() >= live.len());
    }
}
