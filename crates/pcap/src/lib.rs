//! Capture file formats: classic pcap and pcapng (encoding and strict reading), and the
//! chunked compressed container tapdeck stores them in.
//!
//! Everything here works on byte slices and `std::io` traits; nothing spawns threads or
//! touches the network. Readers treat their input as hostile: every length is checked
//! before use (through [`bytes::Cursor`], never by indexing by hand) and errors carry the
//! byte offset of the defect.
#![forbid(unsafe_code)]

pub mod bytes;
pub mod compression;
pub mod container;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod packet;
pub mod pcapng;
pub mod reader;
pub mod validate;
mod write;

pub use error::{BlockError, FormatError, FormatErrorKind, UnknownCodec};
pub use packet::{Direction, Interface, InterfaceStats, Packet, PacketFlags};
pub use reader::{TraceBytes, TraceReader};
pub use write::{Format, OneInterfaceOnly, SectionInfo};
