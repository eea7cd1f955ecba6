//! steward's fault-injection suite: real `steward serve` processes in network namespaces, client
//! histories under faults, and checkers (see README.md, "Fault injection").
//!
//! - `netns`, `cluster`: the cluster under test (namespaces, processes, always cleaned up);
//!   `process`: each node process watched for its whole life; `life`: the verdict on exits
//!   nobody asked for and on panics and fatal errors in node logs.
//! - `nemesis`: partitions, kill -9, pause, packet loss, clock, membership, on a seeded schedule;
//!   `clock` (libfaketime settings) and `membership` (remove a member, add a fresh one) do the
//!   last two.
//! - `register`, `set`, `lockrmw`, `watch`, `operations`, `lease`, `ttl`: workloads; `etcd`: the
//!   register and lock workloads over steward's etcd v3 API (`etcd-register`, `etcd-lock`);
//!   `history`: what clients saw; `outcome`: ok / fail / unknown.
//! - `finding`: what a checked run comes to (summary, report, exit code, plot points), the
//!   same shape for every workload.
//! - `checker`: linearizability (register); `mutex`: the reader-writer mutex model (lock); `set::check`, `watch::check`, `operations::check`, `ttl::check` (TTLs never early, late by a bound); `plot`: latency over time with faults.

pub mod checker;
pub mod clock;
pub mod cluster;
pub mod etcd;
pub mod finding;
pub mod history;
pub mod lease;
pub mod life;
pub mod lockrmw;
pub mod membership;
pub mod mutex;
pub mod nemesis;
pub mod netns;
pub mod operations;
pub mod outcome;
pub mod plot;
pub mod process;
pub mod register;
pub mod rng;
pub mod set;
pub mod ttl;
pub mod watch;
