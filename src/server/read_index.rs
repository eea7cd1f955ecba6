//! A follower's ReadIndex calls to the leader, shared by the reads that wait for them (etcd's
//! read loop): at most one call is on the wire at a time, and each call serves every read that
//! arrived before it was sent.
//!
//! A linearizable read on a follower needs an index the leader confirmed after the read arrived:
//! once the follower has applied up to it, its state holds every write acknowledged before the
//! read. One call per read cost the follower and the leader an HTTP/2 stream, a task and a
//! leadership check each; under a read load those calls were 15-20% of the servers' CPU (issue
//! 27's profile). A read that arrives while a call is on the wire cannot use that call's answer (the
//! leader may have confirmed its index before a write the reader saw acknowledged), so it waits
//! for the next call, which leaves as soon as the current one is answered and carries every read
//! that queued meanwhile. A lone read still goes at once.
//!
//! The reads waiting are calls in flight on this node's client API, so their number is bounded
//! by the per-client `limits.client_calls_max` and the connections' stream limits; each also
//! gives up after its own budget (the caller's deadline, or a few election timeouts).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::sync::oneshot;
use tonic::Status;

use crate::server::errors;

/// One ReadIndex call to the leader: the index it confirmed, or why not.
pub type Fetch =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<u64, Status>> + Send>> + Send + Sync>;

/// Where the answer of the call a read waits for goes.
type Reply = oneshot::Sender<Result<u64, Status>>;

/// The reads waiting for the next call, and whether a task is making calls.
#[derive(Default)]
struct Queue {
    running: bool,
    waiting: Vec<Reply>,
}

/// Counts of the calls made and of the reads they served (`read_index_calls` and
/// `read_index_reads`): their ratio is how many reads share a call.
#[derive(Clone, Debug, Default)]
pub struct ReadIndexCounters {
    pub calls: Counter,
    pub reads: Counter,
}

/// Shares ReadIndex calls among the reads of one node.
pub struct SharedReadIndex {
    fetch: Fetch,
    queue: Arc<Mutex<Queue>>,
    counters: ReadIndexCounters,
}

impl SharedReadIndex {
    pub fn new(fetch: Fetch, counters: ReadIndexCounters) -> SharedReadIndex {
        SharedReadIndex {
            fetch,
            queue: Arc::default(),
            counters,
        }
    }

    /// The read index of a call to the leader sent after this one was made, waiting for it at
    /// most `budget`.
    pub async fn read_index(&self, budget: Duration) -> Result<u64, Status> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut queue = lock(&self.queue);
            queue.waiting.push(tx);
            !std::mem::replace(&mut queue.running, true)
        };
        if start {
            let calls = Calls {
                queue: self.queue.clone(),
                fetch: self.fetch.clone(),
                counters: self.counters.clone(),
                armed: true,
            };
            tokio::spawn(calls.run());
        }
        match tokio::time::timeout(budget, rx).await {
            Ok(Ok(answer)) => answer,
            // The calling task ended without answering: only when the runtime shuts down, or a
            // call panicked.
            Ok(Err(_)) => Err(errors::unavailable(
                "read index from the leader: the call was cut off (this node may be stopping); retry",
                None,
            )),
            Err(_) => Err(errors::unavailable(
                format!(
                    "read index from the leader: no answer within {} ms; retry",
                    budget.as_millis()
                ),
                None,
            )),
        }
    }
}

/// The task that makes the calls while reads wait for one. If it ends any other way than by
/// finding no read waiting (a panic, the runtime's shutdown), its drop lets the next read start
/// a new task and drops the waiting reads' replies, which answers them.
struct Calls {
    queue: Arc<Mutex<Queue>>,
    fetch: Fetch,
    counters: ReadIndexCounters,
    armed: bool,
}

impl Calls {
    async fn run(mut self) {
        loop {
            let mut batch: Vec<Reply> = {
                let mut queue = lock(&self.queue);
                if queue.waiting.is_empty() {
                    queue.running = false;
                    self.armed = false;
                    return;
                }
                std::mem::take(&mut queue.waiting)
            };
            // Reads whose callers went away need no call.
            batch.retain(|r| !r.is_closed());
            if batch.is_empty() {
                continue;
            }
            self.counters.calls.inc();
            self.counters.reads.inc_by(batch.len() as u64);
            let answer = (self.fetch)().await;
            for reply in batch {
                let _ = reply.send(answer.clone());
            }
        }
    }
}

impl Drop for Calls {
    fn drop(&mut self) {
        if self.armed {
            let mut queue = lock(&self.queue);
            queue.running = false;
            queue.waiting.clear();
        }
    }
}

fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
