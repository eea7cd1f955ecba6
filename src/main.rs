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
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref(), default_filter);
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// Dependencies' INFO lines that come once per write, each muted by its directive unless
/// RUST_LOG names the crate (first field). raft-log logs "RaftLog payload cache:
/// set_last_evictable" at INFO whenever a flush completes a chunk's checkpoint: about 200 lines
/// a second per node under 64 writing clients (2553 of the 2610 lines a node logged in a 12 s
/// run), formatted and written on the WAL's flush thread, where every commit waits for it
/// (1.2% of the servers' CPU in a `--perf` profile of 64-client creates).
const CHATTY_DEPENDENCIES: &[(&str, &str)] = &[(
    "raft_log",
    "raft_log::raft_log::state_machine::payload_cache=warn",
)];

/// The log filter: RUST_LOG when it is set and valid, else `default_filter`; plus the
/// directives of `CHATTY_DEPENDENCIES` whose crate RUST_LOG does not name.
fn log_filter(rust_log: Option<&str>, default_filter: &str) -> EnvFilter {
    let mut filter = rust_log
        .and_then(|given| EnvFilter::try_new(given).ok())
        .unwrap_or_else(|| EnvFilter::new(default_filter));
    for (krate, directive) in CHATTY_DEPENDENCIES {
        if rust_log.is_some_and(|given| given.contains(krate)) {
            continue;
        }
        match directive.parse() {
            Ok(directive) => filter = filter.add_directive(directive),
            Err(err) => eprintln!("warning: log directive {directive:?} does not parse: {err}"),
        }
    }
    filter
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

    /// What the filter of `RUST_LOG` (None: unset) lets through of an INFO line from
    /// raft-log's payload cache, from raft-log's log store and from steward.
    fn logged(rust_log: Option<&str>) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Captured(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(super::log_filter(rust_log, "info"))
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "raft_log::raft_log::state_machine::payload_cache", "cache line");
            tracing::info!(target: "raft_log::raft_log::raft_log", "log line");
            tracing::info!(target: "steward::server", "steward line");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text
    }

    #[test]
    fn raft_logs_per_flush_info_line_is_muted_unless_rust_log_names_raft_log() {
        for rust_log in [
            None,
            Some("info"),
            Some("steward=info,info"),
            Some("steward=notalevel"),
        ] {
            let text = logged(rust_log);
            assert!(!text.contains("cache line"), "{rust_log:?}: {text}");
            assert!(text.contains("log line"), "{rust_log:?}: {text}");
            assert!(text.contains("steward line"), "{rust_log:?}: {text}");
        }
        let text = logged(Some("info,raft_log=info"));
        assert!(text.contains("cache line"), "{text}");
        let text = logged(Some("warn"));
        assert!(!text.contains("line"), "{text}");
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
