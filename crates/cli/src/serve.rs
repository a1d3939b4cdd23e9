//! `tapdeck serve`: the config file and flags become record options and service settings
//! (`tapdeck_service::config`); then the HTTP server, the signal and monitor threads
//! start beside the recorder, which records exactly as `record -i` does.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory};
use serde_json::Value as Json;
use signal_hook::consts::{SIGHUP, SIGUSR1};
use tapdeck_recorder::pipeline::Control;
use tapdeck_service::config::{LogFormat, ServeConfig, ServeSettings};
use tapdeck_service::history::{self, Timeline};
use tapdeck_service::state::{Phase, Service};
use tapdeck_service::{health, http, listen, notify, reload};

use crate::args::{Cli, ServeArgs};
use crate::exit::usage;
use crate::logging;
use crate::record;

/// The config file with the flags given on the command line over it.
fn load(args: &ServeArgs, matches: &ArgMatches) -> anyhow::Result<(ServeConfig, Overrides)> {
    // A config that cannot run is a usage error (exit 2): the unit does not restart on it.
    let mut config = match &args.config {
        Some(path) => ServeConfig::load(path).map_err(|e| usage(e.to_string()))?,
        None => ServeConfig::default(),
    };
    let overrides = flag_overrides(args, matches);
    config
        .override_with(&overrides)
        .map_err(|e| usage(e.to_string()))?;
    Ok((config, overrides))
}

type Overrides = BTreeMap<String, Json>;

/// The flags given on the command line (not their defaults), as config keys and values.
fn flag_overrides(args: &ServeArgs, matches: &ArgMatches) -> Overrides {
    let record = serde_json::to_value(&args.record).unwrap_or_default();
    let serve = serde_json::json!({
        "listen": args.listen,
        "metrics-token-file": args.metrics_token_file,
        "token-file": args.token_file,
        "tls-cert": args.tls_cert,
        "tls-key": args.tls_key,
        "tls-client-ca": args.tls_client_ca,
        "log-format": args.log_format,
        "health-stall": args.health_stall,
        "health-max-drops": args.health_max_drops,
        "min-horizon": args.min_horizon,
        "query-max-concurrent": args.query_max_concurrent,
        "query-max-bytes": args.query_max_bytes,
        "query-max-seconds": args.query_max_seconds,
    });
    let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    let cli = Cli::command();
    let mut out = Overrides::new();
    if let Some(cmd) = cli.find_subcommand("serve") {
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if !given(arg.get_id().as_str()) {
                continue;
            }
            if let Some(v) = record.get(long).or_else(|| serve.get(long)) {
                out.insert(long.to_string(), v.clone());
            }
        }
    }
    if given("log") {
        if let Some(level) = matches.get_one::<String>("log") {
            out.insert("log-level".into(), Json::from(level.clone()));
        }
    }
    out
}

