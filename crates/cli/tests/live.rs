//! `tapdeck record -i` end to end: the real binary captures a veth pair whose far end sits
//! in a network namespace the test creates; the store, read back with the stock tools
//! (`zstd -dc`, `tcpdump`), holds exactly the frames sent. Needs root; skips otherwise.

#[path = "../../capture/tests/netns/mod.rs"]
mod netns;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netns::{frames, TestNet};
use tapdeck_pcap::TraceReader;

const BIN: &str = env!("CARGO_BIN_EXE_tapdeck");

fn spawn_record(iface: &str, store: &Path, count: usize, extra: &[&str]) -> Child {
    Command::new(BIN)
        .args(["record", "-i", iface, "--store"])
        .arg(store)
        .args(["--count", &count.to_string(), "--no-direct", "--quiet"])
        .args([
            "--staging",
            "64MiB",
            "--ring-block-size",
            "256KiB",
            "--ring-blocks",
            "8",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tapdeck")
}

/// Waits until the recorder has written its manifest (its sockets are open by then), plus
/// a moment for the capture threads to start polling.
fn wait_started(store: &Path, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !store.join("manifest.json").exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("tapdeck exited early: {status}");
        }
        assert!(Instant::now() < deadline, "tapdeck did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
}

fn finish(mut child: Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tapdeck did not stop after --count");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "tapdeck failed: {stderr}");
    stderr
}

fn data_files(store: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".pcapng.zst"))
        .collect();
    files.sort();
    files
}

/// Every stored frame, read with the stock tools: `zstd -dc FILE | tcpdump -r - -w -`.
fn stored_frames(store: &Path) -> Vec<(u32, Vec<u8>)> {
    let mut frames = Vec::new();
    for f in data_files(store) {
        let cmd = format!(
            "zstd -q -dc '{}' | tcpdump -r - -w - 2>/dev/null",
            f.display()
        );
        let out = Command::new("sh").args(["-c", &cmd]).output().unwrap();
        assert!(
            out.status.success(),
            "zstd | tcpdump failed on {}",
            f.display()
        );
        let mut reader = TraceReader::new(out.stdout.as_slice()).unwrap();
        while let Some(p) = reader.next_packet().unwrap() {
            frames.push((p.orig_len, p.data.to_vec()));
        }
    }
    frames
}

fn stock_tools_present() -> bool {
    ["zstd", "tcpdump"]
        .iter()
        .all(|t| Command::new(t).arg("--version").output().is_ok())
}

#[test]
fn record_from_an_interface_stores_exactly_the_frames_sent() {
    require_root!();
    if !stock_tools_present() {
        eprintln!("skipping: needs zstd and tcpdump");
        return;
    }
    let net = TestNet::new(1);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let sent: Vec<Vec<u8>> = (0..5000u32)
        .map(|i| {
            let len = 60 + (i as usize * 211) % (1514 - 60 + 1);
            frames::ipv4(17, 1, 4000 + (i % 11) as u16, 2, 5001, len, i)
        })
        .collect();
    let mut child = spawn_record(net.outside(0), &store, sent.len(), &["--codec", "zstd:1"]);
    wait_started(&store, &mut child);
    let started = Instant::now();
    net.sender_inside(0).send_all(&sent);
    let took = started.elapsed();
    let stderr = finish(child);
    eprintln!(
        "sent {} frames in {:.3} s ({:.0} frames/s)",
        sent.len(),
        took.as_secs_f64(),
        sent.len() as f64 / took.as_secs_f64()
    );
    assert!(stderr.contains("seen = stored + dropped holds"), "{stderr}");
    let stored = stored_frames(&store);
    assert_eq!(stored.len(), sent.len(), "{stderr}");
    for (i, ((orig_len, data), s)) in stored.iter().zip(&sent).enumerate() {
        assert_eq!(data, s, "frame {i}");
        assert_eq!(*orig_len as usize, s.len());
    }
    let manifest = std::fs::read_to_string(store.join("manifest.json")).unwrap();
    assert!(manifest.contains(net.outside(0)), "{manifest}");
}

