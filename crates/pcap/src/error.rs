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
