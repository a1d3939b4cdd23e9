//! Slowing down token guessing: after [`FREE_FAILURES`] wrong tokens from one address,
//! every request from it that carries a token waits before the token is checked, longer
//! after each further failure (from [`FIRST_DELAY`], doubling, up to [`MAX_DELAY`]), and
//! that address's tokens are checked one at a time. An address is forgiven [`FORGET`]
//! after its last failure.
//!
//! The wait comes before the check, and a success does not reset the count: otherwise a
//! guess that is right would answer at once while wrong ones queue (an oracle), and one
//! valid low-privilege token (Prometheus's) would wipe the slate for guessing another.
//! Addresses are counted by [`crate::listen::client_key`] (an IPv6 /64 is one address).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// tokio's clock: the tests run it paused.
use tokio::time::Instant;

/// Wrong tokens an address may send before it is slowed down (typos, a stale file).
pub const FREE_FAILURES: u32 = 5;
pub const FIRST_DELAY: Duration = Duration::from_millis(100);
pub const MAX_DELAY: Duration = Duration::from_secs(2);
pub const FORGET: Duration = Duration::from_secs(600);
/// Addresses remembered at most; past that the longest-quiet ones are forgotten first.
const MAX_ADDRESSES: usize = 4096;

/// The failures of one address.
struct Record {
    failures: u32,
    last: Instant,
    /// Requests with a token from this address, one at a time while it is slowed.
    gate: Arc<tokio::sync::Mutex<()>>,
}

/// Failed attempts per address.
#[derive(Default)]
pub struct Backoff {
    records: Mutex<HashMap<IpAddr, Record>>,
}

/// A request's turn to have its token checked: hold it until the failure (if any) is
/// recorded, so that the next request of the address waits for the new delay.
pub struct Turn {
    _gate: Option<tokio::sync::OwnedMutexGuard<()>>,
}

/// What [`Backoff::failed`] saw.
#[derive(Debug, PartialEq, Eq)]
pub enum Episode {
    /// Not slowed (yet), or already said.
    Quiet,
    /// This failure begins the slowing down: the log says so, once per episode.
    Begins { failures: u32 },
}

/// How long an address with `failures` failures waits before its next check.
pub fn delay(failures: u32) -> Duration {
    if failures <= FREE_FAILURES {
        return Duration::ZERO;
    }
    let doublings = (failures - FREE_FAILURES - 1).min(16);
    (FIRST_DELAY * 2u32.pow(doublings)).min(MAX_DELAY)
}

impl Backoff {
    /// Waits for `key`'s turn to have a token checked (at once for an address that has not
    /// failed more than [`FREE_FAILURES`] times).
    pub async fn turn(&self, key: IpAddr) -> Turn {
        let gate = {
            let records = self.records.lock().unwrap();
            match records.get(&key) {
                Some(r) if r.failures > FREE_FAILURES && r.last.elapsed() < FORGET => {
                    Arc::clone(&r.gate)
                }
                _ => return Turn { _gate: None },
            }
        };
        let held = gate.lock_owned().await;
        // The delay of the count as it is now: earlier holders may have added failures.
        let until = {
            let records = self.records.lock().unwrap();
            records
                .get(&key)
                .map(|r| r.last + delay(r.failures))
                .unwrap_or_else(Instant::now)
        };
        tokio::time::sleep_until(until).await;
        Turn { _gate: Some(held) }
    }

    /// Counts a wrong token from `key`.
    pub fn failed(&self, key: IpAddr) -> Episode {
        let now = Instant::now();
        let mut records = self.records.lock().unwrap();
        if records.len() >= MAX_ADDRESSES && !records.contains_key(&key) {
            forget_some(&mut records, now);
        }
        let r = records.entry(key).or_insert_with(|| Record {
            failures: 0,
            last: now,
            gate: Arc::default(),
        });
        if now.duration_since(r.last) >= FORGET {
            r.failures = 0;
        }
        r.failures = r.failures.saturating_add(1);
        r.last = now;
        if r.failures == FREE_FAILURES + 1 {
            Episode::Begins {
                failures: r.failures,
            }
        } else {
            Episode::Quiet
        }
    }

    /// Failures counted against `key` now.
    pub fn failures(&self, key: IpAddr) -> u32 {
        let records = self.records.lock().unwrap();
        records
            .get(&key)
            .filter(|r| r.last.elapsed() < FORGET)
            .map_or(0, |r| r.failures)
    }
}

/// Makes room: drops the forgiven addresses, or else the longest-quiet half.
fn forget_some(records: &mut HashMap<IpAddr, Record>, now: Instant) {
    records.retain(|_, r| now.duration_since(r.last) < FORGET);
    if records.len() >= MAX_ADDRESSES {
        let mut quiet: Vec<(Instant, IpAddr)> = records.iter().map(|(k, r)| (r.last, *k)).collect();
        quiet.sort();
        for (_, k) in quiet.into_iter().take(MAX_ADDRESSES / 2) {
            records.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_grows_after_the_free_failures_up_to_the_cap() {
        assert_eq!(delay(0), Duration::ZERO);
        assert_eq!(delay(FREE_FAILURES), Duration::ZERO);
        assert_eq!(delay(FREE_FAILURES + 1), FIRST_DELAY);
        assert_eq!(delay(FREE_FAILURES + 2), FIRST_DELAY * 2);
        assert_eq!(delay(FREE_FAILURES + 5), FIRST_DELAY * 16);
        assert_eq!(delay(FREE_FAILURES + 6), MAX_DELAY);
        assert_eq!(delay(u32::MAX), MAX_DELAY, "no overflow");
        // 50 wrong tokens in a row take at least this long (the test's "several seconds").
        let total: Duration = (0..50).map(delay).sum();
        assert!(total > Duration::from_secs(60), "{total:?}");
    }

    #[test]
    fn the_log_hears_of_an_episode_once_and_other_addresses_are_untouched() {
        let b = Backoff::default();
        let (a, other): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "::1".parse().unwrap());
        let episodes: Vec<Episode> = (0..20).map(|_| b.failed(a)).collect();
        assert_eq!(
            episodes
                .iter()
                .filter(|e| matches!(e, Episode::Begins { .. }))
                .count(),
            1
        );
        assert_eq!(
            episodes[FREE_FAILURES as usize],
            Episode::Begins {
                failures: FREE_FAILURES + 1
            }
        );
        assert_eq!(b.failures(a), 20);
        assert_eq!(b.failures(other), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slowed_address_waits_its_delay_before_each_check() {
        let b = Backoff::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let started = tokio::time::Instant::now();
        for _ in 0..FREE_FAILURES {
            let _turn = b.turn(a).await;
            b.failed(a);
        }
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "the free failures wait nothing"
        );
        for n in 1..=3u32 {
            let before = tokio::time::Instant::now();
            let _turn = b.turn(a).await;
            b.failed(a);
            if n > 1 {
                assert!(
                    before.elapsed() >= delay(FREE_FAILURES + n - 1) - Duration::from_millis(1)
                );
            }
        }
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        let before = tokio::time::Instant::now();
        let _turn = b.turn(other).await;
        assert_eq!(before.elapsed(), Duration::ZERO);
    }
}
