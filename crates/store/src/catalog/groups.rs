//! The catalog's groups (`catalog.tdg` beside `catalog.tdc`): the level above the
//! catalog's entries, so that a query over a store of hundreds of thousands of files
//! reads a few bytes per file instead of every file's summary.
//!
//! A group covers a run of [`GROUP`] whole records of `catalog.tdc` (a byte range). It
//! lists its members (each record's name, place, size, time range and packets) and lays
//! their summaries' addresses out as signatures (`tapdeck_filter::AddressProbe`) of one
//! size, `K` blocks, block by block: slice `b` holds block `b` of every member's
//! signature. An address falls in the same block of every member, so a query for a host
//! reads one slice per group, `members × 32` bytes, and then only the records of the
//! members whose block may hold it. A time window needs the member list only.
//!
//! Groups are appended by whoever appends to the catalog, under a lock on `catalog.tdc`,
//! as soon as `GROUP` records lie beyond the last group; a rewrite of the catalog writes
//! them all again. Like the catalog, they only save work: a group whose head does not
//! check out is skipped (its records are read as if it were not there), a slice whose
//! checksum fails answers "maybe" for its members, and a member whose record is not where
//! the group says is looked up by name.
//!
//! The heads (member lists) and the slices are in two files, so that a query reads the
//! heads in one sequential read and then one slice per group:
//!
//! ```text
//! catalog.tdg
//! header   "TDCG", u8 version (1), 3 bytes 0
//! record   "TDGR", u32 head length, head, u32 XXH32 of the head, u64 length of the
//!          whole record, "TDGE"
//! head     u32 members, u32 K4 and u32 K6 (powers of two: the IPv4 and the IPv6
//!          signatures' blocks), u64 first and u64 end offset of the
//!          covered records in catalog.tdc, u64 first packet ns, u64 last packet ns
//!          (of all members), u64 offset of the group's slices in catalog.tds, then per
//!          member: u16 name length, name, u64 record offset, u32 record length, u64
//!          size, u64 first ns, u64 last ns, u64 packets; then K4 + K6 u32 XXH32,
//!          one per slice
//! catalog.tds
//! header   "TDCS", u8 version (1), 3 bytes 0
//! then     each group's K4 IPv4 then K6 IPv6 slices of members × 32 bytes, written
//!          before its head
//! ```

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tapdeck_filter::{AddressProbe, ChunkFilter};

use super::{open_appending, record_at, Entry, HEADER as CATALOG_HEADER, RECORD_MAGIC};

/// The groups' file name under a store's root.
pub const GROUPS: &str = "catalog.tdg";
/// The groups' slices' file name under a store's root.
pub const SLICES: &str = "catalog.tds";
const HEADER: [u8; 8] = *b"TDCG\x01\0\0\0";
const SLICES_HEADER: [u8; 8] = *b"TDCS\x01\0\0\0";
const MAGIC: [u8; 4] = *b"TDGR";
const END_MAGIC: [u8; 4] = *b"TDGE";
const BLOCK: usize = 32;
/// Records per group: a query reads one slice of `GROUP × 32` bytes per group, and every
/// record past the last group whole.
pub const GROUP: usize = 128;
/// The most blocks a group lays a signature out in (members' larger filters are folded:
/// more false positives for them, never a false negative); 512 KiB per member.
const MAX_BLOCKS: usize = 1 << 14;
/// A head longer than this is damage.
const MAX_HEAD: usize = 64 << 20;

/// The groups file's path under a store's root.
pub fn path(root: &Path) -> PathBuf {
    root.join(GROUPS)
}

/// The slices' file's path under a store's root.
pub fn slices_path(root: &Path) -> PathBuf {
    root.join(SLICES)
}

/// One member of a group: what a query needs of a file without its summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// Where its record lies in `catalog.tdc`.
    pub offset: u64,
    pub len: u32,
    pub size: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub packets: u64,
}

impl Member {
    /// The entry without its name and summary (what a query needs of a file it does not
    /// filter by its summary).
    pub fn thin_entry(&self) -> Entry {
        Entry {
            name: String::new(),
            size: self.size,
            first_ns: self.first_ns,
            last_ns: self.last_ns,
            packets: self.packets,
            summary: Vec::new(),
        }
    }
}

/// A group's head, as read.
#[derive(Debug, Clone)]
pub struct Group {
    head_len: usize,
    /// Blocks of the members' IPv4 and IPv6 signatures: the group's slices are the IPv4
    /// ones (`blocks.0`), then the IPv6 ones.
    pub blocks: (usize, usize),
    /// The byte range of `catalog.tdc` the members' records fill.
    pub covers: (u64, u64),
    pub first_ns: u64,
    pub last_ns: u64,
    /// Where its slices start in the slices' file.
    slices_at: u64,
    pub members: Vec<Member>,
    slice_sums: Vec<u32>,
}

