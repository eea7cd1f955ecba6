//! The `Locks` service calls of `Client`. Acquire, refresh and release are writes (repeated at
//! another node only when the request provably never left this process); get and list are reads;
//! a watch is set up like a read and then runs until the server cuts it off.
//!
//! Durations go on the wire as whole milliseconds, rounded up, so a TTL or wait is never
//! shortened. A TTL of zero is refused here: on the wire 0 means "until released", which is not
//! what `Some(Duration::ZERO)` says.

use std::pin::Pin;
use std::time::Duration;

use crate::client::Transport;
use futures::Stream;
use serde_json::Value;
use tokio::time::Instant;
use tonic::{Request, Status};

use super::{
    request, Client, Consistency, ListLocksReply, LockEventMessage, LockGrant, LockInfo, LockMode,
    ReleaseReply, Retry, MAX_REPLY_BYTES,
};
use crate::proto::v1 as pb;
use crate::proto::v1::locks_client::LocksClient;

/// The events of one lock watch, from the moment it was set up; ends with an error when the
/// server cuts it off. There is no revision to resume from: events between two watches are lost.
pub type LockWatchStream = Pin<Box<dyn Stream<Item = Result<LockEventMessage, Status>> + Send>>;

/// The shortest wait sent on a retried acquire whose wait has run out on the client side: still
/// a waiting request, so the server answers LOCK_WAIT_EXPIRED (the wait ended), not LOCK_BUSY.
const WAIT_LEFT_MIN: Duration = Duration::from_millis(1);

/// Whether an acquire failed because its wait ended without a grant (reason LOCK_WAIT_EXPIRED;
/// the waiter was removed), as opposed to the client's own deadline or a busy lock.
pub fn lock_wait_expired(status: &Status) -> bool {
    super::reason(status) == Some(pb::ErrorReason::LockWaitExpired)
}

impl Client {
    /// Acquires lock `name` in `mode` for `holder`. `ttl`: `None` holds it until released.
    /// `wait`: `None` (or zero) fails at once with `Aborted`, reason LOCK_BUSY (or LOCK_DELAYED)
    /// if the lock is busy; otherwise the request queues until granted or the wait ends
    /// (`Aborted`, reason LOCK_WAIT_EXPIRED, the waiter removed; see `lock_wait_expired`).
    /// The request's deadline is the wait plus the client's request timeout, so the server, not
    /// the client, decides when the wait is over.
    pub async fn lock_acquire(
        &self,
        name: &str,
        mode: LockMode,
        holder: &str,
        ttl: Option<Duration>,
        details: Option<Value>,
        wait: Option<Duration>,
    ) -> Result<LockGrant, Status> {
        let ttl_ms = ttl_to_ms(ttl)?;
        let wait = wait.unwrap_or(Duration::ZERO);
        let mut msg = pb::AcquireRequest {
            name: name.to_string(),
            mode: mode as i32,
            holder: holder.to_string(),
            ttl_ms,
            details_json: details.map(|d| d.to_string()).unwrap_or_default(),
            wait_ms: 0,
        };
        let started = Instant::now();
        self.with_timeout(self.request_timeout.saturating_add(wait))
            .call(Retry::Write, |ch, t| {
                // A retry (the first attempt never reached a node) waits only what is left, so
                // the caller's wait is honoured as a whole.
                if !wait.is_zero() {
                    let left = wait.saturating_sub(started.elapsed()).max(WAIT_LEFT_MIN);
                    msg.wait_ms = millis_ceil(left);
                }
                let msg = msg.clone();
                async move { locks(ch).acquire(request(msg, t)).await }
            })
            .await
    }

    /// Extends the TTL of `holder`'s grant `token` (`ttl`: `None` keeps the grant's TTL).
    /// `FailedPrecondition` if that token no longer holds the lock.
    pub async fn lock_refresh(
        &self,
        name: &str,
        holder: &str,
        token: u64,
        ttl: Option<Duration>,
    ) -> Result<LockGrant, Status> {
        let msg = pb::RefreshRequest {
            name: name.to_string(),
            holder: holder.to_string(),
            token,
            ttl_ms: ttl_to_ms(ttl)?,
        };
        self.call(Retry::Write, |ch, t| {
            let msg = msg.clone();
            async move { locks(ch).refresh(request(msg, t)).await }
        })
        .await
    }

