//! The metric families, one collector each (as node_exporter has one per file): a
//! collector reads what it needs from the scrape's [`Reading`] and writes its family. The
//! lists give the order they are exposed in.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;
use tapdeck_recorder::stats::CaptureCounts;

use super::family::{counters, gauges, Family};
use super::reading::{stream, Reading, RecorderReading};

/// Writes one family (or nothing, when the reading has no sample for it).
type Collect<R> = fn(&R, &mut DescriptorEncoder) -> std::fmt::Result;

/// The service's own families, there whether or not the recorder runs.
const SERVICE: &[Collect<Reading>] = &[
    build_info,
    healthy,
    retention_min_horizon,
    process_cpu_seconds,
    process_resident_memory_bytes,
    process_open_fds,
    process_start_time_seconds,
];

/// The running recorder's families.
const RECORDER: &[Collect<RecorderReading>] = &[
    packets_seen,
    packets_stored,
    packets_dropped,
    packets_in_flight,
    bytes_captured,
    bytes_kept,
    bytes_wire,
    bytes_staged,
    bytes_written,
    codec_chunks,
    codec_bytes_in,
    codec_bytes_out,
    staging_fill_ratio,
    compressor_backlog_chunks,
    compressor_cpu_share_ratio,
    cpu_pressure_ratio,
    files_written,
    files_deleted,
    bytes_deleted,
    write_errors,
    retention_holds,
    retention_refused_chunks,
    data_dir_free,
    data_dir_size,
    data_dir_up,
    retention_enabled,
    retention_horizon_timestamp_seconds,
    last_file_completed_timestamp_seconds,
    capture_progress_timestamp_seconds,
];

/// Every family of `reading`, in order.
pub(super) fn encode_all(reading: &Reading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    for collect in SERVICE {
        collect(reading, e)?;
    }
    if let Some(recorder) = &reading.recorder {
        for collect in RECORDER {
            collect(recorder, e)?;
        }
    }
    Ok(())
}

fn flag(on: bool) -> f64 {
    f64::from(u8::from(on))
}

// The service.

fn build_info(_: &Reading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_build_info",
        "The running tapdeck version (always 1).",
    );
    let version = vec![("version", env!("CARGO_PKG_VERSION").to_string())];
    gauges(e, f.one(1.0).labelled(version))
}

fn healthy(r: &Reading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_healthy",
        "1 while /healthz answers 200 (recording, capture progressing, a data directory writable, drops under health-max-drops).",
    );
    gauges(e, f.one(flag(r.healthy)))
}

fn retention_min_horizon(r: &Reading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_retention_min_horizon",
        "The min-horizon setting: how much history the store should hold (0: no alert).",
    );
    gauges(e, f.unit(Unit::Seconds).one(r.min_horizon_s as f64))
}

// The standard process metrics (`process_*`), from the kernel; each only when it could be
// read.

fn process_cpu_seconds(r: &Reading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new("process_cpu_seconds", "User and system CPU time spent.");
    counters(e, f.one_if(r.process.cpu_seconds))
}

fn process_resident_memory_bytes(r: &Reading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
    );
    gauges(e, f.one_if(r.process.resident_bytes))
}

fn process_open_fds(r: &Reading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new("process_open_fds", "Number of open file descriptors.");
    gauges(e, f.one_if(r.process.open_fds))
}

fn process_start_time_seconds(r: &Reading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "process_start_time_seconds",
        "Start time of the process since the epoch, in seconds.",
    );
    gauges(e, f.one_if(r.process.start_time_s))
}

// Packets, per interface: every scrape balances, seen = stored + dropped + in flight.

fn packets_seen(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_packets_seen",
        "Packets the capture sources saw (as the kernel counted them), per interface.",
    );
    for (labels, c) in r.interfaces() {
        f.add(labels, c.seen);
    }
    counters(e, f)
}

fn packets_stored(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_packets_stored",
        "Packets written to the store, per interface.",
    );
    for (labels, c) in r.interfaces() {
        f.add(labels, c.stored);
    }
    counters(e, f)
}

