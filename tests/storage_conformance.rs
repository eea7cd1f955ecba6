//! The redb log store and state machine against openraft's storage conformance suite, plus tests
//! with real proposals: restart from a snapshot (same state and position), and what the
//! `ApplyObserver` is told about applied batches and installed snapshots.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a panic is a failed test (clippy.toml covers #[test] code, not helpers)"
)]

use std::io;
use std::sync::{Arc, Mutex};
use steward::state::{LockCommand, ObjectCommand};

use openraft::entry::RaftEntry;
use openraft::storage::{RaftLogStorage, RaftSnapshotBuilder, RaftStateMachine};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::StorageError;
use steward::raft::log_store::{LogStore, RaftDb};
use steward::raft::state_machine::{ApplyObserver, NoopObserver, StateMachine};
use steward::raft::types::{Entry, LeaderId, LogId, TypeConfig};
use steward::state::{
    Command, Effects, LockEventType, LockLimits, LockMode, ObjectKey, Proposal, Resource,
};
use tempfile::TempDir;

/// Each suite test gets a fresh data directory, removed when the guard (`TempDir`) drops.
struct RedbStoreBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for RedbStoreBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError<TypeConfig>> {
        let open = || -> io::Result<_> {
            let dir = tempfile::tempdir()?;
            let db = RaftDb::open(dir.path())?;
            let sm = StateMachine::open(db.clone(), Arc::new(NoopObserver))?;
            Ok((dir, LogStore::open(db)?, sm))
        };
        open().map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(RedbStoreBuilder).await
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(LeaderId { term, node_id: 1 }, index)
}

fn create(term: u64, index: u64, time_ms: u64, name: &str) -> Entry {
    let json = format!(r#"{{"kind":"Director","apiVersion":"v1","metadata":{{"name":"{name}"}}}}"#);
    let object = Resource::from_json(&json).expect("valid test object");
    Entry::new_normal(
        log_id(term, index),
        Proposal::new(
            time_ms,
            None,
            None,
            Command::Objects(ObjectCommand::Create {
                object,
                fence: None,
            }),
        ),
    )
}

async fn apply(sm: &mut StateMachine, entries: Vec<Entry>) -> io::Result<()> {
    sm.apply(futures::stream::iter(
        entries.into_iter().map(|e| Ok((e, None))),
    ))
    .await
}

/// A snapshot built after real proposals brings back the same state and position on reopen;
/// entries applied after the snapshot are not in it (openraft re-applies them from the log).
#[tokio::test]
async fn state_machine_restarts_from_its_snapshot() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let (snapshot_state, snapshot_meta) = {
        let db = RaftDb::open(dir.path())?;
        let mut sm = StateMachine::open(db.clone(), Arc::new(NoopObserver))?;
        apply(
            &mut sm,
            vec![Entry::new_blank(log_id(1, 1)), create(1, 2, 1_000, "a")],
        )
        .await?;
        apply(&mut sm, vec![create(1, 3, 2_000, "b")]).await?;

        let snapshot = sm
            .try_create_snapshot_builder(true)
            .await
            .expect("builder")
            .build_snapshot()
            .await?;
        assert_eq!(snapshot.meta.last_log_id, Some(log_id(1, 3)));
        let captured = sm.state().read().expect("state lock").to_snapshot_bytes();

        apply(&mut sm, vec![create(1, 4, 3_000, "c")]).await?;
        (captured, snapshot.meta)
    };

    let db = RaftDb::open(dir.path())?;
    let mut sm = StateMachine::open(db.clone(), Arc::new(NoopObserver))?;
    let (last_applied, membership) = sm.applied_state().await?;
    assert_eq!(last_applied, Some(log_id(1, 3)));
    assert_eq!(membership, snapshot_meta.last_membership);
    {
        let state = sm.state();
        let state = state.read().expect("state lock");
        assert_eq!(state.to_snapshot_bytes(), snapshot_state);
        assert_eq!(state.revision(), 2);
        assert_eq!(state.time_ms(), 2_000);
        assert!(state
            .get(&ObjectKey::new("Director", "default", "b"))
            .is_some());
        assert!(state
            .get(&ObjectKey::new("Director", "default", "c"))
            .is_none());
    }
    let current = sm.get_current_snapshot().await?.expect("stored snapshot");
    assert_eq!(current.meta, snapshot_meta);

    // The log store of the same file is untouched by the state machine.
    let mut log = LogStore::open(db)?;
    assert_eq!(log.get_log_state().await?.last_log_id, None);
    Ok(())
}

