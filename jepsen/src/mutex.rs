//! A reader-writer mutex model for lock histories: given each grant a client saw, with the
//! real-time bounds of the calls that prove it was held, find two holders that held at once
//! where the model forbids it (a WRITE holder beside any other holder; READ beside READ is
//! fine), and grants whose fencing tokens go backwards in real time. Used by the lock workload
//! (`lockrmw`); knows nothing of steward.
//!
//! What counts as "held" is conservative, so a correct lock service can never be flagged:
//! - A grant is *definitely held* from the completion of its acquire (it was granted at the
//!   latest then) until the invocation of the last call that proved it still live (its release,
//!   if that succeeded, or an acknowledged write fenced with its token): a token once expired or
//!   released never comes back, so it was live all the time between.
//! - Nothing else is assumed. A grant whose release failed or whose outcome is unknown may have
//!   ended at any time after its acquire: the TTL that bounds it runs on the leader's clock (the
//!   time stamped on the log), which a clock fault can move against the clients' clock, so the
//!   TTL is reported (`possibly_until_ns`) but never used to flag anything.
//!
//! Two definite intervals that share an instant are a violation when either grant is WRITE and
//! they belong to different processes. Tokens: a grant invoked after a WRITE grant completed (or
//! a WRITE grant invoked after any grant completed) must carry a greater token, unless it is the
//! same holder's grant refreshed (same process, same token): a smaller or shared token means the
//! earlier grant was live, unreleased, when the later was made.

use serde::Serialize;

/// The mode of a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Mode {
    Read,
    Write,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Read => "READ",
            Mode::Write => "WRITE",
        })
    }
}

/// One acknowledged acquire and what the history proves about how long it held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Grant {
    /// The client process (one holder name per process, one call at a time).
    pub process: u64,
    pub mode: Mode,
    pub token: u64,
    pub acquire_invoke_ns: u64,
    pub acquire_complete_ns: u64,
    /// The invocation of the last call that proved the grant live, if any did (see the module
    /// docs); `None`: only the acquire is known, which proves no interval.
    pub live_until_ns: Option<u64>,
    /// The latest it may have held, for reports only.
    pub possibly_until_ns: u64,
}

impl Grant {
    /// The definitely held interval, `None` when it is empty.
    pub fn definite(&self) -> Option<(u64, u64)> {
        let from = self.acquire_complete_ns;
        self.live_until_ns
            .filter(|&until| until > from)
            .map(|until| (from, until))
    }
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "process {} (token {}, {}, acquired {}..{}",
            self.process,
            self.token,
            self.mode,
            secs(self.acquire_invoke_ns),
            secs(self.acquire_complete_ns)
        )?;
        match self.definite() {
            Some((from, until)) => write!(f, ", held {}..{})", secs(from), secs(until)),
            None => write!(f, ", no held interval proven)"),
        }
    }
}

/// Nanoseconds since the run started, as seconds with microseconds.
fn secs(ns: u64) -> String {
    format!(
        "{}.{:06}s",
        ns / 1_000_000_000,
        (ns % 1_000_000_000) / 1_000
    )
}

/// Two grants that definitely held at once where the model forbids it.
#[derive(Clone, Debug, Serialize)]
pub struct Overlap {
    pub first: Grant,
    pub second: Grant,
    /// How long both definitely held.
    pub overlap_ns: u64,
}

impl Overlap {
    /// "WRITE" when both are WRITE holders, else "READ and WRITE".
    pub fn kind(&self) -> &'static str {
        if self.first.mode == self.second.mode {
            "overlapping WRITE holders"
        } else {
            "overlapping READ and WRITE holders"
        }
    }
}

impl std::fmt::Display for Overlap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} and {}, both held for {:.3} ms",
            self.kind(),
            self.first,
            self.second,
            self.overlap_ns as f64 / 1e6
        )
    }
}

/// A grant whose token is not above that of a grant that completed before it was invoked.
#[derive(Clone, Debug, Serialize)]
pub struct TokenInversion {
    pub earlier: Grant,
    pub later: Grant,
}

impl std::fmt::Display for TokenInversion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "token not increasing: {} was invoked after {} completed",
            self.later, self.earlier
        )
    }
}

/// What the mutex model found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MutexReport {
    pub grants: usize,
    /// Grants with a non-empty definitely held interval.
    pub proven: usize,
    pub overlaps: Vec<Overlap>,
    pub token_inversions: Vec<TokenInversion>,
}

