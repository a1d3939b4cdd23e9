//! Where a plain trace file sits in time, and where a warm-up over its end starts reading:
//! what pass one learns of a file before any RPC is decoded, and what the state directory
//! keeps of it.

use crate::error::Result;
use crate::source::{self, SourceFile};

/// How far back into the previous file of a capture the TCP and RPC state is rebuilt:
/// messages in progress at a cut began well within this, and most calls open at a cut are
/// answered within it.
pub(crate) const WARM_UP_NS: u64 = 2_000_000_000;
/// Bound on the files read for one warm-up (a store rotated very often).
pub(crate) const MAX_WARM_UP_FILES: usize = 64;
/// Bound on the bytes of plain files a warm-up reads (a dense trace holds gigabytes in
/// 2 s): far more than any TCP message in progress at a cut spans.
pub(crate) const WARM_UP_BYTES: u64 = 64 << 20;

/// Where a plain trace file sits in time and which capture it is of (its interfaces).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Span {
    pub source: SourceFile,
    pub first_time_ns: Option<i64>,
    /// The latest packet time (times may step back a little within a file).
    pub last_time_ns: Option<i64>,
    /// Link type, snap length and name of every interface.
    pub interfaces: String,
    /// Where a warm-up over this file starts reading (a record offset): after it come the
    /// packets of the file's last `WARM_UP_NS`, at most its last `WARM_UP_BYTES`, and no
    /// interface declaration. None: from the beginning.
    #[serde(default)]
    pub warm_offset: Option<u64>,
}

impl Span {
    /// Where a plain trace sits in time and where a warm-up over it starts. A mapped file
    /// larger than twice the warm-up's byte bound is read at its two ends only: its first
    /// packet, then from a record boundary found near `size - WARM_UP_BYTES` to the end.
    /// Anything else (or a tail that does not read cleanly) is read through.
    pub fn scan(source: &SourceFile) -> Result<Span> {
        if source.size >= 2 * WARM_UP_BYTES {
            if let Some(span) = Self::scan_ends(source)? {
                return Ok(span);
            }
        }
        let mut reader = source::open(&source.path)?;
        let (mut first, mut last) = (None, None);
        let tail = source.size.saturating_sub(WARM_UP_BYTES);
        let mut tail_mark: Option<(u64, usize)> = None;
        let mut marks = Marks::default();
        // Interfaces declared by the first packet: a warm-up reads that far, then skips.
        let mut at_first = None;
        // A damaged file spans what can be read of it.
        while let Ok(Some(c)) = reader.next_packet_with_context() {
            at_first.get_or_insert(c.interfaces.len());
            if marks.due() && tail_mark.is_none() && c.offset >= tail {
                tail_mark = Some((c.offset, c.interfaces.len()));
            }
            marks.packet(c.offset, c.interfaces.len(), last);
            let t = c.packet.ts_ns as i64;
            first.get_or_insert(t);
            last = Some(last.map_or(t, |m: i64| m.max(t)));
        }
        let ifaces = reader.interfaces().len();
        let start = [marks.start(last), tail_mark].into_iter().flatten().max();
        Ok(Span {
            source: source.clone(),
            first_time_ns: first,
            last_time_ns: last,
            interfaces: signature(reader.interfaces()),
            warm_offset: start
                .filter(|k| k.1 == ifaces && at_first == Some(ifaces))
                .map(|k| k.0),
        })
    }

    /// The first packet, then the tail from a resynchronised boundary; None when that is
    /// not possible (a stream, no boundary, an interface declared in the tail, a defect).
    fn scan_ends(source: &SourceFile) -> Result<Option<Span>> {
        let mut reader = source::open(&source.path)?;
        let (first, ifaces) = match reader.next_packet_with_context() {
            Ok(Some(c)) => (c.packet.ts_ns as i64, c.interfaces.len()),
            _ => return Ok(None),
        };
        let Some(at) = reader.resync_from(source.size - WARM_UP_BYTES) else {
            return Ok(None);
        };
        let (mut last, mut marks) = (Some(first), Marks::default());
        loop {
            match reader.next_packet_with_context() {
                Ok(Some(c)) => {
                    marks.packet(c.offset, c.interfaces.len(), last);
                    let t = c.packet.ts_ns as i64;
                    last = last.map(|m| m.max(t));
                }
                Ok(None) => break,
                Err(_) => return Ok(None),
            }
        }
        if reader.interfaces().len() != ifaces {
            return Ok(None);
        }
        let start = [marks.start(last), Some((at, ifaces))]
            .into_iter()
            .flatten()
            .max()
            .expect("one is there");
        Ok(Some(Span {
            source: source.clone(),
            first_time_ns: Some(first),
            last_time_ns: last,
            interfaces: signature(reader.interfaces()),
            warm_offset: Some(start.0),
        }))
    }
}

fn signature(interfaces: &[tapdeck_pcap::Interface]) -> String {
    interfaces
        .iter()
        .map(|i| {
            format!(
                "{}/{}/{}",
                i.linktype,
                i.snaplen,
                i.name.as_deref().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Every 1024 packets a mark: (latest time before it, its offset, interfaces then). A mark
/// that a later one makes useless is dropped, so few are held.
#[derive(Default)]
struct Marks {
    marks: std::collections::VecDeque<(i64, u64, usize)>,
    n: u64,
}

impl Marks {
    fn due(&self) -> bool {
        self.n % 1024 == 0
    }

    /// Before a packet at `offset`; `last`: the latest time before it.
    fn packet(&mut self, offset: u64, ifaces: usize, last: Option<i64>) {
        if self.due() {
            self.marks
                .push_back((last.unwrap_or(i64::MIN), offset, ifaces));
            if let Some(m) = last {
                while self.marks.len() > 1 && self.marks[1].0 < m - WARM_UP_NS as i64 {
                    self.marks.pop_front();
                }
            }
        }
        self.n += 1;
    }

    /// The latest mark before which everything is older than `last - WARM_UP_NS`:
    /// (offset, interfaces then).
    fn start(&self, last: Option<i64>) -> Option<(u64, usize)> {
        let m = last?;
        self.marks
            .iter()
            .rev()
            .find(|k| k.0 < m - WARM_UP_NS as i64)
            .map(|k| (k.1, k.2))
    }
}
