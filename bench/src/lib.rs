//! steward-bench: a load generator for steward (issue 5).
//!
//! `args` turns the command line into a validated `Plan`; `runner` dials one tonic channel per
//! connection (round-robin over the endpoints, so every node gets clients), then hands over to a
//! workload driver: `runner::drive` for the request/response workloads (steward's in
//! `steward_ops`, etcd's v3 API in `etcd_ops`, `etcd_txn` and `etcd_lease`), `watch` for the
//! fan-out one (etcd's side in `etcd_watch`), `dispatch` for lifecycle operations through the
//! scheduler to registered workers.
//! Each client records into its own `report::Recorder` (an HDR histogram and error counts by gRPC
//! code); the runner merges them into one `report::Report`, printed as a table or as JSON.
//! `names` holds what the run writes (its own namespace, lock names, object bodies).
//!
//! The clients speak steward's generated gRPC stubs directly, not steward's failover `Client`:
//! nothing between the loop and the wire but tonic, so the client's own cost stays small.

pub mod args;
pub mod compare;
pub mod dispatch;
pub mod etcd_lease;
pub mod etcd_ops;
pub mod etcd_proto;
pub mod etcd_txn;
pub mod etcd_watch;
pub mod names;
pub mod report;
pub mod runner;
pub mod servers;
pub mod steward_ops;
pub mod watch;
