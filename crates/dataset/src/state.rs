//! What the converter remembers between runs (`DATASET/_state/`): each source's pass-one
//! result, and which pass-two inputs each source's data files were written with. A source
//! is converted again only when one of those changed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{DatasetError, Result};
use crate::source::SourceFile;
use crate::tables::{CaptureStatsRow, RowGroupRow};

/// An RPC conversation, as calls and replies are matched: transport, client, server.
pub type ConvKey = String;

/// A call left without a reply at the end of its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenCall {
    pub conv: ConvKey,
    pub xid: u32,
    /// Its transaction id.
    pub id: i64,
    pub time_ns: i64,
    pub program: u32,
    pub version: u32,
    pub procedure: u32,
}

/// A reply whose call was not in its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrphanReply {
    pub conv: ConvKey,
    pub xid: u32,
    /// The id it has as a reply without a call.
    pub id: i64,
    pub time_ns: i64,
}

/// Pass one's result for one source file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PassOne {
    pub source: SourceFile,
    pub format: String,
    pub packets: u64,
    pub first_time_ns: Option<i64>,
    pub last_time_ns: Option<i64>,
    /// RPC messages (calls and replies): the size of the file's id range.
    pub messages: u64,
    pub open_calls: Vec<OpenCall>,
    /// Ids of open calls of the previous file(s) that a reply in this file answered (seen
    /// through the warm-up over their ends).
    pub answered_warm: Vec<i64>,
    pub orphan_replies: Vec<OrphanReply>,
    /// Where a damaged file stopped being readable; the packets before it are converted.
    #[serde(default)]
    pub defect: Option<String>,
    /// The earlier files of the same capture that its warm-up reads, and the next one:
    /// they change which messages this file completes and which calls its replies find.
    #[serde(default)]
    pub neighbours: (Vec<String>, Option<String>),
}

/// The call a reply in another file answers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemoteCall {
    pub transaction_id: i64,
    pub program: u32,
    pub version: u32,
    pub procedure: u32,
    pub time_ns: i64,
}

/// Everything pass two needs to know about one file beyond its bytes. Equal inputs give
/// equal output files, so a file whose inputs are unchanged is skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassTwoInput {
    pub file_id: i32,
    /// A reply's own id (as a reply without a call) → the call in an earlier file that it
    /// answers.
    pub remote_replies: BTreeMap<i64, RemoteCall>,
    /// Ids of calls answered in a later file.
    pub answered_later: Vec<i64>,
    pub anonymization: Option<String>,
    pub converter: String,
    #[serde(default)]
    pub neighbours: (Vec<String>, Option<String>),
}

/// Pass two's result for one source file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PassTwo {
    pub source: SourceFile,
    pub input: PassTwoInput,
    pub row_groups: Vec<RowGroupRowState>,
    pub capture_stats: Vec<CaptureStatsState>,
    pub counts: BTreeMap<String, u64>,
    /// `capture::VERSION` when written: results of an older converter are converted again,
    /// so an existing dataset gains the capture counts it lacked.
    #[serde(default)]
    pub capture_stats_version: u32,
}

/// `RowGroupRow` in a serde-friendly form.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RowGroupRowState {
    pub table: String,
    pub path: String,
    pub row_group: i32,
    pub rows: i64,
    pub min_time_ns: i64,
    pub max_time_ns: i64,
    pub min_transaction_id: Option<i64>,
    pub max_transaction_id: Option<i64>,
}

impl From<&RowGroupRow> for RowGroupRowState {
    fn from(r: &RowGroupRow) -> Self {
        RowGroupRowState {
            table: r.table.clone(),
            path: r.path.clone(),
            row_group: r.row_group,
            rows: r.rows,
            min_time_ns: r.min_time_ns,
            max_time_ns: r.max_time_ns,
            min_transaction_id: r.min_transaction_id,
            max_transaction_id: r.max_transaction_id,
        }
    }
}

impl From<&RowGroupRowState> for RowGroupRow {
    fn from(r: &RowGroupRowState) -> Self {
        RowGroupRow {
            table: r.table.clone(),
            path: r.path.clone(),
            row_group: r.row_group,
            rows: r.rows,
            min_time_ns: r.min_time_ns,
            max_time_ns: r.max_time_ns,
            min_transaction_id: r.min_transaction_id,
            max_transaction_id: r.max_transaction_id,
        }
    }
}

