//! Structure-aware damage to container trailers, shared by the `trailer` fuzz target and the
//! seeded test that runs the same generator in every `cargo test`.
//!
//! A byte-level fuzzer almost never produces a seek table whose footer, length and frame
//! count agree, so it never gets as far as the chunk index. [`check_trailer`] instead reads
//! its input as a recipe: it builds a valid chunk index from it, encodes the trailer with
//! the crate's own writer (behind data frames, or alone as in a sidecar), then damages named
//! fields (set to edge values, off by one, swapped for another field's length), truncates,
//! inserts or deletes bytes. Whatever comes out, [`ChunkIndex::read_trailer`] must not
//! panic, and must either say what is wrong at an offset inside the file or return exactly
//! the index the bytes encode.

use crate::container::{ChunkEntry, ChunkIndex, Codec, ContainerError, FrameKind};

/// Draws numbers from a byte string (a fuzzer's input); zeros once it runs out.
pub struct Draw<'a> {
    bytes: &'a [u8],
}

impl<'a> Draw<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Draw { bytes }
    }

    pub fn u8(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&b, rest)) => {
                self.bytes = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.u32() as usize) % n
    }
}

/// One field of an encoded trailer: where it is and how wide.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub at: usize,
    pub width: usize,
    /// The chunk index entry the field belongs to, for entry fields.
    pub entry: Option<usize>,
}

/// Every field of `index.encode_trailer()`, in order.
pub fn trailer_fields(index: &ChunkIndex) -> Vec<Field> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut push = |name, width, entry| {
        out.push(Field {
            name,
            at,
            width,
            entry,
        });
        at += width;
    };
    for (name, width) in [
        ("index magic", 4),
        ("index length", 4),
        ("index tag", 4),
        ("index version", 2),
        ("index reserved", 2),
        ("metadata length", 4),
    ] {
        push(name, width, None);
    }
    push("metadata", index.meta.len(), None);
    push("entry count", 4, None);
    for i in 0..index.entries.len() {
        for (name, width) in [
            ("frame offset", 8),
            ("frame length", 4),
            ("data offset", 8),
            ("data length", 4),
            ("first timestamp", 8),
            ("last timestamp", 8),
            ("packets", 4),
            ("kind", 1),
            ("pad", 1),
            ("codec", 1),
            ("codec level", 1),
        ] {
            push(name, width, Some(i));
        }
    }
    if !index.entries.is_empty() && index.flows.len() == index.entries.len() {
        push("extension count", 4, None);
        push("extension tag", 4, None);
        push("extension length", 4, None);
        for (i, f) in index.flows.iter().enumerate() {
            push("flow index length", 4, Some(i));
            push("flow index", f.len(), Some(i));
        }
    }
    push("seek table magic", 4, None);
    push("seek table length", 4, None);
    for i in 0..index.entries.len() {
        push("seek frame size", 4, Some(i));
        push("seek data size", 4, Some(i));
    }
    push("seek frame count", 4, None);
    push("seek descriptor", 1, None);
    push("seek footer magic", 4, None);
    out
}

