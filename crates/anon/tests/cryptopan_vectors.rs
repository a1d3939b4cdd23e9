//! Crypto-PAn against published test vectors, and its defining properties on random samples.
//!
//! The first table is the sample of the original C++ distribution (Xu et al., Georgia Tech):
//! the addresses of `sample_trace_raw.dat` and `sample_trace_sanitized.dat`, duplicates
//! removed, as embedded in the Go (Yawning/cryptopan) and Node (node-cryptopan) test suites,
//! which agree pair for pair. The other keys' vectors come from other independent
//! implementations, as collected by node-cryptopan's test data (sources noted per table).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rand::{Rng, SeedableRng};
use tapdeck_anon::{CachedCryptoPan, CryptoPan};

const REFERENCE_KEY: [u8; 32] = [
    21, 34, 23, 141, 51, 164, 207, 128, 19, 10, 91, 22, 73, 144, 125, 16, 216, 152, 143, 131, 121,
    121, 101, 39, 98, 87, 76, 45, 42, 132, 34, 2,
];

/// The reference distribution's sample trace (70 distinct addresses).
const REFERENCE_SAMPLE: &[(&str, &str)] = &[
    ("128.11.68.132", "135.242.180.132"),
    ("129.118.74.4", "134.136.186.123"),
    ("130.132.252.244", "133.68.164.234"),
    ("141.223.7.43", "141.167.8.160"),
    ("141.233.145.108", "141.129.237.235"),
    ("152.163.225.39", "151.140.114.167"),
    ("156.29.3.236", "147.225.12.42"),
    ("165.247.96.84", "162.9.99.234"),
    ("166.107.77.190", "160.132.178.185"),
    ("192.102.249.13", "252.138.62.131"),
    ("192.215.32.125", "252.43.47.189"),
    ("192.233.80.103", "252.25.108.8"),
    ("192.41.57.43", "252.222.221.184"),
    ("193.150.244.223", "253.169.52.216"),
    ("195.205.63.100", "255.186.223.5"),
    ("198.200.171.101", "249.199.68.213"),
    ("198.26.132.101", "249.36.123.202"),
    ("198.36.213.5", "249.7.21.132"),
    ("198.51.77.238", "249.18.186.254"),
    ("199.217.79.101", "248.38.184.213"),
    ("202.49.198.20", "245.206.7.234"),
    ("203.12.160.252", "244.248.163.4"),
    ("204.184.162.189", "243.192.77.90"),
    ("204.202.136.230", "243.178.4.198"),
    ("204.29.20.4", "243.33.20.123"),
    ("205.178.38.67", "242.108.198.51"),
    ("205.188.147.153", "242.96.16.101"),
    ("205.188.248.25", "242.96.88.27"),
    ("205.245.121.43", "242.21.121.163"),
    ("207.105.49.5", "241.118.205.138"),
    ("207.135.65.238", "241.202.129.222"),
    ("207.155.9.214", "241.220.250.22"),
    ("207.188.7.45", "241.255.249.220"),
    ("207.25.71.27", "241.33.119.156"),
    ("207.33.151.131", "241.1.233.131"),
    ("208.147.89.59", "227.237.98.191"),
    ("208.234.120.210", "227.154.67.17"),
    ("208.28.185.184", "227.39.94.90"),
    ("208.52.56.122", "227.8.63.165"),
    ("209.12.231.7", "226.243.167.8"),
    ("209.238.72.3", "226.6.119.243"),
    ("209.246.74.109", "226.22.124.76"),
    ("209.68.60.238", "226.184.220.233"),
    ("209.85.249.6", "226.170.70.6"),
    ("212.120.124.31", "228.135.163.231"),
    ("212.146.8.236", "228.19.4.234"),
    ("212.186.227.154", "228.59.98.98"),
    ("212.204.172.118", "228.71.195.169"),
    ("212.206.130.201", "228.69.242.193"),
    ("216.148.237.145", "235.84.194.111"),
    ("216.157.30.252", "235.89.31.26"),
    ("216.184.159.48", "235.96.225.78"),
    ("216.227.10.221", "235.28.253.36"),
    ("216.254.18.172", "235.7.16.162"),
    ("216.32.132.250", "235.192.139.38"),
    ("216.35.217.178", "235.195.157.81"),
    ("24.0.250.221", "100.15.198.226"),
    ("24.13.62.231", "100.2.192.247"),
    ("24.14.213.138", "100.1.42.141"),
    ("24.5.0.80", "100.9.15.210"),
    ("24.7.198.88", "100.10.6.25"),
    ("24.94.26.44", "100.88.228.35"),
    ("38.15.67.68", "64.3.66.187"),
    ("4.3.88.225", "124.60.155.63"),
    ("63.14.55.111", "95.9.215.7"),
    ("63.195.241.44", "95.179.238.44"),
    ("63.97.7.140", "95.97.9.123"),
    ("64.14.118.196", "0.255.183.58"),
    ("64.34.154.117", "0.221.154.117"),
    ("64.39.15.238", "0.219.7.41"),
];

