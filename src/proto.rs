//! Generated gRPC types (see proto/ and build.rs).

#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("steward.v1");
}

#[allow(clippy::all, missing_docs)]
pub mod raft_v1 {
    tonic::include_proto!("steward.raft.v1");
}

/// The client API's encoded `FileDescriptorSet` (steward.proto and what it imports), for gRPC
/// server reflection.
pub const CLIENT_API_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/steward_client_api.bin"));
