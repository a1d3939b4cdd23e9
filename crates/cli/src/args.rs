//! Every flag of the `tapdeck` binary, with its documentation: `--help` is the manual.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use tapdeck_recorder::options::{RecordOptions, WriteOptions, DEFAULT_CODEC};

use crate::exit::EXIT_CODES_HELP;

/// The command line as parsed: the derived one, with `serve`'s record flags freed of
/// the requirements `record` puts on them (a config file may supply the interface and
/// the store; the recorder's option builder checks the combination either way).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().mut_subcommand("serve", |serve| {
        serve
            .mut_args(|a| a.requires(clap::builder::Resettable::<clap::Id>::Reset))
            .mut_arg("store", |a| a.required(false))
    })
}

#[derive(Parser, Debug)]
#[command(
    name = "tapdeck",
    version,
    about = "Record every packet to disk, losslessly, as standard seekable capture files",
    long_about = "tapdeck records packets into a trace store: rotated pcapng or pcap files, \
compressed in independent chunks (zstd or lz4, chosen per chunk from the backlog) with a \
chunk index, so that `zstd -dc FILE | tcpdump -r -` reads any file and `tapdeck extract` \
seeks to a time range without decompressing the rest. Every packet that reached the \
recorder is either stored or counted as dropped, by cause.",
    after_help = EXIT_CODES_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log level (error, warn, info, debug, trace); also RUST_LOG.
    #[arg(long, global = true, default_value = "info")]
    pub log: String,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Record packets into a trace store.
    #[command(after_help = EXIT_CODES_HELP)]
    Record(Box<RecordOptions>),
    /// Capture live and forward each packet's headers to collectors as IPFIX (PSAMP
    /// packet reports over UDP) instead of storing them.
    #[command(after_help = EXIT_CODES_HELP)]
    Export(Box<ExportArgs>),
    /// Receive IPFIX packet reports from exporters into a trace store.
    #[command(after_help = EXIT_CODES_HELP)]
    Collect(Box<CollectArgs>),
    /// Check stored files strictly; optionally finalize files left incomplete by a crash.
    #[command(after_help = EXIT_CODES_HELP)]
    Verify(VerifyArgs),
    /// Add the flow index to files written without one: stores recorded with
    /// `--no-flow-index` or before it existed, and plain pcap/pcapng files (a sidecar).
    ///
    /// A stored file gets a version 3 chunk index (one flow index per chunk, and the file's
    /// summary), built from its chunks exactly as the recorder builds it; files indexed
    /// before summaries existed are indexed again. The new trailer is appended after
    /// the old one, which stays valid until the new one is complete and synced, so a file
    /// stopped at any moment still reads whole (run `index` again to finish it); no packet
    /// byte moves, and zstd, lz4, tcpdump and tshark read the file as before. A plain
    /// capture file is left untouched: its index goes in a sidecar `FILE.tdx` (blocks of
    /// about 4 MiB: offset, packets, time range, flow index) that records the file's size
    /// and the hashes of its ends, so a sidecar whose file changed is recognised as stale
    /// and ignored. `verify` checks both. Files already indexed, files a recorder is still
    /// writing and files left incomplete by a crash are skipped and said so; a file cut
    /// short, damaged or not writable is refused with one line, and left as it was.
    #[command(after_help = EXIT_CODES_HELP)]
    Index(IndexArgs),
    /// Write the packets of a time range (and a filter) as one standard capture file.
    // Not EXIT_CODES_HELP: extract documents its own statuses (3: output around damage).
    Extract(ExtractArgs),
    /// Merge the stores of several monitors by time into one store (k-way, streaming).
    ///
    /// A streaming k-way merge (one decoded chunk per input stream in memory) whose output
    /// is an ordinary store that verify, extract, info and convert read. Each input keeps
    /// its own pcapng interfaces, described `LABEL stream N` (LABEL is the store
    /// directory's name), so every packet still says which monitor saw it. The report gives
    /// each input's time span, packets, the drops its recorder counted, its share of the
    /// merged packets and bytes, and how the inputs' spans overlap or leave gaps. Offsets
    /// and each input's clock state (as its recorder read it) are kept in the output's
    /// manifest. See docs/merge.md.
    #[command(after_help = EXIT_CODES_HELP)]
    Merge(Box<MergeArgs>),
    /// List the files of a store with their time ranges, packet counts and drops (or
    /// describe one stored file the same way).
    #[command(after_help = EXIT_CODES_HELP)]
    Info(InfoArgs),
    /// Convert traces into a Parquet dataset: packets, RPC and NFS tables, catalog.
    #[command(after_help = EXIT_CODES_HELP)]
    Convert(ConvertArgs),
    /// Decrypt names that `convert --key` encrypted.
    #[command(after_help = EXIT_CODES_HELP)]
    Decrypt(DecryptArgs),
    /// Make a new key file for `convert --key`.
    #[command(after_help = EXIT_CODES_HELP)]
    Keygen(KeygenArgs),
    /// Record live interfaces as a service: `record -i` plus a config file with reload,
    /// Prometheus metrics and a health check over HTTP, and systemd notification.
    ///
    /// Runs until SIGTERM/SIGINT (drains and exits 0). SIGHUP re-reads the config file and
    /// applies what can change without losing a packet (max-bytes, min-free, min-keep,
    /// rotate-size, rotate-interval, log-level, health-*, min-horizon, metrics-token-file,
    /// token-file, tls-*), and reads the token and TLS files again (rewritten files are
    /// rotated tokens and certificates; without a config file that is all it does);
    /// other changed keys are logged as needing a restart. SIGUSR1 starts new files. HTTP
    /// (HTTPS with --tls-cert): GET /metrics (OpenMetrics), /healthz (200, or 503 with the
    /// reasons as JSON), /api/v1/status (JSON). See docs/deploy.md and deploy/.
    #[command(after_help = EXIT_CODES_HELP)]
    Serve(Box<ServeArgs>),
    /// Ask a running `tapdeck serve` how it is doing: health, counters, disks, horizon.
    #[command(after_help = EXIT_CODES_HELP)]
    Status(StatusArgs),
    /// Fetch packets from a running `tapdeck serve` (its /api/v1/packets): a time window
    /// and a filter, as one capture file, e.g. `tapdeck query 127.0.0.1:9780 --start
    /// 2026-11-26T01:00:00Z -w - host 198.18.0.1 | tcpdump -r -`.
    #[command(after_help = EXIT_CODES_HELP)]
    Query(QueryArgs),
    /// Analyze a dataset: hands over to `tapdeck-analyze` (the Python package in python/),
    /// e.g. `tapdeck analyze report DATASET --out DIR`.
    #[command(after_help = EXIT_CODES_HELP, disable_help_flag = true)]
    Analyze(AnalyzeArgs),
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// TOML config file: every `record` option under its flag's name (`interface`,
    /// `store`, `max-bytes`, ...) and the settings below; flags override it. See
    /// deploy/tapdeck.toml for every key.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Check the config file and flags, print what would run, and exit (0: valid).
    #[arg(long)]
    pub check: bool,

    /// Serve existing stores read-only (queries, files, health) and capture nothing: the
    /// record options are ignored. Give the stores after the flags.
    #[arg(long, requires = "serve_stores")]
    pub no_capture: bool,

    /// With --no-capture: the stores to serve.
    #[arg(value_name = "STORE", requires = "no_capture")]
    pub serve_stores: Vec<PathBuf>,

    /// HTTP address for /metrics, /healthz and /api/v1/status [default: 127.0.0.1:9780].
    /// Beyond loopback a token file is required.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// File holding one bearer token every HTTP request may carry, named `metrics` in the
    /// query log (`Authorization: Bearer TOKEN`; Prometheus: `authorization.credentials_file`).
    #[arg(long, value_name = "FILE")]
    pub metrics_token_file: Option<PathBuf>,

    /// File of `NAME TOKEN` lines (`#` comments; names unique; tokens of 16 characters or
    /// more): every HTTP request must carry one of the tokens, and the query log names
    /// whose. May be set with --metrics-token-file; SIGHUP reads both again.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// PEM certificate chain (the server's first): with --tls-key, HTTPS only.
    #[arg(long, value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA certificates: every client must present a certificate one of them signed, or
    /// the TLS handshake fails.
    #[arg(long, value_name = "PEM")]
    pub tls_client_ca: Option<PathBuf>,

    /// Log lines as text or as JSON objects (one per line, to standard error) [default: human].
    #[arg(long, value_parser = ["human", "json"])]
    pub log_format: Option<String>,

    /// /healthz says 503 when a capture loop has made no progress for this many seconds
    /// (a quiet link still progresses) [default: 10].
    #[arg(long, value_name = "SECONDS")]
    pub health_stall: Option<f64>,

    /// /healthz says 503 when more packets than this were dropped in the last minute
    /// [default: 0].
    #[arg(long, value_name = "N")]
    pub health_max_drops: Option<u64>,

    /// Seconds of history the store should hold: exported as
    /// tapdeck_retention_min_horizon_seconds for the alert rule (0: no alert) [default: 0].
    #[arg(long, value_name = "SECONDS")]
    pub min_horizon: Option<u64>,

    /// Queries (/api/v1/packets) running at once; more get 429 [default: 4].
    #[arg(long, value_name = "N")]
    pub query_max_concurrent: Option<usize>,

    /// Bytes one query's answer may have; it ends there [default: 4GiB].
    #[arg(long, value_name = "SIZE")]
    pub query_max_bytes: Option<String>,

    /// Seconds one query may take; its answer ends there [default: 300].
    #[arg(long, value_name = "SECONDS")]
    pub query_max_seconds: Option<u64>,

    #[command(flatten)]
    pub record: RecordOptions,
}

