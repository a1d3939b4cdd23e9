//! Synthetic traffic generated in memory at full speed, for measuring the recorder without
//! a network card. Every packet is a well-formed Ethernet/IPv4/UDP frame between addresses
//! of the benchmarking range 198.18.0.0/15; its payload is half random, half zeros (so
//! compressors see the ~2:1 ratio the papers measured on real traces), and it carries a
//! sequence number, so no two packets are the same.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use tapdeck_pcap::{Interface, Packet};

use crate::{PacketSink, PacketSource, Poll, SourceCounters, SourceError};

/// Random bytes the payloads are cut from: larger than any chunk, so a compressor never
/// finds the same random run twice within one chunk.
const POOL_LEN: usize = 16 << 20;
const HEADERS: usize = 14 + 20 + 8;
const BATCH: usize = 1024;
const MAX_FRAME: usize = 1514;

/// The packet-size profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyntheticProfile {
    /// Minimum-size frames (64 bytes captured).
    Small,
    /// Full-size Ethernet frames (1514 bytes captured).
    Full,
    /// A realistic mix with peaks at 40–64, 576 and 1420–1500 bytes.
    Mix,
}

/// A profile name that is none of 64, 1514 or mix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown synthetic profile '{0}': use 64, 1514 or mix")]
pub struct UnknownProfile(pub String);

impl std::str::FromStr for SyntheticProfile {
    type Err = UnknownProfile;
    fn from_str(s: &str) -> Result<Self, UnknownProfile> {
        match s {
            "64" | "small" => Ok(SyntheticProfile::Small),
            "1514" | "full" => Ok(SyntheticProfile::Full),
            "mix" | "imix" => Ok(SyntheticProfile::Mix),
            _ => Err(UnknownProfile(s.into())),
        }
    }
}

impl SyntheticProfile {
    /// Frame sizes to cycle through (the first few thousand draws of the distribution).
    fn sizes(self, rng: &mut SmallRng) -> Vec<u16> {
        match self {
            SyntheticProfile::Small => vec![64],
            SyntheticProfile::Full => vec![MAX_FRAME as u16],
            SyntheticProfile::Mix => (0..4096)
                .map(|_| match rng.gen_range(0..100) {
                    // Minimum frames carry at least the 42 header bytes plus a sequence number.
                    0..=49 => rng.gen_range(54..=64),
                    50..=64 => 576,
                    65..=69 => rng.gen_range(65..1420),
                    _ => rng.gen_range(1420..=1500),
                })
                .collect(),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            SyntheticProfile::Small => "64-byte frames",
            SyntheticProfile::Full => "1514-byte frames",
            SyntheticProfile::Mix => "mixed-size frames",
        }
    }
}

/// One phase of a rate schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    pub pps: f64,
    pub seconds: f64,
}

/// A rate schedule such as `10000:5,1200000:10,10000:5` (packets per second:seconds).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad rate schedule '{0}': use PPS:SECONDS[,PPS:SECONDS...], e.g. 10000:5,1200000:10,10000:5"
)]
pub struct BadSchedule(pub String);

/// Parses `PPS:SECONDS[,PPS:SECONDS...]`; rates ≥ 0, times > 0 and finite.
pub fn parse_schedule(spec: &str) -> Result<Vec<Phase>, BadSchedule> {
    let bad = || BadSchedule(spec.into());
    spec.split(',')
        .map(|part| {
            let (pps, secs) = part.trim().split_once(':').ok_or_else(bad)?;
            let pps: f64 = pps.trim().parse().map_err(|_| bad())?;
            let seconds: f64 = secs.trim().parse().map_err(|_| bad())?;
            if !(pps >= 0.0 && pps.is_finite() && seconds > 0.0 && seconds.is_finite()) {
                return Err(bad());
            }
            Ok(Phase { pps, seconds })
        })
        .collect()
}

/// Where a batch's timestamps come from.
#[derive(Clone, Copy)]
enum Times {
    /// Unpaced: the clock at the batch, a nanosecond apart.
    Now(u64),
    /// Paced: the schedule's due times from this start.
    Scheduled(u64),
}

