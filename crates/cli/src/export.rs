//! `tapdeck export`: live capture as `record -i`, forwarded to collectors as IPFIX.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tapdeck_capture::{AfPacketConfig, AfPacketSource};
use tapdeck_forward::export::{self, Balance, ExportConfig, ExportStats, StreamSettings};
use tapdeck_forward::tls::{self, TlsFiles};
use tapdeck_recorder::recorder::HeaderDepth;

use crate::args::ExportArgs;
use crate::wording;
use tapdeck_recorder::options::parse_size;

pub fn run(args: &ExportArgs) -> anyhow::Result<i32> {
    let to = Collectors::parse(&args.to)?;
    let stream = stream_settings(args, &to)?;
    let cfg = export_config(args, &to, stream)?;
    let live = capture_config(args, &to, cfg.stream.is_some())?;
    let mut stats_out = stats_output(args.stats.as_deref())?;
    let sources = AfPacketSource::open_fanout(&live, args.threads).map_err(wording::capture)?;
    if let Some(user) = &args.user {
        tapdeck_capture::drop_privileges(user).map_err(wording::capture)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    install_signals(&stop)?;
    tracing::info!(
        "exporting {} to {}",
        args.interfaces.join(", "),
        to.addrs
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let last = export::run(cfg, sources, stop, |s, last| {
        if let Some(out) = stats_out.as_mut() {
            write_stats_line(out, s, last);
        }
    })
    .map_err(wording::forward)?;
    print_summary(&last);
    Ok(0)
}

/// The collectors of `--to`: their addresses, the host names as given (for TLS), and the
/// one transport they share.
struct Collectors<'a> {
    addrs: Vec<SocketAddr>,
    hosts: Vec<&'a str>,
    transport: &'static str,
}

impl<'a> Collectors<'a> {
    fn parse(to: &'a [String]) -> anyhow::Result<Collectors<'a>> {
        let mut addrs = Vec::new();
        let mut hosts = Vec::new();
        let mut transports = Vec::new();
        for to in to {
            let (transport, host) = split_scheme(to)?;
            addrs.push(resolve(to, host)?);
            hosts.push(
                host.rsplit_once(':')
                    .map_or(host, |(h, _)| h)
                    .trim_matches(['[', ']']),
            );
            transports.push(transport);
        }
        let transport = transports[0];
        if transports.iter().any(|t| *t != transport) {
            bail!(
                "--to: give every collector the same transport (all UDP, all tcp:// or all tls://)"
            );
        }
        Ok(Collectors {
            addrs,
            hosts,
            transport,
        })
    }
}

/// TCP and TLS: the stream's buffer, and for TLS the client settings and the name each
/// collector's certificate must carry. None for UDP. The TLS files go together, and only
/// with tls://.
fn stream_settings(
    args: &ExportArgs,
    to: &Collectors<'_>,
) -> anyhow::Result<Option<StreamSettings>> {
    let tls_files = [
        ("--tls-cert", &args.tls_cert),
        ("--tls-key", &args.tls_key),
        ("--tls-ca", &args.tls_ca),
    ];
    let tls_config = if to.transport == "tls" {
        if let Some((name, _)) = tls_files.iter().find(|(_, f)| f.is_none()) {
            bail!("--to tls://: TLS needs --tls-cert, --tls-key and --tls-ca ({name} is missing)");
        }
        let files = TlsFiles {
            cert: args.tls_cert.as_deref().expect("checked"),
            key: args.tls_key.as_deref().expect("checked"),
            ca: args.tls_ca.as_deref().expect("checked"),
        };
        let config = tls::client_config(&files).map_err(wording::forward)?;
        let names = to
            .hosts
            .iter()
            .map(|h| tls::server_name(h).map_err(wording::forward))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Some((config, names))
    } else {
        if let Some((name, _)) = tls_files.iter().find(|(_, f)| f.is_some()) {
            bail!("{name} is for TLS: give the collectors as --to tls://HOST:PORT to use it");
        }
        None
    };
    Ok(match to.transport {
        "udp" => None,
        _ => Some(StreamSettings {
            tls: tls_config,
            buffer: usize::try_from(parse_size("--buffer", &args.buffer)?)
                .context("--buffer is too large")?,
        }),
    })
}

/// A flag's seconds as a positive duration.
fn seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .with_context(|| format!("{flag} must be a positive number of seconds"))
}

/// What the exporter does: where to, how balanced, how large its messages, how often the
/// templates and counts go out.
fn export_config(
    args: &ExportArgs,
    to: &Collectors<'_>,
    stream: Option<StreamSettings>,
) -> anyhow::Result<ExportConfig> {
    let message_len = args
        .mtu
        .map(|mtu| {
            if stream.is_some() {
                bail!(
                    "--mtu is for UDP: over TCP and TLS messages are {} octets",
                    tapdeck_forward::tcp::STREAM_MESSAGE_LEN
                );
            }
            let overhead = tapdeck_forward::udp::ip_udp_overhead(&to.addrs[0]);
            mtu.checked_sub(overhead)
                .with_context(|| format!("--mtu {mtu} is below the IP and UDP headers"))
        })
        .transpose()?;
    Ok(ExportConfig {
        message_len,
        collectors: to.addrs.clone(),
        balance: match args.balance.as_str() {
            "round-robin" => Balance::RoundRobin,
            _ => Balance::FlowHash,
        },
        template_interval: seconds("--template-interval", args.template_interval)?,
        stats_interval: seconds("--stats-interval", args.stats_interval)?,
        headers: match args.headers.as_deref() {
            Some("rpc") => Some(HeaderDepth::Rpc),
            Some(_) => Some(HeaderDepth::Transport),
            None => None,
        },
        gso: !args.no_gso,
        stream,
        duration: args
            .duration
            .map(|d| seconds("--duration", d))
            .transpose()?,
    })
}

/// The capture side, as `record -i`, with the export's own traffic filtered out.
fn capture_config(
    args: &ExportArgs,
    to: &Collectors<'_>,
    stream: bool,
) -> anyhow::Result<AfPacketConfig> {
    Ok(AfPacketConfig {
        interfaces: args.interfaces.clone(),
        block_size: u32::try_from(parse_size("--ring-block-size", &args.ring_block_size)?)
            .context("--ring-block-size must be under 4 GiB")?,
        blocks: args.ring_blocks,
        block_timeout_ms: args.block_timeout_ms,
        filter: Some(capture_filter(args.filter.as_deref(), &to.addrs, stream)),
        snaplen: Some(args.snaplen),
        count: args.count,
        ..AfPacketConfig::default()
    })
}

/// `--stats`: stdout for `-`, else a file created now.
fn stats_output(stats: Option<&str>) -> anyhow::Result<Option<Box<dyn Write + Send>>> {
    Ok(match stats {
        Some("-") => Some(Box::new(std::io::stdout())),
        Some(path) => Some(Box::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create stats file {path}"))?,
        )),
        None => None,
    })
}