/// The packets a reader asks for and where they go: shared by `extract` and `query`.
#[derive(Args, Debug)]
pub struct WindowArgs {
    /// First packet time to include: RFC 3339 (`2026-11-23T05:57:34.5Z`) or seconds since
    /// the epoch (`1795413454.5`).
    #[arg(long, value_name = "TIME")]
    pub start: Option<String>,

    /// Packets at or after this time are left out; same forms as --start.
    #[arg(long, value_name = "TIME")]
    pub end: Option<String>,

    /// Output file (`-` for standard output, e.g. `| tcpdump -r -`).
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    pub write: String,

    /// Output format (default: the store's).
    #[arg(long, value_parser = ["pcapng", "pcap"])]
    pub format: Option<String>,
}

/// How a client reaches a service: shared by `query` and `status`.
#[derive(Args, Debug)]
pub struct RemoteArgs {
    /// A file with the token to send: one token, or `NAME TOKEN` lines (the first is
    /// sent, or the one --token-name names).
    #[arg(long, value_name = "FILE", visible_alias = "metrics-token-file")]
    pub token_file: Option<PathBuf>,

    /// Which of --token-file's `NAME TOKEN` lines to send.
    #[arg(long, value_name = "NAME")]
    pub token_name: Option<String>,

    /// PEM certificates to trust for the service's certificate (its CA, or itself);
    /// `HOST:PORT` then means https.
    #[arg(long, value_name = "PEM")]
    pub cacert: Option<PathBuf>,

