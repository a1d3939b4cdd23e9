//! pcapng block types and option codes we read and write (draft-ietf-opsawg-pcapng).

pub const SHB: u32 = 0x0A0D_0D0A;
pub const IDB: u32 = 0x0000_0001;
pub const OPB: u32 = 0x0000_0002; // obsolete packet block, still found in old files
pub const SPB: u32 = 0x0000_0003;
pub const ISB: u32 = 0x0000_0005;
pub const EPB: u32 = 0x0000_0006;
pub const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;

pub const OPT_END: u16 = 0;
pub const OPT_COMMENT: u16 = 1;
pub const SHB_HARDWARE: u16 = 2;
pub const SHB_OS: u16 = 3;
pub const SHB_USERAPPL: u16 = 4;
pub const IF_NAME: u16 = 2;
pub const IF_DESCRIPTION: u16 = 3;
pub const IF_TSRESOL: u16 = 9;
pub const IF_TSOFFSET: u16 = 14;
pub const EPB_FLAGS: u16 = 2;
pub const ISB_STARTTIME: u16 = 2;
pub const ISB_ENDTIME: u16 = 3;
pub const ISB_IFRECV: u16 = 4;
pub const ISB_IFDROP: u16 = 5;
pub const ISB_OSDROP: u16 = 7;
pub const ISB_USRDELIV: u16 = 8;

/// Bytes an enhanced packet block adds around the packet data (before padding).
pub const EPB_OVERHEAD: usize = 32;

/// Bytes an `epb_flags` option adds to an enhanced packet block: the option (header and
/// 4-byte value) and the end-of-options marker.
pub const EPB_FLAGS_LEN: usize = 12;

/// Rounds up to the 32-bit boundary pcapng pads every field to.
pub const fn pad4(n: usize) -> usize {
    (n + 3) & !3
}
