//! The collector's accounting, per exporter and observation domain: what arrived, what the
//! sequence numbers say went missing on the way, what was refused and why, and the
//! exporter's own counts from its statistics records. Saved in the store as
//! `collector.json`, and read back at start so a restarted collector counts the gap it
//! missed.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use crate::error::ForwardError;

use serde::{Deserialize, Serialize};
use tapdeck_ipfix::{ExporterStats, SequenceCounts, SequenceEvent, SequenceTracker};

pub const LEDGER_FILE: &str = "collector.json";
const LEDGER_VERSION: u32 = 1;

/// Streams (observation domains) one exporter address may have in the ledger.
pub const STREAMS_PER_ADDRESS: usize = 32;
/// Streams in the ledger in all.
pub const STREAMS_TOTAL: usize = 4096;
/// Addresses counted one by one under `not_allowed`, `unreadable` and `refused`; any more are
/// counted together under [`OTHER_ADDRESSES`].
pub const ADDRESSES_COUNTED: usize = 1024;
/// The key that counts the addresses beyond [`ADDRESSES_COUNTED`].
pub const OTHER_ADDRESSES: &str = "other";

/// New state refused for being over a cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Messages of an observation domain over the stream caps (dropped).
    Domains,
    /// Messages whose templates were over the template caps (dropped).
    Templates,
    /// Packets stored under a catch-all interface (over the interface caps).
    Interfaces,
    /// Interface names not kept (over the cap).
    Names,
    /// TLS handshakes that failed (no client certificate, or one no trusted CA signed).
    Handshakes,
    /// Connections over the per-address or total caps (closed at once).
    Connections,
}

/// What was refused for being over a cap, per exporter address.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RefusedCounts {
    pub domains: u64,
    pub templates: u64,
    pub interfaces: u64,
    pub names: u64,
    #[serde(default)]
    pub handshakes: u64,
    #[serde(default)]
    pub connections: u64,
}

impl RefusedCounts {
    fn get(&mut self, r: Refusal) -> &mut u64 {
        match r {
            Refusal::Domains => &mut self.domains,
            Refusal::Templates => &mut self.templates,
            Refusal::Interfaces => &mut self.interfaces,
            Refusal::Names => &mut self.names,
            Refusal::Handshakes => &mut self.handshakes,
            Refusal::Connections => &mut self.connections,
        }
    }
}

/// Counts by address, one by one for the first [`ADDRESSES_COUNTED`] addresses and together
/// for the rest, so that forged source addresses cannot make it grow.
#[derive(Debug, Clone, Default)]
struct ByAddress<T> {
    each: BTreeMap<IpAddr, T>,
    other: Option<T>,
}

impl<T: Default + Clone> ByAddress<T> {
    /// The counts of `ip`, and whether they are new (to log once).
    fn entry(&mut self, ip: IpAddr) -> (&mut T, bool) {
        if self.each.contains_key(&ip) {
            return (self.each.get_mut(&ip).unwrap(), false);
        }
        if self.each.len() < ADDRESSES_COUNTED {
            return (self.each.entry(ip).or_default(), true);
        }
        let new = self.other.is_none();
        (self.other.get_or_insert_with(T::default), new)
    }

    fn to_map(&self) -> BTreeMap<String, T> {
        let mut m: BTreeMap<String, T> = self
            .each
            .iter()
            .map(|(ip, n)| (ip.to_string(), n.clone()))
            .collect();
        if let Some(o) = &self.other {
            m.insert(OTHER_ADDRESSES.into(), o.clone());
        }
        m
    }

    fn load(&mut self, m: BTreeMap<String, T>) {
        for (a, n) in m {
            match a.parse() {
                Ok(ip) if self.each.len() < ADDRESSES_COUNTED => {
                    self.each.insert(ip, n);
                }
                _ => self.other = Some(n),
            }
        }
    }
}

/// The exporter's statistics record, as last received.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExporterCounts {
    pub exporting_process: u32,
    pub start_time_ms: u64,
    pub messages: u64,
    pub records: u64,
    /// Dropped by the exporter's kernel before it read them (ring full).
    pub ignored_packets: u64,
    /// Read by the exporter but not sent (send failures).
    pub not_sent_packets: u64,
    pub observed_packets: u64,
    pub selected_packets: u64,
}

