//! The index against libpcap itself: random packets (see `common`) split into random
//! chunks, one index per chunk (encoded and decoded, and merged per group of chunks), and
//! random filters over the same pools compiled by the system's libpcap on a dead handle
//! and run on every packet. Whenever libpcap matches a packet of a chunk, `may_match` must
//! be true. Filters libpcap refuses must be refused by `Predicate::parse` too. The test
//! prints how many chunks the index ruled out, against how many held no matching packet.
//!
//! `TAPDECK_INDEX_SEED` and `TAPDECK_INDEX_FILTERS` change the seed and the filter count.

mod common;

use std::net::Ipv6Addr;

use pcap::{Capture, Linktype};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tapdeck_filter::{ChunkFilter, ChunkFilterBuilder, Predicate};

use common::Pools;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn v4_text(rng: &mut SmallRng, p: &Pools) -> String {
    let a = if rng.gen_bool(0.85) {
        *p.v4.choose(rng).unwrap()
    } else {
        rng.gen()
    };
    std::net::Ipv4Addr::from(a).to_string()
}

fn v6_text(rng: &mut SmallRng, p: &Pools) -> String {
    let a = Ipv6Addr::from(if rng.gen_bool(0.85) {
        *p.v6.choose(rng).unwrap()
    } else {
        rng.gen()
    });
    let s = a.segments();
    match rng.gen_range(0..4) {
        // Uncompressed, and upper case.
        0 => s
            .iter()
            .map(|g| format!("{g:x}"))
            .collect::<Vec<_>>()
            .join(":"),
        1 => a.to_string().to_uppercase(),
        _ => a.to_string(),
    }
}

fn prefix4(rng: &mut SmallRng, p: &Pools) -> String {
    let a = u32::from_be_bytes(*p.v4.choose(rng).unwrap());
    let len = *[0u32, 8, 12, 16, 20, 24, 31, 32].choose(rng).unwrap();
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    let net = std::net::Ipv4Addr::from(a & mask);
    let o = net.octets();
    match rng.gen_range(0..5) {
        0 => format!("{net} mask {}", std::net::Ipv4Addr::from(mask)),
        1 if len == 16 => format!("{}.{}", o[0], o[1]),
        1 if len == 24 => format!("{}.{}.{}", o[0], o[1], o[2]),
        1 if len == 8 => format!("{}", o[0]),
        // A non-contiguous mask.
        2 if len >= 16 => {
            let m = mask & 0xff00_ffff;
            format!(
                "{} mask {}",
                std::net::Ipv4Addr::from(a & m),
                std::net::Ipv4Addr::from(m)
            )
        }
        _ => format!("{net}/{len}"),
    }
}

fn prefix6(rng: &mut SmallRng, p: &Pools) -> String {
    let a = u128::from_be_bytes(*p.v6.choose(rng).unwrap());
    let len = *[0u32, 10, 16, 32, 48, 64, 96, 120, 128]
        .choose(rng)
        .unwrap();
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    format!("{}/{len}", Ipv6Addr::from(a & mask))
}

fn port_text(rng: &mut SmallRng, p: &Pools) -> String {
    let n = if rng.gen_bool(0.9) {
        *p.ports.choose(rng).unwrap()
    } else {
        rng.gen()
    };
    match rng.gen_range(0..10) {
        0 => format!("{n:#x}"),
        1 if n != 0 => format!("0{n:o}"),
        _ => n.to_string(),
    }
}

fn one_of<'a>(rng: &mut SmallRng, xs: &[&'a str]) -> &'a str {
    xs.choose(rng).unwrap()
}

const DIRS: [&str; 12] = [
    "",
    "",
    "",
    "",
    "",
    "src ",
    "src ",
    "dst ",
    "dst ",
    "src or dst ",
    "dst or src ",
    "dst and src ",
];
const TRANSPORTS: [&str; 5] = ["", "", "tcp ", "udp ", "sctp "];

