//! The per-stream capture loop: copies a source's packets into staging segments, cuts
//! chunks and files, and never waits for anything downstream (a live source's packet
//! finds no free segment: it is dropped and counted).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use tapdeck_capture::{PacketSink, PacketSource, Poll, SourceCounters};
use tapdeck_decode::{headers_len, HeaderDepth};
use tapdeck_pcap::container::Codec;
use tapdeck_pcap::{Format, Interface, Packet};

use crate::controller::{Decision, Reason, SharedController};
use crate::error::CaptureError;
use crate::ladder::CodecLadder;
use crate::os::now_ns;
use crate::pipeline::{
    Chunk, CloseFile, Control, Done, Encoded, Job, OpenFile, Rotation, Sequenced, StreamStaging,
};
use crate::staging::{Segment, StagingPool};
use crate::stats::{CaptureCounts, StatsHub};

/// Classic pcap stores seconds in 32 bits.
const PCAP_TIME_LIMIT_NS: u64 = (u32::MAX as u64 + 1) * 1_000_000_000;
/// The longest a stop waits for packets a source may hold back (a ring block's timeout,
/// `--block-timeout-ms`), and the longest it then reads on a source that keeps delivering
/// (see `CaptureLoop::read_what_is_held`).
const STOP_HOLD: Duration = Duration::from_secs(2);
const STOP_DRAIN: Duration = Duration::from_millis(500);

/// What a capture loop is told: its stream, how to cut chunks and files, what to keep of
/// a packet.
pub struct CaptureConfig {
    pub stream: u32,
    pub format: Format,
    pub ladder: CodecLadder,
    pub rotation: Rotation,
    pub flush_interval: Duration,
    /// See `RecorderConfig::headers`.
    pub headers: Option<HeaderDepth>,
}

/// Where a capture loop's segments come from and its chunks go, and what it answers to.
pub struct CaptureLinks {
    pub staging: StreamStaging,
    pub to_compress: Sender<Sequenced<Arc<Job>>>,
    pub to_writer: Sender<Sequenced<Done>>,
    pub control: Arc<Control>,
    pub hub: Arc<StatsHub>,
}

/// The per-stream capture loop: copies packets into staging segments, cuts chunks and
/// files, and never waits for anything downstream.
pub struct CaptureLoop {
    stream: u32,
    format: Format,
    pool: Arc<StagingPool>,
    controller: Arc<SharedController>,
    to_compress: Sender<Sequenced<Arc<Job>>>,
    to_writer: Sender<Sequenced<Done>>,
    ladder: CodecLadder,
    seq: u64,
    rotation: Rotation,
    flush_interval: Duration,

    segment: Option<Segment>,
    seg_min_ts: u64,
    seg_max_ts: u64,
    seg_packets: u32,
    seg_per_iface: Vec<u32>,
    seg_started: Instant,
    /// Bytes of packets the full pool refused since the last chunk: the controller counts
    /// them as offered.
    dropped_bytes: u64,

    file_open: bool,
    file_first_ts: u64,
    file_bytes: u64,
    file_out_of_order: u64,
    boundary: u64,
    last_ts: u64,
    rotate_pending: bool,
    interfaces: Vec<Interface>,
    /// The interfaces' link types, shared by every chunk (for the flow index).
    linktypes: Arc<[u16]>,
    counts: Vec<CaptureCounts>,
    /// See `PacketSource::live`.
    live: bool,
    control: Arc<Control>,
    hub: Arc<StatsHub>,
    /// Packets whose captured length exceeded their original length (bad input).
    length_fixups: u64,
    /// A packet is timed beyond what classic pcap holds; stops the recording.
    beyond_pcap_time: bool,
    /// See `RecorderConfig::headers`.
    headers: Option<HeaderDepth>,
}

/// Which of the control's requests a capture loop has carried out.
struct ControlSeen {
    rotate: u64,
    reconfigured: u64,
    /// When the last rotation was asked for.
    asked_to_rotate: Instant,
}

