//! The compressor pool: takes full chunks of every stream, decides their codec once more
//! (the backlog may have grown while they waited), indexes their flows, encodes them into
//! recycled frame buffers, and hands them to their stream's writer. Measured speeds go to
//! the stream's ladder controller.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use tapdeck_pcap::container::{Codec, FrameEncoder};
use tapdeck_pcap::Format;

use crate::controller::Reason;
use crate::ladder::CodecLadder;
use crate::os::{thread_cpu_seconds, thread_page_faults};
use crate::pipeline::{Chunk, Done, Encoded, FrameBuffers, Job, Sequenced, StreamStaging};
use crate::stats::StatsHub;

/// Frame buffers each compressor writes into every page of before its first chunk (see
/// `FrameBuffers`); more are made as chunks queue for the writer, and kept.
const TOUCHED_FRAME_BUFFERS: usize = 4;

/// What a compressor is told.
#[derive(Clone)]
pub struct CompressorConfig {
    pub ladder: CodecLadder,
    /// Build each chunk's flow index (`crate::flows`) for records of this format.
    pub index_format: Option<Format>,
}

/// What a compressor works with: the streams' staging (indexed by stream), their writers'
/// queues, the frame buffers, and where write errors are counted.
#[derive(Clone)]
pub struct CompressorLinks {
    pub streams: Vec<StreamStaging>,
    pub to_writers: Vec<Sender<Sequenced<Done>>>,
    pub buffers: Arc<FrameBuffers>,
    pub stats: Arc<StatsHub>,
}

pub struct Compressor {
    cfg: CompressorConfig,
    links: CompressorLinks,
    encoder: FrameEncoder,
}

impl Compressor {
    pub fn new(cfg: CompressorConfig, links: CompressorLinks) -> Compressor {
        let encoder = FrameEncoder::new(cfg.ladder.container());
        Compressor {
            cfg,
            links,
            encoder,
        }
    }

    /// Warms up, says so on `ready`, then compresses chunks until the capture loops hang up.
    pub fn run(mut self, work: Receiver<Sequenced<Arc<Job>>>, ready: Sender<()>) {
        if let Some(stream) = self.links.streams.first() {
            warm_up(
                &mut self.encoder,
                &self.cfg.ladder,
                stream.pool.segment_size(),
            );
            for _ in 0..TOUCHED_FRAME_BUFFERS {
                self.links.buffers.add_touched();
            }
        }
        let _ = ready.send(());
        drop(ready);
        for Sequenced { stream, seq, item } in work {
            let Some(chunk) = item.start() else {
                // The writer took it raw while it queued here.
                self.links.streams[stream as usize]
                    .pool
                    .note_compression(false);
                continue;
            };
            let done = self.compress(stream as usize, chunk);
            let to_writer = &self.links.to_writers[stream as usize];
            if to_writer
                .send(Sequenced {
                    stream,
                    seq,
                    item: done,
                })
                .is_err()
            {
                self.links
                    .stats
                    .write_errors
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// One chunk, ready for its writer.
    fn compress(&mut self, stream: usize, mut chunk: Chunk) -> Done {
        let staging = &self.links.streams[stream];
        // The backlog may have grown while this chunk waited: decide again.
        if !chunk.source_waits {
            chunk.decision = staging.controller.at_compressor(
                chunk.decision,
                chunk.segment.data().len(),
                staging.pool.compression_backlog(),
                staging.pool.fill(),
            );
        }
        if let Some(format) = self.cfg.index_format {
            chunk.flows = Box::new(crate::chunk_filter::index_chunk(
                format,
                chunk.segment.data(),
                &chunk.linktypes,
            ));
        }
        let encoded = match chunk.decision.codec {
            Codec::Raw => Encoded::Raw,
            codec => self.encode(stream, codec, &mut chunk),
        };
        self.links.streams[stream].pool.note_compression(false);
        Done::Chunk(chunk, encoded)
    }

    /// Encodes a chunk with `codec` and tells the controller how fast that went; a chunk
    /// the codec fails on is stored raw.
    fn encode(&mut self, stream: usize, codec: Codec, chunk: &mut Chunk) -> Encoded {
        let controller = &self.links.streams[stream].controller;
        let mut bytes = self.links.buffers.take();
        // A codec's first chunk on this thread builds its context, and a chunk that took a
        // page fault measured the kernel: neither is a measure of its speed.
        let warm = self.encoder.is_warm(codec);
        let faults_before = thread_page_faults();
        let (started, cpu_before) = (Instant::now(), thread_cpu_seconds());
        match self.encoder.encode(codec, chunk.segment.data(), &mut bytes) {
            Ok(codec) => {
                let data = chunk.segment.data().len();
                if warm && thread_page_faults() == faults_before {
                    controller.compressed(
                        codec,
                        (data, bytes.len()),
                        thread_cpu_seconds() - cpu_before,
                        started.elapsed().as_secs_f64(),
                    );
                } else {
                    controller.compressed_cold(codec, (data, bytes.len()));
                }
                Encoded::Frame { bytes, codec }
            }
            Err(e) => {
                tracing::warn!("{codec} failed on a chunk ({e}); storing it raw");
                chunk.decision.reason = Reason::Fallback;
                Encoded::Raw
            }
        }
    }
}

/// Builds each fast rung's context and buffers on a chunk-sized block of half-random bytes,
/// before the first packet's chunk: a codec's first frame costs several times the next
/// ones, which would delay the first chunks and, timed, mislead the controller. Slower
/// zstd levels would take too long here; their first chunk is left untimed instead.
fn warm_up(encoder: &mut FrameEncoder, ladder: &CodecLadder, chunk: usize) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let block: Vec<u8> = (0..chunk)
        .map(|i| {
            if (i / 512) % 2 == 0 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            } else {
                (i % 251) as u8
            }
        })
        .collect();
    let mut out = Vec::new();
    for codec in ladder.rungs() {
        let fast = matches!(codec, Codec::Lz4 | Codec::Zstd(..=3));
        // An LZ4 container holds zstd rungs as LZ4: one warm-up serves them all.
        if fast && !encoder.is_warm(codec) {
            out.clear();
            let _ = encoder.encode(codec, &block, &mut out);
        }
    }
}