pub fn run(args: &ServeArgs, matches: &ArgMatches) -> anyhow::Result<i32> {
    let (config, overrides) = load(args, matches)?;
    // (clap's `requires` are lifted for serve's flags: see `args::command`.)
    match (args.no_capture, args.serve_stores.is_empty()) {
        (true, true) => return Err(usage("--no-capture: name the stores to serve after the flags")),
        (false, false) => {
            return Err(usage(
                "stores to serve read-only go with --no-capture (a recording service takes its store from `store`)",
            ))
        }
        (true, false) => return serve_read_only(args, &config, overrides),
        (false, true) => {}
    }
    let mut opts = config.record.clone();
    if !opts.is_live() || opts.read.is_some() || opts.synthetic.is_some() {
        return Err(usage(
            "serve records live interfaces: set `interface = [\"IF\"]` in the config file or pass -i IF (tapdeck record reads files and synthetic traffic)",
        ));
    }
    // Progress lines are for terminals; a service logs.
    opts.quiet = true;
    let cfg = opts
        .builder()
        .map_err(|e| usage(config.option_error(&e)))?
        .build();
    let settings = config.serve.clone();
    for interface in &opts.interfaces {
        if !Path::new("/sys/class/net").join(interface).exists() {
            return Err(usage(format!(
                "interface {interface} does not exist on this host (see `ip link`); fix `interface` in the config or -i"
            )));
        }
    }
    let (addr, http_line) = check_http(&settings)?;
    if args.check {
        for warning in tapdeck_service::auth::Tokens::warnings(&settings) {
            eprintln!("warning: {warning}");
        }
        println!(
            "config OK: records {} ({} capture thread(s)) into {}; {http_line}",
            opts.interfaces.join(", "),
            opts.threads,
            cfg.store.display(),
        );
        return Ok(0);
    }
    let set_level = logging::init(&settings.log_level, settings.log_format == LogFormat::Json);

    let control = Arc::new(Control::default());
    record::install_stop_signals(&control)?;
    let service =
        Arc::new(Service::new(Arc::clone(&control), settings.clone()).map_err(anyhow::Error::msg)?);
    *service.stores.write().unwrap() = vec![cfg.store.clone()];
    *service.timeline.lock().unwrap() = Some(Timeline::open(
        &cfg.store,
        tapdeck_recorder::recorder::now_ns(),
    ));
    // Before capture starts and privileges go: a taken port fails the start, and a port
    // under 1024 may still be bound.
    let listener = listen::bind(addr).map_err(anyhow::Error::msg)?;
    let sources = record::open_live(&opts, &cfg)?;
    tracing::info!("{}", record::live_defaults(&cfg.rotation, &cfg.retention));
    tracing::info!(
        "serving {}://{}/metrics, /healthz and /api/v1/status{}",
        scheme(&service),
        settings.listen,
        if service.tokens().is_empty() {
            ""
        } else {
            " (bearer token required)"
        }
    );
    http::spawn(listener, Arc::clone(&service)).context("cannot start the HTTP server")?;
    spawn_signal_thread(
        args.config.clone(),
        overrides,
        config,
        Arc::clone(&service),
        set_level,
    )?;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let monitor = spawn_monitor(Arc::clone(&service), Arc::clone(&done))?;

    let stats: Box<dyn Write + Send> = match opts.stats.as_deref() {
        // Prometheus keeps the history of a service; a JSON-lines file only if asked for.
        None => Box::new(std::io::sink()),
        Some(_) => record::stats_sink(&opts, &cfg)?,
    };
    let summary = record::start(cfg, sources, control).and_then(|running| {
        // The HTTP side and the monitor read the recorder while it runs.
        service.watch(Some(running.live()));
        let summary = record::finish(running, stats, &opts);
        service.watch(None);
        summary
    });
    done.store(true, Ordering::SeqCst);
    let _ = monitor.join();
    if let Some(timeline) = service.timeline.lock().unwrap().as_mut() {
        // The drained counts, and the minute in progress.
        if let Ok(s) = &summary {
            timeline.sample(s.stats.ts_ns, history::cumulative(&s.stats));
        }
        timeline.flush(tapdeck_recorder::recorder::now_ns(), true);
    }
    if service.phase() != Phase::Stopping {
        // The sources ended or failed before a stop signal.
        notify::stopping();
    }
    let summary = summary?;
    record::print_summary(&summary);
    if let Some(fatal) = summary.fatal {
        anyhow::bail!("{fatal}");
    }
    Ok(0)
}

/// The HTTP side's settings, checked as the start checks them (the query limits, the token
/// and TLS files, the address): the address to bind, and the `--check` line that describes it.
fn check_http(settings: &ServeSettings) -> anyhow::Result<(SocketAddr, String)> {
    settings.query_limits().map_err(|e| usage(e.to_string()))?;
    let tapdeck_service::state::Access { tokens, tls, .. } =
        tapdeck_service::state::load_access(settings).map_err(|e| usage(e.to_string()))?;
    // Binding is left to the start; the address must at least be one we may use.
    let addr = listen::check_listen(&settings.listen, !tokens.is_empty())
        .map_err(|e| usage(e.to_string()))?;
    let mut required = Vec::new();
    if !tokens.is_empty() {
        required.push("token required");
    }
    if tls.as_ref().is_some_and(|t| t.client_ca) {
        required.push("client certificate required");
    }
    let line = format!(
        "{} on {}{}",
        if tls.is_some() { "HTTPS" } else { "HTTP" },
        settings.listen,
        if required.is_empty() {
            String::new()
        } else {
            format!(" ({})", required.join("; "))
        }
    );
    Ok((addr, line))
}

