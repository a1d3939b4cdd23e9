//! Chunk filters (the per-chunk flow index): which flows a chunk of packets holds, and
//! whether a libpcap filter can match it.
//!
//! They are the lowest level of a store's index, named as the levels above will be: chunk
//! filter (per chunk, here), file summary (per file: the chunk filters of a file merged),
//! store catalog (per store: every file's summary). Users know them as "the flow index".
//!
//! - [`ChunkFilterBuilder`] is fed every packet of a chunk (`add(linktype, frame)`, no
//!   allocation, a few tens of nanoseconds) and records the IPv4 and IPv6 addresses, IP
//!   protocols, TCP/UDP/SCTP ports and VLAN ids a filter can be answered from, plus flags
//!   (non-IP frames, non-first fragments, unreadable frames); [`finish`] gives the chunk's
//!   [`ChunkFilter`].
//! - [`ChunkFilter`] is immutable, [`encode`]s to a small canonical binary form (sorted,
//!   delta-coded sets, checksummed) and [`decode`]s from untrusted bytes without panicking;
//!   [`merge`] makes a file's summary from its chunks'.
//! - [`Predicate::parse`] reads the part of libpcap's filter language the index can answer
//!   (host, net, port, portrange, protocols, vlan, and/or/not); [`Predicate::may_match`] is
//!   false only when no packet of the chunk can match, so a reader skips the chunk. Exact
//!   matching stays with libpcap.
//!
//! - `bpf` (feature `bpf`): libpcap's programs for a filter, one per link type, which decide
//!   every packet of the chunks a predicate did not rule out.
//!
//! - [`sidecar`] is the block index `tapdeck index` writes beside a plain pcap or pcapng
//!   file (`FILE.tdx`): per block of a few MiB, its place, time range and flow index, and
//!   what the file was (size, hashes of its ends) so that a stale one is recognised.
//!
//! The contract is one-sided: a chunk for which `may_match` is false holds no packet libpcap
//! would match with the same filter (the property tests check it against libpcap itself);
//! `true` promises nothing.
//!
//! ```
//! use tapdeck_filter::{ChunkFilter, ChunkFilterBuilder, Predicate};
//!
//! // An Ethernet frame: IPv4 10.0.0.1 → 10.0.0.2, TCP 40000 → 80.
//! let mut frame = vec![0u8; 12];
//! frame.extend([0x08, 0x00, 0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0]);
//! frame.extend([10, 0, 0, 1, 10, 0, 0, 2, 0x9c, 0x40, 0, 80]);
//! frame.extend([0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x10, 0, 0, 0, 0, 0, 0]);
//!
//! let mut builder = ChunkFilterBuilder::new();
//! builder.add(1, &frame); // LINKTYPE_ETHERNET
//! let bytes = builder.finish().encode();
//! let index = ChunkFilter::decode(&bytes)?;
//!
//! let may = |f: &str| Predicate::parse(f).unwrap().may_match(&index);
//! assert!(may("host 10.0.0.1 and tcp port 80"));
//! assert!(!may("host 10.0.0.3 or udp"));
//! assert!(may("not host 10.0.0.1")); // `not` is never ruled out
//! # Ok::<(), tapdeck_filter::DecodeError>(())
//! ```
//!
//! [`finish`]: ChunkFilterBuilder::finish
//! [`encode`]: ChunkFilter::encode
//! [`decode`]: ChunkFilter::decode
//! [`merge`]: ChunkFilter::merge

#![forbid(unsafe_code)]

mod address;
mod bloom;
#[cfg(feature = "bpf")]
pub mod bpf;
mod builder;
mod chunk_filter;
mod expr;
mod parse;
mod predicate;
pub mod sidecar;
mod signature;
mod summary;

pub use bloom::BITS_PER_VALUE;
pub use builder::{BloomValues, ChunkFilterBuilder, MAX_ADDRESSES, MAX_PROBE, MAX_VALUES};
pub use chunk_filter::{ChunkFilter, DecodeError, MAGIC, MAX_MERGED_VALUES, VERSION};
pub use predicate::Predicate;
pub use signature::AddressProbe;
pub use summary::{SummaryBuilder, MAX_SUMMARY_ADDRESSES, SUMMARY_BITS_PER_VALUE};
