//! The `watch` workload: one writer creates objects as fast as it can, and every client is a
//! watcher on the run's namespace (on etcd: the run's key prefix); an operation is one delivery,
//! its latency the time from the writer sending the create to the watcher receiving the event.
//!
//! Start without races: the writer first creates a marker object at revision R, each watcher
//! watches from R (so it cannot miss anything, wherever it connects) and reports ready once it
//! has received the marker; the clock starts when all are ready. The writer embeds its send time
//! (microseconds since a shared `Instant`) in each object. When the writer stops, each watcher
//! goes on until it has received every acknowledged write, or [`DRAIN_TIMEOUT`] passes; writes it
//! never received count as `Missed`.
//!
//! The method is the same on both targets: [`drive`] runs it over a [`Writer`] and one
//! [`Deliveries`] stream per watcher. Steward's own API is here ([`run`]); etcd's v3 API, which
//! steward's nodes serve too, is in `etcd_watch`.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Context;
use steward::proto::v1::resources_client::ResourcesClient;
use steward::proto::v1::{CreateRequest, EventType, WatchEvent, WatchRequest};
use tokio::sync::{mpsc, watch};
use tonic::transport::Channel;
use tonic::Streaming;

use crate::args::Plan;
use crate::names::{self, RunId, KIND};
use crate::report::{code_name, Recorder};
use crate::runner::{Measured, Until};
use crate::servers::Probe;

/// How long watchers may take, after the writer stops, to receive what it wrote.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The one client that writes.
pub trait Writer: Send {
    /// Creates the marker; returns its revision, the one every watcher starts from.
    fn marker(&mut self) -> impl Future<Output = anyhow::Result<u64>> + Send;
    /// Creates the `seq`-th object, stamped with `sent_us`; `Err` is the report's error code.
    fn write(&mut self, seq: u64, sent_us: u64) -> impl Future<Output = Result<(), String>> + Send;
}

/// What one message of a watch stream carried.
#[derive(Debug, Default)]
pub struct Received {
    /// The marker's creation.
    pub marker: bool,
    /// The stamps (send times) of the writer's creations: one per event (steward sends one
    /// event per message; etcd may send several in one response).
    pub sent_us: Vec<u64>,
}

/// One watcher's stream.
pub trait Deliveries: Send + 'static {
    /// The next message; `Ok(None)` when the stream ended.
    fn next(&mut self) -> impl Future<Output = Result<Option<Received>, tonic::Status>> + Send;
}

/// Steward's own API: Create and Watch of the run's namespace.
pub async fn run(
    plan: &Plan,
    run: &RunId,
    channels: &[Channel],
    probe: &Probe,
) -> anyhow::Result<Measured> {
    let ns = run.namespace();
    let writer = StewardWriter {
        res: ResourcesClient::new(channels[0].clone()),
        ns: ns.clone(),
        value_size: plan.value_size,
    };
    drive(plan, probe, writer, |client, from| {
        let mut res = ResourcesClient::new(channels[plan.conn_of_client(client)].clone());
        let ns = ns.clone();
        async move {
            let stream = res
                .watch(WatchRequest {
                    kind: KIND.into(),
                    namespace: ns,
                    label_selector: String::new(),
                    start_revision: from,
                    bookmark_interval_ms: 0,
                })
                .await
                .context("open a watch")?
                .into_inner();
            Ok(StewardEvents(stream))
        }
    })
    .await
}

/// Writes the marker, opens every watcher's stream from its revision with `open(client, from)`,
/// and once every watcher has received the marker, starts the clock and writes until the
/// plan's stop; then lets the watchers drain and merges what they recorded.
pub async fn drive<W, D, F, Fut>(
    plan: &Plan,
    probe: &Probe,
    mut writer: W,
    open: F,
) -> anyhow::Result<Measured>
where
    W: Writer,
    D: Deliveries,
    F: Fn(usize, u64) -> Fut,
    Fut: Future<Output = anyhow::Result<D>> + Send + 'static,
{
    let from = writer.marker().await?;
    let base = Instant::now();
    let (ready_tx, mut ready_rx) = mpsc::channel::<anyhow::Result<()>>(plan.clients);
    // None while the writer runs; then the number of writes it had acknowledged.
    let (done_tx, done_rx) = watch::channel::<Option<u64>>(None);
    let watchers: Vec<_> = (0..plan.clients)
        .map(|c| {
            tokio::spawn(watcher(
                open(c, from),
                base,
                ready_tx.clone(),
                done_rx.clone(),
            ))
        })
        .collect();
    drop(ready_tx);
    for _ in 0..plan.clients {
        match ready_rx.recv().await {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(e),
            None => anyhow::bail!("a watcher ended before it was ready"),
        }
    }

    probe.start()?;
    let start = Instant::now();
    let until = Until::new(plan.stop, start);
    let mut all = Recorder::default();
    let mut writes = 0u64;
    let mut seq = 0u64;
    while until.more() {
        seq += 1;
        let sent_us = base.elapsed().as_micros() as u64;
        match writer.write(seq, sent_us).await {
            Ok(()) => writes += 1,
            Err(code) => all.error(&code),
        }
    }
    done_tx.send_replace(Some(writes));
    for w in watchers {
        all.merge(&w.await.context("a watcher task panicked")?);
    }
    let elapsed = start.elapsed();
    Ok(Measured {
        all,
        elapsed,
        writes: Some(writes),
        servers: probe.finish()?,
        warmup: None,
    })
}

