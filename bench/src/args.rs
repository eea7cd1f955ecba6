//! The command line of `steward-bench` and its validation into a [`Plan`]. Pure: no I/O, so every
//! rule is unit-tested here; `main` parses, calls [`plan`], and hands the plan to the runner.

use std::time::Duration;

use clap::{Parser, ValueEnum};

/// The dev cluster's client endpoints (`steward dev`).
pub const DEFAULT_ENDPOINTS: &str = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003";
/// A local 3-node etcd's client endpoints (as in etcd's own Procfile and bench/compare-etcd.sh).
pub const DEFAULT_ETCD_ENDPOINTS: &str = "127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379";
/// Run time when neither `--duration` nor `--total` is given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Clients above this are a typo, not a benchmark (each is a task and a request in flight).
pub const CLIENTS_MAX: usize = 100_000;
/// The most `--workers` (steward's default `operations.workers_max`).
pub const WORKERS_MAX: usize = 10_000;
/// The largest `--value-size`: steward's default object limit (1 MiB) less room for the envelope.
pub const VALUE_SIZE_MAX: usize = 1_000_000;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "steward-bench",
    version,
    about = "Load generator for steward: N concurrent clients over M gRPC connections to all \
             given nodes; prints ops/s, latency percentiles and errors by gRPC code"
)]
pub struct Cli {
    /// What each client does in a loop (see the README's benchmark section).
    #[arg(value_enum)]
    pub workload: Workload,
    /// What to load: steward, or etcd (v3 gRPC API) with the matching operations, for comparison.
    #[arg(long, value_enum, default_value_t = Target::Steward)]
    pub target: Target,
    /// Client endpoints, comma-separated (`host:port` or `http://host:port`). Default: the
    /// `steward dev` cluster (127.0.0.1:7001-7003), or with `--target etcd` 127.0.0.1:2379,
    /// 127.0.0.1:22379 and 127.0.0.1:32379.
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Option<Vec<String>>,
    /// Concurrent clients (for `watch`: watchers; one more client writes).
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// gRPC connections, spread round-robin over the endpoints; clients share them round-robin.
    /// Default: min(clients, 3 x endpoints).
    #[arg(long)]
    pub conns: Option<usize>,
    /// Run for this long (e.g. `10s`, `1m`). Default 10s.
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "total")]
    pub duration: Option<Duration>,
    /// Run this many operations in all instead (for `watch`: this many writes).
    #[arg(long)]
    pub total: Option<u64>,
    /// Before the measured run, every client repeats its operation this long (e.g. `2s`),
    /// recorded apart and left out of the figures; the clock starts when every client has
    /// finished its warm-up. Not for `watch` and `dispatch`.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub warmup: Option<Duration>,
    /// Bytes of payload per object (the `data` string in its spec).
    #[arg(long, default_value_t = 256)]
    pub value_size: usize,
    /// Server processes on this machine (comma-separated pids) whose CPU time and peak RSS
    /// during the run go into the report (Linux /proc).
    #[arg(long, value_delimiter = ',')]
    pub server_pids: Vec<u32>,
    /// `dispatch`: registered workers that receive the operations (capacity: their share of
    /// the clients).
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// `table` for people, `json` (exactly one object on stdout) for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Create objects with distinct names.
    Create,
    /// Update one pre-created object per client, each with its resourceVersion precondition.
    Update,
    /// `--target etcd` only: one Txn over the client's own keys: if each key's mod_revision is
    /// the one this client last wrote, Put them all, else Range them all (Kubernetes'
    /// OptimisticPut, over several keys).
    Txn,
    /// Linearizable get (ReadIndex) of one pre-created object per client.
    Get,
    /// Serializable get (local read on whichever node the client talks to).
    GetSerializable,
    /// List the 100 labelled objects (of 200) with a label selector.
    List,
    /// WRITE acquire + release, each client on its own lock name.
    Lock,
    /// WRITE acquire + release, all clients on one lock name (waiting in line).
    LockContended,
    /// `--target etcd` only: every client holds a lease and sends KeepAlive on its own
    /// LeaseKeepAlive stream; an operation is one keep-alive answered.
    LeaseKeepAlive,
    /// One writer creates, every client watches: latency from send to each watcher's receipt.
    Watch,
    /// Every client submits lifecycle operations; `--workers` workers receive them: latency from
    /// the submit's send to the worker's receipt of the assignment.
    Dispatch,
}

