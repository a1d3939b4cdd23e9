//! Address signatures: a file summary's addresses (both families) as a split-block Bloom
//! filter of a chosen power-of-two number of blocks. The store catalog's groups lay the
//! signatures of many files side by side, block by block, so that a query for an address
//! reads one block per file, and the blocks of a whole group in one read
//! (`tapdeck_store::catalog`).
//!
//! The filter is the one a summary already holds (the Parquet format's, see
//! [`crate::bloom`]): a block is picked by the top bits of the hash's upper half, so a
//! filter of `m` blocks (a power of two) becomes one of `k` blocks without its addresses,
//! by repeating each block `k / m` times (`k > m`: the same answers) or by OR-ing runs of
//! `m / k` blocks (`k < m`: more false positives, never a false negative). A listed set
//! is hashed into the blocks; a set that is "any" (or a filter of another size, written
//! before summaries were powers of two) fills them with ones.

use crate::bloom::{AddressBloom, BLOCK_BYTES};
use crate::chunk_filter::{AddressSet, ChunkFilter, ValueSet};
use crate::expr::{Node, Test};
use crate::Predicate;

/// Bits of signature per distinct address of a listed set (as a summary's filter has).
const BITS_PER_ADDRESS: usize = crate::summary::SUMMARY_BITS_PER_VALUE;

/// An address as the Bloom filters hash it: which block it falls in and which bits it
/// sets there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressProbe {
    hash: u64,
    /// Of an IPv6 address: answered by the IPv6 signature.
    pub v6: bool,
}

/// The Parquet format's salts: the bit each of a block's eight words gets.
const SALT: [u32; 8] = [
    0x47b6_137b,
    0x4497_4d91,
    0x8824_ad5b,
    0xa2b7_289d,
    0x7054_95c7,
    0x2df1_424b,
    0x9efc_4947,
    0x5c6b_fb31,
];

impl AddressProbe {
    pub fn ipv4(a: u32) -> AddressProbe {
        AddressProbe {
            hash: xxhash_rust::xxh64::xxh64(&a.to_be_bytes(), 0),
            v6: false,
        }
    }

    pub fn ipv6(a: u128) -> AddressProbe {
        AddressProbe {
            hash: xxhash_rust::xxh64::xxh64(&a.to_be_bytes(), 0),
            v6: true,
        }
    }

    /// The block the address falls in, in a filter of `blocks` blocks.
    pub fn block(self, blocks: usize) -> usize {
        (((self.hash >> 32) * blocks as u64) >> 32) as usize
    }

    /// Whether `block` (32 bytes) has every bit the address sets.
    pub fn in_block(self, block: &[u8]) -> bool {
        (0..8).all(|i| word(block, i) & self.bit(i) != 0)
    }

    fn bit(self, i: usize) -> u32 {
        1 << ((self.hash as u32).wrapping_mul(SALT[i]) >> 27)
    }

