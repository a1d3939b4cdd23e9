//! Compressed traces. Archives of old traces are kept gzip-, bzip2- or xz-compressed;
//! tapdeck's own files and exports are zstd or LZ4. Every command that reads a trace goes
//! through [`decompress`], which tells the compression from the input's first bytes (never
//! from its name: `trace.pcap` may well hold gzip data, and standard input has no name)
//! and decodes it as a stream, so an archive is never unpacked to disk or held in memory.
//!
//! Concatenated members (`cat a.gz b.gz`, `pbzip2`'s streams, `xz` of several streams,
//! several zstd or LZ4 frames) decode as one stream, as the stock tools do.
//!
//! A decoder that fails mid-stream fails the read with an [`ArchiveError`]: whether the
//! archive was cut short or is corrupt, and about where in its compressed bytes. What was
//! decoded before that point has been delivered, so a reader keeps the packets before it.

use std::fmt;
use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// How many leading bytes [`Compression::detect`] needs to tell every format.
pub const MAGIC_LEN: usize = 6;

/// The most memory an xz stream may ask for to be decoded. Every `xz` preset (`-9e` is the
/// largest, with a 64 MiB dictionary) needs far less; an archive asking for more is most
/// likely corrupt, and a hostile one must not make us allocate gigabytes.
pub const XZ_MEMORY_LIMIT: u64 = 1 << 30;

/// A compression a trace may come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    Bzip2,
    Xz,
    Zstd,
    Lz4,
}

impl Compression {
    /// The compression whose magic number `head` (the input's first [`MAGIC_LEN`] bytes,
    /// or all of it if shorter) starts with; `None` for anything else, such as plain pcap
    /// or pcapng (whose magic numbers are none of these).
    pub fn detect(head: &[u8]) -> Option<Compression> {
        match head {
            // ID1 ID2 and CM = 8 (deflate), the only method RFC 1952 defines.
            [0x1F, 0x8B, 0x08, ..] => Some(Compression::Gzip),
            // "BZh" and the block size, '1' to '9' (hundreds of kB).
            [b'B', b'Z', b'h', b'1'..=b'9', ..] => Some(Compression::Bzip2),
            [0xFD, b'7', b'z', b'X', b'Z', 0x00, ..] => Some(Compression::Xz),
            // Frame magics, little-endian: zstd 0xFD2FB528, LZ4 0x184D2204.
            [0x28, 0xB5, 0x2F, 0xFD, ..] => Some(Compression::Zstd),
            [0x04, 0x22, 0x4D, 0x18, ..] => Some(Compression::Lz4),
            _ => None,
        }
    }

    /// The code a sidecar records (`tapdeck_filter::sidecar`): 1 to 5; 0 means none.
    pub fn code(self) -> u8 {
        match self {
            Compression::Gzip => 1,
            Compression::Bzip2 => 2,
            Compression::Xz => 3,
            Compression::Zstd => 4,
            Compression::Lz4 => 5,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Bzip2 => "bzip2",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
            Compression::Lz4 => "lz4",
        }
    }

    /// A streaming decoder of this compression over `input`, its failures explained as
    /// [`ArchiveError`]s.
    fn decoder(self, input: Box<dyn Read + Send>) -> io::Result<Box<dyn Read + Send>> {
        let taken = Arc::new(Taken::default());
        let input = Counted {
            inner: input,
            taken: Arc::clone(&taken),
        };
        let decoder: Box<dyn Read + Send> = match self {
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(input)),
            Compression::Bzip2 => Box::new(bzip2::read::MultiBzDecoder::new(input)),
            Compression::Xz => {
                let stream = liblzma::stream::Stream::new_stream_decoder(
                    XZ_MEMORY_LIMIT,
                    liblzma::stream::CONCATENATED,
                )?;
                Box::new(liblzma::read::XzDecoder::new_stream(input, stream))
            }
            Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(input)?),
            Compression::Lz4 => Box::new(Lz4Frames {
                decoder: lz4_flex::frame::FrameDecoder::new(input),
                taken: Arc::clone(&taken),
            }),
        };
        Ok(Box::new(Decoded {
            compression: self,
            decoder,
            taken,
        }))
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a compressed input stopped decoding. `at` counts the compressed bytes the decoder
/// had taken: decoders read ahead through a buffer, so for corruption it is where the
/// decoder had got to (the defect lies within a buffer's length before it); for a cut it
/// is the archive's length.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error(
        "the {compression} archive is cut short: it ends at its byte {at}, inside compressed data"
    )]
    CutShort { compression: Compression, at: u64 },
    #[error("the {compression} archive is corrupt near its byte {at}: {why}")]
    Corrupt {
        compression: Compression,
        at: u64,
        why: String,
    },
    #[error("the xz archive needs more than {} MiB of memory to decode (near its byte {at}); no xz preset does, so it is most likely corrupt", XZ_MEMORY_LIMIT >> 20)]
    XzMemory { at: u64 },
}

