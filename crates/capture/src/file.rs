//! Replays a pcap or pcapng file (or standard input) as a packet source, keeping the
//! original timestamps, interfaces and lengths.

use std::fs::File;
use std::io::{self, Read};

use std::os::unix::fs::FileExt;

use tapdeck_pcap::container::{decode_frame, ChunkEntry, ChunkIndex, Container};
use tapdeck_pcap::{Interface, Packet, PacketFlags, TraceBytes, TraceReader};

use crate::{PacketSink, PacketSource, Poll, SourceCounters, SourceError};
use tapdeck_pcap::compression::{self, Compression};

/// Packets handed over per poll: enough to amortise the call, small enough to let the
/// recorder rotate and report promptly.
const BATCH: usize = 512;

pub struct FileSource {
    reader: TraceReader<Box<dyn Read + Send>>,
    path: String,
    seen: Vec<u64>,
    limit: Option<u64>,
    delivered: u64,
    /// A packet naming an interface declared after the current poll began, held back
    /// to the next poll: the recorder reads the interface list between polls, and a
    /// file's header must declare every interface its packets use.
    held: Option<HeldPacket>,
}

struct HeldPacket {
    ts_ns: u64,
    iface: u32,
    orig_len: u32,
    flags: Option<PacketFlags>,
    data: Vec<u8>,
}

impl FileSource {
    /// Opens `path` (`-` for standard input), compressed or not: see [`open_trace`].
    pub fn open(path: &str) -> Result<FileSource, SourceError> {
        let reader = open_trace(path)?;
        Ok(FileSource {
            reader,
            path: path.to_string(),
            seen: Vec::new(),
            limit: None,
            delivered: 0,
            held: None,
        })
    }

    /// Stops after `limit` packets.
    pub fn with_limit(mut self, limit: Option<u64>) -> FileSource {
        self.limit = limit;
        self
    }
}

/// A reader of a trace's packets, whatever its compression or container: the one way
/// every command opens a trace (`record -r`, `convert`, anything reading trace files). A
/// plain file is mapped and read in place; everything else goes through
/// [`open_trace_bytes`]. Errors name `path`.
pub fn open_trace(path: &str) -> Result<TraceReader<Box<dyn Read + Send>>, SourceError> {
    let format_error = |source| SourceError::Format {
        path: path.to_string(),
        source,
    };
    if path != "-" {
        let file =
            File::open(path).map_err(|e| SourceError::Other(format!("cannot open {path}: {e}")))?;
        if ChunkIndex::read_trailer(&file).is_err() {
            if let Some(m) = Mapped::new(&file) {
                let head = &m.as_ref()[..m.len.min(compression::MAGIC_LEN)];
                if Compression::detect(head).is_none() {
                    return TraceReader::from_bytes(Box::new(m)).map_err(format_error);
                }
            }
        }
    }
    TraceReader::new(open_trace_bytes(path)?).map_err(format_error)
}

/// The uncompressed capture bytes of a trace: `-` is standard input; a stored tapdeck file
/// is decoded frame by frame from its index (its frames may mix zstd and LZ4, which no
/// single stream decoder reads); anything else compressed (gzip, bzip2, xz, zstd, LZ4:
/// see [`compression::decompress`]) is decompressed as a stream. What comes out is plain
/// pcap or pcapng for a `TraceReader`.
pub fn open_trace_bytes(path: &str) -> Result<Box<dyn Read + Send>, SourceError> {
    let input: Box<dyn Read + Send> = if path == "-" {
        Box::new(io::stdin())
    } else {
        let file =
            File::open(path).map_err(|e| SourceError::Other(format!("cannot open {path}: {e}")))?;
        match ChunkIndex::read_trailer(&file) {
            Ok(index) => Box::new(StoredFrames {
                file,
                container: Container::from_suffix(path),
                entries: index.entries.into_iter(),
                buf: Vec::new(),
                pos: 0,
            }),
            Err(_) => Box::new(file),
        }
    };
    let (_, bytes) =
        compression::decompress(input).map_err(|e| SourceError::Other(format!("{path}: {e}")))?;
    Ok(bytes)
}

