//! The run's trace: one line per thing that happened (a fault, a client's call and its answer,
//! a leader elected, a violation), stamped with simulated time. Every line goes into a hash, the
//! determinism proof: the same seed must give the same hash. The newest lines are kept for the
//! report of a failing seed; `--trace` keeps and prints them all.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// Lines a failing seed's report shows when the whole trace was not asked for.
pub const TAIL_LINES: usize = 60;

#[derive(Clone)]
pub struct Trace {
    inner: Arc<Mutex<Inner>>,
    start: Instant,
}

struct Inner {
    hash: Sha256,
    lines: VecDeque<String>,
    keep_all: bool,
    count: u64,
}

impl Trace {
    /// A trace whose clock starts now (simulated time).
    pub fn new(keep_all: bool) -> Trace {
        Trace {
            inner: Arc::new(Mutex::new(Inner {
                hash: Sha256::new(),
                lines: VecDeque::new(),
                keep_all,
                count: 0,
            })),
            start: Instant::now(),
        }
    }

    /// Simulated milliseconds since the run started.
    pub fn now_ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }

    /// Simulated nanoseconds since the run started (history times).
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Records `what`, as `who` (a node, a client, the nemesis) did it now.
    pub fn log(&self, who: &str, what: impl AsRef<str>) {
        let line = format!("{:>10.3} {who:<4} {}", self.now_ms(), what.as_ref());
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.hash.update(line.as_bytes());
        inner.hash.update(b"\n");
        inner.count += 1;
        inner.lines.push_back(line);
        if !inner.keep_all && inner.lines.len() > TAIL_LINES {
            inner.lines.pop_front();
        }
    }

    /// The hash of every line so far, as hex.
    pub fn hash(&self) -> String {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let digest = inner.hash.clone().finalize();
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// How many lines were recorded.
    pub fn count(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).count
    }

    /// The lines kept: all of them with `keep_all`, else the newest [`TAIL_LINES`].
    pub fn lines(&self) -> Vec<String> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.lines.iter().cloned().collect()
    }
}
