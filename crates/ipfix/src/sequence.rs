//! Loss accounting on the forwarding network from IPFIX sequence numbers.
//!
//! An exporter numbers data records per transport session and observation domain (RFC 7011
//! §3.1): a message's sequence number is the count of data records sent before it, modulo
//! 2^32. [`SequenceTracker`] compares each message with the next number it expects and counts
//! gaps as lost records, takes them back when a late message fills its gap (reordering), and
//! tells duplicates and exporter restarts apart (a restart is a new exporter start time, from
//! the exporter's statistics record).
//!
//! Over UDP anyone can send a message with an exporter's source address, so the numbers are
//! only evidence, never a decision: the tracker *counts*, and a collector stores every message
//! that decodes whatever the tracker says. What a forger must not be able to do is move the
//! stream's line: a jump of [`JUMP_WINDOW`] records or more, a message behind the line that
//! fills no known gap and is not a plausible duplicate, and every restart claim are only a
//! *candidate* line, believed once [`CONFIRM`] messages continue it with no message on the
//! current line in between (which a real exporter, whose old line has ended, satisfies at
//! once). A restart claim must also be consistent — a later start time, and a sequence number
//! near 0 — or it is not even a candidate. Counts are totals: nothing, a believed restart
//! included, ever takes them back except a late message filling its own gap.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

/// Open gaps remembered per stream, so that late messages can fill them.
const MAX_GAPS: usize = 64;
/// A message this many records behind the expected number, from an exporter that never
/// announced a start time, is taken for a restart rather than a duplicate (once believed).
pub const RESTART_DISTANCE: u32 = 1 << 24;
/// A message ahead of the line by fewer records is taken as the line after a loss: the gap is
/// counted at once (and taken back if late messages fill it). Anything further ahead is a jump,
/// believed only once confirmed.
pub const JUMP_WINDOW: u32 = 1 << 20;
/// A message at most this many records behind the line, in no known gap, is a duplicate.
pub const DUPLICATE_WINDOW: u32 = 1 << 20;
/// A restart claim is consistent only with a sequence number below this (the new session's
/// head: what was lost before its first message arrived).
pub const RESTART_HEAD: u32 = 1 << 20;
/// In-line messages (with records) that confirm a new line.
pub const CONFIRM: u32 = 3;

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
    /// Messages whose records could not be counted (a data set without its template).
    pub resyncs: u64,
    /// Believed jumps of the line that were not restarts (far ahead, or far behind).
    pub jumps: u64,
    /// Messages off the line that moved nothing: inconsistent restart claims (an earlier
    /// start time, or a sequence number far from 0) and the messages of a line that was
    /// refuted when the old line went on (forged or stray numbers).
    pub anomalies: u64,
}

/// What one message meant for its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceEvent {
    /// The first message of a stream: nothing to compare with.
    First,
    InOrder,
    /// This many records went missing before this message.
    Gap(u32),
    /// A late message whose records had been counted as lost.
    Reordered,
    Duplicate,
    /// The exporter restarted (a consistent claim, provisional until confirmed); `lost`
    /// records of its new session came before this message.
    Restart {
        lost: u32,
    },
    /// The line jumped far (provisional until confirmed); `lost` records counted for it.
    Jump {
        lost: u32,
    },
    /// A provisional line was refuted by a message on the line before it: its messages are
    /// anomalies and what they counted is taken back. This message is then taken on the old
    /// line.
    Refuted,
    /// Off the line and moving nothing (an inconsistent restart claim).
    Anomaly,
    /// The message's records could not be counted (no template).
    Resync,
}

impl SequenceEvent {
    /// Whether the event is a sequence anomaly worth logging (once per episode).
    pub fn is_anomaly(self) -> bool {
        matches!(
            self,
            SequenceEvent::Jump { .. }
                | SequenceEvent::Refuted
                | SequenceEvent::Anomaly
                | SequenceEvent::Restart { .. }
        )
    }
}

