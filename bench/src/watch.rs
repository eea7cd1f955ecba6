//! The `watch` workload: one writer creates objects as fast as it can, and every client is a
//! watcher on the run's namespace; an operation is one delivery, its latency the time from the
//! writer sending the create to the watcher receiving the event.
//!
//! Start without races: the writer first creates a marker object at revision R, each watcher
//! watches from R (so it cannot miss anything, wherever it connects) and reports ready once it
//! has received the marker; the clock starts when all are ready. The writer embeds its send time
//! (microseconds since a shared `Instant`) in each object. When the writer stops, each watcher
//! goes on until it has received every acknowledged write, or [`DRAIN_TIMEOUT`] passes; writes it
//! never received count as `Missed`.

use std::time::{Duration, Instant};

use anyhow::Context;
use steward::proto::v1::resources_client::ResourcesClient;
use steward::proto::v1::{CreateRequest, EventType, WatchRequest};
use tokio::sync::{mpsc, watch};
use tonic::transport::Channel;

use crate::args::Plan;
use crate::names::{self, RunId, KIND};
use crate::report::{code_name, Recorder};
use crate::runner::{Measured, Until};
use crate::servers::Probe;

/// How long watchers may take, after the writer stops, to receive what it wrote.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn run(
    plan: &Plan,
    run: &RunId,
    channels: &[Channel],
    probe: &Probe,
) -> anyhow::Result<Measured> {
    let ns = run.namespace();
    let mut writer = ResourcesClient::new(channels[0].clone());
    let marker = names::object_json(&ns, names::WATCH_MARKER, false, 1, None);
    let from = writer
        .create(CreateRequest {
            object_json: marker,
            fence: None,
        })
        .await
        .with_context(|| format!("create the marker {KIND}/{ns}/{}", names::WATCH_MARKER))?
        .into_inner()
        .revision;

    let base = Instant::now();
    let (ready_tx, mut ready_rx) = mpsc::channel::<anyhow::Result<()>>(plan.clients);
    // None while the writer runs; then the number of writes it had acknowledged.
    let (done_tx, done_rx) = watch::channel::<Option<u64>>(None);
    let watchers: Vec<_> = (0..plan.clients)
        .map(|c| {
            let res = ResourcesClient::new(channels[plan.conn_of_client(c)].clone());
            let w = Watcher {
                res,
                ns: ns.clone(),
                from,
                base,
            };
            tokio::spawn(w.run(ready_tx.clone(), done_rx.clone()))
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
        let body = names::object_json(
            &ns,
            &names::watch_name(seq),
            false,
            plan.value_size,
            Some(sent_us),
        );
        match writer
            .create(CreateRequest {
                object_json: body,
                fence: None,
            })
            .await
        {
            Ok(_) => writes += 1,
            Err(s) => all.error(&code_name(&s)),
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

struct Watcher {
    res: ResourcesClient<Channel>,
    ns: String,
    from: u64,
    base: Instant,
}

impl Watcher {
    async fn run(
        mut self,
        ready: mpsc::Sender<anyhow::Result<()>>,
        mut done: watch::Receiver<Option<u64>>,
    ) -> Recorder {
        let mut rec = Recorder::default();
        let opened = self
            .res
            .watch(WatchRequest {
                kind: KIND.into(),
                namespace: self.ns.clone(),
                label_selector: String::new(),
                start_revision: self.from,
                bookmark_interval_ms: 0,
            })
            .await;
        let mut stream = match opened {
            Ok(s) => s.into_inner(),
            Err(s) => {
                let _ = ready.send(Err(anyhow::anyhow!("open a watch: {s}"))).await;
                return rec;
            }
        };
        // Ready once the marker has arrived: everything after it will too.
        loop {
            match stream.message().await {
                Ok(Some(ev)) if is_added(&ev, names::WATCH_MARKER) => break,
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
                    Some(d) => tokio::time::timeout_at(d, stream.message()).await.ok(),
                    None => Some(stream.message().await),
                }
            };
            tokio::select! {
                msg = next => match msg {
                    Some(Ok(Some(ev))) => {
                        if let Some(sent_us) = self.delivery(&ev) {
                            let now_us = self.base.elapsed().as_micros() as u64;
                            rec.ok(Duration::from_micros(now_us.saturating_sub(sent_us)));
                            received += 1;
                        }
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

    /// The send time of a write's event (not the marker, not a bookmark).
    fn delivery(&self, ev: &steward::proto::v1::WatchEvent) -> Option<u64> {
        if ev.r#type != EventType::Added as i32 {
            return None;
        }
        names::watched(&ev.object_json)?.1
    }
}

fn is_added(ev: &steward::proto::v1::WatchEvent, name: &str) -> bool {
    ev.r#type == EventType::Added as i32
        && names::watched(&ev.object_json).is_some_and(|(n, _)| n == name)
}
