//! Loss accounting on the forwarding network from IPFIX sequence numbers.
//!
//! An exporter numbers data records per transport session and observation domain (RFC 7011
//! §3.1): a message's sequence number is the count of data records sent before it, modulo
//! 2^32. [`SequenceTracker`] compares each message with the next number it expects and counts
//! gaps as lost records, takes them back when a late message fills its gap (reordering), and
//! tells duplicates and exporter restarts apart (a restart is a new exporter start time, from
//! the exporter's statistics record).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

/// Open gaps remembered per stream, so that late messages can fill them.
const MAX_GAPS: usize = 64;
/// A message this many records behind the expected number, from an exporter that never
/// announced a start time, is taken for a restart rather than a duplicate.
pub const RESTART_DISTANCE: u32 = 1 << 24;

/// Running totals of one stream (exporter, observation domain).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SequenceCounts {
    pub messages: u64,
    /// Data records in messages counted (in order, after a gap, or late into a gap).
    pub records: u64,
    /// Records the sequence numbers say were sent but never arrived.
    pub lost: u64,
    /// Late messages that filled (part of) a gap.
    pub reordered: u64,
    /// Messages whose records were already counted (or too old to tell).
    pub duplicates: u64,
    pub restarts: u64,
    /// Messages whose records could not be counted (a data set without its template); the
    /// next message starts counting afresh.
    pub resyncs: u64,
}

/// What one message meant for its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceEvent {
    /// The first message of a stream (or the first after a resync): nothing to compare with.
    First,
    InOrder,
    /// This many records went missing before this message.
    Gap(u32),
    /// A late message whose records had been counted as lost.
    Reordered,
    Duplicate,
    /// The exporter restarted; `lost` records of its new session came before this message.
    Restart {
        lost: u32,
    },
    Resync,
}

/// The state of one stream; a collector stores it to count, after its own restart, the gap it
/// missed ([`SequenceTracker::resume`]).
#[derive(Clone, Debug, Default)]
pub struct StreamState {
    /// The sequence number expected next.
    pub next: Option<u32>,
    /// The exporter's start time (ms since 1970; 0 while unknown).
    pub start_time_ms: u64,
    pub counts: SequenceCounts,
    /// Open gaps as [start, end) in sequence space, oldest first.
    gaps: VecDeque<(u32, u32)>,
}

#[derive(Default)]
pub struct SequenceTracker {
    streams: HashMap<(SocketAddr, u32), StreamState>,
}

impl SequenceTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Continues a stream from a saved state (its gaps are not saved: records of messages
    /// arriving late across a collector restart count as duplicates, not reordered).
    pub fn resume(
        &mut self,
        exporter: SocketAddr,
        domain: u32,
        next: u32,
        start_time_ms: u64,
        counts: SequenceCounts,
    ) {
        self.streams.insert(
            (exporter, domain),
            StreamState {
                next: Some(next),
                start_time_ms,
                counts,
                gaps: VecDeque::new(),
            },
        );
    }

    pub fn stream(&self, exporter: SocketAddr, domain: u32) -> Option<&StreamState> {
        self.streams.get(&(exporter, domain))
    }

    pub fn streams(&self) -> impl Iterator<Item = (SocketAddr, u32, &StreamState)> {
        self.streams.iter().map(|(k, s)| (k.0, k.1, s))
    }

    /// Accounts one message: its header's `sequence`, its data `records` (None when some set
    /// could not be decoded for want of a template), and the exporter's start time if the
    /// message carried one (an [`crate::ExporterStats`] record with a non-zero start time).
    pub fn observe(
        &mut self,
        exporter: SocketAddr,
        domain: u32,
        sequence: u32,
        records: Option<u32>,
        start_time_ms: Option<u64>,
    ) -> SequenceEvent {
        let s = self.streams.entry((exporter, domain)).or_default();
        s.counts.messages += 1;
        let start = start_time_ms.filter(|&t| t != 0);
        if let Some(start) = start {
            let restarted = s.start_time_ms != 0 && s.start_time_ms != start;
            s.start_time_ms = start;
            if restarted {
                // A new session numbers from 0: what came before this message is lost.
                s.counts.restarts += 1;
                s.counts.lost += sequence as u64;
                s.gaps.clear();
                s.take(sequence, records);
                return SequenceEvent::Restart { lost: sequence };
            }
        }
        let Some(expected) = s.next else {
            s.take(sequence, records);
            return if records.is_some() {
                SequenceEvent::First
            } else {
                SequenceEvent::Resync
            };
        };
        let Some(n) = records else {
            s.counts.resyncs += 1;
            s.next = None;
            return SequenceEvent::Resync;
        };
        let ahead = sequence.wrapping_sub(expected);
        if ahead == 0 {
            s.take(sequence, records);
            return SequenceEvent::InOrder;
        }
        if ahead < 1 << 31 {
            if s.gaps.len() == MAX_GAPS {
                s.gaps.pop_front();
            }
            s.gaps.push_back((expected, sequence));
            s.counts.lost += ahead as u64;
            s.take(sequence, records);
            return SequenceEvent::Gap(ahead);
        }
        if s.fill_gap(sequence, n) {
            s.counts.lost -= n as u64;
            s.counts.reordered += 1;
            s.counts.records += n as u64;
            return SequenceEvent::Reordered;
        }
        let behind = expected.wrapping_sub(sequence);
        if behind >= RESTART_DISTANCE && s.start_time_ms == 0 {
            s.counts.restarts += 1;
            s.gaps.clear();
            s.take(sequence, records);
            return SequenceEvent::Restart { lost: 0 };
        }
        s.counts.duplicates += 1;
        SequenceEvent::Duplicate
    }
}

