//! The memo of the search: which (set of linearized ops, register state) configurations were
//! already reached. Used only by `search`.
//!
//! Memory is what limits the search, so a set is stored compactly. Required (ok) ops are numbered
//! in invoke order; in any configuration the search reaches, nearly all early ops are linearized
//! and nearly all late ones are not, so only the window of words between the full prefix and the
//! last non-zero word is stored, with the prefix length — a few words, not one bit per op.
//! Optional (unknown) ops may stay unlinearized for ever, which would stretch that window to the
//! whole history, so they have a bitset of their own, stored whole (`model::prepare` leaves few).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::model::{SearchOp, Value};

/// splitmix64's finaliser: a cheap, well-spread 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn state_hash(state: Value) -> u64 {
    match state {
        None => 0xA55E_A55E_A55E_A55E,
        Some(v) => mix(v as u64),
    }
}

/// Where an op's bit lives.
#[derive(Clone, Copy)]
struct Slot {
    optional: bool,
    bit: usize,
}

/// The ops linearized so far, with an incrementally maintained Zobrist hash.
pub struct LinearizedSet {
    slots: Vec<Slot>,
    required: Vec<u64>,
    required_bits: usize,
    /// Leading words of `required` with every bit set.
    full_words: usize,
    /// One past the last non-zero word of `required`.
    high_words: usize,
    optional: Vec<u64>,
    zobrist: Vec<u64>,
    hash: u64,
}

impl LinearizedSet {
    /// The empty set over `ops` (in invoke order).
    pub fn new(ops: &[SearchOp]) -> LinearizedSet {
        let (mut required_bits, mut optional_bits) = (0, 0);
        let slots: Vec<Slot> = ops
            .iter()
            .map(|op| {
                let counter = if op.required() {
                    &mut required_bits
                } else {
                    &mut optional_bits
                };
                *counter += 1;
                Slot {
                    optional: !op.required(),
                    bit: *counter - 1,
                }
            })
            .collect();
        LinearizedSet {
            slots,
            required: vec![0; required_bits.div_ceil(64)],
            required_bits,
            full_words: 0,
            high_words: 0,
            optional: vec![0; optional_bits.div_ceil(64)],
            zobrist: (0..ops.len() as u64)
                .map(|i| mix(i ^ 0x5EED_0F0B_17E5))
                .collect(),
            hash: 0,
        }
    }

    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// The value of `required[w]` when all its ops are linearized.
    fn full_mask(&self, w: usize) -> u64 {
        let tail = self.required_bits % 64;
        if w + 1 == self.required.len() && tail != 0 {
            (1 << tail) - 1
        } else {
            !0
        }
    }

    pub fn insert(&mut self, op: usize) {
        self.hash ^= self.zobrist[op];
        let Slot { optional, bit } = self.slots[op];
        let (w, mask) = (bit / 64, 1u64 << (bit % 64));
        if optional {
            self.optional[w] |= mask;
            return;
        }
        self.required[w] |= mask;
        while self.full_words < self.required.len()
            && self.required[self.full_words] == self.full_mask(self.full_words)
        {
            self.full_words += 1;
        }
        self.high_words = self.high_words.max(w + 1);
    }

    pub fn remove(&mut self, op: usize) {
        self.hash ^= self.zobrist[op];
        let Slot { optional, bit } = self.slots[op];
        let (w, mask) = (bit / 64, 1u64 << (bit % 64));
        if optional {
            self.optional[w] &= !mask;
            return;
        }
        self.required[w] &= !mask;
        self.full_words = self.full_words.min(w);
        while self.high_words > 0 && self.required[self.high_words - 1] == 0 {
            self.high_words -= 1;
        }
    }

    /// A canonical encoding: [full prefix words, window words.., optional words..]. Equal sets
    /// give equal encodings; the optional part has a fixed length, so the window's is implied.
    fn encode(&self, out: &mut Vec<u64>) {
        out.clear();
        out.push(self.full_words as u64);
        if self.high_words > self.full_words {
            out.extend_from_slice(&self.required[self.full_words..self.high_words]);
        }
        out.extend_from_slice(&self.optional);
    }
}

/// The keys of `Cache::index` are already well-mixed hashes; hashing them again is wasted work.
#[derive(Default)]
struct PremixedHasher(u64);

impl Hasher for PremixedHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

const NO_ENTRY: u32 = u32::MAX;

/// The configurations reached. Encoded sets live back to back in one arena; `index` maps a hash
/// to the newest entry with it and `chain` links the older ones.
#[derive(Default)]
pub struct Cache {
    arena: Vec<u64>,
    /// Entry `e` is `arena[starts[e]..starts[e + 1]]`.
    starts: Vec<usize>,
    states: Vec<Value>,
    chain: Vec<u32>,
    index: HashMap<u64, u32, BuildHasherDefault<PremixedHasher>>,
    scratch: Vec<u64>,
}

