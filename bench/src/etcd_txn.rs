//! The etcd `txn` workload: each client owns [`names::TXN_KEYS`] keys and sends one Txn per
//! operation: if every key's mod_revision is the one this client last wrote, Put a new document
//! at each, else Range each. That is Kubernetes' OptimisticPut (`If(mod_revision == rev)
//! .Then(Put).Else(Get)`, its GuaranteedUpdate) over several keys, so one request carries
//! several compares and several operations, applied at one revision. A failed compare is
//! `Aborted` in the report, as a failed precondition is on steward, and its Ranges give the
//! current mod_revisions at no extra round trip. Called through [`crate::etcd_ops::EtcdWorker`].

use anyhow::Context;
use tonic::transport::Channel;

use crate::args::Plan;
use crate::etcd_ops::{put, rv};
use crate::etcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::etcd_proto::etcdserverpb::kv_client::KvClient;
use crate::etcd_proto::etcdserverpb::request_op::Request;
use crate::etcd_proto::etcdserverpb::response_op::Response;
use crate::etcd_proto::etcdserverpb::{Compare, PutRequest, RangeRequest, RequestOp, TxnRequest};
use crate::names::{self, RunId, StoredMeta, TXN_KEYS};
use crate::report::code_name;

/// One `txn` client: its keys and the mod_revision it last saw of each.
pub struct TxnWorker {
    kv: KvClient<Channel>,
    ns: String,
    client: usize,
    /// `(name, key)` of each of the client's objects.
    keys: Vec<(String, String)>,
    value_size: usize,
    /// Stamped into every spec, so that each Put changes its document.
    seq: u64,
    /// Each key's mod_revision as last written or read (the next Txn's compares).
    revisions: [i64; TXN_KEYS],
}

impl TxnWorker {
    pub fn new(plan: &Plan, run: &RunId, client: usize, channel: Channel) -> TxnWorker {
        let prefix = names::etcd_prefix(run);
        let keys = (0..TXN_KEYS)
            .map(|i| {
                let name = names::txn_name(client, i);
                let key = format!("{prefix}{name}");
                (name, key)
            })
            .collect();
        TxnWorker {
            kv: KvClient::new(channel),
            ns: run.namespace(),
            client,
            keys,
            value_size: plan.value_size,
            seq: 0,
            revisions: [0; TXN_KEYS],
        }
    }

    /// The document of the client's `i`-th object after `seq` updates.
    fn value(&self, i: usize, seq: u64, revision: i64) -> Vec<u8> {
        let meta = StoredMeta::new(self.client, i as u64, rv(revision), seq + 1);
        let stamp = (seq > 0).then_some(seq);
        let (name, _) = &self.keys[i];
        names::stored_json(&self.ns, name, false, self.value_size, stamp, &meta).into_bytes()
    }

    /// Untimed: writes each key once and notes its mod_revision.
    pub async fn prepare(&mut self) -> anyhow::Result<()> {
        for i in 0..TXN_KEYS {
            let key = self.keys[i].1.clone();
            let value = self.value(i, 0, 1);
            self.revisions[i] = put(&mut self.kv, key.clone(), value)
                .await
                .with_context(|| format!("prepare: put {key}"))?;
        }
        Ok(())
    }

    /// One Txn; `Err` is the report's error code.
    pub async fn step(&mut self) -> Result<(), String> {
        self.seq += 1;
        let next = self.revisions.iter().max().copied().unwrap_or(0) + 1;
        let (mut compare, mut success, mut failure) = (vec![], vec![], vec![]);
        for i in 0..TXN_KEYS {
            let key = self.keys[i].1.as_bytes().to_vec();
            compare.push(Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Mod as i32,
                key: key.clone().into(),
                target_union: Some(TargetUnion::ModRevision(self.revisions[i])),
                range_end: Default::default(),
            });
            success.push(RequestOp {
                request: Some(Request::RequestPut(PutRequest {
                    key: key.clone().into(),
                    value: self.value(i, self.seq, next).into(),
                    ..Default::default()
                })),
            });
            failure.push(RequestOp {
                request: Some(Request::RequestRange(RangeRequest {
                    key: key.into(),
                    ..Default::default()
                })),
            });
        }
        let txn = TxnRequest {
            compare,
            success,
            failure,
        };
        // On an error the outcome may be unknown: the next Txn's compares then fail, and its
        // Ranges say where the keys are.
        let reply = self
            .kv
            .txn(txn)
            .await
            .map_err(|s| code_name(&s))?
            .into_inner();
        if reply.responses.len() != TXN_KEYS {
            return Err("WrongResult".into());
        }
        if reply.succeeded {
            // One revision for the whole Txn: every key's new mod_revision.
            let revision = reply.header.map(|h| h.revision).unwrap_or(0);
            self.revisions = [revision; TXN_KEYS];
            return Ok(());
        }
        for (i, op) in reply.responses.iter().enumerate() {
            match &op.response {
                Some(Response::ResponseRange(r)) if r.kvs.len() == 1 => {
                    self.revisions[i] = r.kvs[0].mod_revision;
                }
                _ => return Err("WrongResult".into()),
            }
        }
        Err("Aborted".into())
    }
}
