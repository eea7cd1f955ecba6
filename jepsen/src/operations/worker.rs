//! The workers of the operations workload: a slot's succession of crashing workers, and one
//! worker's registration, heartbeats, assignment streams and runs (see the parent module's docs).

use super::*;

/// One slot: a worker lives, crashes, and a fresh one (`w<slot>-<generation>`) takes its place,
/// until the run is over; then the last one works until the halt.
pub(super) async fn worker_slot(slot: u64, sh: Arc<Shared>) {
    let mut rng = Rng::new(sh.seed ^ (slot + 1).wrapping_mul(0xC0FFEE));
    for generation in 1.. {
        let Ok(client) = Client::connect_with_timeout(&sh.rotated(slot), WORKER_TIMEOUT) else {
            return;
        };
        let w = Arc::new(Worker {
            id: format!("w{slot}-{generation}"),
            slot,
            sh: sh.clone(),
            client,
            zombie: AtomicBool::new(false),
            busy: AtomicUsize::new(0),
            runs: Mutex::default(),
            aborts: Mutex::default(),
        });
        if !w.register().await {
            return;
        }
        sh.record(Record::Worker(WorkerEvent {
            worker: w.id.clone(),
            event: WorkerLife::Started,
            at_ns: sh.now_ns(),
        }));
        let heartbeat = tokio::spawn(w.clone().heartbeat());
        let stream = tokio::spawn(w.clone().stream());
        let lifetime = LIFETIME_MS.0 + rng.below(LIFETIME_MS.1 - LIFETIME_MS.0);
        let dies_at = Instant::now() + Duration::from_millis(lifetime);
        // It dies once its time is up and it is running something (or `BUSY_WAIT` later), so
        // most crashes leave work behind to take over.
        let busy_or = dies_at + BUSY_WAIT;
        let alive = |now: Instant| now < dies_at || (now < busy_or && w.busy() == 0);
        while !sh.halted() && (sh.stopped() || alive(Instant::now())) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        heartbeat.abort();
        stream.abort();
        if sh.halted() {
            return;
        }
        let event = if rng.below(3) == 0 {
            w.zombie.store(true, Ordering::Relaxed);
            WorkerLife::Zombied
        } else {
            w.vanish();
            WorkerLife::Vanished
        };
        sh.record(Record::Worker(WorkerEvent {
            worker: w.id.clone(),
            event,
            at_ns: sh.now_ns(),
        }));
    }
}

/// One worker's life.
struct Worker {
    id: String,
    slot: u64,
    sh: Arc<Shared>,
    client: Client,
    /// Crashed but its runs go on, late.
    zombie: AtomicBool,
    /// Runs between their delivery and their end report.
    busy: AtomicUsize,
    /// Every (operation, epoch) it got, with the abort signal while its run has not ended, and
    /// the run's task.
    runs: Mutex<BTreeMap<(String, u64), Assigned>>,
    /// (operation, epoch) whose abort it answered without a run.
    aborts: Mutex<BTreeSet<(String, u64)>>,
}

/// One run of one assignment.
struct Assigned {
    abort: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::AbortHandle>,
}

