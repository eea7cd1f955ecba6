//! etcd's Watch on a 3-node steward: real etcdctl, and etcd's wire types for what clients
//! rely on (watch ids, created before events, filters, prev_kv, cancel, RequestProgress never
//! ahead of events, progress_notify, compacted starts, a slow stream catching up without a gap).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use steward::proto::etcd::kv_client::KvClient;
use steward::proto::etcd::watch_client::WatchClient;
use steward::proto::etcd::watch_create_request::FilterType;
use steward::proto::etcd::watch_request::RequestUnion;
use steward::proto::etcd::{
    CompactionRequest, DeleteRangeRequest, PutRequest, WatchCancelRequest, WatchCreateRequest,
    WatchProgressRequest, WatchRequest, WatchResponse,
};
use steward::proto::mvccpb::event::EventType;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use crate::harness::{have_etcdctl, TestCluster};
use crate::observability::{http_get, sample};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

struct Stream {
    tx: mpsc::Sender<WatchRequest>,
    rx: Streaming<WatchResponse>,
}

impl Stream {
    async fn open(cluster: &TestCluster, id: u64) -> Stream {
        let (tx, rx) = mpsc::channel(16);
        let mut client = WatchClient::new(cluster.channel(id).await);
        let rx = client
            .watch(ReceiverStream::new(rx))
            .await
            .expect("watch stream")
            .into_inner();
        Stream { tx, rx }
    }

    async fn send(&self, request: RequestUnion) {
        self.tx
            .send(WatchRequest {
                request_union: Some(request),
            })
            .await
            .expect("send");
    }

    async fn create(&self, create: WatchCreateRequest) {
        self.send(RequestUnion::CreateRequest(create)).await;
    }

    async fn next(&mut self) -> WatchResponse {
        tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("a watch response within 10 s")
            .expect("stream ok")
            .expect("stream open")
    }
}

async fn put(kv: &mut KvClient<tonic::transport::Channel>, key: &str, value: &str) -> i64 {
    kv.put(PutRequest {
        key: b(key),
        value: b(value),
        ..PutRequest::default()
    })
    .await
    .expect("put")
    .into_inner()
    .header
    .expect("header")
    .revision
}

/// (type, key, value, mod_revision, prev value) of an event.
type Ev = (i32, String, String, i64, Option<String>);

/// Each event of a response.
fn events(r: &WatchResponse) -> Vec<Ev> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    r.events
        .iter()
        .map(|e| {
            let kv = e.kv.as_ref().expect("kv");
            (
                e.r#type,
                text(&kv.key),
                text(&kv.value),
                kv.mod_revision,
                e.prev_kv.as_ref().map(|p| text(&p.value)),
            )
        })
        .collect()
}

