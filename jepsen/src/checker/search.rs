//! The Wing–Gong search with memoization (Lowe's WGL, as in Porcupine) over one key's operations.
//!
//! The history is a doubly linked list of call and return entries in time order. The search walks
//! it from the head: at a call it tries to linearize that op now (apply it to the model, remove
//! both its entries from the list, start again from the head); at the return of an op that is not
//! yet linearized it is stuck — that op had to take effect before anything later — and it undoes
//! the most recent choice. A cache of (set of linearized ops, register state) pairs already
//! reached prunes revisits: what can still happen from a configuration depends only on that pair.
//!
//! Time order and ties: `a` precedes `b` iff `a.complete_ns < b.invoke_ns`. So at equal times
//! call entries sort before return entries: an op that completes at the very nanosecond another
//! is invoked counts as concurrent with it. That is the conservative reading of a tie — it can
//! only allow more orders, never flag a correct history.
//!
//! Unknown ops have no return entry (their completion is +infinity), so they never block the
//! walk and may stay unlinearized for ever: the search succeeds as soon as every required (ok) op
//! is linearized.
//!
//! Called only by `checker::check_register`. Depth-first with an explicit stack: no recursion.

use std::time::Instant;

use super::cache::{Cache, LinearizedSet};
use super::model::{SearchOp, Value};

/// How far one key's search may go before giving up with `Aborted`.
pub struct Budget {
    pub deadline: Instant,
    /// Bytes the memo cache may hold (bitsets + states + index).
    pub cache_bytes_max: usize,
}

#[derive(Debug, PartialEq, Eq)]
pub enum SearchResult {
    Linearizable,
    /// The deepest linearized prefix reached, as indexes into the ops given to `search`.
    NotLinearizable {
        longest: Vec<usize>,
    },
    Aborted {
        reason: String,
    },
}

/// The deadline is read once per this many search steps (`Instant::now` is not free).
const STEPS_PER_CLOCK_CHECK: u64 = 4096;

/// Decides whether `ops` (one key) have a linearization. `states_explored` counts the new
/// (linearized set, state) configurations reached.
pub fn search(ops: &[SearchOp], budget: &Budget, states_explored: &mut u64) -> SearchResult {
    let mut list = EntryList::new(ops);
    let mut cache = Cache::default();
    let mut linearized = LinearizedSet::new(ops);
    let mut state: Value = None;
    // The choices made so far: (op, the state before it).
    let mut stack: Vec<(usize, Value)> = Vec::new();
    let mut longest = Longest::default();
    let mut required_left = ops.iter().filter(|op| op.required()).count();
    let mut entry = list.first();
    let mut steps_to_clock_check = STEPS_PER_CLOCK_CHECK;

    loop {
        if required_left == 0 {
            return SearchResult::Linearizable;
        }
        steps_to_clock_check -= 1;
        if steps_to_clock_check == 0 {
            steps_to_clock_check = STEPS_PER_CLOCK_CHECK;
            if Instant::now() >= budget.deadline {
                return SearchResult::Aborted {
                    reason: format!("time limit reached after {} configurations", cache.len()),
                };
            }
        }
        // A required op still has its return entry in the list, so the walk meets it before the
        // end; reaching the end anyway is treated as being stuck (never as a pass).
        debug_assert!(
            entry != END,
            "walked past every return with {required_left} required ops left"
        );
        let kind = if entry == END {
            None
        } else {
            Some(list.kind(entry))
        };
        if let Some(Kind::Call(op)) = kind {
            if let Some(next_state) = ops[op].step.apply(state) {
                linearized.insert(op);
                if cache.insert(&linearized, next_state) {
                    *states_explored += 1;
                    if cache.bytes() > budget.cache_bytes_max {
                        return SearchResult::Aborted {
                            reason: format!(
                                "memo cache over {} MiB after {} configurations",
                                budget.cache_bytes_max >> 20,
                                cache.len()
                            ),
                        };
                    }
                    stack.push((op, state));
                    state = next_state;
                    list.lift(op);
                    required_left -= usize::from(ops[op].required());
                    longest.record_push(&stack);
                    entry = list.first();
                    continue;
                }
                linearized.remove(op);
            }
            entry = list.next(entry);
            continue;
        }
        // The return of an op not linearized yet (or the end): undo the latest choice.
        let Some((op, before)) = stack.pop() else {
            return SearchResult::NotLinearizable {
                longest: longest.ops,
            };
        };
        longest.record_pop(stack.len());
        list.unlift(op);
        linearized.remove(op);
        state = before;
        required_left += usize::from(ops[op].required());
        entry = list.next(list.call_entry(op));
    }
}

