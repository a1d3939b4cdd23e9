//! [`AddressBloom`]: a chunk's addresses as a split-block Bloom filter, for sets too big to
//! list. The filter is the Parquet format's (`parquet::bloom_filter::Sbbf`: XXH64 with seed
//! 0, 256-bit blocks, one block per probe, eight bits per value), over each address's
//! network-order bytes (4 for IPv4, 16 for IPv6). Beside it, the smallest and largest
//! address, so a `net` (a range of addresses, which a Bloom filter cannot answer) is still
//! ruled out when it lies outside them.
//!
//! Sized to the set: [`BITS_PER_VALUE`] bits per distinct address, rounded up to whole
//! blocks (the block count need not be a power of two: the block is picked by a
//! multiplicative range reduction). An absent address then passes about 0.3 % of the time
//! (`tests::false_positives_at_50_000`).

use parquet::bloom_filter::Sbbf;

use crate::address::BloomKey;

/// Bits of filter per distinct value. Measured false positive rates on random absent
/// addresses: 0.3 % at 12 bits (the bound is 1 %, with margin for unlucky sets).
pub const BITS_PER_VALUE: usize = 12;
/// Bytes in a block of the filter.
pub const BLOCK_BYTES: usize = 32;
/// The most blocks a decoded filter may have (4 MiB): more than any chunk needs.
pub const MAX_BLOCKS: usize = 1 << 17;

/// A set of addresses as a Bloom filter with their range: no false negatives, and
/// [`BITS_PER_VALUE`] bits per value.
#[derive(Debug, Clone)]
pub(crate) struct AddressBloom<T> {
    pub(crate) lo: T,
    pub(crate) hi: T,
    filter: Sbbf,
    /// The filter's blocks as stored (little-endian words), kept for equality and encoding.
    bytes: Vec<u8>,
}

impl<T: BloomKey> AddressBloom<T> {
    /// Blocks for `n` distinct values.
    pub(crate) fn blocks_for(n: usize) -> usize {
        (n * BITS_PER_VALUE)
            .div_ceil(BLOCK_BYTES * 8)
            .clamp(1, MAX_BLOCKS)
    }

    /// Encoded bytes of the filter for `n` values (its blocks only).
    pub(crate) fn bytes_for(n: usize) -> usize {
        Self::blocks_for(n) * BLOCK_BYTES
    }

    /// The filter of `values` (not empty; any order, duplicates allowed).
    pub(crate) fn of(values: impl Iterator<Item = T> + Clone, distinct: usize) -> Self {
        Self::with_blocks(values, Self::blocks_for(distinct))
    }

    /// [`of`](Self::of) with `blocks` blocks.
    pub(crate) fn with_blocks(values: impl Iterator<Item = T> + Clone, blocks: usize) -> Self {
        let mut filter = Sbbf::new(&vec![0u8; blocks * BLOCK_BYTES]);
        let mut buf = [0u8; 16];
        let (mut lo, mut hi) = (None::<T>, None::<T>);
        for v in values {
            filter.insert(v.key(&mut buf));
            lo = Some(lo.map_or(v, |l| l.min(v)));
            hi = Some(hi.map_or(v, |h| h.max(v)));
        }
        let (lo, hi) = (lo.unwrap_or(T::ZERO), hi.unwrap_or(T::ZERO));
        Self::from_filter(lo, hi, filter)
    }

    fn from_filter(lo: T, hi: T, filter: Sbbf) -> Self {
        let mut bytes = Vec::with_capacity(filter.num_blocks() * BLOCK_BYTES);
        filter
            .write_bitset(&mut bytes)
            .expect("writing to a Vec does not fail");
        AddressBloom {
            lo,
            hi,
            filter,
            bytes,
        }
    }

    /// From decoded parts: `bytes` a whole number of blocks, `lo <= hi` (the decoder
    /// checks both).
    pub(crate) fn from_parts(lo: T, hi: T, bytes: &[u8]) -> Self {
        AddressBloom {
            lo,
            hi,
            filter: Sbbf::new(bytes),
            bytes: bytes.to_vec(),
        }
    }

    /// False only when `v` was never added.
    pub(crate) fn may_contain(&self, v: T) -> bool {
        let mut buf = [0u8; 16];
        v >= self.lo && v <= self.hi && self.filter.check(v.key(&mut buf))
    }

    /// False only when no added value lies in `lo..=hi`. A single address asks the
    /// filter; a wider range only the bounds.
    pub(crate) fn may_contain_range(&self, lo: T, hi: T) -> bool {
        if lo == hi {
            return self.may_contain(lo);
        }
        lo <= self.hi && hi >= self.lo
    }