/// One watcher: opens its stream, reports ready once the marker arrived, records each delivery
/// until it has received every acknowledged write (or the drain times out).
async fn watcher<D: Deliveries>(
    open: impl Future<Output = anyhow::Result<D>>,
    base: Instant,
    ready: mpsc::Sender<anyhow::Result<()>>,
    mut done: watch::Receiver<Option<u64>>,
) -> Recorder {
    let mut rec = Recorder::default();
    let mut stream = match open.await {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e)).await;
            return rec;
        }
    };
    // Ready once the marker has arrived: everything after it will too.
    loop {
        match stream.next().await {
            Ok(Some(r)) if r.marker => break,
            Ok(Some(_)) => {}
            Ok(None) => {
                let _ = ready
                    .send(Err(anyhow::anyhow!("a watch ended before the marker")))
                    .await;
                return rec;
            }
            Err(s) => {
                let _ = ready
                    .send(Err(anyhow::anyhow!("watch the marker: {s}")))
                    .await;
                return rec;
            }
        }
    }
    let _ = ready.send(Ok(())).await;
    drop(ready);

    let mut received = 0u64;
    let mut target: Option<u64> = None;
    let mut drain_deadline = None;
    loop {
        if let Some(t) = target {
            if received >= t {
                return rec;
            }
        }
        let next = async {
            match drain_deadline {
                Some(d) => tokio::time::timeout_at(d, stream.next()).await.ok(),
                None => Some(stream.next().await),
            }
        };
        tokio::select! {
            msg = next => match msg {
                Some(Ok(Some(r))) => {
                    let now_us = base.elapsed().as_micros() as u64;
                    for sent_us in &r.sent_us {
                        rec.ok(Duration::from_micros(now_us.saturating_sub(*sent_us)));
                    }
                    received += r.sent_us.len() as u64;
                }
                Some(Ok(None)) => {
                    rec.error("Unavailable");
                    break;
                }
                Some(Err(s)) => {
                    rec.error(&code_name(&s));
                    break;
                }
                None => break, // drain timeout
            },
            changed = done.changed(), if target.is_none() => {
                if changed.is_ok() {
                    target = *done.borrow_and_update();
                    if target.is_some() {
                        drain_deadline = Some(tokio::time::Instant::now() + DRAIN_TIMEOUT);
                    }
                } else {
                    // The run was called off.
                    return rec;
                }
            }
        }
    }
    // The stream ended or the drain timed out: whatever is still due was missed. Before the
    // writer finishes, the target is not known yet; wait for it (the writer always ends).
    let t = match target {
        Some(t) => t,
        None => match done.wait_for(Option::is_some).await {
            Ok(t) => t.expect("waited for Some"),
            Err(_) => return rec,
        },
    };
    rec.errors_n("Missed", t.saturating_sub(received));
    rec
}

/// Steward's writer: Create in the run's namespace.
struct StewardWriter {
    res: ResourcesClient<Channel>,
    ns: String,
    value_size: usize,
}

impl Writer for StewardWriter {
    async fn marker(&mut self) -> anyhow::Result<u64> {
        let marker = names::object_json(&self.ns, names::WATCH_MARKER, false, 1, None);
        let reply = self
            .res
            .create(CreateRequest {
                object_json: marker,
                fence: None,
            })
            .await
            .with_context(|| {
                format!(
                    "create the marker {KIND}/{}/{}",
                    self.ns,
                    names::WATCH_MARKER
                )
            })?;
        Ok(reply.into_inner().revision)
    }

    async fn write(&mut self, seq: u64, sent_us: u64) -> Result<(), String> {
        let body = names::object_json(
            &self.ns,
            &names::watch_name(seq),
            false,
            self.value_size,
            Some(sent_us),
        );
        self.res
            .create(CreateRequest {
                object_json: body,
                fence: None,
            })
            .await
            .map(drop)
            .map_err(|s| code_name(&s))
    }
}

/// Steward's watch stream: one event per message.
struct StewardEvents(Streaming<WatchEvent>);

impl Deliveries for StewardEvents {
    async fn next(&mut self) -> Result<Option<Received>, tonic::Status> {
        let Some(ev) = self.0.message().await? else {
            return Ok(None);
        };
        let mut r = Received::default();
        // Creations only: not a bookmark.
        if ev.r#type == EventType::Added as i32 {
            match names::watched(&ev.object_json) {
                Some((name, _)) if name == names::WATCH_MARKER => r.marker = true,
                Some((_, Some(sent_us))) => r.sent_us.push(sent_us),
                _ => {}
            }
        }
        Ok(Some(r))
    }
}
