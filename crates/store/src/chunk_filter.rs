//! The chunk filter of a chunk (its flow index, `tapdeck_filter`): which addresses, ports,
//! protocols and VLANs its packets hold, so that a filtered extract reads only the chunks
//! that can match. It is the lowest level of the store's index: chunk filter (per chunk,
//! here), file summary (per file, merged from its chunks'), store catalog (per store).
//! The recorder builds it off the capture path (the compressor that takes the chunk, or
//! the writer for a chunk stored raw); `tapdeck index` builds it here too for files written
//! without one, so both give the same bytes for the same chunk.

use std::cell::RefCell;

use tapdeck_filter::{BloomValues, ChunkFilter, ChunkFilterBuilder, SummaryBuilder};
use tapdeck_pcap::Format;

thread_local! {
    // About 400 KiB of sets (more after a busy chunk), reused for every chunk a thread indexes (taken by a
    // `ChunkIndexer` while it works, so that two at once each have their own).
    static BUILDER: RefCell<Option<Box<ChunkFilterBuilder>>> = const { RefCell::new(None) };
}

/// A chunk's flow index three ways: encoded for its file's trailer, decoded, and with the
/// addresses of its Bloom filters, which the file's summary gathers
/// (`tapdeck_filter::SummaryBuilder`). Empty (`encoded` empty) for a chunk not indexed.
#[derive(Debug, Default)]
pub struct ChunkFlows {
    pub encoded: Vec<u8>,
    pub filter: ChunkFilter,
    pub values: BloomValues,
}

/// The encoded chunk filter (flow index) of a chunk of `format` records (as the capture
/// loop wrote them: whole records, pcap or pcapng enhanced packet blocks), whose
/// interfaces have `linktypes`. Records it cannot walk make the index answer "maybe" for
/// the rest.
pub fn of_chunk(format: Format, data: &[u8], linktypes: &[u16]) -> Vec<u8> {
    index_chunk(format, data, linktypes).encoded
}

/// [`of_chunk`], with what a file's summary needs of the chunk.
pub fn index_chunk(format: Format, data: &[u8], linktypes: &[u16]) -> ChunkFlows {
    let mut indexer = ChunkIndexer::new(format, linktypes);
    indexer.advance(data);
    indexer.finish(data.len())
}

/// Indexes a chunk piece by piece as its bytes go by: the writer copies a chunk stored raw
/// into its file's buffer in pieces, and indexing each piece just after the copy reads it
/// from the cache instead of from memory a second time (at 64-byte packets that second
/// pass cost more than the indexing itself). [`index_chunk`] is the one-piece form.
pub struct ChunkIndexer<'a> {
    format: Format,
    linktypes: &'a [u16],
    builder: Option<Box<ChunkFilterBuilder>>,
    /// Offset of the first record not indexed yet.
    at: usize,
}

impl<'a> ChunkIndexer<'a> {
    pub fn new(format: Format, linktypes: &'a [u16]) -> Self {
        let builder = BUILDER.with(|b| b.borrow_mut().take());
        ChunkIndexer {
            format,
            linktypes,
            builder: Some(builder.unwrap_or_else(|| Box::new(ChunkFilterBuilder::new()))),
            at: 0,
        }
    }

    /// Indexes the records that lie whole in `seen`, the chunk's bytes from its start to
    /// as far as they have gone by (each call the same start, and at least as long as the
    /// last). A record cut by the end of `seen` waits for a longer one.
    #[inline]
    pub fn advance(&mut self, seen: &[u8]) {
        let Some(b) = self.builder.as_mut() else {
            return;
        };
        while let Some((iface, frame, next)) = record_at(self.format, seen, self.at) {
            self.at = next;
            if let Some(iface) = iface {
                // An unknown interface's frames are indexed as an unknown link type:
                // "maybe".
                let linktype = (self.linktypes.get(iface as usize)).map_or(u32::MAX, |&l| l.into());
                b.add(linktype, frame);
            }
        }
    }

