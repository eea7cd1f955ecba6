//! `steward-bench-compare FILE [--markdown]`: the steward/etcd table from a file of
//! `steward-bench -o json` reports, one per line (see `compare` and bench/compare-etcd.sh).

use steward_bench::compare;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let markdown = args.iter().any(|a| a == "--markdown");
    let files: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let [file] = files.as_slice() else {
        eprintln!("usage: steward-bench-compare FILE [--markdown]");
        std::process::exit(2);
    };
    let table = std::fs::read_to_string(file)
        .map_err(|e| format!("{file}: {e}"))
        .and_then(|text| compare::parse_runs(&text).map_err(|e| format!("{file}: {e}")))
        .map(|runs| compare::render(&runs, markdown));
    match table {
        Ok(t) => print!("{t}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
