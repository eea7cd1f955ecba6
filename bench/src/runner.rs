//! Runs a [`Plan`] against a cluster: dials the connections (one tonic channel, so one HTTP/2
//! connection, each), lets every client prepare, starts them all at once, stops them by time or
//! count, and merges what they recorded into a [`Report`]. Called by `main` only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tonic::transport::{Channel, Endpoint};

use crate::args::{Plan, Stop, Workload};
use crate::names::RunId;
use crate::report::{Recorder, Report, RunInfo};
use crate::{clients, watch};

/// How long dialling one connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a workload driver hands back: every client's record merged, the measured time from the
/// start signal until the last client finished, and (watch) the acknowledged writes.
pub struct Measured {
    pub all: Recorder,
    pub elapsed: Duration,
    pub writes: Option<u64>,
}

pub async fn run(plan: &Plan) -> anyhow::Result<Report> {
    let run = RunId::new();
    let channels = connect(plan).await?;
    let measured = match plan.workload {
        Workload::Watch => watch::run(plan, &run, &channels).await?,
        _ => clients::run(plan, &run, &channels).await?,
    };
    let info = RunInfo {
        workload: plan.workload.name().to_string(),
        endpoints: plan.endpoints.clone(),
        clients: plan.clients,
        conns: plan.conns,
        value_size: plan.value_size,
    };
    Ok(Report::new(
        info,
        &measured.all,
        measured.elapsed,
        measured.writes,
    ))
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
