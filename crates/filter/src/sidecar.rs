//! The block index of a plain pcap or pcapng file (`FILE.tdx`, written by `tapdeck index`).
//!
//! A capture file that is not in a store has no chunk index, and it must stay byte for byte
//! what it is (other tools read it), so its index lives beside it. The file is cut into
//! blocks of a few MiB at record boundaries; each block records where it is, its packets'
//! time range and its [`ChunkFilter`]. The sidecar also records what it was built from (the
//! file's size and a hash of its first and last bytes): a sidecar whose file has changed is
//! stale, and readers ignore it.
//!
//! A compressed capture file (gzip, bzip2, xz, zstd, LZ4: how archives of old traces are
//! kept) gets a sidecar too, version 2: its blocks lie in the decompressed stream, whose
//! length the header adds. Such a file cannot be read from a block's offset without
//! decompressing what comes before, but its flow index still tells a reader which files
//! hold no packet it wants, without decompressing them at all.
//!
//! ```text
//! "TDXS", u8 version (1, or 2 for a compressed file), u8 format (0 pcap, 1 pcapng),
//! u8 compression (0 none; version 2: 1 gzip, 2 bzip2, 3 xz, 4 zstd, 5 lz4),
//! u8 flags (bit 0: the blocks cannot be read alone, see `Sidecar::whole_only`; others 0)
//! u64 file size, u64 xxh3 of its first IDENTITY_SPAN bytes, u64 xxh3 of its last ones
//! version 2 only: u64 length of the decompressed stream
//! u32 block count, then per block:
//!   u64 offset, u64 length, u32 packets, u64 earliest ts (ns), u64 latest ts (ns),
//!   u32 flow index length, the flow index (TDFI)
//! u32 xxh32 of everything before it
//! ```
//!
//! Everything is little-endian. Blocks lie in order inside the file (or the stream). Decoding
//! treats its input as hostile: every length is checked before use, and only the canonical
//! encoding is accepted (what [`Sidecar::encode`] writes), so a decoded sidecar encodes back
//! to the same bytes.

use crate::{ChunkFilter, DecodeError};

/// The sidecar's magic number.
pub const SIDECAR_MAGIC: [u8; 4] = *b"TDXS";
/// The version this build writes for a plain file; it reads it and [`SIDECAR_VERSION_COMPRESSED`].
pub const SIDECAR_VERSION: u8 = 1;
/// The version of a compressed file's sidecar.
pub const SIDECAR_VERSION_COMPRESSED: u8 = 2;
/// The highest compression code (see the module documentation).
pub const MAX_COMPRESSION: u8 = 5;
/// How many bytes at each end of the data file the identity hashes cover.
pub const IDENTITY_SPAN: u64 = 64 * 1024;
const HEADER_LEN: usize = 4 + 1 + 1 + 2 + 8 + 8 + 8 + 4;
const BLOCK_FIXED_LEN: usize = 8 + 8 + 4 + 8 + 8 + 4;
const CHECKSUM_LEN: usize = 4;

/// What the sidecar was built from: enough to tell that the file changed since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity {
    pub size: u64,
    /// xxh3 of the first `min(size, IDENTITY_SPAN)` bytes.
    pub head_hash: u64,
    /// xxh3 of the last `min(size, IDENTITY_SPAN)` bytes.
    pub tail_hash: u64,
}

impl FileIdentity {
    /// The identity of a file of `size` bytes whose first and last bytes (at most
    /// [`IDENTITY_SPAN`] each) are `head` and `tail`.
    pub fn of(size: u64, head: &[u8], tail: &[u8]) -> FileIdentity {
        FileIdentity {
            size,
            head_hash: xxhash_rust::xxh3::xxh3_64(head),
            tail_hash: xxhash_rust::xxh3::xxh3_64(tail),
        }
    }
}

/// One block of the data file: a run of whole records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub offset: u64,
    pub len: u64,
    pub packets: u32,
    pub first_ts_ns: u64,
    pub last_ts_ns: u64,
    /// The encoded [`ChunkFilter`] of the block's packets.
    pub flows: Vec<u8>,
}

/// The decoded sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sidecar {
    /// 0 for classic pcap, 1 for pcapng.
    pub format: u8,
    /// 0 for a plain file; else the compression's code (see the module documentation).
    pub compression: u8,
    pub identity: FileIdentity,
    /// The length of the capture bytes the blocks lie in: the file's size, or for a
    /// compressed file the decompressed stream's.
    pub stream_size: u64,
    /// The file declares interfaces (or a new section) after its first packet, so a block
    /// cannot be parsed after the file's header alone: it is read whole.
    pub whole_only: bool,
    pub blocks: Vec<Block>,
}

/// Why a sidecar does not decode; `at` is the byte offset in the sidecar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SidecarError {
    #[error("at byte offset {at}: {field} needs {need} bytes, the sidecar ends first")]
    Truncated {
        at: usize,
        field: &'static str,
        need: usize,
    },
    #[error("at byte offset {at}: {what}")]
    Invalid { at: usize, what: String },
    #[error("at byte offset {at}: block {block}: {source}")]
    Flows {
        at: usize,
        block: usize,
        source: DecodeError,
    },
}

