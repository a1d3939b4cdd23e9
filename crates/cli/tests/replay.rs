//! Replaying a stored file: `record -r` must read tapdeck's own files, whose frames may mix
//! zstd and LZ4 (which no single stream decoder reads), and store the same packets again.

use std::path::Path;
use std::process::Command;

fn tapdeck(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tapdeck"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "tapdeck {args:?} failed: {stderr}");
    stderr
}

fn only_data_file(store: &Path) -> String {
    let files: Vec<_> = std::fs::read_dir(store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".zst"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].to_string_lossy().into_owned()
}

#[test]
fn a_stored_file_with_mixed_frames_replays_to_the_same_packets() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    // A threshold near zero sends the chunks to lz4, between the zstd frames that hold the
    // header and the statistics: one file, two frame formats.
    let common = [
        "--staging",
        "64MiB",
        "--chunk-size",
        "512KiB",
        "-q",
        "--log",
        "warn",
    ];
    let mut args = vec![
        "record",
        "--synthetic",
        "mix",
        "--count",
        "20000",
        "--codec",
    ];
    args.extend(["zstd:1@0.0001,lz4", "--store", a]);
    args.extend(common);
    tapdeck(&args);
    let stored = only_data_file(Path::new(a));
    let mut args = vec!["record", "-r", stored.as_str(), "--store", b];
    args.extend(common);
    tapdeck(&args);
    let (x, y) = (dir.path().join("a.pcapng"), dir.path().join("b.pcapng"));
    tapdeck(&["extract", a, "-w", x.to_str().unwrap()]);
    tapdeck(&["extract", b, "-w", y.to_str().unwrap()]);
    let (x, y) = (std::fs::read(x).unwrap(), std::fs::read(y).unwrap());
    assert!(x.len() > 20000 * 60, "extract too small: {} bytes", x.len());
    assert!(x == y, "replayed packets differ from the stored ones");
}
