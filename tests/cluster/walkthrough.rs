//! The README's Service Fabrik walkthrough, end to end: examples/servicefabrik/walkthrough.sh
//! (create, update, bind, backup, abort a backup, unbind, delete, with broker.sh run by three
//! `steward worker run` processes) against a real 3-node cluster, so the example cannot rot.
//! The script does its own waiting and checking and exits non-zero at the first step that does
//! not end as expected; this test gives it the cluster and the binary, and a time limit.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::*;

/// The whole script; it takes a few seconds, each of its waits is bounded by `STEP_WAIT_S`.
const SCRIPT_LIMIT: Duration = Duration::from_secs(60);
/// The script's WAIT_SECONDS: how long one step may take to reach its state.
const STEP_WAIT_S: &str = "20";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_fabrik_walkthrough_runs_every_flow() {
    let cluster = TestCluster::start(3).await;
    let endpoints: Vec<String> = cluster
        .running()
        .iter()
        .map(|id| cluster.client_addr(*id))
        .collect();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/servicefabrik/walkthrough.sh"
    );
    let child = Command::new("sh")
        .arg(script)
        .env("STEWARD", env!("CARGO_BIN_EXE_steward"))
        .env("STEWARD_ENDPOINTS", endpoints.join(","))
        .env("WAIT_SECONDS", STEP_WAIT_S)
        .env("TMPDIR", cluster.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run walkthrough.sh");
    let pid = child.id();
    let waited = tokio::time::timeout(
        SCRIPT_LIMIT,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await;
    let Ok(joined) = waited else {
        // SIGTERM lets the script stop its workers. SAFETY: kill(2) takes plain integers; `pid`
        // is our child, not reaped yet (the blocking task still waits for it).
        if let Ok(pid) = libc::pid_t::try_from(pid) {
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        panic!("walkthrough.sh did not finish within {SCRIPT_LIMIT:?}");
    };
    let out = joined.expect("join").expect("wait for walkthrough.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "walkthrough.sh: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    for flow in [
        "==> create",
        "==> update",
        "==> bind",
        "==> backup",
        "==> abort",
        "==> unbind",
        "==> delete",
        "==> every flow ended as expected",
    ] {
        assert!(stdout.contains(flow), "no {flow:?} in:\n{stdout}");
    }
}