impl Cache {
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Heap bytes reserved (capacities, not lengths: vectors and the map grow by doubling), for
    /// the memory limit. A map slot: key, value and a control byte.
    pub fn bytes(&self) -> usize {
        self.arena.capacity() * 8
            + self.starts.capacity() * 8
            + self.states.capacity() * std::mem::size_of::<Value>()
            + self.chain.capacity() * 4
            + self.index.capacity() * (8 + 4 + 1)
    }

    /// Adds (`set`, `state`) unless present; true if it was new.
    pub fn insert(&mut self, set: &LinearizedSet, state: Value) -> bool {
        set.encode(&mut self.scratch);
        let hash = set.hash() ^ state_hash(state);
        let head = self.index.get(&hash).copied().unwrap_or(NO_ENTRY);
        let mut e = head;
        while e != NO_ENTRY {
            let (start, end) = (self.starts[e as usize], self.starts[e as usize + 1]);
            if self.states[e as usize] == state && self.arena[start..end] == self.scratch[..] {
                return false;
            }
            e = self.chain[e as usize];
        }
        let new = u32::try_from(self.len())
            .expect("cache entries fit in u32 (bounded by cache_bytes_max)");
        if self.starts.is_empty() {
            self.starts.push(0);
        }
        self.arena.extend_from_slice(&self.scratch);
        self.starts.push(self.arena.len());
        self.states.push(state);
        self.chain.push(head);
        self.index.insert(hash, new);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;
    use crate::checker::model::Step;

    fn ops(required: &[bool]) -> Vec<SearchOp> {
        required
            .iter()
            .enumerate()
            .map(|(index, &required)| SearchOp {
                index,
                step: Step::Write(Some(index as i64)),
                invoke_ns: index as u64,
                complete_ns: required.then_some(index as u64 + 1),
            })
            .collect()
    }

    /// Applies toggles of ops (insert if absent, else remove) and returns the set reached.
    fn run(set: &mut LinearizedSet, toggles: &[usize]) -> BTreeSet<usize> {
        let mut model = BTreeSet::new();
        for &op in toggles {
            if model.insert(op) {
                set.insert(op);
            } else {
                model.remove(&op);
                set.remove(op);
            }
        }
        model
    }

    proptest! {
        /// Two sets encode (and hash) the same iff they hold the same ops, whatever the order of
        /// inserts and removes that built them — the prefix/window bookkeeping included.
        #[test]
        fn encodings_are_canonical(
            required in prop::collection::vec(prop::bool::weighted(0.9), 1..200),
            a in prop::collection::vec(any::<prop::sample::Index>(), 0..400),
            b in prop::collection::vec(any::<prop::sample::Index>(), 0..400),
            prefix in 0usize..200,
        ) {
            let ops = ops(&required);
            let n = ops.len();
            // Mostly fill a prefix first, as the search does, so that full words occur.
            let fill: Vec<usize> = (0..prefix.min(n)).collect();
            let a: Vec<usize> = fill.iter().copied().chain(a.iter().map(|i| i.index(n))).collect();
            let b: Vec<usize> = fill.iter().copied().chain(b.iter().map(|i| i.index(n))).collect();
            let (mut set_a, mut set_b) = (LinearizedSet::new(&ops), LinearizedSet::new(&ops));
            let (model_a, model_b) = (run(&mut set_a, &a), run(&mut set_b, &b));
            let (mut enc_a, mut enc_b) = (vec![], vec![]);
            set_a.encode(&mut enc_a);
            set_b.encode(&mut enc_b);
            prop_assert_eq!(model_a == model_b, enc_a == enc_b);
            if model_a == model_b {
                prop_assert_eq!(set_a.hash(), set_b.hash());
            }
            // The same set built from scratch in increasing order.
            let mut fresh = LinearizedSet::new(&ops);
            model_a.iter().for_each(|&op| fresh.insert(op));
            let mut enc_fresh = vec![];
            fresh.encode(&mut enc_fresh);
            prop_assert_eq!(enc_a, enc_fresh);
        }
    }

    #[test]
    fn the_cache_tells_new_configurations_from_seen_ones() {
        let ops = ops(&[true; 130]);
        let mut set = LinearizedSet::new(&ops);
        let mut cache = Cache::default();
        (0..129).for_each(|op| set.insert(op));
        assert!(cache.insert(&set, Some(1)));
        assert!(!cache.insert(&set, Some(1)));
        assert!(cache.insert(&set, None), "same set, other state");
        set.remove(3);
        assert!(cache.insert(&set, Some(1)), "other set, same state");
        set.insert(3);
        assert!(!cache.insert(&set, Some(1)));
        assert_eq!(cache.len(), 3);
        assert!(cache.bytes() > 0);
    }
}
