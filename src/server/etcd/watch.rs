//! etcd's Watch service: one bidirectional stream carries many watches, each created, cancelled
//! and notified as etcd does (watch ids per stream from 0 or the client's own, `created` before
//! any event, `compact_revision` and `canceled` for a start below the compaction, filters,
//! prev_kv, progress_notify, and RequestProgress answered with watch id -1 once every watch has
//! been sent what it is owed).
//!
//! A `Session` task per stream reads the client's requests and the stream's queue from the hub
//! (`hub.rs`), and is the only writer of the responses, so a created response always comes
//! before the watch's events, and a progress notice after every event it covers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response as GrpcResponse, Status, Streaming};

use super::hub::{Item, Refused, Registered, StreamReceiver};
use super::kv::kv_pb;
use super::{header, require_leader};
use crate::proto::etcd::watch_create_request::FilterType;
use crate::proto::etcd::watch_request::RequestUnion;
use crate::proto::etcd::watch_server::Watch;
use crate::proto::etcd::{WatchCreateRequest, WatchRequest, WatchResponse};
use crate::proto::mvccpb;
use crate::server::node::Node;
use crate::state::kv::{Bytes, KvEvent, KvEventKind, Span};

/// Responses queued for the client before the session waits for it to read.
const OUT_BUFFER: usize = 64;

/// etcd's answer to a watch id the stream already uses.
const DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";

pub struct WatchService {
    node: Arc<Node>,
}

impl WatchService {
    pub fn new(node: Arc<Node>) -> Self {
        WatchService { node }
    }
}

type Out = mpsc::Sender<Result<WatchResponse, Status>>;

#[tonic::async_trait]
impl Watch for WatchService {
    type WatchStream = ReceiverStream<Result<WatchResponse, Status>>;

    #[tracing::instrument(level = "debug", name = "etcd.Watch", skip_all)]
    async fn watch(
        &self,
        request: Request<Streaming<WatchRequest>>,
    ) -> Result<GrpcResponse<Self::WatchStream>, Status> {
        require_leader(&self.node, &request)?;
        let requests = request.into_inner();
        let (out, out_rx) = mpsc::channel(OUT_BUFFER);
        let (stream, rx) = self.node.hub.kv.open_stream();
        let session = Session {
            node: self.node.clone(),
            stream,
            rx,
            out,
            watches: BTreeMap::new(),
            by_key: BTreeMap::new(),
            next_id: 0,
            progress_owed: false,
        };
        tokio::spawn(session.run(requests));
        Ok(GrpcResponse::new(ReceiverStream::new(out_rx)))
    }
}

/// One watch of a stream.
struct WatchState {
    span: Span,
    no_put: bool,
    no_delete: bool,
    prev_kv: bool,
    progress_notify: bool,
    /// Its key in the hub while it watches live; `None` while it catches up.
    key: Option<u64>,
    /// Nothing was sent to it since the last progress tick.
    quiet: bool,
}

/// The client went away (or the node is stopping): the session ends.
struct Gone;

struct Session {
    node: Arc<Node>,
    stream: u64,
    rx: StreamReceiver,
    out: Out,
    watches: BTreeMap<i64, WatchState>,
    /// Hub key -> watch id.
    by_key: BTreeMap<u64, i64>,
    next_id: i64,
    /// A RequestProgress came while a watch was catching up: answered once none is.
    progress_owed: bool,
}

