//! The web page at `/`: the store's timeline (drawn by the script from `/api/v1/stats`), its
//! files and retention horizon, and a query form that counts matches and downloads them.
//! Server-rendered HTML; the chart library (uPlot) and our script and style ship inside the
//! binary, since a monitor is often offline. Everything is same-origin and the page allows
//! nothing else (a strict Content-Security-Policy).
//!
//! A browser cannot send a bearer header when it loads a page, so `/login` takes a token
//! once and keeps it in a cookie (see [`crate::session`]) that the server accepts as it
//! accepts the header.

use axum::http::{header, HeaderMap, HeaderValue};
use serde_json::Value;
use tapdeck_store::meta::rfc3339_utc;

pub const UPLOT_JS: &str = include_str!("../assets/uplot/uPlot.iife.min.js");
pub const UPLOT_CSS: &str = include_str!("../assets/uplot/uPlot.min.css");
pub const PAGE_JS: &str = include_str!("../assets/tapdeck.js");
pub const PAGE_CSS: &str = include_str!("../assets/tapdeck.css");

/// Headers every page and asset carries: nothing from elsewhere runs, nothing frames us.
pub fn security_headers(headers: &mut HeaderMap) {
    let set = |h: &mut HeaderMap, k: header::HeaderName, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    set(
        headers,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    );
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(headers, header::REFERRER_POLICY, "no-referrer");
    set(headers, header::X_FRAME_OPTIONS, "DENY");
}

/// What the page shows, gathered by the handler.
pub struct Page<'a> {
    pub health: &'a crate::health::Health,
    /// `/api/v1/info`'s document.
    pub info: &'a Value,
    /// `/api/v1/files`'s list.
    pub files: &'a Value,
    /// The retention horizon (the oldest packet kept) while recording.
    pub horizon_ns: Option<u64>,
    /// While recording: what this run has counted (the open files' packets are not in the
    /// store's numbers yet).
    pub recording: Option<Recording>,
    pub dirs: Vec<tapdeck_recorder::live::DirState>,
    /// A token is needed (the page then offers to log out).
    pub authenticated: bool,
}

/// Packets seen, stored and dropped since the service started, and when it started.
#[derive(Debug, Clone, Copy)]
pub struct Recording {
    pub seen: u64,
    pub stored: u64,
    pub dropped: u64,
    pub started_ns: u64,
}

/// At most this many files are listed (the newest).
const FILES_SHOWN: usize = 50;

/// The page, section by section, top to bottom.
pub fn page(p: &Page<'_>) -> String {
    let mut out = String::with_capacity(16 * 1024);
    out.push_str(&head("tapdeck"));
    status_line(&mut out, p.health, p.authenticated);
    out.push_str(TIMELINE);
    out.push_str(QUERY_FORM);
    out.push_str("<h2>Store</h2>\n");
    if let Some(r) = p.recording {
        recording_line(&mut out, r);
    }
    if let Some(horizon) = p.horizon_ns {
        out.push_str(&format!(
            "<p>Retention horizon (the oldest packet kept): <b>{}</b></p>\n",
            rfc3339_utc(horizon)
        ));
    }
    stores_table(&mut out, p.info);
    dirs_table(&mut out, &p.dirs);
    files_table(&mut out, p.files);
    out.push_str("</body>\n</html>\n");
    out
}

/// The title, and whether the service is healthy (and why not).
fn status_line(out: &mut String, h: &crate::health::Health, authenticated: bool) {
    let state = if h.healthy {
        "<span class=good>healthy</span>".to_string()
    } else {
        format!(
            "<span class=bad>unhealthy</span>: {}",
            escape(&h.reasons.join("; "))
        )
    };
    out.push_str(&format!(
        "<h1>tapdeck</h1>\n<p class=status>{} · {state} · version {}{}</p>\n",
        escape(h.phase),
        escape(env!("CARGO_PKG_VERSION")),
        if authenticated {
            " · <form method=post action=/logout class=inline><button>log out</button></form>"
        } else {
            ""
        }
    ));
}

/// The charts' places and range buttons (the script draws them from `/api/v1/stats`).
const TIMELINE: &str = "<h2>Timeline</h2>\n<p>\
     <button data-last=3600>1 h</button><button data-last=21600>6 h</button>\
     <button data-last=86400>24 h</button><button data-last=604800>7 d</button>\
     <span id=timeline-status class=status>loading…</span></p>\n\
     <div id=chart-packets class=chart></div>\n<div id=chart-bytes class=chart></div>\n";