    /// The chunk's flows, for a chunk of `len` bytes. Bytes that were never walked as
    /// whole records (damage) make the index answer "maybe".
    pub fn finish(mut self, len: usize) -> ChunkFlows {
        let mut b = self.builder.take().expect("finished once");
        if self.at != len {
            b.add(u32::MAX, &[]);
        }
        let (filter, values) = b.finish_with_values();
        BUILDER.with(|slot| *slot.borrow_mut() = Some(b));
        ChunkFlows {
            encoded: filter.encode(),
            filter,
            values,
        }
    }
}

impl Drop for ChunkIndexer<'_> {
    fn drop(&mut self) {
        // Abandoned half way (a write failed): the builder goes back emptied.
        if let Some(mut b) = self.builder.take() {
            b.finish_with_values();
            BUILDER.with(|slot| *slot.borrow_mut() = Some(b));
        }
    }
}

/// Gathers a file's summary from its chunks' flows; `None` from [`finish`] when a chunk
/// with packets had none (the summary would leave its packets out).
///
/// [`finish`]: FileSummary::finish
#[derive(Debug, Default)]
pub struct FileSummary {
    builder: SummaryBuilder,
    unindexed: bool,
}

impl FileSummary {
    /// Adds a chunk of `packets` packets and its flows (empty: not indexed).
    pub fn add(&mut self, packets: u32, flows: &ChunkFlows) {
        if flows.encoded.is_empty() {
            self.unindexed |= packets > 0;
        } else {
            self.builder.add(&flows.filter, &flows.values);
        }
    }

    /// The encoded summary, or empty when a chunk was not indexed.
    pub fn finish(mut self) -> Vec<u8> {
        let summary = self.builder.finish();
        if self.unindexed {
            Vec::new()
        } else {
            summary.encode()
        }
    }
}

