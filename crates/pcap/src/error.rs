use std::fmt;

/// A defect in a capture file, with the byte offset where it was found.
#[derive(Debug, thiserror::Error)]
pub struct FormatError {
    /// Offset from the start of the input (of the decompressed stream, for containers).
    pub offset: u64,
    pub kind: FormatErrorKind,
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte offset {}: {}", self.offset, self.kind)
    }
}

impl FormatError {
    pub fn new(offset: u64, kind: FormatErrorKind) -> Self {
        FormatError { offset, kind }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FormatErrorKind {
    #[error("not a pcap or pcapng file (magic {0:#010x})")]
    UnknownMagic(u32),
    #[error("file ends in the middle of {0}")]
    Truncated(&'static str),
    #[error("{0}")]
    Invalid(String),
    /// A pcapng block whose body does not hold what its type says.
    #[error(transparent)]
    Block(#[from] BlockError),
    #[error("read failed: {0}")]
    Io(#[from] std::io::Error),
}

/// A field cut short where the reader had checked the length before (so in practice never):
/// the file ends in the middle of that field.
impl From<crate::bytes::ShortInput> for FormatError {
    fn from(e: crate::bytes::ShortInput) -> Self {
        FormatError::new(e.offset, FormatErrorKind::Truncated(e.field))
    }
}

/// A codec name that is none of raw, lz4, zstd or zstd:LEVEL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown codec '{given}': use raw, lz4, zstd or zstd:LEVEL (LEVEL -7..22)")]
pub struct UnknownCodec {
    /// The name as given, lower-cased.
    pub given: String,
}

/// What is wrong inside a pcapng block body; the reader adds the block's offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    #[error(transparent)]
    Short(#[from] crate::bytes::ShortInput),
    #[error("section header version {major}.{minor}; this reader knows version 1")]
    SectionVersion { major: u16, minor: u16 },
    #[error("more interfaces than 32-bit interface numbers can name")]
    TooManyInterfaces,
    #[error(
        "{block} names interface {local} but its section has {in_section} interface(s) so far"
    )]
    NoSuchInterface {
        block: &'static str,
        local: u32,
        in_section: usize,
    },
    #[error("{kind} packet block says captured length {caplen} but the block holds {room} bytes")]
    CapturedLength {
        kind: &'static str,
        caplen: usize,
        room: usize,
    },
    #[error("an option header needs 4 bytes but only {remaining} remain in the block")]
    OptionHeader { remaining: usize },
    #[error(
        "option {code} says its value is {len} bytes but only {remaining} remain in the block"
    )]
    OptionValue {
        code: u16,
        len: usize,
        remaining: usize,
    },
    /// An option of fixed width (`if_tsresol`, `if_tsoffset`, `epb_flags`) of another width.
    #[error("{option} option is {len} bytes, not {want}")]
    OptionWidth {
        option: &'static str,
        len: usize,
        want: usize,
    },
    #[error("interface statistics option {code} is {len} bytes, not 8")]
    StatisticsWidth { code: u16, len: usize },
    #[error("timestamp {raw} (resolution {resolution}, offset {offset_s} s) is outside the range of 64-bit nanoseconds since 1970")]
    TimestampRange {
        raw: u64,
        /// As the reader's resolution type prints itself (`Pow10(9)`).
        resolution: String,
        offset_s: i64,
    },
}