#[test]
fn snaplen_and_filter_through_the_cli() {
    require_root!();
    if !stock_tools_present() {
        eprintln!("skipping: needs zstd and tcpdump");
        return;
    }
    let net = TestNet::new(1);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let sent: Vec<Vec<u8>> = (0..400u32)
        .map(|i| frames::ipv4(17, 1, 4000, 2, 5001 + (i % 2) as u16, 300, i))
        .collect();
    // Destination port 5001 = 0x1389.
    let wanted: Vec<&Vec<u8>> = sent.iter().filter(|f| f[37] == 0x89).collect();
    let mut child = spawn_record(
        net.outside(0),
        &store,
        wanted.len(),
        &["--snaplen", "64", "--filter", "udp dst port 5001"],
    );
    wait_started(&store, &mut child);
    net.sender_inside(0).send_all(&sent);
    let stderr = finish(child);
    let stored = stored_frames(&store);
    assert_eq!(stored.len(), wanted.len(), "{stderr}");
    for ((orig_len, data), s) in stored.iter().zip(wanted) {
        assert_eq!(*orig_len, 300);
        assert_eq!(data[..], s[..64]);
    }
    assert!(stderr.contains("snap length kept"), "{stderr}");
}

#[test]
fn record_as_another_user_after_opening_the_sockets() {
    require_root!();
    let net = TestNet::new(1);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let chmod = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    };
    chmod(dir.path());
    chmod(&store);
    let sent: Vec<Vec<u8>> = (0..20u32)
        .map(|i| frames::ipv4(17, 1, 1, 2, 2, 100, i))
        .collect();
    let mut child = spawn_record(net.outside(0), &store, sent.len(), &["--user", "nobody"]);
    wait_started(&store, &mut child);
    net.sender_inside(0).send_all(&sent);
    let stderr = finish(child);
    assert!(stderr.contains("now running as nobody"), "{stderr}");
    let owner = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&data_files(&store)[0]).unwrap().uid()
    };
    assert_ne!(owner, 0, "the data file was written as root");
}

#[test]
fn errors_are_one_line_with_what_to_do() {
    require_root!();
    let run = |args: &[&str], as_nobody: bool| {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["record", "--store"])
            .arg(dir.path().join("s"))
            .args(args);
        if as_nobody {
            cmd.uid(65534).gid(65534);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert_eq!(
        run(&["-i", "tdnosuchif0"], false),
        "tapdeck: no interface named tdnosuchif0 (see `ip link`)\n"
    );
    assert_eq!(
        run(&["-i", "lo"], true),
        "tapdeck: capturing needs CAP_NET_RAW: run as root or \
         `setcap cap_net_raw,cap_net_admin=eip $(which tapdeck)`\n"
    );
    let e = run(&["-i", "lo", "--user", "tdnosuchuser"], false);
    assert!(
        e.starts_with("tapdeck: --user tdnosuchuser: no such user"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    assert_eq!(
        run(&["--synthetic", "64", "--filter", "udp"], false),
        "tapdeck: --filter, --snaplen and --user apply to live capture: add -i IF\n"
    );
    let e = run(&["-i", "lo", "-r", "x.pcap"], false);
    assert!(e.contains("cannot be used with"), "{e}");
}

#[test]
fn a_link_going_down_and_up_is_announced_once_and_capture_resumes() {
    require_root!();
    let net = TestNet::new(1);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let batch = |from: u32| -> Vec<Vec<u8>> {
        (from..from + 50)
            .map(|i| frames::ipv4(17, 1, 1000 + i as u16, 2, 2, 200, i))
            .collect()
    };
    // Two fanout threads, each with its own socket on the interface: one announcement each
    // way, not one per socket.
    let mut child = spawn_record(net.outside(0), &store, 100, &["--threads", "2"]);
    wait_started(&store, &mut child);
    let tx = net.sender_inside(0);
    tx.send_all(&batch(0));
    std::thread::sleep(Duration::from_millis(300));
    net.set_link(0, false);
    std::thread::sleep(Duration::from_millis(1500));
    net.set_link(0, true);
    std::thread::sleep(Duration::from_millis(1500));
    tx.send_all(&batch(50));
    let stderr = finish(child);
    assert_eq!(stderr.matches("went down").count(), 1, "{stderr}");
    assert_eq!(
        stderr.matches("is up again; capturing").count(),
        1,
        "{stderr}"
    );
    let mut got: Vec<Vec<u8>> = stored_frames(&store).into_iter().map(|f| f.1).collect();
    let mut want: Vec<Vec<u8>> = batch(0).into_iter().chain(batch(50)).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}