fn scheme(service: &Service) -> &'static str {
    if service.tls().is_some() {
        "https"
    } else {
        "http"
    }
}

/// SIGHUP where only the token and TLS files are read again (`serve --no-capture`, or no
/// config file): from the config file as it is now, if there is one, with the command
/// line over it.
fn reread_access(path: Option<&Path>, overrides: &Overrides, service: &Service) {
    let reread = || -> anyhow::Result<Vec<&'static str>> {
        let Some(path) = path else {
            return Ok(service.reread_access()?);
        };
        let mut new = ServeConfig::load(path)?;
        new.override_with(overrides)?;
        let mut settings = service.settings();
        settings.metrics_token_file = new.serve.metrics_token_file;
        settings.token_file = new.serve.token_file;
        settings.tls_cert = new.serve.tls_cert;
        settings.tls_key = new.serve.tls_key;
        settings.tls_client_ca = new.serve.tls_client_ca;
        Ok(service.set_settings(settings)?)
    };
    match reread() {
        Ok(changed) if changed.is_empty() => {
            tracing::info!("SIGHUP: token and TLS files re-read; nothing changed")
        }
        Ok(changed) => tracing::info!(
            "SIGHUP: token and TLS files re-read; now in effect: {}",
            changed.join(", ")
        ),
        Err(e) => tracing::error!("SIGHUP: {e}; the tokens and TLS settings in force stay"),
    }
}

/// `serve --no-capture STORE…`: the HTTP side alone, over existing stores, until
/// SIGTERM/SIGINT. SIGHUP reads the token and TLS files again; SIGUSR1 is ignored (there
/// is nothing to rotate).
fn serve_read_only(
    args: &ServeArgs,
    config: &ServeConfig,
    overrides: Overrides,
) -> anyhow::Result<i32> {
    let settings = config.serve.clone();
    for store in &args.serve_stores {
        if !store.join(tapdeck_store::meta::MANIFEST).is_file() {
            return Err(usage(format!(
                "{}: not a tapdeck store (no {}): name directories `tapdeck record --store` wrote",
                store.display(),
                tapdeck_store::meta::MANIFEST
            )));
        }
    }
    let (addr, http_line) = check_http(&settings)?;
    if args.check {
        for warning in tapdeck_service::auth::Tokens::warnings(&settings) {
            eprintln!("warning: {warning}");
        }
        println!(
            "config OK: serves {} read-only; {http_line}",
            args.serve_stores
                .iter()
                .map(|s| s.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        );
        return Ok(0);
    }
    let _ = logging::init(&settings.log_level, settings.log_format == LogFormat::Json);
    let control = Arc::new(Control::default());
    record::install_stop_signals(&control)?;
    // The default action of SIGUSR1 is to end the process.
    // SAFETY: the handler does nothing, which is async-signal-safe.
    unsafe { signal_hook::low_level::register(SIGUSR1, || {}) }
        .context("cannot install signal handlers")?;
    let mut hangups =
        signal_hook::iterator::Signals::new([SIGHUP]).context("cannot install signal handlers")?;
    let service =
        Arc::new(Service::new(Arc::clone(&control), settings.clone()).map_err(anyhow::Error::msg)?);
    *service.stores.write().unwrap() = args.serve_stores.clone();
    service.set_phase(Phase::ReadOnly);
    let listener = listen::bind(addr).map_err(anyhow::Error::msg)?;
    http::spawn(listener, Arc::clone(&service)).context("cannot start the HTTP server")?;
    {
        let (service, path) = (Arc::clone(&service), args.config.clone());
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for _ in hangups.forever() {
                    reread_access(path.as_deref(), &overrides, &service);
                }
            })
            .context("cannot start the signal thread")?;
    }
    tracing::info!(
        "serving {} read-only on {}://{}/api/v1/packets, /api/v1/files, /healthz",
        args.serve_stores
            .iter()
            .map(|s| s.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        scheme(&service),
        settings.listen
    );
    notify::ready("serving read-only");
    while !control.stopping() {
        std::thread::sleep(Duration::from_millis(100));
    }
    notify::stopping();
    Ok(0)
}

