//! etcd's Watch service: one bidirectional stream carries many watches, each created, cancelled
//! and notified as etcd does (watch ids per stream from 0 or the client's own, `created` before
//! any event, `compact_revision` and `canceled` for a start below the compaction, filters,
//! prev_kv, progress_notify, and RequestProgress answered with watch id -1 once every watch has
//! been sent what it is owed).
//!
//! A `Session` per stream reads the client's requests and the stream's queue from the hub
//! (`hub.rs`), and is the only writer of the responses, so a created response always comes
//! before the watch's events, and a progress notice after every event it covers. It is the
//! response stream itself: it runs when the transport asks for the next response, so an event
//! goes from the hub's queue to the wire in one task (no session task and channel between), and
//! a client that does not read stops its session (the hub then detaches its watches, which catch
//! up from the store once it reads again).

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tonic::{Request, Response as GrpcResponse, Status, Streaming};

use super::hub::{Item, KvHub, Refused, Registered, StreamReceiver};
use super::kv::kv_pb;
use super::require_leader;
use crate::proto::etcd::watch_create_request::FilterType;
use crate::proto::etcd::watch_request::RequestUnion;
use crate::proto::etcd::watch_server::Watch;
use crate::proto::etcd::{ResponseHeader, WatchCreateRequest, WatchRequest, WatchResponse};
use crate::proto::mvccpb;
use crate::raft::types::{NodeId, Raft};
use crate::server::node::Node;
use crate::server::watch::WatchHub;
use crate::state::kv::{Bytes, KvEvent, KvEventKind, Span};
use crate::state::State;

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

#[tonic::async_trait]
impl Watch for WatchService {
    type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchResponse, Status>> + Send>>;

    #[tracing::instrument(level = "debug", name = "etcd.Watch", skip_all)]
    async fn watch(
        &self,
        request: Request<Streaming<WatchRequest>>,
    ) -> Result<GrpcResponse<Self::WatchStream>, Status> {
        require_leader(&self.node, &request)?;
        let every = Duration::from_millis(self.node.config.etcd.progress_notify_interval_ms);
        let responses = session(WatchHost::of(&self.node), request.into_inner(), every);
        Ok(GrpcResponse::new(Box::pin(responses)))
    }
}

/// What a watch session needs of the node it runs on: who the node is and its term (for the
/// response header), its hub, and its applied state (to replay from). The simulator builds one
/// for each simulated node, so its watch clients run these sessions.
#[derive(Clone)]
pub struct WatchHost {
    pub id: NodeId,
    pub raft: Raft,
    pub hub: Arc<WatchHub>,
    pub state: Arc<RwLock<State>>,
}

impl WatchHost {
    pub fn of(node: &Node) -> WatchHost {
        WatchHost {
            id: node.id,
            raft: node.raft.clone(),
            hub: node.hub.clone(),
            state: node.shared_state().clone(),
        }
    }

    fn kv(&self) -> &KvHub {
        &self.hub.kv
    }

    fn state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// etcd's response header, from this host's parts.
    fn header(&self, revision: u64) -> Option<ResponseHeader> {
        super::header_of(self.id, &self.raft, revision)
    }
}

