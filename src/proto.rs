//! Generated gRPC types (see proto/ and build.rs).

#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("steward.v1");
}

#[allow(clippy::all, missing_docs)]
pub mod raft_v1 {
    tonic::include_proto!("steward.raft.v1");
}
