//! The caller's deadline, as gRPC sends it (`grpc-timeout`), made visible to the code a handler
//! calls: `DeadlineLayer` reads the header when a call arrives and keeps the instant in a task
//! local for the handler's future, so `Node::propose` can hold a write that never reached a
//! leader and resend it to the next one for as long as the caller waits, and fan-outs
//! (`Cluster.Status`) can answer with what arrived before the caller gives up.
//!
//! tonic itself drops the handler's future when the deadline passes and answers Cancelled; code
//! that wants to give a more precise answer stops a little earlier (`budget`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

tokio::task_local! {
    /// When the current call's caller stops waiting, if it said (`grpc-timeout`).
    static DEADLINE: Instant;
}

/// The header a gRPC client sends its deadline in (the gRPC HTTP/2 protocol).
const GRPC_TIMEOUT: &str = "grpc-timeout";

/// Parses a `grpc-timeout` value: at most 8 ASCII digits and one unit letter (H hours,
/// M minutes, S seconds, m milliseconds, u microseconds, n nanoseconds). `None` for anything
/// else: a malformed header is treated as no deadline, never as an error.
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let unit = value.chars().last()?;
    let digits = &value[..value.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(n.checked_mul(3600)?),
        'M' => Duration::from_secs(n.checked_mul(60)?),
        'S' => Duration::from_secs(n),
        'm' => Duration::from_millis(n),
        'u' => Duration::from_micros(n),
        'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The current call's deadline, if its caller sent one and this runs inside the call.
pub fn current() -> Option<Instant> {
    DEADLINE.try_with(|d| *d).ok()
}

/// How long code serving the current call may take so that its own answer still reaches the
/// caller: the time left before the caller's deadline less a margin for the answer's way back
/// (a tenth of what is left, at most `margin_max`); `default` when the caller set no deadline.
pub fn budget(default: Duration, margin_max: Duration) -> Duration {
    match current() {
        Some(deadline) => {
            let left = deadline.saturating_duration_since(Instant::now());
            left.saturating_sub((left / 10).min(margin_max))
        }
        None => default,
    }
}

/// Puts each call's `grpc-timeout` deadline in the task local its handler runs in.
#[derive(Clone, Copy, Default)]
pub struct DeadlineLayer;

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DeadlineService { inner }
    }
}

/// The service `DeadlineLayer` wraps around the client API.
#[derive(Clone)]
pub struct DeadlineService<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, B> tower::Service<http::Request<B>> for DeadlineService<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let timeout = request
            .headers()
            .get(GRPC_TIMEOUT)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout);
        let call = self.inner.call(request);
        match timeout.and_then(|t| Instant::now().checked_add(t)) {
            Some(deadline) => Box::pin(DEADLINE.scope(deadline, call)),
            None => Box::pin(call),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_values_parse_in_every_unit_and_bad_ones_do_not() {
        let cases = [
            ("1H", Some(Duration::from_secs(3600))),
            ("2M", Some(Duration::from_secs(120))),
            ("10S", Some(Duration::from_secs(10))),
            ("250m", Some(Duration::from_millis(250))),
            ("99999999u", Some(Duration::from_micros(99_999_999))),
            ("7n", Some(Duration::from_nanos(7))),
            ("0m", Some(Duration::ZERO)),
            ("", None),
            ("m", None),
            ("100", None),
            ("100x", None),
            ("123456789m", None),
            ("-5S", None),
            ("1.5S", None),
            ("5ś", None),
        ];
        for (value, want) in cases {
            assert_eq!(parse_grpc_timeout(value), want, "{value:?}");
        }
    }

    #[tokio::test]
    async fn the_budget_is_the_time_left_less_a_margin_or_the_default() {
        let default = Duration::from_secs(7);
        let margin = Duration::from_millis(100);
        assert_eq!(budget(default, margin), default, "no call, no deadline");
        let deadline = Instant::now() + Duration::from_secs(2);
        let inside = DEADLINE
            .scope(deadline, async { budget(default, margin) })
            .await;
        assert!(inside <= Duration::from_millis(1900), "{inside:?}");
        assert!(inside > Duration::from_millis(1500), "{inside:?}");
        let short = Instant::now() + Duration::from_millis(200);
        let inside = DEADLINE
            .scope(short, async { budget(default, margin) })
            .await;
        assert!(inside <= Duration::from_millis(180), "{inside:?}");
        let passed = Instant::now();
        let inside = DEADLINE
            .scope(passed, async { budget(default, margin) })
            .await;
        assert_eq!(inside, Duration::ZERO);
    }
}
