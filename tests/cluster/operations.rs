//! Lifecycle operations on a real 3-node cluster, with workers simulated through the Rust
//! client, every request sent to a follower unless the test says otherwise: Service Fabrik's
//! create -> delete flow (the target's status and `state` label follow), idempotent submit, a
//! stale report refused with Aborted, abort of a queued and of a running operation, two mutating
//! operations on one target serialised, and a worker that stops heartbeating losing its
//! operation to a second worker (attempt 2, a larger epoch).

use std::time::Duration;

use serde_json::{json, Value};
use steward::client::{
    Assignment, AssignmentKind, AssignmentStream, Client, Consistency, OpListOptions, OpReport,
    OperationInfo, OperationState, SubmitOptions,
};
use steward::config::OperationsConfig;
use tokio_stream::StreamExt;
use tonic::Code;

use crate::harness::*;

const WAIT: Duration = Duration::from_secs(20);

/// Fast scheduling and sweeps for tests.
async fn start() -> TestCluster {
    let operations = OperationsConfig {
        schedule_interval_ms: 20,
        sweep_interval_ms: 20,
        ..OperationsConfig::default()
    };
    TestCluster::start_with_operations(3, test_raft(10_000, 1_000), operations).await
}

/// A client that talks to node `id` only.
fn client(cluster: &TestCluster, id: u64) -> Client {
    Client::connect(&[cluster.endpoint(id)]).expect("client")
}

/// Two clients on the two followers.
async fn follower_clients(cluster: &TestCluster) -> (Client, Client) {
    let followers = cluster.followers().await;
    assert_eq!(followers.len(), 2, "followers {followers:?}");
    (client(cluster, followers[0]), client(cluster, followers[1]))
}

fn director_json(name: &str) -> Value {
    json!({
        "kind": "Director",
        "apiVersion": "deployment.servicefabrik.io/v1alpha1",
        "metadata": {"name": name},
        "spec": {"options": "{}"},
    })
}

/// The next assignment on `stream`, within `WAIT`.
async fn next_assignment(stream: &mut AssignmentStream) -> Assignment {
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("an assignment in time")
        .expect("the stream is open")
        .expect("an assignment, not an error")
}

async fn next_run(stream: &mut AssignmentStream) -> OperationInfo {
    let a = next_assignment(stream).await;
    assert_eq!(a.kind, AssignmentKind::Run as i32, "{a:?}");
    a.operation.expect("an assignment carries its operation")
}

async fn submit(c: &Client, name: &str, verb: &str, opts: SubmitOptions) -> OperationInfo {
    let reply = c
        .op_submit("Director", "", name, verb, &opts)
        .await
        .unwrap_or_else(|e| panic!("submit {verb} {name}: {e}"));
    assert!(reply.created);
    reply.operation.expect("a submit returns the operation")
}

async fn wait_state(c: &Client, id: &str, want: OperationState) -> OperationInfo {
    wait_for(&format!("{id} to be {want:?}"), WAIT, || async {
        let op = c.op_get(id, Consistency::Linearizable).await.ok()?;
        (op.state == want as i32).then_some(op)
    })
    .await
}

async fn target(c: &Client, name: &str) -> Result<Value, tonic::Status> {
    c.get("Director", "default", name, Consistency::Linearizable)
        .await
}

