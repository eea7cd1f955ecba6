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
    /// `opts.limit` is the page size. The server reads every page at the first page's revision,
    /// the one returned, so this is the list as of that revision.
    ///
    /// A continue token expires when the node's history no longer reaches back to its revision
    /// (many writes meanwhile, or the node restarted: OutOfRange REVISION_COMPACTED, see
    /// `continue_expired`). Then the whole list starts again from its first page, at most
    /// `LIST_RESTARTS_MAX` times, after which the expiry is returned. A list that starts from
    /// the caller's own `opts.continue_token` is not started again (the pages before it are the
    /// caller's): its expiry is returned at once.
    pub async fn list_all_with(&self, kind: &str, opts: &ListOptions) -> Result<ListPage, Status> {
        follow_pages(&opts.continue_token, |token| {
            let opts = ListOptions {
                continue_token: token,
                ..opts.clone()
            };
            async move { self.list_with(kind, &opts).await }
        })
        .await
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

/// How many times `list_all_with` starts a list again after its continue token expired.
pub const LIST_RESTARTS_MAX: usize = 3;

/// Whether `status` says a list's continue token expired: the revision of its first page is
/// older than the history the node keeps (OutOfRange, REVISION_COMPACTED). Start the list
/// again; or, accepting a list whose pages were read at different revisions, go on with the
/// token in its ErrorInfo metadata `inconsistent_continue_token`.
pub fn continue_expired(status: &Status) -> bool {
    status.code() == tonic::Code::OutOfRange
        && super::reason(status) == Some(pb::ErrorReason::RevisionCompacted)
}

/// `list_all_with`'s loop: `page(token)` fetches one page; the pages from `first` on are
/// followed, and the whole list is fetched again from the first page when a token expires
/// (see `list_all_with`).
async fn follow_pages<F, Fut>(first: &str, mut page: F) -> Result<ListPage, Status>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<ListPage, Status>>,
{
    let mut restarts = 0;
    'list: loop {
        let mut all = page(first.to_string()).await?;
        while !all.continue_token.is_empty() {
            match page(std::mem::take(&mut all.continue_token)).await {
                Ok(next) => {
                    all.items.extend(next.items);
                    all.continue_token = next.continue_token;
                }
                Err(status)
                    if first.is_empty()
                        && restarts < LIST_RESTARTS_MAX
                        && continue_expired(&status) =>
                {
                    restarts += 1;
                    tracing::debug!(restarts, "a list's continue token expired; listing again");
                    continue 'list;
                }
                Err(status) => return Err(status),
            }
        }
        return Ok(all);
    }
}

fn resources(channel: Transport) -> ResourcesClient<Transport> {
    ResourcesClient::new(channel).max_decoding_message_size(MAX_REPLY_BYTES)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use serde_json::json;

    use super::*;

    /// An expiry as the server sends it (`server::errors::continue_expired`).
    fn expired() -> Status {
        crate::server::errors::continue_expired(9, 7, "t", "continue_token: expired")
    }

    fn page(names: &[&str], token: &str) -> ListPage {
        ListPage {
            items: names.iter().map(|n| json!({ "name": n })).collect(),
            revision: 5,
            continue_token: token.to_string(),
        }
    }

    /// Runs `follow_pages` from `first` over pages that `answer(call, token)` gives; returns
    /// its result and the tokens asked for.
    async fn follow(
        first: &str,
        answer: impl Fn(usize, &str) -> Result<ListPage, Status>,
    ) -> (Result<ListPage, Status>, Vec<String>) {
        let asked = RefCell::new(Vec::new());
        let result = follow_pages(first, |token| {
            let call = asked.borrow().len();
            let reply = answer(call, &token);
            asked.borrow_mut().push(token);
            async move { reply }
        })
        .await;
        (result, asked.into_inner())
    }

    /// Pages "" -> [a] "1" -> [b] "2" -> [c]; the second call (the first "1") expires.
    fn expires_once(call: usize, token: &str) -> Result<ListPage, Status> {
        match (call, token) {
            (1, _) => Err(expired()),
            (_, "") => Ok(page(&["a"], "1")),
            (_, "1") => Ok(page(&["b"], "2")),
            (_, "2") => Ok(page(&["c"], "")),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_expired_token_starts_the_list_again() {
        let (result, asked) = follow("", expires_once).await;
        let all = result.expect("the second run completes");
        assert_eq!(
            all.items,
            [
                json!({"name": "a"}),
                json!({"name": "b"}),
                json!({"name": "c"})
            ]
        );
        assert_eq!(all.revision, 5);
        assert!(all.continue_token.is_empty());
        assert_eq!(asked, ["", "1", "", "1", "2"]);
    }

    #[tokio::test]
    async fn restarts_are_bounded() {
        let always = |_: usize, token: &str| match token {
            "" => Ok(page(&["a"], "1")),
            _ => Err(expired()),
        };
        let (result, asked) = follow("", always).await;
        let err = result.expect_err("expires every time");
        assert!(continue_expired(&err), "{err:?}");
        assert_eq!(asked.len(), 2 * (LIST_RESTARTS_MAX + 1));
    }

    #[tokio::test]
    async fn a_list_from_the_callers_token_is_not_started_again() {
        let (result, asked) = follow("1", |_, token| match token {
            "1" => Ok(page(&["b"], "2")),
            _ => Err(expired()),
        })
        .await;
        assert!(continue_expired(&result.expect_err("expired")));
        assert_eq!(asked, ["1", "2"]);
    }

    #[tokio::test]
    async fn other_errors_are_returned_at_once() {
        let (result, asked) = follow("", |_, token| match token {
            "" => Ok(page(&["a"], "1")),
            _ => Err(Status::out_of_range("no details: not an expiry")),
        })
        .await;
        assert!(!continue_expired(&result.expect_err("fails")));
        assert_eq!(asked, ["", "1"]);
    }
}