impl Group {
    fn slice_len(&self) -> usize {
        self.members.len() * BLOCK
    }

    fn record_len(&self) -> u64 {
        8 + self.head_len as u64 + 4 + 12
    }

    /// The slice that holds `probe`'s block.
    pub fn slice_of(&self, probe: AddressProbe) -> usize {
        match probe.v6 {
            false => probe.block(self.blocks.0),
            true => self.blocks.0 + probe.block(self.blocks.1),
        }
    }

    /// Slice `b` (a block of every member) from the slices' file, or `None` when it
    /// cannot be read or does not check out (then its members are "maybe").
    pub fn slice(&self, slices: &File, b: usize) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; self.slice_len()];
        let at = self.slices_at + (b * self.slice_len()) as u64;
        slices.read_exact_at(&mut buf, at).ok()?;
        (xxhash_rust::xxh32::xxh32(&buf, 0) == *self.slice_sums.get(b)?).then_some(buf)
    }
}

/// The groups of the store at `root` that check out, in file order, and the slices'
/// file; none when there is no groups file. Reads the heads only.
pub fn read(root: &Path) -> (Option<File>, Vec<Group>) {
    let Ok(bytes) = std::fs::read(path(root)) else {
        return (None, Vec::new());
    };
    if bytes.get(..HEADER.len()) != Some(&HEADER[..]) {
        return (None, Vec::new());
    }
    let groups = groups_in(&bytes);
    (File::open(slices_path(root)).ok(), groups)
}

/// The groups in a groups file's bytes that check out (damage between them skipped).
fn groups_in(bytes: &[u8]) -> Vec<Group> {
    let mut groups = Vec::new();
    let mut at = HEADER.len();
    while at < bytes.len() {
        match head_in(bytes, at) {
            Some(g) => {
                at += g.record_len() as usize;
                groups.push(g);
            }
            None => match find(&bytes[at + 1..]) {
                Some(p) => at += 1 + p,
                None => break,
            },
        }
    }
    groups
}

fn find(bytes: &[u8]) -> Option<usize> {
    bytes.windows(MAGIC.len()).position(|w| w == MAGIC)
}

/// The group whose record starts at `at` of `bytes`, if its head is whole and checks
/// out.
fn head_in(bytes: &[u8], at: usize) -> Option<Group> {
    if bytes.get(at..at + 4)? != MAGIC {
        return None;
    }
    let head_len = u32::from_le_bytes(bytes.get(at + 4..at + 8)?.try_into().ok()?) as usize;
    let head = bytes.get(at + 8..at.checked_add(8 + head_len)?)?;
    let sum = u32::from_le_bytes(
        bytes
            .get(at + 8 + head_len..at + 12 + head_len)?
            .try_into()
            .ok()?,
    );
    if xxhash_rust::xxh32::xxh32(head, 0) != sum {
        return None;
    }
    parse_head(head)
}

/// The group whose record starts at `at`, if its head is whole and checks out.
fn head_at(file: &File, at: u64) -> Option<Group> {
    let mut lead = [0u8; 8];
    file.read_exact_at(&mut lead, at).ok()?;
    if lead[..4] != MAGIC {
        return None;
    }
    let head_len = u32::from_le_bytes(lead[4..8].try_into().ok()?) as usize;
    if head_len > MAX_HEAD {
        return None;
    }
    let mut head = vec![0u8; head_len + 4];
    file.read_exact_at(&mut head, at + 8).ok()?;
    let sum = u32::from_le_bytes(head[head_len..].try_into().ok()?);
    head.truncate(head_len);
    if xxhash_rust::xxh32::xxh32(&head, 0) != sum {
        return None;
    }
    parse_head(&head)
}

