//! The ladder controller: per chunk, which rung of the codec ladder — or a raw copy — keeps
//! the staging pool from filling, knowing both limits the backlog alone cannot tell apart:
//! how fast the compressors go at each rung, and how fast the disk takes bytes.
//!
//! It is fed measurements (each compressed chunk: rung, bytes in and out, CPU and wall
//! seconds; each written chunk: bytes and seconds in the write) and, per chunk, the time, the
//! bytes dropped since the last chunk because the pool was full, the pool's fill and how many
//! chunks wait for a compressor. From these it keeps decaying averages of the offered rate
//! (dropped bytes included: a full pool takes in only what leaves it, and judged by its
//! intake an overload looks like a load the compressors keep up with), each rung's speed per
//! CPU second and ratio, the compressors' share of the CPU, the disk's speed (bytes over busy
//! time, not counting its first bytes: see `DISK_WARM_BYTES`) and how busy it is, the bytes
//! recently sent to it (a chunk a compressor turns raw included), and the pool's trend. The
//! decision, in order:
//!
//! 1. *Plan*: for each rung, predict what the disk would get if the compressors took what they
//!    can at that rung and the rest went raw. Of the rungs that keep up with the offered rate
//!    (with a margin) the one that writes the fewest bytes wins; if none keeps up, the one that
//!    stores the most. Raw is a rung too (infinitely fast, ratio 1).
//! 2. *Probe*: a rung not measured for `PROBE_EVERY` (longer for a slow rung, so that probes
//!    cost at most `PROBE_SHARE` of a compressor) gets one chunk, so that its estimate
//!    follows the traffic, under load too. A rung's first chunk on each compressor is not
//!    timed: it builds the codec's context and buffers, and took 3–4 times a warm chunk's
//!    time on our machines; nor is a chunk that took a page fault (the recorder tells), which
//!    measured the kernel. A rung with no timed chunk yet is probed again at once, and
//!    meanwhile guessed at its prior speed scaled as the timed rungs compare with theirs.
//! 3. *Compressors behind* (more chunks queued than they can start, the pool projected full
//!    within a horizon at its trend or half full, or the backlog ladder at its raw rung): raw
//!    when raw helps (no rung's compressors take the offered rate, or the pool is half full
//!    anyway) and the disk has headroom (measured, busy less than `DISK_BUSY_MAX` of the
//!    time, the bytes recently sent its way below that share of its speed, and room left
//!    there beside what the compressors write at the burst's rung, at the offered rate over
//!    `TAU_FAST` too) — at once, not only when the pool is nearly full; otherwise the chunk
//!    queues for a compressor, at the rung that stores the most of the burst (its
//!    compressors keeping the margin), or a mix of two where the stronger alone leaves the
//!    disk idle and the weaker alone the compressors, and the pool absorbs it (raw would
//!    only flood a disk that is already the limit). The compressor that takes the chunk
//!    chooses its rung again, on what is known by then, dealing a mix's shares in turn.
//! 4. Otherwise the planned rung, but never stronger than the backlog ladder allows (its
//!    thresholds, `zstd:1@0.5`, still cap the rung, as before the controller).
//!
//! `LadderController` is a pure function of what it is fed, times included: tests drive it
//! with a simulated clock, pool, compressors and disk. `SharedController` puts it on the
//! recorder's clock behind a mutex, locked once per chunk by each thread that feeds it.

use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;
use tapdeck_pcap::container::Codec;

use crate::ladder::CodecLadder;

/// Time constant of the decaying averages, seconds.
const TAU: f64 = 0.5;
/// The offered rate as raw copies must judge it: a burst must stop them within a few tens
/// of milliseconds, not the half second the plan smooths over.
const TAU_FAST: f64 = 0.02;
/// The plan must keep up with the offered rate plus this fraction.
const MARGIN: f64 = 0.1;
/// Chunks queued per compressor beyond which the compressors are behind.
const QUEUE_PER_COMPRESSOR: usize = 2;
/// The disk has headroom while it is busy less than this fraction of the time.
pub const DISK_BUSY_MAX: f64 = 0.8;
/// The disk's first bytes are not measured: until the writer's buffer (9 MiB by default)
/// first goes to the disk, a write is a copy to memory, timed at 10 GB/s.
const DISK_WARM_BYTES: u64 = 16 << 20;
/// The disk's speed is bytes over busy time, both decaying over this much busy time: a
/// mean over time, not over writes, so that writes a cache took at once (a throttle's
/// credit after every idle spell) count for the little time they took.
const DISK_TAU_BUSY: f64 = 0.5;
/// Compressors are behind when the pool, at its trend, would be full within this...
const HORIZON_S: f64 = 1.0;
/// ...or when it is this full: the writer takes chunks in order, so raw chunks wait behind
/// the compressed ones, and a starved compressor holds the whole pool up.
const BEHIND_FILL: f64 = 0.5;
/// Burst options that store within this fraction of the most are as good: the estimates
/// cannot tell them apart (zstd:3 writes 0.4 % fewer bytes than zstd:1 on our synthetic mix,
/// the disk's measured speed moves by 10 %, a rung's speed is believed at its fastest), and
/// of those the one that costs the compressors the least time wins. A 13 % share of zstd:3
/// chunks, for 0.05 % more stored on paper, would have left a compressor whose zstd:1 was
/// measured at its fastest 17 % short of feeding the disk.
const BURST_TIE: f64 = 0.005;
/// A rung not measured for this long gets a chunk (seconds)...
const PROBE_EVERY: f64 = 2.0;
/// ...or for longer, so that probing a slow rung costs at most this share of a compressor.
const PROBE_SHARE: f64 = 0.01;
/// A rung timed on fewer chunks than this is young: probed again after `PROBE_YOUNG`
/// seconds. A recorder's first chunks run on memory the machine has not touched yet (in a VM
/// the host backs each page on first touch), and were timed at a third of the speed of the
/// same rung a second later.
const WARM_SAMPLES: u32 = 4;
const PROBE_YOUNG: f64 = 0.25;
/// While the pool is this full, only young rungs are probed: a probe of a weaker rung then
/// costs disk bytes, of a slower one compressor time, and both cost packets.
const PROBE_BELOW_FILL: f64 = 0.9;

/// The writer, with nothing else to write, stores a chunk raw itself once it has waited this
/// many times the chunk's compression on a CPU of its own for it...
const LATE_FACTOR: f64 = 4.0;
/// ...and never sooner than this (seconds): a scheduler tick or two.
const LATE_MIN: f64 = 0.005;
/// The least share of a CPU the compressors are believed to get. Two busy loops at nice 0
/// leave a compressor at nice 19 about 1.5 % of a CPU (weights 15 against 2 × 1024).
const MIN_CPU_SHARE: f64 = 0.01;

/// Why a chunk took its rung: the columns of the per-rung stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The rung the plan picked (the fewest bytes that keeps up).
    Plan,
    /// The backlog ladder's threshold capped the plan.
    Backlog,
    /// Compressors behind, disk with headroom: raw.
    DiskHeadroom,
    /// Compressors behind, disk busy: queued for a compressor, the pool absorbs it.
    Burst,
    /// Measuring a rung not used lately.
    Probe,
    /// The source waits for the recorder (a file): strongest rung.
    SourceWaits,
    /// A codec failed on the chunk; stored raw.
    Fallback,
    /// Benchmarks only: the one rung every chunk takes (`--bench-fixed-codec`).
    Fixed,
    /// Its compression missed its deadline: the writer stored it raw rather than idle.
    Late,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Plan => "plan",
            Reason::Backlog => "backlog",
            Reason::DiskHeadroom => "disk_headroom",
            Reason::Burst => "burst",
            Reason::Probe => "probe",
            Reason::SourceWaits => "source_waits",
            Reason::Fallback => "fallback",
            Reason::Fixed => "fixed",
            Reason::Late => "late",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub codec: Codec,
    pub reason: Reason,
}

/// An amount per second, decaying over about `TAU`: a rate that forgets smoothly. While
/// its first amount is younger than a few `TAU` the sum is divided by the shorter window it
/// covers, so a young rate is not underestimated (a raw flood at the start went to a slow
/// disk while the bytes sent to it still looked few). The window counts from the first
/// amount, not the controller's start: a recorder may take most of a second to lock its
/// staging pool before the first packet.
#[derive(Debug, Clone, Copy)]
struct DecayingRate {
    sum: f64,
    last: f64,
    first: Option<f64>,
    tau: f64,
}

impl Default for DecayingRate {
    fn default() -> Self {
        DecayingRate::with_tau(TAU)
    }
}

impl DecayingRate {
    fn with_tau(tau: f64) -> Self {
        DecayingRate {
            sum: 0.0,
            last: 0.0,
            first: None,
            tau,
        }
    }

    fn add(&mut self, now: f64, amount: f64) {
        self.sum = self.sum * (-(now - self.last).max(0.0) / self.tau).exp() + amount;
        self.last = self.last.max(now);
        self.first.get_or_insert(now);
    }

    fn at(&self, now: f64) -> f64 {
        let age = self.first.map_or(0.0, |t| now - t).max(0.01);
        let window = self.tau * (1.0 - (-age / self.tau).exp());
        self.sum * (-(now - self.last).max(0.0) / self.tau).exp() / window
    }
}

/// A smoothed estimate, `None` until first measured.
#[derive(Debug, Clone, Copy, Default)]
struct Estimate(Option<f64>);

impl Estimate {
    fn update(&mut self, x: f64) {
        self.0 = Some(match self.0 {
            Some(v) => v + 0.3 * (x - v),
            None => x,
        });
    }

    /// For a speed that interference only ever makes look slower: a compressor's CPU time
    /// per chunk grows with a cold context, page faults, cache misses and, in a VM, the
    /// time the host took the CPU away. A faster measurement is believed at once, a slower
    /// one only slowly: a chunk measured at a quarter of the rung's speed (seen on our
    /// machines) must not condemn the rung until its next probe.
    fn update_speed(&mut self, x: f64) {
        self.0 = Some(match self.0 {
            Some(v) if x > v => x,
            Some(v) => v + 0.1 * (x - v),
            None => x,
        });
    }
}

#[derive(Debug, Clone)]
struct Rung {
    codec: Codec,
    /// Bytes in per second of one compressor's time.
    speed: Estimate,
    prior_speed: f64,
    /// Bytes out per byte in.
    ratio: Estimate,
    /// When last measured, or last sent a probe.
    seen_at: Option<f64>,
    /// Chunks timed so far.
    timed: u32,
}

impl Rung {
    fn speed(&self) -> f64 {
        self.speed.0.unwrap_or(self.prior_speed)
    }

    fn ratio(&self) -> f64 {
        self.ratio.0.unwrap_or(0.5)
    }