/// The line a stream was on before a provisional change, to go back to if it is refuted.
#[derive(Clone, Debug)]
struct Confirmed {
    next: u32,
    start_time_ms: u64,
    counts: SequenceCounts,
    gaps: VecDeque<(u32, u32)>,
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
    /// Set while the line is provisional (after a jump or a restart claim): the line before.
    confirmed: Option<Box<Confirmed>>,
    /// In-line messages with records since the line became provisional.
    confirmations: u32,
}

impl StreamState {
    /// Whether the current line is provisional (a jump or restart not yet confirmed).
    pub fn provisional(&self) -> bool {
        self.confirmed.is_some()
    }
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
                ..StreamState::default()
            },
        );
    }

    pub fn stream(&self, exporter: SocketAddr, domain: u32) -> Option<&StreamState> {
        self.streams.get(&(exporter, domain))
    }

    pub fn streams(&self) -> impl Iterator<Item = (SocketAddr, u32, &StreamState)> {
        self.streams.iter().map(|(k, s)| (k.0, k.1, s))
    }

    pub fn len(&self) -> usize {
        self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Forgets a stream (its counts too).
    pub fn remove(&mut self, exporter: SocketAddr, domain: u32) -> Option<StreamState> {
        self.streams.remove(&(exporter, domain))
    }

    /// Accounts one message: its header's `sequence`, its data `records` (None when some set
    /// could not be decoded for want of a template), and the exporter's start time if the
    /// message carried one (an [`crate::ExporterStats`] record with a non-zero start time).
    /// The answer is for counting and logging only: it says nothing about whether the
    /// message's records are genuine.
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
        s.observe(sequence, records, start_time_ms.filter(|&t| t != 0))
    }
}

impl StreamState {
    fn observe(
        &mut self,
        sequence: u32,
        records: Option<u32>,
        start: Option<u64>,
    ) -> SequenceEvent {
        let Some(n) = records else {
            // Its records cannot be counted: the next counted message shows them as a gap.
            self.counts.resyncs += 1;
            return SequenceEvent::Resync;
        };
        let Some(expected) = self.next else {
            if let Some(start) = start {
                self.start_time_ms = start;
            }
            self.take(sequence, n);
            return SequenceEvent::First;
        };
        let claim = start.filter(|&t| self.start_time_ms != 0 && t != self.start_time_ms);
        if sequence == expected && claim.is_none() {
            if self.start_time_ms == 0 {
                self.start_time_ms = start.unwrap_or(0);
            }
            self.take(sequence, n);
            if self.confirmed.is_some() && n > 0 {
                self.confirmations += 1;
                if self.confirmations >= CONFIRM {
                    self.confirmed = None;
                }
            }
            return SequenceEvent::InOrder;
        }
        if self.on_confirmed_line(sequence, n, start) {
            self.refute();
            let _ = self.observe(sequence, records, start);
            return SequenceEvent::Refuted;
        }
        if let Some(start) = claim {
            if start > self.start_time_ms && sequence < RESTART_HEAD {
                self.begin_provisional();
                self.start_time_ms = start;
                self.gaps.clear();
                self.counts.restarts += 1;
                self.counts.lost += sequence as u64;
                self.take(sequence, n);
                return SequenceEvent::Restart { lost: sequence };
            }
            self.counts.anomalies += 1;
            return SequenceEvent::Anomaly;
        }
        let ahead = sequence.wrapping_sub(expected);
        if ahead < JUMP_WINDOW {
            self.remember_gap(expected, sequence);
            self.counts.lost += ahead as u64;
            self.take(sequence, n);
            return SequenceEvent::Gap(ahead);
        }
        if self.fill_gap(sequence, n) {
            self.counts.lost -= n as u64;
            self.counts.reordered += 1;
            self.counts.records += n as u64;
            return SequenceEvent::Reordered;
        }
        let behind = expected.wrapping_sub(sequence);
        if behind <= DUPLICATE_WINDOW {
            self.counts.duplicates += 1;
            return SequenceEvent::Duplicate;
        }
        self.begin_provisional();
        self.gaps.clear();
        let lost = if ahead < 1 << 31 { ahead } else { 0 };
        if lost == 0 && behind >= RESTART_DISTANCE && self.start_time_ms == 0 {
            self.counts.restarts += 1;
        } else {
            self.counts.jumps += 1;
        }
        self.counts.lost += lost as u64;
        self.take(sequence, n);
        SequenceEvent::Jump { lost }
    }

