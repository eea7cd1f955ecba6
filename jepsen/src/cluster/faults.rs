//! The faults the nemesis makes on processes: kill -9 and restart, a fresh member in a slot,
//! a node's clock, SIGSTOP and SIGCONT.

use std::sync::atomic::Ordering;

use anyhow::Context;

use crate::clock::{self, FakeClock};
use crate::process::{Ask, Watched};

use super::spawn::{log_marker, wait_until_stopped, write_config};
use super::NetCluster;

impl NetCluster {
    /// SIGKILL node `id` and wait until it is reaped (a paused node dies too); the exit is
    /// recorded as asked for. No-op if it is not running: a process that already ended stays
    /// on record as having ended on its own.
    pub fn kill(&mut self, id: u64) {
        self.kill_as(id, Ask::Kill);
    }

    pub(super) fn kill_as(&mut self, id: u64, ask: Ask) {
        let Some(node) = self.nodes.get_mut(&id) else {
            return;
        };
        if let Some(process) = node.process.as_ref() {
            if process.kill_and_reap(ask) {
                log_marker(&node.log_path, &format!("killed node {id} (SIGKILL)"));
            }
        }
        node.paused.store(false, Ordering::SeqCst);
    }

    /// Starts node `id` again with the same config and data dir. Fails if it is still running.
    pub fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        let node = self
            .nodes
            .get_mut(&id)
            .with_context(|| format!("no node {id}"))?;
        if let Some(process) = node.process.as_ref().filter(|p| p.is_running()) {
            anyhow::bail!(
                "node {id} is still running (pid {}); kill it first",
                process.pid()
            );
        }
        self.spawn(id)
    }

    /// Starts a fresh member in slot `id`, whose process must not be running: the next unused
    /// Raft id, an empty data dir, and a config without initial members (so it waits to be
    /// added, `AddLearner`, rather than bootstrapping). Returns the new Raft id.
    pub fn spawn_fresh_member(&mut self, id: u64) -> anyhow::Result<u64> {
        let node = self
            .nodes
            .get(&id)
            .with_context(|| format!("no node {id}"))?;
        anyhow::ensure!(
            !node.process.as_ref().is_some_and(Watched::is_running),
            "node {id} still has a process; kill it first"
        );
        let raft_id = self.last_raft_id + 1;
        write_config(&self.spec, id, raft_id, &node.ip, &[], &node.config_path)?;
        self.last_raft_id = raft_id;
        if let Some(node) = self.nodes.get_mut(&id) {
            node.raft_id = raft_id;
        }
        self.spawn(id)?;
        Ok(raft_id)
    }

    /// Sets node `id`'s wall clock (libfaketime applies it within `clock::REREAD_SECS`).
    /// Fails when the cluster runs without libfaketime.
    pub fn set_clock(&mut self, id: u64, clock: FakeClock) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.spec.faketime.is_some(),
            "the cluster was started without libfaketime; clock faults need it"
        );
        let node = self
            .nodes
            .get_mut(&id)
            .with_context(|| format!("no node {id}"))?;
        clock::write(&node.faketime_file, clock)?;
        node.clock = clock;
        Ok(())
    }

    /// Node `id`'s clock setting and how long (seconds) its process has run (0 if it is not
    /// running), for `FakeClock::at_rate`.
    pub fn clock(&self, id: u64) -> Option<(FakeClock, f64)> {
        let node = self.nodes.get(&id)?;
        let elapsed = node
            .started_at
            .filter(|_| self.running(id).is_some())
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        Some((node.clock, elapsed))
    }

    /// SIGSTOP node `id` (no-op if it is not running).
    pub fn pause(&self, id: u64) {
        if let (Some(node), Some(process)) = (self.nodes.get(&id), self.running(id)) {
            if process.signal(libc::SIGSTOP, None) {
                // Delivery is asynchronous: return once it is stopped, so the fault is real
                // when the timeline says so.
                wait_until_stopped(process.pid(), true);
                node.paused.store(true, Ordering::SeqCst);
                log_marker(&node.log_path, &format!("paused node {id} (SIGSTOP)"));
            }
        }
    }

    /// SIGCONT node `id` (no-op if it is not running).
    pub fn resume(&self, id: u64) {
        if let (Some(node), Some(process)) = (self.nodes.get(&id), self.running(id)) {
            if process.signal(libc::SIGCONT, None) {
                wait_until_stopped(process.pid(), false);
                if node.paused.swap(false, Ordering::SeqCst) {
                    log_marker(&node.log_path, &format!("resumed node {id} (SIGCONT)"));
                }
            }
        }
    }
}
