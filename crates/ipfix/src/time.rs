//! dateTimeNanoseconds (RFC 7011 §6.1.10): NTP format, seconds since 1900-01-01 in the high 32
//! bits and a 2^-32 s fraction in the low 32 bits.
//!
//! A nanosecond is not a whole number of 2^-32 s units, so the encoder rounds the fraction
//! **up**: the encoded instant then lies in `[t, t + 0.233 ns)`, and every decoder that
//! truncates `fraction * 10^9 / 2^32` (Wireshark, libfixbuf, this crate) reads back exactly the
//! nanosecond that was encoded. Rounding to nearest or down would make about half of the values
//! come back one nanosecond early.

/// Seconds from 1900-01-01 (NTP era 0) to 1970-01-01.
pub const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

const NS_PER_S: u64 = 1_000_000_000;

/// Unix nanoseconds to the 64-bit NTP timestamp. The seconds wrap modulo 2^32 (NTP era 1 starts
/// in February 2036); [`ntp_to_unix_ns`] undoes that with the RFC 4330 convention.
pub fn unix_ns_to_ntp(unix_ns: u64) -> u64 {
    let secs = unix_ns / NS_PER_S + NTP_UNIX_OFFSET;
    let ns = unix_ns % NS_PER_S;
    // ceil(ns * 2^32 / 10^9); at most 4_294_967_292 for ns = 999_999_999, so never a carry.
    let fraction = (ns << 32).div_ceil(NS_PER_S);
    ((secs & 0xffff_ffff) << 32) | fraction
}

/// The 64-bit NTP timestamp to Unix nanoseconds, truncating the fraction. Seconds with the top
/// bit clear are read as era 1 (2036–2104), as RFC 4330 §3 suggests; instants before 1970 read
/// as 0.
pub fn ntp_to_unix_ns(ntp: u64) -> u64 {
    let secs = ntp >> 32;
    let fraction = ntp & 0xffff_ffff;
    let secs = if secs & 0x8000_0000 == 0 {
        secs + (1 << 32)
    } else {
        secs
    };
    let ns = (fraction * NS_PER_S) >> 32;
    secs.saturating_sub(NTP_UNIX_OFFSET)
        .saturating_mul(NS_PER_S)
        .saturating_add(ns)
}

/// dateTimeMicroseconds (IE 324 and friends): NTP format whose fraction's low 11 bits are
/// meaningless (RFC 7011 §6.1.9). Read like nanoseconds after masking them out.
pub fn ntp_micro_to_unix_ns(ntp: u64) -> u64 {
    ntp_to_unix_ns(ntp & !0x7ff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn known_values() {
        // 2026-11-23T00:00:00Z
        let t = 1_795_392_000u64 * NS_PER_S;
        assert_eq!(unix_ns_to_ntp(t), (1_795_392_000 + NTP_UNIX_OFFSET) << 32);
        assert_eq!(ntp_to_unix_ns(unix_ns_to_ntp(t)), t);
        // Half a second is exactly 2^31.
        assert_eq!(unix_ns_to_ntp(t + 500_000_000) & 0xffff_ffff, 1 << 31);
        // One nanosecond is 4.29... units: rounded up to 5.
        assert_eq!(unix_ns_to_ntp(t + 1) & 0xffff_ffff, 5);
        assert_eq!(unix_ns_to_ntp(t + 999_999_999) & 0xffff_ffff, 4_294_967_292);
    }

    /// What a truncating decoder does with f64 arithmetic, as Wireshark's ENC_TIME_NTP does.
    fn float_truncating_ns(ntp: u64) -> u64 {
        (1_000_000_000.0 * ((ntp & 0xffff_ffff) as f64 / 4_294_967_296.0)) as u64
    }

    #[test]
    fn truncating_decoders_read_every_nanosecond_back() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let base = 1_795_392_000u64 * NS_PER_S;
        let mut check = |ns: u64| {
            let t = base + rng.gen_range(0..86_400 * 365) * NS_PER_S + ns;
            let ntp = unix_ns_to_ntp(t);
            assert_eq!(ntp_to_unix_ns(ntp), t, "integer truncation, ns {ns}");
            assert_eq!(float_truncating_ns(ntp), ns, "float truncation, ns {ns}");
        };
        for ns in (0..2_000).chain(999_998_000..1_000_000_000) {
            check(ns);
        }
        let mut values = rand::rngs::SmallRng::seed_from_u64(11);
        for _ in 0..2_000_000 {
            check(values.gen_range(0..NS_PER_S));
        }
    }

    /// Every one of the 10^9 sub-second values (about 2 s in release: `cargo test --release
    /// -- --ignored`).
    #[test]
    #[ignore]
    fn truncation_exhaustive() {
        for ns in 0..NS_PER_S {
            let ntp = unix_ns_to_ntp(ns);
            assert_eq!(ntp_to_unix_ns(ntp), ns);
            assert_eq!(float_truncating_ns(ntp), ns);
        }
    }

    #[test]
    fn era_one_and_before_1970() {
        // 2040-01-01T00:00:00Z is past the NTP era 0 rollover (2036-02-07).
        let t = 2_208_988_800u64 * NS_PER_S + 123;
        let ntp = unix_ns_to_ntp(t);
        assert!(ntp >> 63 == 0, "era 1 has the top bit clear");
        assert_eq!(ntp_to_unix_ns(ntp), t);
        assert_eq!(ntp_to_unix_ns(0x8000_0000u64 << 32), 0);
        let micro = ntp_micro_to_unix_ns(unix_ns_to_ntp(1_500));
        assert!(micro <= 1_500 && 1_500 - micro < 1_000, "{micro}");
    }
}