impl CaptureLoop {
    pub fn new(cfg: CaptureConfig, links: CaptureLinks) -> CaptureLoop {
        CaptureLoop {
            stream: cfg.stream,
            format: cfg.format,
            pool: links.staging.pool,
            controller: links.staging.controller,
            to_compress: links.to_compress,
            to_writer: links.to_writer,
            ladder: cfg.ladder,
            seq: 0,
            rotation: cfg.rotation,
            flush_interval: cfg.flush_interval,
            segment: None,
            seg_min_ts: u64::MAX,
            seg_max_ts: 0,
            seg_packets: 0,
            seg_per_iface: Vec::new(),
            seg_started: Instant::now(),
            dropped_bytes: 0,
            file_open: false,
            file_first_ts: 0,
            file_bytes: 0,
            file_out_of_order: 0,
            boundary: u64::MAX,
            last_ts: 0,
            rotate_pending: false,
            interfaces: Vec::new(),
            linktypes: Arc::from(Vec::new()),
            counts: Vec::new(),
            live: true,
            control: links.control,
            hub: links.hub,
            length_fixups: 0,
            beyond_pcap_time: false,
            headers: cfg.headers,
        }
    }

    /// Records `source` until it ends, the recorder stops, or `deadline` passes; returns
    /// the interfaces it recorded.
    pub fn run<S: PacketSource>(
        mut self,
        mut source: S,
        deadline: Option<Instant>,
    ) -> Result<Vec<Interface>, CaptureError> {
        self.live = source.live();
        let result = self.capture(&mut source, deadline);
        // A file's last interfaces may be declared after its last packet.
        let result = result.and_then(|()| self.fits_format(&source));
        let counters = source.counters();
        self.publish(&counters);
        if self.file_open {
            self.close_file(&counters);
        }
        if self.length_fixups > 0 {
            tracing::warn!(
                "{} packets had more captured bytes than their original length; each was \
                 stored with its captured length as the original one",
                self.length_fixups
            );
        }
        result.map(|_| self.interfaces)
    }

    /// The loop proper: polls the source, carries out the control's requests, hands on
    /// chunks that waited long enough, publishes counters, cuts files on a quiet link.
    fn capture<S: PacketSource>(
        &mut self,
        source: &mut S,
        deadline: Option<Instant>,
    ) -> Result<(), CaptureError> {
        let mut seen = ControlSeen {
            rotate: self.control.rotate.load(Ordering::Relaxed),
            reconfigured: self.control.reconfigured.load(Ordering::Relaxed),
            asked_to_rotate: Instant::now(),
        };
        let mut last_publish = Instant::now();
        loop {
            // Before any packet: a file's header lists the interfaces its packets name.
            self.follow_interfaces(source)?;
            if self.control.stopping() || deadline.is_some_and(|d| Instant::now() >= d) {
                return self.read_what_is_held(source);
            }
            self.follow_control(&mut seen);
            let poll = source.poll(self);
            if self.beyond_pcap_time {
                return self.fits_format(source);
            }
            let now = Instant::now();
            if self.segment.as_ref().is_some_and(|s| !s.is_empty())
                && now - self.seg_started >= self.flush_interval
            {
                self.submit_segment();
            }
            if now - last_publish >= Duration::from_millis(100) {
                self.publish(&source.counters());
                last_publish = now;
            }
            match poll? {
                Poll::Delivered => {}
                Poll::Idle => self.when_idle(source, &seen),
                Poll::End => return Ok(()),
            }
        }
    }

    /// Takes up a rotation (SIGHUP) or new rotation limits (a reload) asked for since the
    /// last look.
    fn follow_control(&mut self, seen: &mut ControlSeen) {
        let gen = self.control.rotate.load(Ordering::Relaxed);
        if gen != seen.rotate {
            seen.rotate = gen;
            self.rotate_pending = self.file_open;
            seen.asked_to_rotate = Instant::now();
        }
        let gen = self.control.reconfigured.load(Ordering::Relaxed);
        if gen != seen.reconfigured {
            seen.reconfigured = gen;
            if let Some(rotation) = *self.control.rotation.lock().unwrap() {
                self.rotation = rotation;
                // The open file is cut by the new limits too.
                self.boundary = self.rotation.boundary_after(self.file_first_ts);
            }
        }
    }

    /// A quiet link still gets its files cut on time, and when asked to. A busy one
    /// rotates at its next packet (closing and opening at once); only a request no packet
    /// has come to carry out closes here, or a request arriving between this close and the
    /// next open would be lost.
    fn when_idle<S: PacketSource>(&mut self, source: &S, seen: &ControlSeen) {
        let quiet_rotation =
            self.rotate_pending && seen.asked_to_rotate.elapsed() >= Duration::from_millis(200);
        if self.live && self.file_open && (quiet_rotation || now_ns() >= self.boundary) {
            self.close_file(&source.counters());
        }
    }

