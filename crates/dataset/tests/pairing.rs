//! Call/reply pairing through the whole converter, on small traces built here: a reply pairs
//! only with the call on its own connection and xid that came before it, every message is
//! timed by the packet that completed it, and the rows (ids included) do not depend on how
//! the trace is cut into files or in which order the files are given.

use std::path::{Path, PathBuf};

use arrow_array::{Array, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray};
use tapdeck_dataset::anonymize::Anonymization;
use tapdeck_dataset::convert::{convert, ConvertOptions};

const CLIENT: [u8; 4] = [198, 18, 0, 2];
const SERVER: [u8; 4] = [198, 18, 0, 1];
const NFS: u16 = 2049;
const T0: i64 = 1_795_000_000_000_000_000;

/// One packet of a test trace: time (ns after T0) and the Ethernet frame.
struct Pkt(i64, Vec<u8>);

fn call(xid: u32) -> Vec<u8> {
    // NFSv3 NULL with AUTH_NONE.
    let w = [xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0];
    w.iter().flat_map(|v| v.to_be_bytes()).collect()
}

fn reply(xid: u32) -> Vec<u8> {
    let w = [xid, 1, 0, 0, 0, 0];
    w.iter().flat_map(|v| v.to_be_bytes()).collect()
}

fn marked(msg: &[u8]) -> Vec<u8> {
    let mut v = (0x8000_0000u32 | msg.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(msg);
    v
}

/// An Ethernet/IPv4 frame; `tcp` = Some((seq, ack, flags)) for TCP, None for UDP.
fn frame(
    src: ([u8; 4], u16),
    dst: ([u8; 4], u16),
    tcp: Option<(u32, u32, u8)>,
    payload: &[u8],
) -> Vec<u8> {
    let l4 = if tcp.is_some() { 20 } else { 8 };
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + l4 + payload.len()) as u16;
    f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64]);
    f.push(if tcp.is_some() { 6 } else { 17 });
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.1.to_be_bytes());
    f.extend_from_slice(&dst.1.to_be_bytes());
    match tcp {
        Some((seq, ack, flags)) => {
            f.extend_from_slice(&seq.to_be_bytes());
            f.extend_from_slice(&ack.to_be_bytes());
            f.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        }
        None => {
            f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0]);
        }
    }
    f.extend_from_slice(payload);
    f
}

fn udp(t: i64, port: u16, to_server: bool, msg: Vec<u8>) -> Pkt {
    let (c, s) = ((CLIENT, port), (SERVER, NFS));
    let (a, b) = if to_server { (c, s) } else { (s, c) };
    Pkt(t, frame(a, b, None, &msg))
}

/// A TCP connection's two byte streams; segments are cut from them.
struct Conn {
    port: u16,
    /// Next sequence number per direction (0 = client to server).
    seq: [u32; 2],
}

const ACK: u8 = 0x10;
const PSH: u8 = 0x08;

impl Conn {
    fn new(port: u16) -> Conn {
        Conn {
            port,
            seq: [1000, 5000],
        }
    }

    /// The next `bytes` of one direction, acknowledging the other's stream so far
    /// (`ack = false`: a segment without the ACK flag).
    fn seg(&mut self, t: i64, to_server: bool, bytes: &[u8], ack: bool) -> Pkt {
        let d = usize::from(!to_server);
        let (c, s) = ((CLIENT, self.port), (SERVER, NFS));
        let (a, b) = if to_server { (c, s) } else { (s, c) };
        let flags = PSH | if ack { ACK } else { 0 };
        let p = Pkt(
            t,
            frame(a, b, Some((self.seq[d], self.seq[1 - d], flags)), bytes),
        );
        self.seq[d] = self.seq[d].wrapping_add(bytes.len() as u32);
        p
    }
}

