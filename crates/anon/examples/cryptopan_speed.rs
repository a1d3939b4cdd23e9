//! Nanoseconds per address for Crypto-PAn on address streams shaped like real traces.
//! `cargo run --release -p tapdeck-anon --example cryptopan_speed`
//!
//! Streams (each lookup is one packet address; the seed is fixed):
//! - nfs: one site: 4 servers and 300 clients in three /24s, client popularity Zipf(1).
//! - campus: 50 000 hosts in 2 000 /24s, host popularity Zipf(1).
//! - uniform: every address random (each lookup a miss: the worst case).
//! - v6: 20 000 IPv6 hosts in 200 /64s, Zipf(1).

use std::hint::black_box;
use std::time::Instant;

use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;
use rand::{Rng, SeedableRng};
use tapdeck_anon::{CachedCryptoPan, CryptoPan, NameCipher};

const LOOKUPS: usize = 2_000_000;

/// The construction as the paper states it, one AES call per bit: the baseline.
struct Naive {
    aes: Aes128,
    pad: [u8; 16],
}

impl Naive {
    fn new(key: &[u8; 32]) -> Naive {
        let aes = Aes128::new(GenericArray::from_slice(&key[..16]));
        let mut pad = *GenericArray::from_slice(&key[16..]);
        aes.encrypt_block(&mut pad);
        Naive {
            aes,
            pad: pad.into(),
        }
    }

    fn anonymize_v4(&self, addr: u32) -> u32 {
        let pad4 = u32::from_be_bytes(self.pad[..4].try_into().unwrap());
        let mut otp = 0u32;
        for pos in 0..32 {
            let keep = if pos == 0 { 0 } else { u32::MAX << (32 - pos) };
            let mut block = GenericArray::from(self.pad);
            block[..4].copy_from_slice(&((addr & keep) | (pad4 & !keep)).to_be_bytes());
            self.aes.encrypt_block(&mut block);
            otp |= u32::from(block[0] >> 7) << (31 - pos);
        }
        addr ^ otp
    }
}

fn zipf_picker(n: usize) -> impl FnMut(&mut rand::rngs::StdRng) -> usize {
    let mut cdf = Vec::with_capacity(n);
    let mut sum = 0.0;
    for i in 0..n {
        sum += 1.0 / (i as f64 + 1.0);
        cdf.push(sum);
    }
    move |rng| {
        let x = rng.gen::<f64>() * sum;
        cdf.partition_point(|&c| c < x).min(n - 1)
    }
}

fn hosts_in_subnets(rng: &mut rand::rngs::StdRng, subnets: usize, hosts: usize) -> Vec<u32> {
    let nets: Vec<u32> = (0..subnets)
        .map(|_| rng.gen::<u32>() & 0xffff_ff00)
        .collect();
    (0..hosts)
        .map(|_| nets[rng.gen_range(0..nets.len())] | rng.gen_range(1..255))
        .collect()
}

fn stream_v4(rng: &mut rand::rngs::StdRng, hosts: &[u32]) -> Vec<u32> {
    let mut pick = zipf_picker(hosts.len());
    (0..LOOKUPS).map(|_| hosts[pick(rng)]).collect()
}

/// This thread's CPU time: on a shared, busy machine wall time mostly measures the others.
fn thread_cpu_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

/// Prints CPU and wall nanoseconds per item; the CPU figure is the one to compare.
fn time<T>(label: &str, n: usize, mut f: impl FnMut() -> T) {
    let (wall, cpu) = (Instant::now(), thread_cpu_ns());
    black_box(f());
    let cpu = (thread_cpu_ns() - cpu) as f64 / n as f64;
    let wall = wall.elapsed().as_nanos() as f64 / n as f64;
    println!("{label:<46} {cpu:>8.1} ns CPU {wall:>8.1} ns wall");
}

