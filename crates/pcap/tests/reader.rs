//! The strict reader against real captures: pcap-parser (rusticata) as an oracle over the
//! shared corpus, malformed and truncated files, and a bounded mutation fuzz.
//!
//! The corpus lives outside the repository (`../shared/corpus` beside the workspace);
//! every test here prints a note and passes when it is absent.

use std::fs;
use std::path::{Path, PathBuf};

use pcap_parser::pcapng::{
    build_ts_resolution, parse_block_be, parse_block_le, parse_sectionheaderblock, Block,
};
use pcap_parser::{
    parse_pcap_frame, parse_pcap_frame_be, parse_pcap_frame_modified, parse_pcap_header,
};
use tapdeck_pcap::validate::Validator;
use tapdeck_pcap::{FormatError, FormatErrorKind, TraceReader};

fn corpus() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("note: corpus not found at {}, skipping", dir.display());
        None
    }
}

/// Every capture file of the corpus, sorted so runs are reproducible.
fn corpus_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "pcap" || x == "pcapng") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root.join("tcpdump-tests"), &mut out);
    walk(&root.join("pcapng-test-vectors"), &mut out);
    out.sort();
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pkt {
    ts_ns: u64,
    iface: u32,
    orig_len: u32,
    data: Vec<u8>,
}

/// Everything our reader makes of a file, up to its first error.
struct Ours {
    packets: Vec<Pkt>,
    linktypes: Vec<u16>,
    result: Result<(), FormatError>,
    end: u64,
}