/// Same key, further pairs: one more from the Go suite, three from the C# implementation
/// (UniStuttgart-VISUS/Sappan.CryptoPAn), four from Perl's IP::Anonymous, and IPv6 pairs from
/// the Go and C# suites.
const REFERENCE_KEY_MORE: &[(&str, &str)] = &[
    ("10.185.25.118", "117.161.29.118"),
    ("129.69.205.36", "134.182.53.212"),
    ("129.69.215.37", "134.182.41.43"),
    ("127.0.0.1", "33.0.243.129"),
    ("0.0.0.0", "120.255.240.1"),
    ("10.0.1.128", "117.15.1.129"),
    ("169.254.100.50", "169.251.68.45"),
    ("255.255.255.255", "206.120.97.255"),
    ("::1", "78ff:f001:9fc0:20df:8380:b1f1:704:ed"),
    ("::2", "78ff:f001:9fc0:20df:8380:b1f1:704:ef"),
    ("::ffff", "78ff:f001:9fc0:20df:8380:b1f1:704:f838"),
    ("2001:db8::1", "4401:2bc:603f:d91d:27f:ff8e:e6f1:dc1e"),
    ("2001:db8::2", "4401:2bc:603f:d91d:27f:ff8e:e6f1:dc1c"),
];

/// libanon (schoenw/libanon, C): key from the passphrase "testing".
const LIBANON_KEY: &str = "d1c056a983786a38ca76a05cda240c7b86d7713693544000a0e6c4dd5b3dabdd";
const LIBANON: &[(&str, &str)] = &[
    ("1.2.3.4", "236.157.211.10"),
    ("1.2.3.3", "236.157.211.12"),
    ("0.0.0.0", "237.113.211.225"),
    ("1.1.1.1", "236.159.20.242"),
    ("255.255.255.254", "0.0.127.6"),
    ("255.255.255.255", "0.0.127.7"),
    ("2.6.8.15", "238.6.10.23"),
    ("2.6.3.83", "238.6.7.179"),
    ("6.3.11.123", "233.3.231.131"),
    ("112.28.3.2", "136.126.15.210"),
    ("220.201.45.30", "61.17.221.254"),
    (
        "31d6:1be5:41bd:663c:3e9e:1005:1eec:6f01",
        "cc29:fb1a:b9fd:613c:e68:a03b:1efd:961f",
    ),
    (
        "5dc9:b9a:5699:45e4:3c33:2f50:a4d:2fca",
        "a3cf:3bda:5768:b87b:ac8c:cc56:a43:5235",
    ),
    (
        "2d70:77b8:119d:918:4165:78ae:2f24:1d00",
        "dcce:77ba:d5ad:16df:c119:68b2:2f0a:2518",
    ),
    (
        "17a3:638e:1942:258e:c87:4416:5298:4071",
        "f7a3:94a6:da41:21f1:8fa6:bbe9:aa59:c001",
    ),
    (
        "1c12:2019:e3f:648a:1689:65e9:1bcb:2436",
        "fdf2:1602:ce3f:5a8a:5da9:597:e43b:1bce",
    ),
    (
        "2cc:5582:1702:485c:4a77:5077:575c:1035",
        "eecc:4a6d:2f3d:775b:cb88:ae6f:a8a2:6fc1",
    ),
    (
        "bba:3c9d:5b3a:21de:2cf8:6578:2ae7:779f",
        "e7bd:c302:a5f5:d85e:3308:768:2570:fa5f",
    ),
    (
        "e22:869:6f4f:55f9:73d2:7795:3881:1671",
        "e1ad:da60:80b0:bc67:c2c:7b50:3873:e40f",
    ),
    (
        "827:7f95:2fe6:531f:d63:7bdf:323f:3ef6",
        "e527:7fea:c099:b4df:4e9d:73ac:2d3f:eb06",
    ),
    (
        "1e45:45f7:d60:36d0:1827:6b55:5dae:5741",
        "fefb:a377:29d:3a2d:e8a6:eb59:a391:d621",
    ),
    ("fffe:638:709:861::3", "1:ce05:ee9:971:7f1f:1f8:ec7:c05b"),
    ("fffe:638:709:861::4", "1:ce05:ee9:971:7f1f:1f8:ec7:c05f"),
    ("ffff:638:709:861::1", "0:e9f8:3928:f76e:3f:3fc6:135:ffa6"),
    ("ffff:638:709:861::2", "0:e9f8:3928:f76e:3f:3fc6:135:ffa5"),
    (
        "2001:638:709:861::1",
        "d0f1:f603:8e9:98c:3f5f:1f9:ffcf:bf9f",
    ),
    (
        "2001:638:709:861::2",
        "d0f1:f603:8e9:98c:3f5f:1f9:ffcf:bf9d",
    ),
    (
        "2001:638:709:861::3",
        "d0f1:f603:8e9:98c:3f5f:1f9:ffcf:bf9c",
    ),
    (
        "2001:638:709:861::4",
        "d0f1:f603:8e9:98c:3f5f:1f9:ffcf:bf98",
    ),
    ("2001:638:709:4::1", "d0f1:f603:8e9:6cb:803f:3e39:f134:3fbe"),
    ("2001:638:709:4::2", "d0f1:f603:8e9:6cb:803f:3e39:f134:3fbd"),
    ("2001:638:709:4::3", "d0f1:f603:8e9:6cb:803f:3e39:f134:3fbc"),
    ("2001:638:709:4::4", "d0f1:f603:8e9:6cb:803f:3e39:f134:3fbb"),
];

