//! DELIBERATELY BROKEN behaviour, for the "can fail" runs of the fault-injection suite only.
//!
//! A check that has never failed proves nothing. Each bug here breaks one promise steward makes,
//! so CI can show that the jepsen/ workload meant to guard that promise says INVALID, with the
//! anomaly it should name (.ci/run, README "Fault injection").
//!
//! Compiled in only with the `unsafe-bugs` Cargo feature; even then nothing is broken until the
//! environment variable `STEWARD_UNSAFE_BUG` names bugs (comma-separated). A build without the
//! feature never reads the variable, so no production binary can be broken by its environment.

/// Names the bugs to turn on, comma-separated (`local-reads`, ...).
pub const ENV: &str = "STEWARD_UNSAFE_BUG";

/// How long after start the `panic-in-task` bug panics: after a jepsen cluster has usually
/// formed, so the crash lands mid-run.
pub const PANIC_IN_TASK_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

pub use steward_core::bugs::{active, Bug};

/// Checks `STEWARD_UNSAFE_BUG` once at start-up: an unknown name, or any name in a build without
/// the feature, is an error (a "can fail" run against the wrong binary must not pass quietly);
/// every bug turned on is logged loudly, and those that are tasks of their own are started
/// (call it inside the node's tokio runtime). Returns the bugs turned on.
pub fn check_env() -> anyhow::Result<Vec<Bug>> {
    let Ok(raw) = std::env::var(ENV) else {
        return Ok(vec![]);
    };
    let bugs = parse_list(&raw)?;
    if !bugs.is_empty() && !cfg!(feature = "unsafe-bugs") {
        anyhow::bail!(
            "{ENV}={raw}: this steward was built without the `unsafe-bugs` feature, so it cannot \
             run deliberately broken"
        );
    }
    steward_core::bugs::turn_on(&bugs);
    for bug in &bugs {
        tracing::warn!(
            bug = bug.name(),
            "DELIBERATELY BROKEN: test-only bug turned on"
        );
    }
    if active(Bug::PanicInTask) {
        tokio::spawn(panic_in_task());
    }
    Ok(bugs)
}

/// The `panic-in-task` bug: a spawned task that panics, as a bug in any background loop would.
async fn panic_in_task() {
    tokio::time::sleep(PANIC_IN_TASK_AFTER).await;
    #[allow(clippy::panic)] // The deliberate bug itself (unsafe-bugs builds only).
    {
        panic!("deliberate bug panic-in-task: a background task panics");
    }
}

fn parse_list(raw: &str) -> anyhow::Result<Vec<Bug>> {
    raw.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            Bug::parse(n).ok_or_else(|| {
                let known: Vec<&str> = Bug::ALL.iter().map(|b| b.name()).collect();
                anyhow::anyhow!("{ENV}: unknown bug {n:?} (known: {})", known.join(", "))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_unknown_names_are_refused() {
        assert_eq!(parse_list(" local-reads ,").unwrap(), vec![Bug::LocalReads]);
        let err = parse_list("local-reads,nope").unwrap_err().to_string();
        assert!(err.contains("unknown bug \"nope\""), "{err}");
    }
}
