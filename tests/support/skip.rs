//! Skipping a test that cannot run here, without skipping silently. One file shared by the
//! test crates (tests/cluster, jepsen/tests, bench/tests) through `#[path]`, since they are
//! separate packages' test targets and a test helper does not belong in a library.

use std::io::Write;
use std::os::fd::AsFd;

/// Whether this is a CI run: `CI` set to anything but empty, `0` or `false` (CI runners set
/// `CI=true`; `.ci/run` exports `CI=1`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// For a test that cannot run its real part here (`why`), called before it returns early. In
/// CI that fails the test: nothing may pass there without having run. Elsewhere it prints
/// `SKIPPED: <test>: <why>` straight to the process's standard error, which libtest does not
/// capture (it captures `print!`/`eprint!`), so a plain `cargo test` shows the line.
pub fn skip_or_fail(test: &str, why: &str) {
    assert!(!in_ci(), "{test}: cannot run in CI (CI is set): {why}");
    let line = format!("SKIPPED: {test}: {why}\n");
    if let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() {
        let _ = std::fs::File::from(fd).write_all(line.as_bytes());
    }
}