impl MutexReport {
    pub fn valid(&self) -> bool {
        self.overlaps.is_empty() && self.token_inversions.is_empty()
    }
}

/// Checks `grants` against the reader-writer mutex model (see the module docs).
pub fn check(grants: &[Grant]) -> MutexReport {
    MutexReport {
        grants: grants.len(),
        proven: grants.iter().filter(|g| g.definite().is_some()).count(),
        overlaps: overlaps(grants),
        token_inversions: token_inversions(grants),
    }
}

/// Every pair of definite intervals that share an instant, with a WRITE among them, from two
/// processes. A sweep in start order: only the intervals still open are compared, so a
/// correct history (few open at once) costs O(n log n).
fn overlaps(grants: &[Grant]) -> Vec<Overlap> {
    let mut held: Vec<(u64, u64, &Grant)> = grants
        .iter()
        .filter_map(|g| g.definite().map(|(from, until)| (from, until, g)))
        .collect();
    held.sort_by_key(|&(from, until, g)| (from, until, g.process, g.token));
    let mut open: Vec<(u64, &Grant)> = vec![];
    let mut found = vec![];
    for (from, until, g) in held {
        open.retain(|&(other_until, _)| other_until > from);
        for &(other_until, other) in &open {
            let excluded = g.mode == Mode::Write || other.mode == Mode::Write;
            if excluded && g.process != other.process {
                found.push(Overlap {
                    first: other.clone(),
                    second: g.clone(),
                    overlap_ns: other_until.min(until) - from,
                });
            }
        }
        open.push((until, g));
    }
    found
}