fn main() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2002);
    let key: [u8; 32] = rng.gen();
    let pan = CryptoPan::new(&key);
    let naive = Naive::new(&key);

    // Site: 4 servers in one /24, 300 clients in two more; half the addresses are a server.
    let servers = hosts_in_subnets(&mut rng, 1, 4);
    let clients = hosts_in_subnets(&mut rng, 2, 300);
    let mut pick_client = zipf_picker(clients.len());
    let nfs: Vec<u32> = (0..LOOKUPS)
        .map(|i| {
            if i % 2 == 0 {
                servers[rng.gen_range(0..servers.len())]
            } else {
                clients[pick_client(&mut rng)]
            }
        })
        .collect();
    let campus_hosts = hosts_in_subnets(&mut rng, 2_000, 50_000);
    let campus = stream_v4(&mut rng, &campus_hosts);
    let uniform: Vec<u32> = (0..LOOKUPS).map(|_| rng.gen()).collect();

    // The baseline and the batched stateless map agree (a cheap cross-check of both).
    for &a in uniform.iter().take(10_000) {
        assert_eq!(naive.anonymize_v4(a), pan.anonymize_v4(a));
    }

    let n = 200_000;
    time("v4 naive, 32 single AES calls (uniform)", n, || {
        uniform[..n]
            .iter()
            .fold(0u32, |acc, &a| acc ^ naive.anonymize_v4(a))
    });
    time("v4 CryptoPan, batched AES, no cache (uniform)", n, || {
        uniform[..n]
            .iter()
            .fold(0u32, |acc, &a| acc ^ pan.anonymize_v4(a))
    });
    for (name, stream) in [("nfs", &nfs), ("campus", &campus), ("uniform", &uniform)] {
        let mut cached = CachedCryptoPan::new(pan.clone());
        time(
            &format!("v4 CachedCryptoPan ({name})"),
            stream.len(),
            || {
                stream
                    .iter()
                    .fold(0u32, |acc, &a| acc ^ cached.anonymize_v4(a))
            },
        );
        let s = cached.stats();
        let total = (s.hits + s.prefix_hits + s.misses) as f64;
        println!(
            "{:>8}hits {:.2} %, prefix hits {:.2} %, misses {:.2} %",
            "",
            100.0 * s.hits as f64 / total,
            100.0 * s.prefix_hits as f64 / total,
            100.0 * s.misses as f64 / total
        );
    }

    let nets6: Vec<u128> = (0..200)
        .map(|_| rng.gen::<u128>() & !(u128::from(u64::MAX)))
        .collect();
    let hosts6: Vec<u128> = (0..20_000)
        .map(|_| nets6[rng.gen_range(0..nets6.len())] | u128::from(rng.gen::<u64>()))
        .collect();
    let mut pick6 = zipf_picker(hosts6.len());
    let v6: Vec<u128> = (0..LOOKUPS).map(|_| hosts6[pick6(&mut rng)]).collect();
    let n6 = 50_000;
    time("v6 CryptoPan, no cache (random hosts)", n6, || {
        v6[..n6]
            .iter()
            .fold(0u128, |acc, &a| acc ^ pan.anonymize_v6(a))
    });
    let mut cached = CachedCryptoPan::new(pan.clone());
    time("v6 CachedCryptoPan (20k hosts, 200 /64s)", v6.len(), || {
        v6.iter()
            .fold(0u128, |acc, &a| acc ^ cached.anonymize_v6(a))
    });
    let s = cached.stats();
    println!("    {s:?}");

    let names = NameCipher::new(&rng.gen::<[[u8; 32]; 2]>().concat().try_into().unwrap());
    let words: Vec<Vec<u8>> = (0..10_000)
        .map(|i| format!("file-{i:05}.dat").into_bytes())
        .collect();
    let enc: Vec<String> = words.iter().map(|w| names.encrypt(w)).collect();
    time(
        "NameCipher::encrypt (14-byte names), per name",
        words.len(),
        || words.iter().map(|w| names.encrypt(w).len()).sum::<usize>(),
    );
    time("NameCipher::decrypt, per name", enc.len(), || {
        enc.iter()
            .map(|e| names.decrypt(e).unwrap().len())
            .sum::<usize>()
    });
}
