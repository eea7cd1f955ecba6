//! Per-client limits on the client API, applied before a call reaches its handler:
//!
//! - a request rate: a token bucket per client (`limits.client_requests_per_second`, refilled
//!   continuously, holding at most `limits.client_request_burst`);
//! - calls in flight at once (`limits.client_calls_max`): a watch, an assignment stream or a
//!   waiting acquire counts until its response ends, so one client cannot hold every watcher
//!   slot or the memory their buffers take.
//!
//! The client is the subject common name of the certificate it presented, else its IP address.
//! Over a limit the call ends at once with ResourceExhausted naming the limit (logged at debug,
//! counted in `steward_client_limit_refusals_total`).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use crate::config::Limits;
use crate::metrics::Metrics;
use crate::server::errors;

/// Who a call comes from, for its limits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientKey {
    /// The subject common name of its certificate.
    Certificate(String),
    /// Its IP address (plaintext, or TLS without a client certificate).
    Address(IpAddr),
    /// Neither is known (not over TCP).
    Unknown,
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientKey::Certificate(cn) => write!(f, "certificate {cn:?}"),
            ClientKey::Address(ip) => write!(f, "address {ip}"),
            ClientKey::Unknown => write!(f, "an unknown client"),
        }
    }
}

/// The client a request comes from.
pub fn client_key<B>(request: &http::Request<B>) -> ClientKey {
    let ext = request.extensions();
    if let Some(info) = ext.get::<TlsConnectInfo<TcpConnectInfo>>() {
        let cn = info.peer_certs().and_then(|certs| {
            certs
                .first()
                .and_then(|c| crate::tls::common_name(c.as_ref()))
        });
        if let Some(cn) = cn {
            return ClientKey::Certificate(cn);
        }
        if let Some(addr) = info.get_ref().remote_addr() {
            return ClientKey::Address(addr.ip());
        }
    }
    match ext.get::<TcpConnectInfo>().and_then(|i| i.remote_addr()) {
        Some(addr) => ClientKey::Address(addr.ip()),
        None => ClientKey::Unknown,
    }
}

/// The limits' shared state on one node.
struct Shared {
    rate: DefaultKeyedRateLimiter<ClientKey>,
    per_second: u32,
    burst: u32,
    calls_max: usize,
    /// Calls in flight per client; entries at zero are removed.
    in_flight: Mutex<BTreeMap<ClientKey, usize>>,
    metrics: Arc<Metrics>,
}

impl Shared {
    /// Takes one call slot for `key`, or says which limit refuses it.
    fn admit(self: &Arc<Self>, key: &ClientKey) -> Result<CallSlot, tonic::Status> {
        if self.rate.check_key(key).is_err() {
            let message = format!(
                "too many requests from {key}: limits.client_requests_per_second = {} \
                 (burst limits.client_request_burst = {}); slow down and retry",
                self.per_second, self.burst
            );
            // One token's time: the least wait before a request may pass again.
            let delay = Duration::from_secs_f64(1.0 / f64::from(self.per_second.max(1)));
            return Err(self.refuse(
                "rate",
                errors::rate_limited("limits.client_requests_per_second", delay, message),
            ));
        }
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let count = in_flight.entry(key.clone()).or_insert(0);
        if *count >= self.calls_max {
            drop(in_flight);
            return Err(self.refuse(
                "calls",
                errors::overloaded(
                    "limits.client_calls_max",
                    format!(
                        "too many calls in flight from {key}: limits.client_calls_max = {} \
                         (watches and waits count until they end)",
                        self.calls_max
                    ),
                ),
            ));
        }
        *count += 1;
        Ok(CallSlot {
            shared: self.clone(),
            key: key.clone(),
        })
    }

    fn refuse(&self, limit: &str, status: tonic::Status) -> tonic::Status {
        tracing::debug!(limit, message = status.message(), "client limit");
        self.metrics
            .client_limit_refusals
            .get_or_create(&crate::metrics::LimitLabels {
                limit: limit.to_string(),
            })
            .inc();
        status
    }
}

/// One call in flight; released when dropped (when its response body ends or is dropped).
struct CallSlot {
    shared: Arc<Shared>,
    key: ClientKey,
}