    /// PEM client certificate, for a service with tls-client-ca (with --key).
    #[arg(long, value_name = "PEM", requires = "key")]
    pub cert: Option<PathBuf>,

    /// PEM private key of --cert.
    #[arg(long, value_name = "PEM", requires = "cert")]
    pub key: Option<PathBuf>,
}

impl RemoteArgs {
    pub fn to_remote(&self, addr: &str) -> tapdeck_service::status::Remote {
        tapdeck_service::status::Remote {
            addr: addr.to_string(),
            token_file: self.token_file.clone(),
            token_name: self.token_name.clone(),
            cacert: self.cacert.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
        }
    }
}

#[derive(Args, Debug)]
pub struct QueryArgs {
    /// Where the service listens: `HOST:PORT` (https with --cacert or --cert), or an
    /// http:// or https:// URL.
    #[arg(value_name = "ADDR")]
    pub addr: String,

    /// The filter's words (libpcap syntax), as tcpdump takes them.
    #[arg(value_name = "FILTER")]
    pub filter: Vec<String>,

    #[command(flatten)]
    pub window: WindowArgs,

    #[command(flatten)]
    pub remote: RemoteArgs,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Where the service listens: `HOST:PORT` (https with --cacert or --cert), or an
    /// http:// or https:// URL.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9780")]
    pub listen: String,