/// SIGHUP: reload the config file; SIGUSR1: new files now.
fn spawn_signal_thread(
    path: Option<std::path::PathBuf>,
    overrides: Overrides,
    config: ServeConfig,
    service: Arc<Service>,
    set_level: logging::SetLevel,
) -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGHUP, SIGUSR1])
        .context("cannot install signal handlers")?;
    let current = Mutex::new(config);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if signal == SIGUSR1 {
                    tracing::info!("SIGUSR1: starting new files");
                    service.control.rotate.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let Some(path) = &path else {
                    tracing::info!(
                        "SIGHUP: there is no config file to re-read (started without --config)"
                    );
                    reread_access(None, &overrides, &service);
                    continue;
                };
                notify::reloading();
                let mut current = current.lock().unwrap();
                match reload::reload(path, &overrides, &current, &service, &*set_level) {
                    Ok((effective, outcome)) => {
                        *current = effective;
                        if outcome.applied.is_empty() && outcome.need_restart.is_empty() {
                            tracing::info!("SIGHUP: {} re-read; nothing changed", path.display());
                        }
                        if !outcome.applied.is_empty() {
                            tracing::info!(
                                "SIGHUP: {} re-read; now in effect: {}",
                                path.display(),
                                outcome.applied.join(", ")
                            );
                        }
                        if !outcome.need_restart.is_empty() {
                            tracing::warn!(
                                "SIGHUP: changed in {} but kept until a restart: {}",
                                path.display(),
                                outcome.need_restart.join(", ")
                            );
                        }
                    }
                    Err(e) => tracing::error!("SIGHUP: {e}; nothing changed"),
                }
                notify::reloaded("recording");
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

/// Once a second: the drop history for /healthz, READY when recording starts, the
/// watchdog while the capture loops make progress, a STATUS line, STOPPING on the way out.
fn spawn_monitor(
    service: Arc<Service>,
    done: Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let watchdog = notify::watchdog_interval();
    std::thread::Builder::new()
        .name("monitor".into())
        .spawn(move || {
            let mut last_ping = None::<Instant>;
            let mut last_status = None::<Instant>;
            while !done.load(Ordering::SeqCst) {
                let control = &service.control;
                if control.stopping() && service.phase() != Phase::Stopping {
                    service.set_phase(Phase::Stopping);
                    tracing::info!("stopping: draining what is staged");
                    notify::stopping();
                }
                if let Some(live) = service.live() {
                    let r = live.snapshot();
                    service
                        .drops
                        .lock()
                        .unwrap()
                        .add(Instant::now(), r.totals.dropped.total());
                    if let Some(timeline) = service.timeline.lock().unwrap().as_mut() {
                        timeline.sample(r.ts_ns, history::cumulative(&r));
                        timeline.flush(r.ts_ns, false);
                    }
                    if service.phase() == Phase::Starting {
                        service.set_phase(Phase::Recording);
                        notify::ready("recording");
                        tracing::info!("recording (READY)");
                    }
                    if last_status.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                        notify::status(&format!(
                            "recording: {} packets stored, {} dropped",
                            r.totals.stored,
                            r.totals.dropped.total()
                        ));
                        last_status = Some(Instant::now());
                    }
                }
                // The watchdog hears from us only while every capture loop progresses:
                // a stuck capture thread gets the service restarted.
                if let Some(every) = watchdog {
                    let stalled = health::check(&service).capture_stalled;
                    if !stalled && last_ping.is_none_or(|t| t.elapsed() >= every) {
                        notify::watchdog();
                        last_ping = Some(Instant::now());
                    }
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        })
        .context("cannot start the monitor thread")
}
