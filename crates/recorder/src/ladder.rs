//! The codec ladder: the strongest codec while few chunks wait for compression, cheaper
//! ones as that backlog grows, a raw copy when it is nearly the whole pool — the gzip -9 /
//! -1 / lzf / copy ladder of the HP papers, with zstd and lz4. The backlog is measured
//! at the compressors only: when the disk is what is behind, compressing less would only
//! add bytes to its queue. The recorder's `controller` plans the rung from measured speeds
//! and uses this backlog ladder as a cap (and its raw rung only while the disk has headroom).

use tapdeck_pcap::container::{Codec, Container};

use crate::error::ConfigError;

/// Backlog at which rungs without an explicit threshold stop being used.
const SPREAD_UP_TO: f64 = 0.75;
/// Backlog from which chunks are always stored raw.
const RAW_FROM: f64 = 0.9;

#[derive(Debug, Clone, PartialEq)]
pub struct CodecLadder {
    /// (codec, use while the backlog is below this), thresholds increasing; the last rung
    /// has threshold infinity.
    rungs: Vec<(Codec, f64)>,
    container: Container,
}

impl CodecLadder {
    /// Parses `zstd:6,zstd:1@0.5,lz4,raw`; `none` means plain files.
    pub fn parse(spec: &str) -> Result<CodecLadder, ConfigError> {
        let spec = spec.trim();
        if spec.eq_ignore_ascii_case("none") {
            return Ok(CodecLadder {
                rungs: vec![(Codec::Raw, f64::INFINITY)],
                container: Container::Plain,
            });
        }
        let mut rungs: Vec<(Codec, Option<f64>)> = Vec::new();
        for part in spec.split(',') {
            let (codec, threshold) = match part.split_once('@') {
                Some((c, t)) => {
                    let t: f64 = t
                        .trim()
                        .parse()
                        .ok()
                        .filter(|t| (0.0..=1.0).contains(t))
                        .ok_or_else(|| ConfigError::LadderThreshold { part: part.into() })?;
                    (c, Some(t))
                }
                None => (part, None),
            };
            let codec: Codec = codec.parse()?;
            if rungs.iter().any(|(c, _)| *c == codec) {
                return Err(ConfigError::LadderCodecTwice {
                    spec: spec.into(),
                    codec: codec.to_string(),
                });
            }
            if codec == Codec::Raw && rungs.iter().any(|(c, _)| *c == Codec::Raw) {
                return Err(ConfigError::LadderRawTwice);
            }
            rungs.push((codec, threshold));
        }
        if let Some(pos) = rungs.iter().position(|(c, _)| *c == Codec::Raw) {
            if pos != rungs.len() - 1 {
                return Err(ConfigError::LadderRawNotLast { spec: spec.into() });
            }
        }
        let container = if rungs.iter().any(|(c, _)| matches!(c, Codec::Zstd(_))) {
            Container::Zstd
        } else if rungs.iter().any(|(c, _)| *c == Codec::Lz4) {
            Container::Lz4
        } else {
            Container::Plain
        };
        // Always end with raw, used from RAW_FROM: when the pool is nearly full, only a copy
        // is cheap enough to keep up.
        if rungs.last().map(|r| r.0) != Some(Codec::Raw) {
            rungs.push((Codec::Raw, None));
        }
        let compressing = rungs.len() - 1;
        let mut out = Vec::with_capacity(rungs.len());
        let mut previous = 0.0;
        for (i, (codec, threshold)) in rungs.into_iter().enumerate() {
            let t = if i == compressing {
                f64::INFINITY
            } else {
                let spread = if compressing == 1 {
                    RAW_FROM
                } else {
                    SPREAD_UP_TO * (i + 1) as f64 / compressing as f64
                };
                threshold.unwrap_or(spread).min(RAW_FROM)
            };
            if t < previous {
                return Err(ConfigError::LadderThresholdsDecrease { spec: spec.into() });
            }
            previous = t;
            out.push((codec, t));
        }
        Ok(CodecLadder {
            rungs: out,
            container,
        })
    }

    pub fn container(&self) -> Container {
        self.container
    }

    pub fn rungs(&self) -> impl Iterator<Item = Codec> + '_ {
        self.rungs.iter().map(|r| r.0)
    }

    /// The first rung: what an idle recorder uses.
    pub fn strongest(&self) -> Codec {
        self.rungs[0].0
    }

    /// The codec for a chunk compressed while the pool is `fill` (0..=1) full.
    pub fn choose(&self, fill: f64) -> Codec {
        self.rungs
            .iter()
            .find(|(_, t)| fill < *t)
            .map_or(Codec::Raw, |r| r.0)
    }

    /// `zstd:6@0.25,zstd:1@0.5,...`: the ladder with every threshold spelled out.
    pub fn describe(&self) -> String {
        self.rungs
            .iter()
            .map(|(c, t)| {
                if t.is_finite() {
                    format!("{c}@{t:.2}")
                } else {
                    c.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ladder_steps_down_as_the_pool_fills() {
        let ladder = CodecLadder::parse("zstd:6,zstd:1,lz4,raw").unwrap();
        assert_eq!(ladder.container(), Container::Zstd);
        assert_eq!(ladder.describe(), "zstd:6@0.25,zstd:1@0.50,lz4@0.75,raw");
        assert_eq!(ladder.choose(0.0), Codec::Zstd(6));
        assert_eq!(ladder.choose(0.3), Codec::Zstd(1));
        assert_eq!(ladder.choose(0.6), Codec::Lz4);
        assert_eq!(ladder.choose(0.8), Codec::Raw);
        assert_eq!(ladder.choose(1.0), Codec::Raw);
    }

    #[test]
    fn single_codecs_get_a_raw_rung_when_nearly_full() {
        let ladder = CodecLadder::parse("lz4").unwrap();
        assert_eq!(ladder.container(), Container::Lz4);
        assert_eq!(ladder.choose(0.89), Codec::Lz4);
        assert_eq!(ladder.choose(0.9), Codec::Raw);
        let ladder = CodecLadder::parse("zstd:3@0.5,lz4").unwrap();
        assert_eq!(ladder.describe(), "zstd:3@0.50,lz4@0.75,raw");
    }

    #[test]
    fn plain_files_for_none_or_raw_alone() {
        for spec in ["none", "raw", "NONE"] {
            let ladder = CodecLadder::parse(spec).unwrap();
            assert_eq!(ladder.container(), Container::Plain);
            assert_eq!(ladder.choose(0.0), Codec::Raw);
        }
    }

    #[test]
    fn bad_ladders_say_why() {
        for (spec, says) in [
            ("raw,zstd", "last rung"),
            ("zstd:6,zstd:6", "twice"),
            ("zstd@0.7,lz4@0.2", "increase"),
            ("zstd@2", "fraction"),
            ("gzip", "unknown codec"),
        ] {
            let err = CodecLadder::parse(spec).unwrap_err().to_string();
            assert!(err.contains(says), "{spec}: {err}");
        }
    }
}
