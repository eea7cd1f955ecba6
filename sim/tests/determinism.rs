//! The determinism proof: the same seed gives a byte-identical trace and history, on another
//! thread and after other seeds have run in the same process; another seed gives another run.

use std::time::Duration;

use sim::{run, Options};

fn short(seed: u64) -> Options {
    Options {
        duration: Duration::from_secs(2),
        ..Options::new(seed)
    }
}

#[test]
fn a_seed_replays_byte_for_byte() {
    let first = run(&short(11)).unwrap();
    // Another seed in between, so that nothing left over from one run (a thread-local, a
    // hasher's keys, a counter) can pass for determinism.
    let other = run(&short(12)).unwrap();
    let again = std::thread::spawn(|| run(&short(11)).unwrap())
        .join()
        .unwrap();
    assert!(
        first.ops > 50,
        "too few operations to prove anything: {}",
        first.ops
    );
    assert_eq!(
        first.trace_hash, again.trace_hash,
        "same seed, another trace"
    );
    assert_eq!(first.history, again.history, "same seed, another history");
    assert_eq!(first.simulated, again.simulated);
    assert_ne!(first.trace_hash, other.trace_hash, "two seeds, one trace");
    assert!(first.violations.is_empty(), "{:?}", first.violations);
}

#[test]
fn five_nodes_replay_too() {
    let opts = Options {
        nodes: 5,
        ..short(21)
    };
    let first = run(&opts).unwrap();
    let again = run(&opts).unwrap();
    assert_eq!(first.trace_hash, again.trace_hash);
    assert!(first.violations.is_empty(), "{:?}", first.violations);
}