    /// Releases `holder`'s grant `token`; `FailedPrecondition` if that token no longer holds it.
    pub async fn lock_release(
        &self,
        name: &str,
        holder: &str,
        token: u64,
    ) -> Result<ReleaseReply, Status> {
        let msg = pb::ReleaseRequest {
            name: name.to_string(),
            holder: holder.to_string(),
            token,
        };
        self.call(Retry::Write, |ch, t| {
            let msg = msg.clone();
            async move { locks(ch).release(request(msg, t)).await }
        })
        .await
    }

    /// Holders, waiters and lock-delay of lock `name`; `NotFound` if nobody holds or waits.
    pub async fn lock_get(&self, name: &str, consistency: Consistency) -> Result<LockInfo, Status> {
        let msg = pb::GetLockRequest {
            name: name.to_string(),
            consistency: consistency as i32,
        };
        self.call(Retry::Read, |ch, t| {
            let msg = msg.clone();
            async move { locks(ch).get(request(msg, t)).await }
        })
        .await
    }

    /// Every lock whose name starts with `prefix` (empty: all), with the state machine's time.
    pub async fn lock_list(
        &self,
        prefix: &str,
        consistency: Consistency,
    ) -> Result<ListLocksReply, Status> {
        let msg = pb::ListLocksRequest {
            prefix: prefix.to_string(),
            consistency: consistency as i32,
        };
        self.call(Retry::Read, |ch, t| {
            let msg = msg.clone();
            async move { locks(ch).list(request(msg, t)).await }
        })
        .await
    }

    /// Live events of locks whose name starts with `prefix`, from now on. Setting up fails over
    /// like a read; once running, the stream ends with the error that cut it off
    /// (`ResourceExhausted` if this watcher fell behind).
    pub async fn lock_watch(&self, prefix: &str) -> Result<LockWatchStream, Status> {
        let msg = pb::WatchLocksRequest {
            prefix: prefix.to_string(),
        };
        // No grpc-timeout on the request: the deadline covers only the set-up, not the stream.
        let stream = self
            .call(Retry::Read, |ch, _t| {
                let msg = msg.clone();
                async move { locks(ch).watch(Request::new(msg)).await }
            })
            .await?;
        Ok(Box::pin(stream))
    }
}

fn locks(channel: Transport) -> LocksClient<Transport> {
    LocksClient::new(channel).max_decoding_message_size(MAX_REPLY_BYTES)
}

/// A TTL as the wire says it: 0 for `None` (until released); a zero TTL is refused.
fn ttl_to_ms(ttl: Option<Duration>) -> Result<u64, Status> {
    match ttl {
        None => Ok(0),
        Some(d) if d.is_zero() => Err(Status::invalid_argument(
            "ttl must be positive; omit it to hold the lock until released",
        )),
        Some(d) => Ok(millis_ceil(d)),
    }
}

/// Whole milliseconds, rounded up, saturating at `u64::MAX`.
fn millis_ceil(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn durations_round_up_to_whole_milliseconds() {
        assert_eq!(millis_ceil(Duration::ZERO), 0);
        assert_eq!(millis_ceil(Duration::from_micros(1)), 1);
        assert_eq!(millis_ceil(Duration::from_millis(30_000)), 30_000);
        assert_eq!(millis_ceil(Duration::from_micros(1_500)), 2);
        assert_eq!(millis_ceil(Duration::MAX), u64::MAX);
    }

    #[test]
    fn a_zero_ttl_is_not_forever() {
        assert_eq!(ttl_to_ms(None).expect("none"), 0);
        assert_eq!(
            ttl_to_ms(Some(Duration::from_secs(30))).expect("30s"),
            30_000
        );
        let err = ttl_to_ms(Some(Duration::ZERO)).expect_err("zero");
        assert_eq!(err.code(), Code::InvalidArgument);
    }
}