impl Workload {
    /// The name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Create => "create",
            Workload::Update => "update",
            Workload::Txn => "txn",
            Workload::Get => "get",
            Workload::GetSerializable => "get-serializable",
            Workload::List => "list",
            Workload::Lock => "lock",
            Workload::LockContended => "lock-contended",
            Workload::LeaseKeepAlive => "lease-keep-alive",
            Workload::Watch => "watch",
            Workload::Dispatch => "dispatch",
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Steward,
    /// etcd's v3 API: `create` a Txn that Puts if the key's create_revision is 0 (absent),
    /// `update` a Txn comparing the key's mod_revision then Put, `txn` a Txn over several keys,
    /// `get` a Range (`serializable` for get-serializable), `list` a Range over the prefix of the
    /// 200 list keys with the label filter in the client, `lock` Lock (under a lease per client)
    /// and Unlock, `lease-keep-alive` KeepAlive on a LeaseKeepAlive stream, `watch` a Watch of
    /// the run's prefix. Values are the documents steward stores for the same objects (see
    /// `etcd_ops`). Steward's own nodes serve this API too: give their client ports as
    /// `--endpoints` to drive steward through it.
    Etcd,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Steward => "steward",
            Target::Etcd => "etcd",
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

/// When the clients stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Start no operation after this much time.
    After(Duration),
    /// Start this many operations in all (shared by the clients).
    Total(u64),
}

/// A validated run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub workload: Workload,
    pub target: Target,
    /// `http://host:port`, in the order given.
    pub endpoints: Vec<String>,
    pub clients: usize,
    pub conns: usize,
    pub stop: Stop,
    /// `--warmup`: unmeasured time before the measured run; None for none.
    pub warmup: Option<Duration>,
    pub value_size: usize,
    pub server_pids: Vec<u32>,
    pub output: Output,
    /// `dispatch`: workers receiving the operations.
    pub workers: usize,
}

impl Plan {
    /// The connection client `client` uses: round-robin, so with the default `conns` the clients
    /// of each endpoint differ by at most one.
    pub fn conn_of_client(&self, client: usize) -> usize {
        client % self.conns
    }

    /// The endpoint connection `conn` goes to: round-robin over the endpoints.
    pub fn endpoint_of_conn(&self, conn: usize) -> &str {
        &self.endpoints[conn % self.endpoints.len()]
    }
}

/// Checks the command line and fills in the defaults.
pub fn plan(cli: &Cli) -> Result<Plan, String> {
    if cli.target == Target::Etcd && cli.workload == Workload::Dispatch {
        return Err("--target etcd: etcd has no lifecycle operations to dispatch".into());
    }
    if cli.target == Target::Steward
        && matches!(cli.workload, Workload::Txn | Workload::LeaseKeepAlive)
    {
        return Err(format!(
            "--target steward: {} is an etcd v3 workload; use --target etcd (at steward's \
             client ports it drives steward's etcd endpoint)",
            cli.workload.name()
        ));
    }
    if cli.workers == 0 || cli.workers > WORKERS_MAX {
        return Err(format!("--workers: between 1 and {WORKERS_MAX}"));
    }
    let default = match cli.target {
        Target::Steward => DEFAULT_ENDPOINTS,
        Target::Etcd => DEFAULT_ETCD_ENDPOINTS,
    };
    let given = cli.endpoints.clone();
    let endpoints = given
        .unwrap_or_else(|| default.split(',').map(str::to_string).collect())
        .iter()
        .map(|e| normalize_endpoint(e))
        .collect::<Result<Vec<_>, _>>()?;
    if endpoints.is_empty() {
        return Err("--endpoints: give at least one host:port".into());
    }
    if cli.clients == 0 || cli.clients > CLIENTS_MAX {
        return Err(format!("--clients: between 1 and {CLIENTS_MAX}"));
    }
    let conns = cli
        .conns
        .unwrap_or_else(|| cli.clients.min(3 * endpoints.len()));
    if conns == 0 || conns > cli.clients {
        return Err(format!(
            "--conns: between 1 and --clients ({}); more connections than clients would sit idle",
            cli.clients
        ));
    }
    let stop = match (cli.duration, cli.total) {
        (_, Some(0)) => return Err("--total: at least 1".into()),
        (_, Some(n)) => Stop::Total(n),
        (Some(d), None) if d.is_zero() => return Err("--duration: more than 0".into()),
        (Some(d), None) => Stop::After(d),
        (None, None) => Stop::After(DEFAULT_DURATION),
    };
    let warmup = cli.warmup.filter(|w| !w.is_zero());
    if warmup.is_some() && matches!(cli.workload, Workload::Watch | Workload::Dispatch) {
        return Err(format!(
            "--warmup: not available for {} (only for the request/response workloads)",
            cli.workload.name()
        ));
    }
    if cli.value_size == 0 || cli.value_size > VALUE_SIZE_MAX {
        return Err(format!(
            "--value-size: between 1 and {VALUE_SIZE_MAX} bytes"
        ));
    }
    Ok(Plan {
        workload: cli.workload,
        target: cli.target,
        endpoints,
        clients: cli.clients,
        conns,
        stop,
        warmup,
        value_size: cli.value_size,
        server_pids: cli.server_pids.clone(),
        output: cli.output,
        workers: cli.workers,
    })
}