fn read_ours(bytes: &[u8]) -> Ours {
    let mut r = match TraceReader::new(bytes) {
        Ok(r) => r,
        Err(e) => {
            return Ours {
                packets: vec![],
                linktypes: vec![],
                result: Err(e),
                end: 0,
            };
        }
    };
    let mut packets = Vec::new();
    // Every packet consumes input, so more packets than bytes means a loop.
    let limit = bytes.len() + 1;
    let result = loop {
        match r.next_packet() {
            Ok(Some(p)) => packets.push(Pkt {
                ts_ns: p.ts_ns,
                iface: p.iface,
                orig_len: p.orig_len,
                data: p.data.to_vec(),
            }),
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
        assert!(packets.len() <= limit, "reader does not advance");
    };
    Ours {
        packets,
        linktypes: r.interfaces().iter().map(|i| i.linktype).collect(),
        result,
        end: r.offset(),
    }
}

enum Oracle {
    Ok {
        packets: Vec<Pkt>,
        linktypes: Vec<u16>,
    },
    Err(String),
    /// pcap-parser cannot express the file (obsolete packet blocks, odd resolutions).
    Unsupported(&'static str),
}

/// pcap-parser's view of a whole file, turned into the same shape as ours.
fn read_oracle(bytes: &[u8]) -> Oracle {
    if bytes.len() >= 4 && bytes[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
        oracle_pcapng(bytes)
    } else {
        oracle_pcap(bytes)
    }
}

fn oracle_pcap(bytes: &[u8]) -> Oracle {
    let (mut rest, h) = match parse_pcap_header(bytes) {
        Ok(x) => x,
        Err(e) => return Oracle::Err(format!("header: {e:?}")),
    };
    let mut packets = Vec::new();
    while !rest.is_empty() {
        let parsed = if h.is_modified_format() {
            parse_pcap_frame_modified(rest)
        } else if h.is_bigendian() {
            parse_pcap_frame_be(rest)
        } else {
            parse_pcap_frame(rest)
        };
        let (r, f) = match parsed {
            Ok(x) => x,
            Err(e) => return Oracle::Err(format!("record {}: {e:?}", packets.len())),
        };
        let frac_ns = if h.is_nanosecond_precision() {
            u64::from(f.ts_usec)
        } else {
            u64::from(f.ts_usec) * 1000
        };
        packets.push(Pkt {
            ts_ns: u64::from(f.ts_sec) * 1_000_000_000 + frac_ns,
            iface: 0,
            orig_len: f.origlen,
            data: f.data.to_vec(),
        });
        rest = r;
    }
    Oracle::Ok {
        packets,
        linktypes: vec![(h.network.0 & 0xffff) as u16],
    }
}

fn oracle_pcapng(bytes: &[u8]) -> Oracle {
    struct If {
        linktype: u16,
        snaplen: u32,
        resolution: u64,
        offset_s: i64,
        last_ns: u64,
    }
    let mut ifaces: Vec<If> = Vec::new();
    let mut packets = Vec::new();
    let mut rest = bytes;
    let mut big_endian = false;
    let mut first = 0usize;
    let mut at_start = true;
    while !rest.is_empty() {
        let parsed = if at_start {
            parse_sectionheaderblock(rest).map(|(r, b)| (r, Block::SectionHeader(b)))
        } else if big_endian {
            parse_block_be(rest)
        } else {
            parse_block_le(rest)
        };
        at_start = false;
        let (r, block) = match parsed {
            Ok(x) => x,
            Err(e) => return Oracle::Err(format!("block at {}: {e:?}", bytes.len() - rest.len())),
        };
        rest = r;
        // Raw timestamp to ns via pcap-parser's own (seconds, fraction) split.
        let ns = |i: &If, raw_hi: u32, raw_lo: u32| -> Option<u64> {
            let raw = (u64::from(raw_hi) << 32) | u64::from(raw_lo);
            let secs = i128::from(raw / i.resolution) + i128::from(i.offset_s);
            let frac = u128::from(raw % i.resolution) * 1_000_000_000 / u128::from(i.resolution);
            u64::try_from(secs * 1_000_000_000 + frac as i128).ok()
        };
        match block {
            Block::SectionHeader(shb) => {
                big_endian = shb.big_endian();
                first = ifaces.len();
            }
            Block::InterfaceDescription(idb) => {
                let Some(resolution) = build_ts_resolution(idb.if_tsresol) else {
                    return Oracle::Unsupported("if_tsresol beyond u64");
                };
                ifaces.push(If {
                    linktype: idb.linktype.0 as u16,
                    snaplen: idb.snaplen,
                    resolution,
                    offset_s: idb.if_tsoffset,
                    last_ns: 0,
                });
            }
            Block::EnhancedPacket(epb) => {
                let Some(i) = ifaces.get_mut(first + epb.if_id as usize) else {
                    return Oracle::Err(format!("EPB names missing interface {}", epb.if_id));
                };
                if epb.caplen as usize > epb.data.len() {
                    return Oracle::Err("EPB caplen past its block".into());
                }
                let Some(ts_ns) = ns(i, epb.ts_high, epb.ts_low) else {
                    return Oracle::Unsupported("timestamp beyond u64 ns");
                };
                i.last_ns = ts_ns;
                packets.push(Pkt {
                    ts_ns,
                    iface: (first + epb.if_id as usize) as u32,
                    orig_len: epb.origlen,
                    data: epb.data[..epb.caplen as usize].to_vec(),
                });
            }
            Block::SimplePacket(spb) => {
                let Some(i) = ifaces.get(first) else {
                    return Oracle::Err("SPB without interface".into());
                };
                let mut caplen = (spb.origlen as usize).min(spb.data.len());
                if i.snaplen != 0 {
                    caplen = caplen.min(i.snaplen as usize);
                }
                packets.push(Pkt {
                    ts_ns: i.last_ns,
                    iface: first as u32,
                    orig_len: spb.origlen,
                    data: spb.data[..caplen].to_vec(),
                });
            }
            Block::InterfaceStatistics(isb) if ifaces.get(first + isb.if_id as usize).is_none() => {
                return Oracle::Err("ISB names missing interface".into());
            }
            Block::Unknown(u) if u.block_type == 2 => {
                return Oracle::Unsupported("obsolete packet block");
            }
            _ => {}
        }
    }
    Oracle::Ok {
        packets,
        linktypes: ifaces.iter().map(|i| i.linktype).collect(),
    }
}

#[test]
fn corpus_agrees_with_pcap_parser() {
    let Some(root) = corpus() else { return };
    let files = corpus_files(&root);
    assert!(
        files.len() > 100,
        "corpus looks incomplete: {} files",
        files.len()
    );
    let (mut agreed, mut both_err, mut we_err_only, mut oracle_err_only, mut unsupported) =
        (0, 0, 0, 0, 0);
    let mut packets = 0usize;
    let mut disagreements = Vec::new();
    for f in &files {
        let bytes = fs::read(f).unwrap();
        let ours = read_ours(&bytes);
        let name = f.strip_prefix(&root).unwrap().display().to_string();
        match read_oracle(&bytes) {
            Oracle::Ok {
                packets: want,
                linktypes,
            } => match &ours.result {
                Ok(()) => {
                    if ours.packets.len() != want.len() {
                        disagreements.push(format!(
                            "{name}: {} packets, pcap-parser {}",
                            ours.packets.len(),
                            want.len()
                        ));
                    } else if let Some(i) = (0..want.len()).find(|&i| ours.packets[i] != want[i]) {
                        let (a, b) = (&ours.packets[i], &want[i]);
                        disagreements.push(format!(
                            "{name}: packet {i} differs: ts {} vs {}, iface {} vs {}, orig {} vs {}, caplen {} vs {}",
                            a.ts_ns, b.ts_ns, a.iface, b.iface, a.orig_len, b.orig_len,
                            a.data.len(), b.data.len()
                        ));
                    } else if ours.linktypes != linktypes {
                        disagreements.push(format!(
                            "{name}: link types {:?} vs {linktypes:?}",
                            ours.linktypes
                        ));
                    } else {
                        agreed += 1;
                        packets += want.len();
                    }
                }
                Err(e) => {
                    we_err_only += 1;
                    disagreements.push(format!("{name}: pcap-parser reads it, we fail: {e}"));
                }
            },
            Oracle::Err(why) => match &ours.result {
                Err(e) => {
                    both_err += 1;
                    println!("both reject {name}: ours: {e}; pcap-parser: {why}");
                }
                Ok(()) => {
                    oracle_err_only += 1;
                    println!("only pcap-parser rejects {name}: {why}");
                }
            },
            Oracle::Unsupported(why) => {
                unsupported += 1;
                println!(
                    "pcap-parser cannot compare {name} ({why}); ours: {:?}",
                    ours.result.as_ref().err()
                );
            }
        }
    }
    println!(
        "corpus: {} files; agreed {agreed} ({packets} packets); both rejected {both_err}; \
         only pcap-parser rejected {oracle_err_only}; only we rejected {we_err_only}; \
         not comparable {unsupported}",
        files.len()
    );
    assert!(
        disagreements.is_empty(),
        "disagreements:\n{}",
        disagreements.join("\n")
    );
}

#[test]
fn malformed_corpus_files_never_panic() {
    let Some(root) = corpus() else { return };
    let marks = ["oobr", "overflow", "crash", "segfault", "invalid"];
    let (mut ok, mut err) = (0, 0);
    for f in corpus_files(&root) {
        let name = f.file_name().unwrap().to_string_lossy().to_lowercase();
        if !marks.iter().any(|m| name.contains(m)) {
            continue;
        }
        let bytes = fs::read(&f).unwrap();
        match validate_all(&bytes) {
            Ok(_) => ok += 1,
            Err(_) => err += 1,
        }
    }
    println!("malformed-name files: {ok} read cleanly, {err} clean errors");
    assert!(ok + err > 50);
}

/// Reads and validates everything; returns the packet count.
fn validate_all(bytes: &[u8]) -> Result<usize, FormatError> {
    let mut r = TraceReader::new(bytes)?;
    let mut v = Validator::new();
    let mut n = 0;
    while let Some(c) = r.next_packet_with_context()? {
        // Semantic defects are expected in hostile files; only panics matter here.
        let _ = v.check(c.interfaces, &c.packet, c.offset);
        n += 1;
        assert!(n <= bytes.len(), "reader does not advance");
    }
    Ok(n)
}

/// Files that read cleanly, some of each format and byte order, for truncation and mutation.
fn clean_samples(root: &Path, max_len: usize, count: usize) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut kinds = std::collections::HashMap::<[u8; 4], usize>::new();
    for f in corpus_files(root) {
        let bytes = fs::read(&f).unwrap();
        if bytes.len() > max_len || bytes.len() < 4 || read_ours(&bytes).result.is_err() {
            continue;
        }
        // Spread the picks over magics (pcap LE/BE, µs/ns, pcapng) rather than take the
        // first files alphabetically.
        let magic: [u8; 4] = bytes[..4].try_into().unwrap();
        let k = kinds.entry(magic).or_default();
        if *k < count {
            *k += 1;
            out.push((f.file_name().unwrap().to_string_lossy().into_owned(), bytes));
        }
    }
    out
}

#[test]
fn truncation_at_any_offset_is_clean() {
    let Some(root) = corpus() else { return };
    let samples = clean_samples(&root, 64 << 10, 4);
    let mut cuts = 0;
    for (name, bytes) in &samples {
        let full = read_ours(bytes);
        // Every byte for small files, about 400 cuts for the rest.
        let step = (bytes.len() / 400).max(1);
        for cut in (0..bytes.len()).step_by(step) {
            cuts += 1;
            let got = read_ours(&bytes[..cut]);
            assert!(
                got.packets.len() <= full.packets.len()
                    && got.packets[..] == full.packets[..got.packets.len()],
                "{name} cut at {cut}: packets before the cut differ"
            );
            match got.result {
                Ok(()) => assert_eq!(
                    got.end, cut as u64,
                    "{name} cut at {cut}: Ok before the end"
                ),
                Err(FormatError {
                    offset,
                    kind: FormatErrorKind::Truncated(_),
                }) => {
                    assert!(
                        offset <= cut as u64,
                        "{name} cut at {cut}: error offset {offset}"
                    )
                }
                Err(e) => panic!("{name} cut at {cut}: expected Truncated, got {e}"),
            }
        }
    }
    println!("truncation: {} files, {cuts} cuts", samples.len());
    assert!(samples.len() >= 4);
}

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            break;
        }
        let at = rng.below(b.len());
        match rng.below(6) {
            0 => b[at] ^= 1 << rng.below(8),
            1 => b[at] = [0, 0xff, 0x7f, 0x80, 1][rng.below(5)],
            2 => {
                // A length-like 32-bit field at a 4-aligned offset, either byte order.
                let at = at & !3;
                if at + 4 <= b.len() {
                    let v: u32 = [
                        0,
                        1,
                        4,
                        8,
                        11,
                        12,
                        16,
                        20,
                        28,
                        32,
                        0x7fff_fffc,
                        0xffff_fffc,
                        0x0800_0000,
                        0x0800_0004,
                    ][rng.below(14)];
                    let v = if rng.below(2) == 0 {
                        v.to_le_bytes()
                    } else {
                        v.to_be_bytes()
                    };
                    b[at..at + 4].copy_from_slice(&v);
                }
            }
            3 => b.truncate(at),
            4 => {
                // Duplicate a slice, as a repeated block would.
                let len = rng.below(64).min(b.len() - at);
                let chunk = b[at..at + len].to_vec();
                let to = rng.below(b.len());
                b.splice(to..to, chunk);
            }
            _ => {
                let len = rng.below(16).min(b.len() - at);
                b.drain(at..at + len);
            }
        }
    }
    b
}

