use crate::pcapng::{self, pad4};
use crate::{Interface, InterfaceStats, Packet};

/// Classic pcap magic for nanosecond timestamps.
pub const PCAP_MAGIC_NS: u32 = 0xA1B2_3C4D;

/// Which standard capture format a stream is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Pcapng,
    /// Classic pcap with the nanosecond magic; one interface (one link type) only.
    Pcap,
}

/// Classic pcap asked to hold a number of interfaces other than one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("classic pcap holds exactly one interface, this stream has {interfaces}; use pcapng")]
pub struct OneInterfaceOnly {
    /// How many interfaces the stream has.
    pub interfaces: usize,
}

/// Who wrote the section: goes into the pcapng section header.
#[derive(Debug, Clone, Default)]
pub struct SectionInfo {
    pub hardware: Option<String>,
    pub os: Option<String>,
    pub application: Option<String>,
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Pcapng => "pcapng",
            Format::Pcap => "pcap",
        }
    }

    /// The bytes that open a file: a section header and one interface description block
    /// (nanosecond resolution) per interface, or the classic pcap file header.
    pub fn file_header(
        self,
        ifaces: &[Interface],
        section: &SectionInfo,
    ) -> Result<Vec<u8>, OneInterfaceOnly> {
        let mut out = Vec::with_capacity(256);
        match self {
            Format::Pcap => {
                let [iface] = ifaces else {
                    return Err(OneInterfaceOnly {
                        interfaces: ifaces.len(),
                    });
                };
                out.extend_from_slice(&PCAP_MAGIC_NS.to_le_bytes());
                out.extend_from_slice(&2u16.to_le_bytes());
                out.extend_from_slice(&4u16.to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes()); // thiszone
                out.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
                out.extend_from_slice(&pcap_snaplen(iface.snaplen).to_le_bytes());
                out.extend_from_slice(&u32::from(iface.linktype).to_le_bytes());
            }
            Format::Pcapng => {
                let mut body = Vec::new();
                body.extend_from_slice(&pcapng::BYTE_ORDER_MAGIC.to_le_bytes());
                body.extend_from_slice(&1u16.to_le_bytes());
                body.extend_from_slice(&0u16.to_le_bytes());
                body.extend_from_slice(&(-1i64).to_le_bytes()); // section length unknown
                let mut opts = Options::default();
                opts.str(pcapng::SHB_HARDWARE, section.hardware.as_deref());
                opts.str(pcapng::SHB_OS, section.os.as_deref());
                opts.str(pcapng::SHB_USERAPPL, section.application.as_deref());
                opts.finish_into(&mut body);
                block(&mut out, pcapng::SHB, &body);
                for iface in ifaces {
                    let mut body = Vec::new();
                    body.extend_from_slice(&iface.linktype.to_le_bytes());
                    body.extend_from_slice(&0u16.to_le_bytes());
                    body.extend_from_slice(&iface.snaplen.to_le_bytes());
                    let mut opts = Options::default();
                    opts.str(pcapng::IF_NAME, iface.name.as_deref());
                    opts.str(pcapng::IF_DESCRIPTION, iface.description.as_deref());
                    opts.raw(pcapng::IF_TSRESOL, &[9]);
                    opts.finish_into(&mut body);
                    block(&mut out, pcapng::IDB, &body);
                }
            }
        }
        Ok(out)
    }

    /// Bytes the record of `p` takes.
    #[inline]
    pub fn record_len(self, p: &Packet<'_>) -> usize {
        let caplen = p.data.len();
        match self {
            Format::Pcap => 16 + caplen,
            Format::Pcapng => pcapng::EPB_OVERHEAD + pad4(caplen) + epb_options_len(p),
        }
    }

    /// The most bytes a record of `caplen` captured bytes can take, whatever its options.
    pub fn max_record_len(self, caplen: usize) -> usize {
        match self {
            Format::Pcap => 16 + caplen,
            Format::Pcapng => pcapng::EPB_OVERHEAD + pad4(caplen) + pcapng::EPB_FLAGS_LEN,
        }
    }

    /// Encodes one packet record into the front of `out`, which must hold at least
    /// `record_len(p)` bytes; returns the bytes written. Classic pcap has nowhere to put
    /// the packet's flags; pcapng writes them as `epb_flags` when the packet has them.
    #[inline]
    pub fn write_record(self, p: &Packet<'_>, out: &mut [u8]) -> usize {
        let caplen = p.data.len();
        match self {
            Format::Pcap => {
                let n = 16 + caplen;
                let out = &mut out[..n];
                let secs = (p.ts_ns / 1_000_000_000) as u32;
                let nanos = (p.ts_ns % 1_000_000_000) as u32;
                out[0..4].copy_from_slice(&secs.to_le_bytes());
                out[4..8].copy_from_slice(&nanos.to_le_bytes());
                out[8..12].copy_from_slice(&(caplen as u32).to_le_bytes());
                out[12..16].copy_from_slice(&p.orig_len.to_le_bytes());
                out[16..].copy_from_slice(p.data);
                n
            }
            Format::Pcapng => {
                let data_end = 28 + pad4(caplen);
                let n = data_end + epb_options_len(p) + 4;
                let out = &mut out[..n];
                out[0..4].copy_from_slice(&pcapng::EPB.to_le_bytes());
                out[4..8].copy_from_slice(&(n as u32).to_le_bytes());
                out[8..12].copy_from_slice(&p.iface.to_le_bytes());
                out[12..16].copy_from_slice(&((p.ts_ns >> 32) as u32).to_le_bytes());
                out[16..20].copy_from_slice(&(p.ts_ns as u32).to_le_bytes());
                out[20..24].copy_from_slice(&(caplen as u32).to_le_bytes());
                out[24..28].copy_from_slice(&p.orig_len.to_le_bytes());
                out[28..28 + caplen].copy_from_slice(p.data);
                out[28 + caplen..data_end].fill(0);
                if let Some(flags) = p.flags {
                    let o = &mut out[data_end..data_end + pcapng::EPB_FLAGS_LEN];
                    o[0..2].copy_from_slice(&pcapng::EPB_FLAGS.to_le_bytes());
                    o[2..4].copy_from_slice(&4u16.to_le_bytes());
                    o[4..8].copy_from_slice(&flags.0.to_le_bytes());
                    o[8..12].fill(0); // opt_endofopt
                }
                out[n - 4..].copy_from_slice(&(n as u32).to_le_bytes());
                n
            }
        }
    }

    /// An interface statistics block (pcapng only; classic pcap has nowhere to put one,
    /// so its counts live in the chunk index alone). `comment` names drop causes that
    /// the standard options cannot.
    pub fn stats_block(self, stats: &InterfaceStats, start_ns: u64, comment: &str) -> Vec<u8> {
        let mut out = Vec::new();
        if self == Format::Pcap {
            return out;
        }
        let mut body = Vec::new();
        body.extend_from_slice(&stats.iface.to_le_bytes());
        body.extend_from_slice(&((stats.ts_ns >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(stats.ts_ns as u32).to_le_bytes());
        let mut opts = Options::default();
        opts.str(
            pcapng::OPT_COMMENT,
            (!comment.is_empty()).then_some(comment),
        );
        opts.ts(pcapng::ISB_STARTTIME, start_ns);
        opts.ts(pcapng::ISB_ENDTIME, stats.ts_ns);
        opts.u64(pcapng::ISB_IFRECV, stats.received);
        opts.u64(pcapng::ISB_IFDROP, stats.if_dropped);
        opts.u64(pcapng::ISB_OSDROP, stats.os_dropped);
        opts.u64(pcapng::ISB_USRDELIV, stats.delivered);
        opts.finish_into(&mut body);
        block(&mut out, pcapng::ISB, &body);
        out
    }
}

/// Option bytes of a packet's EPB: only `epb_flags`, and only when known, so the
/// common record of a file or synthetic source stays as small as before.
#[inline]
fn epb_options_len(p: &Packet<'_>) -> usize {
    if p.flags.is_some() {
        pcapng::EPB_FLAGS_LEN
    } else {
        0
    }
}

/// Classic pcap readers reject a snaplen of 0, which pcapng uses for "unlimited".
fn pcap_snaplen(snaplen: u32) -> u32 {
    if snaplen == 0 {
        262_144
    } else {
        snaplen
    }
}

fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
    let len = (12 + pad4(body.len())) as u32;
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    out.resize(out.len() + pad4(body.len()) - body.len(), 0);
    out.extend_from_slice(&len.to_le_bytes());
}