/// `host:port` -> `http://host:port`; `http://` kept; anything else refused (no TLS yet).
fn normalize_endpoint(e: &str) -> Result<String, String> {
    let e = e.trim();
    let rest = e.strip_prefix("http://").unwrap_or(e);
    if rest.contains("://") {
        return Err(format!(
            "--endpoints: {e:?}: only plain http:// is supported"
        ));
    }
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
            Ok(format!("http://{rest}"))
        }
        _ => Err(format!("--endpoints: {e:?} is not host:port")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        let mut argv = vec!["steward-bench"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).expect("parses")
    }

    #[test]
    fn defaults() {
        let p = plan(&cli(&["create"])).unwrap();
        assert_eq!(p.workload, Workload::Create);
        assert_eq!(
            p.endpoints,
            [
                "http://127.0.0.1:7001",
                "http://127.0.0.1:7002",
                "http://127.0.0.1:7003"
            ]
        );
        assert_eq!((p.clients, p.conns, p.value_size), (64, 9, 256));
        assert_eq!(p.stop, Stop::After(DEFAULT_DURATION));
        assert_eq!(p.output, Output::Table);
        assert_eq!(p.target, Target::Steward);
    }

    #[test]
    fn etcd_has_its_own_default_endpoints_and_no_dispatch() {
        let p = plan(&cli(&["lock", "--target", "etcd"])).unwrap();
        assert_eq!(p.target, Target::Etcd);
        assert_eq!(p.endpoints[0], "http://127.0.0.1:2379");
        assert_eq!(p.endpoints.len(), 3);
        let p = plan(&cli(&["get", "--target", "etcd", "--endpoints", "h:1"])).unwrap();
        assert_eq!(p.endpoints, ["http://h:1"]);
        let err = plan(&cli(&["dispatch", "--target", "etcd"])).unwrap_err();
        assert!(err.starts_with("--target"), "{err}");
        let err = plan(&cli(&["dispatch", "--workers", "0"])).unwrap_err();
        assert!(err.starts_with("--workers"), "{err}");
        assert_eq!(plan(&cli(&["dispatch"])).unwrap().workers, 8);
    }

    #[test]
    fn etcd_only_workloads_are_refused_for_steward_and_watch_runs_on_both() {
        for w in ["txn", "lease-keep-alive"] {
            let p = plan(&cli(&[w, "--target", "etcd", "--endpoints", "h:7001"])).unwrap();
            assert_eq!((p.target, p.workload.name()), (Target::Etcd, w));
            let err = plan(&cli(&[w])).unwrap_err();
            assert!(err.starts_with("--target steward: "), "{err}");
            assert!(err.contains(w) && err.contains("--target etcd"), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
        for target in ["steward", "etcd"] {
            let p = plan(&cli(&["watch", "--target", target])).unwrap();
            assert_eq!(p.workload, Workload::Watch);
            let err = plan(&cli(&["watch", "--target", target, "--warmup", "1s"])).unwrap_err();
            assert!(err.starts_with("--warmup"), "{err}");
        }
        // Request/response on a stream: the common driver, so it warms up like the others.
        let p = plan(&cli(&[
            "lease-keep-alive",
            "--target",
            "etcd",
            "--warmup",
            "1s",
        ]))
        .unwrap();
        assert_eq!(p.warmup, Some(Duration::from_secs(1)));
    }

    #[test]
    fn workload_names_round_trip() {
        for w in Workload::value_variants() {
            assert_eq!(cli(&[w.name()]).workload, *w);
        }
    }

    #[test]
    fn conns_default_to_at_most_the_clients() {
        assert_eq!(plan(&cli(&["get", "--clients", "1"])).unwrap().conns, 1);
        assert_eq!(plan(&cli(&["get", "--clients", "5"])).unwrap().conns, 5);
        let one = cli(&["get", "--endpoints", "a:1", "--clients", "256"]);
        assert_eq!(plan(&one).unwrap().conns, 3);
    }

    #[test]
    fn clients_spread_evenly_over_endpoints() {
        for clients in [1usize, 2, 3, 16, 64, 100, 256] {
            let p = plan(&cli(&["get", "--clients", &clients.to_string()])).unwrap();
            let mut per_endpoint = [0usize; 3];
            for c in 0..clients {
                let ep = p.endpoint_of_conn(p.conn_of_client(c));
                let i = p.endpoints.iter().position(|e| e == ep).unwrap();
                per_endpoint[i] += 1;
            }
            let (lo, hi) = (per_endpoint.iter().min(), per_endpoint.iter().max());
            assert!(
                hi.unwrap() - lo.unwrap() <= 1,
                "{clients}: {per_endpoint:?}"
            );
        }
    }

    #[test]
    fn duration_or_total() {
        let p = plan(&cli(&["create", "--duration", "1500ms"])).unwrap();
        assert_eq!(p.stop, Stop::After(Duration::from_millis(1500)));
        let p = plan(&cli(&["create", "--total", "1000"])).unwrap();
        assert_eq!(p.stop, Stop::Total(1000));
        let both = [
            "steward-bench",
            "create",
            "--total",
            "1",
            "--duration",
            "1s",
        ];
        assert!(Cli::try_parse_from(both).is_err());
    }

    #[test]
    fn warmup_is_optional_and_refused_where_no_driver_has_one() {
        assert_eq!(plan(&cli(&["get"])).unwrap().warmup, None);
        assert_eq!(plan(&cli(&["get", "--warmup", "0s"])).unwrap().warmup, None);
        let p = plan(&cli(&["lock", "--warmup", "2s", "--total", "10"])).unwrap();
        assert_eq!(p.warmup, Some(Duration::from_secs(2)));
        for w in ["watch", "dispatch"] {
            let err = plan(&cli(&[w, "--warmup", "1s"])).unwrap_err();
            assert!(err.starts_with("--warmup"), "{err}");
        }
    }

    #[test]
    fn endpoints_are_normalized() {
        let p = plan(&cli(&["get", "--endpoints", "http://h:1, h:2,[::1]:3"])).unwrap();
        assert_eq!(p.endpoints, ["http://h:1", "http://h:2", "http://[::1]:3"]);
    }

    #[test]
    fn bad_arguments_name_their_flag() {
        let cases: &[(&[&str], &str)] = &[
            (&["get", "--clients", "0"], "--clients"),
            (&["get", "--clients", "100001"], "--clients"),
            (&["get", "--clients", "2", "--conns", "3"], "--conns"),
            (&["get", "--conns", "0"], "--conns"),
            (&["get", "--total", "0"], "--total"),
            (&["get", "--duration", "0s"], "--duration"),
            (&["get", "--value-size", "0"], "--value-size"),
            (&["get", "--value-size", "1000001"], "--value-size"),
            (&["get", "--endpoints", "nohost"], "--endpoints"),
            (&["get", "--endpoints", "h:99999"], "--endpoints"),
            (&["get", "--endpoints", "https://h:1"], "--endpoints"),
        ];
        for (args, flag) in cases {
            let err = plan(&cli(args)).expect_err(&format!("{args:?} is refused"));
            assert!(err.starts_with(flag), "{args:?}: {err}");
        }
    }
}
