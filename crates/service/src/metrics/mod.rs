//! `/metrics`: the recorder's counters in the Prometheus/OpenMetrics text format, read
//! from the running recorder at each scrape (prometheus-client's `Collector`), so every
//! scrape balances: seen = stored + dropped + in flight, per interface.
//!
//! A scrape gathers one [`reading`] of the service and the recorder, then each family's
//! collector ([`families`]) writes its `# HELP`, `# TYPE` and samples from it.

mod families;
mod family;
mod reading;

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use crate::state::Service;
use reading::Reading;

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

impl Collector for Metrics {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        families::encode_all(&Reading::gather(&self.service), &mut e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tapdeck_recorder::controller::ControllerView;
    use tapdeck_recorder::live::DirState;
    use tapdeck_recorder::os::CpuPressure;
    use tapdeck_recorder::stats::{
        CaptureCounts, CodecBytes, Drops, StatsRecord, StreamRecord, Totals,
    };
    use tapdeck_store::meta::InterfaceCounts;

    use crate::process::Process;
    use reading::RecorderReading;

    /// A recorder of two streams (the first with two interfaces, one not yet named), two
    /// codec rungs and two data directories (one failing, its filesystem unknown).
    fn fixed_reading() -> Reading {
        let counts = |seen, stored, k, s, w| InterfaceCounts {
            seen,
            dropped_kernel: k,
            received: seen - k,
            dropped_staging_full: s,
            dropped_write_error: w,
            stored,
        };
        let capture = |captured_bytes, kept_bytes, wire_bytes, staged_bytes| CaptureCounts {
            captured_bytes,
            kept_bytes,
            wire_bytes,
            staged_bytes,
            ..CaptureCounts::default()
        };
        let record = StatsRecord {
            ts_ns: 1_764_000_000_000_000_000,
            elapsed_s: 12.5,
            staging_fill: 0.25,
            totals: Totals {
                seen: 1600,
                stored: 1500,
                dropped: Drops {
                    kernel: 7,
                    staging_full: 3,
                    write_error: 2,
                },
                ..Totals::default()
            },
            bytes_written: 123_456,
            files_written: 4,
            files_deleted: 1,
            bytes_deleted: 9_999,
            write_errors: 2,
            retention_holds: 1,
            retention_refused: 5,
            codecs: [
                (
                    "lz4".to_string(),
                    CodecBytes {
                        chunks: 3,
                        bytes_in: 3000,
                        bytes_out: 1500,
                    },
                ),
                (
                    "zstd-1".to_string(),
                    CodecBytes {
                        chunks: 2,
                        bytes_in: 2000,
                        bytes_out: 700,
                    },
                ),
            ]
            .into(),
            ladder: Default::default(),
            ladder_per_s: Default::default(),
            controller: vec![
                ControllerView {
                    compressor_cpu_share: Some(0.5),
                    ..ControllerView::default()
                },
                ControllerView::default(),
            ],
            cpu_seconds: Default::default(),
            cpu_pressure: Some(CpuPressure {
                some_avg10: 0.3,
                some_avg60: 0.125,
                some_total_s: 100.0,
            }),
            streams: vec![
                StreamRecord {
                    stream: 0,
                    interfaces: vec![counts(1000, 950, 5, 3, 2), counts(100, 90, 2, 0, 0)],
                },
                StreamRecord {
                    stream: 1,
                    interfaces: vec![counts(500, 460, 0, 0, 0)],
                },
            ],
        };
        Reading {
            healthy: false,
            min_horizon_s: 86_400,
            process: Process {
                cpu_seconds: Some(1.5),
                resident_bytes: Some(52_428_800.0),
                open_fds: None,
                start_time_s: Some(1_764_000_000.0),
            },
            recorder: Some(RecorderReading {
                record,
                interface_names: vec![vec!["eth1".into()], vec!["eth2".into()]],
                capture: vec![
                    vec![capture(100, 90, 120, 110), capture(10, 9, 12, 11)],
                    vec![capture(50, 45, 60, 55)],
                ],
                staging_fill: vec![0.25, 0.0],
                compressor_backlog: 3,
                dirs: vec![
                    DirState {
                        path: "/data/a".into(),
                        free_bytes: Some(1 << 30),
                        size_bytes: Some(4 << 30),
                        up: true,
                    },
                    DirState {
                        path: "/data/b".into(),
                        free_bytes: None,
                        size_bytes: None,
                        up: false,
                    },
                ],
                retention_enabled: true,
                horizon_ns: 1_763_990_000_500_000_000,
                last_file_completed_ns: 1_763_999_999_000_000_000,
                progress_ns: vec![1_764_000_000_000_000_000, 1_763_999_999_750_000_000],
            }),
        }
    }

    fn exposition(reading: Reading) -> String {
        #[derive(Debug)]
        struct Fixed(Reading);
        impl Collector for Fixed {
            fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
                families::encode_all(&self.0, &mut e)
            }
        }
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed(reading)));
        encode(&registry).unwrap()
    }

    fn pinned(text: &str) -> String {
        text.replace(
            "version=\"VERSION\"",
            &format!("version=\"{}\"", env!("CARGO_PKG_VERSION")),
        )
    }

    /// The whole exposition of a fixed state, byte for byte: dashboards and alert rules
    /// depend on every name, label, help text and the order of the families.
    #[test]
    fn a_fixed_state_gives_the_pinned_exposition() {
        assert_eq!(
            exposition(fixed_reading()),
            pinned(include_str!("testdata/recording.txt"))
        );
        let mut idle = fixed_reading();
        idle.recorder = None;
        assert_eq!(exposition(idle), pinned(include_str!("testdata/idle.txt")));
    }

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
