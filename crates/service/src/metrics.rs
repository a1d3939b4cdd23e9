//! `/metrics`: the recorder's counters in the Prometheus/OpenMetrics text format, read
//! from the running recorder at each scrape (prometheus-client's `Collector`), so every
//! scrape balances: seen = stored + dropped + in flight, per interface.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::health;
use crate::state::Service;

/// The registry `/metrics` encodes: everything comes from one collector.
pub fn registry(service: Arc<Service>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Metrics { service }));
    registry
}

/// Encodes the registry as OpenMetrics text.
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

/// The same metrics in the classic Prometheus text format (0.0.4), for clients that do
/// not ask for OpenMetrics (curl, `promtool check metrics`, older scrapers): counter
/// families are named with their `_total` suffix, and `# UNIT` and `# EOF` go.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|tag| {
            let rest = line.strip_prefix(tag)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{tag}{name}_total {tail}"))
        });
        match renamed {
            Some(l) => out.push_str(&l),
            None if line.starts_with("# UNIT ") || line == "# EOF" => continue,
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

struct Metrics {
    service: Arc<Service>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("tapdeck metrics")
    }
}

type Labels = Vec<(&'static str, String)>;

/// One metric family: its samples with their labels.
struct Family<T> {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    samples: Vec<(Labels, T)>,
}

impl<T> Family<T> {
    fn new(name: &'static str, help: &'static str) -> Self {
        Family {
            name,
            help,
            unit: None,
            samples: Vec::new(),
        }
    }

    fn unit(mut self, unit: Unit) -> Self {
        self.unit = Some(unit);
        self
    }

    fn add(&mut self, labels: Labels, value: T) {
        self.samples.push((labels, value));
    }

    fn one(mut self, value: T) -> Self {
        self.samples.push((Vec::new(), value));
        self
    }
}

/// Counters are monotonic totals; prometheus-client adds the `_total` suffix.
fn counters<N>(encoder: &mut DescriptorEncoder, f: Family<N>) -> std::fmt::Result
where
    ConstCounter<N>: EncodeMetric + 'static,
{
    encode_family(encoder, f, MetricType::Counter, |v| {
        Box::new(ConstCounter::new(v))
    })
}

fn gauges(encoder: &mut DescriptorEncoder, f: Family<f64>) -> std::fmt::Result {
    encode_family(encoder, f, MetricType::Gauge, |v| {
        Box::new(ConstGauge::new(v))
    })
}

fn encode_family<T>(
    encoder: &mut DescriptorEncoder,
    f: Family<T>,
    kind: MetricType,
    metric: impl Fn(T) -> Box<dyn EncodeMetric>,
) -> std::fmt::Result {
    if f.samples.is_empty() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(f.name, f.help, f.unit.as_ref(), kind)?;
    for (labels, value) in f.samples {
        let m = metric(value);
        if labels.is_empty() {
            m.encode(family.encode_family(&Vec::<(&str, String)>::new())?)?;
        } else {
            m.encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

impl Collector for Metrics {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let service = &self.service;
        let settings = service.settings();
        let health = health::check(service);
        gauges(
            &mut e,
            Family::new(
                "tapdeck_build_info",
                "The running tapdeck version (always 1).",
            )
            .one(1.0)
            .labelled(vec![("version", env!("CARGO_PKG_VERSION").to_string())]),
        )?;
        gauges(
            &mut e,
            Family::new(
                "tapdeck_healthy",
                "1 while /healthz answers 200 (recording, capture progressing, a data directory writable, drops under health-max-drops).",
            )
            .one(f64::from(u8::from(health.healthy))),
        )?;
        gauges(
            &mut e,
            Family::new(
                "tapdeck_retention_min_horizon",
                "The min-horizon setting: how much history the store should hold (0: no alert).",
            )
            .unit(Unit::Seconds)
            .one(settings.min_horizon as f64),
        )?;
        process_metrics(&mut e)?;
        let Some(live) = service.live() else {
            return Ok(());
        };
        let r = live.snapshot();

        let mut seen = Family::new(
            "tapdeck_packets_seen",
            "Packets the capture sources saw (as the kernel counted them), per interface.",
        );
        let mut stored = Family::new(
            "tapdeck_packets_stored",
            "Packets written to the store, per interface.",
        );
        let mut dropped = Family::new(
            "tapdeck_packets_dropped",
            "Packets lost, per interface and cause: kernel (the socket's ring was full), staging_full (the staging pool was full), write_error (the disk failed or retention refused).",
        );
        let mut in_flight = Family::new(
            "tapdeck_packets_in_flight",
            "Packets seen but neither stored nor dropped yet (ring, staging, compressors, write buffer): seen = stored + dropped + in flight.",
        );
        for s in &r.streams {
            let names = live.stats.streams[s.stream as usize]
                .interface_names
                .lock()
                .unwrap()
                .clone();
            for (i, c) in s.interfaces.iter().enumerate() {
                let labels = || -> Labels {
                    vec![
                        ("stream", s.stream.to_string()),
                        (
                            "interface",
                            names.get(i).cloned().unwrap_or_else(|| i.to_string()),
                        ),
                    ]
                };
                seen.add(labels(), c.seen);
                stored.add(labels(), c.stored);
                for (cause, n) in [
                    ("kernel", c.dropped_kernel),
                    ("staging_full", c.dropped_staging_full),
                    ("write_error", c.dropped_write_error),
                ] {
                    let mut l = labels();
                    l.push(("cause", cause.to_string()));
                    dropped.add(l, n);
                }
                in_flight.add(labels(), c.in_flight() as f64);
            }
        }
        counters(&mut e, seen)?;
        counters(&mut e, stored)?;
        counters(&mut e, dropped)?;
        gauges(&mut e, in_flight)?;

        let mut bytes: Vec<Family<u64>> = vec![
            Family::new(
                "tapdeck_bytes_captured",
                "Packet bytes as the sources captured them (after any snap length).",
            ),
            Family::new(
                "tapdeck_bytes_kept",
                "Packet bytes kept (after header-only capture cut them).",
            ),
            Family::new(
                "tapdeck_bytes_wire",
                "Packet bytes as they were on the wire.",
            ),
            Family::new(
                "tapdeck_bytes_staged",
                "Record bytes copied into staging (capture data before compression).",
            ),
        ];
        for (stream, s) in live.stats.streams.iter().enumerate() {
            let capture = s.capture.lock().unwrap().clone();
            let sum = |f: fn(&tapdeck_recorder::stats::CaptureCounts) -> u64| {
                capture.iter().map(f).sum::<u64>()
            };
            let labels = || vec![("stream", stream.to_string())];
            bytes[0].add(labels(), sum(|c| c.captured_bytes));
            bytes[1].add(labels(), sum(|c| c.kept_bytes));
            bytes[2].add(labels(), sum(|c| c.wire_bytes));
            bytes[3].add(labels(), sum(|c| c.staged_bytes));
        }
        for f in bytes {
            counters(&mut e, f)?;
        }
        counters(
            &mut e,
            Family::new(
                "tapdeck_bytes_written",
                "Bytes written to data files (compressed where a codec was used).",
            )
            .one(r.bytes_written),
        )?;
        let mut chunks = Family::new("tapdeck_codec_chunks", "Chunks stored per codec rung.");
        let mut codec_in = Family::new(
            "tapdeck_codec_bytes_in",
            "Capture data that went through each codec rung (raw: stored as is).",
        );
        let mut codec_out = Family::new(
            "tapdeck_codec_bytes_out",
            "What each codec rung's input became on disk.",
        );
        for (codec, c) in &r.codecs {
            let labels = || vec![("codec", codec.clone())];
            chunks.add(labels(), c.chunks);
            codec_in.add(labels(), c.bytes_in);
            codec_out.add(labels(), c.bytes_out);
        }
        counters(&mut e, chunks)?;
        counters(&mut e, codec_in)?;
        counters(&mut e, codec_out)?;

        let mut fill = Family::new(
            "tapdeck_staging_fill_ratio",
            "Fraction of each stream's staging pool in use (1: full, packets are dropped).",
        );
        for (stream, f) in live.staging_fill().into_iter().enumerate() {
            fill.add(vec![("stream", stream.to_string())], f);
        }
        gauges(&mut e, fill)?;
        gauges(
            &mut e,
            Family::new(
                "tapdeck_compressor_backlog_chunks",
                "Chunks waiting for or in a compressor.",
            )
            .one(live.compressor_backlog() as f64),
        )?;
        for (name, help, v) in [
            (
                "tapdeck_files_written",
                "Data files completed.",
                r.files_written,
            ),
            (
                "tapdeck_files_deleted",
                "Data files deleted by retention.",
                r.files_deleted,
            ),
            (
                "tapdeck_bytes_deleted",
                "Bytes of data files deleted by retention.",
                r.bytes_deleted,
            ),
            (
                "tapdeck_write_errors",
                "Failed writes to data directories.",
                r.write_errors,
            ),
            (
                "tapdeck_retention_holds",
                "Times retention began refusing writes (only files it must keep were left to delete).",
                r.retention_holds,
            ),
            (
                "tapdeck_retention_refused_chunks",
                "Chunks retention refused (their packets count as write_error drops).",
                r.retention_refused,
            ),
        ] {
            counters(&mut e, Family::new(name, help).one(v))?;
        }

        let dirs = live.dirs();
        let mut free = Family::new(
            "tapdeck_data_dir_free",
            "Bytes available on each data directory's filesystem.",
        )
        .unit(Unit::Bytes);
        let mut size = Family::new(
            "tapdeck_data_dir_size",
            "Size of each data directory's filesystem.",
        )
        .unit(Unit::Bytes);
        let mut up = Family::new(
            "tapdeck_data_dir_up",
            "1 while a data directory takes writes, 0 while it is failing (retried every 2 s).",
        );
        for d in &dirs {
            let labels = || vec![("dir", d.path.display().to_string())];
            if let Some(b) = d.free_bytes {
                free.add(labels(), b as f64);
            }
            if let Some(b) = d.size_bytes {
                size.add(labels(), b as f64);
            }
            up.add(labels(), f64::from(u8::from(d.up)));
        }
        gauges(&mut e, free)?;
        gauges(&mut e, size)?;
        gauges(&mut e, up)?;
        gauges(
            &mut e,
            Family::new(
                "tapdeck_retention_enabled",
                "1 when max-bytes or min-free keeps the store within limits by deleting the oldest files.",
            )
            .one(f64::from(u8::from(live.retention.policy().is_set()))),
        )?;
        gauges(
            &mut e,
            Family::new(
                "tapdeck_retention_horizon_timestamp_seconds",
                "Time of the oldest packet still stored (the start of this run before any file is complete).",
            )
            .one(live.horizon_ns() as f64 / 1e9),
        )?;
        let last = live
            .stats
            .last_file_completed_ns
            .load(std::sync::atomic::Ordering::Relaxed);
        if last > 0 {
            gauges(
                &mut e,
                Family::new(
                    "tapdeck_last_file_completed_timestamp_seconds",
                    "When the last data file was completed.",
                )
                .one(last as f64 / 1e9),
            )?;
        }
        let mut progress = Family::new(
            "tapdeck_capture_progress_timestamp_seconds",
            "When each capture loop last went round (it does on a quiet link too): a stale value means a stuck capture thread.",
        );
        for (stream, at) in live.progress_ns().into_iter().enumerate() {
            progress.add(vec![("stream", stream.to_string())], at as f64 / 1e9);
        }
        gauges(&mut e, progress)?;
        Ok(())
    }
}

impl<T> Family<T> {
    /// Labels for a family of one sample.
    fn labelled(mut self, labels: Labels) -> Self {
        if let Some(s) = self.samples.last_mut() {
            s.0 = labels;
        }
        self
    }
}

/// The standard process metrics (`process_*`), from the kernel.
fn process_metrics(e: &mut DescriptorEncoder) -> std::fmt::Result {
    let p = crate::process::read();
    if let Some(cpu) = p.cpu_seconds {
        counters(
            e,
            Family::new("process_cpu_seconds", "User and system CPU time spent.").one(cpu),
        )?;
    }
    for (name, help, v) in [
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            p.resident_bytes,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            p.open_fds,
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since the epoch, in seconds.",
            p.start_time_s,
        ),
    ] {
        if let Some(v) = v {
            gauges(e, Family::new(name, help).one(v))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classic_format_names_counters_with_total_and_drops_openmetrics_lines() {
        let om = "# HELP a_seen Seen.\n# TYPE a_seen counter\na_seen_total{x=\"1\"} 3\n\
                  # HELP b_free Free.\n# TYPE b_free gauge\n# UNIT b_free bytes\nb_free_bytes 2.0\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP a_seen_total Seen.\n# TYPE a_seen_total counter\na_seen_total{x=\"1\"} 3\n\
             # HELP b_free Free.\n# TYPE b_free gauge\nb_free_bytes 2.0\n"
        );
    }
}