/// The deepest stack of choices seen, kept without copying the stack at every new depth.
#[derive(Default)]
struct Longest {
    ops: Vec<usize>,
    /// How many leading entries of the current stack equal those of `ops`.
    shared: usize,
}

impl Longest {
    /// After a push onto `stack`.
    fn record_push(&mut self, stack: &[(usize, Value)]) {
        let top = stack.len() - 1;
        let op = stack[top].0;
        if self.shared == top && self.ops.get(top).is_none_or(|&o| o == op) {
            if top == self.ops.len() {
                self.ops.push(op);
            }
            self.shared += 1;
        } else if stack.len() > self.ops.len() {
            // Only the part after the common prefix differs: copying it costs what the search
            // spent backtracking, not the whole depth.
            self.ops.truncate(self.shared);
            self.ops
                .extend(stack[self.shared..].iter().map(|&(op, _)| op));
            self.shared = stack.len();
        }
    }

    /// After a pop that left `depth` choices.
    fn record_pop(&mut self, depth: usize) {
        self.shared = self.shared.min(depth);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Call(usize),
    Return(usize),
}

/// The sentinel entry: the list is circular through it, so it is both head and end.
const END: usize = usize::MAX;

/// Call/return entries in time order, linked so that lifting an op (removing its entries) and
/// undoing it, in LIFO order, are O(1) (dancing links).
struct EntryList {
    kinds: Vec<Kind>,
    /// Indexes into `kinds`; the sentinel's links are `head` / `tail`.
    next: Vec<usize>,
    prev: Vec<usize>,
    head: usize,
    tail: usize,
    calls: Vec<usize>,
    /// `END` for unknown ops, which never return.
    returns: Vec<usize>,
}

impl EntryList {
    fn new(ops: &[SearchOp]) -> EntryList {
        // (time, returns-after-calls at equal times, op) — see the module comment for the tie rule.
        let mut timed: Vec<(u64, u8, Kind)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            timed.push((op.invoke_ns, 0, Kind::Call(i)));
            if let Some(complete_ns) = op.complete_ns {
                timed.push((complete_ns, 1, Kind::Return(i)));
            }
        }
        timed.sort_unstable_by_key(|&(time, order, kind)| {
            (
                time,
                order,
                match kind {
                    Kind::Call(i) | Kind::Return(i) => i,
                },
            )
        });
        let n = timed.len();
        let mut calls = vec![END; ops.len()];
        let mut returns = vec![END; ops.len()];
        let kinds: Vec<Kind> = timed.into_iter().map(|(_, _, kind)| kind).collect();
        for (e, kind) in kinds.iter().enumerate() {
            match *kind {
                Kind::Call(i) => calls[i] = e,
                Kind::Return(i) => returns[i] = e,
            }
        }
        let next = (0..n)
            .map(|e| if e + 1 < n { e + 1 } else { END })
            .collect();
        let prev = (0..n).map(|e| if e > 0 { e - 1 } else { END }).collect();
        let (head, tail) = if n == 0 { (END, END) } else { (0, n - 1) };
        EntryList {
            kinds,
            next,
            prev,
            head,
            tail,
            calls,
            returns,
        }
    }

    fn kind(&self, e: usize) -> Kind {
        self.kinds[e]
    }

    fn first(&self) -> usize {
        self.head
    }

    fn next(&self, e: usize) -> usize {
        self.next[e]
    }

    fn call_entry(&self, op: usize) -> usize {
        self.calls[op]
    }

    fn set_next(&mut self, e: usize, to: usize) {
        if e == END {
            self.head = to;
        } else {
            self.next[e] = to;
        }
    }

    fn set_prev(&mut self, e: usize, to: usize) {
        if e == END {
            self.tail = to;
        } else {
            self.prev[e] = to;
        }
    }

    /// Unlinks `e`, keeping its own links so that `relink` can put it back.
    fn unlink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.set_next(p, n);
        self.set_prev(n, p);
    }

    fn relink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.set_next(p, e);
        self.set_prev(n, e);
    }

    fn lift(&mut self, op: usize) {
        self.unlink(self.calls[op]);
        if self.returns[op] != END {
            self.unlink(self.returns[op]);
        }
    }

    /// Undoes `lift(op)`; valid only for the most recently lifted op still lifted.
    fn unlift(&mut self, op: usize) {
        if self.returns[op] != END {
            self.relink(self.returns[op]);
        }
        self.relink(self.calls[op]);
    }
}