/// Key bytes 0..32: Python yacryptopan (192.0.2.1, 2001:db8::1), Perl IP::Anonymous, Ruby
/// (pwood/cryptopan).
const COUNTING_KEY_VECTORS: &[(&str, &str)] = &[
    ("192.0.2.1", "2.90.93.17"),
    ("0.0.0.0", "254.152.65.220"),
    ("10.0.1.128", "246.35.190.47"),
    ("127.0.0.1", "168.227.160.61"),
    ("165.254.100.50", "90.1.157.13"),
    ("255.255.255.255", "56.0.15.254"),
    ("148.88.132.153", "106.38.130.153"),
    ("148.88.132.64", "106.38.130.64"),
    ("148.88.133.200", "106.38.131.223"),
    ("2001:db8::1", "dd92:2c44:3fc0:ff1e:7ff9:c7f0:8180:7e00"),
];

/// yacryptopan's contrib tests (diekmann).
const DIEKMANN_KEY: &str = "8009ab3a605435bea0c385bea18485d8b0a1103d6590bdf48c968be5de53836e";
const DIEKMANN: &[(&str, &str)] = &[
    ("123.123.123.123", "117.8.135.123"),
    ("131.159.1.42", "162.112.255.43"),
    ("8.8.8.8", "55.21.62.136"),
    ("255.8.1.100", "240.232.0.156"),
    ("0.0.0.0", "56.131.176.115"),
    ("255.255.255.255", "240.15.248.0"),
    (
        "2a02:db8:85a3::8a2e:370:7344",
        "1482:f447:75b3:f1f9:fbdf:622e:34f:ff7b",
    ),
    (
        "2a02:db8:85a3:8d3:1319:8a2e:370:7344",
        "1482:f447:75b3:f904:c1d9:ba2e:489:1346",
    ),
    (
        "2001:b8:a3::2e:70:44",
        "1f18:b37b:1cc3:8118:41f:9fd1:f875:fab8",
    ),
    (
        "::ffff:192.0.2.128",
        "3883:b073:ff0f:fff8:203f:7c8:617:fd01",
    ),
    ("fc00::", "f33c:8ca3:ef0f:e019:e7ff:f1e3:f91f:f800"),
];

/// README examples of yacryptopan / cryptopanwrapper, pwood/cryptopan (Ruby),
/// JunjieChou/CryptoPAn (Java), FFM/pycryptopan.
const README_VECTORS: &[(&[u8; 32], &str, &str)] = &[
    (
        b"32-char-str-for-AES-key-and-pad.",
        "192.0.2.1",
        "192.0.125.244",
    ),
    (
        b"32-char-str-for-AES-key-and-pad.",
        "2001:db8::1",
        "27fe:8bc7:fee:1e:1e1f:f0fe:f0e1:83fd",
    ),
    (
        b"wordlessthanfoursavecodefromboom",
        "199.32.34.122",
        "58.161.230.78",
    ),
    (
        b"boojahyoo3vaeToong0Eijee7Ahz3yee",
        "192.0.2.1",
        "206.2.124.120",
    ),
];
const RUBY_KEY: [u8; 32] = [
    27, 8, 236, 31, 47, 181, 230, 41, 198, 24, 254, 3, 151, 151, 200, 75, 255, 197, 170, 3, 235,
    236, 200, 41, 12, 10, 206, 127, 203, 162, 176, 206,
];
const RUBY: &[(&str, &str)] = &[("8.8.8.8", "50.54.20.240"), ("8.8.4.4", "50.54.28.11")];

