//! Random traffic for the oracle and timing tests: frames of Ethernet (VLAN and QinQ tags),
//! Linux SLL, raw IP and BSD loopback, carrying IPv4 (options, impossible header lengths,
//! fragments), IPv6 (extension header chains, fragments), TCP/UDP/SCTP/ICMP and other
//! protocols, ARP/RARP, other ethertypes, garbage, and truncations. Addresses, ports,
//! protocols and VLAN ids come mostly from small pools, so that filters built from the same
//! pools hit some chunks and miss others.
#![allow(dead_code)]

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::Rng;

pub const ETHERNET: u32 = 1;
pub const RAW: u32 = 101;
pub const NULL: u32 = 0;
pub const LINUX_SLL: u32 = 113;

pub struct Pools {
    pub v4: Vec<[u8; 4]>,
    pub v6: Vec<[u8; 16]>,
    pub ports: Vec<u16>,
    pub vlans: Vec<u16>,
    pub protos: Vec<u8>,
}

impl Pools {
    pub fn new() -> Pools {
        let v6 = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
        Pools {
            v4: vec![
                [10, 0, 0, 1],
                [10, 0, 0, 2],
                [10, 0, 0, 3],
                [10, 0, 1, 1],
                [10, 0, 1, 2],
                [10, 1, 0, 1],
                [10, 200, 3, 4],
                [192, 168, 1, 1],
                [192, 168, 1, 2],
                [192, 168, 2, 9],
                [172, 16, 5, 5],
                [8, 8, 8, 8],
                [0, 0, 0, 80],
            ],
            v6: vec![
                v6("2001:db8::1"),
                v6("2001:db8::2"),
                v6("2001:db8::3"),
                v6("2001:db8:1::1"),
                v6("2001:db8:1:2::1"),
                v6("fe80::1"),
                v6("fe80::2:3"),
                v6("::ffff:10.0.0.1"),
                v6("ff02::1"),
            ],
            ports: vec![0, 22, 53, 80, 123, 443, 2049, 5353, 8080, 40000, 65535],
            vlans: vec![0, 1, 100, 200, 2001, 4095],
            protos: vec![0, 1, 2, 6, 17, 43, 44, 47, 50, 58, 60, 132],
        }
    }
}

fn pick<T: Copy>(rng: &mut SmallRng, pool: &[T]) -> T {
    *pool.choose(rng).unwrap()
}

fn v4_addr(rng: &mut SmallRng, p: &Pools) -> [u8; 4] {
    if rng.gen_bool(0.9) {
        pick(rng, &p.v4)
    } else {
        rng.gen()
    }
}

fn v6_addr(rng: &mut SmallRng, p: &Pools) -> [u8; 16] {
    if rng.gen_bool(0.9) {
        pick(rng, &p.v6)
    } else {
        rng.gen()
    }
}

fn port(rng: &mut SmallRng, p: &Pools) -> u16 {
    if rng.gen_bool(0.85) {
        pick(rng, &p.ports)
    } else {
        rng.gen()
    }
}

fn transport_proto(rng: &mut SmallRng, p: &Pools, v6: bool) -> u8 {
    match rng.gen_range(0..100) {
        0..=39 => 6,
        40..=64 => 17,
        65..=74 => {
            if v6 {
                58
            } else {
                1
            }
        }
        75..=81 => 132,
        _ => pick(rng, &p.protos),
    }
}

/// A transport header (or other bytes) for `proto`.
fn transport(rng: &mut SmallRng, p: &Pools, proto: u8) -> Vec<u8> {
    let len = match proto {
        6 => 20,
        17 | 1 | 58 => 8,
        132 => 12,
        _ => rng.gen_range(0..24),
    };
    let mut h: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
    if matches!(proto, 6 | 17 | 132) {
        h[0..2].copy_from_slice(&port(rng, p).to_be_bytes());
        h[2..4].copy_from_slice(&port(rng, p).to_be_bytes());
    }
    if proto == 6 {
        h[12] = 0x50;
    }
    let payload = rng.gen_range(0..16);
    h.extend((0..payload).map(|_| rng.gen::<u8>()));
    h
}

