use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, Semaphore};

use super::*;

/// A leader stand-in: call number n answers n, once the test lets it (one permit per call);
/// every call's start is reported on `started`.
fn gated_fetch(gate: Arc<Semaphore>, started: mpsc::UnboundedSender<u64>) -> Fetch {
    let calls = Arc::new(AtomicU64::new(0));
    Arc::new(move || {
        let (gate, started, calls) = (gate.clone(), started.clone(), calls.clone());
        Box::pin(async move {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            let _ = started.send(n);
            gate.acquire()
                .await
                .map_err(|_| Status::internal("gate closed"))?
                .forget();
            Ok(n)
        })
    })
}

const LONG: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_lone_read_makes_one_call() {
    let gate = Arc::new(Semaphore::new(0));
    let (started, mut calls) = mpsc::unbounded_channel();
    let counters = ReadIndexCounters::default();
    let shared = SharedReadIndex::new(gated_fetch(gate.clone(), started), counters.clone());
    gate.add_permits(1);
    assert_eq!(shared.read_index(LONG).await.expect("answer"), 1);
    assert_eq!(calls.recv().await, Some(1));
    assert_eq!((counters.calls.get(), counters.reads.get()), (1, 1));
}

#[tokio::test]
async fn reads_that_arrive_during_a_call_wait_for_the_next_one_and_share_it() {
    let gate = Arc::new(Semaphore::new(0));
    let (started, mut calls) = mpsc::unbounded_channel();
    let counters = ReadIndexCounters::default();
    let shared = Arc::new(SharedReadIndex::new(
        gated_fetch(gate.clone(), started),
        counters.clone(),
    ));
    let read = |shared: &Arc<SharedReadIndex>| {
        let shared = shared.clone();
        tokio::spawn(async move { shared.read_index(LONG).await })
    };
    let first = read(&shared);
    // Call 1 is on the wire: reads made now must not get its answer.
    assert_eq!(calls.recv().await, Some(1));
    let later: Vec<_> = (0..5).map(|_| read(&shared)).collect();
    // Each read has queued once its task ran; yield until the five are waiting.
    while lock(&shared.queue).waiting.len() < 5 {
        tokio::task::yield_now().await;
    }
    gate.add_permits(1);
    assert_eq!(first.await.expect("task").expect("answer"), 1);
    // One call for the five, started after they arrived.
    assert_eq!(calls.recv().await, Some(2));
    gate.add_permits(1);
    for read in later {
        assert_eq!(read.await.expect("task").expect("answer"), 2);
    }
    assert_eq!((counters.calls.get(), counters.reads.get()), (2, 6));
    // The task ended with no read waiting; the next read starts a new one.
    gate.add_permits(1);
    assert_eq!(shared.read_index(LONG).await.expect("answer"), 3);
}

#[tokio::test]
async fn a_refusal_reaches_every_read_of_the_call() {
    let refusing: Fetch =
        Arc::new(|| Box::pin(async { Err(Status::unavailable("not the leader any more")) }));
    let shared = Arc::new(SharedReadIndex::new(refusing, ReadIndexCounters::default()));
    let reads: Vec<_> = (0..4)
        .map(|_| {
            let shared = shared.clone();
            tokio::spawn(async move { shared.read_index(LONG).await })
        })
        .collect();
    for read in reads {
        let refused = read.await.expect("task").expect_err("refused");
        assert_eq!(refused.code(), tonic::Code::Unavailable);
        assert_eq!(refused.message(), "not the leader any more");
    }
}

#[tokio::test]
async fn a_read_gives_up_after_its_budget_and_the_next_call_serves_later_reads() {
    let gate = Arc::new(Semaphore::new(0));
    let (started, mut calls) = mpsc::unbounded_channel();
    let shared = SharedReadIndex::new(gated_fetch(gate.clone(), started), Default::default());
    let refused = shared
        .read_index(Duration::from_millis(50))
        .await
        .expect_err("no answer in time");
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert!(
        refused.message().contains("no answer within 50 ms"),
        "{}",
        refused.message()
    );
    assert_eq!(calls.recv().await, Some(1));
    // Call 1 answers nobody; a read made now waits for call 2.
    gate.add_permits(2);
    assert_eq!(shared.read_index(LONG).await.expect("answer"), 2);
}

#[tokio::test]
async fn a_call_that_panics_answers_its_reads_and_the_next_read_starts_again() {
    let calls = Arc::new(AtomicU64::new(0));
    let fetch: Fetch = Arc::new(move || {
        let calls = calls.clone();
        Box::pin(async move {
            match calls.fetch_add(1, Ordering::SeqCst) {
                #[allow(clippy::panic)]
                0 => panic!("a call that panics (test)"),
                n => Ok(n),
            }
        })
    });
    let shared = SharedReadIndex::new(fetch, Default::default());
    let cut = shared.read_index(LONG).await.expect_err("cut off");
    assert!(cut.message().contains("cut off"), "{}", cut.message());
    assert_eq!(shared.read_index(LONG).await.expect("answer"), 1);
}