    /// Takes the source's interfaces when it has more than this loop knows (at the start,
    /// and when a file declares one late).
    fn follow_interfaces<S: PacketSource>(&mut self, source: &S) -> Result<(), CaptureError> {
        if source.interfaces().len() == self.interfaces.len() {
            return Ok(());
        }
        let mut fresh = source.interfaces().to_vec();
        // Keep the snap lengths this loop raised (see `raise_snaplen`).
        for (new, old) in fresh.iter_mut().zip(&self.interfaces) {
            new.snaplen = old.snaplen;
        }
        self.interfaces = fresh;
        self.linktypes = self.interfaces.iter().map(|f| f.linktype).collect();
        self.fits_format(source)?;
        self.grow(self.interfaces.len());
        *self.hub.streams[self.stream as usize]
            .interface_names
            .lock()
            .unwrap() = self
            .interfaces
            .iter()
            .enumerate()
            .map(|(i, f)| f.name.clone().unwrap_or_else(|| i.to_string()))
            .collect();
        // A file's header lists its interfaces: new ones start a new file.
        self.rotate_pending = self.file_open;
        Ok(())
    }

    /// At a stop, what the source took before it is recorded, not lost uncounted: it is read
    /// on for as long as it may hold packets back (at most `STOP_HOLD`), and then until a
    /// poll finds nothing, for at most `STOP_DRAIN` more (a busy link never runs dry).
    fn read_what_is_held<S: PacketSource>(&mut self, source: &mut S) -> Result<(), CaptureError> {
        let Some(held) = source.buffers_unread() else {
            return Ok(());
        };
        let held = held.min(STOP_HOLD);
        let stopped = Instant::now();
        loop {
            self.follow_interfaces(source)?;
            let poll = source.poll(self);
            if self.beyond_pcap_time {
                return self.fits_format(source);
            }
            let elapsed = stopped.elapsed();
            match poll? {
                Poll::Delivered if elapsed < held + STOP_DRAIN => {}
                Poll::Idle if elapsed < held => {}
                _ => return Ok(()),
            }
        }
    }

    /// Classic pcap holds one interface and times before 2106: say so as soon as a source
    /// goes beyond.
    fn fits_format<S: PacketSource>(&self, source: &S) -> Result<(), CaptureError> {
        if self.beyond_pcap_time {
            return Err(CaptureError::PcapTimeLimit);
        }
        let n = source.interfaces().len();
        if self.format == Format::Pcap && n > 1 {
            return Err(CaptureError::PcapOneInterface {
                described: source.describe(),
                interfaces: n,
            });
        }
        Ok(())
    }

    fn grow(&mut self, n: usize) {
        if self.counts.len() < n {
            self.counts.resize(n, CaptureCounts::default());
            self.seg_per_iface.resize(n, 0);
        }
    }

    fn apply_source_counters(&mut self, counters: &[SourceCounters]) {
        self.grow(counters.len());
        for (c, s) in self.counts.iter_mut().zip(counters) {
            c.seen = s.seen;
            c.dropped_kernel = s.dropped;
        }
        self.raise_seen();
    }

    /// A socket's counters are read periodically and may lag what was delivered since;
    /// the source saw at least what it delivered plus what it dropped.
    fn raise_seen(&mut self) {
        for c in &mut self.counts {
            c.seen = c.seen.max(c.received + c.dropped_kernel);
        }
    }

    fn publish(&mut self, counters: &[SourceCounters]) {
        self.apply_source_counters(counters);
        self.publish_counts();
    }

