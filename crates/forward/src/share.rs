//! A per-exporter share of the staging pool.
//!
//! Every exporter a collector socket hears fills the same staging pool, so without a rule
//! one exporter's flood fills it and every exporter loses packets as the store's
//! `staging_full`. The rule (max-min fairness, computed every [`TICK`]):
//!
//! 1. Each exporter address's *rate* is the bytes its packets take in staging over the last
//!    second; the pool's *drain* is the bytes it handed on over the last three seconds, per
//!    second.
//! 2. The fair *share* is the water level `L` with `Σ min(rate_i, L) = capacity`, where the
//!    capacity is the drain; in the first three seconds of pressure (when the drain of the
//!    calm before still counts) it is at least what the exporters send with the heaviest
//!    counted at the second heaviest's rate, so then only the heaviest is above its share.
//! 3. While the pool is more than [`PRESSURE_FILL`] full, every message of an exporter whose
//!    rate is above `L` is shed (counted as its own loss, not stored); below that fill, with
//!    a single exporter present (one that sent any message in the last 10 s), or when every
//!    rate fits the capacity, nothing is.
//!
//! The capture loop pays one map lookup and two additions per message; the share is
//! recomputed once per tick, off the per-message path.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The pool's fill above which exporters over their share are shed: below it the pool
/// absorbs bursts for everyone; above it the rest of the pool is headroom for the
/// exporters within their share.
pub const PRESSURE_FILL: f64 = 0.5;
/// How often rates, drain and share are brought up to date.
pub const TICK: Duration = Duration::from_millis(100);
/// Ticks in the window exporters' rates are measured over (one second).
const RATE_TICKS: usize = 10;
/// Ticks in the window the drain is measured over (three seconds): a pool drains in steps
/// (a writer frees the segments of several chunks at once, when its buffer goes out), and a
/// second can hold none.
const DRAIN_TICKS: usize = 30;
/// Pressure episodes younger than the drain window use the floor capacity (see the module
/// comment).
const YOUNG_PRESSURE: Duration = Duration::from_secs(3);
/// An exporter's shedding episode ends (and is logged as ended) after this long unshed.
const EPISODE_QUIET: Duration = Duration::from_secs(5);
/// An exporter that sent any message (templates, statistics) this recently is present: it
/// counts for a share (of zero bytes while it sends no packets), so a flood that is alone
/// for a moment still leaves it the headroom.
const PRESENT: Duration = Duration::from_secs(10);
/// Exporter addresses tracked; the ledger's caps admit fewer, so this only guards the map.
const TRACKED: usize = 4096;
/// Bytes a pcapng enhanced packet block adds to a packet's data (header and trailer).
const RECORD_OVERHEAD: u64 = 32;

/// The bytes a packet of `caplen` captured octets takes in staging (a pcapng enhanced
/// packet block without options, padded to 4 octets).
pub fn staged_len(caplen: usize) -> u64 {
    RECORD_OVERHEAD + caplen.next_multiple_of(4) as u64
}

/// The max-min fair share of `capacity` among `rates`: the level `L` such that
/// `Σ min(rate, L) = capacity`, or `None` when every rate fits (nobody is above a share).
pub fn water_level(rates: &[f64], capacity: f64) -> Option<f64> {
    let mut sorted = rates.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut rest = capacity.max(0.0);
    for (i, &r) in sorted.iter().enumerate() {
        let even = rest / (sorted.len() - i) as f64;
        if r > even {
            return Some(even);
        }
        rest -= r;
    }
    None
}

/// What all exporters send with the heaviest counted at the second heaviest's rate: the
/// capacity below which the share would cut into exporters other than the heaviest.
fn all_but_heaviest(rates: &[f64]) -> f64 {
    let mut top = [0.0f64; 2];
    for &r in rates {
        if r > top[0] {
            top = [r, top[0]];
        } else if r > top[1] {
            top[1] = r;
        }
    }
    rates.iter().map(|r| r.min(top[1])).sum()
}

