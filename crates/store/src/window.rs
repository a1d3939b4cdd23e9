//! The time window of a read, and the clock offset that corrects a store's times: shared by
//! the plan (`extract`) and the files' name spans (`time_prune`).

/// Packets with `start <= ts < end`; an open side is unbounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeWindow {
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
}

impl TimeWindow {
    pub fn contains(&self, ts: u64) -> bool {
        self.start_ns.is_none_or(|s| ts >= s) && self.end_ns.is_none_or(|e| ts < e)
    }

    /// Does anything in `[first, last]` fall in the window?
    pub fn meets(&self, first: u64, last: u64) -> bool {
        self.start_ns.is_none_or(|s| last >= s) && self.end_ns.is_none_or(|e| first < e)
    }
}

/// `ts` corrected by a clock offset, kept within what u64 nanoseconds hold.
pub fn corrected(ts: u64, offset_ns: i64) -> u64 {
    (i128::from(ts) + i128::from(offset_ns)).clamp(0, i128::from(u64::MAX)) as u64
}