/// `CaptureStatsRow` in a serde-friendly form.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaptureStatsState {
    pub interface: i32,
    pub interface_name: Option<String>,
    pub link_type: i32,
    pub first_time_ns: Option<i64>,
    pub last_time_ns: Option<i64>,
    pub packets: i64,
    pub received: Option<i64>,
    pub kernel_dropped: Option<i64>,
    #[serde(default)]
    pub staging_dropped: Option<i64>,
    #[serde(default)]
    pub write_dropped: Option<i64>,
    pub if_dropped: Option<i64>,
    #[serde(default)]
    pub files_deleted: Option<i64>,
    #[serde(default)]
    pub bytes_deleted: Option<i64>,
    pub from_isb: bool,
    /// The counts come from a tapdeck file's chunk index (see `capture.rs`).
    #[serde(default)]
    pub from_store: bool,
}

impl CaptureStatsState {
    pub fn row(&self, file_id: i32) -> CaptureStatsRow {
        CaptureStatsRow {
            file_id,
            interface: self.interface,
            interface_name: self.interface_name.clone(),
            link_type: self.link_type,
            first_time_ns: self.first_time_ns,
            last_time_ns: self.last_time_ns,
            packets: self.packets,
            received: self.received,
            kernel_dropped: self.kernel_dropped,
            staging_dropped: self.staging_dropped,
            write_dropped: self.write_dropped,
            if_dropped: self.if_dropped,
            forward_lost: None,
            files_deleted: self.files_deleted,
            bytes_deleted: self.bytes_deleted,
            source: match (self.from_store, self.from_isb) {
                (true, _) => "tapdeck",
                (false, true) => "isb",
                (false, false) => "none",
            },
        }
    }
}

/// The state directory of a dataset.
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    pub fn new(dataset: &Path) -> StateDir {
        StateDir {
            dir: dataset.join("_state"),
        }
    }

    fn path(&self, kind: &str, source: &SourceFile) -> PathBuf {
        // One file per source, named by a hash of its path: paths contain slashes.
        let h = xxhash_rust::xxh3::xxh3_64(source.path.as_bytes());
        self.dir.join(kind).join(format!("{h:016x}.json"))
    }

    fn load<T: for<'de> Deserialize<'de>>(&self, kind: &str, source: &SourceFile) -> Option<T> {
        let bytes = std::fs::read(self.path(kind, source)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn save<T: Serialize>(&self, kind: &str, source: &SourceFile, v: &T) -> Result<()> {
        let path = self.path(kind, source);
        let dir = path.parent().expect("has a parent");
        std::fs::create_dir_all(dir).map_err(DatasetError::io("create", dir))?;
        // Unique per process and call: shards run at the same time write the same state.
        static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("{}.{n}.tmp", std::process::id()));
        let bytes = serde_json::to_vec(v).expect("state serializes");
        std::fs::write(&tmp, bytes).map_err(DatasetError::io("write", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(DatasetError::io("write", path))
    }

    /// Pass one's cached result, if the file is unchanged since.
    pub fn pass_one(&self, source: &SourceFile) -> Option<PassOne> {
        self.load::<PassOne>("pass1", source)
            .filter(|p| p.source == *source)
    }

    pub fn save_pass_one(&self, p: &PassOne) -> Result<()> {
        self.save("pass1", &p.source, p)
    }

    pub fn pass_two(&self, source: &SourceFile) -> Option<PassTwo> {
        self.load::<PassTwo>("pass2", source)
            .filter(|p| p.source == *source)
    }

    pub fn save_pass_two(&self, p: &PassTwo) -> Result<()> {
        self.save("pass2", &p.source, p)
    }

    /// A plain file's span, if the file is unchanged since it was read.
    pub fn span(&self, source: &SourceFile) -> Option<crate::span::Span> {
        self.load::<crate::span::Span>("span", source)
            .filter(|s| s.source == *source)
    }

    pub fn save_span(&self, s: &crate::span::Span) -> Result<()> {
        self.save("span", &s.source, s)
    }

    /// Every pass-one result on record (sources converted by earlier runs included).
    pub fn all_pass_one(&self) -> Vec<PassOne> {
        let mut out = Vec::new();
        if let Ok(entries) = std::fs::read_dir(self.dir.join("pass1")) {
            for e in entries.flatten() {
                // Skips other writers' temporary files.
                if e.path().extension().is_none_or(|x| x != "json") {
                    continue;
                }
                if let Some(p) = std::fs::read(e.path())
                    .ok()
                    .and_then(|b| serde_json::from_slice::<PassOne>(&b).ok())
                {
                    out.push(p);
                }
            }
        }
        out
    }
}