impl StreamState {
    fn take(&mut self, sequence: u32, records: Option<u32>) {
        match records {
            Some(n) => {
                self.counts.records += n as u64;
                self.next = Some(sequence.wrapping_add(n));
            }
            None => self.next = None,
        }
    }

    /// Removes [sequence, sequence + n) from the gap that holds all of it.
    fn fill_gap(&mut self, sequence: u32, n: u32) -> bool {
        for i in 0..self.gaps.len() {
            let (start, end) = self.gaps[i];
            let off = sequence.wrapping_sub(start);
            let len = end.wrapping_sub(start);
            if off < len && n <= len - off && n > 0 {
                let fill_end = sequence.wrapping_add(n);
                match (off == 0, fill_end == end) {
                    (true, true) => {
                        self.gaps.remove(i);
                    }
                    (true, false) => self.gaps[i].0 = fill_end,
                    (false, true) => self.gaps[i].1 = sequence,
                    (false, false) => {
                        self.gaps[i].1 = sequence;
                        self.gaps.insert(i + 1, (fill_end, end));
                        if self.gaps.len() > MAX_GAPS {
                            self.gaps.pop_front();
                        }
                    }
                }
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "198.18.0.1:40000".parse().unwrap()
    }

    #[test]
    fn in_order_gap_reorder_duplicate() {
        let mut t = SequenceTracker::new();
        let e = addr();
        assert_eq!(
            t.observe(e, 1, 100, Some(10), Some(5)),
            SequenceEvent::First
        );
        assert_eq!(t.observe(e, 1, 110, Some(10), None), SequenceEvent::InOrder);
        // 120..130 and 130..140 missing
        assert_eq!(t.observe(e, 1, 140, Some(10), None), SequenceEvent::Gap(20));
        assert_eq!(t.stream(e, 1).unwrap().counts.lost, 20);
        assert_eq!(
            t.observe(e, 1, 130, Some(10), None),
            SequenceEvent::Reordered
        );
        assert_eq!(
            t.observe(e, 1, 130, Some(10), None),
            SequenceEvent::Duplicate
        );
        assert_eq!(
            t.observe(e, 1, 140, Some(10), None),
            SequenceEvent::Duplicate
        );
        assert_eq!(
            t.observe(e, 1, 120, Some(10), None),
            SequenceEvent::Reordered
        );
        let c = t.stream(e, 1).unwrap().counts;
        assert_eq!(
            (c.lost, c.reordered, c.duplicates, c.records, c.messages),
            (0, 2, 2, 50, 7)
        );
        // another domain is another stream
        assert_eq!(t.observe(e, 2, 7, Some(1), None), SequenceEvent::First);
    }

    #[test]
    fn gap_filled_from_the_middle() {
        let mut t = SequenceTracker::new();
        let e = addr();
        t.observe(e, 0, 0, Some(1), None);
        assert_eq!(t.observe(e, 0, 10, Some(1), None), SequenceEvent::Gap(9));
        assert_eq!(t.observe(e, 0, 4, Some(2), None), SequenceEvent::Reordered);
        assert_eq!(t.observe(e, 0, 1, Some(3), None), SequenceEvent::Reordered);
        assert_eq!(t.observe(e, 0, 6, Some(4), None), SequenceEvent::Reordered);
        assert_eq!(t.observe(e, 0, 5, Some(1), None), SequenceEvent::Duplicate);
        assert_eq!(t.stream(e, 0).unwrap().counts.lost, 0);
    }

    #[test]
    fn wraps_around_2_32() {
        let mut t = SequenceTracker::new();
        let e = addr();
        t.observe(e, 0, u32::MAX - 4, Some(10), None);
        assert_eq!(t.observe(e, 0, 5, Some(10), None), SequenceEvent::InOrder);
        assert_eq!(t.observe(e, 0, 25, Some(1), None), SequenceEvent::Gap(10));
        assert_eq!(
            t.observe(e, 0, 15, Some(10), None),
            SequenceEvent::Reordered
        );
    }

    #[test]
    fn restart_by_start_time_counts_the_new_sessions_head() {
        let mut t = SequenceTracker::new();
        let e = addr();
        t.observe(e, 0, 0, Some(100), Some(1_000));
        t.observe(e, 0, 100, Some(100), Some(1_000));
        // Restarted at 2_000; its first 30 records were lost.
        assert_eq!(
            t.observe(e, 0, 30, Some(5), Some(2_000)),
            SequenceEvent::Restart { lost: 30 }
        );
        assert_eq!(t.observe(e, 0, 35, Some(5), None), SequenceEvent::InOrder);
        let c = t.stream(e, 0).unwrap().counts;
        assert_eq!((c.restarts, c.lost, c.duplicates), (1, 30, 0));
    }

    #[test]
    fn restart_without_start_time_and_resync() {
        let mut t = SequenceTracker::new();
        let e = addr();
        t.observe(e, 0, 50_000_000, Some(1), None);
        assert_eq!(
            t.observe(e, 0, 0, Some(1), None),
            SequenceEvent::Restart { lost: 0 }
        );
        assert_eq!(t.observe(e, 0, 1, None, None), SequenceEvent::Resync);
        assert_eq!(t.observe(e, 0, 40, Some(1), None), SequenceEvent::First);
        assert_eq!(t.observe(e, 0, 41, Some(1), None), SequenceEvent::InOrder);
        assert_eq!(t.stream(e, 0).unwrap().counts.lost, 0);
    }

    #[test]
    fn resumed_collector_counts_what_it_missed() {
        let mut t = SequenceTracker::new();
        let e = addr();
        t.resume(e, 3, 1_000, 77, SequenceCounts::default());
        assert_eq!(
            t.observe(e, 3, 1_500, Some(10), Some(77)),
            SequenceEvent::Gap(500)
        );
    }
}