fn packets_dropped(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_packets_dropped",
        "Packets lost, per interface and cause: kernel (the socket's ring was full), staging_full (the staging pool was full), write_error (the disk failed or retention refused).",
    );
    for (labels, c) in r.interfaces() {
        for (cause, n) in [
            ("kernel", c.dropped_kernel),
            ("staging_full", c.dropped_staging_full),
            ("write_error", c.dropped_write_error),
        ] {
            let mut l = labels.clone();
            l.push(("cause", cause.to_string()));
            f.add(l, n);
        }
    }
    counters(e, f)
}

fn packets_in_flight(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_packets_in_flight",
        "Packets seen but neither stored nor dropped yet (ring, staging, compressors, write buffer): seen = stored + dropped + in flight.",
    );
    for (labels, c) in r.interfaces() {
        f.add(labels, c.in_flight() as f64);
    }
    gauges(e, f)
}

// Bytes, per stream, as they went through capture; then as written.

/// A family of one capture byte count, summed over each stream's interfaces.
fn capture_bytes(
    r: &RecorderReading,
    e: &mut DescriptorEncoder,
    mut f: Family<u64>,
    bytes: fn(&CaptureCounts) -> u64,
) -> std::fmt::Result {
    for (i, interfaces) in r.capture.iter().enumerate() {
        f.add(stream(i), interfaces.iter().map(bytes).sum());
    }
    counters(e, f)
}

fn bytes_captured(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_bytes_captured",
        "Packet bytes as the sources captured them (after any snap length).",
    );
    capture_bytes(r, e, f, |c| c.captured_bytes)
}

fn bytes_kept(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_bytes_kept",
        "Packet bytes kept (after header-only capture cut them).",
    );
    capture_bytes(r, e, f, |c| c.kept_bytes)
}

fn bytes_wire(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_bytes_wire",
        "Packet bytes as they were on the wire.",
    );
    capture_bytes(r, e, f, |c| c.wire_bytes)
}

fn bytes_staged(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_bytes_staged",
        "Record bytes copied into staging (capture data before compression).",
    );
    capture_bytes(r, e, f, |c| c.staged_bytes)
}

fn bytes_written(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_bytes_written",
        "Bytes written to data files (compressed where a codec was used).",
    );
    counters(e, f.one(r.record.bytes_written))
}

// The codec ladder, per rung.

fn codec_chunks(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new("tapdeck_codec_chunks", "Chunks stored per codec rung.");
    for (codec, c) in &r.record.codecs {
        f.add(vec![("codec", codec.clone())], c.chunks);
    }
    counters(e, f)
}

fn codec_bytes_in(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_codec_bytes_in",
        "Capture data that went through each codec rung (raw: stored as is).",
    );
    for (codec, c) in &r.record.codecs {
        f.add(vec![("codec", codec.clone())], c.bytes_in);
    }
    counters(e, f)
}

fn codec_bytes_out(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_codec_bytes_out",
        "What each codec rung's input became on disk.",
    );
    for (codec, c) in &r.record.codecs {
        f.add(vec![("codec", codec.clone())], c.bytes_out);
    }
    counters(e, f)
}

// Staging and compression.

fn staging_fill_ratio(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_staging_fill_ratio",
        "Fraction of each stream's staging pool in use (1: full, packets are dropped).",
    );
    for (i, fill) in r.staging_fill.iter().enumerate() {
        f.add(stream(i), *fill);
    }
    gauges(e, f)
}

fn compressor_backlog_chunks(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_compressor_backlog_chunks",
        "Chunks waiting for or in a compressor.",
    );
    gauges(e, f.one(r.compressor_backlog as f64))
}

fn compressor_cpu_share_ratio(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_compressor_cpu_share_ratio",
        "Share of a CPU each stream's compressors got while working, as its ladder controller measured it (low: other processes take the CPU; chunks the compressors are late with are written raw).",
    );
    for (i, c) in r.record.controller.iter().enumerate() {
        if let Some(share) = c.compressor_cpu_share {
            f.add(stream(i), share);
        }
    }
    gauges(e, f)
}

