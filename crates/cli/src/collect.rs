//! `tapdeck collect`: IPFIX packet reports from exporters into a store, through the same
//! recorder as `record`.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use tapdeck_forward::collect::{CollectorSource, LiveStream, MessageFile, Outputs};
use tapdeck_forward::ledger::{DurableSaves, Ledger, LedgerFile, LEDGER_FILE};
use tapdeck_forward::tls::{self, TlsFiles};
use tapdeck_recorder::options::RecordOptions;
use tapdeck_recorder::pipeline::Control;
use tapdeck_recorder::recorder::{self, StatsWriter};

use crate::args::CollectArgs;

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
    let tls_files = [
        ("--tls-cert", &args.tls_cert),
        ("--tls-key", &args.tls_key),
        ("--tls-client-ca", &args.tls_client_ca),
    ];
    let tls_config = match transport {
        Transport::Tls => {
            if let Some((name, _)) = tls_files.iter().find(|(_, f)| f.is_none()) {
                bail!("--listen {}: TLS needs --tls-cert, --tls-key and --tls-client-ca ({name} is missing)", args.listen);
            }
            let files = TlsFiles {
                cert: args.tls_cert.as_deref().expect("checked"),
                key: args.tls_key.as_deref().expect("checked"),
                ca: args.tls_client_ca.as_deref().expect("checked"),
            };
            Some(tls::server_config(&files).map_err(|e| anyhow::anyhow!(e))?)
        }
        _ => {
            if let Some((name, _)) = tls_files.iter().find(|(_, f)| f.is_some()) {
                bail!("{name} is for TLS: listen on tls://ADDR:PORT to use it");
            }
            None
        }
    };
    if transport != Transport::Udp && args.sockets != 1 {
        bail!("--sockets is for UDP: over TCP and TLS every connection goes to one stream");
    }
    let allow = args
        .allow
        .iter()
        .map(|a| {
            a.parse::<IpAddr>().with_context(|| {
                format!(
                    "--allow {a}: not an IP address (give the exporter's address, e.g. 198.18.0.1)"
                )
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if args.output.format == "pcap" {
        bail!("--format pcap: a collector stores every interface its exporters announce, and classic pcap holds one; use pcapng (the default)");
    }
    if args.output.rotate_interval == Some(0) {
        bail!("--rotate-interval must be at least 1 second");
    }
    let o = &args.output;
    // Over TCP/TLS the source itself stops (after closing every connection cleanly).
    let stream = transport != Transport::Udp;
    let opts = RecordOptions {
        store: Some(args.store.clone()),
        write: o.clone(),
        compressors: Some(1),
        duration: if stream { None } else { args.duration },
        stats_interval: args.stats_interval,
        bench_disk_limit: args.bench_disk_limit.clone(),
        ..RecordOptions::default()
    };
    // The ledger is saved only once the packets it counts are synced (see below): sync the
    // open files every second, so it lags the store by about that much.
    let mut cfg = opts.builder()?.sync_interval(Some(LEDGER_SYNC_INTERVAL));
    std::fs::create_dir_all(&args.store)
        .with_context(|| format!("cannot create store {}", args.store.display()))?;
    let ledger_path = args.store.join(LEDGER_FILE);
    let ledger = Arc::new(Mutex::new(
        Ledger::resume_from(&ledger_path).map_err(|e| anyhow::anyhow!(e))?,
    ));
    let outputs = Arc::new(Outputs {
        file: args
            .ipfix_file
            .as_deref()
            .map(MessageFile::create)
            .transpose()
            .map_err(|e| anyhow::anyhow!(e))?
            .map(Mutex::new),
        live: args
            .write
            .as_ref()
            .map(|_| Mutex::new(LiveStream::new(Box::new(std::io::stdout())))),
    });
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
    .map_err(|e| anyhow::anyhow!(e))?;
    let bound = sources
        .first()
        .and_then(|s| s.local_addr())
        .unwrap_or(listen);
    let options = cfg.options_mut();
    options["source"] = serde_json::json!(format!("ipfix {} {bound}", transport.name()));
    options["allow"] = serde_json::json!(args.allow);
    options["sockets"] = serde_json::json!(args.sockets);
    options["ipfix_file"] = serde_json::json!(args.ipfix_file);
    let cfg = cfg.build();
    let control = Arc::new(Control::default());
    if stream {
        install_drain_signals(&control, &drain)?;
        if let Some(d) = args.duration {
            let d = Duration::try_from_secs_f64(d)
                .ok()
                .context("--duration must be a positive number of seconds")?;
            let drain = Arc::clone(&drain);
            std::thread::spawn(move || {
                std::thread::sleep(d);
                drain.store(true, Ordering::SeqCst);
            });
        }
    } else {
        install_signals(&control)?;
    }
    let stats_path = args.store.join("stats.jsonl");
    let mut stats = StatsWriter::new(Box::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stats_path)
            .with_context(|| format!("cannot open {}", stats_path.display()))?,
    ));
    let history_path = args.store.join("collector.jsonl");
    let mut history = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&history_path)
        .with_context(|| format!("cannot open {}", history_path.display()))?;
    if let Some(user) = &args.user {
        tapdeck_capture::drop_privileges(user).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    tracing::info!(
        "collecting IPFIX on {} {bound} into {}",
        transport.name(),
        args.store.display()
    );
    let mut last = LedgerFile::default();
    let mut saves = DurableSaves::new();
    // Packets a resumed ledger counted in earlier runs: the recorder counts this run's.
    let earlier = ledger.lock().unwrap().snapshot().packets();
    let summary = recorder::record(cfg, sources, control, |record, done| {
        stats.write(record, done);
        // Each stats record snapshots the ledger with the packets delivered so far; a
        // snapshot is saved only once the recorder has that many synced to the disk (or
        // counted as dropped): see `DurableSaves`. With several sockets the streams drain
        // apart and this holds for the totals only. The history goes beside stats.jsonl.
        let snap = ledger.lock().unwrap().snapshot();
        saves.taken(snap.packets() - earlier, snap.clone());
        let settled = record.totals.durable + record.totals.dropped.total();
        if let Some(saved) = saves.ready(settled) {
            if let Err(e) = saved.save(&ledger_path) {
                tracing::warn!("{e}");
            }
        }
        // Only what changed since the last line (the final line: everything), so an idle
        // collector's history does not grow by its whole ledger every interval.
        let line = history_line(&snap, if done { None } else { Some(&last) }, record.ts_ns);
        if let Some(mut line) = line {
            if done {
                line["final"] = serde_json::json!(true);
            }
            // One write a record: a reader tailing the history never sees half a line.
            let _ = history.write_all(format!("{line}\n").as_bytes());
        }
        last = snap;
    })
    .map_err(|e| anyhow::anyhow!(e))?;
    if let Some(f) = &outputs.file {
        f.lock().unwrap().flush();
    }
    let ledger = ledger.lock().unwrap();
    ledger.save(&ledger_path).map_err(|e| anyhow::anyhow!(e))?;
    print_summary(&summary);
    print_ledger(&ledger.snapshot());
    let _ = std::io::stdout().flush();
    if let Some(fatal) = summary.fatal {
        bail!("{fatal}");
    }
    Ok(0)
}

/// TCP/TLS: SIGINT/SIGTERM close the connections cleanly (the source then ends the
/// recording); a second one exits at once. SIGHUP rotates, as for UDP.
fn install_drain_signals(control: &Arc<Control>, drain: &Arc<AtomicBool>) -> anyhow::Result<()> {
    let d = Arc::clone(drain);
    crate::record::on_stop_signals(move || d.store(true, Ordering::SeqCst))?;
    crate::record::on_rotate_signal(control)
}

/// A `collector.jsonl` line: the streams and per-address counts that differ from `last`
/// (everything when there is no `last`); None when nothing changed.
fn history_line(
    snap: &LedgerFile,
    last: Option<&LedgerFile>,
    ts_ns: u64,
) -> Option<serde_json::Value> {
    let streams: Vec<_> = snap
        .streams
        .iter()
        .filter(|s| last.is_none_or(|l| !l.streams.contains(s)))
        .collect();
    // Per-address maps: the addresses whose counts changed.
    let changed = |now: serde_json::Value, before: Option<serde_json::Value>| {
        let now = now.as_object().cloned().unwrap_or_default();
        let before = before
            .and_then(|b| b.as_object().cloned())
            .unwrap_or_default();
        now.into_iter()
            .filter(|(k, v)| before.get(k) != Some(v))
            .collect::<serde_json::Map<_, _>>()
    };
    let json = |v: &dyn Fn(&LedgerFile) -> serde_json::Value, l: Option<&LedgerFile>| l.map(v);
    let na = |l: &LedgerFile| serde_json::json!(l.not_allowed);
    let un = |l: &LedgerFile| serde_json::json!(l.unreadable);
    let re = |l: &LedgerFile| serde_json::json!(l.refused);
    let not_allowed = changed(na(snap), json(&na, last));
    let unreadable = changed(un(snap), json(&un, last));
    let refused = changed(re(snap), json(&re, last));
    if last.is_some()
        && streams.is_empty()
        && not_allowed.is_empty()
        && unreadable.is_empty()
        && refused.is_empty()
    {
        return None;
    }
    Some(serde_json::json!({
        "version": snap.version,
        "ts_ns": ts_ns,
        "streams": streams,
        "not_allowed": not_allowed,
        "unreadable": unreadable,
        "refused": refused,
    }))
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
