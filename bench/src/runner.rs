//! Runs a [`Plan`] against a cluster: dials the connections (one tonic channel, so one HTTP/2
//! connection, each), lets every client prepare, starts them all at once, stops them by time or
//! count, and merges what they recorded into a [`Report`]. Called by `main` only.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tonic::transport::{Channel, Endpoint};

use crate::args::{Plan, Stop, Target, Workload};
use crate::names::RunId;
use crate::report::{Recorder, Report, RunInfo, Warmup};
use crate::servers::{Probe, ServerUsage};
use crate::{dispatch, etcd_ops, etcd_watch, steward_ops, watch};

/// How long dialling one connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a workload driver hands back: every client's record merged, the measured time from the
/// start signal until the last client finished, and (watch) the acknowledged writes.
pub struct Measured {
    pub all: Recorder,
    pub elapsed: Duration,
    pub writes: Option<u64>,
    /// `--server-pids`: what the servers used while the clients ran.
    pub servers: Option<ServerUsage>,
    /// `--warmup`: what the clients did before the clock started, and for how long.
    pub warmup: Option<(Recorder, Duration)>,
}

pub async fn run(plan: &Plan) -> anyhow::Result<Report> {
    let run = RunId::new();
    let channels = connect(plan).await?;
    let probe = Probe::new(plan.server_pids.clone());
    let measured = match (plan.target, plan.workload) {
        (Target::Steward, Workload::Watch) => watch::run(plan, &run, &channels, &probe).await?,
        (Target::Steward, Workload::Dispatch) => {
            dispatch::run(plan, &run, &channels, &probe).await?
        }
        (Target::Steward, _) => steward_ops::run(plan, &run, &channels, &probe).await?,
        (Target::Etcd, Workload::Watch) => etcd_watch::run(plan, &run, &channels, &probe).await?,
        (Target::Etcd, _) => etcd_ops::run(plan, &run, &channels, &probe).await?,
    };
    let info = RunInfo {
        workload: plan.workload.name().to_string(),
        target: plan.target.name().to_string(),
        endpoints: plan.endpoints.clone(),
        clients: plan.clients,
        conns: plan.conns,
        value_size: plan.value_size,
    };
    let mut report = Report::new(info, &measured.all, measured.elapsed, measured.writes);
    report.servers = measured.servers;
    report.warmup = measured
        .warmup
        .map(|(rec, elapsed)| Warmup::new(&rec, elapsed));
    Ok(report)
}

/// Dials every connection before the clock starts, so a dead endpoint fails the run at once.
async fn connect(plan: &Plan) -> anyhow::Result<Vec<Channel>> {
    let dials = (0..plan.conns).map(|conn| {
        let ep = plan.endpoint_of_conn(conn).to_string();
        async move {
            Endpoint::from_shared(ep.clone())
                .with_context(|| format!("endpoint {ep}"))?
                .connect_timeout(CONNECT_TIMEOUT)
                .tcp_nodelay(true)
                .connect()
                .await
                .with_context(|| format!("connect to {ep}"))
        }
    });
    futures::future::try_join_all(dials).await
}

/// One client of a request/response workload, on its own connection handles and state.
pub trait Worker: Send + 'static {
    /// Untimed set-up (e.g. the object this client will read), before the common start.
    fn prepare(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// One timed operation; `Err` is the report's error code (a gRPC code name, `WrongResult`).
    fn step(&mut self) -> impl Future<Output = Result<(), String>> + Send;
}

/// Lets every worker prepare, then (with `--warmup`) lets them all repeat their operation for
/// the warm-up, unmeasured, and waits until each has finished its last warm-up operation; then
/// starts them all at once (the clock starts here), repeats their operation until the plan's
/// stop, and merges what they recorded. A worker that fails to prepare fails the run with its
/// error.
pub async fn drive<W: Worker>(
    plan: &Plan,
    workers: Vec<W>,
    probe: &Probe,
) -> anyhow::Result<Measured> {
    let n = workers.len();
    let warms = plan.warmup.is_some();
    let (start_tx, start_rx) = tokio::sync::watch::channel::<Option<Until>>(None);
    let (warm_tx, warm_rx) = tokio::sync::watch::channel::<Option<Instant>>(None);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<anyhow::Result<()>>(n.max(1));
    let (warmed_tx, mut warmed_rx) = tokio::sync::mpsc::channel::<()>(n.max(1));
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|mut worker| {
            let (ready_tx, mut start_rx) = (ready_tx.clone(), start_rx.clone());
            let (warmed_tx, mut warm_rx) = (warmed_tx.clone(), warm_rx.clone());
            tokio::spawn(async move {
                let (mut warm, mut rec) = (Recorder::default(), Recorder::default());
                let prepared = worker.prepare().await;
                let failed = prepared.is_err();
                let _ = ready_tx.send(prepared).await;
                drop(ready_tx);
                if failed {
                    return (warm, rec);
                }
                if warms {
                    // Err: the run was called off (another worker failed to prepare).
                    let Ok(end) = warm_rx.wait_for(Option::is_some).await.map(|e| *e) else {
                        return (warm, rec);
                    };
                    while end.is_some_and(|end| Instant::now() < end) {
                        let t = Instant::now();
                        match worker.step().await {
                            Ok(()) => warm.ok(t.elapsed()),
                            Err(code) => warm.error(&code),
                        }
                    }
                    let _ = warmed_tx.send(()).await;
                }
                // Dropped now, not at the end: if a client dies in its warm-up, the driver's
                // count of the others then ends instead of waiting for the run's end.
                drop(warmed_tx);
                let Ok(until) = start_rx.wait_for(Option::is_some).await.map(|u| u.clone()) else {
                    return (warm, rec);
                };
                let Some(until) = until else {
                    return (warm, rec);
                };
                while until.more() {
                    let t = Instant::now();
                    match worker.step().await {
                        Ok(()) => rec.ok(t.elapsed()),
                        Err(code) => rec.error(&code),
                    }
                }
                (warm, rec)
            })
        })
        .collect();
    drop((ready_tx, warmed_tx));
    for _ in 0..n {
        match ready_rx.recv().await {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(e),
            None => anyhow::bail!("a client ended while preparing"),
        }
    }
    let warmup = match plan.warmup {
        Some(d) => {
            let begin = Instant::now();
            warm_tx.send_replace(Some(begin + d));
            for _ in 0..n {
                warmed_rx
                    .recv()
                    .await
                    .context("a client ended in its warm-up")?;
            }
            Some(begin.elapsed())
        }
        None => None,
    };
    probe.start()?;
    let start = Instant::now();
    start_tx.send_replace(Some(Until::new(plan.stop, start)));
    let (mut warm, mut all) = (Recorder::default(), Recorder::default());
    for t in tasks {
        let (w, r) = t.await.context("a client task panicked")?;
        warm.merge(&w);
        all.merge(&r);
    }
    let elapsed = start.elapsed();
    Ok(Measured {
        all,
        elapsed,
        writes: None,
        servers: probe.finish()?,
        warmup: warmup.map(|elapsed| (warm, elapsed)),
    })
}