impl From<&ExporterStats> for ExporterCounts {
    fn from(s: &ExporterStats) -> Self {
        ExporterCounts {
            exporting_process: s.exporting_process,
            start_time_ms: s.start_time_ms,
            messages: s.messages,
            records: s.records,
            ignored_packets: s.ignored_packets,
            not_sent_packets: s.not_sent_packets,
            observed_packets: s.observed_packets,
            selected_packets: s.selected_packets,
        }
    }
}

/// One stream: an exporter's address and observation domain.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct StreamLedger {
    pub exporter: String,
    pub domain: u32,
    /// The sequence number expected next (what a restarted collector resumes from).
    pub next_sequence: Option<u32>,
    pub start_time_ms: u64,
    /// Messages counted by sequence number, and their data records.
    pub messages: u64,
    pub records: u64,
    /// Records the sequence numbers say were sent and never arrived (forwarding loss),
    /// including those of messages dropped here for want of a template.
    pub lost: u64,
    pub reordered: u64,
    /// Messages behind the line in no known gap (replayed or repeated): stored all the same.
    pub duplicates: u64,
    pub restarts: u64,
    pub resyncs: u64,
    /// Believed far jumps of the sequence line that were not restarts.
    #[serde(default)]
    pub jumps: u64,
    /// Messages whose sequence number or restart claim did not fit the line and moved
    /// nothing (forged, or a stray): counted here, their records stored all the same.
    #[serde(default)]
    pub anomalies: u64,
    /// Messages dropped: a data set whose template was never seen; malformed.
    pub no_template: u64,
    pub malformed: u64,
    /// Packet reports handed to the store.
    pub packets: u64,
    /// Packet reports shed, not stored: the exporter sent more than its share of the
    /// staging pool while the pool was under pressure (`crate::share`). Its own loss.
    #[serde(default)]
    pub shed: u64,
    /// The exporter's own counts, from its last statistics record.
    pub exporter_counts: Option<ExporterCounts>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LedgerFile {
    pub version: u32,
    pub streams: Vec<StreamLedger>,
    /// Messages from exporters not in --allow, by address.
    pub not_allowed: BTreeMap<String, u64>,
    /// Messages whose header could not even be read (no domain to count them under), and
    /// datagrams longer than the receive buffer, by exporter address.
    pub unreadable: BTreeMap<String, u64>,
    /// New state refused for being over a cap, by exporter address.
    #[serde(default)]
    pub refused: BTreeMap<String, RefusedCounts>,
}

#[derive(Debug, Clone, Default)]
struct Extra {
    no_template: u64,
    malformed: u64,
    packets: u64,
    shed: u64,
    exporter_counts: Option<ExporterCounts>,
    /// Counts of a saved stream that could not be resumed (no expected number).
    carried: SequenceCounts,
    /// A sequence anomaly episode is open (logged at its start); it closes after
    /// [`EPISODE_QUIET`] messages in order.
    episode: bool,
    quiet: u32,
}

/// In-order messages after which a new sequence anomaly is logged again.
const EPISODE_QUIET: u32 = 1000;

/// Sequence tracking and counts for every stream, shared by a collector's sockets.
#[derive(Default)]
pub struct Ledger {
    tracker: SequenceTracker,
    extra: HashMap<(IpAddr, u32), Extra>,
    streams_per_address: HashMap<IpAddr, usize>,
    not_allowed: ByAddress<u64>,
    unreadable: ByAddress<u64>,
    refused: ByAddress<RefusedCounts>,
}