pub struct SyntheticSource {
    profile: SyntheticProfile,
    interfaces: [Interface; 1],
    pool: Vec<u8>,
    sizes: Vec<u16>,
    frame: [u8; MAX_FRAME],
    sent: u64,
    limit: Option<u64>,
    pool_pos: usize,
    /// Packets per second to offer, phase by phase (seconds; the last may be endless), or
    /// as fast as possible.
    schedule: Option<Vec<Phase>>,
    started: Option<(Instant, u64)>,
}

impl SyntheticSource {
    /// A source that stops after `limit` packets (never, if `None`). `seed` makes the
    /// traffic reproducible.
    pub fn new(profile: SyntheticProfile, limit: Option<u64>, seed: u64) -> SyntheticSource {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut pool = vec![0u8; POOL_LEN + MAX_FRAME];
        rng.fill_bytes(&mut pool);
        let sizes = profile.sizes(&mut rng);
        let mut frame = [0u8; MAX_FRAME];
        frame[..14].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
        let ip = &mut frame[14..34];
        ip[0] = 0x45;
        ip[8] = 64; // TTL
        ip[9] = 17; // UDP
        ip[12..16].copy_from_slice(&[198, 18, 0, 1]);
        ip[16..20].copy_from_slice(&[198, 19, 0, 1]);
        let interfaces = [Interface {
            linktype: 1,
            snaplen: 65535,
            name: Some("synthetic".into()),
            description: Some(format!("tapdeck synthetic {}", profile.describe())),
        }];
        SyntheticSource {
            profile,
            interfaces,
            pool,
            sizes,
            frame,
            sent: 0,
            limit,
            pool_pos: 0,
            schedule: None,
            started: None,
        }
    }

    /// Offers packets at `pps` per second (on a fixed schedule, so a slow consumer shows
    /// up as drops rather than as a slower offer), instead of as fast as possible.
    pub fn with_rate(mut self, pps: Option<f64>) -> SyntheticSource {
        self.schedule = pps.filter(|r| *r > 0.0).map(|pps| {
            vec![Phase {
                pps,
                seconds: f64::INFINITY,
            }]
        });
        self
    }

    /// Offers packets phase by phase (e.g. idle, a burst, idle again) and ends after the
    /// last phase; a phase of 0 packets per second offers nothing for its time.
    pub fn with_schedule(mut self, phases: Vec<Phase>) -> SyntheticSource {
        let total: f64 = phases.iter().map(|p| p.pps * p.seconds).sum();
        if total.is_finite() {
            let packets = total.floor() as u64;
            self.limit = Some(self.limit.map_or(packets, |l| l.min(packets)));
        }
        self.schedule = Some(phases);
        self
    }

    /// Writes packet number `seq` of `len` bytes into the frame buffer.
    #[inline]
    fn build(&mut self, seq: u64, len: usize) {
        let f = &mut self.frame;
        let ip_len = (len - 14) as u16;
        f[16..18].copy_from_slice(&ip_len.to_be_bytes());
        f[18..20].copy_from_slice(&(seq as u16).to_be_bytes()); // IP id
        f[24..26].copy_from_slice(&[0, 0]);
        let checksum = ipv4_checksum(&f[14..34]);
        f[24..26].copy_from_slice(&checksum.to_be_bytes());
        // 64 flows per direction pair, so flow-hash tests see more than one flow.
        let sport = 1024 + (seq % 64) as u16;
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&9u16.to_be_bytes()); // discard
        f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
        f[40..42].copy_from_slice(&[0, 0]); // no UDP checksum (allowed for IPv4)
        let payload = &mut f[HEADERS..len];
        let n = payload.len();
        let seq_bytes = seq.to_be_bytes();
        let k = n.min(8);
        payload[..k].copy_from_slice(&seq_bytes[8 - k..]);
        let random_end = k.max(n / 2);
        payload[k..random_end]
            .copy_from_slice(&self.pool[self.pool_pos..self.pool_pos + random_end - k]);
        payload[random_end..].fill(0);
        self.pool_pos += random_end - k;
        if self.pool_pos >= POOL_LEN {
            self.pool_pos -= POOL_LEN;
        }
    }
}

