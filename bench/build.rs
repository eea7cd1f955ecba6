//! Compiles the etcd subset in proto/ with protox (pure Rust), so a fresh machine needs no
//! system `protoc`; clients only.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/etcd.proto", "proto/v3lock.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