/// One Watch stream on `host`: the responses to `requests`, with progress_notify's notices
/// every `progress_every`. It ends when `requests` ends or fails, or when the node stops.
pub fn session<R>(
    host: WatchHost,
    requests: R,
    progress_every: Duration,
) -> impl Stream<Item = Result<WatchResponse, Status>> + Send
where
    R: Stream<Item = Result<WatchRequest, Status>> + Send + Unpin + 'static,
{
    let (stream, rx) = host.kv().open_stream();
    let every = progress_every;
    let session = Session {
        node: host,
        stream,
        rx,
        requests,
        tick: tokio::time::interval_at(tokio::time::Instant::now() + every, every),
        pending: VecDeque::new(),
        resume: VecDeque::new(),
        ended: false,
        watches: BTreeMap::new(),
        by_key: BTreeMap::new(),
        next_id: 0,
        progress_owed: false,
    };
    futures::stream::unfold(session, |mut session| async move {
        let next = session.next().await?;
        Some((next, session))
    })
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

struct Session<R> {
    node: WatchHost,
    stream: u64,
    rx: StreamReceiver,
    requests: R,
    /// progress_notify's clock.
    tick: tokio::time::Interval,
    /// Responses made and not yet taken by the transport, in order.
    pending: VecDeque<Result<WatchResponse, Status>>,
    /// Watches catching up from the store: (watch id, next revision), one chunk per turn.
    resume: VecDeque<(i64, u64)>,
    /// The client went away or the node is stopping: the stream ends once `pending` is sent.
    ended: bool,
    watches: BTreeMap<i64, WatchState>,
    /// Hub key -> watch id.
    by_key: BTreeMap<u64, i64>,
    next_id: i64,
    /// A RequestProgress came while a watch was catching up: answered once none is.
    progress_owed: bool,
}

impl<R: Stream<Item = Result<WatchRequest, Status>> + Unpin> Session<R> {
    /// The next response: one made already, or the next made from what comes next (a request,
    /// the hub's queue, the progress clock, a chunk of a catch-up); `None` once the session
    /// has ended and everything made was taken.
    async fn next(&mut self) -> Option<Result<WatchResponse, Status>> {
        loop {
            if let Some(response) = self.pending.pop_front() {
                return Some(response);
            }
            if self.ended {
                return None;
            }
            let step = if let Some((id, from)) = self.resume.pop_front() {
                self.attach(id, from)
            } else {
                tokio::select! {
                    request = self.requests.next() => match request {
                        Some(Ok(request)) => self.handle(request),
                        None | Some(Err(_)) => Err(Gone),
                    },
                    item = self.rx.recv() => match item {
                        Some(item) => self.deliver(item),
                        None => {
                            self.pending.push_back(Err(crate::server::errors::shutting_down()));
                            Err(Gone)
                        }
                    },
                    _ = self.tick.tick() => {
                        self.progress_tick();
                        Ok(())
                    }
                }
            };
            if step.is_err() {
                self.ended = true;
            }
        }
    }

    fn send(&mut self, response: WatchResponse) {
        self.pending.push_back(Ok(response));
    }

    fn response(&self, watch_id: i64, revision: u64) -> WatchResponse {
        WatchResponse {
            header: self.node.header(revision),
            watch_id,
            ..WatchResponse::default()
        }
    }

    fn handle(&mut self, request: WatchRequest) -> Result<(), Gone> {
        match request.request_union {
            Some(RequestUnion::CreateRequest(create)) => self.create(create),
            Some(RequestUnion::CancelRequest(cancel)) => {
                if let Some(watch) = self.watches.remove(&cancel.watch_id) {
                    if let Some(key) = watch.key {
                        self.node.kv().unregister(key);
                        self.by_key.remove(&key);
                    }
                    let revision = self.node.kv().revision();
                    self.send(WatchResponse {
                        canceled: true,
                        ..self.response(cancel.watch_id, revision)
                    });
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
    fn create(&mut self, create: WatchCreateRequest) -> Result<(), Gone> {
        let revision = self.node.kv().revision();
        let id = if create.watch_id != 0 {
            if self.watches.contains_key(&create.watch_id) {
                self.send(WatchResponse {
                    created: true,
                    canceled: true,
                    cancel_reason: DUPLICATE_ID.to_string(),
                    ..self.response(create.watch_id, revision)
                });
                return Ok(());
            }
            create.watch_id
        } else {
            while self.watches.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id
        };
        // Kept as long as the watch lives: copied out of the request's buffer (`etcd::owned`).
        let key = if create.key.is_empty() {
            Bytes::from_static(b"\0")
        } else {
            super::owned(&create.key)
        };
        let filters = |f: FilterType| create.filters.contains(&(f as i32));
        self.watches.insert(
            id,
            WatchState {
                span: Span::new(&key, &super::owned(&create.range_end)),
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
        });
        let from = u64::try_from(create.start_revision).unwrap_or(0);
        self.attach(id, from)
    }

    /// Registers watch `id` with the hub from revision `from` (0: the next), sending what the
    /// store replays; a chunk at a time while there is more than one to replay (the rest is
    /// resumed on a later turn, so a long catch-up neither holds its replay in memory at once
    /// nor runs ahead of a client that does not read); or ends it when `from` was compacted
    /// away.
    fn attach(&mut self, id: i64, from: u64) -> Result<(), Gone> {
        let Some(span) = self.watches.get(&id).map(|w| w.span.clone()) else {
            return Ok(());
        };
        let node = self.node.clone();
        let registered = node
            .kv()
            .register(self.stream, span.clone(), from, |f, t, max| {
                node.state().kv().changes(&span, f, t, max)
            });
        match registered {
            Ok(Registered::Live { key, replay }) => {
                if let Some(watch) = self.watches.get_mut(&id) {
                    watch.key = Some(key);
                }
                self.by_key.insert(key, id);
                self.send_events(id, &replay);
                if self.progress_owed && self.all_live() {
                    self.request_progress();
                }
            }
            Ok(Registered::CatchUp { replay, next }) => {
                self.send_events(id, &replay);
                self.resume.push_back((id, next));
            }
            Ok(Registered::Compacted) => {
                self.watches.remove(&id);
                let compacted = self.node.state().kv().compacted();
                let revision = self.node.kv().revision();
                self.send(WatchResponse {
                    canceled: true,
                    compact_revision: i64::try_from(compacted).unwrap_or(i64::MAX),
                    cancel_reason: "etcdserver: mvcc: required revision has been compacted"
                        .to_string(),
                    ..self.response(id, revision)
                });
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
                let revision = self.node.kv().revision();
                self.send(WatchResponse {
                    canceled: true,
                    cancel_reason: reason,
                    ..self.response(id, revision)
                });
            }
        }
        Ok(())
    }

    fn all_live(&self) -> bool {
        self.watches.values().all(|w| w.key.is_some())
    }

    /// RequestProgress: queued behind every event queued for the stream, or owed until every
    /// watch has caught up (never ahead of an event a watch has not been sent).
    fn request_progress(&mut self) {
        if self.all_live() {
            self.progress_owed = false;
            self.node.kv().progress(self.stream, None);
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
                    self.node.kv().progress(self.stream, Some(key));
                }
            }
            watch.quiet = true;
        }
    }

    fn deliver(&mut self, item: Item) -> Result<(), Gone> {
        match item {
            Item::Events { key, events } => {
                let Some(&id) = self.by_key.get(&key) else {
                    return Ok(()); // cancelled since
                };
                self.send_events(id, &events);
                Ok(())
            }
            Item::Progress {
                key: Some(key),
                revision,
            } => match self.by_key.get(&key) {
                Some(&id) => {
                    self.send(self.response(id, revision));
                    Ok(())
                }
                None => Ok(()),
            },
            Item::Progress {
                key: None,
                revision,
            } => {
                if self.all_live() {
                    self.send(self.response(-1, revision));
                } else {
                    self.progress_owed = true;
                }
                Ok(())
            }
            Item::Lagged(detached) => {
                for (key, next) in detached {
                    let Some(id) = self.by_key.remove(&key) else {
                        continue;
                    };
                    if let Some(watch) = self.watches.get_mut(&id) {
                        watch.key = None;
                    }
                    self.resume.push_back((id, next));
                }
                Ok(())
            }
        }
    }

    /// Sends watch `id` its events (after its filters), in one response; nothing when none is
    /// left.
    fn send_events<E: std::borrow::Borrow<KvEvent>>(&mut self, id: i64, events: &[E]) {
        let Some(watch) = self.watches.get_mut(&id) else {
            return;
        };
        let Some(last) = events.last().map(|e| e.borrow().kv.mod_revision) else {
            return;
        };
        let pb: Vec<mvccpb::Event> = events
            .iter()
            .map(|e| e.borrow())
            .filter(|e| match e.kind {
                KvEventKind::Put => !watch.no_put,
                KvEventKind::Delete => !watch.no_delete,
            })
            .map(|e| event_pb(e, watch.prev_kv))
            .collect();
        if pb.is_empty() {
            return;
        }
        watch.quiet = false;
        self.send(WatchResponse {
            events: pb,
            ..self.response(id, last)
        });
    }
}

impl<R> Drop for Session<R> {
    /// The transport dropped the response stream (the client went away) or it ended.
    fn drop(&mut self) {
        self.node.kv().close_stream(self.stream);
    }
}

/// A keyspace event as a watch response carries it (its previous version only if asked).
pub fn event_pb(event: &KvEvent, prev_kv: bool) -> mvccpb::Event {
    mvccpb::Event {
        r#type: match event.kind {
            KvEventKind::Put => mvccpb::event::EventType::Put as i32,
            KvEventKind::Delete => mvccpb::event::EventType::Delete as i32,
        },
        kv: Some(kv_pb(event.kv.clone())),
        prev_kv: event.prev.clone().filter(|_| prev_kv).map(kv_pb),
    }
}
