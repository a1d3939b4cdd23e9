//! Pinning recorder threads to CPUs (`--pin-capture 1`, `--pin-writers 0`, …).
//!
//! On two cores the placement decides the result: the kernel's receive work for a veth is
//! charged to the sending core, so a benchmark pins the generator to one core and the
//! capture thread to the other, and says so.

use crate::error::ConfigError;

/// Which CPUs each thread role may run on; empty means "wherever the scheduler likes".
#[derive(Debug, Clone, Default)]
pub struct Pinning {
    /// Capture thread `i` runs on `capture[i % len]`: one CPU each, so a stream stays put.
    pub capture: Vec<usize>,
    /// Writer thread `i` runs on `writers[i % len]`.
    pub writers: Vec<usize>,
    /// The compressors are a pool: each may run on any of these.
    pub compressors: Vec<usize>,
}

impl Pinning {
    pub fn is_empty(&self) -> bool {
        self.capture.is_empty() && self.writers.is_empty() && self.compressors.is_empty()
    }
}

/// Parses a CPU list as taskset and the kernel write them: `0`, `0,2`, `1-3`, `0,4-5`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, ConfigError> {
    let online = online_cpus();
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (parse_cpu(a, s)?, parse_cpu(b, s)?),
            None => {
                let c = parse_cpu(part, s)?;
                (c, c)
            }
        };
        if lo > hi {
            return Err(ConfigError::CpuRangeBackwards { part: part.into() });
        }
        for cpu in lo..=hi {
            if cpu >= online {
                return Err(ConfigError::NoSuchCpu {
                    cpu,
                    last: online.saturating_sub(1),
                });
            }
            if !cpus.contains(&cpu) {
                cpus.push(cpu);
            }
        }
    }
    if cpus.is_empty() {
        return Err(ConfigError::EmptyCpuList { list: s.into() });
    }
    Ok(cpus)
}

fn parse_cpu(s: &str, whole: &str) -> Result<usize, ConfigError> {
    s.trim()
        .parse()
        .map_err(|_| ConfigError::BadCpuList { list: whole.into() })
}

fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    n.max(1) as usize
}

/// Restricts the calling thread to `cpus` (no-op when empty). Returns the error so the
/// caller can warn: a pinning that silently fails would falsify a benchmark.
pub fn pin_current_thread(cpus: &[usize]) -> Result<(), ConfigError> {
    if cpus.is_empty() {
        return Ok(());
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks against its size; the call
    // applies to the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(ConfigError::Pin {
                cpus: cpus.to_vec(),
                cause: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

/// The CPUs the calling thread may run on.
pub fn current_affinity() -> Vec<usize> {
    // SAFETY: as above; sched_getaffinity fills the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// The CPU for thread `i` of a role that pins one CPU per thread.
pub(crate) fn cpu_for(cpus: &[usize], i: usize) -> Vec<usize> {
    if cpus.is_empty() {
        Vec::new()
    } else {
        vec![cpus[i % cpus.len()]]
    }
}

/// Pins the calling thread; a failure is a warning, not a reason to stop recording.
pub fn pin(cpus: &[usize]) {
    if let Err(e) = pin_current_thread(cpus) {
        tracing::warn!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_ranges() {
        assert_eq!(parse_cpu_list("0").unwrap(), vec![0]);
        if online_cpus() >= 2 {
            assert_eq!(parse_cpu_list("0-1").unwrap(), vec![0, 1]);
            assert_eq!(parse_cpu_list("1,0,1").unwrap(), vec![1, 0]);
        }
        assert!(parse_cpu_list("1-0")
            .unwrap_err()
            .to_string()
            .contains("backwards"));
        assert!(parse_cpu_list("x")
            .unwrap_err()
            .to_string()
            .contains("bad CPU list"));
        assert!(parse_cpu_list("")
            .unwrap_err()
            .to_string()
            .contains("empty"));
        assert!(parse_cpu_list("100000")
            .unwrap_err()
            .to_string()
            .contains("does not exist"));
    }

    #[test]
    fn pins_and_reads_back() {
        let t = std::thread::spawn(|| {
            pin_current_thread(&[0]).unwrap();
            current_affinity()
        });
        assert_eq!(t.join().unwrap(), vec![0]);
    }

    #[test]
    fn one_cpu_per_thread_round_robin() {
        assert_eq!(cpu_for(&[3, 5], 0), vec![3]);
        assert_eq!(cpu_for(&[3, 5], 3), vec![5]);
        assert!(cpu_for(&[], 7).is_empty());
    }
}
