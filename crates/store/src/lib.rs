//! Reading the trace stores that `tapdeck-recorder` writes:
//! - `meta`: the manifest and file names; `lock`: who writes a store;
//! - `read`: opening stored files from their chunk index, and a store's files;
//! - `salvage`: reading files whose index is missing (a file being written, a file cut
//!   short) by rebuilding it from their bytes;
//! - `extract`: merging files and stores into one time-ordered packet stream, through one
//!   plan builder (time window, damage, chunk filters); `time_prune`: which files a
//!   window needs, from their names, before any is opened; `window`: the time window
//!   and clock offsets both use;
//! - `verify`: strict checks; `repair` and `finalize`: making damaged or unfinished files
//!   whole on disk;
//! - the store's index, by level: `chunk_filter` (which flows a chunk holds, built the same
//!   way by the recorder and by `tapdeck index`, and a file's summary of them); `catalog`
//!   (every finished file's time range and summary, in one append-only file at the
//!   store's root); `sidecar` is the block index beside a plain capture file; `backfill`
//!   adds chunk filters, summaries and sidecars to files written without them (`tapdeck
//!   index`).
//!
//! Nothing here records; the recorder depends on this crate, never the reverse.

pub mod backfill;
pub mod catalog;
pub mod chunk_filter;
pub mod extract;
pub mod finalize;
pub mod lock;
pub mod meta;
pub mod read;
pub mod repair;
pub mod salvage;
pub mod sidecar;
pub mod time_prune;
pub mod verify;
pub mod window;
