//! The service's HTTP side against a real recorder (synthetic source, real store, real
//! sockets): every scrape balances per interface while packets flow, the token is
//! required when set, and /healthz answers. Live capture, Prometheus and systemd are in
//! tests/e2e/test_serve.py.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tapdeck_capture::{SyntheticProfile, SyntheticSource};
use tapdeck_recorder::pipeline::Control;
use tapdeck_recorder::recorder::{self, RecorderConfig, Recording};
use tapdeck_service::config::ServeSettings;
use tapdeck_service::state::Service;
use tapdeck_service::{http, listen};

fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.get(format!("http://{addr}{path}"));
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = req.call().expect("the server answers");
    let code = resp.status().as_u16();
    (code, resp.body_mut().read_to_string().unwrap())
}

/// `name{labels} value` lines of one family, by label set.
fn samples(text: &str, name: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let (n, labels) = key.split_once('{').unwrap_or((key, "}"));
            let value: f64 = value.parse().ok()?;
            (n == name).then(|| (labels.trim_end_matches('}').to_string(), value))
        })
        .collect()
}

fn without_cause(labels: &str) -> String {
    labels
        .split(',')
        .filter(|l| !l.starts_with("cause="))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn every_scrape_balances_while_recording_and_the_token_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-0123456789abcdef\n").unwrap();
    let control = Arc::new(Control::default());
    let settings = ServeSettings {
        listen: "127.0.0.1:0".into(),
        metrics_token_file: Some(token_file),
        ..ServeSettings::default()
    };
    let service = Arc::new(Service::new(Arc::clone(&control), settings).unwrap());
    let listener = listen::bind(listen::check_listen("127.0.0.1:0", true).unwrap()).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    http::spawn(listener, Arc::clone(&service)).unwrap();

    let cfg: RecorderConfig = RecorderConfig::builder(dir.path().join("store"))
        .staging_bytes(8 << 20)
        .chunk_size(1 << 20)
        .direct(false)
        .duration(Some(Duration::from_secs(60)))
        .build();
    let source = SyntheticSource::new(SyntheticProfile::Mix, None, 7).with_rate(Some(200_000.0));
    let running = Recording::start(cfg, vec![source], Arc::clone(&control)).unwrap();
    service.watch(Some(running.live()));
    let recording = std::thread::spawn(move || running.join(|_, _| {}));

    // Without a token.
    let (code, body) = get(&addr, "/metrics", None);
    assert_eq!(code, 401, "no token, no metrics: {body}");
    let (code, _) = get(&addr, "/healthz", Some("wrong"));
    assert_eq!(code, 401, "a wrong token is refused");

    // Scrapes until ten have seen stored packets (then stops the recorder), or 60 s pass:
    // a failure below means the metrics never showed a recording that stores packets.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut scrapes = 0;
    let mut last_stored = 0.0;
    while !recording.is_finished() && Instant::now() < deadline {
        let (code, text) = get(&addr, "/metrics", Some("s3cret-0123456789abcdef"));
        assert_eq!(code, 200);
        let seen = samples(&text, "tapdeck_packets_seen_total");
        if seen.is_empty() {
            continue; // not recording yet
        }
        let stored = samples(&text, "tapdeck_packets_stored_total");
        let in_flight = samples(&text, "tapdeck_packets_in_flight");
        let mut dropped: BTreeMap<String, f64> = BTreeMap::new();
        for (labels, v) in samples(&text, "tapdeck_packets_dropped_total") {
            *dropped.entry(without_cause(&labels)).or_default() += v;
        }
        for (labels, s) in &seen {
            let parts = stored[labels] + dropped[labels] + in_flight[labels];
            assert_eq!(
                *s, parts,
                "seen = stored + dropped + in flight for {labels}:\n{text}"
            );
        }
        let total: f64 = stored.values().sum();
        assert!(total >= last_stored, "stored never goes back");
        last_stored = total;
        scrapes += 1;
        if scrapes >= 10 && last_stored > 0.0 {
            control
                .stop
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let summary = recording.join().unwrap().unwrap();
    service.watch(None);
    assert!(scrapes >= 10, "scraped {scrapes} times while recording");
    assert!(last_stored > 0.0, "packets were stored while scraping");
    assert!(summary.stats.totals.stored >= last_stored as u64);
    // Once drained, the recorder is gone from the metrics and health says why.
    let (code, body) = get(&addr, "/healthz", Some("s3cret-0123456789abcdef"));
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("starting") || body.contains("stopping"),
        "{body}"
    );
}

#[test]
fn healthz_is_200_while_recording_on_a_healthy_store() {
    let dir = tempfile::tempdir().unwrap();
    let control = Arc::new(Control::default());
    let service = Arc::new(Service::new(Arc::clone(&control), ServeSettings::default()).unwrap());
    let listener = listen::bind(listen::check_listen("127.0.0.1:0", false).unwrap()).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    http::spawn(listener, Arc::clone(&service)).unwrap();
    service.set_phase(tapdeck_service::state::Phase::Recording);
    let cfg = RecorderConfig::builder(dir.path().join("store"))
        .staging_bytes(8 << 20)
        .chunk_size(1 << 20)
        .direct(false)
        .build();
    let source = SyntheticSource::new(SyntheticProfile::Small, None, 1).with_rate(Some(10_000.0));
    let running = Recording::start(cfg, vec![source], Arc::clone(&control)).unwrap();
    service.watch(Some(running.live()));
    let recording = std::thread::spawn(move || running.join(|_, _| {}));
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let (code, body) = get(&addr, "/healthz", None);
        if code == 200 {
            break body;
        }
        assert!(Instant::now() < deadline, "never healthy: {body}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["phase"], "recording");
    assert_eq!(health["data_dirs_up"], 1);
    let (code, status) = get(&addr, "/api/v1/status", None);
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(
        status["stats"]["totals"]["seen"].as_u64().is_some(),
        "{status}"
    );
    control
        .stop
        .store(true, std::sync::atomic::Ordering::SeqCst);
    recording.join().unwrap().unwrap();
}

#[test]
fn a_query_stops_at_its_deadline_even_while_nothing_matches() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let cfg = RecorderConfig::builder(store.clone())
        .staging_bytes(8 << 20)
        .chunk_size(1 << 20)
        .direct(false)
        .build();
    let source = SyntheticSource::new(SyntheticProfile::Small, Some(50_000), 3);
    recorder::record(cfg, vec![source], Arc::new(Control::default()), |_, _| {}).unwrap();
    let stores = vec![store];
    // 64-byte frames: this filter matches nothing, so nothing is written and only the
    // filter's own check can stop the scan (and the flow index cannot answer `len`, so
    // every chunk is read).
    let req = tapdeck_service::query::Request {
        filter: Some("udp and len > 5000".into()),
        ..Default::default()
    };
    let mut out = Vec::new();
    let prepared = tapdeck_service::query::prepare(&stores, &req).unwrap();
    let err = tapdeck_service::query::run(prepared, &mut out, Instant::now()).unwrap_err();
    assert!(
        tapdeck_service::query::reached_time_limit(&err)
            && err.to_string().contains(tapdeck_service::query::TIME_LIMIT),
        "a deadline already passed must stop the scan: {err}"
    );
    // With time to spare the same query runs to the end: nothing matches.
    let prepared = tapdeck_service::query::prepare(&stores, &req).unwrap();
    let later = Instant::now() + Duration::from_secs(60);
    let report = tapdeck_service::query::run(prepared, &mut out, later).unwrap();
    assert_eq!(report.packets_written, 0);
    assert_eq!(report.packets_filtered, 50_000);
}