    fn set_in(self, block: &mut [u8]) {
        for i in 0..8 {
            let w = word(block, i) | self.bit(i);
            block[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
    }
}

fn word(block: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(block[4 * i..4 * i + 4].try_into().unwrap_or_default())
}

impl ChunkFilter {
    /// Blocks of the signature of one family (`v6`) that keeps this summary's false
    /// positive rate: its filter's size (or what its listed addresses need), to a power
    /// of two. The families have a signature each: a filter repeated to a larger size
    /// keeps its density, so two OR-ed together pass far more than either.
    pub fn signature_blocks(&self, v6: bool) -> usize {
        fn of<T>(set: &AddressSet<T>) -> usize {
            match set {
                AddressSet::Listed(ValueSet::Exact(v)) => {
                    (v.len() * BITS_PER_ADDRESS).div_ceil(BLOCK_BYTES * 8)
                }
                AddressSet::Listed(ValueSet::Overflowed) => 1,
                AddressSet::Bloom(b) => b.bytes().len() / BLOCK_BYTES,
            }
        }
        let n = if v6 { of(&self.ipv6) } else { of(&self.ipv4) };
        n.max(1).next_power_of_two().min(crate::bloom::MAX_BLOCKS)
    }

    /// Whether the addresses can be laid out as a signature without ones filling it: a
    /// summary written before summaries' filters were powers of two cannot (`tapdeck
    /// index` writes it again).
    pub fn fits_signatures(&self) -> bool {
        fn fits<T>(set: &AddressSet<T>) -> bool {
            match set {
                AddressSet::Bloom(b) => (b.bytes().len() / BLOCK_BYTES).is_power_of_two(),
                AddressSet::Listed(_) => true,
            }
        }
        fits(&self.ipv4) && fits(&self.ipv6)
    }

    /// This summary's addresses of one family as a filter of `blocks` blocks (a power
    /// of two): `blocks * 32` bytes.
    pub fn signature(&self, v6: bool, blocks: usize) -> Vec<u8> {
        debug_assert!(blocks.is_power_of_two());
        let mut out = vec![0u8; blocks * BLOCK_BYTES];
        let known = !self.has_unreadable()
            && match v6 {
                false => into_signature(&self.ipv4, &mut out, blocks, AddressProbe::ipv4),
                true => into_signature(&self.ipv6, &mut out, blocks, AddressProbe::ipv6),
            };
        if !known {
            out.fill(0xff);
        }
        out
    }
}

/// ORs `set` into `out` (a filter of `blocks` blocks); false when it cannot be (the set
/// is "any", or a filter whose size is not a power of two).
fn into_signature<T: Copy>(
    set: &AddressSet<T>,
    out: &mut [u8],
    blocks: usize,
    probe: fn(T) -> AddressProbe,
) -> bool {
    match set {
        AddressSet::Listed(ValueSet::Exact(values)) => {
            for &v in values {
                let p = probe(v);
                let at = p.block(blocks) * BLOCK_BYTES;
                p.set_in(&mut out[at..at + BLOCK_BYTES]);
            }
            true
        }
        AddressSet::Listed(ValueSet::Overflowed) => false,
        AddressSet::Bloom(b) => resize_into(b, out, blocks),
    }
}

fn resize_into<T>(b: &AddressBloom<T>, out: &mut [u8], blocks: usize) -> bool {
    let from = b.bytes();
    let m = from.len() / BLOCK_BYTES;
    if !m.is_power_of_two() {
        return false;
    }
    for i in 0..blocks.max(m) {
        // Repeated (more blocks) or folded (fewer): block `i` of the larger maps to
        // block `i / ratio` of the smaller.
        let (src, dst) = match blocks >= m {
            true => (i / (blocks / m), i),
            false => (i, i / (m / blocks)),
        };
        let s = &from[src * BLOCK_BYTES..(src + 1) * BLOCK_BYTES];
        for (o, x) in out[dst * BLOCK_BYTES..(dst + 1) * BLOCK_BYTES]
            .iter_mut()
            .zip(s)
        {
            *o |= x;
        }
    }
    true
}

impl Predicate {
    /// The single addresses (`host A`, `net A/32`) the filter's answerable part tests, in
    /// no particular order: what a caller fetches signature blocks for.
    pub fn probes(&self) -> Vec<AddressProbe> {
        fn walk(n: &Node, out: &mut Vec<AddressProbe>) {
            match n {
                Node::And(a, b) | Node::Or(a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
                Node::Test(t) => out.extend(probe_of(t)),
                Node::Not(_) | Node::Opaque(_) | Node::Shifted(_) => {}
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &mut out);
        out.sort_unstable_by_key(|p| (p.v6, p.hash));
        out.dedup();
        out
    }

    /// False only when no packet of a file can match, where `holds` says whether the
    /// file's signature may hold an address of [`probes`](Self::probes) and every other
    /// primitive is "maybe".
    pub fn may_match_probed(&self, holds: &dyn Fn(AddressProbe) -> bool) -> bool {
        fn eval(n: &Node, holds: &dyn Fn(AddressProbe) -> bool) -> bool {
            match n {
                Node::And(a, b) => eval(a, holds) && eval(b, holds),
                Node::Or(a, b) => eval(a, holds) || eval(b, holds),
                Node::Test(t) => probe_of(t).is_none_or(holds),
                Node::Not(_) | Node::Opaque(_) | Node::Shifted(_) => true,
            }
        }
        eval(&self.root, holds)
    }
}

/// The probe of a single-address primitive.
fn probe_of(t: &Test) -> Option<AddressProbe> {
    match *t {
        Test::Ipv4 { addr, mask, .. } if mask == u32::MAX => Some(AddressProbe::ipv4(addr)),
        Test::Ipv6 { addr, mask, .. } if mask == u128::MAX => Some(AddressProbe::ipv6(addr)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::tests::frames::{ipv4, ipv6, ports};
    use crate::{ChunkFilterBuilder, SummaryBuilder};
    use parquet::bloom_filter::Sbbf;
    use rand::{Rng, SeedableRng};
    use tapdeck_decode::packet::LINKTYPE_RAW;

    #[test]
    fn probes_agree_with_the_parquet_filter() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let blocks = 64;
        for _ in 0..2000 {
            let a: u32 = rng.gen();
            let mut f = Sbbf::new(&vec![0u8; blocks * BLOCK_BYTES]);
            f.insert(&a.to_be_bytes()[..]);
            let mut bytes = Vec::new();
            f.write_bitset(&mut bytes).unwrap();
            let p = AddressProbe::ipv4(a);
            let at = p.block(blocks) * BLOCK_BYTES;
            assert!(p.in_block(&bytes[at..at + BLOCK_BYTES]));
            let mut mine = vec![0u8; BLOCK_BYTES];
            p.set_in(&mut mine);
            assert_eq!(mine, bytes[at..at + BLOCK_BYTES], "the same bits");
            assert_eq!(
                bytes.iter().map(|b| b.count_ones()).sum::<u32>(),
                mine.iter().map(|b| b.count_ones()).sum::<u32>(),
                "one block only"
            );
        }
    }

    /// A summary of `v4` IPv4 and `v6` IPv6 addresses, from chunks as a recorder makes them.
    fn summary(seed: u64, v4: u32, v6: u32) -> (ChunkFilter, Vec<u32>, Vec<u128>) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut b = ChunkFilterBuilder::new();
        let mut s = SummaryBuilder::new();
        let (mut a4, mut a6) = (Vec::new(), Vec::new());
        for i in 0..v4.max(v6) {
            if i < v4 {
                let (x, y): (u32, u32) = (rng.gen(), rng.gen());
                a4.extend([x, y]);
                b.add(
                    LINKTYPE_RAW,
                    &ipv4(x.to_be_bytes(), y.to_be_bytes(), 6, 0, &ports(1, 2, 20)),
                );
            }
            if i < v6 {
                let (x, y): (u128, u128) = (rng.gen(), rng.gen());
                a6.extend([x, y]);
                b.add(
                    LINKTYPE_RAW,
                    &ipv6(x.to_be_bytes(), y.to_be_bytes(), 17, &ports(3, 4, 8)),
                );
            }
            if i % 1000 == 999 {
                let (f, v) = b.finish_with_values();
                s.add(&f, &v);
            }
        }
        let (f, v) = b.finish_with_values();
        s.add(&f, &v);
        (s.finish(), a4, a6)
    }

    #[test]
    fn a_signature_of_any_size_holds_every_address_and_rules_out_most_others() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for (seed, v4, v6) in [
            (1, 3, 0),
            (2, 100, 20),
            (3, 5000, 0),
            (4, 2000, 3000),
            (5, 0, 0),
        ] {
            let (s, a4, a6) = summary(seed, v4, v6);
            let natural = s.signature_blocks(false).max(s.signature_blocks(true));
            for blocks in [1, natural / 4, natural, natural * 8] {
                let blocks = blocks.max(1);
                let (sig4, sig6) = (s.signature(false, blocks), s.signature(true, blocks));
                assert_eq!(sig4.len(), blocks * BLOCK_BYTES);
                let holds = |p: AddressProbe| {
                    let at = p.block(blocks) * BLOCK_BYTES;
                    let sig = if p.v6 { &sig6 } else { &sig4 };
                    p.in_block(&sig[at..at + BLOCK_BYTES])
                };
                assert!(
                    a4.iter().all(|&a| holds(AddressProbe::ipv4(a))),
                    "{seed}/{blocks}: a v4 false negative"
                );
                assert!(
                    a6.iter().all(|&a| holds(AddressProbe::ipv6(a))),
                    "{seed}/{blocks}: a v6 false negative"
                );
                if blocks >= natural {
                    let absent = (0..20_000)
                        .filter(|_| holds(AddressProbe::ipv4(rng.gen())))
                        .count();
                    // The summary's own rate: about 0.13 % at 16 bits per address.
                    assert!(
                        absent < 40,
                        "{seed}/{blocks}: {absent} of 20,000 absent addresses pass"
                    );
                }
            }
        }
    }

    #[test]
    fn a_summary_that_cannot_be_laid_out_is_all_ones() {
        let mut any = ChunkFilterBuilder::new();
        any.add(u32::MAX, &[1, 2, 3]); // an unknown link type: unreadable
        let s = any.finish();
        assert!(s.signature(false, 4).iter().all(|&b| b == 0xff));
        assert!(s.signature(true, 4).iter().all(|&b| b == 0xff));
    }

    #[test]
    fn a_predicate_is_answered_by_its_addresses_only() {
        let p = |f: &str| Predicate::parse(f).unwrap();
        let (a, b) = (
            AddressProbe::ipv4(0xc612_0001),
            AddressProbe::ipv4(0xc612_0002),
        );
        let only_a = |x: AddressProbe| x == a;
        assert_eq!(p("host 198.18.0.1 or host 198.18.0.2").probes().len(), 2);
        assert!(p("host 198.18.0.1 and tcp port 80").may_match_probed(&only_a));
        assert!(!p("host 198.18.0.2 and tcp port 80").may_match_probed(&only_a));
        assert!(
            p("host 198.18.0.2 or tcp").may_match_probed(&only_a),
            "tcp: maybe"
        );
        assert!(
            p("not host 198.18.0.2").may_match_probed(&only_a),
            "not: maybe"
        );
        assert!(
            p("net 198.18.0.0/16").may_match_probed(&|_| false),
            "a range: maybe"
        );
        assert!(p("net 198.18.0.0/16").probes().is_empty());
        assert!(!p("host 198.18.0.2 and host 198.18.0.1").may_match_probed(&only_a));
        let _ = b;
    }
}