#[derive(Default)]
struct Options {
    buf: Vec<u8>,
}

impl Options {
    fn raw(&mut self, code: u16, value: &[u8]) {
        self.buf.extend_from_slice(&code.to_le_bytes());
        self.buf
            .extend_from_slice(&(value.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(value);
        self.buf.resize(pad4(self.buf.len()), 0);
    }
    fn str(&mut self, code: u16, value: Option<&str>) {
        if let Some(v) = value {
            // An option length is 16 bits; cut long strings on a character boundary.
            let mut end = v.len().min(u16::MAX as usize - 3);
            while !v.is_char_boundary(end) {
                end -= 1;
            }
            self.raw(code, &v.as_bytes()[..end]);
        }
    }
    fn u64(&mut self, code: u16, value: Option<u64>) {
        if let Some(v) = value {
            self.raw(code, &v.to_le_bytes());
        }
    }
    fn ts(&mut self, code: u16, ts_ns: u64) {
        let mut v = [0u8; 8];
        v[..4].copy_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
        v[4..].copy_from_slice(&(ts_ns as u32).to_le_bytes());
        self.raw(code, &v);
    }
    fn finish_into(mut self, body: &mut Vec<u8>) {
        if !self.buf.is_empty() {
            self.raw(pcapng::OPT_END, &[]);
        }
        body.extend_from_slice(&self.buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Direction, PacketFlags, TraceReader};

    fn packet(flags: Option<PacketFlags>) -> Packet<'static> {
        Packet {
            ts_ns: 0x1_0000_0002,
            iface: 1,
            orig_len: 9,
            flags,
            data: &[0xaa, 0xbb, 0xcc],
        }
    }

    fn record(format: Format, p: &Packet<'_>) -> Vec<u8> {
        let mut out = vec![0xee; format.record_len(p)];
        let n = format.write_record(p, &mut out);
        assert_eq!(n, out.len());
        out
    }

    #[test]
    fn an_epb_without_flags_has_no_options() {
        #[rustfmt::skip]
        let want = [
            6, 0, 0, 0, 36, 0, 0, 0, // EPB, 36 bytes
            1, 0, 0, 0, // interface 1
            1, 0, 0, 0, 2, 0, 0, 0, // ts high, low
            3, 0, 0, 0, 9, 0, 0, 0, // caplen 3, orig_len 9
            0xaa, 0xbb, 0xcc, 0, // data, padding
            36, 0, 0, 0,
        ];
        assert_eq!(record(Format::Pcapng, &packet(None)), want);
    }

    #[test]
    fn an_epb_with_flags_carries_epb_flags_and_the_end_marker() {
        #[rustfmt::skip]
        let want = [
            6, 0, 0, 0, 48, 0, 0, 0, // EPB, 48 bytes
            1, 0, 0, 0, // interface 1
            1, 0, 0, 0, 2, 0, 0, 0, // ts high, low
            3, 0, 0, 0, 9, 0, 0, 0, // caplen 3, orig_len 9
            0xaa, 0xbb, 0xcc, 0, // data, padding
            2, 0, 4, 0, 0x02, 0, 0, 0, // epb_flags: outbound
            0, 0, 0, 0, // opt_endofopt
            48, 0, 0, 0,
        ];
        let p = packet(Some(PacketFlags(2)));
        assert_eq!(record(Format::Pcapng, &p), want);
        assert_eq!(Format::Pcapng.max_record_len(3), want.len());
    }

    #[test]
    fn classic_pcap_has_no_room_for_flags() {
        let with = record(Format::Pcap, &packet(Some(PacketFlags(5))));
        assert_eq!(with, record(Format::Pcap, &packet(None)));
        assert_eq!(with.len(), 19);
    }

    #[test]
    fn flags_written_are_flags_read() {
        let ifaces = [Interface::default(), Interface::default()];
        let mut file = Format::Pcapng
            .file_header(&ifaces, &SectionInfo::default())
            .unwrap();
        let all = [
            None,
            PacketFlags::from_pkttype(4),
            PacketFlags::from_pkttype(1),
        ];
        for flags in all {
            file.extend(record(Format::Pcapng, &packet(flags)));
        }
        let mut r = TraceReader::new(&file[..]).unwrap();
        let mut got = Vec::new();
        while let Some(p) = r.next_packet().unwrap() {
            assert_eq!(p.data, [0xaa, 0xbb, 0xcc]);
            got.push((p.flags, p.direction()));
        }
        assert_eq!(
            got,
            vec![
                (None, None),
                (Some(PacketFlags(2)), Some(Direction::Outbound)),
                (Some(PacketFlags(0b01101)), Some(Direction::Inbound)),
            ]
        );
    }
}