fn write_pcap(path: &Path, pkts: &[Pkt]) {
    let mut b = Vec::new();
    // Classic pcap, nanosecond timestamps.
    b.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&65535u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    for Pkt(t, f) in pkts {
        let ns = T0 + t;
        b.extend_from_slice(&((ns / 1_000_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&((ns % 1_000_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).unwrap();
}

/// An rpc row as these tests look at it: (time after T0, direction, port, xid, matched,
/// retransmit, latency when paired, transaction id).
type Row = (i64, String, i32, i64, bool, bool, Option<i64>, i64);

fn run(inputs: &[PathBuf], out: &Path, shard: Option<(usize, usize)>) {
    let opts = ConvertOptions {
        out: out.to_path_buf(),
        jobs: 2,
        shard,
        anonymization: Anonymization {
            key: None,
            addresses: false,
        },
        packets: false,
        progress: None,
    };
    convert(inputs, &opts, &mut |_| {}).unwrap();
}

fn rpc_rows(ds: &Path) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut files = Vec::new();
    let mut dirs = vec![ds.join("rpc")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.path().is_dir() {
                dirs.push(e.path());
            } else if e.path().extension().is_some_and(|x| x == "parquet") {
                files.push(e.path());
            }
        }
    }
    for f in files {
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(f).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        for b in r {
            let b: RecordBatch = b.unwrap();
            let col = |n: &str| b.column_by_name(n).unwrap().clone();
            let (time, first) = (col("time_ns"), col("first_time_ns"));
            let time = time.as_any().downcast_ref::<Int64Array>().unwrap();
            let first = first.as_any().downcast_ref::<Int64Array>().unwrap();
            let dir = col("direction");
            let dir = dir.as_any().downcast_ref::<StringArray>().unwrap();
            let port = col("client_port");
            let port = port.as_any().downcast_ref::<Int32Array>().unwrap();
            let xid = col("xid");
            let xid = xid.as_any().downcast_ref::<Int64Array>().unwrap();
            let tid = col("transaction_id");
            let tid = tid.as_any().downcast_ref::<Int64Array>().unwrap();
            let (m, re) = (col("matched"), col("retransmit"));
            let m = m.as_any().downcast_ref::<BooleanArray>().unwrap();
            let re = re.as_any().downcast_ref::<BooleanArray>().unwrap();
            for i in 0..b.num_rows() {
                let reply = dir.value(i) == "reply";
                let latency = (reply && m.value(i) && !first.is_null(i))
                    .then(|| time.value(i) - first.value(i));
                rows.push((
                    time.value(i) - T0,
                    dir.value(i).to_string(),
                    port.value(i),
                    xid.value(i),
                    m.value(i),
                    re.value(i),
                    latency,
                    tid.value(i),
                ));
            }
        }
    }
    rows.sort();
    rows
}

fn convert_one(pkts: &[Pkt]) -> Vec<Row> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.pcap");
    write_pcap(&p, pkts);
    run(&[p], &dir.path().join("ds"), None);
    rpc_rows(&dir.path().join("ds"))
}

fn replies(rows: &[Row]) -> Vec<(i64, i32, i64, Option<i64>)> {
    rows.iter()
        .filter(|r| r.1 == "reply")
        .map(|r| (r.0, r.2, r.3, r.6))
        .collect()
}

#[test]
fn the_same_xid_on_two_connections_pairs_within_each() {
    let pkts = vec![
        udp(0, 801, true, call(7)),
        udp(10, 802, true, call(7)),
        udp(20, 802, false, reply(7)),
        udp(30, 801, false, reply(7)),
    ];
    let rows = convert_one(&pkts);
    assert_eq!(
        replies(&rows),
        vec![(20, 802, 7, Some(10)), (30, 801, 7, Some(30))]
    );
    let ids: std::collections::BTreeSet<i64> = rows.iter().map(|r| r.7).collect();
    assert_eq!(ids.len(), 2, "two transactions: {rows:?}");
}

#[test]
fn a_reused_xid_starts_a_new_transaction_and_a_late_duplicate_reply_is_not_paired() {
    let s = 1_000_000_000;
    let pkts = vec![
        udp(0, 801, true, call(5)),
        udp(s, 801, false, reply(5)),
        udp(2 * s, 801, false, reply(5)), // duplicate within a minute: the same transaction
        udp(100 * s, 801, true, call(5)), // the xid again much later (after a wrap)
        udp(100 * s + 7, 801, false, reply(5)),
        udp(170 * s + 7, 801, false, reply(5)), // a minute after the answer: no call left
    ];
    let rows = convert_one(&pkts);
    let r = replies(&rows);
    assert_eq!(r[0], (s, 801, 5, Some(s)));
    assert_eq!(
        r[1],
        (2 * s, 801, 5, Some(2 * s)),
        "duplicate reply: timed to the call"
    );
    assert!(rows.iter().any(|x| x.0 == 2 * s && x.5), "duplicate marked");
    assert_eq!(
        r[2],
        (100 * s + 7, 801, 5, Some(7)),
        "the second call, not the first"
    );
    assert_eq!(r[3], (170 * s + 7, 801, 5, None), "unmatched: {rows:?}");
}

#[test]
fn a_reply_before_its_call_stays_unmatched() {
    let pkts = vec![udp(0, 801, false, reply(9)), udp(10, 801, true, call(9))];
    let rows = convert_one(&pkts);
    assert!(
        rows.iter().all(|r| !r.4),
        "nothing paired forward in time: {rows:?}"
    );
}

#[test]
fn a_retransmitted_call_is_marked_and_the_reply_timed_from_the_first() {
    let pkts = vec![
        udp(0, 801, true, call(3)),
        udp(100, 801, true, call(3)),
        udp(250, 801, false, reply(3)),
    ];
    let rows = convert_one(&pkts);
    let calls: Vec<&Row> = rows.iter().filter(|r| r.1 == "call").collect();
    assert_eq!((calls[0].5, calls[1].5), (false, true));
    assert_eq!(calls[0].7, calls[1].7, "one transaction");
    assert_eq!(replies(&rows), vec![(250, 801, 3, Some(250))]);
}

/// A call in the segment right after a capture gap on its connection (the segment before
/// it reached the server, not the capture), then much later data: the call is timed by its
/// own segment, and its reply pairs with it. `acks`: whether the server's segments carry
/// the ACK flag (without it, the hole is only known lost when the buffer bound forces it).
///
/// The bug this guards (issue 13, a real multi-client trace with 46 capture gaps): bytes
/// behind such a gap waited in the reassembler until 16 MiB of later data forced the hole
/// open, and were then stamped with the time and record of the segment that forced it,
/// seconds later; the reply, processed in time, was paired with a call that seemed to come
/// after it (negative latencies).
fn call_after_a_gap(acks: bool) {
    let mut c = Conn::new(900);
    let mut pkts = vec![
        c.seg(0, true, &marked(&call(1)), true),
        c.seg(10, false, &marked(&reply(1)), acks),
    ];
    let lost = c.seg(20, true, &marked(&call(2)), true);
    drop(lost); // not captured
    pkts.push(c.seg(30, true, &marked(&call(3)), true));
    pkts.push(c.seg(40, false, &marked(&reply(2)), acks));
    pkts.push(c.seg(50, false, &marked(&reply(3)), acks));
    // More than the reassembler buffers behind a hole (16 MiB): 17 calls of 1 MiB.
    for i in 0..17u32 {
        let msg = marked(&[call(10 + i), vec![0u8; 1 << 20]].concat());
        for (j, part) in msg.chunks(60_000).enumerate() {
            pkts.push(c.seg(1000 + i64::from(i) * 100 + j as i64, true, part, true));
        }
        pkts.push(c.seg(
            1099 + i64::from(i) * 100,
            false,
            &marked(&reply(10 + i)),
            acks,
        ));
    }
    let rows = convert_one(&pkts);
    let call3: Vec<&Row> = rows.iter().filter(|r| r.1 == "call" && r.3 == 3).collect();
    assert_eq!(call3.len(), 1);
    assert_eq!(
        call3[0].0, 30,
        "timed by its own segment, acks {acks}: {rows:?}"
    );
    let r = replies(&rows);
    assert!(r.contains(&(50, 900, 3, Some(20))), "acks {acks}: {r:?}");
    assert!(r.contains(&(40, 900, 2, None)), "its call was lost: {r:?}");
    assert!(rows.iter().all(|r| r.6.is_none_or(|l| l >= 0)));
}

#[test]
fn a_call_after_a_capture_gap_is_timed_by_its_segment() {
    call_after_a_gap(true);
    call_after_a_gap(false);
}

/// A trace with TCP messages spanning segments, two connections with the same xids, UDP,
/// a retransmission and a reply a second after its call.
fn mixed_trace() -> Vec<Pkt> {
    let ms = 1_000_000;
    let mut pkts = Vec::new();
    let (mut a, mut b) = (Conn::new(901), Conn::new(902));
    for i in 0..12u32 {
        let t = i64::from(i) * 100 * ms;
        let big = marked(&[call(100 + i), vec![0u8; 3000]].concat());
        let (x, y) = big.split_at(1400);
        pkts.push(a.seg(t, true, x, true));
        pkts.push(b.seg(t + ms, true, &marked(&call(100 + i)), true));
        pkts.push(a.seg(t + 2 * ms, true, y, true));
        pkts.push(udp(t + 3 * ms, 800, true, call(200 + i)));
        pkts.push(b.seg(t + 4 * ms, false, &marked(&reply(100 + i)), true));
        if i % 4 == 0 {
            pkts.push(udp(t + 5 * ms, 800, true, call(200 + i)));
        }
        pkts.push(udp(t + 6 * ms, 800, false, reply(200 + i)));
    }
    // Replies on connection a come late, in one burst.
    let t = 1300 * ms;
    for i in 0..12u32 {
        pkts.push(a.seg(t + i64::from(i), false, &marked(&reply(100 + i)), true));
    }
    pkts.sort_by_key(|p| p.0);
    pkts
}

#[test]
fn rows_do_not_depend_on_cuts_or_file_order() {
    let pkts = mixed_trace();
    let whole = convert_one(&pkts);
    assert_eq!(whole.iter().filter(|r| r.1 == "reply" && r.4).count(), 36);
    let dir = tempfile::tempdir().unwrap();
    // Cuts at every third packet boundary into two files, and into three; file names
    // sort in the reverse of time order.
    let n = pkts.len();
    let mut cases: Vec<Vec<usize>> = (1..n).step_by(3).map(|c| vec![c]).collect();
    cases.extend((1..n - 1).step_by(7).map(|c| vec![c, (c + n) / 2]));
    for (k, cuts) in cases.iter().enumerate() {
        let case = dir.path().join(format!("case{k}"));
        std::fs::create_dir_all(&case).unwrap();
        let mut bounds = vec![0];
        bounds.extend(cuts);
        bounds.push(n);
        let mut paths = Vec::new();
        for (i, w) in bounds.windows(2).enumerate() {
            let p = case.join(format!("part_{}.pcap", (b'z' - i as u8) as char));
            write_pcap(&p, &pkts[w[0]..w[1]]);
            paths.push(p);
        }
        let ds = case.join("ds");
        if k % 2 == 0 {
            run(&paths, &ds, None);
        } else {
            // One file at a time, latest first; then shards.
            for p in paths.iter().rev() {
                run(std::slice::from_ref(p), &ds, None);
            }
            run(&paths, &ds, Some((0, 2)));
            run(&paths, &ds, Some((1, 2)));
        }
        assert_eq!(rpc_rows(&ds), whole, "cut at {cuts:?}");
    }
}