    /// Whether a message belongs to the line before a provisional change: in order on it,
    /// a small gap ahead of it, or a late message into one of its gaps (and no other start
    /// time).
    fn on_confirmed_line(&self, sequence: u32, n: u32, start: Option<u64>) -> bool {
        let Some(c) = &self.confirmed else {
            return false;
        };
        if start.is_some_and(|t| t != c.start_time_ms && c.start_time_ms != 0) {
            return false;
        }
        sequence.wrapping_sub(c.next) < JUMP_WINDOW
            || c.gaps.iter().any(|&(a, b)| {
                let off = sequence.wrapping_sub(a);
                let len = b.wrapping_sub(a);
                off < len && n <= len - off
            })
    }

    fn begin_provisional(&mut self) {
        if self.confirmed.is_none() {
            let mut counts = self.counts;
            counts.messages -= 1; // this message is counted again on refutation
            self.confirmed = Some(Box::new(Confirmed {
                next: self.next.unwrap_or(0),
                start_time_ms: self.start_time_ms,
                counts,
                gaps: std::mem::take(&mut self.gaps),
            }));
        }
        self.confirmations = 0;
    }

    /// Goes back to the confirmed line: the provisional line's messages become anomalies and
    /// what they counted (records, loss, the restart or jump) is taken back.
    fn refute(&mut self) {
        let c = *self.confirmed.take().expect("provisional");
        // This message is counted again when it is observed on the restored line.
        let strays = self.counts.messages - 1 - c.counts.messages;
        self.next = Some(c.next);
        self.start_time_ms = c.start_time_ms;
        self.gaps = c.gaps;
        self.counts = c.counts;
        self.counts.anomalies += strays;
        self.counts.messages += strays + 1;
        self.confirmations = 0;
    }

    fn take(&mut self, sequence: u32, n: u32) {
        self.counts.records += n as u64;
        self.next = Some(sequence.wrapping_add(n));
    }

    fn remember_gap(&mut self, start: u32, end: u32) {
        if self.gaps.len() == MAX_GAPS {
            self.gaps.pop_front();
        }
        self.gaps.push_back((start, end));
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
            SequenceEvent::Jump { lost: 0 }
        );
        assert_eq!(t.stream(e, 0).unwrap().counts.restarts, 1);
        // A message without its template moves nothing: its record shows as a gap.
        assert_eq!(t.observe(e, 0, 1, None, None), SequenceEvent::Resync);
        assert_eq!(t.observe(e, 0, 2, Some(1), None), SequenceEvent::Gap(1));
        assert_eq!(t.observe(e, 0, 3, Some(1), None), SequenceEvent::InOrder);
        assert_eq!(t.stream(e, 0).unwrap().counts.lost, 1);
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

/// Forged numbers: what a sender with the exporter's source address (and no other power)
/// can and cannot do to the counts.
#[cfg(test)]
mod forged {
    use super::*;

    fn addr() -> SocketAddr {
        "198.18.0.1:40000".parse().unwrap()
    }

    /// The real exporter: 10-record messages, start time 1000.
    fn real(t: &mut SequenceTracker, seq: &mut u32) -> SequenceEvent {
        let e = t.observe(addr(), 1, *seq, Some(10), Some(1_000));
        *seq += 10;
        e
    }

