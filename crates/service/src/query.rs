//! `GET /api/v1/packets`: the packets of a time window (and a filter) of the served stores,
//! streamed as one pcap or pcapng file while they are read, exactly as `tapdeck extract`
//! writes them (the same plan, flow index and libpcap filter).
//!
//! A query never costs capture a packet: it runs on a blocking thread at the lowest CPU
//! and I/O priority, at most [`Limits::concurrent`] at once, and stops at
//! [`Limits::max_bytes`] or [`Limits::max_seconds`] (the answer then ends early, and the
//! log says so).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use tapdeck_filter::bpf::LinkPrograms;
use tapdeck_filter::Predicate;
use tapdeck_pcap::{Format, Packet};
use tapdeck_store::extract::{
    self, ExtractError, ExtractReport, OnDamage, PacketFilter, Plan, StoreInput, TimeWindow,
};
use tapdeck_store::meta;
use tapdeck_store::read::Store;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub concurrent: usize,
    pub max_bytes: u64,
    pub max_seconds: u64,
}

impl Limits {
    /// When a query started now must end.
    pub fn deadline(&self) -> Instant {
        Instant::now() + Duration::from_secs(self.max_seconds)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            concurrent: 4,
            max_bytes: 4 << 30,
            max_seconds: 300,
        }
    }
}

/// A query as asked: every part optional.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Request {
    pub start: Option<String>,
    pub end: Option<String>,
    pub filter: Option<String>,
    pub format: Option<String>,
}

impl Request {
    /// The request for the log: its window and filter, escaped and cut (see
    /// [`crate::logsafe`]).
    pub fn describe(&self) -> String {
        let part = |v: &Option<String>, none: &'static str| {
            v.as_deref()
                .map_or(none.to_string(), |s| crate::logsafe::text(s).to_string())
        };
        let format = match self.format.as_deref() {
            None | Some("") => String::new(),
            Some(f) => format!(", format {}", crate::logsafe::text(f)),
        };
        format!(
            "window {}..{}, filter {}{format}",
            part(&self.start, "start"),
            part(&self.end, "end"),
            crate::logsafe::filter(self.filter.as_deref().unwrap_or(""))
        )
    }
}

/// Why a query was refused before any byte was sent (a 400 with this message).
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Store(String),
}

/// A planned query: what will be read and how packets are chosen.
pub struct Prepared {
    plan: Plan,
    format: Format,
    programs: LinkPrograms,
    pub describe: String,
}

impl Prepared {
    pub fn format(&self) -> Format {
        self.format
    }

    /// Chunks to read, and chunks the flow index ruled out.
    pub fn chunks(&self) -> (u64, u64) {
        (self.plan.chunks_selected, self.plan.chunks_pruned)
    }
}

