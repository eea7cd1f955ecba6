//! The `steward` binary: parse the command line, start tracing, run the command, and turn an
//! error into one line on stderr (`error: <Code>: <message>`) and exit code 1. Usage errors are
//! clap's (exit code 2). Everything else lives in `steward::cli`.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use steward::cli::{self, Cli};

/// jemalloc rather than glibc's malloc: a create costs ~8% less CPU over a 3-node cluster
/// (`target/release/steward-bench create --clients 64`: 187 vs 205 us of server CPU per write),
/// allocation being a tenth of a write's cost. Peak RSS was ~6% higher (mostly live objects
/// either way; jemalloc's decay settings made no difference).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once at its start (tikv-jemallocator prefixes the symbol; the
/// environment's `_RJEM_MALLOC_CONF` still overrides): a background thread returns freed pages
/// to the system on its own. Without it an idle node keeps what it freed until it allocates
/// again: after 200,000 versions (251 MiB) were compacted away, three idle nodes still held
/// 1147 MiB 30 s later, and 209 MiB with it (bench/kv-memory.sh, README "Use steward as etcd").
#[allow(non_upper_case_globals, unsafe_code)] // The C symbol jemalloc reads, by its C name.
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8; 23] = b"background_thread:true\0";

fn main() -> ExitCode {
    abort_on_panic();
    let cli = Cli::parse();
    init_tracing(cli.default_log_filter());
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", cli::describe_error(&err));
            ExitCode::FAILURE
        }
    }
}

/// tokio's multi-threaded runtime, one worker per core, without its LIFO slot (where the
/// build has tokio's unstable options: `.cargo/config.toml` turns them on).
///
/// The slot runs a task woken by the running task next, before the rest of the queue. A write
/// wakes every stream watching it; the first stream to queue a frame woke its connection's
/// task into the slot, which then wrote before the other streams of that connection had
/// queued theirs. Without the slot the connection's task runs after them, and h2 writes their
/// frames in one call (which `server::coalesce` makes possible; without that the slot made no
/// difference: 46049 against 46499 watch deliveries/s). With both, quick runs on 3 nodes:
/// 64-client creates 7100-7500 -> 9860-10500 ops/s, keep-alives 20.5k -> 26.4-27.2k, watch
/// deliveries 55-57k -> 64-68k; one-client creates 1404-1422 -> 1360-1380 (README, Benchmark).
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    builder.build()
}

/// Panic policy: a panic anywhere in a steward process, in any thread or tokio task, prints
/// std's usual message (thread, file:line, message; a backtrace under RUST_BACKTRACE) and one
/// line saying so on stderr, then aborts. Without this, tokio catches a panic in a spawned
/// task and the process lives on without that task (a node that answers but no longer
/// applies, expires leases or serves a stream): a half-alive node that no supervisor,
/// orchestrator or test sees. Aborting turns it into a crash that all of them see, and Raft
/// already copes with crashes. Chosen over `panic = "abort"` in the Cargo profiles because
/// those apply to every binary of the workspace: jepsen/ relies on unwinding to run the `Drop`
/// that kills its nodes and removes its network namespaces, and test binaries always unwind.
/// The extra line goes to stderr, not through tracing: a panic inside the subscriber (holding
/// its locks) would deadlock a hook that logs through it, leaving the half-alive node this
/// exists to prevent. Every command gets it, `serve` (and so `steward dev`'s nodes) above all.
fn abort_on_panic() {
    let print_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        print_panic(info);
        eprintln!("steward: aborting the process after a panic (panic policy, src/main.rs)");
        std::process::abort();
    }));
}

/// Logs to stderr, filtered by RUST_LOG, else by the command's default level.
fn init_tracing(default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;

    /// Set in the child process of `a_panic_in_a_spawned_task_aborts_the_process`.
    const CHILD: &str = "STEWARD_TEST_PANIC_CHILD";

    /// Re-runs this test binary with only `panicking_task_child`, which installs the panic hook
    /// and panics in a spawned tokio task: the child must die of SIGABRT, having said why.
    /// Without the hook tokio catches the panic and the child exits 0 (a half-alive process).
    #[test]
    fn a_panic_in_a_spawned_task_aborts_the_process() {
        let exe = std::env::current_exe().expect("test binary");
        let out = Command::new(exe)
            .args(["--exact", "tests::panicking_task_child", "--ignored"])
            .args(["--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .expect("run the child");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGABRT),
            "{}; stderr:\n{stderr}",
            out.status
        );
        assert!(stderr.contains("panicked at"), "{stderr}");
        assert!(stderr.contains("a background task panics"), "{stderr}");
        assert!(
            stderr.contains("aborting the process after a panic"),
            "{stderr}"
        );
    }

    #[test]
    #[ignore = "the child process of a_panic_in_a_spawned_task_aborts_the_process"]
    fn panicking_task_child() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        super::abort_on_panic();
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async {
            let task = tokio::spawn(async { panic!("a background task panics") });
            // Without the hook the panic ends only the task, and this returns Err(JoinError).
            let _ = task.await;
        });
        std::process::exit(0);
    }
}
