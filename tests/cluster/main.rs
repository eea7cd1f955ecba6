//! Integration tests on real multi-node clusters (see harness.rs).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a panic is a failed test (clippy.toml covers #[test] code, not helpers)"
)]

mod admission;
mod api;
mod auth;
mod backup;
mod bad_input;
mod client_limits;
mod compose;
mod console;
mod count;
mod deployments;
mod dev;
mod errors;
mod etcd;
mod etcd_lease;
mod etcd_lock;
mod etcd_watch;
mod faults;
mod harness;
mod locks;
mod membership;
mod observability;
mod operations;
mod paging;
mod pools;
mod reservations;
mod space;
mod time;
mod tls;
mod unsent;
mod upgrade;
mod walkthrough;
mod watch;
