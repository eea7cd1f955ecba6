//! What etcd clients ask of the keyspace, what they get back, and the refusals, in etcd's words.
//!
//! These are written into the Raft log (as JSON, keys and values in base64), so a rename is a
//! log format change; fields that are usually at their default are left out of the JSON.

use serde::{Deserialize, Serialize};

use super::{b64, is_zero, Bytes, KeyValue, Span};

/// A keyspace command: a txn (a put or a delete alone is a txn of one request, with no
/// compares), or a compaction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvCommand {
    Txn(Txn),
    /// etcd's Compact: forget the versions no read at `revision` or later can see.
    Compact {
        revision: u64,
    },
    /// etcd's LeaseGrant: a lease of `ttl_ms` from now; `id` 0 lets apply pick one.
    LeaseGrant {
        id: i64,
        ttl_ms: u64,
    },
    /// etcd's LeaseRevoke: the lease ends now, and its keys are deleted.
    LeaseRevoke {
        id: i64,
    },
    /// etcd's LeaseKeepAlive: the lease lasts its TTL from now. Nodes now propose
    /// `LeaseKeepAlives` (many in one entry); this stays so logs written before still apply.
    LeaseKeepAlive {
        id: i64,
    },
    /// etcd's LeaseKeepAlive for many leases in one entry (a node's keep-alives that arrived
    /// while its last entry of them was in flight): each of `ids` that exists lasts its TTL from
    /// now; one that does not is answered as gone. An id may come more than once.
    LeaseKeepAlives {
        ids: Vec<i64>,
    },
    /// The leader's sweep: each of `ids` that has ended by the entry's cluster time ends, and
    /// its keys are deleted; nothing ends until `grace_ms` after the term's first stamped entry
    /// (as for locks).
    LeaseExpire {
        ids: Vec<i64>,
        grace_ms: u64,
    },
}

/// etcd's TxnRequest: if every compare holds, `success` runs, else `failure`; atomically, at one
/// revision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Txn {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compare: Vec<Compare>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub success: Vec<RequestOp>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure: Vec<RequestOp>,
}

/// One request of a txn branch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestOp {
    Range(RangeOp),
    Put(PutOp),
    Delete(DeleteOp),
    Txn(Txn),
}

/// etcd's RangeRequest, less `serializable` (a read's consistency is the server's business).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RangeOp {
    #[serde(with = "b64")]
    pub key: Bytes,
    #[serde(default, with = "b64", skip_serializing_if = "Bytes::is_empty")]
    pub range_end: Bytes,
    /// Most keys returned; 0: no limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub limit: u64,
    /// The revision to read at; 0: the newest.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub revision: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sort_order: SortOrder,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sort_target: SortTarget,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub keys_only: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub count_only: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_mod_revision: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_mod_revision: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_create_revision: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_create_revision: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SortOrder {
    #[default]
    None,
    Ascend,
    Descend,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SortTarget {
    #[default]
    Key,
    Version,
    Create,
    Mod,
    Value,
}

/// etcd's PutRequest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PutOp {
    #[serde(with = "b64")]
    pub key: Bytes,
    #[serde(default, with = "b64", skip_serializing_if = "Bytes::is_empty")]
    pub value: Bytes,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lease: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prev_kv: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ignore_value: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ignore_lease: bool,
}

/// etcd's DeleteRangeRequest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeleteOp {
    #[serde(with = "b64")]
    pub key: Bytes,
    #[serde(default, with = "b64", skip_serializing_if = "Bytes::is_empty")]
    pub range_end: Bytes,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prev_kv: bool,
}

/// etcd's Compare: `target` of the key (of every key in `[key, range_end)` with a range end)
/// against an operand.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Compare {
    #[serde(with = "b64")]
    pub key: Bytes,
    #[serde(default, with = "b64", skip_serializing_if = "Bytes::is_empty")]
    pub range_end: Bytes,
    pub op: CompareOp,
    pub target: CompareTarget,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareOp {
    Equal,
    Greater,
    Less,
    NotEqual,
}

