//! Generated gRPC clients for the etcd subset in proto/ (see build.rs). The module names are the
//! proto packages, as the generated code refers to its siblings by them.

#[allow(clippy::all, missing_docs)]
pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}

#[allow(clippy::all, missing_docs)]
pub mod v3lockpb {
    tonic::include_proto!("v3lockpb");
}
