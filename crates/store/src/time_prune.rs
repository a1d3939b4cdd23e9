//! Time pruning: which files of a store a time window needs, decided from their names,
//! before any file is opened.
//!
//! A stored file is named after its first packet (`meta::file_name`), and a recorder writes
//! a stream's files one after another, each packet into the file open when it arrives.
//! When a stream's packets arrive in time order, its file k holds packets from its name's
//! time up to the name time of file k + 1, *inclusive* (a size rotation may fall between
//! two packets of the same time); the stream's last file, and a file still being written,
//! hold packets from their name time on. That is a file's *name span*.
//!
//! Time order is what a live capture on one clock gives, but the recorder does not enforce
//! it: it writes packets in the order they come (`FileMeta::out_of_order` counts those
//! older than the packet before them). A replayed trace out of order, two interfaces in
//! one stream, or a clock stepped back can put a packet outside its file's name span. So
//! that a window reads exactly what it reads without pruning, three guards:
//! 1. *Names agree with sequence numbers.* A stream whose files, in name order, do not have
//!    increasing sequence numbers (older stores whose runs restart at 1, a run that
//!    replayed older traffic into a store) is not pruned at all.
//! 2. *One more at each edge.* Per stream, the file just before and the file just after
//!    those whose name span meets the window are read too: a packet displaced across a
//!    rotation lands in one of them.
//! 3. *Every file read is checked.* Its index gives the times it really holds; when they
//!    leave its name span, its stream's other files are all read (see
//!    [`TimePlan::widen`]).
//!
//! What the guards cannot see: a packet displaced by more than one file from where time
//! order would put it, in a stream whose files around the window are all in order (a
//! replayed trace with a stray timestamp, far from the window). `--no-index` reads every
//! file; the store catalog, which keeps each file's true time range, will not need names.

use crate::meta;
use crate::window::{corrected, TimeWindow};

/// A readable file of a store as its name places it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedFile {
    pub stream: u32,
    pub seq: u64,
    /// The first packet's time, as the name gives it (uncorrected).
    pub first_ns: u64,
}

impl NamedFile {
    /// From a complete file's name or a partial one's (`.NAME.partial`); `None` when the
    /// name gives no time.
    pub fn of_path(path: &std::path::Path) -> Option<NamedFile> {
        let name = path.file_name()?.to_str()?;
        let (data, final_name) = match meta::DataName::parse(name) {
            Some(d) => (d, name),
            None => meta::DataName::of_partial(name)?,
        };
        Some(NamedFile {
            stream: data.stream,
            seq: data.seq,
            first_ns: meta::time_of_name(final_name)?,
        })
    }
}

/// Where a file's packets lie if its stream is in time order (uncorrected times).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameSpan {
    pub first_ns: u64,
    /// The next file's name time (inclusive); `None` for the stream's last file.
    pub last_ns: Option<u64>,
}

impl NameSpan {
    /// Does `[first, last]` (a file's true packet times, uncorrected) lie inside?
    pub fn holds(&self, first: u64, last: u64) -> bool {
        first >= self.first_ns && self.last_ns.is_none_or(|l| last <= l)
    }

    fn meets(&self, window: &TimeWindow, offset_ns: i64) -> bool {
        let last = self.last_ns.map_or(u64::MAX, |l| corrected(l, offset_ns));
        window.meets(corrected(self.first_ns, offset_ns), last)
    }
}

/// Which files of one input to read first, and what their names promise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimePlan {
    /// Per file, in the order given: its name span, when its name gives a time and its
    /// stream's names agree with its sequence numbers (else it is always read).
    pub spans: Vec<Option<NameSpan>>,
    /// Per file: read it.
    pub wanted: Vec<bool>,
    /// Per file: its stream (`None` when the name gives none).
    streams: Vec<Option<u32>>,
}

impl TimePlan {
    /// Every file is read (no window, or pruning turned off).
    pub fn read_all(names: &[Option<NamedFile>]) -> TimePlan {
        TimePlan {
            spans: vec![None; names.len()],
            wanted: vec![true; names.len()],
            streams: names.iter().map(|n| n.map(|n| n.stream)).collect(),
        }
    }

