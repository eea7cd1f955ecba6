//! etcd's v3 API, as steward serves it (steward's proto/etcd/, generated in the steward
//! crate): the load generator drives etcd and steward's etcd endpoint with the same types.

pub use steward::proto::etcdserverpb;
pub use steward::proto::mvccpb;
pub use steward::proto::v3lockpb;