    /// Publishes this loop's counters (the source's own are read less often).
    fn publish_counts(&mut self) {
        self.raise_seen();
        self.hub.streams[self.stream as usize]
            .progress_ns
            .store(now_ns(), Ordering::Relaxed);
        *self.hub.streams[self.stream as usize]
            .capture
            .lock()
            .unwrap() = self.counts.clone();
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    /// Hands an item to the writer directly. Writers outlive capture loops, so this only
    /// fails if a writer died, and then the item is lost either way.
    fn send_to_writer(&mut self, item: Done) {
        let seq = self.next_seq();
        let _ = self.to_writer.send(Sequenced {
            stream: self.stream,
            seq,
            item,
        });
    }

    fn submit_segment(&mut self) {
        let Some(segment) = self.segment.take() else {
            return;
        };
        if segment.is_empty() {
            return;
        }
        // Publish first, so no stats record ever shows a packet stored before received.
        self.publish_counts();
        let per_iface = std::mem::replace(&mut self.seg_per_iface, vec![0; self.counts.len()]);
        // When the controller calls for a raw copy, the compressors are skipped altogether:
        // at idle priority they may be the very thing that is behind.
        let decision = if self.live {
            self.controller.decide(
                (
                    segment.data().len(),
                    std::mem::take(&mut self.dropped_bytes),
                ),
                self.pool.fill(),
                self.pool.awaiting_compression(),
            )
        } else {
            Decision {
                codec: self.ladder.strongest(),
                reason: Reason::SourceWaits,
            }
        };
        let chunk = Chunk {
            segment: Arc::new(segment),
            min_ts_ns: self.seg_min_ts,
            max_ts_ns: self.seg_max_ts,
            packets: self.seg_packets,
            per_iface,
            source_waits: !self.live,
            decision,
            linktypes: Arc::clone(&self.linktypes),
            flows: Default::default(),
        };
        if decision.codec == Codec::Raw {
            self.send_to_writer(Done::Chunk(chunk, Encoded::Raw));
        } else {
            // The writer's ticket goes first, so that it is there before any frame of it.
            let seq = self.next_seq();
            let job = Job::new(chunk);
            let _ = self.to_writer.send(Sequenced {
                stream: self.stream,
                seq,
                item: Done::Queued(Arc::clone(&job)),
            });
            self.pool.note_compression(true);
            let _ = self.to_compress.send(Sequenced {
                stream: self.stream,
                seq,
                item: job,
            });
        }
        self.seg_min_ts = u64::MAX;
        self.seg_max_ts = 0;
        self.seg_packets = 0;
    }

    fn close_file(&mut self, counters: &[SourceCounters]) {
        self.submit_segment();
        self.apply_source_counters(counters);
        let close = CloseFile {
            capture: self.counts.clone(),
            out_of_order: self.file_out_of_order,
        };
        self.send_to_writer(Done::Close(close));
        self.file_open = false;
    }

    fn open_file(&mut self, first_ts: u64) {
        self.send_to_writer(Done::Open(OpenFile {
            first_ts_ns: first_ts,
            interfaces: self.interfaces.clone(),
        }));
        self.file_open = true;
        self.file_first_ts = first_ts;
        self.file_bytes = 0;
        self.file_out_of_order = 0;
        self.rotate_pending = false;
        self.boundary = self.rotation.boundary_after(first_ts);
        self.last_ts = first_ts;
    }

    /// For a source that can wait: block until the writers free a segment, unless the
    /// recorder is stopping or a writer failed (then the packet is dropped and counted).
    #[cold]
    fn wait_for_segment(&self) -> Option<Segment> {
        loop {
            if let Some(s) = self.pool.take_waiting(Duration::from_millis(100)) {
                return Some(s);
            }
            if self.control.stopping() {
                return None;
            }
        }
    }

    /// Closes the current file (its last segment is already submitted); the packet being
    /// staged opens the next one.
    #[cold]
    fn close_for_rotation(&mut self) {
        // Counters in the statistics block are as of the last publish; exact at the end.
        let counters: Vec<SourceCounters> = self
            .counts
            .iter()
            .map(|c| SourceCounters {
                seen: c.seen,
                dropped: c.dropped_kernel,
                freezes: 0,
            })
            .collect();
        self.close_file(&counters);
    }

    #[cold]
    fn note_length_fixup(&mut self, caplen: usize, orig_len: u32) {
        self.length_fixups += 1;
        if self.length_fixups == 1 {
            tracing::warn!(
                "a packet has {caplen} captured bytes but an original length of {orig_len}; \
                 storing {caplen} as its original length (counted at the end)"
            );
        }
    }

    /// How many of the packet's bytes to stage: all, or up to where header-only capture
    /// cuts it.
    #[inline]
    fn kept_len(&self, p: &Packet<'_>) -> usize {
        match (self.headers, self.interfaces.get(p.iface as usize)) {
            (Some(depth), Some(f)) => headers_len(u32::from(f.linktype), p.data, depth),
            _ => p.data.len(),
        }
    }

    /// A packet longer than its interface's snap length (a malformed input file): declare
    /// a snap length that covers it, in a new file, rather than store a file that breaks
    /// its own header.
    #[cold]
    fn raise_snaplen(&mut self, iface: usize, caplen: usize) {
        let snaplen = (caplen as u32).max(262_144);
        tracing::warn!(
            "interface {iface} declares snap length {} but a packet has {caplen} bytes; \
             files from here on declare {snaplen}",
            self.interfaces[iface].snaplen
        );
        self.interfaces[iface].snaplen = snaplen;
        self.rotate_pending = self.file_open;
    }
}

impl PacketSink for CaptureLoop {
    fn backlog(&self) -> tapdeck_capture::Backlog {
        tapdeck_capture::Backlog {
            fill: self.pool.fill(),
            drained_bytes: self.pool.drained_bytes(),
        }
    }

