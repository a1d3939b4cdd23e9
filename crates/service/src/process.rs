//! The standard `process_*` metrics of this process, read from /proc.

#[derive(Debug, Default)]
pub struct Process {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<f64>,
    pub open_fds: Option<f64>,
    pub start_time_s: Option<f64>,
}

pub fn read() -> Process {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as f64;
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime, stime and starttime are fields 14, 15 and 22 of stat(5); `fields` starts at 3.
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    let boot_s = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime ").map(|v| v.trim().parse::<f64>()))
        })
        .and_then(Result::ok);
    let resident = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok());
    let fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as f64)
        .ok();
    Process {
        cpu_seconds: field(14)
            .zip(field(15))
            .map(|(u, s)| (u + s) / ticks.max(1.0)),
        resident_bytes: resident.map(|pages| pages * page),
        open_fds: fds,
        start_time_s: field(22).zip(boot_s).map(|(t, b)| b + t / ticks.max(1.0)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_this_process() {
        let p = super::read();
        assert!(p.cpu_seconds.is_some_and(|c| c >= 0.0));
        assert!(p.resident_bytes.is_some_and(|r| r > 1e6), "{p:?}");
        assert!(p.open_fds.is_some_and(|n| n >= 3.0), "{p:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = p.start_time_s.unwrap();
        assert!(
            start <= now + 1.0 && start > now - 3600.0,
            "{start} vs {now}"
        );
    }
}
