//! A stream's items back in sequence for its writer, and when to stop waiting for the
//! compressors.
//!
//! The next item may be a chunk still with the compressors; the writer holds its ticket
//! (`pipeline::Done::Queued`). Waiting for it is right while they keep their pace: its
//! frame will be smaller than a raw copy. It is wrong when other processes have taken
//! their CPU: every chunk behind it waits too, raw ones included, while the disk idles and
//! the staging pool fills. So the writer waits only so long (the controller's
//! `late_after`), then stores the chunk raw from its ticket. Once it has, a next chunk
//! that no compressor has started yet is taken at once; the first chunk a compressor
//! delivers in time ends that.
//!
//! Time is given, not read, so that tests drive it.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::pipeline::{Chunk, Done, Job};

/// A ticket no compressor has started is taken at once after a late chunk, but only once it
/// is this old (seconds): a compressor picks a chunk up within microseconds when it can.
const UNSTARTED_GRACE: f64 = 0.002;

/// What the writer does next.
pub enum Next {
    /// The next item, in sequence.
    Item(Done),
    /// The next chunk, taken from the compressors after `waited` seconds: store it raw.
    Late { chunk: Chunk, waited: f64 },
}

#[derive(Default)]
pub struct Sequencer {
    next: u64,
    ready: BTreeMap<u64, Done>,
    /// Tickets of chunks with the compressors, with when each arrived.
    tickets: BTreeMap<u64, (Arc<Job>, f64)>,
    /// Since when the writer has waited for `next`, a chunk with the compressors.
    waiting_since: Option<f64>,
    /// The last chunk was taken late, and no compressor has delivered one in time since.
    starved: bool,
}

impl Sequencer {
    /// Item `seq` arrived at `now`. A compressor's frame of a chunk the writer took raw
    /// arrives after the writer has moved past it, and is dropped here.
    pub fn insert(&mut self, now: f64, seq: u64, item: Done) {
        if seq < self.next {
            return;
        }
        match item {
            Done::Queued(ticket) => {
                self.tickets.insert(seq, (ticket, now));
            }
            item => {
                self.ready.insert(seq, item);
            }
        }
    }

    /// What the writer does next at `now`, if anything: the next item once it has come, or
    /// its chunk raw once the compressors are late with it (`late_after`: seconds to wait
    /// for a chunk).
    pub fn next(&mut self, now: f64, late_after: impl Fn(&Job) -> f64) -> Option<Next> {
        if let Some(item) = self.ready.remove(&self.next) {
            if self.tickets.remove(&self.next).is_some() {
                self.starved = false;
            }
            self.advance();
            return Some(Next::Item(item));
        }
        let (ticket, arrived) = self.tickets.get(&self.next)?;
        let since = *self.waiting_since.get_or_insert(now);
        let waited = now - since;
        let unstarted = self.starved && now - arrived >= UNSTARTED_GRACE && !ticket.started();
        if !unstarted && waited < late_after(ticket) {
            return None;
        }
        let (job, _) = self.tickets.remove(&self.next).expect("looked up above");
        let chunk = job.take().expect("only the writer takes a chunk, and once");
        self.starved = true;
        self.advance();
        Some(Next::Late { chunk, waited })
    }

    /// Seconds from `now` until [`next`](Self::next) has something to do without a new
    /// item: `None` while the writer waits for no chunk of the compressors.
    pub fn late_in(&self, now: f64, late_after: impl Fn(&Job) -> f64) -> Option<f64> {
        if self.ready.contains_key(&self.next) {
            return Some(0.0);
        }
        let (ticket, arrived) = self.tickets.get(&self.next)?;
        let since = self.waiting_since.unwrap_or(now);
        let mut at = since + late_after(ticket);
        if self.starved && !ticket.started() {
            at = at.min(arrived + UNSTARTED_GRACE);
        }
        Some((at - now).max(0.0))
    }

    /// Nothing waits: every item that arrived was handed out.
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.tickets.is_empty()
    }

    /// The sequence number handed out next.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    fn advance(&mut self) {
        self.waiting_since = None;
        self.next += 1;
    }
}

#[cfg(test)]
mod tests {
    use tapdeck_pcap::container::Codec;

    use super::*;
    use crate::controller::{Decision, Reason};
    use crate::pipeline::{CloseFile, Encoded};
    use crate::staging::StagingPool;

    /// Seconds the writer waits for any chunk of the compressors, in these tests.
    const LATE: f64 = 0.05;

    fn job(pool: &Arc<StagingPool>) -> Arc<Job> {
        let mut segment = pool.try_take().expect("the test's pool has room");
        segment.spare_mut()[..8].copy_from_slice(b"records!");
        segment.advance(8);
        Job::new(Chunk {
            segment: Arc::new(segment),
            min_ts_ns: 0,
            max_ts_ns: 0,
            packets: 1,
            per_iface: vec![1],
            source_waits: false,
            decision: Decision {
                codec: Codec::Zstd(1),
                reason: Reason::Plan,
            },
            linktypes: Arc::from(vec![1u16]),
            flows: Default::default(),
        })
    }