/// Streams are keyed by the exporter's address without its port: a restarted exporter
/// comes back from a new port, and must be recognized as the same stream (its new start
/// time then says it restarted).
fn key(ip: IpAddr) -> SocketAddr {
    SocketAddr::new(ip, 0)
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Continues from a saved ledger (`collector.json` of the store), if there is one.
    pub fn resume_from(path: &Path) -> Result<Ledger, ForwardError> {
        let mut ledger = Ledger::new();
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ledger),
            Err(cause) => {
                return Err(ForwardError::LedgerRead {
                    path: path.into(),
                    cause,
                })
            }
        };
        let file: LedgerFile =
            serde_json::from_slice(&bytes).map_err(|cause| ForwardError::LedgerParse {
                path: path.into(),
                cause,
            })?;
        for s in file.streams {
            let Ok(ip) = s.exporter.parse::<IpAddr>() else {
                continue;
            };
            let counts = SequenceCounts {
                messages: s.messages,
                records: s.records,
                lost: s.lost,
                reordered: s.reordered,
                duplicates: s.duplicates,
                restarts: s.restarts,
                resyncs: s.resyncs,
                jumps: s.jumps,
                anomalies: s.anomalies,
            };
            let mut extra = Extra {
                no_template: s.no_template,
                malformed: s.malformed,
                packets: s.packets,
                shed: s.shed,
                exporter_counts: s.exporter_counts,
                ..Extra::default()
            };
            match s.next_sequence {
                Some(next) => {
                    ledger
                        .tracker
                        .resume(key(ip), s.domain, next, s.start_time_ms, counts)
                }
                None => extra.carried = counts,
            }
            if ledger.admit(ip, s.domain).is_ok() {
                ledger.extra.insert((ip, s.domain), extra);
            }
        }
        ledger.not_allowed.load(file.not_allowed);
        ledger.unreadable.load(file.unreadable);
        ledger.refused.load(file.refused);
        Ok(ledger)
    }

    /// Counts a message by its sequence number; see [`SequenceTracker::observe`]. The
    /// answer is for counting and logging: true in the second place when the event opens a
    /// sequence anomaly episode (to log it once).
    pub fn observe(
        &mut self,
        ip: IpAddr,
        domain: u32,
        sequence: u32,
        records: u32,
        start_time_ms: Option<u64>,
    ) -> (SequenceEvent, bool) {
        let x = self.extra.entry((ip, domain)).or_default();
        let event = self
            .tracker
            .observe(key(ip), domain, sequence, Some(records), start_time_ms);
        let log = if event.is_anomaly() {
            x.quiet = 0;
            !std::mem::replace(&mut x.episode, true)
        } else {
            x.quiet = x.quiet.saturating_add(1);
            if x.quiet >= EPISODE_QUIET {
                x.episode = false;
            }
            false
        };
        (event, log)
    }

    /// Makes room for the stream (ip, domain) if it is new and under the caps
    /// ([`STREAMS_PER_ADDRESS`], [`STREAMS_TOTAL`]); the error names the cap.
    pub fn admit(&mut self, ip: IpAddr, domain: u32) -> Result<(), &'static str> {
        if self.extra.contains_key(&(ip, domain)) {
            return Ok(());
        }
        let n = self.streams_per_address.get(&ip).copied().unwrap_or(0);
        if n >= STREAMS_PER_ADDRESS {
            return Err("the cap of 32 observation domains per exporter address");
        }
        if self.extra.len() >= STREAMS_TOTAL {
            return Err("the cap of 4096 ledger streams in all");
        }
        self.streams_per_address.insert(ip, n + 1);
        self.extra.insert((ip, domain), Extra::default());
        Ok(())
    }

    /// Counts one refusal; true the first time for this address and kind (to log it once).
    pub fn refused(&mut self, ip: IpAddr, what: Refusal) -> bool {
        self.refused_n(ip, what, 1)
    }

    pub fn refused_n(&mut self, ip: IpAddr, what: Refusal, n: u64) -> bool {
        let (c, _) = self.refused.entry(ip);
        let v = c.get(what);
        let first = *v == 0;
        *v += n;
        first
    }

    /// Returns true the first time this exporter is refused (to log it once).
    pub fn not_allowed(&mut self, ip: IpAddr) -> bool {
        let (n, _) = self.not_allowed.entry(ip);
        *n += 1;
        *n == 1
    }

    /// Returns true the first time for this stream (to log it once).
    pub fn malformed(&mut self, ip: IpAddr, domain: Option<u32>) -> bool {
        match domain {
            Some(d) => {
                let e = self.extra.entry((ip, d)).or_default();
                e.malformed += 1;
                e.malformed == 1
            }
            None => {
                let (n, _) = self.unreadable.entry(ip);
                *n += 1;
                *n == 1
            }
        }
    }

    /// Returns true the first time for this stream (to log it once).
    pub fn no_template(&mut self, ip: IpAddr, domain: u32) -> bool {
        let e = self.extra.entry((ip, domain)).or_default();
        e.no_template += 1;
        e.no_template == 1
    }

    pub fn exporter_stats(&mut self, ip: IpAddr, domain: u32, s: &ExporterStats) {
        self.extra.entry((ip, domain)).or_default().exporter_counts = Some(s.into());
    }

    pub fn stored(&mut self, ip: IpAddr, domain: u32, packets: u64) {
        self.extra.entry((ip, domain)).or_default().packets += packets;
    }

    /// Packets shed for being over the exporter's share of the staging pool.
    pub fn shed(&mut self, ip: IpAddr, domain: u32, packets: u64) {
        self.extra.entry((ip, domain)).or_default().shed += packets;
    }

    /// Everything, as saved in the store (streams sorted by exporter and domain).
    pub fn snapshot(&self) -> LedgerFile {
        let mut streams: Vec<StreamLedger> = self
            .extra
            .iter()
            .map(|(&(ip, domain), x)| {
                let s = self.tracker.stream(key(ip), domain);
                let c = s.map(|s| s.counts).unwrap_or_default();
                let k = x.carried;
                StreamLedger {
                    exporter: ip.to_string(),
                    domain,
                    next_sequence: s.and_then(|s| s.next),
                    start_time_ms: s.map_or(0, |s| s.start_time_ms),
                    messages: c.messages + k.messages,
                    records: c.records + k.records,
                    lost: c.lost + k.lost,
                    reordered: c.reordered + k.reordered,
                    duplicates: c.duplicates + k.duplicates,
                    restarts: c.restarts + k.restarts,
                    resyncs: c.resyncs + k.resyncs,
                    jumps: c.jumps + k.jumps,
                    anomalies: c.anomalies + k.anomalies,
                    no_template: x.no_template,
                    malformed: x.malformed,
                    packets: x.packets,
                    shed: x.shed,
                    exporter_counts: x.exporter_counts,
                }
            })
            .collect();
        streams.sort_by(|a, b| (&a.exporter, a.domain).cmp(&(&b.exporter, b.domain)));
        LedgerFile {
            version: LEDGER_VERSION,
            streams,
            not_allowed: self.not_allowed.to_map(),
            unreadable: self.unreadable.to_map(),
            refused: self.refused.to_map(),
        }
    }

    /// Writes the snapshot to `path` (under a temporary name first, so a reader never sees
    /// half of it).
    pub fn save(&self, path: &Path) -> Result<(), ForwardError> {
        self.snapshot().save(path)
    }
}