/// One stats record as a JSON line, the final one marked.
fn write_stats_line(out: &mut dyn Write, s: &ExportStats, last: bool) {
    let mut line = serde_json::to_value(s).expect("stats serialize");
    if last {
        line["final"] = serde_json::json!(true);
    }
    // One write a record: a reader tailing the file never sees half a line.
    let line = format!("{line}\n");
    let _ = out.write_all(line.as_bytes()).and_then(|_| out.flush());
}

/// `udp://`, `tcp://` or `tls://` (UDP without one), and the rest.
fn split_scheme(to: &str) -> anyhow::Result<(&'static str, &str)> {
    Ok(match to.split_once("://") {
        None => ("udp", to),
        Some(("udp", r)) => ("udp", r),
        Some(("tcp", r)) => ("tcp", r),
        Some(("tls", r)) => ("tls", r),
        Some((other, _)) => {
            bail!("--to {to}: unknown transport {other}:// (udp://, tcp:// or tls://)")
        }
    })
}

/// HOST:PORT, or HOST alone for the IPFIX port; the first address the name resolves to.
fn resolve(to: &str, host: &str) -> anyhow::Result<SocketAddr> {
    let with_port = host
        .to_socket_addrs()
        .or_else(|_| (host, tapdeck_ipfix::IPFIX_PORT).to_socket_addrs());
    let mut addrs = with_port.with_context(|| {
        format!("--to {to}: cannot resolve it (give HOST:PORT, e.g. 198.18.0.2:4739)")
    })?;
    let addr = addrs
        .next()
        .with_context(|| format!("--to {to}: the name has no address"))?;
    if addr.port() == 0 {
        bail!(
            "--to {to}: give the collector's port (e.g. {}:4739)",
            addr.ip()
        );
    }
    Ok(addr)
}

