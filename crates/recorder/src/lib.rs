//! The recorder: writes trace stores that `tapdeck-store` reads.
//!
//! Data path: a source's packets are copied by the capture loop into segments of a
//! preallocated staging pool; full segments go to a pool of compressors, or raw to the
//! writer, as the ladder controller decides from measured compressor and disk speeds; a
//! writer per stream lays the frames down with large aligned O_DIRECT writes, rotates files
//! and applies retention. The capture loop never waits: when no
//! segment is free the packet is dropped and counted.
//!
//! The stages: `capture` (a capture loop per source), `compress` (the compressor pool) and
//! `writer` (a writer per stream), joined by the queues of `pipeline` and wired together by
//! `recorder` (`Recording::start`, `Running::join`); `live` is what observers read while it
//! runs, `report` what it logs and writes as stats, `os` what it asks of the kernel.
//!
//! `merge` lives here too: it reads stores through `tapdeck-store` and records the merged
//! stream through this pipeline.

pub mod affinity;
pub mod capture;
pub mod compress;
pub mod controller;
pub mod direct;
pub mod error;
pub use tapdeck_store::chunk_filter;
pub mod ladder;
pub mod live;
pub mod merge;
pub mod options;
pub mod os;
pub mod pipeline;
pub mod recorder;
pub mod report;
pub mod retention;
pub mod sequencer;
pub mod staging;
pub mod stats;
pub mod writer;
