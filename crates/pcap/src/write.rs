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
    ) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(256);
        match self {
            Format::Pcap => {
                let [iface] = ifaces else {
                    return Err(format!(
                        "classic pcap holds exactly one interface, this stream has {}; use pcapng",
                        ifaces.len()
                    ));
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

    /// Bytes one packet record takes, for a packet of `caplen` captured bytes.
    #[inline]
    pub fn record_len(self, caplen: usize) -> usize {
        match self {
            Format::Pcap => 16 + caplen,
            Format::Pcapng => pcapng::EPB_OVERHEAD + pad4(caplen),
        }
    }

    /// Encodes one packet record into the front of `out`, which must hold at least
    /// `record_len(p.data.len())` bytes; returns the bytes written.
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
                let n = pcapng::EPB_OVERHEAD + pad4(caplen);
                let out = &mut out[..n];
                out[0..4].copy_from_slice(&pcapng::EPB.to_le_bytes());
                out[4..8].copy_from_slice(&(n as u32).to_le_bytes());
                out[8..12].copy_from_slice(&p.iface.to_le_bytes());
                out[12..16].copy_from_slice(&((p.ts_ns >> 32) as u32).to_le_bytes());
                out[16..20].copy_from_slice(&(p.ts_ns as u32).to_le_bytes());
                out[20..24].copy_from_slice(&(caplen as u32).to_le_bytes());
                out[24..28].copy_from_slice(&p.orig_len.to_le_bytes());
                out[28..28 + caplen].copy_from_slice(p.data);
                out[28 + caplen..n - 4].fill(0);
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