/// The user's filter, less the export traffic itself: a capture interface that also
/// carries the datagrams to a collector must not capture them (they would be exported in
/// turn, forever).
///
/// A BPF load past the end of a frame rejects it, so `not (udp and dst port P)` alone would
/// silently drop every frame too short for the fields it reads (a truncated IP header, UDP
/// ports cut off), which are never export datagrams. The guard keeps those frames: shorter
/// than an IPv4 header, shorter than its own IPv4 header plus the ports, or an IPv6 frame
/// shorter than its header plus the ports.
///
/// Over TCP and TLS both directions are the export's (the collector's acknowledgements too).
fn capture_filter(user: Option<&str>, collectors: &[SocketAddr], stream: bool) -> String {
    const TOO_SHORT: &str =
        "(len < 34) or (ip and len < 18 + (ip[0] & 0xf) * 4) or (ip6 and len < 58)";
    let own: Vec<String> = collectors
        .iter()
        .map(|c| match stream {
            false => format!(
                "not (udp and dst host {} and dst port {})",
                c.ip(),
                c.port()
            ),
            true => format!("not (tcp and host {} and port {})", c.ip(), c.port()),
        })
        .collect();
    let own = format!("({TOO_SHORT} or ({}))", own.join(" and "));
    match user {
        Some(f) if !f.trim().is_empty() => format!("({f}) and {own}"),
        _ => own,
    }
}

fn print_summary(s: &ExportStats) {
    eprintln!(
        "tapdeck export: {:.2} s; packets: observed {}  sent {}  not sent {}  kernel dropped {}",
        s.elapsed_s, s.observed, s.sent, s.not_sent, s.kernel_dropped
    );
    if s.too_short_to_exclude > 0 {
        eprintln!(
            "  {} frames too short for the own-traffic exclusion to read were kept and exported",
            s.too_short_to_exclude
        );
    }
    let balance = s.unaccounted();
    eprintln!(
        "  accounting: observed = sent + not sent {}",
        if balance == 0 {
            "holds".to_string()
        } else {
            format!("is off by {balance} (please report this)")
        }
    );
    for c in &s.collectors {
        eprintln!(
            "  to {}: {} messages of up to {} octets, {} records, {} packets, {} bytes; not sent {} ({} send errors, {} refused)",
            c.collector, c.messages, c.message_len, c.records, c.packets, c.bytes, c.not_sent, c.send_errors, c.refused
        );
        if c.transport == "udp" && (c.down > 0 || c.failed_over > 0 || c.unconfirmed > 0) {
            eprintln!(
                "    refused: {} packets unconfirmed (sent in the window before an ICMP error), {} not sent while it was down, {} of its flows' packets failed over to another collector",
                c.unconfirmed, c.down, c.failed_over
            );
        }
        if c.transport != "udp" && c.failed_over > 0 {
            eprintln!(
                "    down for a while: {} of its flows' packets failed over to another collector",
                c.failed_over
            );
        }
        if c.connects > 0 || c.disconnects > 0 || c.over_buffer > 0 || c.unconfirmed > 0 {
            eprintln!(
                "    acknowledged by the collector: {} packets; over the buffer {}, unconfirmed at stop {}; {} connections, {} ended",
                c.packets, c.over_buffer, c.unconfirmed, c.connects, c.disconnects
            );
        }
    }
}

/// SIGINT/SIGTERM: finish (flush the batches, send the final counts); a second one exits
/// at once.
fn install_signals(stop: &Arc<AtomicBool>) -> anyhow::Result<()> {
    let s = Arc::clone(stop);
    crate::record::on_stop_signals(move || s.store(true, std::sync::atomic::Ordering::SeqCst))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_traffic_is_filtered_out() {
        let c: Vec<SocketAddr> = vec![
            "198.18.1.2:4739".parse().unwrap(),
            "[2001:db8::2]:9995".parse().unwrap(),
        ];
        let guard = "(len < 34) or (ip and len < 18 + (ip[0] & 0xf) * 4) or (ip6 and len < 58)";
        assert_eq!(
            capture_filter(Some("tcp"), &c[..1], false),
            format!("(tcp) and ({guard} or (not (udp and dst host 198.18.1.2 and dst port 4739)))")
        );
        assert_eq!(
            capture_filter(None, &c, false),
            format!("({guard} or (not (udp and dst host 198.18.1.2 and dst port 4739) and not (udp and dst host 2001:db8::2 and dst port 9995)))")
        );
        // libpcap compiles it, for both families.
        let dead = pcap::Capture::dead(pcap::Linktype::ETHERNET).unwrap();
        dead.compile(&capture_filter(Some("tcp"), &c, false), true)
            .unwrap();
        let tcp = capture_filter(None, &c[..1], true);
        assert!(
            tcp.ends_with("(not (tcp and host 198.18.1.2 and port 4739)))"),
            "{tcp}"
        );
        dead.compile(&tcp, true).unwrap();
    }

    #[test]
    fn collectors_resolve_with_a_default_port() {
        assert_eq!(resolve("x", "198.18.0.2:9").unwrap().port(), 9);
        assert_eq!(resolve("x", "198.18.0.2").unwrap().port(), 4739);
        assert_eq!(split_scheme("tls://h:1").unwrap(), ("tls", "h:1"));
        assert!(split_scheme("sctp://h:1").is_err());
    }
}