pub fn ipv4(rng: &mut SmallRng, p: &Pools, hostile: bool) -> Vec<u8> {
    let ihl: u8 = match rng.gen_range(0..100) {
        0..=84 => 5,
        85..=94 => rng.gen_range(6..=15),
        _ if hostile => rng.gen_range(0..5),
        _ => 5,
    };
    let proto = transport_proto(rng, p, false);
    let frag: u16 = match rng.gen_range(0..100) {
        0..=79 => {
            if rng.gen() {
                0x4000
            } else {
                0
            }
        }
        80..=86 => 0x2000,
        _ => rng.gen_range(1..0x2000) | if rng.gen() { 0x2000 } else { 0 },
    };
    let mut h = vec![0x40 | ihl, 0, 0, 0, rng.gen(), rng.gen()];
    h.extend(frag.to_be_bytes());
    h.extend([rng.gen(), proto, 0, 0]);
    h.extend(v4_addr(rng, p));
    h.extend(v4_addr(rng, p));
    if ihl > 5 {
        h.extend((0..(usize::from(ihl) - 5) * 4).map(|_| rng.gen::<u8>()));
    }
    h.extend(transport(rng, p, proto));
    let total = if !hostile || rng.gen_bool(0.9) {
        h.len() as u16
    } else {
        // Sometimes a value that libpcap, reading 4 bytes off after `vlan`, takes for an
        // ethertype.
        *[rng.gen(), 0x0800, 0x86dd, 0x8100, 0x0806]
            .choose(rng)
            .unwrap()
    };
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h
}

pub fn ipv6(rng: &mut SmallRng, p: &Pools, hostile: bool) -> Vec<u8> {
    let upper = transport_proto(rng, p, true);
    // Extension headers, outermost first: (type, bytes without the next-header byte).
    let mut chain: Vec<(u8, Vec<u8>)> = Vec::new();
    if rng.gen_bool(0.3) {
        for i in 0..rng.gen_range(1..=3) {
            let kind = match rng.gen_range(0..5) {
                0 if i == 0 => 0,
                0 | 1 => 60,
                2 => 43,
                3 => 44,
                _ => 51,
            };
            let body = match kind {
                44 => {
                    let off: u16 = if rng.gen_bool(0.4) {
                        0
                    } else {
                        rng.gen_range(1..0x2000)
                    };
                    let mut b = vec![0];
                    b.extend((off << 3 | u16::from(rng.gen::<bool>())).to_be_bytes());
                    b.extend(rng.gen::<[u8; 4]>());
                    b
                }
                // AH: length 1 → (1 + 2) × 4 = 12 bytes.
                51 => {
                    let mut b = vec![1];
                    b.extend(rng.gen::<[u8; 10]>());
                    b
                }
                _ => {
                    let mut b = vec![0];
                    b.extend(rng.gen::<[u8; 6]>());
                    b
                }
            };
            chain.push((kind, body));
        }
    }
    let first = chain.first().map_or(upper, |c| c.0);
    let mut rest = Vec::new();
    for (i, (_, body)) in chain.iter().enumerate() {
        let next = chain.get(i + 1).map_or(upper, |c| c.0);
        rest.push(next);
        rest.extend(body);
    }
    rest.extend(transport(rng, p, upper));
    // The flow label's low 16 bits, like an IPv4 total length, are where libpcap looks
    // for an ethertype 4 bytes off.
    let flow: u16 = if rng.gen_bool(0.05) {
        *[0x0800, 0x86dd, 0x8100, 0x9100].choose(rng).unwrap()
    } else {
        rng.gen()
    };
    let mut h = vec![0x60, rng.gen_range(0..16)];
    h.extend(flow.to_be_bytes());
    let len = if !hostile || rng.gen_bool(0.9) {
        rest.len() as u16
    } else {
        rng.gen()
    };
    h.extend(len.to_be_bytes());
    h.extend([first, 64]);
    h.extend(v6_addr(rng, p));
    h.extend(v6_addr(rng, p));
    h.extend(rest);
    h
}

