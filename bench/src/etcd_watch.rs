//! The `watch` workload on etcd's v3 API, by [`watch::drive`]'s method (the marker, the send
//! time in each object, the drain): the writer Puts each object if it is absent (the Txn of the
//! `create` workload), and every watcher has its own Watch stream with one watch on the run's
//! key prefix, from the marker's revision. An etcd watch response may carry several events:
//! each is one delivery, all received at the same instant.

use anyhow::Context;
use futures::channel::mpsc;
use tonic::transport::Channel;
use tonic::Streaming;

use crate::args::Plan;
use crate::etcd_ops::{put, put_if, rv};
use crate::etcd_proto::etcdserverpb::compare::{CompareTarget, TargetUnion};
use crate::etcd_proto::etcdserverpb::kv_client::KvClient;
use crate::etcd_proto::etcdserverpb::watch_client::WatchClient;
use crate::etcd_proto::etcdserverpb::watch_request::RequestUnion;
use crate::etcd_proto::etcdserverpb::{WatchCreateRequest, WatchRequest, WatchResponse};
use crate::etcd_proto::mvccpb::event::EventType;
use crate::names::{self, RunId, StoredMeta};
use crate::report::code_name;
use crate::runner::Measured;
use crate::servers::Probe;
use crate::watch::{self, Deliveries, Received, Writer};

pub async fn run(
    plan: &Plan,
    run: &RunId,
    channels: &[Channel],
    probe: &Probe,
) -> anyhow::Result<Measured> {
    let prefix = names::etcd_prefix(run);
    let writer = EtcdWriter {
        kv: KvClient::new(channels[0].clone()),
        ns: run.namespace(),
        prefix: prefix.clone(),
        value_size: plan.value_size,
        revision: 1,
    };
    watch::drive(plan, probe, writer, |client, from| {
        let channel = channels[plan.conn_of_client(client)].clone();
        let prefix = prefix.clone();
        async move { EtcdEvents::open(channel, &prefix, from).await }
    })
    .await
}

struct EtcdWriter {
    kv: KvClient<Channel>,
    ns: String,
    prefix: String,
    value_size: usize,
    /// The store revision of the last write: the next document's resourceVersion (as in the
    /// `create` workload, there for the byte count).
    revision: i64,
}

impl Writer for EtcdWriter {
    async fn marker(&mut self) -> anyhow::Result<u64> {
        let key = format!("{}{}", self.prefix, names::WATCH_MARKER);
        let meta = StoredMeta::new(0, 0, 1, 1);
        let value = names::stored_json(&self.ns, names::WATCH_MARKER, false, 1, None, &meta);
        self.revision = put(&mut self.kv, key.clone(), value.into_bytes())
            .await
            .with_context(|| format!("put the marker {key}"))?;
        Ok(rv(self.revision))
    }

    async fn write(&mut self, seq: u64, sent_us: u64) -> Result<(), String> {
        let name = names::watch_name(seq);
        let meta = StoredMeta::new(0, seq, rv(self.revision + 1), 1);
        let value = names::stored_json(
            &self.ns,
            &name,
            false,
            self.value_size,
            Some(sent_us),
            &meta,
        );
        let key = format!("{}{name}", self.prefix);
        let absent = (CompareTarget::Create, TargetUnion::CreateRevision(0));
        match put_if(&mut self.kv, &key, value.into_bytes(), absent).await {
            Ok(Some(revision)) => {
                self.revision = revision;
                Ok(())
            }
            Ok(None) => Err("AlreadyExists".into()),
            Err(s) => Err(code_name(&s)),
        }
    }
}

/// One watcher's Watch stream, with its one watch on the run's prefix.
struct EtcdEvents {
    /// Held so that the stream stays open: the call ends when its requests do.
    _requests: mpsc::Sender<WatchRequest>,
    responses: Streaming<WatchResponse>,
    marker_key: Vec<u8>,
}

impl EtcdEvents {
    async fn open(channel: Channel, prefix: &str, from: u64) -> anyhow::Result<EtcdEvents> {
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: prefix.as_bytes().to_vec().into(),
                range_end: names::prefix_end(prefix.as_bytes()),
                start_revision: i64::try_from(from).context("the marker's revision")?,
                ..Default::default()
            })),
        };
        // The request goes in before the call: a server may send its response headers only
        // with its first response (etcd does), and the call returns on the headers.
        let (mut requests, rx) = mpsc::channel(1);
        requests
            .try_send(create)
            .expect("an empty channel has room for one");
        let responses = WatchClient::new(channel)
            .watch(rx)
            .await
            .context("open a watch")?
            .into_inner();
        Ok(EtcdEvents {
            _requests: requests,
            responses,
            marker_key: format!("{prefix}{}", names::WATCH_MARKER).into_bytes(),
        })
    }
}

impl Deliveries for EtcdEvents {
    async fn next(&mut self) -> Result<Option<Received>, tonic::Status> {
        let Some(response) = self.responses.message().await? else {
            return Ok(None);
        };
        if response.canceled {
            return Err(tonic::Status::cancelled(format!(
                "watch canceled: {} (compact revision {})",
                response.cancel_reason, response.compact_revision
            )));
        }
        // The `created` response carries no events.
        let mut r = Received::default();
        for ev in &response.events {
            let Some(kv) = ev
                .kv
                .as_ref()
                .filter(|_| ev.r#type == EventType::Put as i32)
            else {
                continue;
            };
            if kv.key[..] == self.marker_key[..] {
                r.marker = true;
            } else if let Some((_, Some(sent_us))) =
                std::str::from_utf8(&kv.value).ok().and_then(names::watched)
            {
                r.sent_us.push(sent_us);
            }
        }
        Ok(Some(r))
    }
}