fn parse_head(head: &[u8]) -> Option<Group> {
    let mut r = Reader { b: head, at: 0 };
    let n = r.u32()? as usize;
    let blocks = (r.u32()? as usize, r.u32()? as usize);
    let fits = |k: usize| k.is_power_of_two() && k <= MAX_BLOCKS;
    if !fits(blocks.0) || !fits(blocks.1) {
        return None;
    }
    let covers = (r.u64()?, r.u64()?);
    let (first_ns, last_ns) = (r.u64()?, r.u64()?);
    let slices_at = r.u64()?;
    let mut members = Vec::with_capacity(n.min(head.len() / 40));
    for _ in 0..n {
        let name_len = r.u16()? as usize;
        let name = std::str::from_utf8(r.take(name_len)?).ok()?.to_string();
        members.push(Member {
            name,
            offset: r.u64()?,
            len: r.u32()?,
            size: r.u64()?,
            first_ns: r.u64()?,
            last_ns: r.u64()?,
            packets: r.u64()?,
        });
    }
    let slice_sums = (0..blocks.0 + blocks.1)
        .map(|_| r.u32())
        .collect::<Option<Vec<_>>>()?;
    (r.at == head.len()).then_some(Group {
        head_len: head.len(),
        blocks,
        covers,
        first_ns,
        last_ns,
        slices_at,
        members,
        slice_sums,
    })
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// The members' signatures of one family laid out block by block: their size and the
/// slices.
fn family_slices(summaries: &[Option<ChunkFilter>], v6: bool) -> (usize, Vec<u8>) {
    let natural = |s: &Option<ChunkFilter>| s.as_ref().map_or(1, |s| s.signature_blocks(v6));
    let total: usize = summaries.iter().map(natural).sum();
    let mut blocks = (summaries.iter().map(natural).max())
        .unwrap_or(1)
        .min(MAX_BLOCKS);
    // Members far smaller than the largest are repeated to its size: bounded to four
    // times the summaries' own bytes by folding the largest instead.
    while blocks > 1 && blocks * summaries.len() > 4 * total {
        blocks /= 2;
    }
    let n = summaries.len();
    let mut slices = vec![0u8; blocks * n * BLOCK];
    for (m, s) in summaries.iter().enumerate() {
        let sig = match s {
            Some(s) => s.signature(v6, blocks),
            None => vec![0xff; blocks * BLOCK],
        };
        for b in 0..blocks {
            let at = (b * n + m) * BLOCK;
            slices[at..at + BLOCK].copy_from_slice(&sig[b * BLOCK..(b + 1) * BLOCK]);
        }
    }
    (blocks, slices)
}

/// One group's record and its slices (to go at `slices_at` of the slices' file):
/// `members` are the records (with their offsets) of a run of `catalog.tdc` covering
/// `covers`.
fn encode(members: &[(u64, u32, Entry)], covers: (u64, u64), slices_at: u64) -> (Vec<u8>, Vec<u8>) {
    let summaries: Vec<Option<ChunkFilter>> = members.iter().map(|(_, _, e)| e.summary()).collect();
    let (blocks4, slices4) = family_slices(&summaries, false);
    let (blocks6, slices6) = family_slices(&summaries, true);
    let slices = [slices4, slices6].concat();
    let mut head = Vec::new();
    head.extend((members.len() as u32).to_le_bytes());
    head.extend((blocks4 as u32).to_le_bytes());
    head.extend((blocks6 as u32).to_le_bytes());
    let first = members
        .iter()
        .filter(|(_, _, e)| e.packets > 0)
        .map(|(_, _, e)| e.first_ns)
        .min();
    let last = members
        .iter()
        .filter(|(_, _, e)| e.packets > 0)
        .map(|(_, _, e)| e.last_ns)
        .max();
    for v in [
        covers.0,
        covers.1,
        first.unwrap_or(u64::MAX),
        last.unwrap_or(0),
        slices_at,
    ] {
        head.extend(v.to_le_bytes());
    }
    for (offset, len, e) in members {
        head.extend((e.name.len() as u16).to_le_bytes());
        head.extend(e.name.as_bytes());
        head.extend(offset.to_le_bytes());
        head.extend(len.to_le_bytes());
        for v in [e.size, e.first_ns, e.last_ns, e.packets] {
            head.extend(v.to_le_bytes());
        }
    }
    for slice in slices.chunks(members.len() * BLOCK) {
        head.extend(xxhash_rust::xxh32::xxh32(slice, 0).to_le_bytes());
    }
    let mut out = Vec::with_capacity(head.len() + 24);
    out.extend(MAGIC);
    out.extend((head.len() as u32).to_le_bytes());
    out.extend(&head);
    out.extend(xxhash_rust::xxh32::xxh32(&head, 0).to_le_bytes());
    let total_len = (out.len() + 12) as u64;
    out.extend(total_len.to_le_bytes());
    out.extend(END_MAGIC);
    (out, slices)
}

/// The whole records of `bytes` (catalog bytes from offset `base`) with their offsets
/// and lengths; damage between them is skipped.
pub(super) fn records(bytes: &[u8], base: u64) -> Vec<(u64, u32, Entry)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match record_at(bytes, at) {
            Some((entry, len)) => {
                out.push((base + at as u64, len as u32, entry));
                at += len;
            }
            None => at = super::find_magic(bytes, at + 1).unwrap_or(bytes.len()),
        }
    }
    out
}