    #[command(flatten)]
    pub remote: RemoteArgs,

    /// Print the status document as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Stored files, plain capture files, or store directories.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    /// Finalize files left incomplete by a crash (`.NAME.partial`): keep every complete
    /// chunk, rebuild the index, rename to the final name. Also salvages a finished file
    /// that was cut short later (its index lost): keeps it up to its last whole chunk and
    /// writes a new index; a file with a corrupt chunk in its middle is left as it is
    /// (`extract` reads around the chunk).
    #[arg(long)]
    pub repair: bool,

    /// A data directory of the store that is no longer where its manifest says (moved):
    /// found by the id in its `.tapdeck-dir` file. Repeat for several.
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dirs: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct IndexArgs {
    /// Store directories, stored files, or plain pcap/pcapng files.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    /// A data directory of the store that is no longer where its manifest says (moved):
    /// found by the id in its `.tapdeck-dir` file. Repeat for several.
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dirs: Vec<PathBuf>,
}

#[derive(Args, Debug)]
#[command(after_help = EXTRACT_EXIT_CODES)]
pub struct ExtractArgs {
    /// The store to read (its directory, or a plain pcap/pcapng file, read by the blocks
    /// of its `tapdeck index` sidecar), then the filter's words; with -f, every argument
    /// is a store or file, and their packets are merged by time.
    #[arg(value_name = "STORE", required = true)]
    pub args: Vec<String>,

    /// Capture filter in tcpdump syntax (compiled by libpcap), e.g. `udp and port 53`.
    /// Without -f the words after the store are the filter (`extract STORE udp port 53`).
    #[arg(short = 'f', long = "filter", value_name = "EXPR")]
    pub filter: Option<String>,

    /// With several stores: add this much to one store's timestamps before merging
    /// (`STORE=±NS`, or with a unit: `mon1=-1.5ms`); repeat per store.
    #[arg(long = "offset", value_name = "STORE=NS")]
    pub offsets: Vec<String>,

    #[command(flatten)]
    pub window: WindowArgs,

    /// Stop at the first damaged chunk or file (exit 1) instead of reading around it.
    #[arg(long)]
    pub strict: bool,

    /// A data directory of the store that is no longer where its manifest says (moved):
    /// found by the id in its `.tapdeck-dir` file. Repeat for several.
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dirs: Vec<PathBuf>,

    /// Read every chunk in the window, ignoring the flow index and the files' names (every
    /// file is opened; for benchmarks, and for doubt): the output is the same, only slower.
    #[arg(long)]
    pub no_index: bool,

    /// Say which files and chunks are read and why (the files the window's times leave
    /// unopened, the filter's index-answerable form, and per file the chunks in the window
    /// and those the flow index kept), on stderr.
    #[arg(long)]
    pub explain: bool,
}

/// What `extract`'s exit status means; shown under `extract --help`.
const EXTRACT_EXIT_CODES: &str = "\
Damage: a chunk that does not decode is reported on one line (file, byte offset, packets
lost by the index's count) and skipped; a stored file whose index was lost (cut short) is
read up to its last whole chunk, with a warning; files outside the window are not read at
all. The summary line counts what was lost.

Exit status: 0 every selected packet was read; 3 the output is complete except for the
damage reported (the summary counts the packets lost); 1 nothing usable was written (bad
arguments, not a store, unreadable store, output failed, or damage with --strict).
A reader that closes the pipe early (`| tcpdump -c 10`) is not an error.";

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The stores to merge (their directories). Ties in time go to the store named first.
    #[arg(value_name = "STORE", required = true)]
    pub stores: Vec<PathBuf>,