    /// The files `window` needs by their names, with one more at each edge per stream.
    pub fn new(names: &[Option<NamedFile>], window: &TimeWindow, offset_ns: i64) -> TimePlan {
        let mut plan = TimePlan::read_all(names);
        if window.start_ns.is_none() && window.end_ns.is_none() {
            return plan;
        }
        let mut streams: Vec<u32> = names.iter().flatten().map(|n| n.stream).collect();
        streams.sort_unstable();
        streams.dedup();
        for stream in streams {
            let order = in_name_order(names, stream);
            let Some(spans) = name_spans(names, &order) else {
                continue;
            };
            let meets: Vec<bool> = (spans.iter()).map(|s| s.meets(window, offset_ns)).collect();
            let wanted = with_edges(&meets);
            for ((&at, span), want) in order.iter().zip(spans).zip(wanted) {
                plan.spans[at] = Some(span);
                plan.wanted[at] = want;
            }
        }
        plan
    }

    /// Reads every file of `stream` (its names proved wrong about one of them).
    pub fn widen(&mut self, stream: u32) {
        for (at, s) in self.streams.iter().enumerate() {
            if *s == Some(stream) {
                self.wanted[at] = true;
            }
        }
    }

    /// Files left unread.
    pub fn skipped(&self) -> u64 {
        self.wanted.iter().filter(|w| !**w).count() as u64
    }
}

/// The positions of `stream`'s files, by name time, then sequence number.
fn in_name_order(names: &[Option<NamedFile>], stream: u32) -> Vec<usize> {
    let mut order: Vec<usize> = (0..names.len())
        .filter(|&i| names[i].is_some_and(|n| n.stream == stream))
        .collect();
    order.sort_by_key(|&i| names[i].map(|n| (n.first_ns, n.seq)));
    order
}

/// The name spans of one stream's files (in name order), or `None` when their sequence
/// numbers do not increase with their names' times: then names do not tell which file
/// follows which (see the module comment, guard 1).
fn name_spans(names: &[Option<NamedFile>], order: &[usize]) -> Option<Vec<NameSpan>> {
    let files: Vec<NamedFile> = order.iter().filter_map(|&i| names[i]).collect();
    if files.windows(2).any(|w| w[0].seq >= w[1].seq) {
        return None;
    }
    let next = files.iter().skip(1).map(|n| Some(n.first_ns)).chain([None]);
    Some(
        (files.iter().zip(next))
            .map(|(f, last_ns)| NameSpan {
                first_ns: f.first_ns,
                last_ns,
            })
            .collect(),
    )
}