/// The record of a chunk (as the capture loop wrote it: pcap records or pcapng blocks)
/// that starts at `at` and lies whole in `data`: its interface (`None` for a pcapng block
/// that holds no packet), its captured bytes, and where the next record starts.
#[inline]
fn record_at(format: Format, data: &[u8], at: usize) -> Option<(Option<u32>, &[u8], usize)> {
    let u32_at = |o: usize| -> Option<u32> {
        Some(u32::from_le_bytes(data.get(o..o + 4)?.try_into().ok()?))
    };
    match format {
        // ts_sec, ts_frac, incl_len, orig_len, then the bytes (native = little endian
        // as the recorder writes).
        Format::Pcap => {
            let caplen = u32_at(at + 8)? as usize;
            let frame = data.get(at + 16..at + 16 + caplen)?;
            Some((Some(0), frame, at + 16 + caplen))
        }
        // Block type, total length; an enhanced packet block (6) has interface,
        // timestamp, captured and original length, then the bytes.
        Format::Pcapng => {
            let kind = u32_at(at)?;
            let len = u32_at(at + 4)? as usize;
            if len < 12 || len > data.len().checked_sub(at)? {
                return None;
            }
            if kind != 6 {
                return Some((None, &[], at + len));
            }
            let iface = u32_at(at + 8)?;
            let caplen = u32_at(at + 20)? as usize;
            // A packet longer than its block is damage: the walk stops there.
            let frame = data
                .get(at + 28..at + 28 + caplen)
                .filter(|_| 28 + caplen <= len)?;
            Some((Some(iface), frame, at + len))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapdeck_filter::Predicate;
    use tapdeck_pcap::Packet;

    fn udp_frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        let mut ip = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0];
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        f.extend_from_slice(&ip);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    fn chunk(format: Format, frames: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            let p = Packet {
                ts_ns: 1_000 + i as u64,
                iface: 0,
                orig_len: f.len() as u32,
                flags: None,
                data: f,
            };
            let mut rec = vec![0u8; format.record_len(&p)];
            let n = format.write_record(&p, &mut rec);
            out.extend_from_slice(&rec[..n]);
        }
        out
    }

    #[test]
    fn a_chunk_of_either_format_is_indexed_by_its_packets() {
        let frames = vec![
            udp_frame([198, 18, 0, 1], [198, 18, 0, 2], 1000, 53),
            udp_frame([198, 18, 0, 3], [198, 18, 0, 2], 1001, 123),
        ];
        for format in [Format::Pcap, Format::Pcapng] {
            let bytes = of_chunk(format, &chunk(format, &frames), &[1]);
            let index = ChunkFilter::decode(&bytes).unwrap();
            assert_eq!(index.packets(), 2, "{format:?}");
            let may = |f: &str| Predicate::parse(f).unwrap().may_match(&index);
            assert!(may("host 198.18.0.3"));
            assert!(may("udp port 123"));
            assert!(
                !may("host 198.18.0.9"),
                "{format:?}: an absent host is ruled out"
            );
            assert!(!may("tcp"), "{format:?}: no TCP in the chunk");
        }
    }

    #[test]
    fn an_unknown_interface_makes_the_chunk_a_maybe() {
        let frames = vec![udp_frame([198, 18, 0, 1], [198, 18, 0, 2], 1, 2)];
        let bytes = of_chunk(Format::Pcapng, &chunk(Format::Pcapng, &frames), &[]);
        let index = ChunkFilter::decode(&bytes).unwrap();
        assert!(Predicate::parse("host 198.18.0.9")
            .unwrap()
            .may_match(&index));
    }

    #[test]
    fn a_chunk_indexed_piece_by_piece_gives_the_bytes_of_one_pass() {
        let frames: Vec<Vec<u8>> = (0..300u16)
            .map(|i| {
                udp_frame(
                    [198, 18, (i % 7) as u8, 1],
                    [198, 19, 0, (i % 251) as u8],
                    i,
                    53,
                )
            })
            .collect();
        for format in [Format::Pcap, Format::Pcapng] {
            let data = chunk(format, &frames);
            let whole = index_chunk(format, &data, &[1]).encoded;
            // Pieces of every size from 1 byte up, cut anywhere, records split across them.
            for piece in [1, 7, 64, 100, 999, 4096, data.len()] {
                let mut ix = ChunkIndexer::new(format, &[1]);
                let mut end = 0;
                while end < data.len() {
                    end = (end + piece).min(data.len());
                    ix.advance(&data[..end]);
                }
                assert_eq!(
                    ix.finish(data.len()).encoded,
                    whole,
                    "{format:?}, pieces of {piece}"
                );
            }
            // Abandoned half way (a write failed), then the chunk again: the same bytes.
            let mut ix = ChunkIndexer::new(format, &[1]);
            ix.advance(&data[..data.len() / 2]);
            drop(ix);
            assert_eq!(
                index_chunk(format, &data, &[1]).encoded,
                whole,
                "{format:?}"
            );
        }
    }

    #[test]
    fn bytes_that_do_not_walk_as_records_make_the_chunk_a_maybe() {
        let frames = vec![udp_frame([198, 18, 0, 1], [198, 18, 0, 2], 1, 2)];
        let absent = Predicate::parse("host 198.18.0.9").unwrap();
        for format in [Format::Pcap, Format::Pcapng] {
            let data = chunk(format, &frames);
            let clean = ChunkFilter::decode(&of_chunk(format, &data, &[1])).unwrap();
            assert!(!absent.may_match(&clean), "{format:?}");
            // Cut short, or a record length that runs past the end: the packets after the
            // damage are unknown, so no host is ruled out.
            let mut long = data.clone();
            long[if format == Format::Pcap { 8 } else { 20 }] = 0xff;
            for damaged in [&data[..data.len() - 3], &long[..]] {
                let index = ChunkFilter::decode(&of_chunk(format, damaged, &[1])).unwrap();
                assert!(
                    absent.may_match(&index),
                    "{format:?}: {} bytes",
                    damaged.len()
                );
            }
        }
    }
}
