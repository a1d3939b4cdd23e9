//! What the recorder asks of the operating system besides files and sockets: the clock,
//! thread priorities, a thread's own CPU time and page faults, the kernel's clock state,
//! the host's name and memory. CPU pinning is in `crate::affinity`.

use std::time::{SystemTime, UNIX_EPOCH};

use tapdeck_store::meta;

/// Nanoseconds since the epoch by the system clock (0 before 1970).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Lowers (or raises, as root) the calling thread's scheduling priority; best effort.
pub fn set_nice(nice: i32) {
    // SAFETY: setpriority on our own thread id.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice);
    }
}

/// A sensible staging pool: a thirty-second of the machine's memory (768 MiB of 24 GiB:
/// about a second of a fast link), between 64 MiB and 2 GiB. Larger pools cost seconds of
/// page zeroing at start on small machines; `--staging` sets any size.
pub fn default_staging_bytes() -> usize {
    // SAFETY: sysconf has no preconditions (an unknown name returns -1, clamped below).
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let ram = (pages.max(0) as u64).saturating_mul(page.max(0) as u64);
    (ram / 32).clamp(64 << 20, 2 << 30) as usize
}

/// User plus system CPU seconds of the calling thread, to the nanosecond.
///
/// Not `getrusage(RUSAGE_THREAD)`: it reads the scheduler's runtime as of its last tick
/// (up to a few ms stale for a running thread), which for one chunk's compression (a few
/// ms) gave per-rung speeds off by 2–3× either way, and the ladder chose by them.
pub fn thread_cpu_seconds() -> f64 {
    // SAFETY: timespec is plain integers; clock_gettime only writes into the struct we pass
    // (and leaves it zero if it fails).
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
        ts
    };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Page faults this thread has taken (minor and major): counts, so the rusage clock's
/// staleness does not matter here.
pub fn thread_page_faults() -> i64 {
    // SAFETY: rusage is plain integers; getrusage only writes into the struct we pass (and
    // leaves it zero if it fails).
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage
    };
    usage.ru_minflt + usage.ru_majflt
}

/// The kernel's view of its clock, or `None` where adjtimex is refused.
// c_long is i64 only on 64-bit targets: the conversion is needed elsewhere.
#[allow(clippy::useless_conversion)]
pub fn read_clock_sync(now_ns: u64) -> Option<meta::ClockSync> {
    // SAFETY: with modes = 0 adjtimex only fills the struct we pass.
    let (state, tx) = unsafe {
        let mut tx: libc::timex = std::mem::zeroed();
        (libc::adjtimex(&mut tx), tx)
    };
    (state >= 0).then_some(meta::ClockSync {
        synchronized: state != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0,
        max_error_us: i64::from(tx.maxerror),
        est_error_us: i64::from(tx.esterror),
        read_ns: now_ns,
    })
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// How much runnable tasks waited for a CPU, from the kernel's pressure stall information
/// (`/proc/pressure/cpu`, Linux 4.20+ with PSI on): the fraction of the last 10 and 60
/// seconds in which some task waited, and the total time some task waited.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CpuPressure {
    pub some_avg10: f64,
    pub some_avg60: f64,
    pub some_total_s: f64,
}

/// The machine's CPU pressure now, `None` where the kernel does not report it.
pub fn cpu_pressure() -> Option<CpuPressure> {
    parse_cpu_pressure(&std::fs::read_to_string("/proc/pressure/cpu").ok()?)
}

/// The `some` line of `/proc/pressure/cpu`: `some avg10=2.42 avg60=3.01 avg300=3.13
/// total=15273265465` (percentages, and microseconds).
fn parse_cpu_pressure(text: &str) -> Option<CpuPressure> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let field = |name: &str| -> Option<f64> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    Some(CpuPressure {
        some_avg10: field("avg10")? / 100.0,
        some_avg60: field("avg60")? / 100.0,
        some_total_s: field("total")? / 1e6,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_pressure_is_read_from_the_some_line() {
        let text = "some avg10=2.42 avg60=3.01 avg300=3.13 total=15273265465\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(
            parse_cpu_pressure(text),
            Some(CpuPressure {
                some_avg10: 0.0242,
                some_avg60: 0.0301,
                some_total_s: 15273.265465,
            })
        );
        assert_eq!(parse_cpu_pressure("some avg10=x avg60=1 total=2"), None);
        assert_eq!(parse_cpu_pressure(""), None);
    }

    /// Where the kernel reports PSI, this machine's reads.
    #[test]
    fn this_machines_cpu_pressure_reads_when_the_kernel_reports_it() {
        let reported = std::fs::read_to_string("/proc/pressure/cpu").is_ok();
        assert_eq!(cpu_pressure().is_some(), reported);
    }
}