/// Where the groups end in `catalog.tdc`: the end of the last group's range (the
/// catalog's header when there is none).
fn covered_end(file: &File) -> u64 {
    let len = file.metadata().map_or(0, |m| m.len());
    let mut tail = [0u8; 12];
    let from_footer = (len >= 12 + HEADER.len() as u64)
        .then(|| file.read_exact_at(&mut tail, len - 12).ok())
        .flatten()
        .filter(|_| tail[8..] == END_MAGIC)
        .and_then(|_| {
            let rec = u64::from_le_bytes(tail[..8].try_into().ok()?);
            head_at(file, len.checked_sub(rec)?)
        });
    match from_footer {
        Some(g) => g.covers.1,
        // A record cut short at the end (a kill): the last whole one, from the start.
        None => {
            let mut bytes = vec![0u8; len as usize];
            let read = file.read_exact_at(&mut bytes, 0).is_ok();
            (groups_in(if read { &bytes } else { &[] }).iter())
                .map(|g| g.covers.1)
                .max()
                .unwrap_or(0)
        }
    }
    .max(CATALOG_HEADER.len() as u64)
}

/// Groups the records of `catalog.tdc` (open as `catalog`, locked by the caller) that lie
/// past the last group, `GROUP` at a time; with `all`, the last run too however short (a
/// rewrite). Returns the groups appended.
pub(super) fn group_tail(root: &Path, catalog: &File, all: bool) -> io::Result<usize> {
    let mut groups = open_appending(&path(root), &HEADER)?;
    // Created by a process killed before its header went out: under the lock, safe to
    // write now (as for the slices below).
    if groups.metadata()?.len() == 0 {
        groups.write_all(&HEADER)?;
    }
    let from = covered_end(&groups);
    let len = catalog.metadata()?.len();
    if len <= from {
        return Ok(0);
    }
    // Count the records first (their lengths only): most calls find fewer than a group.
    if !all && count_records(catalog, from, len) < GROUP {
        return Ok(0);
    }
    let mut bytes = vec![0u8; (len - from) as usize];
    catalog.read_exact_at(&mut bytes, from)?;
    let records = records(&bytes, from);
    let mut slices = open_appending(&slices_path(root), &SLICES_HEADER)?;
    if slices.metadata()?.len() == 0 {
        slices.write_all(&SLICES_HEADER)?;
    }
    let mut made = 0;
    let mut start = from;
    for run in records.chunks(GROUP) {
        if run.len() < GROUP && !all {
            break;
        }
        let end = run.last().map_or(start, |(o, l, _)| o + u64::from(*l));
        // The slices first: a head names slices that are there.
        let (head, group_slices) = encode(run, (start, end), slices.metadata()?.len());
        slices.write_all(&group_slices)?;
        groups.write_all(&head)?;
        start = end;
        made += 1;
    }
    Ok(made)
}

/// Records from `from` to `len`, counted by their framing (at most `GROUP`).
fn count_records(catalog: &File, from: u64, len: u64) -> usize {
    let mut at = from;
    let mut n = 0;
    let mut lead = [0u8; 8];
    while at + 8 <= len && n < GROUP {
        if catalog.read_exact_at(&mut lead, at).is_err() || lead[..4] != RECORD_MAGIC {
            // Damage: count it as a group's worth, and let the full parse sort it out.
            return GROUP;
        }
        at += 12
            + u64::from(u32::from_le_bytes(
                lead[4..8].try_into().unwrap_or_default(),
            ));
        n += 1;
    }
    n
}

/// Every group of `catalog` (the bytes of a rewritten `catalog.tdc`): the groups' file
/// and the slices' file.
pub(super) fn encode_all(catalog: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (mut heads, mut slices) = (HEADER.to_vec(), SLICES_HEADER.to_vec());
    let base = CATALOG_HEADER.len();
    let records = records(&catalog[base.min(catalog.len())..], base as u64);
    let mut start = base as u64;
    for run in records.chunks(GROUP) {
        let end = run.last().map_or(start, |(o, l, _)| o + u64::from(*l));
        let (head, group_slices) = encode(run, (start, end), slices.len() as u64);
        heads.extend(head);
        slices.extend(group_slices);
        start = end;
    }
    (heads, slices)
}

/// Whether member `m` of `group` may hold one of `probes`, given the slices read for
/// them (`None`: a slice that could not be read: "maybe").
pub fn holds(
    slices: &[(usize, Option<Vec<u8>>)],
    m: usize,
    probe: AddressProbe,
    g: &Group,
) -> bool {
    let b = g.slice_of(probe);
    match slices.iter().find(|(sb, _)| *sb == b) {
        Some((_, Some(slice))) => probe.in_block(&slice[m * BLOCK..(m + 1) * BLOCK]),
        _ => true,
    }
}