    #[test]
    fn far_apart_forged_headers_are_anomalies_and_count_nothing() {
        let mut t = SequenceTracker::new();
        let mut seq = 0;
        for _ in 0..5 {
            real(&mut t, &mut seq);
        }
        // 130 empty headers, far apart, between two real messages.
        for i in 0..130u32 {
            t.observe(addr(), 1, 5_000_000u32.wrapping_mul(i + 1), Some(0), None);
        }
        assert_eq!(real(&mut t, &mut seq), SequenceEvent::Refuted);
        for _ in 0..5 {
            assert_eq!(real(&mut t, &mut seq), SequenceEvent::InOrder);
        }
        let c = t.stream(addr(), 1).unwrap().counts;
        assert_eq!((c.lost, c.records, c.duplicates), (0, 110, 0), "{c:?}");
        assert_eq!((c.jumps, c.restarts), (0, 0), "{c:?}");
        assert_eq!(c.anomalies, 130);
        assert_eq!(c.messages, 141);
    }

    #[test]
    fn a_forged_restart_is_refuted_and_erases_nothing() {
        let mut t = SequenceTracker::new();
        let mut seq = 0;
        for _ in 0..3 {
            real(&mut t, &mut seq);
        }
        // A lost message: a real gap of 10.
        seq += 10;
        real(&mut t, &mut seq);
        let before = t.stream(addr(), 1).unwrap().counts;
        assert_eq!(before.lost, 10);
        // Consistent-looking restart claims (later start time, sequence near 0).
        for i in 0..7 {
            let ev = t.observe(addr(), 1, i * 3, Some(3), Some(2_000 + i as u64));
            assert!(ev.is_anomaly(), "{ev:?}");
        }
        // Inconsistent ones: an earlier start time, or a head far from 0.
        assert_eq!(
            t.observe(addr(), 1, 5, Some(3), Some(500)),
            SequenceEvent::Anomaly
        );
        assert_eq!(real(&mut t, &mut seq), SequenceEvent::Refuted);
        assert_eq!(
            t.observe(addr(), 1, 5_000_000, Some(3), Some(9_000)),
            SequenceEvent::Anomaly
        );
        assert_eq!(real(&mut t, &mut seq), SequenceEvent::InOrder);
        let c = t.stream(addr(), 1).unwrap().counts;
        assert_eq!((c.lost, c.restarts, c.records), (10, 0, 60), "{c:?}");
        assert_eq!(c.anomalies, 9);
        assert_eq!(t.stream(addr(), 1).unwrap().start_time_ms, 1_000);
    }

    #[test]
    fn a_real_restart_is_believed_even_with_a_short_second_session() {
        let mut t = SequenceTracker::new();
        let mut seq = 0;
        for _ in 0..20 {
            real(&mut t, &mut seq);
        }
        assert_eq!(
            t.observe(addr(), 1, 0, Some(4), Some(5_000)),
            SequenceEvent::Restart { lost: 0 }
        );
        assert_eq!(
            t.observe(addr(), 1, 4, Some(4), None),
            SequenceEvent::InOrder
        );
        let s = t.stream(addr(), 1).unwrap();
        assert!(s.provisional());
        assert_eq!((s.counts.restarts, s.counts.records), (1, 208));
        for i in 0..3 {
            t.observe(addr(), 1, 8 + 4 * i, Some(4), None);
        }
        let s = t.stream(addr(), 1).unwrap();
        assert!(!s.provisional());
        // Confirmed: the old line is gone, a message on it is now a far jump.
        assert!(t
            .observe(addr(), 1, 200, Some(10), Some(1_000))
            .is_anomaly());
    }

    #[test]
    fn a_confirmed_forgery_moves_the_line_and_the_real_exporter_moves_it_back() {
        let mut t = SequenceTracker::new();
        let mut seq = 0;
        for _ in 0..3 {
            real(&mut t, &mut seq);
        }
        let far = 1u32 << 30;
        for i in 0..CONFIRM + 1 {
            t.observe(addr(), 1, far + i, Some(1), None);
        }
        assert!(!t.stream(addr(), 1).unwrap().provisional());
        for _ in 0..CONFIRM + 1 {
            real(&mut t, &mut seq);
        }
        let c = t.stream(addr(), 1).unwrap().counts;
        // Both moves are counted as jumps; no record of the real exporter went uncounted.
        assert_eq!(c.jumps, 2, "{c:?}");
        assert_eq!(c.records, 70 + (CONFIRM as u64 + 1), "{c:?}");
    }
}