impl Session {
    async fn run(mut self, mut requests: Streaming<WatchRequest>) {
        let every = Duration::from_millis(self.node.config.etcd.progress_notify_interval_ms);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            let step = tokio::select! {
                request = requests.message() => match request {
                    Ok(Some(request)) => self.handle(request).await,
                    Ok(None) | Err(_) => Err(Gone),
                },
                item = self.rx.recv() => match item {
                    Some(item) => self.deliver(item).await,
                    None => {
                        let _ = self.out.send(Err(crate::server::errors::shutting_down())).await;
                        Err(Gone)
                    }
                },
                _ = tick.tick() => {
                    self.progress_tick();
                    Ok(())
                }
            };
            if step.is_err() {
                break;
            }
        }
        self.node.hub.kv.close_stream(self.stream);
    }

    async fn send(&self, response: WatchResponse) -> Result<(), Gone> {
        self.out.send(Ok(response)).await.map_err(|_| Gone)
    }

    fn response(&self, watch_id: i64, revision: u64) -> WatchResponse {
        WatchResponse {
            header: header(&self.node, revision),
            watch_id,
            ..WatchResponse::default()
        }
    }

    async fn handle(&mut self, request: WatchRequest) -> Result<(), Gone> {
        match request.request_union {
            Some(RequestUnion::CreateRequest(create)) => self.create(create).await,
            Some(RequestUnion::CancelRequest(cancel)) => {
                if let Some(watch) = self.watches.remove(&cancel.watch_id) {
                    if let Some(key) = watch.key {
                        self.node.hub.kv.unregister(key);
                        self.by_key.remove(&key);
                    }
                    let revision = self.node.hub.kv.revision();
                    self.send(WatchResponse {
                        canceled: true,
                        ..self.response(cancel.watch_id, revision)
                    })
                    .await?;
                }
                Ok(())
            }
            Some(RequestUnion::ProgressRequest(_)) => {
                self.request_progress();
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// etcd's create: an empty key watches from "\0"; a range end of "\0" means every key from
    /// the key on.
    async fn create(&mut self, create: WatchCreateRequest) -> Result<(), Gone> {
        let revision = self.node.hub.kv.revision();
        let id = if create.watch_id != 0 {
            if self.watches.contains_key(&create.watch_id) {
                return self
                    .send(WatchResponse {
                        created: true,
                        canceled: true,
                        cancel_reason: DUPLICATE_ID.to_string(),
                        ..self.response(create.watch_id, revision)
                    })
                    .await;
            }
            create.watch_id
        } else {
            while self.watches.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id
        };
        let key = if create.key.is_empty() {
            Bytes::from_static(b"\0")
        } else {
            create.key.clone()
        };
        let filters = |f: FilterType| create.filters.contains(&(f as i32));
        self.watches.insert(
            id,
            WatchState {
                span: Span::new(&key, &create.range_end),
                no_put: filters(FilterType::Noput),
                no_delete: filters(FilterType::Nodelete),
                prev_kv: create.prev_kv,
                progress_notify: create.progress_notify,
                key: None,
                quiet: true,
            },
        );
        self.send(WatchResponse {
            created: true,
            ..self.response(id, revision)
        })
        .await?;
        let from = u64::try_from(create.start_revision).unwrap_or(0);
        self.attach(id, from).await
    }

    /// Registers watch `id` with the hub from revision `from` (0: the next), sending what the
    /// store replays, chunk by chunk, until it watches live; or ends it when `from` was
    /// compacted away.
    async fn attach(&mut self, id: i64, mut from: u64) -> Result<(), Gone> {
        loop {
            let Some(span) = self.watches.get(&id).map(|w| w.span.clone()) else {
                return Ok(());
            };
            let node = self.node.clone();
            let registered = node
                .hub
                .kv
                .register(self.stream, span.clone(), from, |f, t, max| {
                    node.state().kv().changes(&span, f, t, max)
                });
            match registered {
                Ok(Registered::Live { key, replay }) => {
                    if let Some(watch) = self.watches.get_mut(&id) {
                        watch.key = Some(key);
                    }
                    self.by_key.insert(key, id);
                    self.send_events(id, &replay).await?;
                    if self.progress_owed && self.all_live() {
                        self.request_progress();
                    }
                    return Ok(());
                }
                Ok(Registered::CatchUp { replay, next }) => {
                    self.send_events(id, &replay).await?;
                    from = next;
                }
                Ok(Registered::Compacted) => {
                    self.watches.remove(&id);
                    let compacted = self.node.state().kv().compacted();
                    let revision = self.node.hub.kv.revision();
                    return self
                        .send(WatchResponse {
                            canceled: true,
                            compact_revision: i64::try_from(compacted).unwrap_or(i64::MAX),
                            cancel_reason: "etcdserver: mvcc: required revision has been compacted"
                                .to_string(),
                            ..self.response(id, revision)
                        })
                        .await;
                }
                Err(refused) => {
                    self.watches.remove(&id);
                    let reason = match refused {
                        Refused::Closed => return Err(Gone),
                        Refused::TooMany(max) => {
                            format!("too many watches on this node (limits.watchers_max = {max})")
                        }
                        Refused::Store(e) => e.to_string(),
                    };
                    let revision = self.node.hub.kv.revision();
                    return self
                        .send(WatchResponse {
                            canceled: true,
                            cancel_reason: reason,
                            ..self.response(id, revision)
                        })
                        .await;
                }
            }
        }
    }

    fn all_live(&self) -> bool {
        self.watches.values().all(|w| w.key.is_some())
    }

    /// RequestProgress: queued behind every event queued for the stream, or owed until every
    /// watch has caught up (never ahead of an event a watch has not been sent).
    fn request_progress(&mut self) {
        if self.all_live() {
            self.progress_owed = false;
            self.node.hub.kv.progress(self.stream, None);
        } else {
            self.progress_owed = true;
        }
    }

    /// progress_notify: a notice for each such watch that had nothing to send since the last
    /// tick.
    fn progress_tick(&mut self) {
        for watch in self.watches.values_mut() {
            if watch.progress_notify && watch.quiet {
                if let Some(key) = watch.key {
                    self.node.hub.kv.progress(self.stream, Some(key));
                }
            }
            watch.quiet = true;
        }
    }

    async fn deliver(&mut self, item: Item) -> Result<(), Gone> {
        match item {
            Item::Events { key, events } => {
                let Some(&id) = self.by_key.get(&key) else {
                    return Ok(()); // cancelled since
                };
                let events: Vec<KvEvent> = events.iter().map(|e| (**e).clone()).collect();
                self.send_events(id, &events).await
            }
            Item::Progress {
                key: Some(key),
                revision,
            } => match self.by_key.get(&key) {
                Some(&id) => self.send(self.response(id, revision)).await,
                None => Ok(()),
            },
            Item::Progress {
                key: None,
                revision,
            } => {
                if self.all_live() {
                    self.send(self.response(-1, revision)).await
                } else {
                    self.progress_owed = true;
                    Ok(())
                }
            }
            Item::Lagged(detached) => {
                for (key, next) in detached {
                    let Some(id) = self.by_key.remove(&key) else {
                        continue;
                    };
                    if let Some(watch) = self.watches.get_mut(&id) {
                        watch.key = None;
                    }
                    self.attach(id, next).await?;
                }
                Ok(())
            }
        }
    }

    /// Sends watch `id` its events (after its filters), in one response; nothing when none is
    /// left.
    async fn send_events(&mut self, id: i64, events: &[KvEvent]) -> Result<(), Gone> {
        let Some(watch) = self.watches.get_mut(&id) else {
            return Ok(());
        };
        let Some(last) = events.last().map(|e| e.kv.mod_revision) else {
            return Ok(());
        };
        let pb: Vec<mvccpb::Event> = events
            .iter()
            .filter(|e| match e.kind {
                KvEventKind::Put => !watch.no_put,
                KvEventKind::Delete => !watch.no_delete,
            })
            .map(|e| event_pb(e, watch.prev_kv))
            .collect();
        if pb.is_empty() {
            return Ok(());
        }
        watch.quiet = false;
        self.send(WatchResponse {
            events: pb,
            ..self.response(id, last)
        })
        .await
    }
}

fn event_pb(event: &KvEvent, prev_kv: bool) -> mvccpb::Event {
    mvccpb::Event {
        r#type: match event.kind {
            KvEventKind::Put => mvccpb::event::EventType::Put as i32,
            KvEventKind::Delete => mvccpb::event::EventType::Delete as i32,
        },
        kv: Some(kv_pb(event.kv.clone())),
        prev_kv: event.prev.clone().filter(|_| prev_kv).map(kv_pb),
    }
}