    /// The new store to write (a new or empty directory).
    #[arg(long, short = 'o', value_name = "STORE")]
    pub out: PathBuf,

    /// Add this much to one store's timestamps (its clock ran behind by that much):
    /// `STORE=±NS`, or with a unit: `mon1=-1.5ms`, `s`, `ms`, `us`, `ns`. Repeat per store.
    #[arg(long = "offset", value_name = "STORE=NS")]
    pub offsets: Vec<String>,

    /// Drop a frame that another store already holds: same link type, same original
    /// length, identical captured bytes, timestamps (after offsets) at most
    /// --dedup-window apart. Copies within one store are always kept. Counted per store.
    #[arg(long)]
    pub dedup: bool,

    /// With --dedup: how far apart two copies of a frame may be stamped (e.g. 1ms, 50us,
    /// 2000ns).
    #[arg(long, value_name = "TIME", default_value = "1ms")]
    pub dedup_window: String,

    /// Only packets at or after this (corrected) time; same forms as `extract --start`.
    #[arg(long, value_name = "TIME")]
    pub start: Option<String>,

    /// Only packets before this (corrected) time.
    #[arg(long, value_name = "TIME")]
    pub end: Option<String>,

    /// Codec ladder of the output (as `record --codec`); the strongest rung is used.
    #[arg(long, default_value = DEFAULT_CODEC, value_name = "LADDER")]
    pub codec: String,

    /// Start a new output file once this much capture data is in it.
    #[arg(long, value_name = "SIZE")]
    pub rotate_size: Option<String>,

    /// Staging pool of the output's recorder.
    #[arg(long, value_name = "SIZE", default_value = "64MiB")]
    pub staging: String,

    /// Use buffered writes instead of O_DIRECT.
    #[arg(long)]
    pub no_direct: bool,

    /// Print the report as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// The store directory to describe, or one stored file (its row, as the store's listing
    /// gives it).
    #[arg(value_name = "STORE|FILE")]
    pub store: PathBuf,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// A data directory of the store that is no longer where its manifest says (moved):
    /// found by the id in its `.tapdeck-dir` file. Repeat for several.
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dirs: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// Trace files (pcap or pcapng; plain, or compressed with gzip, bzip2, xz, zstd or LZ4,
    /// told by content), tapdeck stores, or directories holding traces (found by name:
    /// .pcap, .pcapng, .cap, each also with .gz, .bz2, .xz, .zst or .lz4).
    #[arg(value_name = "INPUT", required = true)]
    pub inputs: Vec<PathBuf>,

    /// The dataset directory (created if missing; converting into it again adds new
    /// inputs and skips unchanged ones).
    #[arg(long, short = 'o', value_name = "DATASET")]
    pub out: PathBuf,

    /// Worker threads (default: one per core).
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,

    /// Convert only every N-th source file starting at I (`--shard I/N`), so several
    /// processes or machines can share the work, one after another or at the same time,
    /// into one dataset; the rows are the same whatever the split. It splits by file (one
    /// file is one shard's work). `dataset.json` says `complete` once every shard has run.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,

    /// Encrypt file and directory names with this key file (AES-SIV, reversible with
    /// `tapdeck decrypt`); make one with `tapdeck keygen`.
    #[arg(long, value_name = "KEYFILE")]
    pub key: Option<PathBuf>,

    /// Also map IP addresses with Crypto-PAn (prefix-preserving) under --key.
    #[arg(long, requires = "key")]
    pub anonymize_ips: bool,

    /// Leave out the packets table (RPC and NFS tables only).
    #[arg(long)]
    pub no_packets: bool,

    /// The inputs are stores of several monitors: merge them by time first (as `tapdeck
    /// merge`, into DATASET/_merged/store, redone only when an input changed), then convert
    /// the merged store. Needed when the two directions of a link were recorded apart (two
    /// taps): connections are only whole after the merge.
    #[arg(long)]
    pub merge: bool,

    /// With --merge: a store's clock offset, as `tapdeck merge --offset STORE=±NS`.
    #[arg(long = "offset", value_name = "STORE=NS", requires = "merge")]
    pub offsets: Vec<String>,

