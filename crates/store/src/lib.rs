//! The recorder and the trace store it writes.
//!
//! Data path: a source's packets are copied by the capture loop into segments of a
//! preallocated staging pool; full segments go to a pool of compressors, or raw to the
//! writer, as the ladder controller decides from measured compressor and disk speeds; a
//! writer per stream lays the frames down with large aligned O_DIRECT writes, rotates files
//! and applies retention. The capture loop never waits: when no
//! segment is free the packet is dropped and counted.

pub mod affinity;
pub mod controller;
pub mod direct;
pub mod extract;
pub mod ladder;
pub mod merge;
pub mod meta;
pub mod pipeline;
pub mod read;
pub mod recorder;
pub mod retention;
pub mod staging;
pub mod stats;
pub mod verify;
pub mod writer;