/// The decompressed bytes of `input` if it starts with a compression's magic number, with
/// that compression; otherwise `input` itself, unchanged. Reads only the first
/// [`MAGIC_LEN`] bytes before returning.
pub fn decompress(
    mut input: Box<dyn Read + Send>,
) -> io::Result<(Option<Compression>, Box<dyn Read + Send>)> {
    let mut head = [0u8; MAGIC_LEN];
    let mut got = 0;
    while got < head.len() {
        match input.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let whole: Box<dyn Read + Send> = Box::new(io::Cursor::new(head[..got].to_vec()).chain(input));
    match Compression::detect(&head[..got]) {
        Some(c) => Ok((Some(c), c.decoder(whole)?)),
        None => Ok((None, whole)),
    }
}

/// What the decoder has taken from the input, shared between the input it reads and the
/// [`Decoded`] that explains its errors.
#[derive(Default)]
struct Taken {
    bytes: AtomicU64,
    /// Reading the input itself failed: the decoder's error is the input's, not a defect.
    failed: AtomicBool,
}

struct Counted {
    inner: Box<dyn Read + Send>,
    taken: Arc<Taken>,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.taken.bytes.fetch_add(n as u64, Ordering::Relaxed);
                Ok(n)
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.taken.failed.store(true, Ordering::Relaxed);
                }
                Err(e)
            }
        }
    }
}

/// LZ4 frames one after another (`cat a.lz4 b.lz4`, as `lz4 -dc` reads them): lz4_flex's
/// decoder returns `Ok(0)` at the end of each frame, and starts the next frame on the
/// following call. The end of the input is a call that returns nothing and takes nothing.
struct Lz4Frames {
    decoder: lz4_flex::frame::FrameDecoder<Counted>,
    taken: Arc<Taken>,
}

impl Read for Lz4Frames {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            let before = self.taken.bytes.load(Ordering::Relaxed);
            let n = self.decoder.read(out)?;
            if n > 0 || out.is_empty() || self.taken.bytes.load(Ordering::Relaxed) == before {
                return Ok(n);
            }
        }
    }
}

struct Decoded {
    compression: Compression,
    decoder: Box<dyn Read + Send>,
    taken: Arc<Taken>,
}

impl Decoded {
    fn explain(&self, e: io::Error) -> io::Error {
        if e.kind() == io::ErrorKind::Interrupted || self.taken.failed.load(Ordering::Relaxed) {
            return e;
        }
        let (compression, at) = (self.compression, self.taken.bytes.load(Ordering::Relaxed));
        let memory = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<liblzma::stream::Error>())
            .is_some_and(|x| matches!(x, liblzma::stream::Error::MemLimit));
        let why = if memory {
            ArchiveError::XzMemory { at }
        } else if e.kind() == io::ErrorKind::UnexpectedEof {
            ArchiveError::CutShort { compression, at }
        } else {
            ArchiveError::Corrupt {
                compression,
                at,
                why: e.to_string(),
            }
        };
        let kind = match why {
            ArchiveError::CutShort { .. } => io::ErrorKind::UnexpectedEof,
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, why)
    }
}