/// One reported batch: (event revisions, lock event types, revision).
type Batch = (Vec<u64>, Vec<LockEventType>, u64);

/// Records what the state machine reports, per batch and reset.
#[derive(Default)]
struct Recorder {
    applied: Mutex<Vec<Batch>>,
    resets: Mutex<Vec<u64>>,
}

impl ApplyObserver for Recorder {
    fn on_applied(&self, effects: &Effects, revision: u64) {
        let revisions = effects.events.iter().map(|e| e.revision).collect();
        let locks = effects.lock_events.iter().map(|e| e.event_type).collect();
        self.applied
            .lock()
            .expect("recorder")
            .push((revisions, locks, revision));
    }
    fn on_reset(&self, revision: u64) {
        self.resets.lock().expect("recorder").push(revision);
    }
}

fn acquire(term: u64, index: u64, time_ms: u64, name: &str) -> Entry {
    let limits = LockLimits {
        holders_max: 8,
        waiters_max: 8,
        locks_max: 8,
        details_bytes_max: 1024,
    };
    let command = Command::Locks(LockCommand::Acquire {
        name: name.to_string(),
        holder: "backup-manager@10.0.2.2".to_string(),
        mode: LockMode::Write,
        ttl_ms: Some(30_000),
        details: serde_json::Value::Null,
        wait_ms: 0,
        limits,
    });
    Entry::new_normal(
        log_id(term, index),
        Proposal::new(time_ms, None, None, command),
    )
}

/// One observer call per applied batch, with every object and lock event of it; an installed
/// snapshot (locks included) replaces the follower's state and is reported as a reset.
#[tokio::test]
async fn observer_sees_batches_and_snapshot_installs() -> io::Result<()> {
    let (leader_dir, follower_dir) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let leader_obs = Arc::new(Recorder::default());
    let mut leader = StateMachine::open(RaftDb::open(leader_dir.path())?, leader_obs.clone())?;
    let batch = vec![
        create(1, 1, 10, "a"),
        Entry::new_blank(log_id(1, 2)),
        acquire(1, 3, 15, "deploy-a"),
        create(1, 4, 20, "b"),
    ];
    apply(&mut leader, batch).await?;
    apply(&mut leader, vec![create(1, 5, 30, "a")]).await?; // rejected: already exists
    let applied = leader_obs.applied.lock().expect("recorder").clone();
    let granted = vec![LockEventType::Granted];
    assert_eq!(applied, vec![(vec![1, 2], granted, 2), (vec![], vec![], 2)]);

    let snapshot = leader
        .try_create_snapshot_builder(true)
        .await
        .expect("builder")
        .build_snapshot()
        .await?;
    let follower_obs = Arc::new(Recorder::default());
    let mut follower =
        StateMachine::open(RaftDb::open(follower_dir.path())?, follower_obs.clone())?;
    follower
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await?;
    assert_eq!(*follower_obs.resets.lock().expect("recorder"), vec![2]);
    assert_eq!(follower.applied_state().await?.0, Some(log_id(1, 5)));
    let follower_state = follower.state().read().expect("state lock").clone();
    assert_eq!(follower_state, *leader.state().read().expect("state lock"));
    assert_eq!(follower_state.lock_count(), 1);
    assert_eq!(
        follower.get_current_snapshot().await?.map(|s| s.meta),
        Some(snapshot.meta)
    );
    Ok(())
}
