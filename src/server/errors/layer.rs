//! `DetailsLayer`: an ErrorInfo on the refusals tonic itself makes, which no handler builds.

use tonic::{Code, Status};

use super::{reason_for_code, refused};

/// Adds an ErrorInfo to a refusal that leaves the client API without details: the statuses tonic
/// itself makes (an unknown method, a request it cannot decode or that is too large), which no
/// handler builds. The reason follows from the code (`reason_for_code`). Only statuses in the
/// response headers (trailers-only responses, as every refusal before a reply is) are seen; one
/// in the trailers of a streamed body (an encoding failure mid-stream) is left as it is.
#[derive(Clone, Copy, Debug, Default)]
pub struct DetailsLayer;

impl<S> tower::Layer<S> for DetailsLayer {
    type Service = Details<S>;

    fn layer(&self, inner: S) -> Details<S> {
        Details { inner }
    }
}

/// The service `DetailsLayer` wraps around the client API's router.
#[derive(Clone, Debug)]
pub struct Details<S> {
    inner: S,
}

type DetailsFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'static>>;

impl<S, B, RB> tower::Service<http::Request<B>> for Details<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = DetailsFuture<Result<S::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let future = self.inner.call(request);
        Box::pin(async move {
            let mut response = future.await?;
            add_details(response.headers_mut());
            Ok(response)
        })
    }
}

/// The details header for a refusal in `headers` that has none (see `DetailsLayer`).
pub(super) fn add_details(headers: &mut http::HeaderMap) {
    const DETAILS: &str = "grpc-status-details-bin";
    if headers.contains_key(DETAILS) {
        return;
    }
    let Some(status) = Status::from_header_map(headers) else {
        return;
    };
    if status.code() == Code::Ok {
        return;
    }
    let code = status.code();
    let with_details = refused(code, reason_for_code(code), status.message()).into_http::<()>();
    if let Some(v) = with_details.headers().get(DETAILS) {
        headers.insert(DETAILS, v.clone());
    }
}
