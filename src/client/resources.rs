//! The `Resources` service calls of `Client`: create, get, list, update, delete, txn, count and
//! watch of objects, each with its `*_fenced` form. Writes are repeated at another node only when
//! the request provably never left this process; reads fail over until the deadline.

use futures::StreamExt;
use serde_json::Value;
use tonic::{Request, Status};

use super::types::{txn_op_to_proto, watch_event_from_proto};
use super::{
    parse_object, request, Client, Consistency, Fence, ListOptions, ListPage, Retry, Transport,
    TxnOp, TxnResult, WatchOptions, WatchStream, MAX_REPLY_BYTES,
};
use crate::proto::v1 as pb;
use crate::proto::v1::resources_client::ResourcesClient;

impl Client {
    /// Creates an object; returns it as stored (uid, resourceVersion, ... filled in).
    pub async fn create(&self, object: &Value) -> Result<Value, Status> {
        self.create_fenced(object, None).await
    }

    /// `create`, applied only while `fence` holds (see the module docs).
    pub async fn create_fenced(
        &self,
        object: &Value,
        fence: Option<Fence>,
    ) -> Result<Value, Status> {
        let msg = pb::CreateRequest {
            object_json: object.to_string(),
            fence,
        };
        let reply = self
            .call(Retry::Write, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).create(request(msg, t)).await }
            })
            .await?;
        parse_object(&reply.object_json)
    }

    /// Gets one object; `NotFound` if absent.
    pub async fn get(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        consistency: Consistency,
    ) -> Result<Value, Status> {
        let msg = pb::GetRequest {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            consistency: consistency as i32,
        };
        let reply = self
            .call(Retry::Read, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).get(request(msg, t)).await }
            })
            .await?;
        parse_object(&reply.object_json)
    }

    /// One linearizable page of objects of `kind` (`namespace` empty: all namespaces).
    pub async fn list(
        &self,
        kind: &str,
        namespace: &str,
        selector: &str,
        limit: u32,
        continue_token: &str,
    ) -> Result<ListPage, Status> {
        let opts = ListOptions {
            namespace: namespace.to_string(),
            label_selector: selector.to_string(),
            limit,
            continue_token: continue_token.to_string(),
            consistency: Consistency::Linearizable,
        };
        self.list_with(kind, &opts).await
    }

    /// One page of objects of `kind`, as `opts` says.
    pub async fn list_with(&self, kind: &str, opts: &ListOptions) -> Result<ListPage, Status> {
        let msg = pb::ListRequest {
            kind: kind.to_string(),
            namespace: opts.namespace.clone(),
            label_selector: opts.label_selector.clone(),
            limit: opts.limit,
            continue_token: opts.continue_token.clone(),
            consistency: opts.consistency as i32,
        };
        let reply = self
            .call(Retry::Read, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).list(request(msg, t)).await }
            })
            .await?;
        let items = reply
            .objects_json
            .iter()
            .map(|j| parse_object(j))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ListPage {
            items,
            revision: reply.revision,
            continue_token: reply.continue_token,
        })
    }

    /// Every linearizable object of `kind` matching `selector`, following continue tokens.
    pub async fn list_all(
        &self,
        kind: &str,
        namespace: &str,
        selector: &str,
    ) -> Result<ListPage, Status> {
        let opts = ListOptions {
            namespace: namespace.to_string(),
            label_selector: selector.to_string(),
            ..ListOptions::default()
        };
        self.list_all_with(kind, &opts).await
    }

    /// Every object `opts` selects, following continue tokens from `opts.continue_token`;
    /// `opts.limit` is the page size. The revision is the first page's.
    pub async fn list_all_with(&self, kind: &str, opts: &ListOptions) -> Result<ListPage, Status> {
        let mut opts = opts.clone();
        let mut all = self.list_with(kind, &opts).await?;
        while !all.continue_token.is_empty() {
            opts.continue_token = std::mem::take(&mut all.continue_token);
            let page = self.list_with(kind, &opts).await?;
            all.items.extend(page.items);
            all.continue_token = page.continue_token;
        }
        Ok(all)
    }

    /// Replaces spec, labels, annotations and apiVersion (status is kept). `expected_revision`
    /// 0 = unconditional; otherwise `Aborted` unless the stored resourceVersion equals it.
    pub async fn update(&self, object: &Value, expected_revision: u64) -> Result<Value, Status> {
        self.update_fenced(object, expected_revision, None).await
    }

    /// `update`, applied only while `fence` holds.
    pub async fn update_fenced(
        &self,
        object: &Value,
        expected_revision: u64,
        fence: Option<Fence>,
    ) -> Result<Value, Status> {
        let msg = pb::UpdateRequest {
            object_json: object.to_string(),
            expected_revision,
            fence,
        };
        let reply = self
            .call(Retry::Write, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).update(request(msg, t)).await }
            })
            .await?;
        parse_object(&reply.object_json)
    }

    /// Replaces status only, with the same precondition as `update`.
    pub async fn update_status(
        &self,
        object: &Value,
        expected_revision: u64,
    ) -> Result<Value, Status> {
        self.update_status_fenced(object, expected_revision, None)
            .await
    }

    /// `update_status`, applied only while `fence` holds.
    pub async fn update_status_fenced(
        &self,
        object: &Value,
        expected_revision: u64,
        fence: Option<Fence>,
    ) -> Result<Value, Status> {
        let msg = pb::UpdateRequest {
            object_json: object.to_string(),
            expected_revision,
            fence,
        };
        let reply = self
            .call(Retry::Write, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).update_status(request(msg, t)).await }
            })
            .await?;
        parse_object(&reply.object_json)
    }

    /// Deletes an object; returns it as it was, stamped with the deletion revision.
    pub async fn delete(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        expected_revision: u64,
    ) -> Result<Value, Status> {
        self.delete_fenced(kind, namespace, name, expected_revision, None)
            .await
    }

    /// `delete`, applied only while `fence` holds.
    pub async fn delete_fenced(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        expected_revision: u64,
        fence: Option<Fence>,
    ) -> Result<Value, Status> {
        let msg = pb::DeleteRequest {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            expected_revision,
            fence,
        };
        let reply = self
            .call(Retry::Write, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).delete(request(msg, t)).await }
            })
            .await?;
        parse_object(&reply.object_json)
    }

    /// Applies `ops` atomically: all preconditions hold and everything changes, or nothing does.
    pub async fn txn(&self, ops: Vec<TxnOp>) -> Result<TxnResult, Status> {
        self.txn_fenced(ops, None).await
    }

    /// `txn`, applied only while `fence` holds; one fence guards the whole transaction.
    pub async fn txn_fenced(
        &self,
        ops: Vec<TxnOp>,
        fence: Option<Fence>,
    ) -> Result<TxnResult, Status> {
        let msg = pb::TxnRequest {
            ops: ops.into_iter().map(txn_op_to_proto).collect(),
            fence,
        };
        let reply = self
            .call(Retry::Write, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).txn(request(msg, t)).await }
            })
            .await?;
        let objects = reply
            .objects_json
            .iter()
            .map(|j| parse_object(j))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TxnResult {
            objects,
            revision: reply.revision,
        })
    }

    /// Objects of `kind` (in `namespace`; empty: all) matching `selector`, counted by `by`
    /// (`label:KEY` or `status:PATH`).
    pub async fn count(
        &self,
        kind: &str,
        namespace: &str,
        selector: &str,
        by: &str,
        consistency: Consistency,
    ) -> Result<pb::CountReply, Status> {
        let msg = pb::CountRequest {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            label_selector: selector.to_string(),
            by: by.to_string(),
            consistency: consistency as i32,
        };
        self.call(Retry::Read, |ch, t| {
            let msg = msg.clone();
            async move { resources(ch).count(request(msg, t)).await }
        })
        .await
    }

    /// Watches objects of `kind` from `start_revision` (0: from now on).
    pub async fn watch(
        &self,
        kind: &str,
        namespace: &str,
        selector: &str,
        start_revision: u64,
    ) -> Result<WatchStream, Status> {
        let opts = WatchOptions {
            namespace: namespace.to_string(),
            label_selector: selector.to_string(),
            start_revision,
            bookmark_interval_ms: 0,
        };
        self.watch_with(kind, &opts).await
    }

    /// Watches as `opts` says. Setting up the stream fails over like a read; once it runs, the
    /// stream ends with the error that cut it off (resume from the last revision seen + 1).
    pub async fn watch_with(&self, kind: &str, opts: &WatchOptions) -> Result<WatchStream, Status> {
        let msg = pb::WatchRequest {
            kind: kind.to_string(),
            namespace: opts.namespace.clone(),
            label_selector: opts.label_selector.clone(),
            start_revision: opts.start_revision,
            bookmark_interval_ms: opts.bookmark_interval_ms,
        };
        // No grpc-timeout on the request: the deadline covers only the set-up, not the stream.
        let stream = self
            .call(Retry::Read, |ch, _t| {
                let msg = msg.clone();
                async move { resources(ch).watch(Request::new(msg)).await }
            })
            .await?;
        Ok(Box::pin(
            stream.map(|item| item.and_then(watch_event_from_proto)),
        ))
    }
}

fn resources(channel: Transport) -> ResourcesClient<Transport> {
    ResourcesClient::new(channel).max_decoding_message_size(MAX_REPLY_BYTES)
}
