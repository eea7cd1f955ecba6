//! Seeds that found a bug, kept so that it stays fixed, each beside a run that shows the
//! simulator still catches the bug when it is put back.

use sim::{run, Options};

/// The seeds of the first hunt (1..40) that caught openraft's leader restore: a leader that
/// restarted took up its old term again and wrote new entries under log ids that a crash had
/// cut from its disk but not from its followers'. Some saw a committed entry change, some an
/// acknowledged write lost, some nodes ending with different states.
const LEADER_RESTORE: [u64; 6] = [2, 9, 17, 22, 24, 26];

#[test]
fn leader_restore_seeds_pass_with_stewards_raft_settings() {
    for seed in LEADER_RESTORE {
        let report = run(&Options::new(seed)).unwrap();
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:?}",
            report.violations
        );
    }
}

#[test]
fn the_simulator_still_catches_leader_restore() {
    let caught: Vec<u64> = LEADER_RESTORE
        .into_iter()
        .filter(|&seed| {
            let opts = Options {
                leader_restore: true,
                ..Options::new(seed)
            };
            !run(&opts).unwrap().violations.is_empty()
        })
        .collect();
    assert!(
        caught.len() >= LEADER_RESTORE.len() / 2,
        "with openraft's leader restore back on, only seeds {caught:?} of {LEADER_RESTORE:?} fail"
    );
}
