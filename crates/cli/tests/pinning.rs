//! `--pin-*` must put each thread role on the CPUs asked for: checked from the outside, in
//! /proc, while a recording runs.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Thread name → the CPUs it may run on, as /proc shows them.
fn thread_affinities(pid: u32) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        if let Some(line) = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")) {
            let cpus = line.split(':').nth(1).unwrap_or("").trim().to_string();
            out.push((comm.trim().to_string(), cpus));
        }
    }
    out
}

#[test]
fn each_role_runs_on_the_cpus_it_was_pinned_to() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // With two CPUs, capture on the last and the others on the first, as a benchmark would.
    let (cap, rest) = if cpus >= 2 { ("1", "0") } else { ("0", "0") };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tapdeck"))
        .args([
            "record",
            "--synthetic",
            "64",
            "--rate",
            "2000",
            "--duration",
            "20",
        ])
        .args([
            "--staging",
            "64MiB",
            "--pin-capture",
            cap,
            "--pin-writers",
            rest,
        ])
        .args(["--pin-compressors", rest, "-q", "--store"])
        .arg(&store)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut seen = Vec::new();
    // Bounded wait until every role has started and pinned itself.
    while Instant::now() < deadline {
        seen = thread_affinities(child.id());
        let pinned = |prefix: &str, want: &str| {
            seen.iter()
                .any(|(n, c)| n.starts_with(prefix) && c.as_str() == want)
        };
        if pinned("capture-0", cap) && pinned("writer-0", rest) && pinned("compress-0", rest) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(status.success(), "tapdeck exited with {status}");
    for (prefix, want) in [("capture-", cap), ("writer-", rest), ("compress-", rest)] {
        let mine: Vec<_> = seen.iter().filter(|(n, _)| n.starts_with(prefix)).collect();
        assert!(!mine.is_empty(), "no {prefix} thread in {seen:?}");
        assert!(
            mine.iter().all(|(_, c)| c == want),
            "{prefix} threads not on CPU {want}: {seen:?}"
        );
    }
}

#[test]
fn a_cpu_that_does_not_exist_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tapdeck"))
        .args([
            "record",
            "--synthetic",
            "64",
            "--count",
            "10",
            "--pin-capture",
            "4096",
        ])
        .arg("--store")
        .arg(dir.path().join("s"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("--pin-capture: CPU 4096 does not exist"),
        "{err}"
    );
}