/// What a compare reads of a key, with the operand it is compared to. A missing key has
/// version, revisions and lease 0; any compare of a missing key's value fails.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareTarget {
    Version(i64),
    Create(i64),
    Mod(i64),
    Value(#[serde(with = "b64")] Bytes),
    Lease(i64),
}

/// What a keyspace command answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvReply {
    Txn(TxnResult),
    /// A compaction, at the store's revision `revision`.
    Compacted {
        revision: u64,
    },
    /// A lease granted or kept alive: its id and TTL.
    Lease {
        id: i64,
        ttl_ms: u64,
        revision: u64,
    },
    /// Leases kept alive together: for each id asked, in order, its TTL, or `None` when it
    /// no longer exists.
    LeasesKept {
        ttls_ms: Vec<Option<u64>>,
        revision: u64,
    },
    /// Leases ended (revoked, or expired by a sweep), at store revision `revision`.
    LeasesEnded {
        ids: Vec<i64>,
        revision: u64,
    },
}

/// etcd's TxnResponse: which branch ran, and one result per request of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TxnResult {
    pub succeeded: bool,
    pub responses: Vec<OpResult>,
    /// The store revision after the txn (the one it wrote at, if it changed anything).
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpResult {
    Range(RangeResult),
    Put {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prev_kv: Option<KeyValue>,
    },
    Delete {
        deleted: u64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        prev_kvs: Vec<KeyValue>,
    },
    Txn(TxnResult),
}

/// etcd's RangeResponse, less the header.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RangeResult {
    pub kvs: Vec<KeyValue>,
    pub more: bool,
    pub count: u64,
}

/// Why etcd refuses a keyspace request, as `Rejection::Kv`: each shows as etcd's own message,
/// which etcd clients match on (etcd's rpctypes); `code` is its gRPC code name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum KvError {
    #[error("etcdserver: key is not provided")]
    EmptyKey,
    #[error("etcdserver: key not found")]
    KeyNotFound,
    #[error("etcdserver: value is provided")]
    ValueProvided,
    #[error("etcdserver: lease is provided")]
    LeaseProvided,
    #[error("etcdserver: too many operations in txn request")]
    TooManyOps,
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKey,
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted,
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRevision,
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    #[error("etcdserver: invalid sort option")]
    InvalidSortOption,
    #[error("etcdserver: lease already exists")]
    LeaseExists,
    #[error("etcdserver: too large lease TTL")]
    LeaseTtlTooLarge,
}

impl KvError {
    /// The gRPC code etcd answers it with.
    pub fn code(&self) -> &'static str {
        match self {
            KvError::Compacted | KvError::FutureRevision | KvError::LeaseTtlTooLarge => {
                "OutOfRange"
            }
            KvError::LeaseNotFound => "NotFound",
            KvError::LeaseExists => "FailedPrecondition",
            KvError::EmptyKey
            | KvError::KeyNotFound
            | KvError::ValueProvided
            | KvError::LeaseProvided
            | KvError::TooManyOps
            | KvError::DuplicateKey
            | KvError::InvalidSortOption => "InvalidArgument",
        }
    }
}

impl Txn {
    /// Whether any branch, at any depth, may write (a put or a delete).
    pub fn writes(&self) -> bool {
        self.success.iter().chain(&self.failure).any(|op| match op {
            RequestOp::Put(_) | RequestOp::Delete(_) => true,
            RequestOp::Txn(t) => t.writes(),
            RequestOp::Range(_) => false,
        })
    }
}

impl KvCommand {
    /// Whether it may grow the state: a txn with a put in it, in any branch (refused while a
    /// NOSPACE alarm is raised, as etcd refuses puts; deletes, reads and compactions go on).
    pub fn may_grow(&self) -> bool {
        fn puts(txn: &Txn) -> bool {
            txn.success.iter().chain(&txn.failure).any(|op| match op {
                RequestOp::Put(_) => true,
                RequestOp::Txn(t) => puts(t),
                RequestOp::Range(_) | RequestOp::Delete(_) => false,
            })
        }
        match self {
            KvCommand::Txn(txn) => puts(txn),
            KvCommand::LeaseGrant { .. } => true,
            KvCommand::Compact { .. }
            | KvCommand::LeaseRevoke { .. }
            | KvCommand::LeaseKeepAlive { .. }
            | KvCommand::LeaseKeepAlives { .. }
            | KvCommand::LeaseExpire { .. } => false,
        }
    }
}

