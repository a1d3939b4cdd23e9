//! Prefix-preserving address anonymization: Crypto-PAn (Xu, Fan, Ammar, Moon, ICNP 2002).
//!
//! Bit `i` of the output is bit `i` of the input flipped by the first bit of
//! `AES_k(first i bits of the input ‖ the remaining bits of a secret pad)`. Two addresses that
//! share their first `n` bits therefore share the first `n` flips, and so their first `n`
//! output bits, while bit `n+1` (where they differ) still differs: the map keeps exactly the
//! common-prefix length of every pair, and is a bijection. IPv6 uses the same construction
//! over 128 bits, as the Go, Python (yacryptopan) and C# implementations do.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockEncrypt, KeyInit};
use aes::{Aes128, Block};

/// The stateless map. `Send + Sync`; every call costs one AES block per address bit (the
/// blocks are independent, so they are encrypted as a batch, which AES-NI pipelines). Use
/// [`CachedCryptoPan`] per thread for traces, where addresses repeat.
#[derive(Clone)]
pub struct CryptoPan {
    aes: Aes128,
    /// `AES_k(second half of the key)`, as the reference implementation derives it.
    pad: u128,
}

impl std::fmt::Debug for CryptoPan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CryptoPan { key: <secret> }")
    }
}

impl CryptoPan {
    /// `key`: 16 bytes of AES-128 key, then 16 bytes from which the pad is made; the layout
    /// of the reference implementation, so its published test vectors apply.
    pub fn new(key: &[u8; 32]) -> CryptoPan {
        let aes = Aes128::new(GenericArray::from_slice(&key[..16]));
        let mut pad = *Block::from_slice(&key[16..]);
        aes.encrypt_block(&mut pad);
        CryptoPan {
            aes,
            pad: u128::from_be_bytes(pad.into()),
        }
    }

    pub fn anonymize_v4(&self, addr: u32) -> u32 {
        let wide = u128::from(addr) << 96;
        addr ^ (self.flips(wide, 0, 32) >> 96) as u32
    }

    pub fn anonymize_v6(&self, addr: u128) -> u128 {
        addr ^ self.flips(addr, 0, 128)
    }

    /// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are mapped as the IPv6 addresses they
    /// are, as other implementations do; convert them first if they should match IPv4 ones.
    pub fn anonymize(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(self.anonymize_v4(a.into()))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(self.anonymize_v6(a.into()))),
        }
    }

    /// The flip bits for bit positions `from..to` (0 = most significant) of the 128-bit,
    /// left-aligned address `addr`, each at its own position; all other bits are zero.
    fn flips(&self, addr: u128, from: u32, to: u32) -> u128 {
        debug_assert!(from <= to && to <= 128);
        const BATCH: u32 = 32;
        let mut blocks = [Block::default(); BATCH as usize];
        let mut out = 0u128;
        let mut start = from;
        while start < to {
            let n = (to - start).min(BATCH);
            for (i, block) in blocks[..n as usize].iter_mut().enumerate() {
                let pos = start + i as u32;
                // The first `pos` bits of the address, the rest from the pad.
                let keep = high_mask(pos);
                *block = ((addr & keep) | (self.pad & !keep)).to_be_bytes().into();
            }
            self.aes.encrypt_blocks(&mut blocks[..n as usize]);
            for (i, block) in blocks[..n as usize].iter().enumerate() {
                let pos = start + i as u32;
                out |= u128::from(block[0] >> 7) << (127 - pos);
            }
            start += n;
        }
        out
    }
}

/// The top `n` bits set (`n` in 0..=128).
fn high_mask(n: u32) -> u128 {
    if n == 0 {
        0
    } else {
        u128::MAX << (128 - n)
    }
}

/// [`CryptoPan`] with bounded memo tables, for one thread. Two levels per family: full
/// addresses (a hit costs a hash and a load), and prefixes (/24 for IPv4, /64 for IPv6)
/// whose flips are reused so a new host in a known subnet costs 8 (IPv4) or 64 (IPv6) AES
/// blocks instead of 32 or 128. The tables are direct-mapped: fixed memory, no eviction
/// bookkeeping; a collision only costs a recomputation.
pub struct CachedCryptoPan {
    pan: CryptoPan,
    v4: DirectMapped<u32, u32>,
    v4_prefix: DirectMapped<u32, u32>,
    v6: DirectMapped<u128, u128>,
    v6_prefix: DirectMapped<u64, u64>,
    stats: CacheStats,
}

