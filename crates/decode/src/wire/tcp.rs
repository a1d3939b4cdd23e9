//! TCP header (RFC 9293 §3.1).
//!
//! ```text
//! |          Source Port          |       Destination Port        |
//! |                        Sequence Number                        |
//! |                    Acknowledgment Number                      |
//! |  Data |       |C|E|U|A|P|R|S|F|                               |
//! | Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//! |           Checksum            |         Urgent Pointer        |
//! |                    Options                    |    Padding    |
//! ```

use super::{be16, be32, check_len, Error, Layer, Result};

mod field {
    use crate::wire::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ_NUM: Field = 4..8;
    pub const ACK_NUM: Field = 8..12;
    /// Data offset (4 bits), then 12 flag bits (reserved, AE, CWR, ECE, URG, ACK, PSH, RST,
    /// SYN, FIN).
    pub const FLAGS: Field = 12..14;
    pub const WIN_SIZE: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
    pub const OPTIONS: usize = 20;
}

/// Length of the header without options.
pub const MIN_HEADER_LEN: usize = field::OPTIONS;

/// A TCP segment. `new_checked` guarantees the whole header, options included, so every
/// accessor is infallible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// A view over `buffer`: the fixed header must be captured, the data offset at least 5
    /// words, and the options it announces captured too.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        check_len(Layer::Tcp, b, MIN_HEADER_LEN)?;
        let view = TcpPacket { buffer };
        let hl = view.header_len();
        if hl < MIN_HEADER_LEN {
            return Err(Error::Malformed {
                layer: Layer::Tcp,
                field: "data offset",
                value: hl as u32 / 4,
            });
        }
        check_len(Layer::Tcp, view.buffer.as_ref(), hl)?;
        Ok(view)
    }

    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }

    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }

    pub fn seq_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ_NUM)
    }

    pub fn ack_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK_NUM)
    }

    /// The 12 bits after the data offset, as tshark's `tcp.flags` shows them.
    pub fn flags(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLAGS) & 0x0fff
    }

    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::FLAGS.start] >> 4) * 4
    }

    pub fn window_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WIN_SIZE)
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    pub fn urgent_at(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT)
    }

    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }

    /// The captured bytes after the header (any link padding included: the IP length
    /// says where the segment ends).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tcpdump-tests/nfs-write-verf-cookie.pcapng, frame 1: port 993 to 2049, PSH+ACK,
    /// timestamps option; then the RPC record mark and the first bytes of the call (xid).
    const SEGMENT: [u8; 40] = [
        0x03, 0xe1, 0x08, 0x01, 0x57, 0x83, 0xec, 0xeb, 0xaf, 0x5a, 0x98, 0x3c, 0x80, 0x18, 0x01,
        0x17, 0xff, 0xf5, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a, 0x61, 0xda, 0x49, 0x5b, 0x24, 0x45,
        0xf5, 0xf2, 0x80, 0x00, 0x00, 0x90, 0x05, 0x64, 0x95, 0x69,
    ];

    #[test]
    fn deconstruct() {
        let t = TcpPacket::new_checked(&SEGMENT[..]).unwrap();
        assert_eq!((t.src_port(), t.dst_port()), (993, 2049));
        assert_eq!((t.seq_number(), t.ack_number()), (0x5783_eceb, 0xaf5a_983c));
        assert_eq!(
            (t.flags(), t.header_len(), t.window_len()),
            (0x018, 32, 0x0117)
        );
        assert_eq!((t.checksum(), t.urgent_at()), (0xfff5, 0));
        assert_eq!(t.options()[..4], [0x01, 0x01, 0x08, 0x0a]);
        assert_eq!(
            t.payload(),
            &[0x80, 0x00, 0x00, 0x90, 0x05, 0x64, 0x95, 0x69]
        );
    }

    #[test]
    fn every_prefix() {
        for n in 0..32 {
            let need = if n < 20 { 20 } else { 32 };
            assert_eq!(
                TcpPacket::new_checked(&SEGMENT[..n]),
                Err(Error::Truncated {
                    layer: Layer::Tcp,
                    need,
                    have: n
                }),
                "prefix {n}"
            );
        }
        assert!(TcpPacket::new_checked(&SEGMENT[..32])
            .unwrap()
            .payload()
            .is_empty());
    }

    #[test]
    fn data_offset_under_five_words() {
        let mut b = SEGMENT;
        b[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&b[..]),
            Err(Error::Malformed {
                layer: Layer::Tcp,
                field: "data offset",
                value: 4
            })
        );
    }
}