impl LedgerFile {
    /// Writes this snapshot to `path` durably: under a temporary name, synced, renamed into
    /// place and the directory synced, so a reader never sees half of it and a power loss
    /// leaves the old ledger or the new one.
    pub fn save(&self, path: &Path) -> Result<(), ForwardError> {
        let json = serde_json::to_vec_pretty(self).expect("ledger serializes");
        let tmp = path.with_extension("json.partial");
        write_durably(&tmp, &json, path).map_err(|cause| ForwardError::LedgerWrite {
            path: path.into(),
            cause,
        })
    }

    /// Packets the ledger says were handed to the store, in all streams.
    pub fn packets(&self) -> u64 {
        self.streams.iter().map(|s| s.packets).sum()
    }
}

fn write_durably(tmp: &Path, bytes: &[u8], dest: &Path) -> std::io::Result<()> {
    let mut f = std::fs::File::create(tmp)?;
    std::io::Write::write_all(&mut f, bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(tmp, dest)?;
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

/// Snapshots of the ledger waiting for the store to hold what they count durably.
///
/// The ledger on disk never counts a packet the store could lose: each snapshot is taken
/// with the packets delivered to the recorder so far, and may be saved only once the
/// recorder has that many packets on disk and synced (or counted as dropped). So after a
/// `kill -9` or a power loss the saved ledger says at most what the store holds; what was
/// stored after the last save is counted as lost by the restarted collector (its sequence
/// numbers are past the saved ones).
#[derive(Default)]
pub struct DurableSaves {
    /// (packets delivered when taken, snapshot), oldest first.
    pending: std::collections::VecDeque<(u64, LedgerFile)>,
}

/// Snapshots kept waiting at most (the oldest go first: a later one replaces them).
const PENDING_SNAPSHOTS: usize = 64;

impl DurableSaves {
    pub fn new() -> DurableSaves {
        DurableSaves::default()
    }

    /// A snapshot taken when `delivered` packets had been handed to the recorder.
    pub fn taken(&mut self, delivered: u64, snapshot: LedgerFile) {
        self.pending.push_back((delivered, snapshot));
        if self.pending.len() > PENDING_SNAPSHOTS {
            self.pending.pop_front();
        }
    }

    /// The newest snapshot whose packets the recorder has made durable, now that `settled`
    /// packets are on disk and synced or counted as dropped; it and the older ones leave
    /// the queue.
    pub fn ready(&mut self, settled: u64) -> Option<LedgerFile> {
        let mut ready = None;
        while self.pending.front().is_some_and(|(d, _)| *d <= settled) {
            ready = self.pending.pop_front().map(|(_, s)| s);
        }
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumed_ledger_counts_the_gap_it_missed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEDGER_FILE);
        let ip: IpAddr = "198.18.0.1".parse().unwrap();
        let mut l = Ledger::new();
        assert_eq!(l.observe(ip, 1, 0, 10, Some(5)).0, SequenceEvent::First);
        assert_eq!(l.observe(ip, 1, 10, 10, None).0, SequenceEvent::InOrder);
        l.stored(ip, 1, 20);
        assert!(l.not_allowed("198.18.9.9".parse().unwrap()));
        assert!(!l.not_allowed("198.18.9.9".parse().unwrap()));
        l.save(&path).unwrap();

        let mut l = Ledger::resume_from(&path).unwrap();
        // 30 records went by while the collector was down.
        assert_eq!(l.observe(ip, 1, 50, 10, None).0, SequenceEvent::Gap(30));
        let s = &l.snapshot().streams[0];
        assert_eq!(
            (s.messages, s.records, s.lost, s.packets, s.next_sequence),
            (3, 30, 30, 20, Some(60))
        );
        assert_eq!(l.snapshot().not_allowed["198.18.9.9"], 2);
    }

    fn with_packets(n: u64) -> LedgerFile {
        LedgerFile {
            streams: vec![StreamLedger {
                packets: n,
                ..StreamLedger::default()
            }],
            ..LedgerFile::default()
        }
    }

    /// A snapshot waits until the recorder reports its packets durable (synced, or dropped
    /// and counted), however many it has written; then the newest such one is saved.
    #[test]
    fn a_snapshot_waits_for_its_packets_to_be_durable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEDGER_FILE);
        let mut saves = DurableSaves::new();
        saves.taken(100, with_packets(100));
        saves.taken(250, with_packets(250));
        // 250 written, but only 99 synced: nothing may be saved yet.
        assert!(saves.ready(99).is_none());
        let first = saves.ready(180).expect("100 are durable");
        assert_eq!(first.packets(), 100);
        assert!(saves.ready(180).is_none(), "saved once");
        saves.taken(300, with_packets(300));
        let newest = saves.ready(300).expect("both are durable");
        assert_eq!(newest.packets(), 300, "the newest durable snapshot wins");
        newest.save(&path).unwrap();
        let back: LedgerFile = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back.packets(), 300);
        assert!(!path.with_extension("json.partial").exists());
    }

    #[test]
    fn a_foreign_file_is_one_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEDGER_FILE);
        std::fs::write(&path, b"not json").unwrap();
        let e = Ledger::resume_from(&path).err().unwrap();
        assert!(e.to_string().contains("not a collector ledger"), "{e}");
        assert!(Ledger::resume_from(&dir.path().join("none.json")).is_ok());
    }
}