fn arp(rng: &mut SmallRng, p: &Pools) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4, 0, rng.gen_range(1..=4)];
    a.extend(rng.gen::<[u8; 6]>());
    a.extend(v4_addr(rng, p));
    a.extend(rng.gen::<[u8; 6]>());
    a.extend(v4_addr(rng, p));
    a
}

fn garbage(rng: &mut SmallRng) -> Vec<u8> {
    (0..rng.gen_range(0..80)).map(|_| rng.gen()).collect()
}

/// The network layer of a frame: (ethertype, bytes).
fn network(rng: &mut SmallRng, p: &Pools, ip_only: bool, hostile: bool) -> (u16, Vec<u8>) {
    match rng.gen_range(if ip_only { 0..85 } else { 0..100 }) {
        // Not an IP header where the link layer says there is one (1 in 500).
        80..=84 if hostile && rng.gen_bool(0.04) => {
            if rng.gen() {
                (0x0800, garbage(rng))
            } else {
                (0x86dd, garbage(rng))
            }
        }
        0..=44 | 80..=82 => (0x0800, ipv4(rng, p, hostile)),
        _ if ip_only => (0x86dd, ipv6(rng, p, hostile)),
        45..=79 | 83..=84 => (0x86dd, ipv6(rng, p, hostile)),
        85..=91 => (if rng.gen_bool(0.8) { 0x0806 } else { 0x8035 }, arp(rng, p)),
        92..=95 => (0x88cc, garbage(rng)),
        96..=97 => (rng.gen_range(0..1500), garbage(rng)),
        _ => (rng.gen(), garbage(rng)),
    }
}

/// One frame of `linktype`; `hostile` adds what real traffic rarely has: frames cut short
/// (mostly in the transport header, 1 in 500 anywhere), impossible IPv4 header lengths,
/// wrong IP lengths, garbage after an IP ethertype.
pub fn frame(rng: &mut SmallRng, p: &Pools, linktype: u32, hostile: bool) -> Vec<u8> {
    let mut f = match linktype {
        ETHERNET => {
            let (ethertype, payload) = network(rng, p, false, hostile);
            let mut f: Vec<u8> = (0..12).map(|_| rng.gen()).collect();
            let tags = match rng.gen_range(0..100) {
                0..=64 => 0,
                65..=89 => 1,
                90..=97 => 2,
                _ => 3,
            };
            for _ in 0..tags {
                let tpid: u16 = *[0x8100, 0x88a8, 0x9100].choose(rng).unwrap();
                f.extend(tpid.to_be_bytes());
                let id = if rng.gen_bool(0.9) {
                    pick(rng, &p.vlans)
                } else {
                    rng.gen_range(0..4096)
                };
                f.extend((id | rng.gen_range(0..16u16) << 12).to_be_bytes());
            }
            f.extend(ethertype.to_be_bytes());
            f.extend(payload);
            if f.len() < 60 && rng.gen_bool(0.5) {
                f.resize(60, 0);
            }
            f
        }
        LINUX_SLL => {
            let (ethertype, payload) = network(rng, p, false, hostile);
            let mut f: Vec<u8> = vec![0, rng.gen_range(0..5), 0, 1, 0, 6];
            f.extend(rng.gen::<[u8; 8]>());
            f.extend(ethertype.to_be_bytes());
            f.extend(payload);
            f
        }
        RAW => network(rng, p, true, hostile).1,
        NULL => {
            let (ethertype, payload) = network(rng, p, true, hostile);
            let family: u32 = match ethertype {
                0x0800 if rng.gen_bool(0.95) => 2,
                0x86dd if rng.gen_bool(0.95) => *[24u32, 28, 30].choose(rng).unwrap(),
                _ => rng.gen_range(0..40),
            };
            let mut f = family.to_le_bytes().to_vec();
            f.extend(payload);
            f
        }
        other => panic!("no generator for link type {other}"),
    };
    if hostile && rng.gen_bool(0.06) {
        let cut = if rng.gen_bool(0.97) {
            rng.gen_range(f.len().saturating_sub(20)..=f.len())
        } else {
            rng.gen_range(0..=f.len())
        };
        f.truncate(cut);
    }
    f
}