/// The query form: count matches (the script asks `/api/v1/count`) or download them.
const QUERY_FORM: &str = "<h2>Query</h2>\n<form id=query method=get action=/api/v1/packets>\n\
     <label>start <input type=text name=start id=q-start placeholder=\"2026-11-26T04:00:00Z\" size=24></label>\
     <label>end <input type=text name=end id=q-end placeholder=\"(the newest packet)\" size=24></label>\
     <button type=button id=use-view disabled>use the chart's range</button><br>\n\
     <label>filter <input type=text name=filter id=q-filter placeholder=\"host 198.18.0.1 and tcp port 443\"></label>\
     <label>format <select name=format><option value=\"\">the store's</option><option>pcap</option><option>pcapng</option></select></label><br>\n\
     <button type=button id=count>Count matches</button><button type=submit id=download>Download</button>\n\
     <span id=q-result class=status></span>\n</form>\n\
     <p class=note>Times are RFC 3339 or seconds since the epoch; empty means the whole store. \
     The filter is libpcap's (as tcpdump's); the flow index skips chunks that cannot match.</p>\n";

fn recording_line(out: &mut String, r: Recording) {
    out.push_str(&format!(
        "<p id=recording>Recording since {}: {} packets seen, {} stored, {} dropped{}</p>\n",
        rfc3339_utc(r.started_ns),
        count(r.seen),
        count(r.stored),
        count(r.dropped),
        if r.dropped > 0 {
            " (see the timeline for the causes)"
        } else {
            ""
        }
    ));
}

/// One row per served store, from `/api/v1/info`'s document.
fn stores_table(out: &mut String, info: &Value) {
    out.push_str("<table><tr><th>store</th><th class=n>files</th><th class=n>packets (finished files)</th><th class=n>bytes</th><th>oldest packet</th><th>newest packet</th></tr>\n");
    for s in info["stores"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td><td>{}</td></tr>\n",
            escape(s["store"].as_str().unwrap_or("")),
            match s["being_written"].as_u64().unwrap_or(0) {
                0 => s["files"].as_u64().unwrap_or(0).to_string(),
                open => format!(
                    "{} + {open} being written",
                    s["files"].as_u64().unwrap_or(0)
                ),
            },
            count(s["packets"].as_u64().unwrap_or(0)),
            bytes(s["bytes"].as_u64().unwrap_or(0)),
            time(&s["first_ts_ns"]),
            time(&s["last_ts_ns"]),
        ));
    }
    out.push_str("</table>\n");
}

/// The data directories while recording (none: no table).
fn dirs_table(out: &mut String, dirs: &[tapdeck_recorder::live::DirState]) {
    if dirs.is_empty() {
        return;
    }
    out.push_str("<table><tr><th>data directory</th><th>state</th><th class=n>free</th><th class=n>size</th></tr>\n");
    for d in dirs {
        out.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td></tr>\n",
            escape(&d.path.display().to_string()),
            if d.up {
                "up"
            } else {
                "<span class=bad>failing</span>"
            },
            d.free_bytes.map(bytes).unwrap_or_default(),
            d.size_bytes.map(bytes).unwrap_or_default(),
        ));
    }
    out.push_str("</table>\n");
}

/// The newest [`FILES_SHOWN`] files of `/api/v1/files`'s list, newest first.
fn files_table(out: &mut String, files: &Value) {
    let files = files.as_array().map(Vec::as_slice).unwrap_or_default();
    out.push_str(&format!(
        "<h2>Files</h2>\n<p class=status>{} files{}</p>\n",
        files.len(),
        if files.len() > FILES_SHOWN {
            format!("; the newest {FILES_SHOWN} are listed (all: /api/v1/files)")
        } else {
            String::new()
        }
    ));
    out.push_str("<table id=files><tr><th>file</th><th class=n>stream</th><th>first packet</th><th>last packet</th><th class=n>packets</th><th class=n>bytes</th><th>flow index</th></tr>\n");
    let mut newest: Vec<&Value> = files.iter().collect();
    newest.sort_by_key(|f| std::cmp::Reverse(f["first_ts_ns"].as_u64().unwrap_or(0)));
    for f in newest.into_iter().take(FILES_SHOWN) {
        file_row(out, f);
    }
    out.push_str("</table>\n");
}