#[test]
fn mutations_never_panic_or_hang() {
    let Some(root) = corpus() else { return };
    let samples = clean_samples(&root, 4 << 10, 6);
    assert!(!samples.is_empty());
    let mut rng = Rng(0x7a9d_ec4b_0d15_ea5e);
    let (mut ok, mut err) = (0, 0);
    for i in 0..20_000 {
        let (_, seed) = &samples[i % samples.len()];
        let m = mutate(&mut rng, seed);
        match validate_all(&m) {
            Ok(_) => ok += 1,
            Err(_) => err += 1,
        }
    }
    println!(
        "mutation fuzz: {} seeds, {ok} read cleanly, {err} clean errors",
        samples.len()
    );
}

/// A second, independent oracle for packet counts: Wireshark's `capinfos`, when installed.
#[test]
fn packet_counts_match_capinfos() {
    let Some(root) = corpus() else { return };
    let files = corpus_files(&root);
    let out = match std::process::Command::new("capinfos")
        .args(["-T", "-r", "-c", "-M"])
        .args(&files)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("note: capinfos not runnable ({e}), skipping");
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (mut compared, mut mismatched) = (0, Vec::new());
    for line in stdout.lines() {
        // capinfos prints only the files it could read; Wireshark refuses some link types.
        let Some((path, count)) = line.rsplit_once('\t') else {
            continue;
        };
        let Ok(count) = count.trim().parse::<usize>() else {
            continue;
        };
        let bytes = fs::read(path).unwrap();
        let ours = read_ours(&bytes);
        compared += 1;
        if ours.result.is_err() || ours.packets.len() != count {
            mismatched.push(format!(
                "{path}: capinfos {count}, ours {} {:?}",
                ours.packets.len(),
                ours.result.err()
            ));
        }
    }
    println!(
        "capinfos: compared {compared} files, {} mismatches",
        mismatched.len()
    );
    assert!(mismatched.is_empty(), "{}", mismatched.join("\n"));
}

