//! Compiles proto/ with protox (pure Rust), so a fresh machine needs no system `protoc`, and
//! writes the client API's encoded descriptor set (steward.proto, errors.proto) for gRPC server
//! reflection (`$OUT_DIR/steward_client_api.bin`, served by src/server/mod.rs).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/steward.proto",
        "proto/errors.proto",
        "proto/raft.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;

    // The etcd v3 API (proto/etcd/, src/server/etcd/): keys and values as `bytes::Bytes`, so
    // reads answer from the keyspace without a copy. A put copies its key and value once, out of
    // the request's buffer (`server::etcd::owned`).
    let etcd = [
        "proto/etcd/rpc.proto",
        "proto/etcd/kv.proto",
        "proto/etcd/auth.proto",
        "proto/etcd/v3lock.proto",
        "proto/etcd/v3election.proto",
    ];
    for f in etcd {
        println!("cargo:rerun-if-changed={f}");
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .bytes(".")
        .compile_fds(protox::compile(etcd, ["proto"])?)?;

    // Only the client API: the peer service (raft.proto) is not served on the client port.
    let mut client_api = protox::Compiler::new(["proto"])?;
    client_api.include_imports(true).include_source_info(true);
    client_api.open_file("proto/steward.proto")?;
    // The reasons of refusals (google.rpc.ErrorInfo.reason), so reflection shows them too.
    client_api.open_file("proto/errors.proto")?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("steward_client_api.bin"),
        client_api.encode_file_descriptor_set(),
    )?;
    Ok(())
}