/// One primitive, or a short run of values under one set of qualifiers.
fn primitive(rng: &mut SmallRng, p: &Pools) -> String {
    let dir = one_of(rng, &DIRS);
    let tr = one_of(rng, &TRANSPORTS);
    match rng.gen_range(0..30) {
        0..=3 => {
            let ip = one_of(rng, &["", "", "ip "]);
            format!("{ip}{dir}host {}", v4_text(rng, p))
        }
        4..=5 => {
            let ip = one_of(rng, &["", "", "ip6 "]);
            format!("{ip}{dir}host {}", v6_text(rng, p))
        }
        6 => format!("{}{}", one_of(rng, &["src ", "dst "]), v4_text(rng, p)),
        7..=8 => format!("{dir}net {}", prefix4(rng, p)),
        9 => format!("{dir}net {}", prefix6(rng, p)),
        10..=12 => format!("{tr}{dir}port {}", port_text(rng, p)),
        13 => {
            let a = *p.ports.choose(rng).unwrap();
            let b = a.saturating_add(rng.gen_range(0..200));
            format!("{tr}{dir}portrange {a}-{b}")
        }
        14..=17 => one_of(rng, &["tcp", "udp", "icmp", "icmp6", "sctp", "ip", "ip6"]).to_string(),
        18..=19 => {
            let q = one_of(rng, &["", "ip ", "ip6 "]);
            format!("{q}proto {}", p.protos.choose(rng).unwrap())
        }
        20 if rng.gen_bool(0.3) => "vlan".to_string(),
        21 if rng.gen_bool(0.3) => format!("vlan {}", p.vlans.choose(rng).unwrap()),
        20 | 21 => format!("ip6 net {}", prefix6(rng, p)),
        // libpcap's elided qualifiers.
        22 => format!("host {} or {}", v4_text(rng, p), v4_text(rng, p)),
        23 => format!("{tr}port {} or {}", port_text(rng, p), port_text(rng, p)),
        24 => format!("host ({} or {})", v4_text(rng, p), v6_text(rng, p)),
        25 => format!(
            "{tr}port ({} and not {})",
            port_text(rng, p),
            port_text(rng, p)
        ),
        26 => format!("host {} and not {}", v6_text(rng, p), v6_text(rng, p)),
        27 => format!(
            "ip proto {} or {}",
            p.protos.choose(rng).unwrap(),
            p.protos.choose(rng).unwrap()
        ),
        // Mismatched qualifiers (libpcap refuses most of these).
        28 => format!(
            "{}host {}",
            one_of(rng, &["ip6 ", "tcp ", "ip "]),
            v4_text(rng, p)
        ),
        _ => format!(
            "{}port {}",
            one_of(rng, &["ip ", "icmp ", "tcp src "]),
            port_text(rng, p)
        ),
    }
}

fn expr(rng: &mut SmallRng, p: &Pools, depth: u32) -> String {
    if depth == 0 || rng.gen_bool(0.3) {
        return primitive(rng, p);
    }
    let (a, b) = (expr(rng, p, depth - 1), expr(rng, p, depth - 1));
    // `vlan` moves every later offset: mostly at the top, as people write it.
    let vlan_forms = if depth == 3 { 14 } else { 12 };
    match rng.gen_range(0..vlan_forms) {
        // A bare value after a parenthesized expression takes the qualifiers from before
        // the parenthesis (libpcap refuses it when there were none).
        10 | 11 => {
            let bare = match rng.gen_range(0..3) {
                0 => v4_text(rng, p),
                1 => v6_text(rng, p),
                _ => port_text(rng, p),
            };
            let op = one_of(rng, &["and", "or", "and not"]);
            format!("{} and ({b}) {op} {bare}", primitive(rng, p))
        }
        12 => format!("vlan {} and ({a})", p.vlans.choose(rng).unwrap()),
        13 => format!("{a} and vlan and {b}"),
        0 | 1 => format!("{a} and {b}"),
        2 | 3 => format!("{a} or {b}"),
        4 => format!("{a} && {b}"),
        5 => format!("{a} || {b}"),
        6 => format!("not {a}"),
        7 => format!("!({a}) and {b}"),
        8 => format!("({a}) or ({b})"),
        _ => format!("{a} and ({b} or {})", primitive(rng, p)),
    }
}

/// A filter as people write them: one primitive, or a host, net or VLAN with a port or a
/// protocol.
fn typical(rng: &mut SmallRng, p: &Pools) -> String {
    let host = |rng: &mut SmallRng| {
        if rng.gen_bool(0.7) {
            v4_text(rng, p)
        } else {
            v6_text(rng, p)
        }
    };
    match rng.gen_range(0..9) {
        0..=2 => primitive(rng, p),
        3 => format!("host {}", host(rng)),
        4 => format!(
            "host {} and {}port {}",
            host(rng),
            one_of(rng, &TRANSPORTS),
            port_text(rng, p)
        ),
        5 => format!("net {} and not port {}", prefix4(rng, p), port_text(rng, p)),
        6 => format!("host {} and host {}", host(rng), host(rng)),
        7 => format!(
            "vlan {} and host {}",
            p.vlans.choose(rng).unwrap(),
            host(rng)
        ),
        _ => format!(
            "{} and (port {} or {})",
            one_of(rng, &["tcp", "udp"]),
            port_text(rng, p),
            port_text(rng, p)
        ),
    }
}