/// Rough read throughput over a synthetic trace; run with
/// `cargo test --release -p tapdeck-pcap --test reader throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn throughput() {
    use tapdeck_pcap::{Format, Interface, Packet, SectionInfo};
    let iface = Interface {
        linktype: 1,
        snaplen: 0,
        ..Default::default()
    };
    for format in [Format::Pcapng, Format::Pcap] {
        for size in [64usize, 1514] {
            let mut file = format
                .file_header(std::slice::from_ref(&iface), &SectionInfo::default())
                .unwrap();
            let payload = vec![0x5au8; size];
            let n = (256 << 20) / (size + 32);
            let mut rec = vec![0u8; format.max_record_len(size)];
            for i in 0..n {
                let p = Packet {
                    ts_ns: i as u64 * 1000,
                    iface: 0,
                    orig_len: size as u32,
                    flags: None,
                    data: &payload,
                };
                let k = format.write_record(&p, &mut rec);
                file.extend_from_slice(&rec[..k]);
            }
            let t = std::time::Instant::now();
            let mut r = TraceReader::new(&file[..]).unwrap();
            let mut count = 0usize;
            while let Some(p) = r.next_packet().unwrap() {
                count += p.data.len() / size;
            }
            let s = t.elapsed().as_secs_f64();
            assert_eq!(count, n);
            println!(
                "{format:?} {size} B: {:.1} Mpkt/s, {:.0} MB/s",
                n as f64 / s / 1e6,
                file.len() as f64 / s / 1e6
            );
        }
    }
}