/// When packet `n` of a schedule is due, in seconds from its start; `None` past its end.
fn due(schedule: &[Phase], n: u64) -> Option<f64> {
    let (mut start, mut before) = (0.0, 0.0);
    for phase in schedule {
        let here = phase.pps * phase.seconds;
        if (n as f64) < before + here {
            return Some(start + (n as f64 - before) / phase.pps);
        }
        before += here;
        start += phase.seconds;
    }
    None
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl PacketSource for SyntheticSource {
    fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    fn poll<K: PacketSink>(&mut self, sink: &mut K) -> Result<Poll, SourceError> {
        let remaining = self.limit.map_or(u64::MAX, |l| l - self.sent);
        if remaining == 0 {
            return Ok(Poll::End);
        }
        let batch = remaining.min(BATCH as u64);
        // One clock read per batch; packets within it follow the schedule (or are a
        // nanosecond apart), so time never runs backwards and costs nothing per packet.
        let times = match self.schedule.as_deref() {
            None => Times::Now(now_ns()),
            Some(phases) => {
                let (t0, ns0) = *self
                    .started
                    .get_or_insert_with(|| (Instant::now(), now_ns()));
                let Some(first) = due(phases, self.sent) else {
                    return Ok(Poll::End);
                };
                let first = Duration::from_secs_f64(first);
                let elapsed = t0.elapsed();
                if first > elapsed {
                    std::thread::sleep((first - elapsed).min(Duration::from_millis(50)));
                    return Ok(Poll::Idle);
                }
                Times::Scheduled(ns0)
            }
        };
        for i in 0..batch {
            let seq = self.sent + i;
            let len = usize::from(self.sizes[(seq as usize) % self.sizes.len()]);
            let ts = match (times, self.schedule.as_deref()) {
                (Times::Scheduled(ns0), Some(phases)) => {
                    ns0 + (due(phases, seq).unwrap_or(0.0) * 1e9) as u64
                }
                (Times::Now(ts), _) | (Times::Scheduled(ts), None) => ts + i,
            };
            self.build(seq, len);
            let packet = Packet {
                ts_ns: ts,
                iface: 0,
                orig_len: len as u32,
                flags: None,
                data: &self.frame[..len],
            };
            sink.packet(&packet);
        }
        self.sent += batch;
        Ok(Poll::Delivered)
    }

    fn counters(&self) -> Vec<SourceCounters> {
        vec![SourceCounters {
            seen: self.sent,
            ..Default::default()
        }]
    }

    fn describe(&self) -> String {
        format!("synthetic {}", self.profile.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect(Vec<(u64, Vec<u8>)>);
    impl PacketSink for Collect {
        fn packet(&mut self, p: &Packet<'_>) {
            assert_eq!(p.orig_len as usize, p.data.len());
            self.0.push((p.ts_ns, p.data.to_vec()));
        }
    }

    fn generate(profile: SyntheticProfile, n: u64) -> Vec<(u64, Vec<u8>)> {
        let mut src = SyntheticSource::new(profile, Some(n), 7);
        let mut sink = Collect(Vec::new());
        while src.poll(&mut sink).unwrap() != Poll::End {}
        assert_eq!(src.counters()[0].seen, n);
        sink.0
    }

    #[test]
    fn stops_at_the_limit_with_distinct_packets_in_time_order() {
        let packets = generate(SyntheticProfile::Small, 5000);
        assert_eq!(packets.len(), 5000);
        assert!(packets.windows(2).all(|w| w[0].0 <= w[1].0));
        let distinct: std::collections::HashSet<_> = packets.iter().map(|p| &p.1).collect();
        assert_eq!(distinct.len(), packets.len());
        assert!(packets.iter().all(|p| p.1.len() == 64));
    }

    #[test]
    fn frames_are_valid_ipv4_udp_in_the_benchmark_range() {
        for (_, f) in generate(SyntheticProfile::Mix, 3000) {
            assert_eq!(&f[12..14], &[0x08, 0x00]);
            assert_eq!(ipv4_checksum(&f[14..34]), 0, "header checksum must verify");
            assert_eq!(
                usize::from(u16::from_be_bytes([f[16], f[17]])),
                f.len() - 14
            );
            assert_eq!(
                usize::from(u16::from_be_bytes([f[38], f[39]])),
                f.len() - 34
            );
            assert_eq!((f[26], f[27] & 0xFE), (198, 18));
            assert_eq!((f[30], f[31] & 0xFE), (198, 18));
        }
    }

    #[test]
    fn a_rate_paces_the_offer_and_the_timestamps() {
        let mut src = SyntheticSource::new(SyntheticProfile::Small, Some(20_000), 3)
            .with_rate(Some(100_000.0));
        let mut sink = Collect(Vec::new());
        let start = Instant::now();
        while src.poll(&mut sink).unwrap() != Poll::End {}
        let took = start.elapsed().as_secs_f64();
        assert!(
            (0.15..1.0).contains(&took),
            "20k packets at 100 kpps took {took} s"
        );
        let span = sink.0.last().unwrap().0 - sink.0[0].0;
        assert!(
            (199_000_000..=200_000_000).contains(&span),
            "timestamps span {span} ns"
        );
    }

    #[test]
    fn a_schedule_offers_each_phase_at_its_rate_and_ends() {
        // Idle 0.1 s, a burst of 0.1 s at 100 kpps, 0.1 s at 10 kpps: 10,000 + 1,000 packets.
        let phases = parse_schedule("0:0.1, 100000:0.1, 10000:0.1").unwrap();
        let mut src = SyntheticSource::new(SyntheticProfile::Small, None, 3).with_schedule(phases);
        let mut sink = Collect(Vec::new());
        let start = Instant::now();
        while src.poll(&mut sink).unwrap() != Poll::End {}
        assert!(
            start.elapsed().as_secs_f64() >= 0.2,
            "the source ran ahead of its schedule"
        );
        let t: Vec<u64> = sink.0.iter().map(|p| p.0 - sink.0[0].0).collect();
        assert_eq!(t.len(), 11_000);
        // Each phase's packets are spaced at its rate, and the idle phase offered nothing
        // (the first packet is the burst's, the 10 kpps phase starts 0.1 s after it).
        assert_eq!(t[1] - t[0], 10_000);
        assert_eq!(t[10_000], 100_000_000);
        assert_eq!(t[10_001] - t[10_000], 100_000);
        assert!(t.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn bad_schedules_are_refused() {
        for bad in ["", "100", "100:0", "-1:5", "x:1", "100:inf", "100:1,"] {
            assert!(parse_schedule(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(
            parse_schedule("10:2").unwrap(),
            vec![Phase {
                pps: 10.0,
                seconds: 2.0
            }]
        );
    }

    #[test]
    fn mix_has_the_three_peaks() {
        let sizes: Vec<usize> = generate(SyntheticProfile::Mix, 4096)
            .iter()
            .map(|p| p.1.len())
            .collect();
        let share = |lo, hi| {
            sizes.iter().filter(|&&s| (lo..=hi).contains(&s)).count() as f64 / sizes.len() as f64
        };
        assert!((0.4..0.6).contains(&share(40, 64)), "{}", share(40, 64));
        assert!((0.1..0.2).contains(&share(576, 576)));
        assert!((0.25..0.35).contains(&share(1420, 1500)));
    }

    #[test]
    fn full_frames_compress_about_two_to_one() {
        let bytes: Vec<u8> = generate(SyntheticProfile::Full, 2000)
            .into_iter()
            .flat_map(|p| p.1)
            .collect();
        let compressed = zstd::bulk::compress(&bytes, 1).unwrap();
        let ratio = bytes.len() as f64 / compressed.len() as f64;
        assert!((1.7..2.5).contains(&ratio), "ratio {ratio}");
    }
}
