//! `tapdeck collect`: IPFIX packet reports from exporters into a store, through the same
//! recorder as `record`.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use tapdeck_forward::collect::{CollectorSource, LiveStream, MessageFile, Outputs};
use tapdeck_forward::journal::LedgerJournal;
use tapdeck_forward::ledger::{Ledger, LedgerFile, LEDGER_FILE};
use tapdeck_forward::tls::{self, TlsFiles};
use tapdeck_recorder::options::{RecordOptions, RecorderConfigBuilder};
use tapdeck_recorder::pipeline::Control;
use tapdeck_recorder::recorder::{self, StatsWriter};

use crate::args::CollectArgs;
use crate::wording;

/// How often the writers sync the open files, so that ledger snapshots can be saved.
const LEDGER_SYNC_INTERVAL: Duration = Duration::from_secs(1);
use crate::record::{install_signals, print_summary};

/// The transports `--listen` names by its scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Udp,
    Tcp,
    Tls,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Tls => "tls",
        }
    }
}

/// `[udp://|tcp://|tls://]ADDR:PORT`.
fn parse_listen(listen: &str) -> anyhow::Result<(Transport, SocketAddr)> {
    let (transport, rest) = match listen.split_once("://") {
        None => (Transport::Udp, listen),
        Some(("udp", r)) => (Transport::Udp, r),
        Some(("tcp", r)) => (Transport::Tcp, r),
        Some(("tls", r)) => (Transport::Tls, r),
        Some((other, _)) => {
            bail!("--listen {listen}: unknown transport {other}:// (udp://, tcp:// or tls://)")
        }
    };
    let addr = rest
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .with_context(|| {
            format!(
                "--listen {listen}: not an address and port (e.g. 0.0.0.0:4739, [::]:4739 or tls://0.0.0.0:4739)"
            )
        })?;
    Ok((transport, addr))
}

pub fn run(args: &CollectArgs) -> anyhow::Result<i32> {
    let (transport, listen) = parse_listen(&args.listen)?;
    let tls_config = tls_server(args, transport)?;
    if transport != Transport::Udp && args.sockets != 1 {
        bail!("--sockets is for UDP: over TCP and TLS every connection goes to one stream");
    }
    let allow = allow_list(&args.allow)?;
    // Over TCP/TLS the source itself stops (after closing every connection cleanly).
    let stream = transport != Transport::Udp;
    let mut cfg = recorder_config(args, stream)?;
    std::fs::create_dir_all(&args.store)
        .with_context(|| format!("cannot create store {}", args.store.display()))?;
    let ledger = Arc::new(Mutex::new(
        Ledger::resume_from(&args.store.join(LEDGER_FILE)).map_err(wording::forward)?,
    ));
    let outputs = outputs(args)?;
    let drain = Arc::new(AtomicBool::new(false));
    let sources = match transport {
        Transport::Udp => CollectorSource::open(listen, args.sockets, &allow, &ledger, &outputs),
        _ => CollectorSource::open_stream(
            listen,
            tls_config,
            &allow,
            &ledger,
            &outputs,
            Arc::clone(&drain),
        )
        .map(|s| vec![s]),
    }
    .map_err(wording::forward)?;
    let bound = sources
        .first()
        .and_then(|s| s.local_addr())
        .unwrap_or(listen);
    describe_source(&mut cfg, args, transport, bound);
    let cfg = cfg.build();
    let control = Arc::new(Control::default());
    if stream {
        install_drain_signals(&control, &drain)?;
        drain_after(args.duration, &drain)?;
    } else {
        install_signals(&control)?;
    }
    let mut stats = stats_writer(&args.store)?;
    let mut journal =
        LedgerJournal::open(Arc::clone(&ledger), &args.store).map_err(wording::forward)?;
    if let Some(user) = &args.user {
        tapdeck_capture::drop_privileges(user).map_err(wording::capture)?;
    }
    tracing::info!(
        "collecting IPFIX on {} {bound} into {}",
        transport.name(),
        args.store.display()
    );
    let summary = recorder::record(cfg, sources, control, |record, done| {
        stats.write(record, done);
        let settled = record.totals.durable + record.totals.dropped.total();
        journal.record(record.ts_ns, settled, done);
    })
    .map_err(|e| anyhow::anyhow!(e))?;
    if let Some(f) = &outputs.file {
        f.lock().unwrap().flush();
    }
    let ledger = journal.finish().map_err(wording::forward)?;
    print_summary(&summary);
    print_ledger(&ledger);
    let _ = std::io::stdout().flush();
    if let Some(fatal) = summary.fatal {
        bail!("{fatal}");
    }
    Ok(0)
}

/// TLS: the server settings from the three files, which go together and only with
/// tls://.
fn tls_server(
    args: &CollectArgs,
    transport: Transport,
) -> anyhow::Result<Option<Arc<tls::ServerConfig>>> {
    let tls_files = [
        ("--tls-cert", &args.tls_cert),
        ("--tls-key", &args.tls_key),
        ("--tls-client-ca", &args.tls_client_ca),
    ];
    if transport != Transport::Tls {
        if let Some((name, _)) = tls_files.iter().find(|(_, f)| f.is_some()) {
            bail!("{name} is for TLS: listen on tls://ADDR:PORT to use it");
        }
        return Ok(None);
    }
    if let Some((name, _)) = tls_files.iter().find(|(_, f)| f.is_none()) {
        bail!(
            "--listen {}: TLS needs --tls-cert, --tls-key and --tls-client-ca ({name} is missing)",
            args.listen
        );
    }
    let files = TlsFiles {
        cert: args.tls_cert.as_deref().expect("checked"),
        key: args.tls_key.as_deref().expect("checked"),
        ca: args.tls_client_ca.as_deref().expect("checked"),
    };
    Ok(Some(tls::server_config(&files).map_err(wording::forward)?))
}