/// Grants invoked after a grant they exclude completed, whose token is not greater (see the
/// module docs). In invoke order, against the greatest token completed before, per mode.
fn token_inversions(grants: &[Grant]) -> Vec<TokenInversion> {
    let mut by_invoke: Vec<&Grant> = grants.iter().collect();
    by_invoke.sort_by_key(|g| (g.acquire_invoke_ns, g.process, g.token));
    let mut by_complete: Vec<&Grant> = grants.iter().collect();
    by_complete.sort_by_key(|g| (g.acquire_complete_ns, g.process, g.token));
    let mut completed = by_complete.into_iter().peekable();
    // The grant with the greatest token among those completed so far, per mode.
    let (mut top_write, mut top_read): (Option<&Grant>, Option<&Grant>) = (None, None);
    let mut found = vec![];
    for later in by_invoke {
        while let Some(g) = completed.next_if(|g| g.acquire_complete_ns < later.acquire_invoke_ns) {
            let top = match g.mode {
                Mode::Write => &mut top_write,
                Mode::Read => &mut top_read,
            };
            if top.is_none_or(|t| g.token > t.token) {
                *top = Some(g);
            }
        }
        let against = match later.mode {
            Mode::Write => [top_write, top_read],
            Mode::Read => [top_write, None],
        };
        let inverted = against.into_iter().flatten().find(|earlier| {
            let refresh = earlier.process == later.process && earlier.token == later.token;
            later.token <= earlier.token && !refresh
        });
        if let Some(earlier) = inverted {
            found.push(TokenInversion {
                earlier: earlier.clone(),
                later: later.clone(),
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grant acquired over `acquired` and proven live until `until`.
    fn grant(process: u64, mode: Mode, token: u64, acquired: (u64, u64), until: u64) -> Grant {
        Grant {
            process,
            mode,
            token,
            acquire_invoke_ns: acquired.0,
            acquire_complete_ns: acquired.1,
            live_until_ns: Some(until),
            possibly_until_ns: until + 1,
        }
    }

    #[test]
    fn sequential_writers_pass() {
        let grants = [
            grant(1, Mode::Write, 1, (0, 10), 20),
            grant(2, Mode::Write, 2, (5, 21), 30),
            grant(1, Mode::Write, 3, (25, 31), 40),
        ];
        let report = check(&grants);
        assert!(report.valid(), "{report:?}");
        assert_eq!(report.proven, 3);
    }

    #[test]
    fn overlapping_writers_are_flagged_with_both_holders() {
        const MS: u64 = 1_000_000;
        let grants = [
            grant(1, Mode::Write, 1, (0, 10 * MS), 20 * MS),
            grant(2, Mode::Write, 2, (5 * MS, 15 * MS), 1_030 * MS),
        ];
        let report = check(&grants);
        assert_eq!(report.overlaps.len(), 1, "{report:?}");
        let o = &report.overlaps[0];
        assert_eq!((o.first.process, o.second.process), (1, 2));
        assert_eq!(o.overlap_ns, 5 * MS);
        assert_eq!(
            o.to_string(),
            "overlapping WRITE holders: \
             process 1 (token 1, WRITE, acquired 0.000000s..0.010000s, held 0.010000s..0.020000s) \
             and process 2 (token 2, WRITE, acquired 0.005000s..0.015000s, held 0.015000s..1.030000s), \
             both held for 5.000 ms"
        );
        // Touching intervals share no instant.
        let touching = [
            grant(1, Mode::Write, 1, (0, 10), 20),
            grant(2, Mode::Write, 2, (5, 20), 30),
        ];
        assert!(check(&touching).valid());
    }

    #[test]
    fn readers_share_but_not_with_a_writer() {
        let readers = [
            grant(1, Mode::Read, 1, (0, 10), 30),
            grant(2, Mode::Read, 2, (0, 12), 25),
            grant(3, Mode::Write, 3, (26, 31), 40),
        ];
        assert!(check(&readers).valid(), "{:?}", check(&readers));
        let mixed = [
            grant(1, Mode::Read, 1, (0, 10), 30),
            grant(3, Mode::Write, 2, (5, 20), 40),
        ];
        let report = check(&mixed);
        assert_eq!(report.overlaps.len(), 1, "{report:?}");
        assert_eq!(
            report.overlaps[0].kind(),
            "overlapping READ and WRITE holders"
        );
        // A long reader open across several others is still compared with each.
        let long = [
            grant(1, Mode::Read, 1, (0, 1), 100),
            grant(2, Mode::Read, 2, (0, 2), 3),
            grant(3, Mode::Write, 4, (40, 50), 60),
        ];
        assert_eq!(check(&long).overlaps.len(), 1);
    }

    #[test]
    fn no_proven_interval_no_overlap() {
        // The second's release failed and it wrote nothing: it may have expired at once.
        let mut unproven = grant(2, Mode::Write, 2, (5, 15), 0);
        unproven.live_until_ns = None;
        let grants = [grant(1, Mode::Write, 1, (0, 10), 20), unproven];
        let report = check(&grants);
        assert!(report.overlaps.is_empty(), "{report:?}");
        assert_eq!(report.proven, 1);
    }

    #[test]
    fn tokens_must_grow_after_a_completed_exclusive_grant() {
        // Token 5 granted after token 7 completed: 5 was live when 7 was made.
        let back = [
            grant(1, Mode::Write, 7, (0, 10), 12),
            grant(2, Mode::Write, 5, (20, 30), 40),
        ];
        let report = check(&back);
        assert_eq!(report.token_inversions.len(), 1, "{report:?}");
        assert!(report.token_inversions[0]
            .to_string()
            .starts_with("token not increasing: process 2 (token 5"));
        // The same holder's grant refreshed (its release was lost): fine.
        let refresh = [
            grant(1, Mode::Write, 7, (0, 10), 12),
            grant(1, Mode::Write, 7, (20, 30), 40),
        ];
        assert!(check(&refresh).valid());
        // Another process with the same token: not fine.
        let shared = [
            grant(1, Mode::Write, 7, (0, 10), 12),
            grant(2, Mode::Write, 7, (20, 30), 40),
        ];
        assert_eq!(check(&shared).token_inversions.len(), 1);
        // Concurrent acquires may complete in any token order.
        let concurrent = [
            grant(1, Mode::Write, 7, (0, 30), 32),
            grant(2, Mode::Write, 5, (5, 8), 9),
        ];
        assert!(check(&concurrent).valid());
        // READ after READ with an older token: a reader refreshed while another joined.
        let readers = [
            grant(1, Mode::Read, 7, (0, 10), 50),
            grant(2, Mode::Read, 5, (20, 30), 40),
        ];
        assert!(check(&readers).token_inversions.is_empty());
        // WRITE after READ with an older token: the writer was live when the reader joined.
        let writer = [
            grant(1, Mode::Read, 7, (0, 10), 12),
            grant(2, Mode::Write, 5, (20, 30), 40),
        ];
        assert_eq!(check(&writer).token_inversions.len(), 1);
    }
}