    /// Adds values (a union with an exact set).
    pub(crate) fn insert_all(&mut self, values: &[T]) {
        let mut buf = [0u8; 16];
        for &v in values {
            self.filter.insert(v.key(&mut buf));
            self.lo = self.lo.min(v);
            self.hi = self.hi.max(v);
        }
        *self = Self::from_filter(self.lo, self.hi, self.filter.clone());
    }

    /// The union with a filter of as many blocks (`None` when their sizes differ: one
    /// cannot be laid over the other).
    pub(crate) fn union(&self, other: &AddressBloom<T>) -> Option<AddressBloom<T>> {
        if self.bytes.len() != other.bytes.len() {
            return None;
        }
        let bytes: Vec<u8> = (self.bytes.iter().zip(&other.bytes))
            .map(|(a, b)| a | b)
            .collect();
        Some(AddressBloom::from_parts(
            self.lo.min(other.lo),
            self.hi.max(other.hi),
            &bytes,
        ))
    }
}

impl<T> AddressBloom<T> {
    /// The blocks as stored.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl<T: PartialEq> PartialEq for AddressBloom<T> {
    fn eq(&self, other: &Self) -> bool {
        self.lo == other.lo && self.hi == other.hi && self.bytes == other.bytes
    }
}

impl<T: Eq> Eq for AddressBloom<T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn false_positives_at_50_000() {
        // The bound: at most 1 % false positives for an absent address, even at
        // 50,000 distinct addresses in a chunk. Random sets, random absent probes.
        let mut rng = rand::rngs::StdRng::seed_from_u64(32);
        for (n, probes) in [
            (50_000usize, 200_000usize),
            (5_000, 100_000),
            (300, 100_000),
        ] {
            let mut set: Vec<u32> = (0..n).map(|_| rng.gen()).collect();
            set.sort_unstable();
            set.dedup();
            let bloom = AddressBloom::of(set.iter().copied(), set.len());
            assert!(
                set.iter().all(|&a| bloom.may_contain(a)),
                "a false negative"
            );
            let mut tried = 0;
            let mut passed = 0;
            while tried < probes {
                let a: u32 = rng.gen();
                if set.binary_search(&a).is_ok() {
                    continue;
                }
                tried += 1;
                passed += usize::from(bloom.may_contain(a));
            }
            let rate = passed as f64 / tried as f64;
            assert!(
                rate < 0.01,
                "{n} addresses: {:.3} % false positives",
                rate * 100.0
            );
            // The same over IPv6 addresses of one /64 (a busy subnet).
            let set6: Vec<u128> = set
                .iter()
                .map(|&a| (0x2001_0db8u128 << 96) | u128::from(a))
                .collect();
            let bloom6 = AddressBloom::of(set6.iter().copied(), set6.len());
            assert!(set6.iter().all(|&a| bloom6.may_contain(a)));
            let passed6 = (0..probes)
                .map(|_| (0x2001_0db8u128 << 96) | u128::from(rng.gen::<u32>()))
                .filter(|a| set6.binary_search(a).is_err() && bloom6.may_contain(*a))
                .count();
            let rate6 = passed6 as f64 / probes as f64;
            assert!(rate6 < 0.01, "{n} IPv6 addresses: {:.3} %", rate6 * 100.0);
        }
    }

    #[test]
    fn ranges_answer_from_the_bounds() {
        let b = AddressBloom::of([10u32, 20, 30].into_iter(), 3);
        assert!(b.may_contain_range(0, 10) && b.may_contain_range(30, 99));
        assert!(!b.may_contain_range(31, 99) && !b.may_contain_range(0, 9));
        assert!(!b.may_contain(9) && !b.may_contain(31));
    }

    #[test]
    fn union_of_equal_sizes_only() {
        let a = AddressBloom::of([1u32, 2].into_iter(), 2);
        let b = AddressBloom::of([7u32].into_iter(), 2);
        let u = a.union(&b).unwrap();
        assert!([1, 2, 7].iter().all(|&v| u.may_contain(v)));
        assert_eq!((u.lo, u.hi), (1, 7));
        let big = AddressBloom::of((0..5000u32).map(|i| i * 7), 5000);
        assert!(a.union(&big).is_none());
        let mut c = a.clone();
        c.insert_all(&[100, 0]);
        assert!([0, 1, 2, 100].iter().all(|&v| c.may_contain(v)));
        assert_eq!(c.bytes().len(), a.bytes().len());
    }
}
