//! Generated gRPC types (see proto/ and build.rs).

#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("steward.v1");
}

#[allow(clippy::all, missing_docs)]
pub mod raft_v1 {
    tonic::include_proto!("steward.raft.v1");
}

/// etcd's v3 API (proto/etcd/rpc.proto), served by src/server/etcd/.
#[allow(clippy::all, missing_docs)]
pub mod etcd {
    tonic::include_proto!("etcdserverpb");
}

/// etcd's key-value pair and event (proto/etcd/kv.proto).
#[allow(clippy::all, missing_docs)]
pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}

/// The client API's encoded `FileDescriptorSet` (steward.proto and what it imports), for gRPC
/// server reflection.
pub const CLIENT_API_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/steward_client_api.bin"));