const PUT: i32 = EventType::Put as i32;
const DELETE: i32 = EventType::Delete as i32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_watches_share_a_stream_replay_filter_cancel_and_report_progress() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let mut kv = KvClient::new(cluster.channel(3).await);
    // The first etcd write is at revision 2 (1 is the empty store's, as in etcd).
    put(&mut kv, "a", "1").await; // 2
    put(&mut kv, "b", "1").await; // 3
    put(&mut kv, "a", "2").await; // 4

    // A linearizable read through node 2 first, so its store (which its watches are served
    // from, as etcd's are) holds the three puts, and the replay comes in one response.
    KvClient::new(cluster.channel(2).await)
        .range(steward::proto::etcd::RangeRequest {
            key: b("a"),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut s = Stream::open(&cluster, 2).await;
    // The first watch of a stream gets id 0; created comes before its replay.
    s.create(WatchCreateRequest {
        key: b("a"),
        start_revision: 1,
        prev_kv: true,
        ..WatchCreateRequest::default()
    })
    .await;
    let created = s.next().await;
    assert!(created.created && created.events.is_empty(), "{created:?}");
    assert_eq!(created.watch_id, 0);
    let replay = s.next().await;
    assert_eq!(
        events(&replay),
        [
            (PUT, "a".into(), "1".into(), 2, None),
            (PUT, "a".into(), "2".into(), 4, Some("1".into())),
        ]
    );
    // The client's own id; the same again is refused as etcd refuses it.
    let every_delete = WatchCreateRequest {
        key: b("\0"),
        range_end: b("\0"),
        filters: vec![FilterType::Noput as i32],
        watch_id: 7,
        ..WatchCreateRequest::default()
    };
    s.create(every_delete.clone()).await;
    let created = s.next().await;
    assert!(created.created && !created.canceled && created.watch_id == 7);
    s.create(every_delete).await;
    let duplicate = s.next().await;
    assert!(duplicate.created && duplicate.canceled, "{duplicate:?}");
    assert_eq!(
        duplicate.cancel_reason,
        "mvcc: duplicate watch ID provided on the WatchStream"
    );
    // An id of the stream's choosing skips the ones in use.
    s.create(WatchCreateRequest {
        key: b("b"),
        ..WatchCreateRequest::default()
    })
    .await;
    let created = s.next().await;
    assert_eq!((created.created, created.watch_id), (true, 1));

    // Live: a delete through another node reaches watch 0 (with prev_kv) and watch 7; a put of
    // b reaches watch 1 and not watch 7 (NOPUT).
    let mut kv1 = KvClient::new(cluster.channel(1).await);
    kv1.delete_range(DeleteRangeRequest {
        key: b("a"),
        ..DeleteRangeRequest::default()
    })
    .await
    .unwrap(); // 5
    let last = put(&mut kv1, "b", "2").await; // 6
    assert_eq!(last, 6);
    let mut got: BTreeMap<i64, Vec<_>> = BTreeMap::new();
    while got.values().map(Vec::len).sum::<usize>() < 3 {
        let r = s.next().await;
        got.entry(r.watch_id).or_default().extend(events(&r));
    }
    assert_eq!(
        got,
        BTreeMap::from([
            (
                0,
                vec![(DELETE, "a".into(), String::new(), 5, Some("2".into()))]
            ),
            (1, vec![(PUT, "b".into(), "2".into(), 6, None)]),
            (7, vec![(DELETE, "a".into(), String::new(), 5, None)]),
        ])
    );

    // Cancel watch 0; its key's next change is not sent to it, and RequestProgress (watch id
    // -1) comes after every event of the stream up to its revision.
    s.send(RequestUnion::CancelRequest(WatchCancelRequest {
        watch_id: 0,
    }))
    .await;
    let cancelled = s.next().await;
    assert!(
        cancelled.canceled && cancelled.watch_id == 0,
        "{cancelled:?}"
    );
    put(&mut kv1, "a", "3").await; // 7: no watch left on a puts
    let last = put(&mut kv1, "b", "3").await; // 8: watch 1
                                              // The watch's event arrives first; only then the stream's progress notice.
    let b3 = s.next().await;
    assert_eq!((b3.watch_id, events(&b3)[0].3), (1, last));
    s.send(RequestUnion::ProgressRequest(WatchProgressRequest {}))
        .await;
    let progress = s.next().await;
    assert_eq!(progress.watch_id, -1, "{progress:?}");
    assert!(progress.events.is_empty());
    assert_eq!(progress.header.unwrap().revision, last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_watch_below_the_compaction_is_cancelled_with_it_and_one_at_it_replays() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let mut kv = KvClient::new(cluster.channel(1).await);
    // Revisions 2 to 6 (the first etcd write is at 2).
    for i in 1..=5 {
        put(&mut kv, "k", &i.to_string()).await;
    }
    kv.compact(CompactionRequest {
        revision: 3,
        physical: true,
    })
    .await
    .unwrap();
    // A watch is served from the node's own store, as etcd's are: a linearizable read through
    // node 3 first, so it has applied the compaction.
    let mut kv3 = KvClient::new(cluster.channel(3).await);
    kv3.range(steward::proto::etcd::RangeRequest {
        key: b("k"),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut s = Stream::open(&cluster, 3).await;
    s.create(WatchCreateRequest {
        key: b("k"),
        start_revision: 2,
        ..WatchCreateRequest::default()
    })
    .await;
    assert!(s.next().await.created);
    let cancelled = s.next().await;
    assert!(cancelled.canceled, "{cancelled:?}");
    assert_eq!(cancelled.compact_revision, 3);
    s.create(WatchCreateRequest {
        key: b("k"),
        start_revision: 3,
        ..WatchCreateRequest::default()
    })
    .await;
    assert!(s.next().await.created);
    let replay = s.next().await;
    let revisions: Vec<i64> = events(&replay).iter().map(|e| e.3).collect();
    assert_eq!(revisions, [3, 4, 5, 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_etcd_watch_gets_progress_notices_at_the_configured_interval() {
    let cluster = TestCluster::start_edited(3, |c| c.etcd.progress_notify_interval_ms = 300).await;
    cluster.wait_leader().await;
    let mut kv = KvClient::new(cluster.channel(1).await);
    let at = put(&mut kv, "x", "1").await;
    let mut s = Stream::open(&cluster, 2).await;
    s.create(WatchCreateRequest {
        key: b("quiet"),
        progress_notify: true,
        ..WatchCreateRequest::default()
    })
    .await;
    assert!(s.next().await.created);
    let started = Instant::now();
    let notice = s.next().await;
    assert!(
        notice.events.is_empty() && notice.watch_id == 0,
        "{notice:?}"
    );
    assert!(notice.header.unwrap().revision >= at);
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A client that stops reading while 200 large puts land: its stream falls far more than
/// `limits.watch_buffer` behind, is detached, and catches up from the store; it then reads
/// every event, each revision once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_etcd_watch_stream_catches_up_from_the_store_without_a_gap() {
    let cluster = TestCluster::start_edited(3, |c| c.limits.watch_buffer = 8).await;
    cluster.wait_leader().await;
    let mut kv = KvClient::new(cluster.channel(1).await);
    let mut s = Stream::open(&cluster, 2).await;
    s.create(WatchCreateRequest {
        key: b("slow/"),
        range_end: b("slow0"),
        ..WatchCreateRequest::default()
    })
    .await;
    assert!(s.next().await.created);
    // 6 MiB in all: more than the client's HTTP/2 window (2 MiB) and the node's response queue
    // hold, so the node's side backs up.
    let value = "v".repeat(32 * 1024);
    let mut first = 0;
    let puts = 200;
    for i in 0..puts {
        let rev = put(&mut kv, &format!("slow/{}", i % 7), &value).await;
        if i == 0 {
            first = rev;
        }
    }
    let mut seen = Vec::new();
    while seen.len() < puts {
        seen.extend(events(&s.next().await).iter().map(|e| e.3));
    }
    let want: Vec<i64> = (first..first + puts as i64).collect();
    assert_eq!(seen, want);
    let (_, text) = http_get(&cluster.metrics_addr(2), "/metrics").await;
    let catchups = sample(&text, "steward_etcd_watch_catchups_total").unwrap_or(0.0);
    assert!(catchups >= 1.0, "the stream never fell behind:\n{text}");
}

/// `etcdctl watch` with a prefix, a start revision and prev-kv, through a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_watch_replays_from_a_revision_then_follows() {
    if !have_etcdctl("etcdctl_watch_replays_from_a_revision_then_follows") {
        return;
    }
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let mut kv = KvClient::new(cluster.channel(1).await);
    put(&mut kv, "w/a", "1").await; // 1
    put(&mut kv, "w/a", "2").await; // 2
    let mut child = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", cluster.client_addr(3)))
        .args(["watch", "w/", "--prefix", "--rev=1", "--prev-kv"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcdctl watch");
    let stdout = child.stdout.take().expect("stdout");
    let (lines_tx, mut lines) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut read = Vec::new();
    let mut until = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while read.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "etcdctl watch printed only {read:?}");
            match lines.try_recv() {
                Ok(line) => read.push(line),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        read.clone()
    };
    // The replay: PUT, key, value; the second with its previous value.
    assert_eq!(until(7), ["PUT", "w/a", "1", "PUT", "w/a", "1", "w/a"]);
    put(&mut kv, "w/b", "3").await;
    let mut kv2 = KvClient::new(cluster.channel(2).await);
    kv2.delete_range(DeleteRangeRequest {
        key: b("w/a"),
        ..DeleteRangeRequest::default()
    })
    .await
    .unwrap();
    let all = until(16);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        all[7..],
        ["2", "PUT", "w/b", "3", "DELETE", "w/a", "2", "w/a", ""][..]
    );
}