/// The files whose span meets the window, with one more on each side (guard 2). Spans
/// follow one another, so those meeting a window are one run; when none does, the window
/// lies before the first file, which is the one more.
fn with_edges(meets: &[bool]) -> Vec<bool> {
    let first = meets.iter().position(|m| *m);
    let last = meets.iter().rposition(|m| *m);
    let (from, to) = match (first, last) {
        (Some(a), Some(b)) => (a.saturating_sub(1), b + 1),
        _ => (0, 0),
    };
    (0..meets.len()).map(|i| i >= from && i <= to).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(stream: u32, seq: u64, first_ns: u64) -> Option<NamedFile> {
        Some(NamedFile {
            stream,
            seq,
            first_ns,
        })
    }

    fn window(start: Option<u64>, end: Option<u64>) -> TimeWindow {
        TimeWindow {
            start_ns: start,
            end_ns: end,
        }
    }

    /// Stream 0 at 10, 20, 30, 40; stream 1 at 15, 35; a file whose name gives no time.
    fn names() -> Vec<Option<NamedFile>> {
        vec![
            named(0, 1, 10),
            named(1, 1, 15),
            named(0, 2, 20),
            named(0, 3, 30),
            named(1, 2, 35),
            named(0, 4, 40),
            None,
        ]
    }

    fn wanted(plan: &TimePlan) -> Vec<usize> {
        (0..plan.wanted.len()).filter(|&i| plan.wanted[i]).collect()
    }

    #[test]
    fn a_window_reads_the_files_its_name_spans_meet_and_one_more_at_each_edge() {
        let cases: &[(Option<u64>, Option<u64>, &[usize])] = &[
            // inside stream 0's second file: files 10..30 of stream 0; stream 1's first
            // file (its span [15, 35]) and the one after it
            (Some(22), Some(25), &[0, 1, 2, 3, 4, 6]),
            // exactly at a file's name time: the file before may hold packets of that time
            (Some(30), Some(31), &[0, 1, 2, 3, 4, 5, 6]),
            // before the first file: the first of each stream
            (None, Some(5), &[0, 1, 6]),
            // after the last: the last files are open-ended, and the one before each
            (Some(100), None, &[1, 3, 4, 5, 6]),
            (Some(41), Some(42), &[1, 3, 4, 5, 6]),
        ];
        for &(start, end, want) in cases {
            let plan = TimePlan::new(&names(), &window(start, end), 0);
            assert_eq!(wanted(&plan), want, "{start:?}..{end:?}");
        }
        let all = TimePlan::new(&names(), &TimeWindow::default(), 0);
        assert_eq!(all.skipped(), 0);
    }

    #[test]
    fn name_spans_end_at_the_next_file_of_the_stream_inclusive() {
        let plan = TimePlan::new(&names(), &window(Some(0), Some(1)), 0);
        let span = |first_ns, last_ns| Some(NameSpan { first_ns, last_ns });
        assert_eq!(
            plan.spans,
            [
                span(10, Some(20)),
                span(15, Some(35)),
                span(20, Some(30)),
                span(30, Some(40)),
                span(35, None),
                span(40, None),
                None
            ]
        );
        assert!(span(10, Some(20)).unwrap().holds(10, 20));
        assert!(!span(10, Some(20)).unwrap().holds(9, 20));
        assert!(!span(10, Some(20)).unwrap().holds(10, 21));
    }

    #[test]
    fn the_window_is_compared_in_corrected_time() {
        // A store whose clock ran 100 ns behind: its file named 20 holds corrected 120.
        let plan = TimePlan::new(&names(), &window(Some(122), Some(125)), 100);
        assert_eq!(wanted(&plan), [0, 1, 2, 3, 4, 6]);
    }

    #[test]
    fn a_stream_whose_sequence_disagrees_with_its_names_is_read_whole() {
        // Two runs whose sequence numbers both start at 1.
        let names = vec![
            named(0, 1, 10),
            named(0, 2, 20),
            named(0, 1, 30),
            named(0, 2, 40),
        ];
        let plan = TimePlan::new(&names, &window(Some(45), None), 0);
        assert_eq!(plan.skipped(), 0);
        assert!(plan.spans.iter().all(Option::is_none));
        // A run that replayed older traffic after a newer one.
        let names = vec![named(0, 3, 10), named(0, 4, 20), named(0, 1, 30)];
        assert_eq!(
            TimePlan::new(&names, &window(Some(45), None), 0).skipped(),
            0
        );
    }

    #[test]
    fn widening_reads_every_file_of_the_stream() {
        let mut plan = TimePlan::new(&names(), &window(None, Some(5)), 0);
        plan.widen(0);
        assert_eq!(wanted(&plan), [0, 1, 2, 3, 5, 6]);
    }

    #[test]
    fn partial_and_complete_names_give_their_time() {
        let name = meta::file_name(
            1_000,
            2,
            7,
            tapdeck_pcap::Format::Pcapng,
            tapdeck_pcap::container::Container::Zstd,
        );
        let want = named(2, 7, 1_000);
        assert_eq!(NamedFile::of_path(std::path::Path::new(&name)), want);
        let partial = meta::partial_name(&name);
        assert_eq!(NamedFile::of_path(std::path::Path::new(&partial)), want);
        assert_eq!(NamedFile::of_path(std::path::Path::new("x.pcap")), None);
    }
}
