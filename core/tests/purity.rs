//! The core stays pure, and the compiler and this test keep it so.
//!
//! `steward-core` is what every replica runs in log order: if any of it read a clock, the disk,
//! the network, the environment or a random source, replicas could part ways. The crate's
//! dependency list is the first fence (it cannot name tokio, tonic or openraft); these tests are
//! the second: no crate that does I/O or keeps time may enter its dependency tree, and no source
//! file may call the standard library's clocks, files, sockets, threads, environment or process.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates that would let the core do I/O, keep time, draw randomness or run async code.
const FORBIDDEN_CRATES: &[&str] = &[
    "tokio",
    "tonic",
    "openraft",
    "redb",
    "mio",
    "socket2",
    "hyper",
    "h2",
    "axum",
    "tower",
    "futures",
    "rand",
    "getrandom",
    "tracing",
    "time",
    "chrono",
    "libc",
];

/// Standard-library paths the core's sources may not use (the clock, files, sockets, threads,
/// the environment, processes). The bugs switch's `OnceLock` is set by the node, not read here.
const FORBIDDEN_PATHS: &[&str] = &[
    "SystemTime::now",
    "Instant::now",
    "std::fs",
    "std::net",
    "std::thread",
    "std::env",
    "std::process",
    "std::io::stdin",
];

#[test]
fn no_impure_crate_in_the_dependency_tree() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["--package", "steward-core"])
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(
        names.contains(&"steward-core") && names.contains(&"serde_json"),
        "unexpected cargo tree output: {tree}"
    );
    let bad: Vec<&&str> = names
        .iter()
        .filter(|name| FORBIDDEN_CRATES.contains(name))
        .collect();
    assert!(bad.is_empty(), "steward-core depends on {bad:?}:\n{tree}");
}

#[test]
fn no_source_file_uses_a_clock_file_socket_thread_or_environment() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    )
    .expect("list the core's sources");
    assert!(files.len() > 10, "found only {files:?}");
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for path in FORBIDDEN_PATHS {
                if code.contains(path) {
                    found.push(format!("{}:{}: {path}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "impure calls in the core:\n{}",
        found.join("\n")
    );
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}