    /// Convert only the packets of the stores (or plain capture files, by their sidecars)
    /// this libpcap filter selects, read as `tapdeck extract` reads them (chunks and
    /// blocks the flow index rules out are skipped) into
    /// DATASET/_selected/selection.pcapng, which is then converted (and kept, so that the
    /// same selection is not read again).
    #[arg(long, value_name = "EXPR")]
    pub filter: Option<String>,

    /// With stores: only their packets at or after this time (as extract's --start).
    #[arg(long, value_name = "TIME")]
    pub start: Option<String>,

    /// With stores: only their packets before this time.
    #[arg(long, value_name = "TIME")]
    pub end: Option<String>,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,

    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(Args, Debug)]
pub struct DecryptArgs {
    /// The key file the dataset was converted with.
    #[arg(long, value_name = "KEYFILE")]
    pub key: PathBuf,

    /// Encrypted names or paths (as the dataset shows them); without any, one per line
    /// from standard input.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
}

#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Where to write the new key (never overwritten).
    #[arg(value_name = "KEYFILE")]
    pub path: PathBuf,
}

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    /// Arguments for `tapdeck-analyze` (see `tapdeck-analyze --help`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Capture live from this network interface (repeat for several). AF_PACKET with a
    /// TPACKET_V3 ring per interface, as `record -i`; needs CAP_NET_RAW.
    #[arg(short = 'i', long = "interface", value_name = "IF", required = true)]
    pub interfaces: Vec<String>,

    /// A collector (`tapdeck collect`, or any IPFIX collector) as HOST:PORT (port 4739 when
    /// left out) for UDP, or tcp://HOST:PORT or tls://HOST:PORT (RFC 7011 §10.4; every
    /// --to the same transport, a mix is refused); repeat for several: packets are spread over them by
    /// --balance. The export traffic to them is filtered out of the capture in the kernel.
    /// Over TCP and TLS the exporter reconnects with backoff, queues up to --buffer, and
    /// counts as sent only what the collector's host acknowledged.
    #[arg(long = "to", value_name = "HOST:PORT", required = true)]
    pub to: Vec<String>,

    /// TCP/TLS: bytes of messages queued for the collectors at most (in all, split evenly
    /// over threads and collectors), while they are unreachable or slow; packets beyond it
    /// are counted as not sent (`over_buffer`).
    #[arg(long, value_name = "SIZE", default_value = "64MiB")]
    pub buffer: String,

    /// tls://: this exporter's client certificate (PEM chain), which the collector checks.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// tls://: the private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// tls://: CA certificates (PEM) that may sign the collector's certificate, which must
    /// name the host given in --to.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,

    /// How packets are spread over several collectors: `flow` (the symmetric flow hash:
    /// both directions of a connection reach the same collector) or `round-robin` (whole
    /// batches to each in turn). A collector that is down (UDP: an ICMP error, until a probe
    /// draws none; TCP/TLS: no connection, after a failed attempt or 2 s) has its flows sent
    /// to the others meanwhile (counted `failed_over`), and back when it returns.
    #[arg(long, default_value = "flow", value_parser = ["flow", "round-robin"])]
    pub balance: String,

    /// Capture threads, each with its own socket per collector and its own observation
    /// domain (thread number + 1). PACKET_FANOUT with a symmetric flow hash, as `record`.
    #[arg(long, value_name = "N", default_value = "1")]
    pub threads: usize,

    /// Capture filter in tcpdump syntax, run in the kernel.
    #[arg(long, value_name = "EXPR")]
    pub filter: Option<String>,

    /// Bytes kept of each packet; the original length is sent too.
    #[arg(long, value_name = "BYTES", default_value = "128")]
    pub snaplen: u32,

    /// Keep each packet only up to the end of its transport (or ONC RPC) header, as
    /// `record --headers`; with --snaplen the smaller cut wins.
    #[arg(
        long,
        value_name = "DEPTH",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "transport",
        value_parser = ["transport", "rpc"]
    )]
    pub headers: Option<String>,

    /// The path MTU to size messages for (default: what the kernel knows for the route to
    /// each collector); a message is this less the IP and UDP headers.
    #[arg(long, value_name = "BYTES")]
    pub mtu: Option<usize>,

    /// Send each datagram on its own instead of handing the kernel runs of equal-size
    /// messages to cut up (UDP GSO, used where the kernel and route allow it; it saves most
    /// of the sending CPU and changes nothing the collector receives).
    #[arg(long)]
    pub no_gso: bool,

    /// Seconds between re-sending the templates, interface records and the exporter's own
    /// counts (UDP has no other way to tell a collector that started late).
    #[arg(long, value_name = "SECONDS", default_value = "1")]
    pub template_interval: f64,

    /// Bytes per kernel ring block (a multiple of the page size).
    #[arg(long, value_name = "SIZE", default_value = "4MiB")]
    pub ring_block_size: String,

    /// Blocks per kernel ring; one ring per interface and thread.
    #[arg(long, value_name = "N", default_value = "64")]
    pub ring_blocks: u32,

    /// Milliseconds after which the kernel hands over a partly filled ring block.
    #[arg(long, value_name = "MS", default_value = "10")]
    pub block_timeout_ms: u32,

    /// Once the sockets are open, drop root privileges and run as this user.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,

    /// Stop after this many packets.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,

    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,

    /// Seconds between JSON-lines stats records.
    #[arg(long, default_value = "5", value_name = "SECONDS")]
    pub stats_interval: f64,

    /// Where JSON-lines stats go (`-` for standard output); none by default.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<String>,
}