/// A file's row, or its name and why it could not be read.
fn file_row(out: &mut String, f: &Value) {
    let path = f["path"].as_str().unwrap_or("");
    let name = path.rsplit('/').next().unwrap_or(path);
    if let Some(e) = f["error"].as_str() {
        out.push_str(&format!(
            "<tr><td>{}</td><td colspan=6 class=bad>{}</td></tr>\n",
            escape(name),
            escape(e)
        ));
        return;
    }
    out.push_str(&format!(
        "<tr><td title=\"{}\">{}</td><td class=n>{}</td><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>\n",
        escape(path),
        escape(name),
        f["stream"].as_u64().unwrap_or(0),
        time(&f["first_ts_ns"]),
        time(&f["last_ts_ns"]),
        count(f["packets"].as_u64().unwrap_or(0)),
        bytes(f["bytes"].as_u64().unwrap_or(0)),
        if f["flow_index"].as_bool() == Some(true) { "yes" } else { "no" },
    ));
}

/// The page a browser without the token gets (a 401): a form for it, and nothing else.
pub fn login_page(message: Option<&str>) -> String {
    let mut out = head("tapdeck: log in");
    out.push_str("<h1>tapdeck</h1>\n");
    if let Some(m) = message {
        out.push_str(&format!("<p class=bad>{}</p>\n", escape(m)));
    }
    out.push_str(
        "<form method=post action=/login>\n<label>token <input type=password name=token autocomplete=current-password autofocus size=48></label>\n<button type=submit>Log in</button>\n</form>\n\
         <p class=note>A token from the service's token file. The browser keeps a session, not the token, in a cookie for this site; it ends when you log out, when it expires, or when the token is removed.</p>\n</body>\n</html>\n",
    );
    out
}

fn head(title: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=en>\n<head>\n<meta charset=utf-8>\n<meta name=viewport content=\"width=device-width\">\n\
         <title>{}</title>\n<link rel=stylesheet href=/assets/uPlot.min.css>\n<link rel=stylesheet href=/assets/tapdeck.css>\n\
         <script src=/assets/uPlot.iife.min.js defer></script>\n<script src=/assets/tapdeck.js defer></script>\n</head>\n<body>\n",
        escape(title)
    )
}

/// Text made safe for HTML content and quoted attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn time(v: &Value) -> String {
    v.as_u64().map(rfc3339_utc).unwrap_or_else(|| "–".into())
}

fn scaled(v: u64, names: &[&str], base: f64) -> String {
    let mut x = v as f64;
    let mut i = 0;
    while x >= base && i < names.len() - 1 {
        x /= base;
        i += 1;
    }
    if i == 0 {
        format!("{v}{}", names[0])
    } else {
        format!("{x:.1}{}", names[i])
    }
}

fn count(v: u64) -> String {
    scaled(v, &["", " k", " M", " G", " T"], 1000.0)
}

fn bytes(v: u64) -> String {
    scaled(v, &[" B", " KB", " MB", " GB", " TB", " PB"], 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_the_store_cannot_inject_markup() {
        let health = crate::health::Health {
            healthy: false,
            phase: "read-only",
            reasons: vec!["<script>x</script>".into()],
            dropped_last_minute: 0,
            capture_idle_s: vec![],
            data_dirs_up: 0,
            data_dirs: 0,
            capture_stalled: false,
        };
        let info = serde_json::json!({"stores": [{"store": "/s/<img src=x onerror=alert(1)>", "files": 1,
            "packets": 1_500_000, "bytes": 2_000_000_000u64, "first_ts_ns": 0, "last_ts_ns": null}]});
        let files = serde_json::json!([{"path": "/s/\"><b>f.pcap", "stream": 0, "first_ts_ns": 1, "last_ts_ns": 2,
            "packets": 3, "bytes": 4, "flow_index": true}]);
        let html = page(&Page {
            health: &health,
            info: &info,
            files: &files,
            horizon_ns: None,
            recording: None,
            dirs: vec![],
            authenticated: false,
        });
        assert!(!html.contains("<script>x") && !html.contains("<img") && !html.contains("\"><b>"));
        assert!(html.contains("&lt;script&gt;x&lt;/script&gt;"));
        assert!(
            html.contains("1.5 M")
                && html.contains("2.0 GB")
                && html.contains("1970-01-01T00:00:00Z")
        );
    }
}