    #[inline]
    fn packet(&mut self, p: &Packet<'_>) {
        let i = p.iface as usize;
        if i >= self.counts.len() {
            self.grow(i + 1);
        }
        self.counts[i].received += 1;
        let captured = p.data.len();
        if self.format == Format::Pcap && p.ts_ns >= PCAP_TIME_LIMIT_NS {
            self.counts[i].received -= 1;
            self.beyond_pcap_time = true;
            return;
        }
        // The cut comes first, so staging, compression and the disk see only kept bytes.
        let caplen = self.kept_len(p);
        if self
            .interfaces
            .get(i)
            .is_some_and(|f| f.snaplen != 0 && caplen > f.snaplen as usize)
        {
            self.raise_snaplen(i, caplen);
        }
        let mut fixed;
        let p = if caplen < captured || captured as u64 > u64::from(p.orig_len) {
            fixed = *p;
            if captured as u64 > u64::from(p.orig_len) {
                // A packet cannot have been shorter on the wire than what was captured of
                // it (bad input); store the captured length as the original one, and say so.
                self.note_length_fixup(captured, p.orig_len);
                fixed.orig_len = captured as u32;
            }
            fixed.data = &p.data[..caplen];
            &fixed
        } else {
            p
        };
        let len = self.format.record_len(p);
        let rotate = self.file_open
            && (self.rotate_pending
                || p.ts_ns >= self.boundary
                || self
                    .rotation
                    .max_bytes
                    .is_some_and(|max| self.file_bytes > 0 && self.file_bytes + len as u64 > max));
        if rotate || self.segment.as_ref().is_none_or(|s| s.room() < len) {
            self.submit_segment();
            // A cheap look before the free list, which is costly to poll per packet.
            let taken = if self.pool.has_free() {
                self.pool.try_take()
            } else if !self.live {
                self.wait_for_segment()
            } else {
                None
            };
            let Some(segment) = taken.filter(|s| s.room() >= len) else {
                // The current file stays open, so its statistics block counts this drop.
                self.counts[i].dropped_staging_full += 1;
                self.dropped_bytes += len as u64;
                return;
            };
            if rotate {
                // Only now that the packet has a place: a file is always named after a
                // packet it holds.
                self.close_for_rotation();
            }
            self.segment = Some(segment);
            self.seg_started = Instant::now();
        }
        if !self.file_open {
            self.open_file(p.ts_ns);
        }
        let segment = self.segment.as_mut().expect("segment taken above");
        let n = self.format.write_record(p, segment.spare_mut());
        segment.advance(n);
        self.seg_packets += 1;
        self.seg_per_iface[i] += 1;
        self.seg_min_ts = self.seg_min_ts.min(p.ts_ns);
        self.seg_max_ts = self.seg_max_ts.max(p.ts_ns);
        if p.ts_ns < self.last_ts {
            self.file_out_of_order += 1;
        }
        self.last_ts = p.ts_ns;
        self.file_bytes += n as u64;
        let c = &mut self.counts[i];
        c.staged_bytes += n as u64;
        c.captured_bytes += captured as u64;
        c.kept_bytes += caplen as u64;
        c.wire_bytes += u64::from(p.orig_len);
    }
}