/// Parses and plans `req` over `stores` (with their moved data directories `dirs`).
pub fn prepare(stores: &[PathBuf], req: &Request) -> Result<Prepared, QueryError> {
    let bad = QueryError::BadRequest;
    let time = |name: &str, v: &Option<String>| -> Result<Option<u64>, QueryError> {
        v.as_deref()
            .filter(|s| !s.is_empty())
            .map(extract::parse_time)
            .transpose()
            .map_err(|e| bad(format!("{name}: {e}")))
    };
    let window = TimeWindow {
        start_ns: time("start", &req.start)?,
        end_ns: time("end", &req.end)?,
    };
    if let (Some(s), Some(e)) = (window.start_ns, window.end_ns) {
        if s >= e {
            return Err(bad(
                "start must be before end: the range [start, end) is empty".into(),
            ));
        }
    }
    let format = match req.format.as_deref() {
        None | Some("") => None,
        Some("pcap") => Some(Format::Pcap),
        Some("pcapng") => Some(Format::Pcapng),
        Some(other) => return Err(bad(format!("format {other:?}: use pcap or pcapng"))),
    };
    let filter = req.filter.clone().unwrap_or_default();
    let opened = stores
        .iter()
        .map(|s| Store::open(s).map_err(|e| QueryError::Store(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    // A window that ends before the oldest packet kept asks for what retention deleted:
    // say so, rather than answer an empty file.
    let oldest = opened
        .iter()
        .flat_map(|s| s.files.iter().chain(&s.partials))
        .filter_map(|f| {
            let name = f.file_name()?.to_str()?;
            meta::time_of_name(meta::final_name_of_partial(name).unwrap_or(name))
        })
        .min();
    if let (Some(end), Some(oldest)) = (window.end_ns, oldest) {
        if end <= oldest {
            return Err(bad(format!(
                "the window ends at {}, before the oldest packet kept ({}, the retention horizon): those packets are gone",
                meta::rfc3339_utc(end),
                meta::rfc3339_utc(oldest)
            )));
        }
    }
    let inputs: Vec<StoreInput<'_>> = opened
        .iter()
        .map(|store| StoreInput {
            store,
            offset_ns: 0,
        })
        .collect();
    let predicate = Predicate::parse(&filter);
    let plan = Plan::builder(&inputs)
        .window(window)
        .on_damage(OnDamage::Skip)
        .prune(predicate.as_ref())
        .build()
        .map_err(|e| QueryError::Store(e.to_string()))?;
    let programs = LinkPrograms::compile(&filter, &plan.linktypes())
        .map_err(|e| bad(format!("filter {filter:?} does not compile: {}", e.error)))?;
    let describe = format!(
        "{}: {} of {} chunks to read ({} skipped by the flow index)",
        req.describe(),
        plan.chunks_selected,
        plan.chunks_selected + plan.chunks_pruned,
        plan.chunks_pruned
    );
    Ok(Prepared {
        format: format.or(plan.store_format).unwrap_or(Format::Pcapng),
        plan,
        programs,
        describe,
    })
}

/// Writes the query's answer to `out` (which may refuse more: the limits, or a client
/// that went away), stopping at `deadline` even while nothing matches (see
/// [`reached_time_limit`]).
pub fn run(
    prepared: Prepared,
    out: &mut dyn Write,
    deadline: Instant,
) -> Result<ExtractReport, ExtractError> {
    let Prepared {
        plan,
        format,
        programs,
        ..
    } = prepared;
    let mut filter = Filter {
        programs,
        deadline,
        packets: 0,
    };
    plan.write(format, &mut filter, out)
}

/// Whether [`run`] stopped at its deadline (the answer so far is then partial, not wrong).
pub fn reached_time_limit(e: &ExtractError) -> bool {
    matches!(e, ExtractError::Stopped(why) if why == TIME_LIMIT)
}

/// libpcap's programs per link type, and the time limit.
struct Filter {
    programs: LinkPrograms,
    deadline: Instant,
    packets: u64,
}

impl PacketFilter for Filter {
    fn matches(&mut self, linktype: u16, p: &Packet<'_>) -> bool {
        self.programs.matches(linktype, p.data)
    }

    fn stop(&mut self) -> Option<String> {
        self.packets += 1;
        // A clock read every 4,096 packets: a few microseconds apart.
        (self.packets % 4096 == 0 && Instant::now() > self.deadline).then(|| TIME_LIMIT.to_string())
    }
}

pub const TIME_LIMIT: &str = "the query reached the time limit";

/// Lowers the calling thread to the idle CPU and I/O classes (best effort: a query must
/// never compete with capture). SCHED_IDLE, not nice 19: the recorder's compressors run at
/// nice 19, and ten queries at the same nice would take ten elevenths of a core from them.
pub fn lower_priority() {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
    // SAFETY: setpriority on this thread's id; a failure is harmless (priority unchanged).
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 19) };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler on this thread's id with a valid policy and parameter;
    // failure leaves the thread at nice 19.
    unsafe { libc::sched_setscheduler(tid as libc::pid_t, libc::SCHED_IDLE, &param) };
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: libc::c_long = 3;
    // SAFETY: ioprio_set with a thread id and a valid class; failure leaves it unchanged.
    unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            tid as libc::c_long,
            IOPRIO_CLASS_IDLE << 13,
        )
    };
}

/// The answer's bytes, sent on to the HTTP response in 256 KiB pieces; refuses more
/// beyond the limits or once the client has gone. A client that stops reading holds its
/// query slot only until the time limit.
pub struct Sink {
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    runtime: tokio::runtime::Handle,
    buf: Vec<u8>,
    pub sent: u64,
    max_bytes: u64,
    deadline: Instant,
    /// Why it stopped taking bytes, if it did.
    pub cut: Option<&'static str>,
}