/// Chunks checked against one class of filters.
#[derive(Default)]
struct Counts {
    filters: usize,
    pairs: usize,
    pruned: usize,
    no_match: usize,
}

impl Counts {
    fn line(&self, what: &str) -> String {
        format!(
            "{what}: {} filters, chunks ruled out {} of {} ({:.1} %), chunks holding no match {} ({:.1} %)",
            self.filters,
            self.pruned,
            self.pairs,
            100.0 * self.pruned as f64 / self.pairs.max(1) as f64,
            self.no_match,
            100.0 * self.no_match as f64 / self.pairs.max(1) as f64,
        )
    }
}

#[derive(Default)]
struct Tally {
    filters: usize,
    refused_by_libpcap: usize,
    answered: usize,
    /// Chunks whose addresses (of either family) are held as a Bloom filter.
    blooms: usize,
    typical: Counts,
    random: Counts,
    groups: Counts,
}
/// Runs the oracle for one link type; returns the tally.
fn oracle(linktype: u32, seed: u64, packets: usize, filters: usize, hostile: bool) -> Tally {
    oracle_in_chunks(linktype, seed, packets, filters, hostile, 1..=60)
}

/// The oracle with chunks of `sizes` packets: chunks of a few hundred packets or more hold
/// enough distinct addresses for their sets to be Bloom filters.
fn oracle_in_chunks(
    linktype: u32,
    seed: u64,
    packets: usize,
    filters: usize,
    hostile: bool,
    sizes: std::ops::RangeInclusive<usize>,
) -> Tally {
    let mut rng = SmallRng::seed_from_u64(seed);
    let pools = Pools::new();
    let frames: Vec<Vec<u8>> = (0..packets)
        .map(|_| common::frame(&mut rng, &pools, linktype, hostile))
        .collect();
    // Chunks of `sizes` packets, in groups of up to 8 chunks ("files").
    let mut chunks: Vec<std::ops::Range<usize>> = Vec::new();
    let mut at = 0;
    while at < frames.len() {
        let n = rng.gen_range(sizes.clone()).min(frames.len() - at);
        chunks.push(at..at + n);
        at += n;
    }
    let mut builder = ChunkFilterBuilder::new();
    let mut t_blooms = 0;
    let indexes: Vec<ChunkFilter> = chunks
        .iter()
        .map(|r| {
            for f in &frames[r.clone()] {
                builder.add(linktype, f);
            }
            let index = builder.finish();
            let bytes = index.encode();
            let back = ChunkFilter::decode(&bytes).expect("round trip");
            assert_eq!(back, index);
            t_blooms += usize::from(back.to_string().contains("filter of"));
            back
        })
        .collect();
    let groups: Vec<(std::ops::Range<usize>, ChunkFilter)> = (0..chunks.len())
        .step_by(8)
        .map(|g| {
            let r = g..(g + 8).min(chunks.len());
            let mut merged = ChunkFilter::default();
            for i in r.clone() {
                merged.merge(&indexes[i]);
            }
            let merged = ChunkFilter::decode(&merged.encode()).unwrap();
            (r, merged)
        })
        .collect();

    // pcap_open_dead takes a DLT: LINKTYPE_RAW (101, in files) is DLT_RAW (12) on Linux.
    let dlt = if linktype == common::RAW {
        12
    } else {
        linktype
    };
    let dead = Capture::dead(Linktype(dlt as i32)).unwrap();
    let mut t = Tally {
        blooms: t_blooms,
        ..Tally::default()
    };
    let mut chunk_hit = vec![false; chunks.len()];
    for n in 0..filters {
        let is_typical = n % 3 == 0;
        let filter = if is_typical {
            typical(&mut rng, &pools)
        } else {
            expr(&mut rng, &pools, 3)
        };
        t.filters += 1;
        let predicate = Predicate::parse(&filter);
        let program = match dead.compile(&filter, true) {
            Ok(prog) => prog,
            Err(e) => {
                t.refused_by_libpcap += 1;
                // `vlan` is an Ethernet thing: libpcap refuses it on other link types,
                // where the index has no reason to care. libpcap's optimizer also refuses
                // a filter it proves matches nothing, which a parser cannot know.
                let unsatisfiable = e.to_string().contains("rejects all packets");
                if linktype == common::ETHERNET && !unsatisfiable {
                    assert!(
                        predicate.is_none(),
                        "libpcap refuses {filter:?} ({e}) but the index parsed it as {}",
                        predicate.unwrap().explain()
                    );
                }
                continue;
            }
        };
        let Some(predicate) = predicate else {
            if std::env::var_os("TAPDECK_INDEX_DEBUG").is_some() {
                eprintln!("libpcap accepts, the index does not: {filter}");
            }
            continue;
        };
        t.answered += 1;
        let counts = if is_typical {
            &mut t.typical
        } else {
            &mut t.random
        };
        counts.filters += 1;
        let (before_pruned, before_no) = (counts.pruned, counts.no_match);
        for (c, r) in chunks.iter().enumerate() {
            let hit = frames[r.clone()].iter().any(|f| program.filter(f));
            chunk_hit[c] = hit;
            let may = predicate.may_match(&indexes[c]);
            if hit && !may {
                let which = frames[r.clone()]
                    .iter()
                    .find(|f| program.filter(f))
                    .unwrap();
                panic!(
                    "false negative (seed {seed}, link type {linktype}): {filter:?} read as {}\n\
                     libpcap matches {which:02x?}\nindex: {}",
                    predicate.explain(),
                    indexes[c]
                );
            }
            counts.pairs += 1;
            counts.pruned += usize::from(!may);
            counts.no_match += usize::from(!hit);
        }
        if std::env::var_os("TAPDECK_INDEX_DEBUG").is_some() {
            let gap = (counts.no_match - before_no) - (counts.pruned - before_pruned);
            eprintln!(
                "gap {gap:3} of {:3}: {}",
                counts.no_match - before_no,
                predicate.explain()
            );
        }
        t.groups.filters += 1;
        for (r, merged) in &groups {
            let hit = chunk_hit[r.clone()].iter().any(|&h| h);
            let may = predicate.may_match(merged);
            assert!(!hit || may, "false negative on a merged index: {filter:?}");
            t.groups.pairs += 1;
            t.groups.pruned += usize::from(!may);
            t.groups.no_match += usize::from(!hit);
        }
    }
    eprintln!(
        "link type {linktype}{}, seed {seed}: {} packets in {} chunks of {sizes:?} ({} with a Bloom \
         filter); {} filters, {} refused by libpcap, {} answered by the index\n  {}\n  {}\n  {}",
        if hostile { " (hostile)" } else { "" },
        frames.len(),
        chunks.len(),
        t.blooms,
        t.filters,
        t.refused_by_libpcap,
        t.answered,
        t.typical.line("typical filters"),
        t.random.line("random filters (depth 3)"),
        t.groups.line("merged indexes of 8 chunks, all filters"),
    );
    t
}