impl Worker {
    /// Registers (again), retrying until it is done or the run halts.
    async fn register(&self) -> bool {
        let handles: Vec<String> = ["create", "update", "delete"]
            .iter()
            .map(|v| format!("{TARGET_KIND}:{v}"))
            .collect();
        let handles: Vec<&str> = handles.iter().map(String::as_str).collect();
        while !self.sh.halted() {
            match self
                .client
                .worker_register(&self.id, &handles, CAPACITY, WORKER_TTL)
                .await
            {
                Ok(_) => return true,
                Err(e) => {
                    tracing::debug!(worker = %self.id, error = %e, "register");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
        false
    }

    async fn heartbeat(self: Arc<Self>) {
        loop {
            tokio::time::sleep(HEARTBEAT_EVERY).await;
            match self.client.worker_heartbeat(&self.id).await {
                Err(e) if e.code() == Code::NotFound => {
                    // Steward presumed it dead and took its work back; it lives on.
                    if self.register().await {
                        self.sh.record(Record::Worker(WorkerEvent {
                            worker: self.id.clone(),
                            event: WorkerLife::Reregistered,
                            at_ns: self.sh.now_ns(),
                        }));
                    }
                }
                Err(e) => tracing::debug!(worker = %self.id, error = %e, "heartbeat"),
                Ok(_) => {}
            }
        }
    }

    /// Streams assignments from one node after another.
    async fn stream(self: Arc<Self>) {
        let nodes = self.sh.endpoints.len();
        let mut node = self.slot as usize;
        loop {
            node = (node + 1) % nodes;
            let Some(pinned) = self.client.with_endpoint_index(node) else {
                return;
            };
            let opened =
                tokio::time::timeout(WORKER_TIMEOUT, pinned.worker_assignments(&self.id)).await;
            let mut stream = match opened {
                Ok(Ok(s)) => s,
                // Not registered (the heartbeat task registers it again), or no answer.
                _ => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            let until = tokio::time::Instant::now() + STREAM_MAX_AGE;
            while let Ok(Some(Ok(a))) = tokio::time::timeout_at(until, stream.next()).await {
                self.deliver(a);
            }
        }
    }

    fn deliver(self: &Arc<Self>, a: Assignment) {
        let Some(op) = a.operation else { return };
        let abort = AssignmentKind::try_from(a.kind) == Ok(AssignmentKind::Abort);
        let key = (op.id.clone(), op.epoch);
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let repeat = match abort {
            true => self
                .aborts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&key),
            false => runs.contains_key(&key),
        };
        self.sh.record(Record::Delivery(Delivery {
            worker: self.id.clone(),
            op: op.id.clone(),
            target: op.name.clone(),
            attempt: op.attempt,
            epoch: op.epoch,
            abort,
            repeat,
            at_ns: self.sh.now_ns(),
        }));
        if abort {
            if let Some(tx) = runs.get_mut(&key).and_then(|r| r.abort.take()) {
                let _ = tx.send(());
                return;
            }
            if !self
                .aborts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key)
            {
                return;
            }
            let w = self.clone();
            let task = tokio::spawn(async move {
                w.report(&op, OpReport::Aborted).await;
            });
            self.sh
                .runs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(task);
            return;
        }
        if repeat {
            return;
        }
        let (tx, rx) = oneshot::channel();
        let w = self.clone();
        let task = tokio::spawn(async move { w.run(op, rx).await });
        runs.insert(
            key,
            Assigned {
                abort: Some(tx),
                task: Some(task.abort_handle()),
            },
        );
        self.sh
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task);
    }

    fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// Crashes: every run stops where it is, nothing more is reported.
    fn vanish(&self) {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        for r in runs.values() {
            if let Some(t) = &r.task {
                t.abort();
            }
        }
    }

    /// Runs one assignment: Started, work, the effect, the end report.
    async fn run(self: Arc<Self>, op: OperationInfo, abort: oneshot::Receiver<()>) {
        self.busy.fetch_add(1, Ordering::Relaxed);
        self.run_steps(&op, abort).await;
        self.busy.fetch_sub(1, Ordering::Relaxed);
    }

    async fn run_steps(&self, op: &OperationInfo, mut abort: oneshot::Receiver<()>) {
        let op = op.clone();
        let params: Value = serde_json::from_str(&op.params_json).unwrap_or(Value::Null);
        let work = Duration::from_millis(params["workMs"].as_u64().unwrap_or(WORK_MS.0));
        let fail = params["fail"].as_bool().unwrap_or(false);
        if !self.report(&op, OpReport::Started).await {
            return;
        }
        let aborted = tokio::select! {
            _ = tokio::time::sleep(work) => false,
            r = &mut abort => r.is_ok(),
        };
        if aborted {
            self.report(&op, OpReport::Aborted).await;
            return;
        }
        if self.zombie.load(Ordering::Relaxed) {
            tokio::time::sleep(ZOMBIE_STALL).await;
        }
        if !self.effect(&op).await {
            return;
        }
        let end = match fail {
            true => OpReport::Failed("the submit asked this operation to fail".to_string()),
            false => OpReport::Succeeded(json!({"worker": self.id, "epoch": op.epoch})),
        };
        self.report(&op, end).await;
    }

    /// Appends this assignment's effect to the target's log: read, then a compare-and-set on
    /// the log's revision under the assignment's fence. An unknown outcome is settled by reading
    /// again (the entry is there or the next write may add it; the revision check lets at most
    /// one of them through). True once the write is acknowledged, found, or refused by the fence;
    /// false on halt.
    async fn effect(&self, op: &OperationInfo) -> bool {
        let entry = EffectEntry {
            op: op.id.clone(),
            attempt: op.attempt,
            epoch: op.epoch,
            worker: self.id.clone(),
        };
        let fence = op.fence.clone().or_else(|| {
            op.policy.as_ref().map(|p| Fence {
                lock: p.lock.clone(),
                token: op.epoch,
            })
        });
        let record = |result: EffectResult, invoke_ns: u64, error: String| {
            self.sh.record(Record::Effect(EffectEvent {
                worker: self.id.clone(),
                op: op.id.clone(),
                target: op.name.clone(),
                attempt: op.attempt,
                epoch: op.epoch,
                result,
                invoke_ns,
                complete_ns: self.sh.now_ns(),
                error,
            }))
        };
        while !self.sh.halted() {
            let invoke_ns = self.sh.now_ns();
            let obj = match self
                .client
                .get(EFFECTS_KIND, "default", &op.name, Consistency::Linearizable)
                .await
            {
                Ok(obj) => obj,
                Err(_) => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            let mut entries: Vec<EffectEntry> =
                serde_json::from_value(obj["spec"]["effects"].clone()).unwrap_or_default();
            if entries.contains(&entry) {
                record(EffectResult::Found, invoke_ns, String::new());
                return true;
            }
            let revision: u64 = obj["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            entries.push(entry.clone());
            let next = effects_object(&op.name, &entries);
            match self
                .client
                .update_fenced(&next, revision.max(1), fence.clone())
                .await
            {
                Ok(_) => {
                    record(EffectResult::Ok, invoke_ns, String::new());
                    return true;
                }
                Err(e) if reason(&e) == Some(ErrorReason::FenceRejected) => {
                    record(EffectResult::FenceRefused, invoke_ns, error_text(&e));
                    return true;
                }
                // The log changed since the read (an earlier unknown write of ours): read again.
                Err(e) if reason(&e) == Some(ErrorReason::RevisionConflict) => {}
                Err(e) => {
                    record(EffectResult::Unknown, invoke_ns, error_text(&e));
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
        false
    }

    /// Sends a report, again while its outcome is unknown (a repeat is answered like the
    /// first). False when it was refused (the assignment is lost) or the run halted.
    async fn report(&self, op: &OperationInfo, report: OpReport) -> bool {
        let kind = match &report {
            OpReport::Started => ReportKind::Started,
            OpReport::Succeeded(_) => ReportKind::Succeeded,
            OpReport::Failed(_) => ReportKind::Failed,
            OpReport::Aborted => ReportKind::Aborted,
        };
        while !self.sh.halted() {
            let invoke_ns = self.sh.now_ns();
            let r = self
                .client
                .worker_report(&self.id, op, report.clone())
                .await;
            let (outcome, error) = match &r {
                Ok(_) => (Outcome::Ok, String::new()),
                Err(e) => (classify(e), error_text(e)),
            };
            let stale = matches!(&r, Err(e) if reason(e) == Some(ErrorReason::StaleAssignment));
            self.sh.record(Record::Report(ReportEvent {
                worker: self.id.clone(),
                op: op.id.clone(),
                attempt: op.attempt,
                epoch: op.epoch,
                report: kind,
                outcome,
                stale,
                invoke_ns,
                complete_ns: self.sh.now_ns(),
                error,
            }));
            match outcome {
                Outcome::Ok => return true,
                Outcome::Fail => return false,
                Outcome::Unknown => tokio::time::sleep(RETRY_PAUSE).await,
            }
        }
        false
    }
}