impl Sink {
    const PIECE: usize = 256 * 1024;

    /// On a blocking thread of the HTTP server's runtime.
    pub fn new(
        tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
        limits: &Limits,
        deadline: Instant,
    ) -> Sink {
        Sink {
            tx,
            runtime: tokio::runtime::Handle::current(),
            buf: Vec::with_capacity(Self::PIECE),
            sent: 0,
            max_bytes: limits.max_bytes,
            deadline,
            cut: None,
        }
    }

    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let piece = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(Self::PIECE),
        ));
        let len = piece.len() as u64;
        let wait = self.deadline.saturating_duration_since(Instant::now());
        let tx = &self.tx;
        let sent = self
            .runtime
            .block_on(async { tokio::time::timeout(wait, tx.send(Ok(piece))).await });
        match sent {
            Ok(Ok(())) => {
                self.sent += len;
                Ok(())
            }
            Ok(Err(_)) => {
                self.cut = Some("the client went away");
                Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            }
            Err(_) => {
                self.cut = Some(TIME_LIMIT);
                Err(std::io::Error::other(TIME_LIMIT))
            }
        }
    }
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        // Up to the limit, then no more: the client gets every byte the limit allows.
        let room = self
            .max_bytes
            .saturating_sub(self.sent + self.buf.len() as u64);
        if room == 0 {
            self.cut = Some("the answer reached the byte limit");
        } else if Instant::now() > self.deadline {
            self.cut = Some(TIME_LIMIT);
        }
        if let Some(why) = self.cut {
            // What fits is still sent.
            let _ = self.send();
            return Err(std::io::Error::other(why));
        }
        let data = &data[..data.len().min(room as usize)];
        self.buf.extend_from_slice(data);
        if self.buf.len() >= Self::PIECE {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// Counts the answer's bytes instead of sending them (`/api/v1/count`); the time limit is
/// [`run`]'s, as for any query.
#[derive(Default)]
pub struct Counter {
    pub bytes: u64,
}

impl Write for Counter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.bytes += data.len() as u64;
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `/api/v1/info`'s document and `/api/v1/files`'s list from one opening of every file
/// (the web page shows both).
pub fn overview(stores: &[PathBuf]) -> Result<(serde_json::Value, serde_json::Value), QueryError> {
    let (mut summaries, mut files) = (Vec::new(), Vec::new());
    for root in stores {
        let store = Store::open(root).map_err(|e| QueryError::Store(e.to_string()))?;
        let (mut packets, mut bytes, mut first, mut last) = (0u64, 0u64, u64::MAX, 0u64);
        for path in &store.files {
            let entry = match tapdeck_store::read::StoredFile::open(path) {
                Ok(f) => {
                    packets += f.meta.packets;
                    bytes += f.stored_len;
                    if f.meta.packets > 0 {
                        first = first.min(f.meta.first_ts_ns);
                        last = last.max(f.meta.last_ts_ns);
                    }
                    serde_json::json!({
                        "path": path, "stream": f.meta.stream, "seq": f.meta.seq,
                        "first_ts_ns": f.meta.first_ts_ns, "last_ts_ns": f.meta.last_ts_ns,
                        "packets": f.meta.packets, "bytes": f.stored_len,
                        "flow_index": !f.index.flows.is_empty(),
                    })
                }
                Err(e) => serde_json::json!({"path": path, "error": e.to_string()}),
            };
            files.push(entry);
        }
        let m = store.manifest.as_ref();
        summaries.push(serde_json::json!({
            "store": root,
            "host": m.map(|m| m.host.clone()),
            "format": m.map(|m| m.format.clone()),
            "started_ns": m.map(|m| m.started_ns),
            "files": store.files.len(),
            "being_written": store.partials.len(),
            "packets": packets,
            "bytes": bytes,
            "first_ts_ns": (packets > 0).then_some(first),
            "last_ts_ns": (packets > 0).then_some(last),
        }));
    }
    let info = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "stores": summaries,
    });
    Ok((info, serde_json::Value::from(files)))
}