    /// A sequencer holding the tickets of `n` chunks sent to the compressors at time 0, as
    /// items 0 to n - 1, and their jobs.
    fn queued(pool: &Arc<StagingPool>, n: usize) -> (Sequencer, Vec<Arc<Job>>) {
        let mut s = Sequencer::default();
        let jobs: Vec<Arc<Job>> = (0..n).map(|_| job(pool)).collect();
        for (seq, j) in jobs.iter().enumerate() {
            s.insert(0.0, seq as u64, Done::Queued(Arc::clone(j)));
        }
        (s, jobs)
    }

    /// What the writer does at `now`: "item N" or "late N" (N its sequence number), until
    /// nothing is left to do.
    fn drain(s: &mut Sequencer, now: f64) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(next) = s.next(now, |_| LATE) {
            let seq = s.next_seq() - 1;
            out.push(match next {
                Next::Item(_) => format!("item {seq}"),
                Next::Late { .. } => format!("late {seq}"),
            });
        }
        out
    }

    fn close() -> Done {
        Done::Close(CloseFile {
            capture: Vec::new(),
            out_of_order: 0,
        })
    }

    /// A compressor that keeps its pace: items go out in sequence, each chunk once its
    /// frame is there, and nothing is taken raw.
    #[test]
    fn chunks_compressed_in_time_go_out_in_sequence() {
        let pool = StagingPool::new(4 * 4096, 4096).unwrap();
        let mut s = Sequencer::default();
        let (job_a, job_b) = (job(&pool), job(&pool));
        s.insert(0.0, 0, Done::Queued(Arc::clone(&job_a)));
        s.insert(0.0, 1, Done::Queued(Arc::clone(&job_b)));
        s.insert(0.0, 2, close());
        assert!(drain(&mut s, 0.0).is_empty(), "nothing has come back yet");
        // The compressors take the chunks, and let go of their jobs.
        let (a, b) = (job_a.start().unwrap(), job_b.start().unwrap());
        drop((job_a, job_b));
        // The second chunk's frame first: it waits for the first.
        s.insert(0.01, 1, Done::Chunk(b, Encoded::Raw));
        assert!(drain(&mut s, 0.01).is_empty());
        s.insert(0.02, 0, Done::Chunk(a, Encoded::Raw));
        assert_eq!(drain(&mut s, 0.02), ["item 0", "item 1", "item 2"]);
        assert!(s.is_empty());
        assert_eq!(pool.fill(), 0.0, "both segments are back in the pool");
    }

    /// A starved compressor (it never finishes): the writer waits for its chunk only until
    /// it is late, then takes it raw, and the chunks behind it that no compressor started
    /// are taken at once, so a raw chunk behind them is held up for one deadline only. The
    /// chunks no compressor started go back to the pool once written, while the
    /// compressors' queue still holds their jobs; a compressor that gets to one skips it,
    /// and the frame of the one it had started is dropped when it comes at last.
    #[test]
    fn a_starved_compressor_holds_the_writer_up_for_one_deadline_only() {
        let pool = StagingPool::new(8 * 4096, 4096).unwrap();
        let (mut s, jobs) = queued(&pool, 4);
        let raw = job(&pool).take().unwrap();
        s.insert(0.0, 4, Done::Chunk(raw, Encoded::Raw));
        // One compressor got the first chunk, then starved.
        let started = jobs[0].start().expect("not taken yet");
        assert!(drain(&mut s, 0.0).is_empty());
        assert_eq!(s.late_in(0.0, |_| LATE), Some(LATE));
        assert!(
            drain(&mut s, LATE / 2.0).is_empty(),
            "waits while the chunk is not late"
        );
        assert_eq!(s.late_in(LATE / 2.0, |_| LATE), Some(LATE / 2.0));
        assert_eq!(
            drain(&mut s, LATE),
            ["late 0", "late 1", "late 2", "late 3", "item 4"],
            "the first chunk after its deadline, the unstarted ones and the raw one at once"
        );
        assert!(s.is_empty());
        assert_eq!(
            pool.fill(),
            1.0 / 8.0,
            "every segment back but the started chunk's, though the jobs are still queued"
        );
        assert!(
            jobs[1].start().is_none(),
            "a compressor skips a chunk the writer took"
        );
        s.insert(0.2, 0, Done::Chunk(started, Encoded::Raw));
        assert!(
            s.is_empty(),
            "a frame that comes after its chunk was taken is dropped"
        );
        assert_eq!(pool.fill(), 0.0);
    }

    /// After a late chunk, a chunk a compressor has started gets its own deadline, and one
    /// delivered in time ends the starved spell: the next unstarted chunk is waited for.
    #[test]
    fn a_chunk_delivered_in_time_ends_a_starved_spell() {
        let pool = StagingPool::new(8 * 4096, 4096).unwrap();
        let (mut s, jobs) = queued(&pool, 3);
        assert!(drain(&mut s, 0.0).is_empty());
        let second = jobs[1].start().unwrap();
        assert_eq!(
            drain(&mut s, LATE),
            ["late 0"],
            "the started one is not taken at once"
        );
        s.insert(LATE + 0.01, 1, Done::Chunk(second, Encoded::Raw));
        assert_eq!(drain(&mut s, LATE + 0.01), ["item 1"]);
        assert!(
            drain(&mut s, LATE + 0.02).is_empty(),
            "in time again: an unstarted chunk gets its deadline"
        );
        assert_eq!(drain(&mut s, 2.0 * LATE + 0.02), ["late 2"]);
    }
}
