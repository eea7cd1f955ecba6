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

/// Under its package's name too, as the generated code of the services that import it
/// (v3lockpb, v3electionpb) names it.
pub use etcd as etcdserverpb;

/// etcd's auth types (proto/etcd/auth.proto).
#[allow(clippy::all, missing_docs)]
pub mod authpb {
    tonic::include_proto!("authpb");
}

/// etcd's key-value pair and event (proto/etcd/kv.proto).
#[allow(clippy::all, missing_docs)]
pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}

/// etcd's Lock service (proto/etcd/v3lock.proto).
#[allow(clippy::all, missing_docs)]
pub mod v3lockpb {
    tonic::include_proto!("v3lockpb");
}

/// etcd's Election service (proto/etcd/v3election.proto).
#[allow(clippy::all, missing_docs)]
pub mod v3electionpb {
    tonic::include_proto!("v3electionpb");
}

/// The client API's encoded `FileDescriptorSet` (steward.proto and what it imports), for gRPC
/// server reflection.
pub const CLIENT_API_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/steward_client_api.bin"));
