//! [`SummaryBuilder`]: a file's summary, the middle level of the index (chunk filter, file
//! summary, store catalog): one [`ChunkFilter`] for all of a file's chunks, so that a
//! reader that rules the summary out never opens the file.
//!
//! Ports, protocols, VLANs and flags are the union of the chunks' (as
//! [`ChunkFilter::merge`] makes it). Addresses are gathered as values, never by merging
//! Bloom filters (filters of different sizes do not merge): a listed chunk set gives its
//! values, a chunk held as a filter gives the addresses [`ChunkFilterBuilder`] handed out
//! beside it. At the end the file's distinct addresses are held as one Bloom filter sized
//! to them, or listed when there are at most [`MAX_LISTED_SUMMARY`] and the list is the
//! smaller (a reader of the catalog decodes every summary, and a filter decodes faster). Past
//! [`MAX_SUMMARY_ADDRESSES`] distinct addresses of one family (a scan), or when a chunk's
//! filter came without its addresses, the summary's set is "any address".
//!
//! [`ChunkFilterBuilder`]: crate::ChunkFilterBuilder

use std::collections::HashSet;
use std::hash::Hash;

use crate::address::BloomKey;
use crate::bloom::AddressBloom;
use crate::builder::BloomValues;
use crate::chunk_filter::{keep_listed, AddressSet, ChunkFilter, ValueSet};

/// Distinct addresses of one family a file's summary gathers before it gives up on them.
pub const MAX_SUMMARY_ADDRESSES: usize = 1 << 20;

/// Most addresses a summary lists (more are held as a Bloom filter, see `finish`).
pub const MAX_LISTED_SUMMARY: usize = 256;

/// Bits of a summary's Bloom filter per distinct address, before the filter is rounded
/// up to a power of two blocks (so the catalog's groups can lay it out at any size, see
/// [`crate::signature`]). More than a chunk's: a query over a store of 300,000 files
/// opens every file whose summary passes, so a summary's false positives must be rarer
/// than a chunk's (measured on random addresses: 0.13 % at 16 bits, 0.015 % at 24,
/// 0.004 % at 32, against 0.5 % at 12; the rounding up gives 16 to 32). Bounded by the
/// index's size: the summary is stored three times (trailer, catalog record, group
/// slices), and at 24 bits a store of 4 MiB files of 512 KiB chunks held 2.2 % of its
/// bytes in index, over the 2 % budget.
pub const SUMMARY_BITS_PER_VALUE: usize = 16;

/// Gathers a file's summary from its chunks' filters; see the module docs.
#[derive(Debug, Default)]
pub struct SummaryBuilder {
    /// Everything but the addresses, merged.
    rest: ChunkFilter,
    ipv4: Gathered<u32>,
    ipv6: Gathered<u128>,
}

impl SummaryBuilder {
    pub fn new() -> SummaryBuilder {
        SummaryBuilder::default()
    }

    /// Adds a chunk: its filter, and the addresses of its sets held as Bloom filters
    /// (`BloomValues::default()` when unknown: those sets then make the summary's "any").
    pub fn add(&mut self, chunk: &ChunkFilter, values: &BloomValues) {
        self.rest.merge_all_but_addresses(chunk);
        self.ipv4.add(&chunk.ipv4, &values.ipv4);
        self.ipv6.add(&chunk.ipv6, &values.ipv6);
    }

    /// The summary of the chunks added (the index of no packets when none was); the
    /// builder is then empty.
    pub fn finish(&mut self) -> ChunkFilter {
        let mut summary = std::mem::take(&mut self.rest);
        summary.ipv4 = std::mem::take(&mut self.ipv4).finish();
        summary.ipv6 = std::mem::take(&mut self.ipv6).finish();
        summary
    }
}

/// One family's distinct addresses, or "too many / unknown".
#[derive(Debug)]
struct Gathered<T> {
    values: HashSet<T>,
    any: bool,
}

impl<T> Default for Gathered<T> {
    fn default() -> Self {
        Gathered {
            values: HashSet::new(),
            any: false,
        }
    }
}

impl<T: BloomKey + Hash + Into<u128>> Gathered<T> {
    fn add(&mut self, set: &AddressSet<T>, bloom_values: &[T]) {
        if self.any {
            return;
        }
        let values = match set {
            AddressSet::Listed(ValueSet::Exact(v)) => v.as_slice(),
            AddressSet::Bloom(_) if !bloom_values.is_empty() => bloom_values,
            AddressSet::Listed(ValueSet::Overflowed) | AddressSet::Bloom(_) => {
                return self.give_up();
            }
        };
        self.values.extend(values.iter().copied());
        if self.values.len() > MAX_SUMMARY_ADDRESSES {
            self.give_up();
        }
    }

    fn give_up(&mut self) {
        self.any = true;
        self.values = HashSet::new();
    }