fn ticks_in(d: Duration) -> u64 {
    (d.as_nanos() / TICK.as_nanos()) as u64
}

/// Bytes per tick over the last `N` ticks.
#[derive(Debug, Clone)]
struct Window<const N: usize> {
    ticks: [u64; N],
    at: usize,
}

impl<const N: usize> Default for Window<N> {
    fn default() -> Self {
        Window {
            ticks: [0; N],
            at: 0,
        }
    }
}

impl<const N: usize> Window<N> {
    fn add(&mut self, n: u64) {
        self.ticks[self.at] += n;
    }

    /// Bytes per second over the window.
    fn rate(&self) -> f64 {
        self.ticks.iter().sum::<u64>() as f64 / (N as f64 * TICK.as_secs_f64())
    }

    fn advance(&mut self, ticks: u64) {
        for _ in 0..ticks.min(N as u64) {
            self.at = (self.at + 1) % N;
            self.ticks[self.at] = 0;
        }
    }

    fn is_empty(&self) -> bool {
        self.ticks.iter().all(|&t| t == 0)
    }
}

#[derive(Debug, Default)]
struct Exporter {
    window: Window<RATE_TICKS>,
    /// The tick of its last message.
    seen_tick: u64,
    /// Above the share at the last tick.
    over: bool,
    /// A shedding episode is open: since its first shed message, packets shed, and the
    /// tick of the last.
    episode: Option<Episode>,
}

#[derive(Debug, Clone, Copy)]
struct Episode {
    packets: u64,
    last_tick: u64,
}

/// What to do with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Store,
    /// Shed: `first` when it opens the exporter's episode (to log it once).
    Shed {
        first: bool,
    },
}

/// The share rule's state for one staging pool (one collector source).
#[derive(Debug, Default)]
pub struct FairShare {
    exporters: HashMap<IpAddr, Exporter>,
    drain: Window<DRAIN_TICKS>,
    drained_before: Option<u64>,
    next_tick: Option<Instant>,
    ticks: u64,
    /// Some message (or tick) saw the pool over [`PRESSURE_FILL`] since the last tick.
    saw_pressure: bool,
    /// When the current pressure episode began, and when pressure was last seen.
    pressure: Option<(Instant, Instant)>,
    /// The share at the last tick, in bytes per second (`None`: nobody above one).
    share: Option<f64>,
}

impl FairShare {
    pub fn new() -> FairShare {
        FairShare::default()
    }

    /// The share at the last tick (bytes per second), if any exporter was above it.
    pub fn share(&self) -> Option<f64> {
        self.share
    }

    /// Decides one message of `packets` packets taking `bytes` in staging from `ip`, with
    /// the pool `fill` full now.
    pub fn admit(&mut self, ip: IpAddr, bytes: u64, packets: u64, fill: f64) -> Admission {
        let pressure = fill > PRESSURE_FILL;
        self.saw_pressure |= pressure;
        let tracked = self.exporters.len() < TRACKED || self.exporters.contains_key(&ip);
        if !tracked {
            return Admission::Store;
        }
        let e = self.exporters.entry(ip).or_default();
        e.window.add(bytes);
        e.seen_tick = self.ticks;
        if !(pressure && e.over) {
            return Admission::Store;
        }
        let first = e.episode.is_none();
        let episode = e.episode.get_or_insert(Episode {
            packets: 0,
            last_tick: self.ticks,
        });
        episode.packets += packets;
        episode.last_tick = self.ticks;
        Admission::Shed { first }
    }