#[derive(Args, Debug)]
pub struct CollectArgs {
    /// Address and port to receive IPFIX on: UDP (`0.0.0.0:4739`, `[::]:4739`, or
    /// `udp://…`), TCP (`tcp://0.0.0.0:4739`) or TLS with client certificates
    /// (`tls://0.0.0.0:4739`, with --tls-cert, --tls-key and --tls-client-ca). On untrusted
    /// networks use TLS: over UDP a source address proves nothing.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: String,

    /// tls://: the collector's certificate (PEM chain, its own first).
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// tls://: the private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// tls://: CA certificates (PEM); every exporter must present a client certificate one
    /// of them signed, or its handshake fails (counted and logged once per address).
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,

    /// Store directory, as for `record`: `verify`, `extract`, `info` and `convert` read it.
    /// Interfaces are named EXPORTER/IFNAME; `collector.json` holds the loss accounting per
    /// exporter and observation domain, and lets a restarted collector count what it missed.
    #[arg(long, value_name = "DIR")]
    pub store: PathBuf,

    /// Accept messages only from these exporter addresses (repeat); others are counted and
    /// dropped. Default: any.
    #[arg(long, value_name = "ADDR")]
    pub allow: Vec<String>,

    /// Also keep the accepted messages, raw, in this RFC 5655 IPFIX file (`ipfixDump -i`).
    #[arg(long, value_name = "FILE")]
    pub ipfix_file: Option<PathBuf>,

    /// Also stream the packets as pcapng to standard output (`-w -`, e.g. `| tshark -r -`).
    #[arg(short = 'w', long = "write", value_name = "-", value_parser = ["-"])]
    pub write: Option<String>,

    /// Receiving sockets sharing the port (SO_REUSEPORT), each a stream of the store (UDP;
    /// over TCP and TLS every connection goes to one stream).
    #[arg(long, value_name = "N", default_value = "1")]
    pub sockets: usize,

    /// Once the sockets and output files are open, drop root privileges and run as this user
    /// (who must be able to write the store), so that network input is never parsed as root.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,

    #[command(flatten)]
    pub output: WriteOptions,

    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,

    /// Seconds between JSON-lines stats records (and saves of collector.json).
    #[arg(long, default_value = "5", value_name = "SECONDS")]
    pub stats_interval: f64,

    /// Benchmarks and tests only: the writer writes at most this much per second (e.g.
    /// 4MB), as a slower disk would, so the staging pool fills as it would in front of one.
    #[arg(long, value_name = "SIZE")]
    pub bench_disk_limit: Option<String>,
}