/// A plain file read through a read-only mapping, so packets are read in place: copying
/// every byte into a buffer first was half of the converter's decode thread. A file
/// truncated by another process while mapped would fault; trace files only grow.
struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is private to this reader and read-only, and unmapped only by its
// owner's Drop: moving the owner to another thread moves the only user.
unsafe impl Send for Mapped {}

impl Mapped {
    fn new(file: &File) -> Option<Mapped> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
        if len == 0 {
            return None;
        }
        // SAFETY: a fresh read-only private mapping of an open file; checked for failure.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: advice on the mapping made above; failure only loses read-ahead.
        unsafe { libc::madvise(ptr, len, libc::MADV_SEQUENTIAL) };
        Some(Mapped { ptr, len })
    }
}

impl TraceBytes for Mapped {
    /// Drops the mapped pages the reader is done with, so reading a large file does not
    /// leave all of it in this process's resident memory (the page cache keeps it).
    fn release(&self, upto: usize) {
        let page = 4096;
        let len = upto.min(self.len) / page * page;
        if len > 0 {
            // SAFETY: the first `len` bytes of our own mapping, which the reader will not
            // touch again; a later access would fault the file's pages back in.
            unsafe { libc::madvise(self.ptr, len, libc::MADV_DONTNEED) };
        }
    }
}

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; borrows of it end with `self`.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// The capture bytes of a stored file, one frame at a time.
struct StoredFrames {
    file: File,
    container: Container,
    entries: std::vec::IntoIter<ChunkEntry>,
    buf: Vec<u8>,
    pos: usize,
}

impl Read for StoredFrames {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.buf.len() {
            let Some(e) = self.entries.next() else {
                return Ok(0);
            };
            let mut frame = vec![0u8; e.frame_len as usize];
            self.file.read_exact_at(&mut frame, e.frame_offset)?;
            self.buf.clear();
            self.pos = 0;
            decode_frame(self.container, &frame, e.data_len as usize, &mut self.buf).map_err(
                |why| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("frame at byte offset {}: {why}", e.frame_offset),
                    )
                },
            )?;
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl PacketSource for FileSource {
    fn interfaces(&self) -> &[Interface] {
        self.reader.interfaces()
    }

    fn poll<K: PacketSink>(&mut self, sink: &mut K) -> Result<Poll, SourceError> {
        let announced = self.reader.interfaces().len();
        if let Some(h) = self.held.take() {
            sink.packet(&Packet {
                ts_ns: h.ts_ns,
                iface: h.iface,
                orig_len: h.orig_len,
                flags: h.flags,
                data: &h.data,
            });
            self.delivered += 1;
        }
        for _ in 0..BATCH {
            if self.limit.is_some_and(|l| self.delivered >= l) {
                return Ok(Poll::End);
            }
            match self.reader.next_packet() {
                Ok(Some(p)) => {
                    let i = p.iface as usize;
                    if self.seen.len() <= i {
                        self.seen.resize(i + 1, 0);
                    }
                    self.seen[i] += 1;
                    if i >= announced {
                        let data = p.data.to_vec();
                        self.held = Some(HeldPacket {
                            ts_ns: p.ts_ns,
                            iface: p.iface,
                            orig_len: p.orig_len,
                            flags: p.flags,
                            data,
                        });
                        return Ok(Poll::Delivered);
                    }
                    sink.packet(&p);
                    self.delivered += 1;
                }
                Ok(None) => return Ok(Poll::End),
                Err(source) => {
                    return Err(SourceError::Format {
                        path: self.path.clone(),
                        source,
                    })
                }
            }
        }
        Ok(Poll::Delivered)
    }

    fn counters(&self) -> Vec<SourceCounters> {
        let mut counters: Vec<SourceCounters> = self
            .seen
            .iter()
            .map(|&seen| SourceCounters {
                seen,
                ..Default::default()
            })
            .collect();
        counters.resize(
            self.reader.interfaces().len().max(counters.len()),
            SourceCounters::default(),
        );
        counters
    }

    fn live(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        if self.path == "-" {
            "standard input".into()
        } else {
            format!("file {}", self.path)
        }
    }
}