    /// Whether a chunk of `bytes` at `now`, the pool `fill` full, should measure this rung:
    /// never sent one; young and not for `PROBE_YOUNG`; or, the pool not nearly full, not
    /// for `PROBE_EVERY` and for long enough that the chunk costs a compressor at most
    /// `PROBE_SHARE` of the time since.
    fn probe_due(&self, now: f64, bytes: usize, fill: f64) -> bool {
        let interval = if self.timed < WARM_SAMPLES {
            PROBE_YOUNG
        } else if fill < PROBE_BELOW_FILL {
            PROBE_EVERY.max(bytes as f64 / self.speed() / PROBE_SHARE)
        } else {
            return false;
        };
        self.seen_at.is_none_or(|t| now - t > interval)
    }
}

/// A guess until measured; per core, roughly as on our reference machine.
fn prior_speed(codec: Codec) -> f64 {
    match codec {
        Codec::Raw => f64::INFINITY,
        Codec::Lz4 => 500e6,
        Codec::Zstd(l) if l <= 1 => 400e6,
        Codec::Zstd(l) => 400e6 / f64::from(l.max(2) - 1),
    }
}

/// What the controller believes now, for the stats stream.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ControllerView {
    pub offered_bytes_per_s: f64,
    /// Bytes per second of write time; null until measured.
    pub disk_bytes_per_s: Option<f64>,
    /// Fraction of the time the writer spent writing.
    pub disk_busy: f64,
    /// Change of the pool's fill per second.
    pub fill_trend_per_s: f64,
    /// The fraction of the time compressors got a CPU while working; null until measured.
    pub compressor_cpu_share: Option<f64>,
    /// The planned rung.
    pub plan: String,
    /// Per rung: bytes in per CPU second of one compressor, and out/in.
    pub rungs: Vec<RungView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RungView {
    pub codec: String,
    pub bytes_per_s: Option<f64>,
    pub ratio: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct LadderController {
    ladder: CodecLadder,
    /// The compressing rungs, strongest first (raw is implicit).
    rungs: Vec<Rung>,
    compressors: usize,
    /// The fraction of the time a compressor gets a CPU while it works.
    cpu_share: Estimate,
    pool_segments: usize,
    offered: DecayingRate,
    offered_fast: DecayingRate,
    /// Bytes written so far, up to `DISK_WARM_BYTES`.
    disk_warm: u64,
    /// Bytes written and seconds spent writing them, decaying over `DISK_TAU_BUSY` of
    /// busy time.
    disk_bytes: f64,
    disk_seconds: f64,
    disk_busy: DecayingRate,
    /// Bytes per second the decisions sent towards the disk (raw, or compressed as
    /// estimated).
    committed: DecayingRate,
    fill: f64,
    fill_at: Option<f64>,
    trend: f64,
    /// Benchmarks only: every chunk takes this codec, whatever the load.
    fixed: Option<Codec>,
    /// The error diffusion of a mixed burst's rungs (`next_burst_rung`), in -0.5..0.5.
    burst_credit: f64,
}

impl LadderController {
    pub fn new(ladder: CodecLadder, compressors: usize, pool_segments: usize) -> Self {
        let rungs = ladder
            .rungs()
            .filter(|c| *c != Codec::Raw)
            .map(|codec| Rung {
                codec,
                speed: Estimate::default(),
                prior_speed: prior_speed(codec),
                ratio: Estimate::default(),
                seen_at: None,
                timed: 0,
            })
            .collect();
        LadderController {
            ladder,
            rungs,
            compressors: compressors.max(1),
            cpu_share: Estimate::default(),
            pool_segments: pool_segments.max(1),
            offered: DecayingRate::default(),
            offered_fast: DecayingRate::with_tau(TAU_FAST),
            disk_warm: 0,
            disk_bytes: 0.0,
            disk_seconds: 0.0,
            disk_busy: DecayingRate::default(),
            committed: DecayingRate::default(),
            fill: 0.0,
            fill_at: None,
            trend: 0.0,
            fixed: None,
            burst_credit: 0.0,
        }
    }

    /// With `on`, every chunk takes the ladder's first rung and nothing else: no plan, no
    /// raw copies, no backlog caps. What the benchmark compares the controller with.
    pub fn fixed(mut self, on: bool) -> Self {
        self.fixed = on.then(|| self.ladder.strongest());
        self
    }

    /// A compressor finished a chunk: `bytes_in` became `bytes_out` in `cpu` seconds of its
    /// CPU time, `wall` seconds after it started. A rung's speed is per CPU second, so a probe
    /// that ran while the compressors were starved does not condemn the rung; how much of
    /// the time they get a CPU is kept apart, for all rungs.
    pub fn compressed(
        &mut self,
        now: f64,
        codec: Codec,
        (bytes_in, bytes_out): (usize, usize),
        cpu: f64,
        wall: f64,
    ) {
        if let Some(r) = self.rung_mut(codec) {
            if bytes_in > 0 && cpu > 0.0 {
                r.speed.update_speed(bytes_in as f64 / cpu);
                r.ratio.update(bytes_out as f64 / bytes_in as f64);
                r.timed += 1;
            }
            r.seen_at = Some(now);
        }
        if wall > 0.0 {
            self.cpu_share
                .update((cpu / wall).clamp(MIN_CPU_SHARE, 1.0));
        }
    }

    /// How long the writer, with nothing else to write, waits at `now` for a chunk of
    /// `bytes` sent to the compressors at `codec` before it stores the chunk raw itself. It
    /// waits `LATE_FACTOR` times the chunk's compression on a CPU of its own (not at the
    /// compressors' believed share, which a late chunk lowers: the wait would grow as they
    /// starve); longer while the pool has room for a quarter of the time it would take to
    /// fill at the offered rate (a wait then costs no packet, and a raw copy costs bytes);
    /// and at least as long as the disk takes to write the chunk raw (where the disk is the
    /// limit, a raw copy does not help). Never, for a fixed codec (benchmarks).
    pub fn late_after(&self, now: f64, bytes: usize, codec: Codec) -> f64 {
        let Some(rung) = self
            .fixed
            .is_none()
            .then(|| self.rung_index(codec))
            .flatten()
        else {
            return f64::INFINITY;
        };
        let expected = bytes as f64 / self.speed(&self.rungs[rung]);
        let room = (1.0 - self.fill).max(0.0) * (self.pool_segments * bytes) as f64;
        let until_full = room / self.offered_now(now).max(1.0);
        let raw_write = self.disk_speed().map_or(0.0, |s| bytes as f64 / s);
        (LATE_FACTOR * expected)
            .max(until_full / 4.0)
            .max(raw_write)
            .max(LATE_MIN)
    }

    /// The writer stored a chunk of `bytes` sent to the compressors at `codec` raw, after
    /// waiting `waited` seconds for it. A starved compressor measures nothing until it
    /// finishes, so the wait is what tells that the compressors get less CPU than
    /// believed: their share drops to what the wait shows at most, and the plan sends
    /// chunks raw before they queue for them.
    pub fn taken_late(&mut self, codec: Codec, bytes: usize, waited: f64) {
        let Some(rung) = self.rung_index(codec) else {
            return;
        };
        let cpu = bytes as f64 / self.speed(&self.rungs[rung]);
        let share = (cpu / waited.max(1e-9)).clamp(MIN_CPU_SHARE, 1.0);
        if self.cpu_share.0.is_none_or(|s| share < s) {
            self.cpu_share.update(share);
        }
    }

    /// A chunk at `codec` not timed (a compressor's first at it, or one that took a page
    /// fault; see the module comment): only its ratio counts. A rung with no timed chunk yet is probed again at the next chunk.
    pub fn compressed_cold(&mut self, codec: Codec, (bytes_in, bytes_out): (usize, usize)) {
        if let Some(r) = self.rung_mut(codec) {
            if bytes_in > 0 {
                r.ratio.update(bytes_out as f64 / bytes_in as f64);
            }
            if r.speed.0.is_none() {
                r.seen_at = None;
            }
        }
    }

    /// The writer spent `seconds` writing `bytes` (see `DISK_WARM_BYTES`, `DISK_TAU_BUSY`).
    pub fn written(&mut self, now: f64, bytes: usize, seconds: f64) {
        self.disk_busy.add(now, seconds);
        if self.disk_warm < DISK_WARM_BYTES {
            self.disk_warm += bytes as u64;
            return;
        }
        if bytes > 0 {
            // A disk that took no time (--discard) is as fast as a megabyte a microsecond.
            let seconds = seconds.max(1e-6 * bytes as f64 / 1e6);
            let keep = (-seconds / DISK_TAU_BUSY).exp();
            self.disk_bytes = self.disk_bytes * keep + bytes as f64;
            self.disk_seconds = self.disk_seconds * keep + seconds;
        }
    }

    /// The disk's speed, `None` until measured.
    fn disk_speed(&self) -> Option<f64> {
        (self.disk_seconds > 0.0).then(|| self.disk_bytes / self.disk_seconds)
    }

    /// The pool's fill (0..=1) at `now`; also given with each decision.
    pub fn observe_fill(&mut self, now: f64, fill: f64) {
        if let Some(t) = self.fill_at {
            let dt = now - t;
            if dt > 0.0 {
                let a = (dt / TAU).min(1.0);
                self.trend += a * ((fill - self.fill) / dt - self.trend);
            } else {
                return;
            }
        }
        self.fill = fill;
        self.fill_at = Some(now);
    }

    /// The codec for a chunk of `bytes` submitted at `now`, `dropped` bytes having been
    /// refused by the full pool since the last chunk, with the pool `fill` full and `queued`
    /// chunks (this one not included) waiting for or in a compressor.
    pub fn decide(
        &mut self,
        now: f64,
        (bytes, dropped): (usize, u64),
        fill: f64,
        queued: usize,
    ) -> Decision {
        let d = match self.fixed {
            Some(codec) => Decision {
                codec,
                reason: Reason::Fixed,
            },
            None => {
                let offered = bytes as f64 + dropped as f64;
                self.offered.add(now, offered);
                self.offered_fast.add(now, offered);
                self.observe_fill(now, fill);
                self.choose(now, bytes, fill, queued)
            }
        };
        self.commit(now, bytes, d)
    }

    fn choose(&mut self, now: f64, bytes: usize, fill: f64, queued: usize) -> Decision {
        let backlog = queued as f64 / self.pool_segments as f64;
        let capped = self.ladder.choose(backlog);
        let plan = self.plan(now);
        let Some(plan_codec) = plan.map(|i| self.rungs[i].codec) else {
            return Decision {
                codec: Codec::Raw,
                reason: Reason::Plan,
            };
        };
        // Probes go on under load too: estimates must follow the traffic (a rung measured
        // once while the compressors were starved, or on cold memory, must not stay
        // condemned), and a probe costs at most `PROBE_SHARE` of a compressor.
        if let Some(r) = self
            .rungs
            .iter_mut()
            .find(|r| r.probe_due(now, bytes, fill))
        {
            r.seen_at = Some(now);
            if r.codec != plan_codec {
                return Decision {
                    codec: r.codec,
                    reason: Reason::Probe,
                };
            }
        }
        let filling_soon = self.trend > 0.0 && (1.0 - fill) / self.trend < HORIZON_S;
        let behind = queued >= QUEUE_PER_COMPRESSOR * self.compressors
            || filling_soon
            || fill >= BEHIND_FILL
            || capped == Codec::Raw;
        if behind {
            // Raw when the compressors cannot take the offered rate, or the pool fills
            // whatever they are thought to manage; not for a queue that the compressors,
            // keeping up, will work off (a burst's first chunks, with the disk still idle).
            let raw_helps = fill >= BEHIND_FILL || !self.compressors_keep_up(now);
            if raw_helps && self.disk_has_headroom(now) {
                return Decision {
                    codec: Codec::Raw,
                    reason: Reason::DiskHeadroom,
                };
            }
            // The pool absorbs the burst at the rung that stores the most of it now (not
            // of the quiet spell before it), with no raw copies to spill into. No backlog
            // cap: that rung already weighs the compressors' speed, and when the disk holds
            // the chunks up they queue for the compressors too, which the cap would take
            // for slow compressors and answer with a cheaper rung that writes more.
            return self.burst(now);
        }
        let codec = self.cheaper(plan_codec, capped, false);
        Decision {
            codec,
            reason: if codec == plan_codec {
                Reason::Plan
            } else {
                Reason::Backlog
            },
        }
    }

    /// A burst chunk as submitted: the rung with the larger share of `plan_burst` at the
    /// offered rate of now. The compressor that takes it deals the rung (`next_burst_rung`).
    fn burst(&self, now: f64) -> Decision {
        Decision {
            codec: self.rungs[self.plan_burst(self.offered_now(now)).major()].codec,
            reason: Reason::Burst,
        }
    }

    /// A compressor takes a chunk `planned` at submission; the backlog may have grown while it
    /// waited, so the backlog ladder caps it again. Its raw rung, or a pool more than half
    /// full, sends the chunk raw, but only while the disk has headroom: a raw copy to a disk
    /// that is the limit would only slow the drain. A burst's rung is chosen again, on what
    /// is known now: a full pool keeps chunks a few hundred milliseconds before a compressor
    /// takes them, and the first of a recording were decided on the first writes' speed,
    /// half the disk's.
    ///
    /// What the chunk of `bytes` now sends to the disk is counted, as at submission: a
    /// raw copy made here costs no compressor time, so compressors taking a full pool turn
    /// every queued chunk raw in an instant unless each one counts at once (the disk's busy
    /// time only shows them once written).
    pub fn at_compressor(
        &mut self,
        now: f64,
        planned: Decision,
        bytes: usize,
        backlog: f64,
        fill: f64,
    ) -> Decision {
        let d = self.rechoose(now, planned, backlog, fill);
        if d.codec != planned.codec {
            let more = bytes as f64 * (self.ratio(d.codec) - self.ratio(planned.codec));
            self.committed.add(now, more);
        }
        d
    }

    fn rechoose(&mut self, now: f64, planned: Decision, backlog: f64, fill: f64) -> Decision {
        if self.fixed.is_some() {
            return planned;
        }
        let capped = self.ladder.choose(backlog);
        let raw_rung = capped == Codec::Raw || fill >= BEHIND_FILL;
        if raw_rung && self.disk_has_headroom(now) {
            return Decision {
                codec: Codec::Raw,
                reason: Reason::DiskHeadroom,
            };
        }
        let planned = match planned.reason {
            Reason::Burst => {
                let i = self.next_burst_rung(now);
                Decision {
                    codec: self.rungs[i].codec,
                    reason: Reason::Burst,
                }
            }
            _ => planned,
        };
        if raw_rung {
            return planned;
        }
        let codec = self.cap_unless_disk_bound(now, planned.codec, capped);
        if codec == planned.codec {
            planned
        } else {
            Decision {
                codec,
                reason: Reason::Backlog,
            }
        }
    }

    /// Where `codec` is among the compressing rungs (`None` for raw).
    fn rung_index(&self, codec: Codec) -> Option<usize> {
        self.rungs.iter().position(|r| r.codec == codec)
    }

    fn rung_mut(&mut self, codec: Codec) -> Option<&mut Rung> {
        self.rung_index(codec).map(|i| &mut self.rungs[i])
    }

    /// The cheaper (later) of the plan's rung and the backlog ladder's; with `compress`,
    /// never raw.
    fn cheaper(&self, plan: Codec, capped: Codec, compress: bool) -> Codec {
        let index = |c: Codec| self.rung_index(c);
        match (index(plan), index(capped)) {
            (Some(p), Some(c)) => self.rungs[p.max(c)].codec,
            (Some(p), None) if compress => self.rungs[p].codec,
            _ if compress => plan,
            _ => Codec::Raw,
        }
    }

    /// The backlog ladder's cap on a compressing rung, except while the disk is the limit
    /// (busy `DISK_BUSY_MAX` of the time): then a cheaper rung only writes more bytes to
    /// it, and chunks queue for the compressors because the writer holds them up.
    fn cap_unless_disk_bound(&self, now: f64, codec: Codec, capped: Codec) -> Codec {
        if self.disk_busy(now) >= DISK_BUSY_MAX {
            codec
        } else {
            self.cheaper(codec, capped, true)
        }
    }

    fn disk_busy(&self, now: f64) -> f64 {
        self.disk_busy.at(now)
    }

    /// The disk was busy less than `DISK_BUSY_MAX` of the time lately, and the bytes already
    /// sent its way (chunks decided, not yet written) keep it below that too: its busy time
    /// is only known once queued chunks are written.
    ///
    /// Recent history alone is not enough: after a quiet spell the disk looks idle while a
    /// burst arrives faster than it can write, and raw copies then spend its time twice
    /// over. So raw also needs the offered rate to fit the disk beside what the compressors
    /// can take (`raw_fits`), and a measured disk: before its first `DISK_WARM_BYTES`, it is
    /// unknown.
    fn disk_has_headroom(&self, now: f64) -> bool {
        let Some(speed) = self.disk_speed() else {
            return false;
        };
        self.disk_busy(now) < DISK_BUSY_MAX
            && self.committed.at(now) < DISK_BUSY_MAX * speed
            && self.raw_fits(now, speed)
    }

    /// A rung's speed per compressor: measured, or else its prior scaled as the timed rungs
    /// compare with theirs. Priors are a guess at a machine; once one rung is timed, the
    /// others are guessed on this one (zstd:3 timed at 470 MB/s, against zstd:1's prior of
    /// 400, had made zstd:3 look the faster and take a burst it could not keep up with).
    fn speed(&self, r: &Rung) -> f64 {
        r.speed.0.unwrap_or_else(|| {
            // The geometric mean of measured / prior over the timed rungs (1 if none).
            let (logs, timed) = self
                .rungs
                .iter()
                .filter_map(|t| t.speed.0.map(|s| (s / t.prior_speed).ln()))
                .fold((0.0, 0.0), |(sum, n), x| (sum + x, n + 1.0));
            r.prior_speed * (logs / f64::max(timed, 1.0)).exp()
        })
    }

    /// The compressors as whole CPUs: their number times the share of a CPU each gets.
    fn effective_compressors(&self) -> f64 {
        self.compressors as f64 * self.cpu_share.0.unwrap_or(1.0)
    }

    /// Some rung's compressors take the offered rate (judged over `TAU_FAST` too) with the
    /// margin.
    fn compressors_keep_up(&self, now: f64) -> bool {
        let need = self.offered_now(now) * (1.0 + MARGIN);
        let n = self.effective_compressors();
        self.rungs.iter().any(|r| n * self.speed(r) >= need)
    }

    /// Whether raw copies fit a disk of `speed` at the offered rate: the compressors, at
    /// the rung that stores the most of it (`plan_burst`), write `min(offered, cap)·q` a
    /// second, and raw copies may have what is left of `DISK_BUSY_MAX` of the disk's speed.
    /// If nothing is left, every raw byte displaces compressed ones that would have stored
    /// more packets (a burst at twice a disk's speed, 2:1 data); if something is, raw stores
    /// packets that no compressor had time for (a fast disk, traffic beyond the CPU).
    fn raw_fits(&self, now: f64, speed: f64) -> bool {
        if self.rungs.is_empty() {
            return true; // nothing to compress with: raw is all there is
        }
        let offered = self.offered_now(now);
        let mix = self.plan_burst(offered);
        let (strong, weak) = (&self.rungs[mix.strong], &self.rungs[mix.weak]);
        if strong.speed.0.is_none() || weak.speed.0.is_none() {
            // Not timed yet: a guess must not send raw copies to a disk that may be the limit.
            return false;
        }
        let f = mix.strong_share;
        let ratio = f * strong.ratio() + (1.0 - f) * weak.ratio();
        let capacity = self.effective_compressors() / self.seconds_per_byte(&mix);
        let compressed = offered.min(capacity) * ratio;
        compressed < DISK_BUSY_MAX * speed
    }

    /// Counts what a decision sends to the disk.
    fn commit(&mut self, now: f64, bytes: usize, d: Decision) -> Decision {
        self.committed.add(now, bytes as f64 * self.ratio(d.codec));
        d
    }

    /// Bytes out per byte in at `codec`, as estimated (1 for raw).
    fn ratio(&self, codec: Codec) -> f64 {
        self.rung_index(codec)
            .map_or(1.0, |i| self.rungs[i].ratio())
    }

    /// The index of the planned compressing rung, or `None` for raw. See the module comment.
    fn plan(&self, now: f64) -> Option<usize> {
        self.plan_for(self.offered.at(now))
    }

    /// The offered rate a burst is judged by: the plan's, or the last few tens of
    /// milliseconds' when higher (see `TAU_FAST`).
    fn offered_now(&self, now: f64) -> f64 {
        self.offered.at(now).max(self.offered_fast.at(now))
    }

    /// `plan` at an `offered` rate.
    fn plan_for(&self, offered: f64) -> Option<usize> {
        let need = offered * (1.0 + MARGIN);
        let disk = self.disk_speed().unwrap_or(f64::INFINITY);
        let n = self.effective_compressors();
        // (index, sustainable input rate, disk bytes per second at `need`)
        let mut options: Vec<(Option<usize>, f64, f64)> = vec![(None, disk, need)];
        for (i, r) in self.rungs.iter().enumerate() {
            let (cap, q) = (n * self.speed(r), r.ratio());
            let sustainable = if cap * q >= disk {
                disk / q
            } else {
                disk + cap * (1.0 - q)
            };
            let written = if need <= cap {
                need * q
            } else {
                cap * q + (need - cap)
            };
            options.insert(options.len() - 1, (Some(i), sustainable, written));
        }
        let keeping_up = options.iter().filter(|o| o.1 >= need);
        // Strongest first: on a tie the earlier rung wins.
        let best = keeping_up.fold(None::<&(Option<usize>, f64, f64)>, |best, o| match best {
            Some(b) if b.2 <= o.2 => Some(b),
            _ => Some(o),
        });
        match best {
            Some(b) => b.0,
            None => {
                options
                    .iter()
                    .fold(&options[0], |b, o| if o.1 > b.1 { o } else { b })
                    .0
            }
        }
    }

    /// The compressing rungs for a burst at `offered` that nothing goes raw from: each rung
    /// stores `min(cap, disk / q)` a second (its compressors' capacity, or what the disk
    /// takes of its output). Of those that keep up with the margin, the one that writes the
    /// fewest bytes. If none does, the share of chunks per rung that stores the most with the
    /// compressors keeping the margin (`cap / (1 + MARGIN)`): one rung, or two where the
    /// stronger alone leaves the disk idle and the weaker alone the compressors (`mix`); of
    /// options within `BURST_TIE` of the most, the one cheapest in compressor time.
    ///
    /// Without that margin, on a disk that is the limit, a rung the compressors only just
    /// keep up with (zstd:3 at 500 MB/s for a disk taking 502 MB/s of its input) tied with
    /// one they have time to spare for (zstd:1 at 1.2 GB/s, 0.3 % more bytes), won, and
    /// starved the writer whenever the compressors lost the CPU for a moment. Without the
    /// mix, where one compressor's zstd:1 (700 MB/s, q 0.479) about matched the disk (330
    /// MB/s), the margin made lz4 (q 0.493) take the whole burst: 3 % more bytes per packet,
    /// the compressor idle a quarter of the time, and 3 % fewer packets than fixed zstd:1.
    fn plan_burst(&self, offered: f64) -> BurstMix {
        let need = offered * (1.0 + MARGIN);
        let disk = self.disk_speed().unwrap_or(f64::INFINITY);
        let n = self.effective_compressors();
        let stores = |r: &Rung| (n * self.speed(r)).min(disk / r.ratio());
        let compressing = || {
            self.rungs
                .iter()
                .enumerate()
                .filter(|(_, r)| r.codec != Codec::Raw)
        };
        let keeping_up = compressing()
            .filter(|(_, r)| stores(r) >= need)
            .min_by(|a, b| a.1.ratio().total_cmp(&b.1.ratio()));
        if let Some((i, _)) = keeping_up {
            return BurstMix::one(i);
        }
        let with_margin = |i: usize| {
            let r = &self.rungs[i];
            (n * self.speed(r) / (1.0 + MARGIN), r.ratio())
        };
        // Every option: one rung, or two mixed, with the input rate it stores.
        let options: Vec<(BurstMix, f64)> = compressing()
            .flat_map(|(i, _)| {
                let (cap, q) = with_margin(i);
                let single = (BurstMix::one(i), cap.min(disk / q));
                std::iter::once(single).chain(
                    compressing()
                        .filter(move |(j, _)| *j > i)
                        .filter_map(move |(j, _)| {
                            mix((i, j), with_margin(i), with_margin(j), disk)
                        }),
                )
            })
            .collect();
        let most = options.iter().map(|o| o.1).fold(0.0, f64::max);
        // Of those within `BURST_TIE` of the most, the one that costs the compressors the
        // least time a byte (strongest first on a tie).
        options
            .iter()
            .filter(|o| o.1 >= most * (1.0 - BURST_TIE))
            .fold(None::<&(BurstMix, f64)>, |best, o| match best {
                Some(b) if self.seconds_per_byte(&b.0) <= self.seconds_per_byte(&o.0) => Some(b),
                _ => Some(o),
            })
            .map_or(BurstMix::one(0), |o| o.0)
    }

    /// One compressor's seconds per byte in at a burst's mix of rungs.
    fn seconds_per_byte(&self, m: &BurstMix) -> f64 {
        let f = m.strong_share;
        f / self.speed(&self.rungs[m.strong]) + (1.0 - f) / self.speed(&self.rungs[m.weak])
    }

    /// The rung of a burst chunk at `now`: the shares of `plan_burst` dealt out in turn (an
    /// error diffusion: after any number of chunks each rung's count is within one of its
    /// share), so the compressors and the disk are both kept busy.
    fn next_burst_rung(&mut self, now: f64) -> usize {
        let mix = self.plan_burst(self.offered_now(now));
        self.burst_credit += mix.strong_share;
        if self.burst_credit >= 0.5 {
            self.burst_credit -= 1.0;
            mix.strong
        } else {
            mix.weak
        }
    }

    pub fn view(&self, now: f64) -> ControllerView {
        ControllerView {
            offered_bytes_per_s: self.offered.at(now),
            disk_bytes_per_s: self.disk_speed(),
            disk_busy: self.disk_busy(now),
            fill_trend_per_s: self.trend,
            compressor_cpu_share: self.cpu_share.0,
            plan: self
                .plan(now)
                .map_or(Codec::Raw, |i| self.rungs[i].codec)
                .to_string(),
            rungs: self
                .rungs
                .iter()
                .map(|r| RungView {
                    codec: r.codec.to_string(),
                    bytes_per_s: r.speed.0,
                    ratio: r.ratio.0,
                })
                .collect(),
        }
    }
}

/// What a burst's chunks take (`LadderController::plan_burst`): `strong_share` of them the
/// rung `strong`, the rest `weak` (the same rung where one is enough).
#[derive(Debug, Clone, Copy, PartialEq)]
struct BurstMix {
    strong: usize,
    weak: usize,
    strong_share: f64,
}

impl BurstMix {
    fn one(i: usize) -> BurstMix {
        BurstMix {
            strong: i,
            weak: i,
            strong_share: 1.0,
        }
    }

    /// The rung most chunks take.
    fn major(&self) -> usize {
        if self.strong_share >= 0.5 {
            self.strong
        } else {
            self.weak
        }
    }
}

/// Two rungs `(strong, weak)`, each as (input bytes per second its compressors take, bytes
/// out per byte in), sharing a disk of `disk` bytes per second: the share of chunks for the
/// stronger that keeps both the compressors and the disk busy, and the input rate stored
/// then. `None` unless the stronger alone leaves the disk idle (the compressors its limit)
/// and the weaker alone the compressors (the disk its limit): otherwise one of them alone
/// stores at least as much.
///
/// With a share `f` at the stronger, a byte in costs `f/cap_s + (1-f)/cap_w` compressor
/// seconds and `f·q_s + (1-f)·q_w` disk bytes; both limits bind where `rate` equals
/// `1 / seconds` and `disk / bytes`.
fn mix(
    (strong, weak): (usize, usize),
    (cap_s, q_s): (f64, f64),
    (cap_w, q_w): (f64, f64),
    disk: f64,
) -> Option<(BurstMix, f64)> {
    // Per byte in: disk bytes beyond what the disk takes in the compressor time it costs.
    let excess_s = q_s - disk / cap_s;
    let excess_w = q_w - disk / cap_w;
    if !(excess_s < 0.0 && excess_w > 0.0) {
        return None;
    }
    let f = excess_w / (excess_w - excess_s);
    let rate = disk / (f * q_s + (1.0 - f) * q_w);
    Some((
        BurstMix {
            strong,
            weak,
            strong_share: f,
        },
        rate,
    ))
}

/// The controller of one stream, shared by its capture loop, the compressors and its writer,
/// on the recorder's clock. Locked once per chunk by each: never per packet.
pub struct SharedController {
    start: Instant,
    inner: Mutex<LadderController>,
}

impl SharedController {
    pub fn new(controller: LadderController) -> SharedController {
        SharedController {
            start: Instant::now(),
            inner: Mutex::new(controller),
        }
    }

    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn decide(&self, bytes: (usize, u64), fill: f64, queued: usize) -> Decision {
        let now = self.now();
        self.inner.lock().unwrap().decide(now, bytes, fill, queued)
    }

    pub fn at_compressor(
        &self,
        planned: Decision,
        bytes: usize,
        backlog: f64,
        fill: f64,
    ) -> Decision {
        let now = self.now();
        self.inner
            .lock()
            .unwrap()
            .at_compressor(now, planned, bytes, backlog, fill)
    }

    pub fn compressed_cold(&self, codec: Codec, bytes: (usize, usize)) {
        self.inner.lock().unwrap().compressed_cold(codec, bytes)
    }

    pub fn compressed(&self, codec: Codec, bytes: (usize, usize), cpu: f64, wall: f64) {
        let now = self.now();
        self.inner
            .lock()
            .unwrap()
            .compressed(now, codec, bytes, cpu, wall)
    }

    pub fn late_after(&self, bytes: usize, codec: Codec) -> f64 {
        let now = self.now();
        self.inner.lock().unwrap().late_after(now, bytes, codec)
    }

    pub fn taken_late(&self, codec: Codec, bytes: usize, waited: f64) {
        self.inner.lock().unwrap().taken_late(codec, bytes, waited)
    }

    pub fn written(&self, bytes: usize, seconds: f64) {
        let now = self.now();
        self.inner.lock().unwrap().written(now, bytes, seconds)
    }

    pub fn view(&self) -> ControllerView {
        let now = self.now();
        self.inner.lock().unwrap().view(now)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    const MB: f64 = 1e6;
    const CHUNK: f64 = 4.0 * 1024.0 * 1024.0;

    /// How the simulated recorder chooses: the controller, or a fixed rule to compare with.
    #[derive(Clone, Copy)]
    enum Policy {
        Controller,
        /// The backlog-only ladder of before (raw from 90 % backlog).
        Backlog,
        Fixed(Codec),
    }

    /// A simulated machine, its compressors `scale` times as fast as `machine_base`'s.
    fn machine_scaled(codec: Codec, scale: f64) -> (f64, f64) {
        let (speed, ratio) = machine_base(codec);
        (speed * scale, ratio)
    }

    /// Per codec, one compressor's speed (bytes/s) and ratio.
    fn machine_base(codec: Codec) -> (f64, f64) {
        match codec {
            Codec::Zstd(3) => (100.0 * MB, 0.45),
            Codec::Zstd(1) => (250.0 * MB, 0.5),
            Codec::Lz4 => (350.0 * MB, 0.6),
            _ => (f64::INFINITY, 1.0),
        }
    }

    struct Item {
        decision: Decision,
        codec: Codec,
        out: f64,
        /// Compressor seconds left; zero once ready for the writer.
        work: f64,
        /// Taken by the compressor, which chose its rung again (`at_compressor`).
        started: bool,
    }

    #[derive(Default, Debug)]
    struct Outcome {
        offered: f64,
        stored: f64,
        dropped: f64,
        written: f64,
        peak_fill: f64,
        end_fill: f64,
        /// Bytes in per codec.
        by_codec: std::collections::BTreeMap<String, f64>,
        /// Bytes in per codec and reason, for the controller.
        by_reason: std::collections::BTreeMap<String, f64>,
    }

    impl Outcome {
        fn share(&self, codec: &str) -> f64 {
            self.by_codec.get(codec).copied().unwrap_or(0.0) / self.stored.max(1.0)
        }
    }

    /// Runs `seconds` of a recorder with one compressor and a pool of `segments` 4 MiB
    /// segments, in steps of 1 ms; `load(t)` gives (offered bytes/s, disk bytes/s). As in
    /// the recorder, the writer takes chunks in order (a raw chunk waits behind compressed
    /// ones) and a segment is free again once written.
    fn simulate(
        policy: Policy,
        segments: usize,
        seconds: f64,
        load: impl Fn(f64) -> (f64, f64),
    ) -> Outcome {
        simulate_starved(policy, segments, seconds, load, |_| 1.0)
    }

    /// As `simulate`, with the compressor getting only `share(t)` of a CPU.
    fn simulate_starved(
        policy: Policy,
        segments: usize,
        seconds: f64,
        load: impl Fn(f64) -> (f64, f64),
        share: impl Fn(f64) -> f64,
    ) -> Outcome {
        simulate_on((1.0, 0.0), policy, segments, seconds, load, share)
    }

    /// As `simulate_starved`, on a machine whose compressors are `scale` times as fast and
    /// whose disk takes its first `cache` bytes 25 times as fast (the writer's buffer, a
    /// disk's cache: a 400 MB/s disk took the first writes of a recording at 10 GB/s).
    fn simulate_on(
        (scale, cache): (f64, f64),
        policy: Policy,
        segments: usize,
        seconds: f64,
        load: impl Fn(f64) -> (f64, f64),
        share: impl Fn(f64) -> f64,
    ) -> Outcome {
        let machine = |c| machine_scaled(c, scale);
        let ladder = CodecLadder::parse("zstd:3,zstd:1,lz4,raw").unwrap();
        let mut ctl = LadderController::new(ladder.clone(), 1, segments);
        let dt = 0.001;
        let mut out = Outcome::default();
        let mut items: VecDeque<Item> = VecDeque::new();
        let (mut partial, mut write_left) = (0.0, None::<f64>);
        // Bytes the full pool refused since the last chunk it took.
        let mut refused = 0u64;
        // The writer (as `crate::sequencer`): since when it has waited for the head chunk,
        // and whether it took the last one late; the compressor's seconds still owed to a
        // chunk the writer took from under it.
        let (mut waiting_since, mut starved, mut wasted) = (None::<f64>, false, 0.0f64);
        let steps = (seconds / dt) as usize;
        for step in 0..steps {
            let t = step as f64 * dt;
            let (offered, disk) = load(t);
            partial += offered * dt;
            out.offered += offered * dt;
            while partial >= CHUNK {
                partial -= CHUNK;
                if items.len() >= segments {
                    out.dropped += CHUNK;
                    refused += CHUNK as u64;
                    continue;
                }
                let queued = items.iter().filter(|i| i.work > 0.0).count();
                // The chunk being submitted holds a segment too.
                let fill = (items.len() + 1) as f64 / segments as f64;
                let decision = match policy {
                    Policy::Controller => ctl.decide(
                        t,
                        (CHUNK as usize, std::mem::take(&mut refused)),
                        fill,
                        queued,
                    ),
                    Policy::Backlog => Decision {
                        codec: ladder.choose(queued as f64 / segments as f64),
                        reason: Reason::Backlog,
                    },
                    Policy::Fixed(c) => Decision {
                        codec: c,
                        reason: Reason::Fixed,
                    },
                };
                let (speed, ratio) = machine(decision.codec);
                items.push_back(Item {
                    decision,
                    codec: decision.codec,
                    out: CHUNK * ratio,
                    work: CHUNK / speed,
                    started: !matches!(policy, Policy::Controller) || speed.is_infinite(),
                });
            }
            // The compressor works through its queue in order, choosing each chunk's rung
            // again when it takes it, as the recorder's compressors do.
            let mut budget = dt * share(t);
            let burnt = wasted.min(budget);
            (wasted, budget) = (wasted - burnt, budget - burnt);
            let queued = items.iter().filter(|i| i.work > 0.0).count();
            let fill = items.len() as f64 / segments as f64;
            for item in items.iter_mut().filter(|i| i.work > 0.0) {
                if !item.started {
                    item.started = true;
                    let backlog = queued as f64 / segments as f64;
                    item.decision =
                        ctl.at_compressor(t, item.decision, CHUNK as usize, backlog, fill);
                    let (speed, ratio) = machine(item.decision.codec);
                    (item.codec, item.out, item.work) =
                        (item.decision.codec, CHUNK * ratio, CHUNK / speed);
                    if item.work <= 0.0 {
                        continue;
                    }
                }
                let spent = item.work.min(budget);
                item.work -= spent;
                budget -= spent;
                if item.work <= 0.0 {
                    let secs = CHUNK / machine(item.codec).0;
                    ctl.compressed(
                        t,
                        item.codec,
                        (CHUNK as usize, item.out as usize),
                        secs,
                        secs / share(t),
                    );
                }
                if budget <= 0.0 {
                    break;
                }
            }
            // The writer: the head item, once compressed, at the disk's speed.
            let mut budget = dt;
            while budget > 0.0 {
                let Some(head) = items.front_mut() else { break };
                if head.work > 0.0 {
                    // The recorder's writer waits for a compressed chunk only until it is
                    // late, then writes it raw.
                    let since = *waiting_since.get_or_insert(t);
                    let late = ctl.late_after(t, CHUNK as usize, head.decision.codec);
                    let controlled = matches!(policy, Policy::Controller);
                    if !controlled || (t - since < late && (!starved || head.started)) {
                        break;
                    }
                    if head.started {
                        wasted += head.work;
                    }
                    ctl.taken_late(head.decision.codec, CHUNK as usize, t - since);
                    head.decision = Decision {
                        codec: Codec::Raw,
                        reason: Reason::Late,
                    };
                    (head.codec, head.out, head.work) = (Codec::Raw, CHUNK, 0.0);
                    starved = true;
                }
                let disk = if out.written < cache {
                    5.0 * disk
                } else {
                    disk
                };
                let left = write_left.get_or_insert(head.out);
                let spent = (*left / disk).min(budget);
                *left -= spent * disk;
                budget -= spent;
                if *left <= 1e-6 {
                    let head = items.pop_front().unwrap();
                    waiting_since = None;
                    starved &= head.codec == Codec::Raw;
                    ctl.written(t, head.out as usize, head.out / disk);
                    if matches!(policy, Policy::Controller) {
                        let d = head.decision;
                        let key = format!("{} {} @{t:.1}", d.codec, d.reason.name());
                        *out.by_reason.entry(key).or_default() += CHUNK;
                    }
                    *out.by_codec.entry(head.codec.to_string()).or_default() += CHUNK;
                    out.stored += CHUNK;
                    out.written += head.out;
                    write_left = None;
                }
            }
            let fill = items.len() as f64 / segments as f64;
            out.peak_fill = out.peak_fill.max(fill);
            out.end_fill = fill;
        }
        out
    }

    /// The controller's run stores at least `within` of what the best fixed choice's does,
    /// with less than `raw_below` of it raw.
    fn stores_as_much_as_any_fixed_choice(
        run: impl Fn(Policy) -> Outcome,
        within: f64,
        raw_below: f64,
    ) {
        let ctl = run(Policy::Controller);
        let best = [Codec::Raw, Codec::Zstd(3), Codec::Zstd(1), Codec::Lz4]
            .map(|c| run(Policy::Fixed(c)).stored)
            .into_iter()
            .fold(0.0, f64::max);
        assert!(
            ctl.stored >= within * best,
            "controller {:.4} of offered, best fixed {:.4}: {:?}",
            ctl.stored / ctl.offered,
            best / ctl.offered,
            ctl.by_reason
        );
        assert!(ctl.share("raw") < raw_below, "{:?}", ctl.by_reason);
    }

    #[test]
    fn slow_compressors_and_a_fast_disk_go_raw_and_never_drop() {
        // 1 GB/s offered, compressors at most 350 MB/s, disk 2 GB/s: issue 20.
        let load = |_| (1000.0 * MB, 2000.0 * MB);
        let ctl = simulate(Policy::Controller, 64, 10.0, load);
        let raw = simulate(Policy::Fixed(Codec::Raw), 64, 10.0, load);
        let old = simulate(Policy::Backlog, 64, 10.0, load);
        assert_eq!(raw.dropped, 0.0);
        assert_eq!(ctl.dropped, 0.0, "{ctl:?}");
        assert!(old.dropped > 0.0, "the old ladder kept up: {old:?}");
        // What the compressors can take, they still take: better than raw on disk bytes.
        assert!(ctl.share("raw") < 0.9, "{ctl:?}");
        assert!(ctl.written < raw.written * 0.9, "{ctl:?}");
    }

    #[test]
    fn a_starved_compressor_does_not_hold_up_the_pool() {
        // 300 MB/s on a fast disk; after 3 s the compressor gets a fifth of a CPU.
        let load = |_| (300.0 * MB, 2000.0 * MB);
        let share = |t: f64| if t < 3.0 { 1.0 } else { 0.2 };
        let ctl = simulate_starved(Policy::Controller, 64, 8.0, load, share);
        assert_eq!(ctl.dropped, 0.0, "{ctl:?}");
        assert!(ctl.share("raw") > 0.3, "{ctl:?}");
    }

    /// Other processes take the compressor's CPU almost entirely (two busy loops at nice 0
    /// leave a compressor at nice 19 about 1.5 % of a CPU): the chunks it holds must not hold
    /// up the raw ones behind them while the disk idles. The controller stores what raw
    /// writing stores, less the chunks in flight when the CPU went, and the writer takes
    /// chunks late only while the compressor is starved.
    #[test]
    fn a_compressor_starved_of_cpu_never_holds_up_the_writer() {
        let load = |_| (1000.0 * MB, 2000.0 * MB);
        let share = |t: f64| if (2.0..6.0).contains(&t) { 0.015 } else { 1.0 };
        let ctl = simulate_starved(Policy::Controller, 64, 8.0, load, share);
        let raw = simulate_starved(Policy::Fixed(Codec::Raw), 64, 8.0, load, share);
        assert_eq!(raw.dropped, 0.0, "{raw:?}");
        assert!(
            ctl.dropped == 0.0 && ctl.stored >= raw.stored - ctl.end_fill * 64.0 * CHUNK,
            "dropped {}, end fill {}",
            ctl.dropped,
            ctl.end_fill
        );
        assert!(
            ctl.stored >= raw.stored - 4.0 * CHUNK,
            "controller {:.4} of offered, raw {:.4}: {:?}",
            ctl.stored / ctl.offered,
            raw.stored / raw.offered,
            ctl.by_reason
        );
        let late: Vec<f64> = ctl
            .by_reason
            .keys()
            .filter(|k| k.contains(" late @"))
            .map(|k| k.rsplit('@').next().unwrap().parse().unwrap())
            .collect();
        assert!(!late.is_empty(), "{:?}", ctl.by_reason);
        assert!(
            late.iter().all(|t| (2.0..6.5).contains(t)),
            "late chunks only while starved: {late:?}"
        );
        // Before and after, the compressor takes what it can.
        assert!(ctl.written < raw.written * 0.95, "{:?}", ctl.by_reason);
    }

    #[test]
    fn a_slow_disk_gets_stronger_rungs() {
        // 90 MB/s offered on a 60 MB/s disk: raw cannot keep up, the strongest rung can
        // (its compressor takes 100 MB/s), and writes the fewest bytes.
        let slow = simulate(Policy::Controller, 64, 10.0, |_| (90.0 * MB, 60.0 * MB));
        assert_eq!(slow.dropped, 0.0, "{slow:?}");
        assert!(slow.share("zstd:3") > 0.8, "{slow:?}");
        let raw = simulate(Policy::Fixed(Codec::Raw), 64, 10.0, |_| {
            (90.0 * MB, 60.0 * MB)
        });
        assert!(raw.dropped > 0.0);
        // Faster traffic on a disk still too slow for raw: a faster rung, still compressing.
        let fast = simulate(Policy::Controller, 64, 10.0, |_| (300.0 * MB, 200.0 * MB));
        assert_eq!(fast.dropped, 0.0, "{fast:?}");
        assert!(fast.share("zstd:1") + fast.share("lz4") > 0.7, "{fast:?}");
        assert!(fast.share("raw") < 0.1, "{fast:?}");
        for fixed in [Codec::Raw, Codec::Zstd(3), Codec::Zstd(1), Codec::Lz4] {
            let f = simulate(Policy::Fixed(fixed), 64, 10.0, |_| (300.0 * MB, 200.0 * MB));
            assert!(fast.stored >= f.stored, "{fixed}: {f:?}");
        }
    }

    #[test]
    fn the_pool_absorbs_a_burst_of_twice_the_disk() {
        // Disk 400 MB/s; 2 s at 800 MB/s, then 100 MB/s. 1 GiB pool.
        let load = |t: f64| {
            (
                if (1.0..3.0).contains(&t) {
                    800.0
                } else {
                    100.0
                } * MB,
                400.0 * MB,
            )
        };
        let ctl = simulate(Policy::Controller, 256, 8.0, load);
        assert_eq!(ctl.dropped, 0.0, "{ctl:?}");
        assert!(
            ctl.peak_fill > 0.05,
            "the burst never reached the pool: {ctl:?}"
        );
        assert!(ctl.end_fill < 0.05, "the pool did not drain: {ctl:?}");
        // Most of it compressed: the effective ratio stays well above raw's. (The pool,
        // more than half full after the burst, drains partly through raw copies while the
        // disk has headroom: see `at_compressor`.)
        assert!(ctl.stored / ctl.written > 1.3, "{ctl:?}");
    }

    #[test]
    fn a_burst_on_a_slow_disk_after_a_quiet_spell_is_not_sent_raw() {
        // bench/ladder.py's burst: a 400 MB/s disk, 3 s at 20 MB/s, 2 s at 800 MB/s, quiet
        // again; a 256 MiB pool and compressors fast enough to take the whole burst (lz4
        // 1.2 GB/s), so the disk, not the CPU, is the limit. Raw copies while the disk still
        // looks idle from the quiet spell only spend its time twice over.
        let load = |t: f64| {
            let offered = if (3.0..5.0).contains(&t) { 800.0 } else { 20.0 };
            (offered * MB, 400.0 * MB)
        };
        let run = |p| simulate_on((3.5, 0.0), p, 64, 10.0, load, |_| 1.0);
        let ctl = run(Policy::Controller);
        let fixed = [Codec::Raw, Codec::Zstd(3), Codec::Zstd(1), Codec::Lz4]
            .map(|c| (c, run(Policy::Fixed(c))));
        let best = fixed.iter().map(|f| f.1.stored).fold(0.0, f64::max);
        assert!(
            ctl.stored >= 0.995 * best,
            "controller {:.4} of offered, best fixed {:.4}: {ctl:?} vs {fixed:?}",
            ctl.stored / ctl.offered,
            best / ctl.offered
        );
    }

    #[test]
    fn a_long_burst_that_compressed_data_nearly_fills_the_disk_stays_compressed() {
        // The benchmark's burst as measured on our machine: 10 s at a little over twice the
        // disk after a quiet 5 s, compressors that take the burst with room to spare. Once
        // the pool is full the disk alone sets what is stored, so every raw chunk costs
        // packets: at most a sliver of raw, and within 0.1 % of the best fixed choice.
        let load = |t: f64| {
            let offered = if (5.0..15.0).contains(&t) {
                840.0
            } else {
                20.0
            };
            (offered * MB, 400.0 * MB)
        };
        let run = |p| simulate_on((4.0, 0.0), p, 64, 20.0, load, |_| 1.0);
        stores_as_much_as_any_fixed_choice(run, 0.999, 0.01);
    }

    #[test]
    fn a_disk_whose_first_writes_are_fast_gets_no_flood_of_raw_copies() {
        // bench/ladder.py's throttled 1.5 Mpps: 2.3 GB/s offered from the start onto a
        // 400 MB/s disk whose first 9 MiB (the writer's buffer) go at 10 GB/s, compressors
        // that take it at zstd:1 with nothing to spare for the disk. Every raw byte then
        // displaces compressed ones: measured on its first writes, the disk had room for
        // a full pool's worth of raw copies.
        let load = |_| (2300.0 * MB, 400.0 * MB);
        let run = |p| simulate_on((4.0, 9.0 * MB), p, 64, 10.0, load, |_| 1.0);
        stores_as_much_as_any_fixed_choice(run, 0.999, 0.002);
    }

    #[test]
    fn the_disk_is_measured_on_its_busy_time_not_on_its_first_writes() {
        let ladder = CodecLadder::parse("zstd:1,lz4").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 64);
        // The first 16 MiB, copies into the writer's buffer at 10 GB/s, are not measured.
        for i in 0..8 {
            ctl.written(f64::from(i) * 0.001, 2 << 20, (2 << 20) as f64 / 10e9);
        }
        assert_eq!(ctl.view(0.01).disk_bytes_per_s, None);
        // Then a second at 400 MB/s, and 40 MB a cache took at once: they took 4 ms of
        // the disk's time, and move its speed by a fifth, not to 10 GB/s (a mean over
        // writes, as before, put it at 9.6 GB/s after ten of them).
        let mut t = 0.01;
        for _ in 0..200 {
            t += 0.005;
            ctl.written(t, 2_000_000, 0.005);
        }
        for _ in 0..20 {
            t += 0.0002;
            ctl.written(t, 2_000_000, 0.0002);
        }
        let speed = ctl.view(t).disk_bytes_per_s.unwrap();
        assert!((400e6..500e6).contains(&speed), "{speed}");
    }

    #[test]
    fn a_full_queue_turned_raw_at_the_compressors_counts_towards_the_disk() {
        // An idle 1 GB/s disk, compressors timed too slow for 1.2 GB/s offered: raw has
        // the disk's spare time. A compressor turning a queued chunk raw costs it nothing,
        // so compressors taking a full pool turn chunk after chunk raw at once: each must
        // count, or all 64 go raw before the disk has written one.
        let ladder = CodecLadder::parse("zstd:1,lz4").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 64);
        warm_disk(&mut ctl);
        let chunk = 1 << 22;
        for i in 0..4 {
            let t = f64::from(i) * 0.01;
            let secs = chunk as f64 / 300e6;
            ctl.compressed(t, Codec::Zstd(1), (chunk, chunk / 2), secs, secs);
            ctl.compressed(t, Codec::Lz4, (chunk, chunk / 2), secs / 2.0, secs / 2.0);
            ctl.written(t, chunk / 2, chunk as f64 / 2.0 / 1e9);
        }
        let mut planned = Vec::new();
        for i in 0..64 {
            let t = 0.05 + f64::from(i) * 0.0035;
            planned.push(ctl.decide(t, (chunk, 0), f64::from(i) / 64.0, i as usize));
        }
        let t = 0.3;
        let raw = planned
            .iter()
            .filter(|&&d| ctl.at_compressor(t, d, chunk, 0.9, 1.0).codec == Codec::Raw)
            .count();
        // As many as fill the disk's spare `DISK_BUSY_MAX` over the committed window (32),
        // not all 64 (what they were when turning raw at the compressor did not count).
        assert!((1..=40).contains(&raw), "{raw} of 64 turned raw at once");
    }

    #[test]
    fn a_changing_regime_changes_the_choice() {
        // 5 s of a fast disk with more traffic than the compressors take, then a slow
        // disk with less traffic.
        let load = |t: f64| {
            if t < 5.0 {
                (1000.0 * MB, 2000.0 * MB)
            } else {
                (300.0 * MB, 200.0 * MB)
            }
        };
        let first = simulate(Policy::Controller, 64, 5.0, load);
        let both = simulate(Policy::Controller, 64, 12.0, load);
        assert_eq!(both.dropped, 0.0, "{both:?}");
        let raw_first = first.by_codec["raw"];
        let raw_later = both.by_codec["raw"] - raw_first;
        let later = both.stored - first.stored;
        assert!(raw_first / first.stored > 0.5, "{first:?}");
        assert!(raw_later / later < 0.15, "{both:?}");
    }

    #[test]
    fn never_stores_less_than_the_best_fixed_choice() {
        // (offered, disk) in MB/s: disk-bound, CPU-bound, both, neither.
        for (offered, disk) in [
            (600.0, 200.0),
            (1000.0, 2000.0),
            (300.0, 200.0),
            (90.0, 60.0),
            (800.0, 400.0),
            (400.0, 500.0),
            (50.0, 400.0),
        ] {
            let load = |_| (offered * MB, disk * MB);
            let ctl = simulate(Policy::Controller, 64, 10.0, load);
            let fixed = [Codec::Raw, Codec::Zstd(3), Codec::Zstd(1), Codec::Lz4]
                .map(|c| (c, simulate(Policy::Fixed(c), 64, 10.0, load)));
            let best = fixed.iter().map(|f| f.1.stored).fold(0.0, f64::max);
            eprintln!(
                "{offered}/{disk}: controller {:.3} of offered, best fixed {:.3}, ratio {:.2}",
                ctl.stored / ctl.offered,
                best / ctl.offered,
                ctl.stored / ctl.written
            );
            // Probes (2 % of a compressor when every rung is slow) and the first chunks,
            // sent before the disk is measured, cost a little where everything saturates.
            assert!(
                ctl.stored >= 0.98 * best,
                "{offered}/{disk}: {ctl:?} vs {fixed:?}"
            );
        }
    }

    #[test]
    fn a_starved_probe_lowers_the_cpu_share_not_the_rung() {
        let ladder = CodecLadder::parse("zstd:1,lz4").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 100);
        // 4 MB in 10 ms of CPU, but 100 ms of wall time: the compressor ran a tenth of it.
        ctl.compressed(0.0, Codec::Zstd(1), (4_000_000, 2_000_000), 0.01, 0.1);
        let v = ctl.view(0.0);
        assert!((v.rungs[0].bytes_per_s.unwrap() - 4e8).abs() < 1.0, "{v:?}");
        assert!(
            (v.compressor_cpu_share.unwrap() - 0.1).abs() < 1e-9,
            "{v:?}"
        );
    }

    #[test]
    fn a_cold_or_interrupted_chunk_does_not_condemn_a_rung() {
        let ladder = CodecLadder::parse("zstd:1,lz4").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 100);
        let speed = |ctl: &LadderController| ctl.view(1.0).rungs[0].bytes_per_s.unwrap();
        // The first chunk, cold: a quarter of the speed. The next, warm, is believed at once.
        ctl.compressed(0.0, Codec::Zstd(1), (4_000_000, 2_000_000), 0.016, 0.016);
        assert!((speed(&ctl) - 2.5e8).abs() < 1.0);
        ctl.compressed(0.1, Codec::Zstd(1), (4_000_000, 2_000_000), 0.004, 0.004);
        assert!((speed(&ctl) - 1e9).abs() < 1.0);
        // One chunk that the host interrupted moves it by a tenth of the difference.
        ctl.compressed(0.2, Codec::Zstd(1), (4_000_000, 2_000_000), 0.016, 0.016);
        assert!((speed(&ctl) - 9.25e8).abs() < 1.0, "{}", speed(&ctl));
        // A rung that really became slower is followed within a few dozen chunks.
        for i in 0..40 {
            ctl.compressed(
                0.3 + f64::from(i) * 0.01,
                Codec::Zstd(1),
                (4_000_000, 2_000_000),
                0.008,
                0.008,
            );
        }
        assert!((speed(&ctl) - 5e8).abs() < 0.02 * 5e8, "{}", speed(&ctl));
    }

    #[test]
    fn at_the_compressor_the_raw_rung_needs_disk_headroom() {
        let ladder = CodecLadder::parse("zstd:1,lz4").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 100);
        warm_disk(&mut ctl);
        let planned = Decision {
            codec: Codec::Zstd(1),
            reason: Reason::Plan,
        };
        // Compressors timed at 100 MB/s, so that raw copies would store what they cannot.
        ctl.compressed(0.4, Codec::Zstd(1), (1 << 20, 1 << 19), 0.01, 0.01);
        ctl.compressed(0.4, Codec::Lz4, (1 << 20, 1 << 19), 0.01, 0.01);
        // An idle disk: a backlog past 90 % still sends the chunk raw, as before.
        ctl.written(0.5, 1 << 20, 0.001);
        let d = ctl.at_compressor(0.5, planned, 1 << 20, 0.95, 0.95);
        assert_eq!((d.codec, d.reason), (Codec::Raw, Reason::DiskHeadroom));
        // A disk busy all the time: raw would only slow the drain, so compress.
        for i in 1..100 {
            ctl.written(0.5 + f64::from(i) * 0.01, 1 << 20, 0.01);
        }
        assert_eq!(
            ctl.at_compressor(1.5, planned, 1 << 20, 0.95, 0.95),
            planned
        );
        // Nor does a cheaper rung help a disk that is the limit: the backlog ladder's cap
        // waits until the disk has room again.
        assert_eq!(
            ctl.at_compressor(1.5, planned, 1 << 20, 0.45, 0.45),
            planned
        );
        ctl.written(5.0, 1 << 20, 0.001);
        let d = ctl.at_compressor(5.0, planned, 1 << 20, 0.45, 0.45);
        assert_eq!((d.codec, d.reason), (Codec::Lz4, Reason::Backlog));
    }

    #[test]
    fn a_fixed_controller_takes_its_rung_whatever_the_load() {
        let ladder = CodecLadder::parse("lz4").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 100).fixed(true);
        ctl.written(0.5, 1 << 20, 0.001); // an idle disk: the ladder would go raw when behind
        for (fill, queued) in [(0.0, 0), (0.6, 50), (0.99, 99)] {
            let d = ctl.decide(1.0, (1 << 20, 0), fill, queued);
            assert_eq!((d.codec, d.reason), (Codec::Lz4, Reason::Fixed));
            assert_eq!(ctl.at_compressor(1.0, d, 1 << 20, fill, fill), d);
        }
    }

    #[test]
    fn explicit_thresholds_still_cap_the_rung() {
        let ladder = CodecLadder::parse("zstd:1@0.1,lz4").unwrap();
        let mut ctl = LadderController::new(ladder, 8, 100);
        // Let every rung be measured (fast), so no probe interferes.
        ctl.compressed(0.0, Codec::Zstd(1), (1 << 20, 1 << 19), 0.001, 0.001);
        ctl.compressed(0.0, Codec::Lz4, (1 << 20, 1 << 19), 0.001, 0.001);
        assert_eq!(ctl.decide(0.1, (1 << 20, 0), 0.05, 0).codec, Codec::Zstd(1));
        let d = ctl.decide(0.2, (1 << 20, 0), 0.2, 15);
        assert_eq!(
            d,
            Decision {
                codec: Codec::Lz4,
                reason: Reason::Backlog
            }
        );
    }

    #[test]
    fn unmeasured_rungs_are_probed_once_while_the_pool_is_empty() {
        let ladder = CodecLadder::parse("zstd:3,zstd:1,lz4,raw").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 100);
        // A second after the start: a trickle, so the plan is the strongest rung.
        let first = ctl.decide(1.0, (1 << 20, 0), 0.0, 0);
        assert_eq!(
            first,
            Decision {
                codec: Codec::Zstd(3),
                reason: Reason::Plan
            }
        );
        assert_eq!(ctl.decide(1.01, (1 << 20, 0), 0.0, 0).codec, Codec::Zstd(1));
        assert_eq!(ctl.decide(1.02, (1 << 20, 0), 0.0, 0).codec, Codec::Lz4);
        assert_eq!(ctl.decide(1.03, (1 << 20, 0), 0.0, 0).reason, Reason::Plan);
    }

    #[test]
    fn raw_copies_wait_for_a_timed_rung() {
        // An idle, measured disk and a full pool, but no chunk timed yet: the priors (500 MB/s
        // for lz4 here, a third of what our machines do) must not send raw copies to a disk
        // that compressed data alone may fill.
        let ladder = CodecLadder::parse("zstd:1,lz4").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 100);
        warm_disk(&mut ctl);
        ctl.written(0.0, 1 << 20, 0.001);
        let planned = Decision {
            codec: Codec::Lz4,
            reason: Reason::Burst,
        };
        assert_ne!(
            ctl.at_compressor(0.01, planned, 1 << 20, 0.95, 0.95).codec,
            Codec::Raw
        );
        // Timed, and too slow for the offered rate: now raw has the disk's spare time.
        ctl.compressed(0.02, Codec::Lz4, (1 << 20, 1 << 19), 0.01, 0.01);
        ctl.compressed(0.02, Codec::Zstd(1), (1 << 20, 1 << 19), 0.02, 0.02);
        let d = ctl.at_compressor(0.03, planned, 1 << 20, 0.95, 0.95);
        assert_eq!((d.codec, d.reason), (Codec::Raw, Reason::DiskHeadroom));
    }

    #[test]
    fn an_overload_is_judged_by_what_was_offered_not_by_what_the_pool_took() {
        // A full pool takes in only what leaves it. 2 GB/s offered, a 400 MB/s disk and
        // compressors at 1 GB/s (2:1): their output alone fills the disk, so no raw copy.
        // Judged by its intake (the 800 MB/s the compressors drain), the same load looks
        // like one that leaves the disk half idle.
        let run = |report_drops: bool| {
            let ladder = CodecLadder::parse("zstd:1,lz4").unwrap();
            let mut ctl = LadderController::new(ladder, 1, 64);
            warm_disk(&mut ctl);
            ctl.compressed(0.0, Codec::Zstd(1), (1 << 22, 1 << 21), 0.004, 0.004);
            ctl.compressed(0.0, Codec::Lz4, (1 << 22, 1 << 21), 0.004, 0.004);
            let mut raw = 0;
            // Every 5 ms a chunk enters (800 MB/s); 6 MB are refused meanwhile (1.2 GB/s).
            for i in 0..400 {
                let t = 0.01 + f64::from(i) * 0.005;
                ctl.written(t, 1 << 21, 0.005);
                let dropped = if report_drops { 6_000_000 } else { 0 };
                if ctl.decide(t, (1 << 22, dropped), 0.97, 60).codec == Codec::Raw {
                    raw += 1;
                }
            }
            raw
        };
        assert_eq!(run(true), 0);
        assert!(run(false) > 0, "the test no longer tells the two apart");
    }

    #[test]
    fn a_cold_first_chunk_is_not_timed_and_young_rungs_are_probed_again_soon() {
        let ladder = CodecLadder::parse("zstd:3,zstd:1,lz4").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 100);
        let speed = |ctl: &LadderController, i: usize| ctl.view(9.0).rungs[i].bytes_per_s;
        // The first chunk of each rung: probed, cold, not timed, and so probed again at once.
        let first = ctl.decide(0.0, (1 << 22, 0), 0.0, 0);
        assert_eq!(first.codec, Codec::Zstd(3));
        ctl.compressed_cold(Codec::Zstd(3), (1 << 22, 1 << 21));
        assert_eq!(speed(&ctl, 0), None);
        assert_eq!(ctl.decide(0.01, (1 << 22, 0), 0.0, 0).codec, Codec::Zstd(3));
        // Timed on cold memory at a third of its speed: young, so probed again after
        // `PROBE_YOUNG`, even with the pool nearly full, and believed once faster.
        ctl.compressed(0.02, Codec::Zstd(3), (1 << 22, 1 << 21), 0.03, 0.03);
        for r in [Codec::Zstd(1), Codec::Lz4] {
            ctl.compressed(0.02, r, (1 << 22, 1 << 21), 0.004, 0.004);
        }
        let probes_of_zstd3 = |ctl: &mut LadderController, from: f64, fill: f64| {
            (0..100)
                .filter(|i| {
                    let t = from + f64::from(*i) * 0.01;
                    ctl.decide(t, (1 << 22, 0), fill, 0)
                        == Decision {
                            codec: Codec::Zstd(3),
                            reason: Reason::Probe,
                        }
                })
                .count()
        };
        assert_eq!(
            probes_of_zstd3(&mut ctl, 0.03, 0.95),
            3,
            "one per 0.25 s in a second"
        );
        ctl.compressed(1.1, Codec::Zstd(3), (1 << 22, 1 << 21), 0.01, 0.01);
        assert!((speed(&ctl, 0).unwrap() - 4.194304e8).abs() < 1.0);
        // Warm (timed `WARM_SAMPLES` times): no probes while the pool is nearly full.
        for i in 0..4 {
            ctl.compressed(
                1.2 + f64::from(i) * 0.01,
                Codec::Zstd(3),
                (1 << 22, 1 << 21),
                0.01,
                0.01,
            );
        }
        assert_eq!(probes_of_zstd3(&mut ctl, 1.3, 0.95), 0);
    }

    #[test]
    fn an_untimed_rung_is_guessed_on_this_machine_not_on_the_reference_one() {
        // zstd:3 timed at 470 MB/s, 2.35 times its prior: this machine is fast, and zstd:1,
        // not timed yet, is guessed at 2.35 times its prior of 400 MB/s too. Against the bare
        // prior, zstd:3 looked the faster and took the burst.
        let ladder = CodecLadder::parse("zstd:3,zstd:1").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 64);
        let chunk = 1 << 22;
        let secs = chunk as f64 / 470e6;
        ctl.compressed(0.0, Codec::Zstd(3), (chunk, chunk / 2), secs, secs);
        let probe = ctl.decide(0.01, (chunk, 0), 0.6, 0);
        assert_eq!((probe.codec, probe.reason), (Codec::Zstd(1), Reason::Probe));
        let burst = ctl.decide(0.02, (chunk, 0), 0.6, 0);
        assert_eq!((burst.codec, burst.reason), (Codec::Zstd(1), Reason::Burst));
    }

    #[test]
    fn a_burst_on_a_disk_bound_link_leaves_the_compressors_time_to_spare() {
        // A 238 MB/s disk takes 498.5 MB/s of zstd:3's input and 497 of zstd:1's; the one
        // compressor does 500 MB/s at zstd:3 and 1.2 GB/s at zstd:1. zstd:3 alone would
        // store 0.3 % more, with no time to spare. Dealt at the compressors, the burst's
        // chunks may mix the two, but only so far as to leave them the margin.
        let ladder = CodecLadder::parse("zstd:3,zstd:1").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 64);
        let chunk = 1 << 22;
        let (q3, q1) = (0.4774, 0.4787);
        for i in 0..4 {
            let t = f64::from(i) * 0.01;
            let out3 = (chunk as f64 * q3) as usize;
            let out1 = (chunk as f64 * q1) as usize;
            ctl.compressed(
                t,
                Codec::Zstd(3),
                (chunk, out3),
                chunk as f64 / 500e6,
                0.0084,
            );
            ctl.compressed(
                t,
                Codec::Zstd(1),
                (chunk, out1),
                chunk as f64 / 1.2e9,
                0.0035,
            );
            ctl.written(t, 1 << 21, (1 << 21) as f64 / 238e6);
        }
        // 1.2 GB/s offered, the pool 95 % full, the disk busy all the time.
        let (mut zstd3, n) = (0, 200);
        for i in 0..n {
            let t = 0.05 + f64::from(i) * 0.0035;
            ctl.written(t, 833_000, 0.0035);
            let d = ctl.decide(t, (chunk, 0), 0.95, 60);
            assert_eq!(d.reason, Reason::Burst, "at {t}");
            let d = ctl.at_compressor(t, d, chunk, 0.9, 0.95);
            assert_eq!(d.reason, Reason::Burst, "at {t}");
            zstd3 += usize::from(d.codec == Codec::Zstd(3));
        }
        // The compressor's time per byte in, and the input rate the disk takes, of the mix.
        let f = zstd3 as f64 / f64::from(n);
        let busy_per_byte = f / 500e6 + (1.0 - f) / 1.2e9;
        let stored = 238e6 / (f * q3 + (1.0 - f) * q1);
        assert!(
            stored * busy_per_byte <= 1.0 / (1.0 + MARGIN) + 0.01,
            "{zstd3} of {n} chunks at zstd:3 keep the compressor busy {:.3} of the time",
            stored * busy_per_byte
        );
        assert!(
            stored >= 238e6 / q1,
            "the disk stores less than with zstd:1 alone"
        );
    }

    /// The disk's first bytes, which are not measured (`DISK_WARM_BYTES`).
    fn warm_disk(ctl: &mut LadderController) {
        ctl.written(0.0, DISK_WARM_BYTES as usize, 0.0);
    }

    /// Times each of `rungs` (codec, ratio, bytes per CPU second) on four 4 MiB chunks,
    /// the disk taking `disk` bytes per second and busy all the time.
    fn timed_on_a_busy_disk(ctl: &mut LadderController, rungs: &[(Codec, f64, f64)], disk: f64) {
        warm_disk(ctl);
        let chunk = 1 << 22;
        for i in 0..4 {
            let t = f64::from(i) * 0.01;
            for &(codec, q, speed) in rungs {
                let (out, secs) = ((chunk as f64 * q) as usize, chunk as f64 / speed);
                ctl.compressed(t, codec, (chunk, out), secs, secs);
            }
            ctl.written(t, (disk * 0.01) as usize, 0.01);
        }
    }

    #[test]
    fn where_neither_rung_alone_fills_both_limits_the_burst_mixes_them() {
        // bench/ladder.py's throttled disk on our 2-core machines: one compressor does
        // zstd:1 at 700 MB/s (q 0.479), about what the disk's 330 MB/s takes (689 MB/s of
        // input), and lz4 at 1.15 GB/s (q 0.493). zstd:1 alone, keeping the margin, leaves
        // the disk idle; lz4 alone leaves the compressor idle and writes 3 % more a packet.
        // Mixed, most chunks take zstd:1, the rest lz4, and both limits are met.
        let ladder = CodecLadder::parse("zstd:1,lz4").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 64);
        let chunk = 1 << 22;
        let (q1, ql) = (0.479, 0.493);
        timed_on_a_busy_disk(
            &mut ctl,
            &[(Codec::Zstd(1), q1, 700e6), (Codec::Lz4, ql, 1.15e9)],
            330e6,
        );
        let (mut zstd1, mut lz4, n) = (0u32, 0u32, 100);
        for i in 0..n {
            // The disk busy all the time.
            let t = 0.05 + f64::from(i) * 0.005;
            ctl.written(t, 1_650_000, 0.005);
            let d = ctl.decide(t, (chunk, 0), 0.95, 60);
            assert_eq!(
                (d.codec, d.reason),
                (Codec::Zstd(1), Reason::Burst),
                "at {t}"
            );
            let d = ctl.at_compressor(t, d, chunk, 0.9, 0.95);
            assert_eq!(d.reason, Reason::Burst, "at {t}");
            match d.codec {
                Codec::Zstd(1) => zstd1 += 1,
                Codec::Lz4 => lz4 += 1,
                other => panic!("{other} at {t}"),
            }
        }
        // The share that meets both limits with the margin (`mix`): 81.6 % at zstd:1. Dealt
        // in turn, 100 chunks give it within one.
        let z = f64::from(zstd1);
        assert!((z - 81.6).abs() <= 1.0, "{zstd1} at zstd:1, {lz4} at lz4");
        let f = z / f64::from(n);
        let stored = 330e6 / (f * q1 + (1.0 - f) * ql);
        let (alone_zstd1, alone_lz4) = (700e6 / (1.0 + MARGIN), 330e6 / ql);
        assert!(
            stored > alone_zstd1.max(alone_lz4) * 1.02,
            "the mix stores {stored:.0} B/s, zstd:1 alone {alone_zstd1:.0}, lz4 alone {alone_lz4:.0}"
        );
    }

    #[test]
    fn a_burst_chunk_takes_the_rung_known_best_when_a_compressor_takes_it() {
        // Decided on a disk measured at 155 MB/s (a recording's first writes), the burst's
        // chunks went to zstd:3, which stores 2 % more where the disk is the limit. By the
        // time a compressor takes them the disk is known to take 310 MB/s, which zstd:3's
        // 450 MB/s cannot feed: most chunks take zstd:1 then (the rest zstd:3, in the mix
        // that keeps both the compressor and the disk busy).
        let ladder = CodecLadder::parse("zstd:3,zstd:1").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 64);
        warm_disk(&mut ctl);
        let chunk = 1 << 22;
        let out3 = (chunk as f64 * 0.47) as usize;
        let out1 = (chunk as f64 * 0.48) as usize;
        ctl.compressed(
            0.0,
            Codec::Zstd(3),
            (chunk, out3),
            chunk as f64 / 450e6,
            0.0094,
        );
        ctl.compressed(
            0.0,
            Codec::Zstd(1),
            (chunk, out1),
            chunk as f64 / 1.1e9,
            0.0038,
        );
        ctl.written(0.0, 1 << 21, (1 << 21) as f64 / 155e6);
        let planned = ctl.decide(0.01, (chunk, 0), 0.95, 60);
        assert_eq!(
            (planned.codec, planned.reason),
            (Codec::Zstd(3), Reason::Burst)
        );
        // 1.2 GB/s offered (a chunk every 3.5 ms), the disk busy all the time at 310 MB/s.
        let mut t = 0.01;
        for _ in 0..50 {
            t += 0.0035;
            ctl.written(t, 1_085_000, 0.0035);
            ctl.decide(t, (chunk, 0), 0.95, 60);
        }
        let taken: Vec<Decision> = (0..10)
            .map(|_| ctl.at_compressor(t, planned, chunk, 0.9, 0.95))
            .collect();
        assert!(taken.iter().all(|d| d.reason == Reason::Burst), "{taken:?}");
        let zstd1 = taken.iter().filter(|d| d.codec == Codec::Zstd(1)).count();
        assert!(zstd1 >= 6, "{taken:?}");
    }

    #[test]
    fn a_mix_that_stores_next_to_nothing_more_leaves_the_compressors_their_time() {
        // zstd:1 measured at its fastest (1.07 GB/s, q 0.479) overfeeds a 330 MB/s disk;
        // zstd:3 (257 MB/s, q 0.477) would use the spare time: 13 % of the chunks, for 0.05 %
        // more stored on paper, and 17 % short of the disk if zstd:1 really does 700 MB/s.
        // Within `BURST_TIE` the cheaper option wins: every chunk at zstd:1.
        let ladder = CodecLadder::parse("zstd:3,zstd:1").unwrap();
        let mut ctl = LadderController::new(ladder, 1, 64);
        let chunk = 1 << 22;
        timed_on_a_busy_disk(
            &mut ctl,
            &[
                (Codec::Zstd(3), 0.477, 257e6),
                (Codec::Zstd(1), 0.479, 1.066e9),
            ],
            330e6,
        );
        for i in 0..100 {
            let t = 0.05 + f64::from(i) * 0.005;
            ctl.written(t, 1_650_000, 0.005);
            let d = ctl.decide(t, (chunk, 0), 0.95, 60);
            let d = ctl.at_compressor(t, d, chunk, 0.9, 0.95);
            assert_eq!(
                (d.codec, d.reason),
                (Codec::Zstd(1), Reason::Burst),
                "at {t}"
            );
        }
    }
}
