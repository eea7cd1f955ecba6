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

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::{error::RecvError, Receiver};
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