/// The target shows `state` in its status and label.
async fn assert_shows(c: &Client, name: &str, state: &str) {
    let obj = target(c, name).await.expect("target");
    assert_eq!(obj["status"]["state"], state, "{obj}");
    assert_eq!(obj["metadata"]["labels"]["state"], state, "{obj}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_create_then_delete_through_followers() {
    let cluster = start().await;
    let (api, worker_api) = follower_clients(&cluster).await;
    let worker = "bosh-manager@10.0.2.2";
    worker_api
        .worker_register(
            worker,
            &["Director:create", "Director:delete"],
            2,
            Duration::from_secs(30),
        )
        .await
        .expect("register");
    let mut stream = worker_api
        .worker_assignments(worker)
        .await
        .expect("assignments");

    // The API controller records the create; the target is created in the same step.
    let opts = SubmitOptions {
        params: Some(json!({"plan": "small"})),
        idempotency_key: Some("create-d1".into()),
        create: Some(director_json("d1")),
        ..SubmitOptions::default()
    };
    let op = submit(&api, "d1", "create", opts.clone()).await;
    assert_eq!(op.verb, "create");
    let again = api
        .op_submit("Director", "", "d1", "create", &opts)
        .await
        .expect("repeated submit");
    assert!(!again.created, "a repeated key creates nothing");
    assert_eq!(again.operation.expect("op").id, op.id);

    let run = next_run(&mut stream).await;
    assert_eq!((run.id.as_str(), run.attempt), (op.id.as_str(), 1));
    assert_eq!(run.params_json, r#"{"plan":"small"}"#);
    assert!(run.epoch > 0);
    let fence = run
        .fence
        .clone()
        .expect("a WRITE-locked assignment has a fence");
    assert_eq!(
        (fence.lock.as_str(), fence.token),
        ("Director/default/d1", run.epoch)
    );
    assert_shows(&api, "d1", "in_progress").await;

    worker_api
        .worker_report(worker, &run, OpReport::Started)
        .await
        .expect("started");
    wait_state(&api, &op.id, OperationState::InProgress).await;
    let done = worker_api
        .worker_report(
            worker,
            &run,
            OpReport::Succeeded(json!({"deployment": "d1"})),
        )
        .await
        .expect("succeeded");
    assert_eq!(done.state, OperationState::Succeeded as i32);
    assert_shows(&api, "d1", "succeeded").await;
    let obj = target(&api, "d1").await.expect("d1");
    assert_eq!(obj["status"]["response"], json!({"deployment": "d1"}));
    assert_eq!(obj["status"]["lastOperation"], "create");

    // A report of an assignment that is not the current one is refused: stop, do not retry.
    let stale = OperationInfo {
        epoch: run.epoch - 1,
        ..run.clone()
    };
    let err = worker_api
        .worker_report(worker, &stale, OpReport::Failed("late".into()))
        .await
        .expect_err("stale report");
    assert_eq!(err.code(), Code::Aborted, "{err:?}");

    // Delete: a success removes the target.
    let del = submit(&api, "d1", "delete", SubmitOptions::default()).await;
    let run = next_run(&mut stream).await;
    assert_eq!(run.id, del.id);
    assert!(run.policy.as_ref().expect("policy").deletes_target);
    assert!(run.epoch > fence.token, "epochs only grow");
    worker_api
        .worker_report(worker, &run, OpReport::Succeeded(json!({})))
        .await
        .expect("deleted");
    let err = target(&api, "d1").await.expect_err("d1 is gone");
    assert_eq!(err.code(), Code::NotFound);

    let listed = api
        .op_list(&OpListOptions {
            target: Some(("Director".into(), String::new(), "d1".into())),
            ..OpListOptions::default()
        })
        .await
        .expect("list");
    let ids: Vec<&str> = listed.operations.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(ids, [op.id.as_str(), del.id.as_str()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_and_one_mutating_operation_at_a_time_per_target() {
    let cluster = start().await;
    let (api, worker_api) = follower_clients(&cluster).await;
    let mut res = cluster.res(cluster.wait_leader().await).await;
    create(&mut res, director("x", &[])).await.expect("x");

    // No worker yet: the operation stays queued and an abort ends it at once.
    let queued = submit(&api, "x", "update", SubmitOptions::default()).await;
    assert_shows(&api, "x", "in_queue").await;
    let aborted = api.op_abort(&queued.id).await.expect("abort queued");
    assert_eq!(aborted.state, OperationState::Aborted as i32);
    assert_shows(&api, "x", "aborted").await;

    let worker = "w1";
    worker_api
        .worker_register(worker, &["Director:update"], 4, Duration::from_secs(30))
        .await
        .expect("register");
    let mut stream = worker_api
        .worker_assignments(worker)
        .await
        .expect("assignments");
    let first = submit(&api, "x", "update", SubmitOptions::default()).await;
    let second = submit(&api, "x", "update", SubmitOptions::default()).await;
    let run = next_run(&mut stream).await;
    assert_eq!(run.id, first.id, "submit order");
    // The worker has room for both, but the second waits for the first to end.
    let second_now = api
        .op_get(&second.id, Consistency::Linearizable)
        .await
        .expect("second");
    assert_eq!(second_now.state, OperationState::Queued as i32);

    // Abort of a running operation: Aborting until the worker confirms.
    worker_api
        .worker_report(worker, &run, OpReport::Started)
        .await
        .expect("started");
    let aborting = api.op_abort(&first.id).await.expect("abort running");
    assert_eq!(aborting.state, OperationState::Aborting as i32);
    assert_shows(&api, "x", "aborting").await;
    let stop = next_assignment(&mut stream).await;
    assert_eq!(stop.kind, AssignmentKind::Abort as i32, "{stop:?}");
    assert_eq!(stop.operation.expect("op").id, first.id);
    let gone = worker_api
        .worker_report(worker, &run, OpReport::Aborted)
        .await
        .expect("aborted");
    assert_eq!(gone.state, OperationState::Aborted as i32);

    // Now the second runs.
    let run2 = next_run(&mut stream).await;
    assert_eq!(run2.id, second.id);
    assert!(run2.epoch > run.epoch);
    worker_api
        .worker_report(worker, &run2, OpReport::Succeeded(json!({"ok": true})))
        .await
        .expect("succeeded");
    assert_shows(&api, "x", "succeeded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_stops_heartbeating_loses_its_operation() {
    let cluster = start().await;
    let (api, worker_api) = follower_clients(&cluster).await;
    let mut res = cluster.res(cluster.wait_leader().await).await;
    create(&mut res, director("y", &[])).await.expect("y");

    // w1 takes the operation, starts it, and goes silent.
    worker_api
        .worker_register("w1", &["Director:update"], 1, Duration::from_millis(1500))
        .await
        .expect("register w1");
    let mut w1 = worker_api
        .worker_assignments("w1")
        .await
        .expect("w1 stream");
    let op = submit(&api, "y", "update", SubmitOptions::default()).await;
    let lost = next_run(&mut w1).await;
    assert_eq!((lost.id.as_str(), lost.attempt), (op.id.as_str(), 1));
    worker_api
        .worker_report("w1", &lost, OpReport::Started)
        .await
        .expect("w1 started");

    // w2 heartbeats; once w1's TTL passes, a sweep requeues the operation and w2 gets attempt 2.
    api.worker_register("w2", &["Director:update"], 1, Duration::from_secs(30))
        .await
        .expect("register w2");
    let mut w2 = api.worker_assignments("w2").await.expect("w2 stream");
    let run = next_run(&mut w2).await;
    assert_eq!((run.id.as_str(), run.attempt), (op.id.as_str(), 2));
    assert_eq!(run.worker, "w2");
    assert!(run.epoch > lost.epoch, "{} > {}", run.epoch, lost.epoch);

    // w1 wakes up and reports: refused, the result is w2's to give.
    let err = worker_api
        .worker_report("w1", &lost, OpReport::Succeeded(json!({"by": "w1"})))
        .await
        .expect_err("stale report");
    assert_eq!(err.code(), Code::Aborted, "{err:?}");
    api.worker_report("w2", &run, OpReport::Succeeded(json!({"by": "w2"})))
        .await
        .expect("w2 succeeded");
    let obj = target(&api, "y").await.expect("y");
    assert_eq!(obj["status"]["response"], json!({"by": "w2"}));
    let workers = api
        .worker_list(Consistency::Linearizable)
        .await
        .expect("workers");
    let ids: Vec<&str> = workers.workers.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["w2"], "the dead worker was removed");
    // Its assignment stream ends, telling it to register again.
    let end = tokio::time::timeout(WAIT, w1.next())
        .await
        .expect("the stream ends in time")
        .expect("an error ends it");
    assert_eq!(end.expect_err("not an assignment").code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_watch_paging_and_read_lock_verbs() {
    let cluster = start().await;
    let (api, other) = follower_clients(&cluster).await;
    let mut res = cluster.res(cluster.wait_leader().await).await;
    create(&mut res, director("z", &[])).await.expect("z");

    let code_and_message = |e: tonic::Status| (e.code(), e.message().to_string());
    let (code, msg) = code_and_message(
        api.worker_register("w", &["Director"], 1, Duration::from_secs(5))
            .await
            .expect_err("bad handle"),
    );
    assert_eq!(code, Code::InvalidArgument, "{msg}");
    assert!(msg.starts_with("handles[0]: "), "{msg}");
    let (code, msg) = code_and_message(
        api.worker_register("w", &["Director:create"], 0, Duration::from_secs(5))
            .await
            .expect_err("capacity 0"),
    );
    assert_eq!(code, Code::InvalidArgument, "{msg}");
    assert!(msg.contains("capacity"), "{msg}");
    let (code, msg) = code_and_message(
        api.op_submit("Director", "", "nope", "update", &SubmitOptions::default())
            .await
            .expect_err("no target"),
    );
    assert_eq!(code, Code::NotFound, "{msg}");
    for (lock, what) in [
        (("Director", ""), "give both"),
        (("not a kind", "z"), "lock_kind/lock_name: kind"),
    ] {
        let opts = SubmitOptions {
            lock: Some((lock.0.into(), lock.1.into())),
            ..SubmitOptions::default()
        };
        let (code, msg) = code_and_message(
            api.op_submit("Director", "", "z", "backup", &opts)
                .await
                .expect_err("bad lock"),
        );
        assert_eq!(code, Code::InvalidArgument, "{msg}");
        assert!(msg.contains(what), "{msg}");
    }
    let (code, msg) = code_and_message(
        api.op_get("bogus", Consistency::Linearizable)
            .await
            .expect_err("bad id"),
    );
    assert_eq!(code, Code::InvalidArgument, "{msg}");
    assert!(msg.starts_with("id: "), "{msg}");
    let (code, _) = code_and_message(
        api.op_get("op-999999", Consistency::Linearizable)
            .await
            .expect_err("unknown id"),
    );
    assert_eq!(code, Code::NotFound);
    let (code, msg) = code_and_message(match api.worker_assignments("ghost").await {
        Ok(_) => panic!("a stream for an unregistered worker"),
        Err(e) => e,
    });
    assert_eq!(code, Code::NotFound, "{msg}");
    let too_many = SubmitOptions {
        max_attempts: Some(1000),
        ..SubmitOptions::default()
    };
    let (code, msg) = code_and_message(
        api.op_submit("Director", "", "z", "update", &too_many)
            .await
            .expect_err("too many attempts"),
    );
    assert_eq!(code, Code::InvalidArgument, "{msg}");
    assert!(msg.contains("operations.attempts_max"), "{msg}");

    // Required enums left at their zero value (UNSPECIFIED) are refused, naming the field, and
    // change nothing: no READ lock taken by default.
    use steward::proto::v1 as pb;
    let ch = cluster.channel(cluster.wait_leader().await).await;
    let (code, msg) = code_and_message(
        pb::workers_client::WorkersClient::new(ch.clone())
            .report(pb::ReportRequest {
                id: "op-1".into(),
                worker: "w".into(),
                attempt: 1,
                epoch: 1,
                ..Default::default()
            })
            .await
            .expect_err("report without kind"),
    );
    assert_eq!(code, Code::InvalidArgument, "{msg}");
    assert!(msg.starts_with("kind: required"), "{msg}");
    let mut locks = pb::locks_client::LocksClient::new(ch);
    let (code, msg) = code_and_message(
        locks
            .acquire(pb::AcquireRequest {
                name: "no-mode".into(),
                holder: "h".into(),
                ..Default::default()
            })
            .await
            .expect_err("acquire without mode"),
    );
    assert_eq!(code, Code::InvalidArgument, "{msg}");
    assert!(msg.starts_with("mode: required"), "{msg}");
    let (code, msg) = code_and_message(
        locks
            .get(pb::GetLockRequest {
                name: "no-mode".into(),
                consistency: pb::Consistency::Unspecified as i32,
            })
            .await
            .expect_err("nothing was granted"),
    );
    assert_eq!(code, Code::NotFound, "{msg}");

    // A watch on another node sees every change of the target's operations.
    let mut watch = other
        .op_watch(&OpListOptions {
            target: Some(("Director".into(), "default".into(), "z".into())),
            ..OpListOptions::default()
        })
        .await
        .expect("watch");
    let backup = submit(&api, "z", "backup", SubmitOptions::default()).await;
    let policy = backup.policy.clone().expect("policy");
    assert_eq!(
        (policy.lock.as_str(), policy.lock_mode),
        ("Director/default/z", steward::client::LockMode::Read as i32),
        "backup takes the READ lock"
    );
    assert!(!policy.deletes_target);
    let update = submit(&api, "z", "update", SubmitOptions::default()).await;
    api.op_abort(&backup.id).await.expect("abort");
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let op = tokio::time::timeout(WAIT, watch.next())
            .await
            .expect("an event in time")
            .expect("open")
            .expect("event");
        seen.push((op.id, op.state));
    }
    assert_eq!(
        seen,
        [
            (backup.id.clone(), OperationState::Queued as i32),
            (update.id.clone(), OperationState::Queued as i32),
            (backup.id.clone(), OperationState::Aborted as i32),
        ]
    );
    let again = api.op_abort(&backup.id).await.expect("a repeated abort");
    assert_eq!(
        again.state,
        OperationState::Aborted as i32,
        "aborting is idempotent"
    );

    // Paging: one operation per page, in submit order.
    let mut ids = Vec::new();
    let mut token = String::new();
    loop {
        let page = other
            .op_list(&OpListOptions {
                limit: 1,
                continue_token: token.clone(),
                ..OpListOptions::default()
            })
            .await
            .expect("page");
        ids.extend(page.operations.into_iter().map(|o| o.id));
        if page.continue_token.is_empty() {
            break;
        }
        token = page.continue_token;
    }
    assert_eq!(ids, [backup.id.clone(), update.id.clone()]);
    let queued = other
        .op_list(&OpListOptions {
            state: Some(OperationState::Queued),
            consistency: Consistency::Linearizable,
            ..OpListOptions::default()
        })
        .await
        .expect("queued");
    assert_eq!(queued.operations.len(), 1);
    assert_eq!(queued.operations[0].id, update.id);
}

/// Runs the `steward` CLI against `endpoint`; returns (success, stdout, stderr).
async fn cli(endpoint: String, args: &[&str]) -> (bool, String, String) {
    let mut argv = vec!["--endpoints".to_string(), endpoint];
    argv.extend(args.iter().map(|a| a.to_string()));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_steward"))
            .args(&argv)
            .output()
            .expect("run steward")
    })
    .await
    .expect("join");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_submits_lists_gets_and_aborts() {
    let cluster = start().await;
    let follower = cluster.followers().await[0];
    let endpoint = cluster.client_addr(follower);
    let create = director_json("c1").to_string();
    let (ok, out, err) = cli(
        endpoint.clone(),
        &[
            "op",
            "submit",
            "create",
            "Director/c1",
            "--create",
            &create,
            "-o",
            "json",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let op: Value = serde_json::from_str(&out).expect("JSON");
    let id = op["id"].as_str().expect("id").to_string();
    assert_eq!(op["state"], "queued");
    assert_eq!(op["policy"]["lockMode"], "WRITE");

    let (ok, out, err) = cli(endpoint.clone(), &["op", "list", "--state", "queued"]).await;
    assert!(ok, "{err}");
    assert!(out.starts_with("ID "), "{out}");
    assert!(
        out.contains(&format!("{id}   create   Director/default/c1   queued")),
        "{out}"
    );
    let (ok, out, err) = cli(endpoint.clone(), &["op", "abort", &id]).await;
    assert!(ok, "{err}");
    assert!(out.contains("aborted"), "{out}");
    let (ok, out, err) = cli(endpoint.clone(), &["op", "get", &id]).await;
    assert!(ok, "{err}");
    assert!(out.contains("State:           aborted\n"), "{out}");

    Client::connect(&[cluster.endpoint(follower)])
        .expect("client")
        .worker_register("w1", &["Director:create"], 3, Duration::from_secs(30))
        .await
        .expect("register");
    let (ok, out, err) = cli(endpoint.clone(), &["worker", "list"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("w1   yes     3"), "{out}");
    let (ok, _, err) = cli(endpoint, &["op", "get", "op-999999"]).await;
    assert!(!ok);
    assert!(
        err.contains("NotFound: operation op-999999 not found"),
        "{err}"
    );
}

/// Reports until the cluster answers (a report is safe to repeat: the same final report of the
/// current assignment answers the operation again). `Aborted` (a lost assignment) is returned.
async fn report_until_answered(
    c: &Client,
    worker: &str,
    op: &OperationInfo,
    report: OpReport,
) -> Result<OperationInfo, tonic::Status> {
    wait_for("a report answered", WAIT, || async {
        match c.worker_report(worker, op, report.clone()).await {
            Ok(op) => Some(Ok(op)),
            Err(e) if e.code() == Code::Unavailable => None,
            Err(e) => Some(Err(e)),
        }
    })
    .await
}

/// (operation, epoch, worker) of every assignment received.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, u64, &'static str)>>>;

/// A simulated worker: runs every assignment it receives (Started, then Succeeded) and records
/// (operation, epoch) of each.
fn run_worker(
    c: Client,
    worker: &'static str,
    mut stream: AssignmentStream,
    seen: Seen,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(Ok(a)) = stream.next().await {
            let Some(op) = a.operation else { continue };
            if a.kind != AssignmentKind::Run as i32 {
                continue;
            }
            seen.lock()
                .expect("seen")
                .push((op.id.clone(), op.epoch, worker));
            let _ = report_until_answered(&c, worker, &op, OpReport::Started).await;
            let done = OpReport::Succeeded(json!({"by": worker}));
            let _ = report_until_answered(&c, worker, &op, done).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_resumes_dispatch_and_nothing_runs_twice() {
    let mut cluster = start().await;
    let leader = cluster.wait_leader().await;
    let survivor = cluster.followers().await[0];
    let c = client(&cluster, survivor);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for w in ["w1", "w2"] {
        c.worker_register(w, &["Director:create"], 3, Duration::from_secs(60))
            .await
            .expect("register");
        let stream = c.worker_assignments(w).await.expect("stream");
        workers.push(run_worker(c.clone(), w, stream, seen.clone()));
    }

    let submit_one = |i: usize| {
        let c = c.clone();
        async move {
            let name = format!("t{i}");
            let opts = SubmitOptions {
                create: Some(director_json(&name)),
                idempotency_key: Some(format!("create-{name}")),
                ..SubmitOptions::default()
            };
            // Idempotent: a submit whose answer was lost to the leader change is repeated.
            wait_for("a submit answered", WAIT, || async {
                match c.op_submit("Director", "", &name, "create", &opts).await {
                    Ok(r) => r.operation,
                    Err(e) if e.code() == Code::Unavailable => None,
                    Err(e) => panic!("submit {name}: {e}"),
                }
            })
            .await
        }
    };
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(submit_one(i).await.id);
    }
    cluster.kill(leader);
    for i in 10..20 {
        ids.push(submit_one(i).await.id);
    }
    for id in &ids {
        let op = wait_state(&c, id, OperationState::Succeeded).await;
        assert_eq!(op.attempt, 1, "{op:?}");
    }
    let seen = seen.lock().expect("seen").clone();
    let mut received: Vec<&str> = seen.iter().map(|(id, _, _)| id.as_str()).collect();
    received.sort_unstable();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(
        received, want,
        "each operation reached exactly one worker once"
    );
    let mut epochs: Vec<u64> = seen.iter().map(|(_, e, _)| *e).collect();
    epochs.sort_unstable();
    epochs.dedup();
    assert_eq!(
        epochs.len(),
        ids.len(),
        "every assignment has its own epoch"
    );
    for w in workers {
        w.abort();
    }
}

/// 160 operations from 8 submitters through a 3-node cluster reach 8 workers, each submit and
/// report sent to a node in turn: every operation reaches a worker and succeeds. It asserts
/// no latency; it prints the dispatch latency (submit sent -> the worker receives the
/// assignment) and the throughput (submit -> succeeded) with `--nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_from_8_submitters_each_reach_one_of_8_workers_and_succeed() {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    const OPS: usize = 160;
    const SUBMITTERS: usize = 8;
    let cluster = start().await;
    let clients: Vec<Client> = cluster
        .running()
        .iter()
        .map(|id| client(&cluster, *id))
        .collect();
    let received: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let mut workers = Vec::new();
    for w in 0..8 {
        let c = clients[w % clients.len()].clone();
        let id = format!("bench-w{w}");
        c.worker_register(&id, &["Director:create"], 4, Duration::from_secs(60))
            .await
            .expect("register");
        let mut stream = c.worker_assignments(&id).await.expect("stream");
        let received = received.clone();
        workers.push(tokio::spawn(async move {
            while let Some(Ok(a)) = stream.next().await {
                let Some(op) = a.operation else { continue };
                received
                    .lock()
                    .expect("received")
                    .insert(op.id.clone(), Instant::now());
                let c = c.clone();
                let id = id.clone();
                tokio::spawn(async move {
                    let _ = c.worker_report(&id, &op, OpReport::Started).await;
                    let _ = c
                        .worker_report(&id, &op, OpReport::Succeeded(json!({})))
                        .await;
                });
            }
        }));
    }

    let begin = Instant::now();
    let mut submitters = Vec::new();
    for s in 0..SUBMITTERS {
        let c = clients[s % clients.len()].clone();
        submitters.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            for i in (s..OPS).step_by(SUBMITTERS) {
                let name = format!("b{i}");
                let opts = SubmitOptions {
                    create: Some(director_json(&name)),
                    ..SubmitOptions::default()
                };
                let at = Instant::now();
                let reply = c
                    .op_submit("Director", "", &name, "create", &opts)
                    .await
                    .expect("submit");
                sent.push((reply.operation.expect("op").id, at, at.elapsed()));
            }
            sent
        }));
    }
    let mut sent = Vec::new();
    for s in submitters {
        sent.extend(s.await.expect("submitter"));
    }
    let c = &clients[0];
    wait_for(
        "every operation succeeded",
        Duration::from_secs(60),
        || async {
            let opts = OpListOptions {
                state: Some(OperationState::Succeeded),
                limit: 1000,
                ..OpListOptions::default()
            };
            let n = c.op_list(&opts).await.ok()?.operations.len();
            (n == OPS).then_some(())
        },
    )
    .await;
    let elapsed = begin.elapsed();
    let received = received.lock().expect("received").clone();
    let mut latencies: Vec<Duration> = sent
        .iter()
        .map(|(id, at, _)| received[id].saturating_duration_since(*at))
        .collect();
    latencies.sort_unstable();
    let mut submits: Vec<Duration> = sent.iter().map(|(_, _, d)| *d).collect();
    submits.sort_unstable();
    let pct = |p: usize| latencies[(latencies.len() * p / 100).min(latencies.len() - 1)];
    println!(
        "operations: {OPS} ops, 8 workers, 3 nodes: dispatch latency p50 {:?} p99 {:?} (of which the submit's own reply p50 {:?}); {:.0} ops/s submit -> succeeded",
        pct(50),
        pct(99),
        submits[submits.len() / 2],
        OPS as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(received.len(), OPS);
    for w in workers {
        w.abort();
    }
}

/// Kills the child process when dropped (a failed test leaves no worker behind).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steward_worker_run_executes_a_program_per_assignment_and_honours_abort() {
    use std::os::unix::fs::PermissionsExt;

    let cluster = start().await;
    let script = cluster.dir.path().join("worker.sh");
    let pid_file = cluster.dir.path().join("backup.pid");
    // The backup starts a child (as a real backup tool would) and waits for it: an abort must
    // stop the child too, not only the shell.
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             cat > /dev/null\n\
             if [ \"$STEWARD_OPERATION_VERB\" = backup ]; then\n\
               sleep 600 &\n\
               echo $! > {pid_file}\n\
               wait $!\n\
             fi\n\
             echo \"{{\\\"done\\\": \\\"$STEWARD_TARGET_KIND/$STEWARD_TARGET_NAMESPACE/$STEWARD_TARGET_NAME\\\"}}\"\n",
            pid_file = pid_file.display()
        ),
    )
    .expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let endpoints: Vec<String> = cluster
        .running()
        .iter()
        .map(|id| cluster.client_addr(*id))
        .collect();
    let log = std::fs::File::create(cluster.dir.path().join("worker.log")).expect("log");
    let _worker = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_steward"))
            .args(["--endpoints", &endpoints.join(","), "worker", "run"])
            .args([
                "--id",
                "exec-1",
                "--handles",
                "Director:create,Director:backup",
            ])
            .args(["--capacity", "2", "--ttl", "5s", "--exec"])
            .arg(&script)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn the worker"),
    );
    let (api, _) = follower_clients(&cluster).await;
    let opts = SubmitOptions {
        create: Some(director_json("e1")),
        ..SubmitOptions::default()
    };
    let op = submit(&api, "e1", "create", opts).await;
    let done = wait_state(&api, &op.id, OperationState::Succeeded).await;
    assert_eq!(done.worker, "exec-1");
    let obj = target(&api, "e1").await.expect("e1");
    assert_eq!(
        obj["status"]["response"],
        json!({"done": "Director/default/e1"})
    );

    let backup = submit(&api, "e1", "backup", SubmitOptions::default()).await;
    wait_state(&api, &backup.id, OperationState::InProgress).await;
    let child = wait_for("the backup's child pid", WAIT, || async {
        let text = std::fs::read_to_string(&pid_file).ok()?;
        text.trim().parse::<u32>().ok()
    })
    .await;
    api.op_abort(&backup.id).await.expect("abort");
    wait_state(&api, &backup.id, OperationState::Aborted).await;
    assert_shows(&api, "e1", "aborted").await;
    wait_for("the backup's child to be stopped", WAIT, || async {
        (!is_running(child)).then_some(())
    })
    .await;
}

/// The process exists and is not a zombie (an orphan whose reaper has not got to it yet).
fn is_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // pid (comm) state ...: the state follows the last ')'.
    let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
    !matches!(state.and_then(|s| s.chars().next()), Some('Z' | 'X') | None)
}