/// A bounds-checked reader over the sidecar's bytes.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], SidecarError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(SidecarError::Truncated {
                at: self.at,
                field,
                need: n,
            })?;
        let out = &self.buf[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, SidecarError> {
        Ok(self.take(1, field)?[0])
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, SidecarError> {
        let b = self.take(4, field)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, SidecarError> {
        let b = self.take(8, field)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

fn invalid(at: usize, what: impl Into<String>) -> SidecarError {
    SidecarError::Invalid {
        at,
        what: what.into(),
    }
}

impl Sidecar {
    /// The binary form described in the module documentation.
    pub fn encode(&self) -> Vec<u8> {
        let flows: usize = self.blocks.iter().map(|b| b.flows.len()).sum();
        let mut out = Vec::with_capacity(
            HEADER_LEN + self.blocks.len() * BLOCK_FIXED_LEN + flows + CHECKSUM_LEN,
        );
        out.extend(SIDECAR_MAGIC);
        out.push(if self.compression == 0 {
            SIDECAR_VERSION
        } else {
            SIDECAR_VERSION_COMPRESSED
        });
        out.push(self.format);
        out.push(self.compression);
        out.push(u8::from(self.whole_only));
        out.extend(self.identity.size.to_le_bytes());
        out.extend(self.identity.head_hash.to_le_bytes());
        out.extend(self.identity.tail_hash.to_le_bytes());
        if self.compression != 0 {
            out.extend(self.stream_size.to_le_bytes());
        }
        out.extend((self.blocks.len() as u32).to_le_bytes());
        for b in &self.blocks {
            out.extend(b.offset.to_le_bytes());
            out.extend(b.len.to_le_bytes());
            out.extend(b.packets.to_le_bytes());
            out.extend(b.first_ts_ns.to_le_bytes());
            out.extend(b.last_ts_ns.to_le_bytes());
            out.extend((b.flows.len() as u32).to_le_bytes());
            out.extend(&b.flows);
        }
        let sum = xxhash_rust::xxh32::xxh32(&out, 0);
        out.extend(sum.to_le_bytes());
        out
    }

    /// Reads what [`encode`](Self::encode) wrote; anything else is an error naming the
    /// offset. Never panics; allocates no more than the input's size.
    pub fn decode(bytes: &[u8]) -> Result<Sidecar, SidecarError> {
        let mut c = Cursor { buf: bytes, at: 0 };
        if c.take(4, "magic")? != SIDECAR_MAGIC {
            return Err(invalid(0, "not a tapdeck sidecar (no TDXS magic)"));
        }
        let version = c.u8("version")?;
        if version != SIDECAR_VERSION && version != SIDECAR_VERSION_COMPRESSED {
            return Err(invalid(
                4,
                format!("sidecar version {version}, this tapdeck reads {SIDECAR_VERSION} and {SIDECAR_VERSION_COMPRESSED}"),
            ));
        }
        let format = c.u8("format")?;
        if format > 1 {
            return Err(invalid(5, format!("unknown capture format {format}")));
        }
        let compression = c.u8("compression")?;
        // Version 1 is a plain file's, version 2 a compressed one's: nothing else encodes.
        if (version == SIDECAR_VERSION) != (compression == 0) || compression > MAX_COMPRESSION {
            return Err(invalid(
                6,
                format!("compression {compression} in a version {version} sidecar"),
            ));
        }
        let whole_only = match c.u8("flags")? {
            0 => false,
            1 => true,
            f => return Err(invalid(7, format!("unknown flags {f:#04x}"))),
        };
        let identity = FileIdentity {
            size: c.u64("file size")?,
            head_hash: c.u64("head hash")?,
            tail_hash: c.u64("tail hash")?,
        };
        let stream_size = if compression == 0 {
            identity.size
        } else {
            c.u64("stream length")?
        };
        let count_at = c.at;
        let count = c.u32("block count")? as usize;
        // Each block takes at least its fixed part: a count beyond that is a lie.
        if count > bytes.len().saturating_sub(c.at) / BLOCK_FIXED_LEN {
            return Err(invalid(
                count_at,
                format!("{count} blocks do not fit in the sidecar"),
            ));
        }
        let mut blocks = Vec::with_capacity(count);
        let mut next = 0u64;
        for i in 0..count {
            let at = c.at;
            let block = Block {
                offset: c.u64("block offset")?,
                len: c.u64("block length")?,
                packets: c.u32("block packets")?,
                first_ts_ns: c.u64("block earliest time")?,
                last_ts_ns: c.u64("block latest time")?,
                flows: {
                    let len = c.u32("flow index length")? as usize;
                    let flows_at = c.at;
                    let flows = c.take(len, "flow index")?;
                    ChunkFilter::decode(flows).map_err(|source| SidecarError::Flows {
                        at: flows_at,
                        block: i,
                        source,
                    })?;
                    flows.to_vec()
                },
            };
            let end = block.offset.checked_add(block.len);
            if block.offset < next || end.is_none_or(|e| e > stream_size) || block.len == 0 {
                return Err(invalid(
                    at,
                    format!(
                        "block {i} at {} of {} bytes is not after the one before it inside the {stream_size}-byte {}",
                        block.offset, block.len, if compression == 0 { "file" } else { "stream" }
                    ),
                ));
            }
            if block.first_ts_ns > block.last_ts_ns {
                return Err(invalid(at, format!("block {i} ends before it begins")));
            }
            next = block.offset + block.len;
            blocks.push(block);
        }
        let sum_at = c.at;
        let stored = c.u32("checksum")?;
        if c.at != bytes.len() {
            return Err(invalid(
                c.at,
                format!("{} bytes after the checksum", bytes.len() - c.at),
            ));
        }
        let computed = xxhash_rust::xxh32::xxh32(&bytes[..sum_at], 0);
        if stored != computed {
            return Err(invalid(
                sum_at,
                format!("checksum {stored:08x} stored, {computed:08x} computed"),
            ));
        }
        Ok(Sidecar {
            format,
            whole_only,
            compression,
            identity,
            stream_size,
            blocks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChunkFilterBuilder;

    fn sample() -> Sidecar {
        let mut b = ChunkFilterBuilder::new();
        b.add(1, &[0u8; 14]);
        let flows = b.finish().encode();
        Sidecar {
            format: 1,
            compression: 0,
            identity: FileIdentity::of(10_000, b"head", b"tail"),
            stream_size: 10_000,
            whole_only: false,
            blocks: vec![
                Block {
                    offset: 28,
                    len: 4_000,
                    packets: 3,
                    first_ts_ns: 5,
                    last_ts_ns: 9,
                    flows: flows.clone(),
                },
                Block {
                    offset: 4_028,
                    len: 5_972,
                    packets: 1,
                    first_ts_ns: 7,
                    last_ts_ns: 7,
                    flows,
                },
            ],
        }
    }

    #[test]
    fn a_sidecar_round_trips() {
        let s = sample();
        let bytes = s.encode();
        assert_eq!(Sidecar::decode(&bytes).unwrap(), s);
        let empty = Sidecar {
            blocks: Vec::new(),
            ..s
        };
        assert_eq!(Sidecar::decode(&empty.encode()).unwrap(), empty);
        let whole = Sidecar {
            whole_only: true,
            ..sample()
        };
        let bytes = whole.encode();
        assert_eq!(bytes[7], 1);
        assert_eq!(Sidecar::decode(&bytes).unwrap(), whole);
    }

    #[test]
    fn a_compressed_files_sidecar_round_trips_and_survives_no_damage() {
        // A 3,000-byte xz file whose stream is the sample's 10,000 bytes.
        let s = Sidecar {
            compression: 3,
            identity: FileIdentity::of(3_000, b"head", b"tail"),
            stream_size: 10_000,
            ..sample()
        };
        let bytes = s.encode();
        assert_eq!(bytes[4], SIDECAR_VERSION_COMPRESSED);
        assert_eq!(Sidecar::decode(&bytes).unwrap(), s);
        for cut in 0..bytes.len() {
            assert!(Sidecar::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut d = bytes.clone();
                d[i] ^= 1 << bit;
                assert!(Sidecar::decode(&d).is_err(), "byte {i} bit {bit}");
            }
        }
        // Blocks must lie in the stream, which may be longer than the file, not beyond it.
        let mut beyond = s.clone();
        beyond.blocks[1].len += 1;
        assert!(Sidecar::decode(&beyond.encode()).is_err());
    }

    #[test]
    fn the_identity_tells_files_apart() {
        let a = FileIdentity::of(100, b"abc", b"xyz");
        assert_eq!(a, FileIdentity::of(100, b"abc", b"xyz"));
        assert_ne!(a, FileIdentity::of(101, b"abc", b"xyz"));
        assert_ne!(a, FileIdentity::of(100, b"abd", b"xyz"));
        assert_ne!(a, FileIdentity::of(100, b"abc", b"xyy"));
    }

    /// Every truncation, every flipped bit: an error naming an offset inside the sidecar,
    /// never a panic, or (never, with the checksum) a different sidecar.
    #[test]
    fn damage_is_an_error_never_a_panic() {
        let s = sample();
        let bytes = s.encode();
        for cut in 0..bytes.len() {
            assert!(Sidecar::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut d = bytes.clone();
                d[i] ^= 1 << bit;
                match Sidecar::decode(&d) {
                    Ok(read) => panic!("byte {i} bit {bit}: read {read:?}"),
                    Err(e) => assert!(!e.to_string().contains('\n')),
                }
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Sidecar::decode(&longer).is_err());
    }

    #[test]
    fn blocks_out_of_order_or_outside_the_file_are_refused() {
        let mut s = sample();
        s.blocks.swap(0, 1);
        assert!(Sidecar::decode(&s.encode()).is_err());
        let mut s = sample();
        s.blocks[1].len += 1;
        assert!(Sidecar::decode(&s.encode()).is_err());
        let mut s = sample();
        s.blocks[0].first_ts_ns = 10;
        assert!(Sidecar::decode(&s.encode()).is_err());
    }
}