impl Txn {
    /// A txn of one request with no compares: how a lone put or delete is proposed.
    pub fn of(op: RequestOp) -> Txn {
        Txn {
            success: vec![op],
            ..Txn::default()
        }
    }

    /// The checks etcd makes before a txn goes near the store (v3rpc's checkTxnRequest and
    /// checkIntervals): at most `ops_max` compares or requests per branch, at every nesting
    /// level; no empty key; no value or lease given with `ignore_value` / `ignore_lease`; and no
    /// key written twice by the requests that can run together (a put twice, or a put inside a
    /// delete's range), though the two branches of a txn may each write it.
    pub fn check(&self, ops_max: usize) -> Result<(), KvError> {
        self.check_requests(ops_max)?;
        for branch in [&self.success, &self.failure] {
            let mut writes = Writes::default();
            writes.add_branch(branch)?;
            writes.check_disjoint()?;
        }
        Ok(())
    }

    fn check_requests(&self, ops_max: usize) -> Result<(), KvError> {
        let widest = self
            .compare
            .len()
            .max(self.success.len())
            .max(self.failure.len());
        if widest > ops_max {
            return Err(KvError::TooManyOps);
        }
        for op in self.success.iter().chain(&self.failure) {
            op.check(ops_max)?;
        }
        Ok(())
    }
}

impl RequestOp {
    /// etcd's per-request checks (checkRangeRequest, checkPutRequest, checkDeleteRequest).
    pub fn check(&self, ops_max: usize) -> Result<(), KvError> {
        match self {
            RequestOp::Range(r) if r.key.is_empty() => Err(KvError::EmptyKey),
            RequestOp::Put(p) if p.key.is_empty() => Err(KvError::EmptyKey),
            RequestOp::Put(p) if p.ignore_value && !p.value.is_empty() => {
                Err(KvError::ValueProvided)
            }
            RequestOp::Put(p) if p.ignore_lease && p.lease != 0 => Err(KvError::LeaseProvided),
            RequestOp::Delete(d) if d.key.is_empty() => Err(KvError::EmptyKey),
            RequestOp::Txn(t) => t.check_requests(ops_max),
            RequestOp::Range(_) | RequestOp::Put(_) | RequestOp::Delete(_) => Ok(()),
        }
    }
}

/// The keys the requests of one branch may write: each put's key at most once, and none inside a
/// delete's range (deletes may overlap each other).
#[derive(Default)]
struct Writes {
    puts: std::collections::BTreeSet<Bytes>,
    deletes: Vec<Span>,
}

impl Writes {
    fn add_branch(&mut self, ops: &[RequestOp]) -> Result<(), KvError> {
        for op in ops {
            match op {
                RequestOp::Put(p) => {
                    if !self.puts.insert(p.key.clone()) {
                        return Err(KvError::DuplicateKey);
                    }
                }
                RequestOp::Delete(d) => self.deletes.push(Span::new(&d.key, &d.range_end)),
                RequestOp::Txn(t) => {
                    // Only one of a nested txn's branches runs: each is checked on its own, and
                    // what either may write counts against the rest of this branch.
                    let mut either = Writes::default();
                    for branch in [&t.success, &t.failure] {
                        let mut one = Writes::default();
                        one.add_branch(branch)?;
                        one.check_disjoint()?;
                        either.puts.extend(one.puts);
                        either.deletes.extend(one.deletes);
                    }
                    for key in either.puts {
                        if !self.puts.insert(key) {
                            return Err(KvError::DuplicateKey);
                        }
                    }
                    self.deletes.extend(either.deletes);
                }
                RequestOp::Range(_) => {}
            }
        }
        Ok(())
    }

    fn check_disjoint(&self) -> Result<(), KvError> {
        let clash = self
            .puts
            .iter()
            .any(|key| self.deletes.iter().any(|span| span.contains(key)));
        if clash {
            return Err(KvError::DuplicateKey);
        }
        Ok(())
    }
}