#[test]
fn no_false_negatives_on_ethernet() {
    let seed = env_u64("TAPDECK_INDEX_SEED", 17);
    let filters = env_u64("TAPDECK_INDEX_FILTERS", 3000) as usize;
    let t = oracle(common::ETHERNET, seed, 2500, filters, true);
    assert!(
        t.answered * 2 > t.filters,
        "{} of {}",
        t.answered,
        t.filters
    );
}

/// Traffic without damaged frames: the same check, and how useful the index is.
#[test]
fn no_false_negatives_and_selectivity_on_clean_ethernet() {
    let seed = env_u64("TAPDECK_INDEX_SEED", 17) + 1;
    let filters = env_u64("TAPDECK_INDEX_FILTERS", 3000) as usize;
    let t = oracle(common::ETHERNET, seed, 2500, filters, false);
    // Worth something only if the index rules out most of the chunks that hold no match
    // for the filters people write.
    assert!(
        t.answered * 2 > t.filters,
        "{} of {}",
        t.answered,
        t.filters
    );
    let c = &t.typical;
    assert!(c.pruned * 2 > c.no_match, "{} of {}", c.pruned, c.no_match);
}

#[test]
fn no_false_negatives_on_other_link_types() {
    let seed = env_u64("TAPDECK_INDEX_SEED", 17);
    let filters = env_u64("TAPDECK_INDEX_FILTERS", 3000) as usize / 3;
    for linktype in [common::LINUX_SLL, common::RAW, common::NULL] {
        oracle(linktype, seed ^ u64::from(linktype), 1500, filters, true);
    }
}

/// Chunks big enough that their addresses are Bloom filters (and groups of them merged):
/// no false negatives there either.
#[test]
fn no_false_negatives_through_bloom_filters() {
    let seed = env_u64("TAPDECK_INDEX_SEED", 17) + 2;
    let filters = env_u64("TAPDECK_INDEX_FILTERS", 3000) as usize / 3;
    // Clean traffic: a damaged frame would make its chunk answer "maybe" to everything.
    let t = oracle_in_chunks(common::ETHERNET, seed, 20_000, filters, false, 150..=600);
    assert!(
        t.blooms >= 30,
        "{} chunks with a Bloom filter: the test tests little",
        t.blooms
    );
    let c = &t.typical;
    assert!(c.pruned > 0, "no chunk ruled out through its Bloom filters");
}