/// A valid chunk index drawn from `d`: 0 to 8 entries, laid end to end as a writer lays them.
pub fn draw_index(d: &mut Draw<'_>) -> ChunkIndex {
    let metas = ["", "{}", r#"{"stream":3,"seq":7}"#, "é"];
    let meta = metas[d.below(metas.len())].to_string();
    let n = d.below(9);
    let (mut frame_at, mut data_at, mut ts) = (0u64, 0u64, u64::from(d.u32()) << 20);
    let entries = (0..n)
        .map(|i| {
            let frame_len = 1 + d.below(600) as u32;
            let data_len = frame_len + d.below(2000) as u32;
            let span = u64::from(d.u32());
            let e = ChunkEntry {
                frame_offset: frame_at,
                frame_len,
                data_offset: data_at,
                data_len,
                first_ts_ns: ts,
                last_ts_ns: ts + span,
                packets: d.below(1000) as u32,
                kind: match (i, d.below(8)) {
                    (0, _) => FrameKind::Header,
                    (_, 0) => FrameKind::Stats,
                    _ => FrameKind::Packets,
                },
                codec: match d.below(3) {
                    0 => Codec::Raw,
                    1 => Codec::Lz4,
                    _ => Codec::Zstd(d.u8() as i8),
                },
            };
            frame_at += u64::from(frame_len);
            data_at += u64::from(data_len);
            ts += span;
            e
        })
        .collect::<Vec<_>>();
    // Half the time a flow index per entry (opaque bytes here; empty ones too).
    let flows = if d.below(2) == 0 {
        Vec::new()
    } else {
        entries
            .iter()
            .map(|_| (0..d.below(40)).map(|_| d.u8()).collect())
            .collect()
    };
    // Half of those a file summary (opaque, never empty: an empty one is none).
    let summary = if flows.is_empty() || entries.is_empty() || d.below(2) == 0 {
        Vec::new()
    } else {
        (0..1 + d.below(40)).map(|_| d.u8()).collect()
    };
    ChunkIndex {
        meta,
        entries,
        flows,
        summary,
    }
}

/// The file the recipe `d` describes, and whether it was left undamaged.
pub fn draw_file(d: &mut Draw<'_>) -> (ChunkIndex, Vec<u8>, bool) {
    // Drawn first, while the input lasts: one recipe in eight is left undamaged.
    let damages = match d.u8() {
        b if b % 8 == 0 => 0,
        b => 1 + usize::from(b % 3),
    };
    let index = draw_index(d);
    let trailer = index.encode_trailer();
    let fields = trailer_fields(&index);
    // Data frames before the trailer (a container), or none (a sidecar).
    let data_len: u64 = index.entries.iter().map(|e| u64::from(e.frame_len)).sum();
    let prefix = if d.below(4) == 0 {
        0
    } else {
        data_len as usize
    };
    let mut file = vec![0x5A; prefix];
    file.extend_from_slice(&trailer);
    for _ in 0..damages {
        damage(d, &mut file, prefix, &fields, data_len);
    }
    (index, file, damages == 0)
}

fn damage(d: &mut Draw<'_>, file: &mut Vec<u8>, prefix: usize, fields: &[Field], data_len: u64) {
    match d.below(8) {
        // Set a field to an edge or nearby value (most of the time: that is what reaches
        // the checks behind the first ones).
        0..=4 => {
            let f = fields[d.below(fields.len())];
            let at = prefix + f.at;
            let Some(bytes) = file.get_mut(at..at + f.width) else {
                return;
            };
            if f.width == 0 {
                return;
            }
            let mut old = [0u8; 8];
            let w = f.width.min(8);
            old[..w].copy_from_slice(&bytes[..w]);
            let old = u64::from_le_bytes(old);
            let new = match d.below(9) {
                0 => 0,
                1 => u64::MAX,
                2 => old.wrapping_add(1),
                3 => old.wrapping_sub(1),
                4 => old.wrapping_add(u64::from(d.u8())),
                5 => old ^ (1 << d.below(w * 8)),
                6 => data_len,
                7 => (prefix + d.below(fields.last().map_or(1, |f| f.at + 1))) as u64,
                _ => d.u64(),
            };
            bytes[..w].copy_from_slice(&new.to_le_bytes()[..w]);
        }
        5 => {
            let cut = d.below(file.len() + 1);
            file.truncate(cut);
        }
        6 => {
            let at = d.below(file.len() + 1);
            let n = 1 + d.below(16);
            let fill = d.u8();
            file.splice(at..at, std::iter::repeat_n(fill, n));
        }
        _ => {
            if !file.is_empty() {
                let at = d.below(file.len());
                let n = (1 + d.below(16)).min(file.len() - at);
                file.drain(at..at + n);
            }
        }
    }
}

/// Bytes the reader is allowed to ignore, zeroed in an encoded trailer: the index's
/// reserved field, each entry's pad byte, the level byte of a codec that has none, and the
/// seek table descriptor (we write no checksums and read none).
fn mask_ignored(index: &ChunkIndex, trailer: &mut [u8]) {
    for f in trailer_fields(index) {
        let ignored = match (f.name, f.entry) {
            ("index reserved" | "pad" | "seek descriptor", _) => true,
            ("codec level", Some(i)) => !matches!(index.entries[i].codec, Codec::Zstd(_)),
            _ => false,
        };
        if ignored {
            trailer[f.at..f.at + f.width].fill(0);
        }
    }
}

/// Builds a file from the recipe `input`, reads its trailer and checks the outcome (see the
/// module documentation). Panics on any violation; returns the error it got, if any.
pub fn check_trailer(input: &[u8]) -> Option<ContainerError> {
    let (index, file, intact) = draw_file(&mut Draw::new(input));
    check_read(&index, &file, intact)
}

/// Reads the trailer of `file`, made from `index`'s (`intact`: and left undamaged), and
/// checks the outcome. Panics on any violation; returns the error it got, if any.
pub fn check_read(index: &ChunkIndex, file: &[u8], intact: bool) -> Option<ContainerError> {
    match ChunkIndex::locate_trailer(file) {
        Ok((read, place)) => {
            if intact {
                assert_eq!(&read, index, "an undamaged trailer reads back differently");
            }
            // Whatever was read must be what the bytes at the end of the file encode (or,
            // after an interrupted append, at the end of the last whole trailer).
            let end = usize::try_from(place.end).expect("a trailer inside the file");
            assert!(end <= file.len(), "a trailer ending past the file");
            let mut again = read.encode_trailer();
            assert!(again.len() <= end, "read an index longer than the file");
            let mut tail = file[end - again.len()..end].to_vec();
            mask_ignored(&read, &mut again);
            mask_ignored(&read, &mut tail);
            assert!(
                again == tail,
                "read an index the trailer bytes do not encode"
            );
            None
        }
        Err(e) => {
            assert!(!intact, "an undamaged trailer fails to read: {e}");
            let (offset, what) = match &e {
                ContainerError::Invalid { offset, what } => (*offset, what.clone()),
                ContainerError::Truncated(offset) => (*offset, String::new()),
                ContainerError::Io(io) => {
                    panic!("reading a trailer in memory is never an I/O error: {io}")
                }
            };
            assert!(
                offset <= file.len() as u64,
                "error offset {offset} past the file's {} bytes: {e}",
                file.len()
            );
            assert!(!what.contains('\n'), "error of more than one line: {e}");
            Some(e)
        }
    }
}