fn hex_key(s: &str) -> [u8; 32] {
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    k
}

/// Checks every pair with the plain map and with a cached one (each twice, so the second
/// answer comes from the cache). Returns how many pairs were checked.
fn check(key: &[u8; 32], pairs: &[(&str, &str)]) -> usize {
    let pan = CryptoPan::new(key);
    let mut cached = CachedCryptoPan::new(pan.clone());
    for &(raw, anon) in pairs {
        let raw: IpAddr = raw.parse().unwrap();
        let want: IpAddr = anon.parse().unwrap();
        assert_eq!(pan.anonymize(raw), want, "{raw}");
        assert_eq!(cached.anonymize(raw), want, "{raw} (cached, first)");
        assert_eq!(cached.anonymize(raw), want, "{raw} (cached, again)");
    }
    pairs.len()
}

#[test]
fn reference_sample_trace() {
    assert_eq!(check(&REFERENCE_KEY, REFERENCE_SAMPLE), 70);
    // The paper's example pair, stated on its own so a reader sees it.
    let pan = CryptoPan::new(&REFERENCE_KEY);
    assert_eq!(
        pan.anonymize_v4(Ipv4Addr::new(128, 11, 68, 132).into()),
        u32::from(Ipv4Addr::new(135, 242, 180, 132))
    );
}

#[test]
fn other_published_vectors() {
    let mut n = check(&REFERENCE_KEY, REFERENCE_KEY_MORE);
    n += check(&hex_key(LIBANON_KEY), LIBANON);
    let counting: [u8; 32] = std::array::from_fn(|i| i as u8);
    n += check(&counting, COUNTING_KEY_VECTORS);
    n += check(&hex_key(DIEKMANN_KEY), DIEKMANN);
    n += check(&RUBY_KEY, RUBY);
    for &(key, raw, anon) in README_VECTORS {
        n += check(key, &[(raw, anon)]);
    }
    assert_eq!(n, 13 + 33 + 10 + 11 + 2 + 4);
}

/// The sample itself shows prefix preservation: check every pair of its 70 addresses, before
/// and after, against the published anonymized values.
#[test]
fn reference_sample_pairs_keep_their_common_prefix() {
    let parse = |s: &str| u32::from(s.parse::<Ipv4Addr>().unwrap());
    let mut shared = 0;
    for &(a, a_anon) in REFERENCE_SAMPLE {
        for &(b, b_anon) in REFERENCE_SAMPLE {
            let raw = (parse(a) ^ parse(b)).leading_zeros();
            assert_eq!(raw, (parse(a_anon) ^ parse(b_anon)).leading_zeros());
            if raw > 0 && raw < 32 {
                shared += 1;
            }
        }
    }
    assert!(shared > 100, "the sample should contain related addresses");
}

fn rng() -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(0x7a9d_ec4e)
}

/// A random `bits`-bit address sharing exactly `k` leading bits with `a` (`k < bits`): same
/// top `k` bits, bit `k` flipped, the rest random.
fn with_common_prefix(rng: &mut impl Rng, a: u128, k: u32, bits: u32) -> u128 {
    let below = bits - k - 1; // bits after the flipped one
    let low_mask = (1u128 << below) - 1; // below < 128 always
    let flipped = a ^ (1u128 << below);
    (flipped & !low_mask) | (rng.gen::<u128>() & low_mask)
}

#[test]
fn ipv4_prefix_preservation_on_random_pairs() {
    let mut rng = rng();
    let key: [u8; 32] = rng.gen();
    let pan = CryptoPan::new(&key);
    for i in 0..20_000u32 {
        let a: u32 = rng.gen();
        let k = i % 32;
        let b = with_common_prefix(&mut rng, a.into(), k, 32) as u32;
        assert_eq!((a ^ b).leading_zeros(), k, "test setup");
        let (x, y) = (pan.anonymize_v4(a), pan.anonymize_v4(b));
        assert_eq!(
            (x ^ y).leading_zeros(),
            k,
            "{a:08x} {b:08x} -> {x:08x} {y:08x}"
        );
    }
    // Fully random pairs too (mostly short prefixes).
    for _ in 0..5_000 {
        let (a, b): (u32, u32) = rng.gen();
        let (x, y) = (pan.anonymize_v4(a), pan.anonymize_v4(b));
        assert_eq!((a ^ b).leading_zeros(), (x ^ y).leading_zeros());
    }
}