impl Drop for CallSlot {
    fn drop(&mut self) {
        let mut in_flight = self
            .shared
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(count) = in_flight.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.key);
            }
        }
    }
}

/// The layer that puts the limits in front of the client API.
#[derive(Clone)]
pub struct ClientLimitsLayer {
    shared: Arc<Shared>,
}

impl ClientLimitsLayer {
    /// From validated limits (the three are >= 1).
    pub fn new(limits: &Limits, metrics: Arc<Metrics>) -> ClientLimitsLayer {
        let one = NonZeroU32::MIN;
        let per_second = NonZeroU32::new(limits.client_requests_per_second).unwrap_or(one);
        let burst = NonZeroU32::new(limits.client_request_burst).unwrap_or(one);
        ClientLimitsLayer {
            shared: Arc::new(Shared {
                rate: RateLimiter::keyed(Quota::per_second(per_second).allow_burst(burst)),
                per_second: per_second.get(),
                burst: burst.get(),
                calls_max: limits.client_calls_max.max(1),
                in_flight: Mutex::new(BTreeMap::new()),
                metrics,
            }),
        }
    }

    /// Forgets the buckets of clients that have been quiet long enough to have refilled them.
    pub fn forget_idle(&self) {
        self.shared.rate.retain_recent();
    }
}

impl<S> tower::Layer<S> for ClientLimitsLayer {
    type Service = ClientLimits<S>;

    fn layer(&self, inner: S) -> ClientLimits<S> {
        ClientLimits {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service `ClientLimitsLayer` wraps around the client API.
#[derive(Clone)]
pub struct ClientLimits<S> {
    inner: S,
    shared: Arc<Shared>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, B> tower::Service<http::Request<B>> for ClientLimits<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let slot = match self.shared.admit(&client_key(&request)) {
            Ok(slot) => slot,
            Err(status) => return Box::pin(async move { Ok(status.into_http()) }),
        };
        let future = self.inner.call(request);
        Box::pin(async move {
            let response = future.await?;
            Ok(response.map(|body| tonic::body::Body::new(SlotBody { body, _slot: slot })))
        })
    }
}

/// A response body that holds its call's slot until it ends.
struct SlotBody {
    body: tonic::body::Body,
    _slot: CallSlot,
}

impl http_body::Body for SlotBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Forgets idle clients' buckets now and then, until `stop`.
pub async fn run_forgetter(layer: ClientLimitsLayer, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tick.tick() => layer.forget_idle(),
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(per_second: u32, burst: u32, calls: usize) -> ClientLimitsLayer {
        let limits = Limits {
            client_requests_per_second: per_second,
            client_request_burst: burst,
            client_calls_max: calls,
            ..Limits::default()
        };
        ClientLimitsLayer::new(&limits, Arc::new(Metrics::new()))
    }

    #[test]
    fn the_burst_is_spent_then_refused_per_client() {
        let l = layer(1, 3, 100);
        let a = ClientKey::Certificate("a".into());
        let b = ClientKey::Address("10.0.0.2".parse().expect("ip"));
        for _ in 0..3 {
            l.shared.admit(&a).expect("within the burst");
        }
        let refused = l.shared.admit(&a).err().expect("over the burst");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused
                .message()
                .contains("limits.client_requests_per_second = 1"),
            "{refused:?}"
        );
        // Another client has its own bucket.
        l.shared.admit(&b).expect("other client");
    }

    #[test]
    fn calls_in_flight_are_bounded_and_freed_when_they_end() {
        let l = layer(1_000, 1_000, 2);
        let a = ClientKey::Certificate("a".into());
        let first = l.shared.admit(&a).expect("1");
        let _second = l.shared.admit(&a).expect("2");
        let refused = l.shared.admit(&a).err().expect("3 in flight");
        assert!(
            refused.message().contains("limits.client_calls_max = 2"),
            "{refused:?}"
        );
        drop(first);
        let _third = l.shared.admit(&a).expect("a slot was freed");
        drop(_second);
        drop(_third);
        assert!(l.shared.in_flight.lock().expect("lock").is_empty());
    }
}