    /// Brings rates, drain and share up to date when a tick is due (call it often, e.g.
    /// once per batch of messages; it returns at once between ticks).
    pub fn tick(&mut self, now: Instant, fill: f64, drained_bytes: u64) {
        let due = *self.next_tick.get_or_insert(now + TICK);
        if now < due {
            return;
        }
        let elapsed = 1 + ((now - due).as_nanos() / TICK.as_nanos()) as u64;
        self.next_tick = Some(due + TICK * elapsed as u32);
        self.ticks += elapsed;
        let before = self.drained_before.replace(drained_bytes);
        self.drain
            .add(drained_bytes.saturating_sub(before.unwrap_or(drained_bytes)));
        self.note_pressure(now, fill);
        self.update_share(now);
        self.end_quiet_episodes();
        self.drain.advance(elapsed);
        for e in self.exporters.values_mut() {
            e.window.advance(elapsed);
        }
        // Exporters that went quiet are forgotten (their episodes have ended).
        let (ticks, present) = (self.ticks, ticks_in(PRESENT));
        self.exporters.retain(|_, e| {
            !e.window.is_empty() || e.episode.is_some() || ticks - e.seen_tick < present
        });
    }

    fn note_pressure(&mut self, now: Instant, fill: f64) {
        let seen = std::mem::take(&mut self.saw_pressure) || fill > PRESSURE_FILL;
        self.pressure = match self.pressure {
            _ if !seen => self
                .pressure
                .filter(|&(_, last)| now - last < YOUNG_PRESSURE),
            Some((since, _)) => Some((since, now)),
            None => Some((now, now)),
        };
    }

    fn update_share(&mut self, now: Instant) {
        let rates: Vec<f64> = self.exporters.values().map(|e| e.window.rate()).collect();
        let drain = self.drain.rate();
        let young = self
            .pressure
            .is_none_or(|(since, _)| now - since < YOUNG_PRESSURE);
        let capacity = if young {
            drain.max(all_but_heaviest(&rates))
        } else {
            drain
        };
        // A single exporter has the pool to itself: its bursts may fill it, as in `record`.
        self.share = if rates.len() < 2 || rates.iter().all(|&r| r == 0.0) {
            None
        } else {
            water_level(&rates, capacity)
        };
        for e in self.exporters.values_mut() {
            e.over = self.share.is_some_and(|s| e.window.rate() > s);
        }
    }