/// Counters for tuning and for the benchmark report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered from the full-address tables.
    pub hits: u64,
    /// Lookups whose prefix was cached (only the host bits were computed).
    pub prefix_hits: u64,
    /// Lookups computed from scratch.
    pub misses: u64,
}

const V4_PREFIX_BITS: u32 = 24;
const V6_PREFIX_BITS: u32 = 64;

impl CachedCryptoPan {
    /// Tables of 2^16 IPv4 and 2^14 IPv6 entries (about 2 MiB in all).
    pub fn new(pan: CryptoPan) -> CachedCryptoPan {
        CachedCryptoPan::with_table_bits(pan, 16)
    }

    /// Tables of `2^bits` IPv4 addresses, a quarter as many IPv4 prefixes, IPv6 addresses
    /// and IPv6 prefixes. `bits` is clamped to 4..=24.
    pub fn with_table_bits(pan: CryptoPan, bits: u32) -> CachedCryptoPan {
        let bits = bits.clamp(4, 24);
        CachedCryptoPan {
            pan,
            v4: DirectMapped::new(bits),
            v4_prefix: DirectMapped::new(bits - 2),
            v6: DirectMapped::new(bits - 2),
            v6_prefix: DirectMapped::new(bits - 2),
            stats: CacheStats::default(),
        }
    }

    pub fn anonymize_v4(&mut self, addr: u32) -> u32 {
        if let Some(v) = self.v4.get(addr) {
            self.stats.hits += 1;
            return v;
        }
        let prefix = addr >> (32 - V4_PREFIX_BITS);
        let wide = u128::from(addr) << 96;
        let flips = match self.v4_prefix.get(prefix) {
            Some(f) => {
                self.stats.prefix_hits += 1;
                f | (self.pan.flips(wide, V4_PREFIX_BITS, 32) >> 96) as u32
            }
            None => {
                // One batch of all 32 blocks: cheaper than the prefix and host separately.
                self.stats.misses += 1;
                let f = (self.pan.flips(wide, 0, 32) >> 96) as u32;
                self.v4_prefix
                    .put(prefix, f & !(u32::MAX >> V4_PREFIX_BITS));
                f
            }
        };
        let anon = addr ^ flips;
        self.v4.put(addr, anon);
        anon
    }

    pub fn anonymize_v6(&mut self, addr: u128) -> u128 {
        if let Some(v) = self.v6.get(addr) {
            self.stats.hits += 1;
            return v;
        }
        let prefix = (addr >> (128 - V6_PREFIX_BITS)) as u64;
        let flips = match self.v6_prefix.get(prefix) {
            Some(f) => {
                self.stats.prefix_hits += 1;
                (u128::from(f) << 64) | self.pan.flips(addr, V6_PREFIX_BITS, 128)
            }
            None => {
                self.stats.misses += 1;
                let f = self.pan.flips(addr, 0, 128);
                self.v6_prefix.put(prefix, (f >> 64) as u64);
                f
            }
        };
        let anon = addr ^ flips;
        self.v6.put(addr, anon);
        anon
    }

    pub fn anonymize(&mut self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(self.anonymize_v4(a.into()))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(self.anonymize_v6(a.into()))),
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    pub fn inner(&self) -> &CryptoPan {
        &self.pan
    }
}

/// Keys that can pick a slot: a multiplicative (Fibonacci) hash of the key's bits.
trait SlotKey: Copy + Eq {
    fn hash64(self) -> u64;
}
impl SlotKey for u32 {
    fn hash64(self) -> u64 {
        u64::from(self).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}
impl SlotKey for u64 {
    fn hash64(self) -> u64 {
        (self ^ (self >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}
impl SlotKey for u128 {
    fn hash64(self) -> u64 {
        ((self >> 64) as u64)
            .wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
            .rotate_left(31)
            .wrapping_add(self as u64)
            .hash64()
    }
}

struct DirectMapped<K, V> {
    slots: Vec<Option<(K, V)>>,
    shift: u32,
}

impl<K: SlotKey, V: Copy> DirectMapped<K, V> {
    fn new(bits: u32) -> Self {
        DirectMapped {
            slots: vec![None; 1 << bits],
            shift: 64 - bits,
        }
    }

    fn slot(&self, key: K) -> usize {
        (key.hash64() >> self.shift) as usize
    }

    fn get(&self, key: K) -> Option<V> {
        match self.slots[self.slot(key)] {
            Some((k, v)) if k == key => Some(v),
            _ => None,
        }
    }

    fn put(&mut self, key: K, value: V) {
        let i = self.slot(key);
        self.slots[i] = Some((key, value));
    }
}