/// Every address of a /16 maps into one /16, and no two collide: the map is a bijection there.
#[test]
fn ipv4_is_a_bijection_on_a_whole_slash_16() {
    let mut cached = CachedCryptoPan::new(CryptoPan::new(&REFERENCE_KEY));
    let base = u32::from(Ipv4Addr::new(192, 168, 0, 0));
    let mut seen = vec![false; 1 << 16];
    let out_net = cached.anonymize_v4(base) & 0xffff_0000;
    for host in 0..(1u32 << 16) {
        let x = cached.anonymize_v4(base | host);
        assert_eq!(x & 0xffff_0000, out_net);
        let i = (x & 0xffff) as usize;
        assert!(!seen[i], "collision at {host:#x}");
        seen[i] = true;
    }
    assert!(seen.iter().all(|&s| s));
}

#[test]
fn ipv6_prefix_preservation_determinism_and_bijectivity() {
    let mut rng = rng();
    let key: [u8; 32] = rng.gen();
    let pan = CryptoPan::new(&key);
    for i in 0..3_000u32 {
        let a: u128 = rng.gen();
        let k = i % 128;
        let b = with_common_prefix(&mut rng, a, k, 128);
        assert_eq!((a ^ b).leading_zeros(), k);
        let (x, y) = (pan.anonymize_v6(a), pan.anonymize_v6(b));
        assert_eq!((x ^ y).leading_zeros(), k);
        assert_eq!(pan.anonymize_v6(a), x, "deterministic");
    }
    // Distinct inputs give distinct outputs (1000 hosts of one /64 and 1000 random ones).
    let net: u128 = u128::from("2001:db8:1:2::".parse::<Ipv6Addr>().unwrap());
    let mut images = std::collections::HashSet::new();
    for host in 0..1000u128 {
        assert!(images.insert(pan.anonymize_v6(net | host)));
        assert!(images.insert(pan.anonymize_v6(rng.gen())));
    }
}

/// An IPv4 address placed in the top 32 bits of an IPv6 one anonymizes to the same top 32
/// bits: the two constructions are one (yacryptopan checks the same).
#[test]
fn ipv4_is_the_top_of_ipv6() {
    let pan = CryptoPan::new(&REFERENCE_KEY);
    for &(raw, anon) in REFERENCE_SAMPLE {
        let raw = u32::from(raw.parse::<Ipv4Addr>().unwrap());
        let anon = u32::from(anon.parse::<Ipv4Addr>().unwrap());
        let wide = pan.anonymize_v6(u128::from(raw) << 96);
        assert_eq!((wide >> 96) as u32, anon);
    }
}

/// Tiny tables force collisions and evictions; answers must not change.
#[test]
fn cache_never_changes_answers() {
    let mut rng = rng();
    let pan = CryptoPan::new(&rng.gen());
    let mut small = CachedCryptoPan::with_table_bits(pan.clone(), 4);
    let mut big = CachedCryptoPan::new(pan.clone());
    let pool4: Vec<u32> = (0..300).map(|_| rng.gen::<u32>() & 0xff0f_ffff).collect();
    let pool6: Vec<u128> = (0..100)
        .map(|_| rng.gen::<u128>() & !(0xffffu128 << 64))
        .collect();
    for _ in 0..20_000 {
        let a = if rng.gen_bool(0.8) {
            pool4[rng.gen_range(0..pool4.len())]
        } else {
            rng.gen()
        };
        let want = pan.anonymize_v4(a);
        assert_eq!(small.anonymize_v4(a), want);
        assert_eq!(big.anonymize_v4(a), want);
        let b = if rng.gen_bool(0.8) {
            pool6[rng.gen_range(0..pool6.len())]
        } else {
            rng.gen()
        };
        let want = pan.anonymize_v6(b);
        assert_eq!(small.anonymize_v6(b), want);
        assert_eq!(big.anonymize_v6(b), want);
    }
    let s = big.stats();
    assert!(
        s.hits > 10_000 && s.prefix_hits > 0 && s.misses > 0,
        "{s:?}"
    );
    assert_eq!(s.hits + s.prefix_hits + s.misses, 40_000);
}
