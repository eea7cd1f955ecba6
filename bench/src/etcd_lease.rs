//! The etcd `lease-keep-alive` workload: each client holds one lease (granted before the clock,
//! [`names::LEASE_TTL_S`]) and keeps it alive on its own LeaseKeepAlive stream, as clientv3's
//! KeepAlive does; an operation is one KeepAlive sent and its answer received. Called through
//! [`crate::etcd_ops::EtcdWorker`].

use anyhow::Context;
use futures::channel::mpsc;
use futures::SinkExt;
use tonic::transport::Channel;
use tonic::Streaming;

use crate::etcd_proto::etcdserverpb::lease_client::LeaseClient;
use crate::etcd_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
};
use crate::names;
use crate::report::code_name;

/// A client's open LeaseKeepAlive stream: its requests' sender and its answers.
type KeepAliveStream = (
    mpsc::Sender<LeaseKeepAliveRequest>,
    Streaming<LeaseKeepAliveResponse>,
);

pub struct KeepAliveWorker {
    lease: LeaseClient<Channel>,
    /// Granted in `prepare`.
    id: i64,
    /// Opened in `prepare`; None again once it broke, and the next operation opens a new one
    /// (that operation's latency includes the opening, as a real client's would).
    stream: Option<KeepAliveStream>,
}

impl KeepAliveWorker {
    pub fn new(lease: LeaseClient<Channel>) -> KeepAliveWorker {
        KeepAliveWorker {
            lease,
            id: 0,
            stream: None,
        }
    }

    /// Untimed: grants the lease and opens the stream with a first keep-alive.
    pub async fn prepare(&mut self) -> anyhow::Result<()> {
        self.id = self
            .lease
            .lease_grant(LeaseGrantRequest {
                ttl: names::LEASE_TTL_S,
                id: 0,
            })
            .await
            .context("prepare: grant a lease")?
            .into_inner()
            .id;
        self.step()
            .await
            .map_err(|code| anyhow::anyhow!("prepare: keep lease {:x} alive: {code}", self.id))
    }

    /// One keep-alive; `Err` is the report's error code.
    pub async fn step(&mut self) -> Result<(), String> {
        let request = LeaseKeepAliveRequest { id: self.id };
        let answer = match &mut self.stream {
            Some((requests, answers)) => match requests.send(request).await {
                Ok(()) => answers.message().await,
                Err(_) => Ok(None), // the call ended
            },
            None => {
                // The request goes in before the call: a server may send its response headers
                // only with its first answer (etcd does), and the call returns on the headers.
                let (mut requests, rx) = mpsc::channel(1);
                requests
                    .try_send(request)
                    .expect("an empty channel has room for one");
                let mut answers = self
                    .lease
                    .lease_keep_alive(rx)
                    .await
                    .map_err(|s| code_name(&s))?
                    .into_inner();
                let first = answers.message().await;
                self.stream = Some((requests, answers));
                first
            }
        };
        match answer {
            Ok(Some(a)) if a.id == self.id && a.ttl > 0 => Ok(()),
            // etcd answers TTL 0 for a lease it no longer has.
            Ok(Some(a)) if a.id == self.id => Err("NotFound".into()),
            Ok(Some(_)) => Err("WrongResult".into()),
            Ok(None) => {
                self.stream = None;
                Err("Unavailable".into())
            }
            Err(s) => {
                self.stream = None;
                Err(code_name(&s))
            }
        }
    }
}