/// When a client starts no more operations: shared by all clients of a run.
#[derive(Clone)]
pub enum Until {
    Deadline(Instant),
    /// Operations started so far, and the total.
    Count(Arc<AtomicU64>, u64),
}

impl Until {
    pub fn new(stop: Stop, start: Instant) -> Until {
        match stop {
            Stop::After(d) => Until::Deadline(start + d),
            Stop::Total(n) => Until::Count(Arc::new(AtomicU64::new(0)), n),
        }
    }

    /// True if the caller may start one more operation (and, by count, claims it).
    pub fn more(&self) -> bool {
        match self {
            Until::Deadline(d) => Instant::now() < *d,
            Until::Count(started, total) => started.fetch_add(1, Ordering::Relaxed) < *total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Output, Target};

    /// Counts its steps in a shared counter; panics at step `panic_at` if given.
    struct Counting {
        steps: Arc<AtomicU64>,
        panic_at: Option<u64>,
    }

    impl Worker for Counting {
        async fn prepare(&mut self) -> anyhow::Result<()> {
            Ok(())
        }

        async fn step(&mut self) -> Result<(), String> {
            let n = self.steps.fetch_add(1, Ordering::Relaxed) + 1;
            assert_ne!(Some(n), self.panic_at, "step {n}");
            tokio::task::yield_now().await;
            Ok(())
        }
    }

    fn plan(stop: Stop, warmup: Option<Duration>) -> Plan {
        Plan {
            workload: Workload::Get,
            target: Target::Steward,
            endpoints: vec!["http://127.0.0.1:1".into()],
            clients: 4,
            conns: 1,
            stop,
            warmup,
            value_size: 1,
            server_pids: vec![],
            output: Output::Json,
            workers: 1,
        }
    }

    fn workers(steps: &Arc<AtomicU64>, panic_at: Option<u64>) -> Vec<Counting> {
        (0..4)
            .map(|_| Counting {
                steps: steps.clone(),
                panic_at,
            })
            .collect()
    }

    #[tokio::test]
    async fn the_warm_up_is_run_and_left_out_of_the_measured_figures() {
        let steps = Arc::new(AtomicU64::new(0));
        let warm = Duration::from_millis(50);
        let p = plan(Stop::Total(10), Some(warm));
        let m = drive(&p, workers(&steps, None), &Probe::new(vec![]))
            .await
            .unwrap();
        let (warm_rec, warm_elapsed) = m.warmup.unwrap();
        assert_eq!(m.all.ops(), 10, "only the measured steps");
        assert!(warm_rec.ops() > 0 && warm_elapsed >= warm);
        assert_eq!(warm_rec.ops() + 10, steps.load(Ordering::Relaxed));

        let steps = Arc::new(AtomicU64::new(0));
        let p = plan(Stop::Total(10), None);
        let m = drive(&p, workers(&steps, None), &Probe::new(vec![]))
            .await
            .unwrap();
        assert!(m.warmup.is_none());
        assert_eq!((m.all.ops(), steps.load(Ordering::Relaxed)), (10, 10));
    }

    #[tokio::test]
    async fn a_client_that_dies_in_its_warm_up_fails_the_run() {
        let steps = Arc::new(AtomicU64::new(0));
        let p = plan(Stop::Total(10), Some(Duration::from_millis(200)));
        let probe = Probe::new(vec![]);
        let run = drive(&p, workers(&steps, Some(3)), &probe);
        let err = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("the run ends, it does not wait for the dead client")
            .err()
            .expect("and fails");
        assert!(err.to_string().contains("warm-up"), "{err:#}");
    }

    #[test]
    fn a_count_is_shared_by_every_clone() {
        let until = Until::new(Stop::Total(5), Instant::now());
        let other = until.clone();
        let granted = (0..10)
            .filter(|i| {
                if i % 2 == 0 {
                    until.more()
                } else {
                    other.more()
                }
            })
            .count();
        assert_eq!(granted, 5);
    }

    #[test]
    fn a_deadline_in_the_past_grants_nothing() {
        let until = Until::new(Stop::After(Duration::from_millis(1)), Instant::now());
        let later = Instant::now() + Duration::from_millis(2);
        while Instant::now() < later {
            std::hint::spin_loop();
        }
        assert!(!until.more());
        let until = Until::new(Stop::After(Duration::from_secs(60)), Instant::now());
        assert!(until.more());
    }
}