/// `--allow`: the exporters' addresses.
fn allow_list(allow: &[String]) -> anyhow::Result<Vec<IpAddr>> {
    allow
        .iter()
        .map(|a| {
            a.parse::<IpAddr>().with_context(|| {
                format!(
                    "--allow {a}: not an IP address (give the exporter's address, e.g. 198.18.0.1)"
                )
            })
        })
        .collect()
}

/// The recorder behind the collector: the store's output flags, one compressor, and the
/// open files synced every second so that ledger snapshots can be saved.
fn recorder_config(args: &CollectArgs, stream: bool) -> anyhow::Result<RecorderConfigBuilder> {
    if args.output.format == "pcap" {
        bail!("--format pcap: a collector stores every interface its exporters announce, and classic pcap holds one; use pcapng (the default)");
    }
    if args.output.rotate_interval == Some(0) {
        bail!("--rotate-interval must be at least 1 second");
    }
    let opts = RecordOptions {
        store: Some(args.store.clone()),
        write: args.output.clone(),
        compressors: Some(1),
        duration: if stream { None } else { args.duration },
        stats_interval: args.stats_interval,
        bench_disk_limit: args.bench_disk_limit.clone(),
        ..RecordOptions::default()
    };
    // The ledger is saved only once the packets it counts are synced (see `LedgerJournal`):
    // sync the open files every second, so it lags the store by about that much.
    Ok(opts.builder()?.sync_interval(Some(LEDGER_SYNC_INTERVAL)))
}

/// What the store's manifest says of its source: the transport and address bound, and the
/// collector's own options.
fn describe_source(
    cfg: &mut RecorderConfigBuilder,
    args: &CollectArgs,
    transport: Transport,
    bound: SocketAddr,
) {
    let options = cfg.options_mut();
    options["source"] = serde_json::json!(format!("ipfix {} {bound}", transport.name()));
    options["allow"] = serde_json::json!(args.allow);
    options["sockets"] = serde_json::json!(args.sockets);
    options["ipfix_file"] = serde_json::json!(args.ipfix_file);
}

/// The recorder's stats records, appended to `STORE/stats.jsonl`.
fn stats_writer(store: &std::path::Path) -> anyhow::Result<StatsWriter> {
    let stats_path = store.join("stats.jsonl");
    Ok(StatsWriter::new(Box::new(
        tapdeck_recorder::report::LineFile::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&stats_path)
                .with_context(|| format!("cannot open {}", stats_path.display()))?,
        ),
    )))
}

/// `--ipfix-file` and `-w -`: where accepted messages and packets go besides the store.
fn outputs(args: &CollectArgs) -> anyhow::Result<Arc<Outputs>> {
    Ok(Arc::new(Outputs {
        file: args
            .ipfix_file
            .as_deref()
            .map(MessageFile::create)
            .transpose()
            .map_err(wording::forward)?
            .map(Mutex::new),
        live: args
            .write
            .as_ref()
            .map(|_| Mutex::new(LiveStream::new(Box::new(std::io::stdout())))),
    }))
}

/// TCP/TLS `--duration`: the connections are closed cleanly once it has passed.
fn drain_after(duration: Option<f64>, drain: &Arc<AtomicBool>) -> anyhow::Result<()> {
    if let Some(d) = duration {
        let d = Duration::try_from_secs_f64(d)
            .ok()
            .context("--duration must be a positive number of seconds")?;
        let drain = Arc::clone(drain);
        std::thread::spawn(move || {
            std::thread::sleep(d);
            drain.store(true, Ordering::SeqCst);
        });
    }
    Ok(())
}

/// TCP/TLS: SIGINT/SIGTERM close the connections cleanly (the source then ends the
/// recording); a second one exits at once. SIGHUP rotates, as for UDP.
fn install_drain_signals(control: &Arc<Control>, drain: &Arc<AtomicBool>) -> anyhow::Result<()> {
    let d = Arc::clone(drain);
    crate::record::on_stop_signals(move || d.store(true, Ordering::SeqCst))?;
    crate::record::on_rotate_signal(control)
}

fn print_ledger(l: &LedgerFile) {
    for s in &l.streams {
        eprintln!(
            "  exporter {} domain {}: stored {} packets; {} messages, {} records, lost in transit {} ({} reordered back), {} duplicates, {} restarts; dropped: {} without template, {} malformed; {} packets shed (over its share of the staging pool)",
            s.exporter, s.domain, s.packets, s.messages, s.records, s.lost, s.reordered, s.duplicates, s.restarts, s.no_template, s.malformed, s.shed
        );
        if let Some(e) = &s.exporter_counts {
            eprintln!(
                "    its own counts: observed {}, kernel dropped {}, not sent {}",
                e.observed_packets, e.ignored_packets, e.not_sent_packets
            );
        }
    }
    for (ip, n) in &l.not_allowed {
        eprintln!("  refused {n} messages from {ip} (not in --allow)");
    }
    for (ip, n) in &l.unreadable {
        eprintln!("  dropped {n} unreadable datagrams from {ip}");
    }
    for (ip, r) in &l.refused {
        eprintln!(
            "  over the caps from {ip}: {} messages of refused observation domains, {} of refused templates; {} packets stored under a catch-all interface; {} interface names not kept; {} TLS handshakes failed; {} connections refused",
            r.domains, r.templates, r.interfaces, r.names, r.handshakes, r.connections
        );
    }
}