    /// Listed or a Bloom filter, whichever is smaller (as a chunk's set).
    fn finish(self) -> AddressSet<T> {
        if self.any {
            return AddressSet::Listed(ValueSet::Overflowed);
        }
        let mut values: Vec<T> = self.values.into_iter().collect();
        values.sort_unstable();
        let n = values.len();
        // A reader decodes every summary of the catalog: a list costs it a varint per
        // address, a filter a copy of its bytes. So past a few hundred addresses, where the
        // two are about as large, a summary is a filter.
        if n > MAX_LISTED_SUMMARY
            || (n > 0 && !keep_listed(&values, AddressBloom::<T>::bytes_for(n)))
        {
            let blocks = (n * SUMMARY_BITS_PER_VALUE)
                .div_ceil(crate::bloom::BLOCK_BYTES * 8)
                .next_power_of_two()
                .min(crate::bloom::MAX_BLOCKS);
            AddressSet::Bloom(AddressBloom::with_blocks(values.iter().copied(), blocks))
        } else {
            AddressSet::Listed(ValueSet::Exact(values))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::tests::frames::{ipv4, ports};
    use crate::{ChunkFilterBuilder, Predicate};
    use tapdeck_decode::packet::LINKTYPE_RAW;

    fn host(a: u32) -> Predicate {
        Predicate::parse(&format!("host {}", std::net::Ipv4Addr::from(a))).unwrap()
    }

    /// Three chunks: two busy ones (Bloom filters of different sizes, which cannot be
    /// merged) and a calm one. The summary holds every address of the three, rules out one
    /// of none of them, and knows their ports.
    #[test]
    fn a_summary_holds_every_chunks_addresses() {
        let addr = |i: u32| i.wrapping_mul(2_654_435_761) | 0x0a00_0000;
        let mut b = ChunkFilterBuilder::new();
        let mut summary = SummaryBuilder::new();
        let mut chunks = Vec::new();
        for (from, n, port) in [(0u32, 3000u32, 80u16), (10_000, 800, 443), (20_000, 2, 53)] {
            for i in from..from + n {
                let ip = ipv4(
                    addr(2 * i).to_be_bytes(),
                    addr(2 * i + 1).to_be_bytes(),
                    6,
                    0,
                    &ports(port, 9, 20),
                );
                b.add(LINKTYPE_RAW, &ip);
            }
            let (filter, values) = b.finish_with_values();
            summary.add(&filter, &values);
            chunks.push(filter);
        }
        assert!(
            matches!(chunks[0].ipv4, AddressSet::Bloom(_)),
            "{}",
            chunks[0]
        );
        assert!(
            matches!(chunks[2].ipv4, AddressSet::Listed(_)),
            "{}",
            chunks[2]
        );
        let s = summary.finish();
        let s = ChunkFilter::decode(&s.encode()).unwrap();
        assert_eq!(s.packets(), 3802);
        assert_eq!(s.tcp_ports, ValueSet::Exact(vec![9, 53, 80, 443]));
        let present = (0..6000).chain(20_000..21_600).chain(40_000..40_004);
        for i in present {
            assert!(host(addr(i)).may_match(&s), "address {i} ruled out");
        }
        let passed = (100_000..110_000)
            .filter(|&i| host(addr(i)).may_match(&s))
            .count();
        assert!(
            passed < 100,
            "{passed} of 10,000 absent addresses pass the summary"
        );
        // The builder starts again empty.
        assert_eq!(summary.finish(), ChunkFilter::default());
    }

    /// Dense runs of addresses list in about a byte each, less than a Bloom filter, but a
    /// list longer than a decoder accepts must not be written: a busy link's file summary
    /// (105,000 addresses here) once did not read back, so the catalog could rule nothing
    /// out. Chunks of 30,000 and 70,000 addresses and the summary all read back and answer.
    #[test]
    fn dense_sets_of_more_addresses_than_a_list_may_hold_read_back() {
        let base = 0xc612_0000u32; // 198.18.0.0
        let mut b = ChunkFilterBuilder::new();
        let mut summary = SummaryBuilder::new();
        for (from, n) in [(0u32, 30_000u32), (25_000, 30_000), (35_000, 70_000)] {
            for i in from..from + n {
                let ip = ipv4(
                    (base + i).to_be_bytes(),
                    base.to_be_bytes(),
                    17,
                    0,
                    &ports(1, 2, 8),
                );
                b.add(LINKTYPE_RAW, &ip);
            }
            let (chunk, values) = b.finish_with_values();
            let back = ChunkFilter::decode(&chunk.encode()).expect("the chunk filter reads back");
            assert!(
                host(base + from).may_match(&back) && host(base + from + n - 1).may_match(&back)
            );
            summary.add(&chunk, &values);
        }
        let back = ChunkFilter::decode(&summary.finish().encode()).expect("the summary reads back");
        for i in [0, 24_999, 60_000, 104_999] {
            assert!(host(base + i).may_match(&back), "198.18.0.0 + {i}");
        }
        assert!(
            !host(base + 200_000).may_match(&back),
            "an address past the range"
        );
    }

    #[test]
    fn a_filter_without_its_addresses_makes_the_summary_any() {
        let mut b = ChunkFilterBuilder::new();
        for i in 0..3000u32 {
            b.add(
                LINKTYPE_RAW,
                &ipv4((i * 7919).to_be_bytes(), [9; 4], 17, 0, &[]),
            );
        }
        let (filter, _) = b.finish_with_values();
        let mut summary = SummaryBuilder::new();
        summary.add(&filter, &BloomValues::default());
        assert_eq!(
            summary.finish().ipv4,
            AddressSet::Listed(ValueSet::Overflowed)
        );
    }
}