impl Read for Decoded {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        self.decoder.read(out).map_err(|e| self.explain(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A small pcap: global header and three records, half of it compressible.
    fn pcap() -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&0xA1B2_C3D4u32.to_le_bytes());
        out.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 1, 0, 0, 0]);
        for i in 0..3u32 {
            let data: Vec<u8> = (0..200u32).map(|j| (i * 7 + j) as u8).collect();
            for v in [1_700_000_000 + i, i, 200, 200] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&data);
        }
        out
    }

    fn compress(c: Compression, data: &[u8]) -> Vec<u8> {
        match c {
            Compression::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Bzip2 => {
                let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::new(6));
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Xz => {
                let mut e = liblzma::write::XzEncoder::new(Vec::new(), 1);
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Zstd => {
                let mut e = zstd::Encoder::new(Vec::new(), 3).unwrap();
                e.include_checksum(true).unwrap();
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Lz4 => {
                let info = lz4_flex::frame::FrameInfo::new()
                    .block_size(lz4_flex::frame::BlockSize::Max64KB)
                    .content_checksum(true);
                let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
        }
    }

    const ALL: [Compression; 5] = [
        Compression::Gzip,
        Compression::Bzip2,
        Compression::Xz,
        Compression::Zstd,
        Compression::Lz4,
    ];

    fn read_all(input: Vec<u8>) -> io::Result<(Option<Compression>, Vec<u8>)> {
        let (c, mut r) = decompress(Box::new(io::Cursor::new(input)))?;
        let mut out = Vec::new();
        r.read_to_end(&mut out)?;
        Ok((c, out))
    }

    #[test]
    fn each_magic_is_detected_and_decoded() {
        let plain = pcap();
        for c in ALL {
            let packed = compress(c, &plain);
            assert_eq!(Compression::detect(&packed[..MAGIC_LEN]), Some(c), "{c}");
            assert_eq!(read_all(packed).unwrap(), (Some(c), plain.clone()), "{c}");
        }
    }

    #[test]
    fn plain_traces_and_garbage_pass_through_undetected() {
        let pcapng_shb = [
            0x0A, 0x0D, 0x0D, 0x0A, 0x1C, 0, 0, 0, 0x4D, 0x3C, 0x2B, 0x1A,
        ];
        let nanosecond_pcap_be = [0xA1, 0xB2, 0x3C, 0x4D, 0, 2, 0, 4];
        let inputs: [&[u8]; 8] = [
            &pcap(),
            &pcapng_shb,
            &nanosecond_pcap_be,
            b"garbage, not a trace",
            b"BZh0 is no block size",
            &[0x1F, 0x8B, 0x07, 0],
            &[0x1F],
            &[],
        ];
        for input in inputs {
            assert_eq!(Compression::detect(input), None, "{input:02x?}");
            assert_eq!(read_all(input.to_vec()).unwrap(), (None, input.to_vec()));
        }
    }

    /// Garbage is passed on as it is, for the trace reader to refuse with its magic.
    #[test]
    fn garbage_is_refused_by_the_trace_reader_in_one_clear_error() {
        let (c, r) = decompress(Box::new(&b"\x00\x01\x02\x03garbage"[..])).unwrap();
        assert_eq!(c, None);
        let e = crate::TraceReader::new(r).err().unwrap();
        assert_eq!(
            e.to_string(),
            "at byte offset 0: not a pcap or pcapng file (magic 0x03020100)"
        );
    }

    #[test]
    fn concatenated_members_decode_as_one_stream() {
        let (a, b) = (pcap(), b"and more".to_vec());
        for c in ALL {
            let both = [compress(c, &a), compress(c, &b)].concat();
            assert_eq!(
                read_all(both).unwrap().1,
                [a.clone(), b.clone()].concat(),
                "{c}"
            );
        }
    }

    #[test]
    fn a_cut_archive_keeps_what_came_before_and_says_where_it_ends() {
        // Large enough that every streaming decoder delivers some data before the cut, and
        // of even entropy (random nibbles), so that half the archive is half the data.
        let mut x = 0x9E37_79B9u32;
        let plain: Vec<u8> = (0..400_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8 & 0x0F
            })
            .collect();
        for c in ALL {
            let packed = compress(c, &plain);
            for cut in [packed.len() / 2, packed.len() - 1] {
                let (_, mut r) =
                    decompress(Box::new(io::Cursor::new(packed[..cut].to_vec()))).unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                let e = loop {
                    match r.read(&mut buf) {
                        Ok(0) => panic!("{c} cut at {cut}: read to the end without an error"),
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                        Err(e) => break e,
                    }
                };
                assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{c}: {e}");
                assert_eq!(
                    e.to_string(),
                    format!("the {c} archive is cut short: it ends at its byte {cut}, inside compressed data")
                );
                assert!(
                    plain.starts_with(&got),
                    "{c}: what was read is not a prefix"
                );
                if cut == packed.len() / 2 && c != Compression::Bzip2 {
                    // bzip2 delivers a whole block (600 kB here) at a time; the others
                    // stream.
                    assert!(!got.is_empty(), "{c} cut at {cut}: nothing delivered");
                }
            }
        }
    }

    #[test]
    fn a_corrupt_archive_is_an_error_naming_it() {
        let plain = pcap();
        for c in ALL {
            let mut packed = compress(c, &plain);
            let middle = packed.len() / 2;
            for b in &mut packed[middle..middle + 8] {
                *b ^= 0x5A;
            }
            let e = read_all(packed).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("the {c} archive is ")),
                "{c}: {msg}"
            );
        }
    }

    #[test]
    fn an_input_that_fails_to_read_is_not_called_corrupt() {
        struct Failing(usize);
        impl Read for Failing {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0 == 0 {
                    return Err(io::Error::other("disk on fire"));
                }
                let packed = compress(Compression::Gzip, &pcap());
                let n = buf.len().min(self.0).min(packed.len());
                buf[..n].copy_from_slice(&packed[..n]);
                self.0 = 0;
                Ok(n)
            }
        }
        let (_, mut r) = decompress(Box::new(Failing(MAGIC_LEN))).unwrap();
        let e = r.read_to_end(&mut Vec::new()).unwrap_err();
        assert_eq!(e.to_string(), "disk on fire");
    }
}
