//! Simulation seams: what the deterministic simulator (`sim/`) swaps on the one thread that runs
//! a whole cluster, so that a seed decides everything.
//!
//! A node never sets them. On a thread that has not called [`enter_simulation`]:
//! - [`raft_rng`] is seeded from the operating system (openraft's election timeouts);
//! - [`blocking`] runs its work on tokio's blocking pool.
//!
//! On a simulation thread, [`raft_rng`] draws from the simulation's seed, and [`blocking`] runs
//! its work in place: a blocking-pool thread would finish at a moment the seed does not decide.
//! The simulated disk does no real I/O, so running it in place costs nothing.
//!
//! The other seams are where the crate already has a boundary: the Raft log's WAL
//! (`raft::log_store::Wal`), the peer network (openraft's `RaftNetworkFactory`), and time
//! (tokio's clock, which the simulator pauses and moves itself).

use std::cell::RefCell;
use std::io;

use rand010::rngs::SmallRng;
use rand010::{Rng, SeedableRng};

thread_local! {
    /// Set on a simulation thread: where its randomness comes from.
    static SIMULATION: RefCell<Option<SmallRng>> = const { RefCell::new(None) };
}

/// Makes the calling thread a simulation thread, its randomness drawn from `seed`.
pub fn enter_simulation(seed: u64) {
    SIMULATION.with(|s| *s.borrow_mut() = Some(SmallRng::seed_from_u64(seed)));
}

/// The calling thread is no longer a simulation thread.
pub fn leave_simulation() {
    SIMULATION.with(|s| *s.borrow_mut() = None);
}

/// Whether the calling thread is a simulation thread.
pub fn simulated() -> bool {
    SIMULATION.with(|s| s.borrow().is_some())
}

/// A generator for openraft (`raft::types::StewardRuntime::thread_rng`): seeded from the
/// simulation on a simulation thread, from the operating system elsewhere.
pub fn raft_rng() -> SmallRng {
    SIMULATION.with(|s| match s.borrow_mut().as_mut() {
        Some(sim) => SmallRng::seed_from_u64(sim.next_u64()),
        None => SmallRng::from_rng(&mut rand010::rng()),
    })
}

/// Runs `f`, which blocks (file I/O), off the async threads: on tokio's blocking pool, or in
/// place on a simulation thread.
pub async fn blocking<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    if simulated() {
        return f();
    }
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| io::Error::other(format!("{what}: blocking task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use rand010::RngExt;

    use super::*;

    fn draws() -> Vec<u64> {
        (0..4)
            .map(|_| raft_rng().random_range(0..1_000_000))
            .collect()
    }

    #[test]
    fn a_simulation_thread_draws_the_same_numbers_from_the_same_seed() {
        enter_simulation(7);
        let first = draws();
        enter_simulation(7);
        let again = draws();
        enter_simulation(8);
        let other = draws();
        leave_simulation();
        assert_eq!(first, again);
        assert_ne!(first, other);
        assert!(!simulated());
    }

    #[tokio::test]
    async fn blocking_work_runs_in_place_only_on_a_simulation_thread() {
        let here = std::thread::current().id();
        let pool = blocking("test", move || Ok(std::thread::current().id()))
            .await
            .unwrap();
        assert_ne!(pool, here);
        enter_simulation(1);
        let inline = blocking("test", move || Ok(std::thread::current().id()))
            .await
            .unwrap();
        leave_simulation();
        assert_eq!(inline, here);
    }
}
