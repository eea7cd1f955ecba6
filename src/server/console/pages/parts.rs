//! What several pages show the same way: times since and until (live in the script), durations
//! as people write them, and the leader changes the cluster page lists.

use maud::{html, Markup};

/// A change of leader, as this node saw it.
#[derive(Clone, Debug)]
pub struct LeaderChange {
    pub term: u64,
    pub leader: Option<u64>,
    pub at: std::time::Instant,
}

/// The time since `then_ms` (cluster ms), counting up in the script.
pub(super) fn since(then_ms: u64, now_ms: u64) -> Markup {
    html! {
        span.since data-since=(then_ms) { (ago(now_ms, then_ms)) }
    }
}

/// A TTL counting down: the text at render time, and the cluster time it ends at for the script.
pub(super) fn ttl(until_ms: u64, now_ms: u64) -> Markup {
    html! {
        span.ttl data-until=(until_ms) { (duration(until_ms.saturating_sub(now_ms))) }
    }
}

/// How long ago `then` was, at `now` (cluster ms), as a person reads it: `3s`, `4m10s`, `2h5m`.
pub(super) fn ago(now: u64, then: u64) -> String {
    duration(now.saturating_sub(then))
}

/// A duration in ms as `950ms`, `12.5s`, `4m10s`, `2h5m`, `3d4h`.
pub(super) fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{}.{}s", s, (ms % 1000) / 100),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        let cases = [
            (0, "0ms"),
            (950, "950ms"),
            (1_000, "1.0s"),
            (12_549, "12.5s"),
            (250_000, "4m10s"),
            (7_500_000, "2h5m"),
            (273_600_000, "3d4h"),
        ];
        for (ms, want) in cases {
            assert_eq!(duration(ms), want, "{ms} ms");
        }
        assert_eq!(ago(5_000, 7_000), "0ms", "a time ahead of now is now");
    }
}