    fn end_quiet_episodes(&mut self) {
        let quiet_ticks = ticks_in(EPISODE_QUIET);
        for (ip, e) in &mut self.exporters {
            if let Some(ep) = e.episode {
                if self.ticks - ep.last_tick >= quiet_ticks {
                    tracing::info!(
                        "collector: {ip} is no longer shed; {} of its packets were shed in this episode (counted as its own, `shed`)",
                        ep.packets
                    );
                    e.episode = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn water_level_is_max_min_fair() {
        // Everything fits: nobody is above a share.
        assert_eq!(water_level(&[1.0, 2.0], 3.0), None);
        assert_eq!(water_level(&[], 0.0), None);
        // The small one keeps its rate, the flood gets the rest.
        assert_eq!(water_level(&[16.0, 0.25], 4.0), Some(3.75));
        // Two heavy ones split what the light one leaves.
        assert_eq!(water_level(&[10.0, 0.5, 8.0], 7.0), Some(3.25));
        // Equal demands over the capacity: an equal split, all above it.
        assert_eq!(water_level(&[4.0, 4.0], 4.0), Some(2.0));
        assert_eq!(all_but_heaviest(&[16.0, 0.25, 3.0]), 0.25 + 3.0 + 3.0);
        assert_eq!(all_but_heaviest(&[16.0]), 0.0);
    }

    const FLOOD: [u8; 4] = [198, 18, 53, 1];
    const REAL: [u8; 4] = [198, 18, 51, 1];

    /// A share driven tick by tick: per tick the flood offers `flood` bytes and the real
    /// exporter `real` (ten messages each), the pool drains `drain` bytes, and its fill is
    /// `fill(tick)`.
    struct Sim {
        share: FairShare,
        t0: Instant,
        tick: u64,
        drained: u64,
    }

    impl Sim {
        fn new() -> Sim {
            Sim {
                share: FairShare::new(),
                t0: Instant::now(),
                tick: 0,
                drained: 0,
            }
        }

        /// Bytes stored and shed, per exporter (flood first).
        fn run(
            &mut self,
            ticks: u64,
            (flood, real, drain): (u64, u64, u64),
            fill: impl Fn(u64) -> f64,
        ) -> [[u64; 2]; 2] {
            let mut out = [[0u64; 2]; 2];
            for _ in 0..ticks {
                let t = self.tick;
                self.tick += 1;
                self.drained += drain;
                let now = self.t0 + TICK * t as u32;
                self.share.tick(now, fill(t), self.drained);
                for (k, (ip, bytes)) in [(FLOOD, flood), (REAL, real)].into_iter().enumerate() {
                    // Zero bytes: the exporter sends nothing at all.
                    for _ in 0..if bytes > 0 { 10 } else { 0 } {
                        let a = self.share.admit(IpAddr::from(ip), bytes / 10, 1, fill(t));
                        out[k][usize::from(a != Admission::Store)] += bytes / 10;
                    }
                }
            }
            out
        }
    }

    #[test]
    fn without_pressure_nothing_is_shed() {
        let out = Sim::new().run(50, (1_000_000, 10_000, 100), |_| 0.5);
        assert_eq!(out[0][1] + out[1][1], 0, "{out:?}");
    }

    #[test]
    fn under_pressure_the_flood_is_shed_and_the_exporter_within_its_share_never() {
        let mut sim = Sim::new();
        // Calm: both below the drain.
        sim.run(20, (10_000, 10_000, 20_000), |_| 0.1);
        // A flood of 1.6 MB per tick against a drain of 400 kB per tick; the pool stays
        // over half full for five seconds.
        let out = sim.run(50, (1_600_000, 16_000, 400_000), |t| {
            if t % 3 == 0 {
                0.4
            } else {
                0.75
            }
        });
        assert_eq!(out[1][1], 0, "the real exporter lost nothing: {out:?}");
        assert!(out[0][1] > out[0][0], "the flood was mostly shed: {out:?}");
        // After three seconds of pressure the share is the drain less the real exporter's
        // rate.
        let s = sim.share.share().expect("the flood is above its share");
        assert!((s - (4_000_000.0 - 160_000.0)).abs() < 1.0, "{s}");
        // The real exporter falls silent: for 10 s it is still present (with a share of
        // nothing) and the flood is shed; then the flood is alone, and the pool its own.
        let out = sim.run(100, (1_600_000, 0, 400_000), |_| 0.9);
        let alone = sim.run(10, (1_600_000, 0, 400_000), |_| 0.9);
        assert!(out[0][1] > out[0][0], "{out:?}");
        assert_eq!(alone[0][1], 0, "{alone:?}");
    }

    /// In the first second of pressure the drain still counts the calm before it; the
    /// floor keeps every exporter but the heaviest within its share.
    #[test]
    fn young_pressure_sheds_only_the_heaviest() {
        let mut sim = Sim::new();
        sim.run(20, (10_000, 10_000, 20_000), |_| 0.1);
        // The drain collapses (a stalled disk) as the flood starts and the pool fills: by
        // the drain alone both would be above their share.
        let out = sim.run(6, (1_600_000, 16_000, 1_000), |_| 0.9);
        assert_eq!(out[1][1], 0, "{out:?}");
        assert!(out[0][1] > 0, "{out:?}");
    }

    #[test]
    fn an_episode_opens_once_and_ends_after_a_quiet_spell() {
        let mut share = FairShare::new();
        let t0 = Instant::now();
        let flood = IpAddr::from(FLOOD);
        let mut firsts = 0;
        for t in 0..200u64 {
            share.tick(t0 + TICK * t as u32, 0.9, 400_000 * t);
            // The flood for 10 s, then quiet for 5 s, then again.
            if (100..150).contains(&t) {
                continue;
            }
            for ip in [flood, IpAddr::from(REAL)] {
                let bytes = if ip == flood { 1_600_000 } else { 1_000 };
                if let Admission::Shed { first: true } = share.admit(ip, bytes, 1, 0.9) {
                    firsts += 1;
                }
            }
        }
        assert_eq!(firsts, 2, "one episode before the quiet spell, one after");
    }
}