fn cpu_pressure_ratio(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_cpu_pressure_ratio",
        "Fraction of the window in which some runnable task on the machine waited for a CPU (/proc/pressure/cpu); absent where the kernel does not report it.",
    );
    if let Some(p) = &r.record.cpu_pressure {
        f.add(vec![("window", "10s".to_string())], p.some_avg10);
        f.add(vec![("window", "60s".to_string())], p.some_avg60);
    }
    gauges(e, f)
}

// Files and retention.

fn files_written(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new("tapdeck_files_written", "Data files completed.");
    counters(e, f.one(r.record.files_written))
}

fn files_deleted(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new("tapdeck_files_deleted", "Data files deleted by retention.");
    counters(e, f.one(r.record.files_deleted))
}

fn bytes_deleted(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_bytes_deleted",
        "Bytes of data files deleted by retention.",
    );
    counters(e, f.one(r.record.bytes_deleted))
}

fn write_errors(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new("tapdeck_write_errors", "Failed writes to data directories.");
    counters(e, f.one(r.record.write_errors))
}

fn retention_holds(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_retention_holds",
        "Times retention began refusing writes (only files it must keep were left to delete).",
    );
    counters(e, f.one(r.record.retention_holds))
}

fn retention_refused_chunks(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_retention_refused_chunks",
        "Chunks retention refused (their packets count as write_error drops).",
    );
    counters(e, f.one(r.record.retention_refused))
}

// Data directories, per directory.

fn data_dir_free(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_data_dir_free",
        "Bytes available on each data directory's filesystem.",
    )
    .unit(Unit::Bytes);
    for d in &r.dirs {
        if let Some(b) = d.free_bytes {
            f.add(dir(d), b as f64);
        }
    }
    gauges(e, f)
}

fn data_dir_size(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_data_dir_size",
        "Size of each data directory's filesystem.",
    )
    .unit(Unit::Bytes);
    for d in &r.dirs {
        if let Some(b) = d.size_bytes {
            f.add(dir(d), b as f64);
        }
    }
    gauges(e, f)
}

fn data_dir_up(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_data_dir_up",
        "1 while a data directory takes writes, 0 while it is failing (retried every 2 s).",
    );
    for d in &r.dirs {
        f.add(dir(d), flag(d.up));
    }
    gauges(e, f)
}

fn dir(d: &tapdeck_recorder::live::DirState) -> super::family::Labels {
    vec![("dir", d.path.display().to_string())]
}

// The store's horizon, and whether capture and writing go on.

fn retention_enabled(r: &RecorderReading, e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_retention_enabled",
        "1 when max-bytes or min-free keeps the store within limits by deleting the oldest files.",
    );
    gauges(e, f.one(flag(r.retention_enabled)))
}

fn retention_horizon_timestamp_seconds(
    r: &RecorderReading,
    e: &mut DescriptorEncoder,
) -> std::fmt::Result {
    let f = Family::new(
        "tapdeck_retention_horizon_timestamp_seconds",
        "Time of the oldest packet still stored (the start of this run before any file is complete).",
    );
    gauges(e, f.one(r.horizon_ns as f64 / 1e9))
}

fn last_file_completed_timestamp_seconds(
    r: &RecorderReading,
    e: &mut DescriptorEncoder,
) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_last_file_completed_timestamp_seconds",
        "When the last data file was completed.",
    );
    if r.last_file_completed_ns > 0 {
        f.add(Vec::new(), r.last_file_completed_ns as f64 / 1e9);
    }
    gauges(e, f)
}

fn capture_progress_timestamp_seconds(
    r: &RecorderReading,
    e: &mut DescriptorEncoder,
) -> std::fmt::Result {
    let mut f = Family::new(
        "tapdeck_capture_progress_timestamp_seconds",
        "When each capture loop last went round (it does on a quiet link too): a stale value means a stuck capture thread.",
    );
    for (i, at) in r.progress_ns.iter().enumerate() {
        f.add(stream(i), *at as f64 / 1e9);
    }
    gauges(e, f)
}
