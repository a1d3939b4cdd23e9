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
    // About 200 KiB of sets, reused for every chunk a thread indexes.
    static BUILDER: RefCell<ChunkFilterBuilder> = RefCell::new(ChunkFilterBuilder::new());
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
    BUILDER.with(|b| {
        let mut b = b.borrow_mut();
        for (iface, frame) in records(format, data) {
            // An unknown interface's frames are indexed as an unknown link type: "maybe".
            let linktype = linktypes
                .get(iface as usize)
                .map_or(u32::MAX, |&l| u32::from(l));
            b.add(linktype, frame);
        }
        let (filter, values) = b.finish_with_values();
        ChunkFlows {
            encoded: filter.encode(),
            filter,
            values,
        }
    })
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

/// (interface, captured bytes) of each record in a chunk.
fn records(format: Format, data: &[u8]) -> impl Iterator<Item = (u32, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let u32_at = |o: usize| -> Option<u32> {
            Some(u32::from_le_bytes(data.get(o..o + 4)?.try_into().ok()?))
        };
        loop {
            let rest = data.len().checked_sub(at)?;
            match format {
                // ts_sec, ts_frac, incl_len, orig_len, then the bytes (native = little
                // endian as the recorder writes).
                Format::Pcap => {
                    if rest < 16 {
                        return None;
                    }
                    let caplen = u32_at(at + 8)? as usize;
                    let frame = data.get(at + 16..at + 16 + caplen)?;
                    at += 16 + caplen;
                    return Some((0, frame));
                }
                // Block type, total length; an enhanced packet block (6) has interface,
                // timestamp, captured and original length, then the bytes.
                Format::Pcapng => {
                    let kind = u32_at(at)?;
                    let len = u32_at(at + 4)? as usize;
                    if len < 12 || len > rest {
                        return None;
                    }
                    let block = at;
                    at += len;
                    if kind != 6 {
                        continue;
                    }
                    let iface = u32_at(block + 8)?;
                    let caplen = u32_at(block + 20)? as usize;
                    let frame = data.get(block + 28..block + 28 + caplen)?;
                    return Some((iface, frame));
                }
            }
        }
    })
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
}
