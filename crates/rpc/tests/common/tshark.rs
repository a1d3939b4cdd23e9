//! tshark as the oracle for RPC/NFS decoding, reusable for any capture (corpus files, hand-made
//! pcaps, traces from a live NFS server).
//!
//! [`compare`] finds RPC messages in a capture (UDP payloads; TCP segments holding one whole
//! record, framed naively since reassembly is not this crate's job), decodes them with this
//! crate, asks tshark for the same fields per frame, and lists every difference.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

use pcap_parser::pcapng::Block;
use pcap_parser::{PcapBlockOwned, PcapError};
use tapdeck_rpc::{
    decode_message, parse_message, Attrs, CallInfo, Decoded, Direction, NameRole, NlmRecord,
    NsmRecord, Outcome, PROG_NFS,
};

/// The fields compared, per frame. Values are lists (a field can occur several times).
pub const FIELDS: &[&str] = &[
    "rpc.xid",
    "rpc.msgtyp",
    "rpc.program",
    "rpc.programversion",
    "rpc.procedure",
    "rpc.auth.flavor",
    "rpc.auth.uid",
    "rpc.auth.gid",
    "rpc.auth.machinename",
    "rpc.replystat",
    "rpc.state_accept",
    "rpc.state_reject",
    "rpc.state_auth",
    "nfs.status3",
    "nfs.nfsstat4",
    "nfs.fhandle",
    "nfs.offset3",
    "nfs.count3",
    "nfs.offset4",
    "nfs.count4",
    "nfs.name",
    "nfs.readdir.entry3.name",
    "nfs.readdir.entry3.fileid",
    "nfs.readdir.entry3.cookie",
    "nfs.readdirplus.entry.name",
    "nfs.readdirplus.entry.fileid",
    "nfs.readdirplus.entry.cookie",
    "nfs.pathname.component",
    "nfs.opcode",
    "nfs.tag",
    "nfs.minorversion",
    "nfs.fattr3.fileid",
    "nfs.fattr3.size",
    "nfs.fattr4.size",
    "nfs.fattr4.fileid",
    "nfs.fattr4_owner",
    "nfs.fattr4.numlinks",
    "nfs.fattr4.space_used",
    "mount.path",
    "mount.status",
    "mount.flavor",
    "mount.dump.hostname",
    "mount.dump.directory",
    "mount.export.directory",
    "mount.export.group",
    "nfs.status2",
    "nfs.read.offset",
    "nfs.read.count",
    "nfs.write.offset",
    "nfs.data",
    "nfs.readdir.count",
    "nfs.readdir.eof",
    "nfs.readdir.entry.name",
    "nfs.readdir.entry.fileid",
    "nfs.readdir.entry.cookie",
    "nfs.ftype",
    "nfs.mode",
    "nfs.fattr.nlink",
    "nfs.fattr.uid",
    "nfs.fattr.gid",
    "nfs.fattr.size",
    "nfs.fattr.blocksize",
    "nfs.fattr.rdev",
    "nfs.fattr.blocks",
    "nfs.fattr.fsid",
    "nfs.fattr.fileid",
    "nfs.atime.sec",
    "nfs.atime.usec",
    "nfs.mtime.sec",
    "nfs.mtime.usec",
    "nfs.ctime.sec",
    "nfs.ctime.usec",
    "nlm.cookie",
    "nlm.block",
    "nlm.exclusive",
    "nlm.reclaim",
    "nlm.state",
    "nlm.lock.caller_name",
    "nlm.lock.owner",
    "nlm.lock.svid",
    "nlm.lock.l_offset",
    "nlm.lock.l_len",
    "nlm.lock.l_offset64",
    "nlm.lock.l_len64",
    "nlm.stat",
    "nlm.test_stat.stat",
    "nlm.sequence",
    "nlm.share.mode",
    "nlm.share.access",
    "nlm.share.name",
    "stat.name",
    "stat.mon_id.name",
    "stat.my_id.hostname",
    "stat.my_id.prog",
    "stat.my_id.vers",
    "stat.my_id.proc",
    "stat.stat_res.res",
    "stat.stat_res.state",
    "stat.state",
    "nfsacl.mask",
    "nfsacl.aclcnt",
    "nfsacl.dfaclcnt",
    "nfs.status",
];

/// Compared on NFS_ACL frames only: tshark's generic NFS status field.
const ACL_FIELDS: &[&str] = &["nfs.status"];

/// Fields compared on NFSv2 frames only (NFSv4 uses some of the names, for attributes this crate
/// does not report). `nfs.data` is compared as its length: the data's byte count.
const V2_FIELDS: &[&str] = &[
    "nfs.read.offset",
    "nfs.read.count",
    "nfs.write.offset",
    "nfs.data",
    "nfs.readdir.count",
    "nfs.readdir.eof",
    "nfs.ftype",
    "nfs.mode",
    "nfs.fattr.nlink",
    "nfs.fattr.uid",
    "nfs.fattr.gid",
    "nfs.fattr.size",
    "nfs.fattr.blocksize",
    "nfs.fattr.rdev",
    "nfs.fattr.blocks",
    "nfs.fattr.fsid",
    "nfs.fattr.fileid",
    "nfs.atime.sec",
    "nfs.atime.usec",
    "nfs.mtime.sec",
    "nfs.mtime.usec",
    "nfs.ctime.sec",
    "nfs.ctime.usec",
];

/// Of those, the attribute fields: in calls they are SETATTR/CREATE/MKDIR/SYMLINK's sattr,
/// which this crate walks past without reporting (no table holds attributes being set).
const V2_ATTR_FIELDS: &[&str] = &[
    "nfs.mode",
    "nfs.fattr.uid",
    "nfs.fattr.gid",
    "nfs.fattr.size",
    "nfs.atime.sec",
    "nfs.atime.usec",
    "nfs.mtime.sec",
    "nfs.mtime.usec",
];

/// Fields compared as sets: tshark lists every occurrence in wire order (file handles of a
/// READDIRPLUS entry, a LOOKUP's directory, ...), this crate reports each once where it belongs.
const SET_FIELDS: &[&str] = &[
    "nfs.fhandle",
    "nfs.name",
    "nfs.pathname.component",
    "nfs.fattr3.fileid",
    "nfs.fattr3.size",
];

const NAME_FIELDS: &[&str] = &["nfs.name", "nfs.pathname.component"];

pub type Fields = BTreeMap<String, Vec<String>>;

/// One RPC message found in a capture.
pub struct Message {
    pub frame: u32,
    pub bytes: Vec<u8>,
}

pub fn available() -> bool {
    Command::new("tshark")
        .arg("-v")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// RPC messages on the given ports: UDP payloads, and TCP payloads that hold exactly one last
/// fragment (record mark stripped). Frames are numbered from 1 as tshark does.
pub fn messages(path: &Path, ports: &[u16]) -> Vec<Message> {
    let file = std::fs::File::open(path).expect("open capture");
    let mut reader = pcap_parser::create_reader(1 << 20, file).expect("pcap reader");
    let mut linktypes = Vec::new();
    let mut out = Vec::new();
    let mut frame = 0u32;
    loop {
        match reader.next() {
            Ok((offset, block)) => {
                let packet = match block {
                    PcapBlockOwned::LegacyHeader(h) => {
                        linktypes = vec![h.network.0];
                        None
                    }
                    PcapBlockOwned::Legacy(b) => Some((
                        linktypes.first().copied().unwrap_or(1),
                        b.data[..(b.caplen as usize).min(b.data.len())].to_vec(),
                    )),
                    PcapBlockOwned::NG(Block::SectionHeader(_)) => {
                        linktypes.clear();
                        None
                    }
                    PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                        linktypes.push(idb.linktype.0);
                        None
                    }
                    PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => Some((
                        linktypes.get(epb.if_id as usize).copied().unwrap_or(1),
                        epb.data[..(epb.caplen as usize).min(epb.data.len())].to_vec(),
                    )),
                    PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                        Some((linktypes.first().copied().unwrap_or(1), spb.data.to_vec()))
                    }
                    PcapBlockOwned::NG(_) => None,
                };
                reader.consume(offset);
                if let Some((linktype, data)) = packet {
                    frame += 1;
                    if let Some(bytes) = rpc_payload(linktype, &data, ports) {
                        out.push(Message { frame, bytes });
                    }
                }
            }
            Err(PcapError::Eof) => break,
            Err(PcapError::Incomplete(_)) => {
                if reader.refill().is_err() {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    out
}

/// Ethernet (with VLAN tags) or raw IP, then IPv4/IPv6, then UDP or TCP on one of `ports`.
fn rpc_payload(linktype: i32, data: &[u8], ports: &[u16]) -> Option<Vec<u8>> {
    let ip = match linktype {
        1 => {
            let mut at = 12;
            let mut ethertype = u16::from_be_bytes(data.get(at..at + 2)?.try_into().ok()?);
            while ethertype == 0x8100 || ethertype == 0x88a8 {
                at += 4;
                ethertype = u16::from_be_bytes(data.get(at..at + 2)?.try_into().ok()?);
            }
            data.get(at + 2..)?
        }
        101 | 12 | 228 | 229 => data,
        _ => return None,
    };
    let (proto, l4) = match ip.first()? >> 4 {
        4 => {
            let ihl = (ip[0] & 0x0f) as usize * 4;
            let total = u16::from_be_bytes(ip.get(2..4)?.try_into().ok()?) as usize;
            let frag = u16::from_be_bytes(ip.get(6..8)?.try_into().ok()?);
            if frag & 0x3fff != 0 {
                return None; // fragments: not this test's business
            }
            (*ip.get(9)?, ip.get(ihl..total.min(ip.len()).max(ihl))?)
        }
        6 => (*ip.get(6)?, ip.get(40..)?),
        _ => return None,
    };
    let port = |at: usize| -> Option<u16> {
        Some(u16::from_be_bytes(l4.get(at..at + 2)?.try_into().ok()?))
    };
    let (sport, dport) = (port(0)?, port(2)?);
    if !ports.contains(&sport) && !ports.contains(&dport) {
        return None;
    }
    match proto {
        17 => Some(l4.get(8..)?.to_vec()),
        6 => {
            let off = (*l4.get(12)? >> 4) as usize * 4;
            let payload = l4.get(off..)?;
            let mark = u32::from_be_bytes(payload.get(..4)?.try_into().ok()?);
            (mark & 0x8000_0000 != 0).then(|| payload[4..].to_vec())
        }
        _ => None,
    }
}

/// tshark's values for `fields`, per frame number. `extra` goes on the command line (e.g.
/// `-d tcp.port==993,rpc`).
pub fn tshark_fields(path: &Path, fields: &[&str], extra: &[&str]) -> BTreeMap<u32, Fields> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-n").arg("-r").arg(path).args(extra).args([
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=\x1f",
    ]);
    cmd.args(["-e", "frame.number"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut frames = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut cols = line.split('\t');
        let Some(Ok(n)) = cols.next().map(str::parse::<u32>) else {
            continue;
        };
        let mut m = Fields::new();
        for (f, v) in fields.iter().zip(cols) {
            if !v.is_empty() {
                m.insert(f.to_string(), v.split('\x1f').map(str::to_string).collect());
            }
        }
        frames.insert(n, m);
    }
    frames
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn put(m: &mut Fields, k: &str, v: impl ToString) {
    m.entry(k.to_string()).or_default().push(v.to_string());
}

/// An NFSv2 fattr as tshark shows it: times as seconds and microseconds, fsid in hex.
fn attrs_fields_v2(m: &mut Fields, a: &Attrs) {
    let num = |m: &mut Fields, k: &str, v: Option<u64>| {
        if let Some(v) = v {
            put(m, k, v);
        }
    };
    num(m, "nfs.ftype", a.ftype.map(u64::from));
    num(m, "nfs.mode", a.mode.map(u64::from));
    num(m, "nfs.fattr.nlink", a.nlink.map(u64::from));
    num(m, "nfs.fattr.uid", a.uid.map(u64::from));
    num(m, "nfs.fattr.gid", a.gid.map(u64::from));
    num(m, "nfs.fattr.size", a.size);
    num(m, "nfs.fattr.blocksize", a.blocksize.map(u64::from));
    num(m, "nfs.fattr.rdev", a.rdev.map(|r| r.0.into()));
    num(m, "nfs.fattr.blocks", a.blocks.map(u64::from));
    if let Some((fsid, _)) = a.fsid {
        put(m, "nfs.fattr.fsid", format!("0x{fsid:08x}"));
    }
    num(m, "nfs.fattr.fileid", a.fileid);
    for (t, k) in [
        (a.atime_ns, "atime"),
        (a.mtime_ns, "mtime"),
        (a.ctime_ns, "ctime"),
    ] {
        if let Some(ns) = t {
            put(m, &format!("nfs.{k}.sec"), ns.div_euclid(1_000_000_000));
            put(
                m,
                &format!("nfs.{k}.usec"),
                ns.rem_euclid(1_000_000_000) / 1_000,
            );
        }
    }
}

fn attrs_fields(m: &mut Fields, a: &Attrs, v4: bool) {
    if v4 {
        if let Some(s) = a.size {
            put(m, "nfs.fattr4.size", s);
        }
        if let Some(f) = a.fileid {
            put(m, "nfs.fattr4.fileid", f);
        }
        if let Some(o) = &a.owner {
            put(m, "nfs.fattr4_owner", String::from_utf8_lossy(o));
        }
        if let Some(n) = a.nlink {
            put(m, "nfs.fattr4.numlinks", n);
        }
        if let Some(u) = a.used {
            put(m, "nfs.fattr4.space_used", u);
        }
    } else {
        if let Some(f) = a.fileid {
            put(m, "nfs.fattr3.fileid", f);
        }
        if let Some(s) = a.size {
            put(m, "nfs.fattr3.size", s);
        }
    }
}

/// An NLM message as tshark shows it: a TEST reply's holder goes into the lock's fields, and
/// v4 ranges into the 64-bit ones.
fn nlm_fields(m: &mut Fields, r: &NlmRecord) {
    let b = |m: &mut Fields, k: &str, v: Option<bool>| {
        v.into_iter().for_each(|v| put(m, k, v as u8));
    };
    let (ko, kl) = if r.vers >= 4 {
        ("nlm.lock.l_offset64", "nlm.lock.l_len64")
    } else {
        ("nlm.lock.l_offset", "nlm.lock.l_len")
    };
    if let Some(c) = &r.cookie {
        put(m, "nlm.cookie", hex(c));
    }
    b(m, "nlm.block", r.block);
    b(m, "nlm.exclusive", r.exclusive);
    if let Some(n) = &r.caller_name {
        // tshark files a share's caller with the locks' and FREE_ALL's host as a share name.
        let k = if r.proc_name == "FREE_ALL" {
            "nlm.share.name"
        } else {
            "nlm.lock.caller_name"
        };
        put(m, k, String::from_utf8_lossy(n));
    }
    if let Some(fh) = &r.fh {
        put(m, "nfs.fhandle", hex(fh));
    }
    if let Some(oh) = &r.oh {
        put(m, "nlm.lock.owner", hex(oh));
    }
    r.svid.into_iter().for_each(|v| put(m, "nlm.lock.svid", v));
    r.offset.into_iter().for_each(|v| put(m, ko, v));
    r.length.into_iter().for_each(|v| put(m, kl, v));
    r.share_mode
        .into_iter()
        .for_each(|v| put(m, "nlm.share.mode", v));
    r.share_access
        .into_iter()
        .for_each(|v| put(m, "nlm.share.access", v));
    b(m, "nlm.reclaim", r.reclaim);
    r.state.into_iter().for_each(|v| put(m, "nlm.state", v));
    if let Some(s) = r.status {
        let k = if matches!(r.proc_name, "TEST" | "TEST_RES") {
            "nlm.test_stat.stat"
        } else {
            "nlm.stat"
        };
        put(m, k, s);
    }
    r.sequence
        .into_iter()
        .for_each(|v| put(m, "nlm.sequence", v));
    if let Some(h) = &r.holder {
        b(m, "nlm.exclusive", h.exclusive);
        h.svid.into_iter().for_each(|v| put(m, "nlm.lock.svid", v));
        if let Some(oh) = &h.oh {
            put(m, "nlm.lock.owner", hex(oh));
        }
        h.offset.into_iter().for_each(|v| put(m, ko, v));
        h.length.into_iter().for_each(|v| put(m, kl, v));
    }
}

/// An NSM message as tshark shows it (it skips a failed result's state).
fn nsm_fields(m: &mut Fields, r: &NsmRecord) {
    if let Some(n) = &r.mon_name {
        let k = if r.proc_name == "STAT" {
            "stat.name"
        } else {
            "stat.mon_id.name"
        };
        put(m, k, String::from_utf8_lossy(n));
    }
    if let Some(n) = &r.my_name {
        put(m, "stat.my_id.hostname", String::from_utf8_lossy(n));
    }
    r.my_prog
        .into_iter()
        .for_each(|v| put(m, "stat.my_id.prog", v));
    r.my_vers
        .into_iter()
        .for_each(|v| put(m, "stat.my_id.vers", v));
    r.my_proc
        .into_iter()
        .for_each(|v| put(m, "stat.my_id.proc", v));
    match (r.result, r.state) {
        (Some(res), state) => {
            put(m, "stat.stat_res.res", res);
            if res == 0 {
                state
                    .into_iter()
                    .for_each(|v| put(m, "stat.stat_res.state", v));
            }
        }
        (None, Some(state)) => put(m, "stat.state", state),
        (None, None) => {}
    }
}

/// The same fields as tshark reports them, from this crate's decoders.
pub fn our_fields(msgs: &[Message]) -> BTreeMap<u32, (Fields, Option<Decoded>)> {
    let mut calls: HashMap<u32, CallInfo> = HashMap::new();
    let mut out = BTreeMap::new();
    for msg in msgs {
        let Ok(rpc) = parse_message(&msg.bytes) else {
            continue;
        };
        let mut m = Fields::new();
        put(&mut m, "rpc.xid", format!("0x{:08x}", rpc.xid));
        let info = match rpc.direction() {
            Direction::Call => {
                let c = rpc.call().unwrap();
                put(&mut m, "rpc.msgtyp", 0);
                put(&mut m, "rpc.auth.flavor", c.cred.flavor);
                put(&mut m, "rpc.auth.flavor", c.verf.flavor);
                if let Some(s) = &c.cred.sys {
                    put(
                        &mut m,
                        "rpc.auth.machinename",
                        String::from_utf8_lossy(s.machine),
                    );
                    put(&mut m, "rpc.auth.uid", s.uid);
                    put(&mut m, "rpc.auth.gid", s.gid);
                    for g in &s.gids {
                        put(&mut m, "rpc.auth.gid", g);
                    }
                }
                calls.insert(rpc.xid, c.info());
                Some(c.info())
            }
            Direction::Reply => {
                let r = rpc.reply().unwrap();
                put(&mut m, "rpc.msgtyp", 1);
                put(&mut m, "rpc.replystat", r.reply_stat);
                if let Some(v) = &r.verf {
                    put(&mut m, "rpc.auth.flavor", v.flavor);
                }
                if let Some(s) = r.accept_stat {
                    put(&mut m, "rpc.state_accept", s);
                }
                if let Some(s) = r.reject_stat {
                    put(&mut m, "rpc.state_reject", s);
                }
                if let Some(s) = r.auth_stat {
                    put(&mut m, "rpc.state_auth", s);
                }
                calls.get(&rpc.xid).copied()
            }
        };
        let Some(info) = info else {
            out.insert(msg.frame, (m, None));
            continue;
        };
        put(&mut m, "rpc.program", info.prog);
        put(&mut m, "rpc.programversion", info.vers);
        put(&mut m, "rpc.procedure", info.proc_);
        let d = decode_message(&rpc, Some(info));
        let v4 = info.prog == PROG_NFS && info.vers == 4;
        let v2 = info.prog == PROG_NFS && info.vers == 2;
        let call = rpc.direction() == Direction::Call;
        if let Some(c) = &d.compound {
            if !c.tag.is_empty() {
                put(&mut m, "nfs.tag", String::from_utf8_lossy(&c.tag));
            }
            if let Some(v) = c.minorversion {
                put(&mut m, "nfs.minorversion", v);
            }
            if let Some(s) = c.status {
                put(&mut m, "nfs.nfsstat4", s);
            }
        }
        for op in &d.ops {
            if v4 {
                put(&mut m, "nfs.opcode", op.op);
            }
            if let Some(s) = op.status {
                let k = match info.vers {
                    2 => "nfs.status2",
                    4 => "nfs.nfsstat4",
                    _ => "nfs.status3",
                };
                put(&mut m, k, s);
            }
            for fh in [&op.fh].into_iter().flatten() {
                put(&mut m, "nfs.fhandle", hex(fh));
            }
            for n in &op.names {
                let name = String::from_utf8_lossy(&n.name);
                let entry = n.role == NameRole::DirEntry;
                // tshark files names under different fields by version and by role.
                let (kname, kid, kcookie) = match (v4, entry, op.op) {
                    (true, false, _) => ("nfs.pathname.component", "", ""),
                    (true, true, _) => ("nfs.name", "", ""),
                    (false, false, _) => ("nfs.name", "", ""),
                    (false, true, _) if v2 => (
                        "nfs.readdir.entry.name",
                        "nfs.readdir.entry.fileid",
                        "nfs.readdir.entry.cookie",
                    ),
                    (false, true, 16) => (
                        "nfs.readdir.entry3.name",
                        "nfs.readdir.entry3.fileid",
                        "nfs.readdir.entry3.cookie",
                    ),
                    (false, true, _) => (
                        "nfs.readdirplus.entry.name",
                        "nfs.readdirplus.entry.fileid",
                        "nfs.readdirplus.entry.cookie",
                    ),
                };
                put(&mut m, kname, name);
                if !kid.is_empty() {
                    n.fileid.into_iter().for_each(|f| put(&mut m, kid, f));
                    n.cookie.into_iter().for_each(|c| put(&mut m, kcookie, c));
                }
                for fh in [&n.dir_fh, &n.fh].into_iter().flatten() {
                    put(&mut m, "nfs.fhandle", hex(fh));
                }
            }
            if let (Some(rw), true) = (op.rw, v2) {
                // tshark's v2 fields are per procedure; the data's length is `nfs.data`'s.
                let (ko, kc) = match (op.op_name, call) {
                    ("READ", true) => ("nfs.read.offset", "nfs.read.count"),
                    ("WRITE", true) => ("nfs.write.offset", "nfs.data"),
                    ("READ", false) => ("", "nfs.data"),
                    _ => ("", "nfs.readdir.count"),
                };
                if let (Some(o), false) = (rw.offset, ko.is_empty()) {
                    put(&mut m, ko, o);
                }
                if let Some(c) = rw.count.or(rw.returned) {
                    let c = c.to_string();
                    let c = if kc == "nfs.data" {
                        format!("len:{c}")
                    } else {
                        c
                    };
                    put(&mut m, kc, c);
                }
                if let Some(e) = rw.eof {
                    put(&mut m, "nfs.readdir.eof", e as u8);
                }
            } else if let Some(rw) = op.rw {
                let (ko, kc) = if v4 {
                    ("nfs.offset4", "nfs.count4")
                } else {
                    ("nfs.offset3", "nfs.count3")
                };
                if let Some(o) = rw.offset {
                    put(&mut m, ko, o);
                }
                // tshark's count4 is READ's requested and WRITE's written count only (the
                // other lengths are data lengths there).
                let count = match (
                    v4,
                    d.compound.as_ref().and_then(|c| c.status).is_some(),
                    op.op,
                ) {
                    (false, _, _) => rw.count.or(rw.returned),
                    (true, false, 25) => rw.count,
                    (true, true, 38) => rw.returned,
                    _ => None,
                };
                if let Some(c) = count {
                    put(&mut m, kc, c);
                }
            }
            for a in &op.attrs {
                if v2 {
                    attrs_fields_v2(&mut m, a);
                } else {
                    attrs_fields(&mut m, a, v4);
                }
            }
        }
        if let Some(r) = &d.nlm {
            nlm_fields(&mut m, r);
        }
        if let Some(r) = &d.nsm {
            nsm_fields(&mut m, r);
        }
        if let Some(r) = &d.acl {
            if let Some(fh) = &r.fh {
                put(&mut m, "nfs.fhandle", hex(fh));
            }
            if let Some(v) = r.mask {
                put(&mut m, "nfsacl.mask", format!("0x{v:08x}"));
            }
            if let Some(v) = r.status {
                put(&mut m, "nfs.status", v);
            }
            r.acl_count
                .into_iter()
                .for_each(|v| put(&mut m, "nfsacl.aclcnt", v));
            r.default_acl_count
                .into_iter()
                .for_each(|v| put(&mut m, "nfsacl.dfaclcnt", v));
            for a in &r.attrs {
                if r.vers == 2 {
                    attrs_fields_v2(&mut m, a);
                } else {
                    attrs_fields(&mut m, a, false);
                }
            }
        }
        if let Some(mnt) = &d.mount {
            if let Some(p) = &mnt.dirpath {
                put(&mut m, "mount.path", String::from_utf8_lossy(p));
            }
            if let Some(s) = mnt.status {
                put(&mut m, "mount.status", s);
            }
            for f in &mnt.auth_flavors {
                put(&mut m, "mount.flavor", f);
            }
            for fh in [&mnt.fh].into_iter().flatten() {
                put(&mut m, "nfs.fhandle", hex(fh));
            }
            for (host, dir) in &mnt.mounts {
                put(&mut m, "mount.dump.hostname", String::from_utf8_lossy(host));
                put(&mut m, "mount.dump.directory", String::from_utf8_lossy(dir));
            }
            for e in &mnt.exports {
                put(
                    &mut m,
                    "mount.export.directory",
                    String::from_utf8_lossy(&e.dir),
                );
                for g in &e.groups {
                    put(&mut m, "mount.export.group", String::from_utf8_lossy(g));
                }
            }
        }
        out.insert(msg.frame, (m, Some(d)));
    }
    out
}

/// tshark prints some fields twice where this crate has one value (rpc.programversion for the
/// call header and again inside NFS); compare the distinct values in order.
fn normalize(field: &str, mut v: Vec<String>) -> Vec<String> {
    if field == "nfs.data" {
        // tshark: the bytes in hex; ours: "len:N" (see our_fields).
        return v
            .into_iter()
            .map(|h| match h.strip_prefix("len:") {
                Some(_) => h,
                None => format!("len:{}", h.replace(':', "").len() / 2),
            })
            .collect();
    }
    if SET_FIELDS.contains(&field) {
        v.sort();
        v.dedup();
    } else if field == "rpc.programversion" {
        v.dedup();
    }
    v
}

#[derive(Debug, Default)]
pub struct Comparison {
    /// Frames where both tshark and this crate saw an RPC message.
    pub frames: usize,
    /// (frame, field) pairs compared with at least one side non-empty.
    pub values: usize,
    pub mismatches: Vec<String>,
    /// Names (and their directory handles) at the cut of a truncated message, which tshark
    /// shows in part and this crate drops.
    pub cut_names: usize,
    /// Frames of programs this crate only names, whose RPC header alone was compared.
    pub header_only: usize,
    /// Frames tshark decoded as RPC that this crate did not find or parse.
    pub missed: Vec<u32>,
}

/// Compares this crate with tshark on every RPC message of the capture at `path`.
pub fn compare(path: &Path, ports: &[u16], extra: &[&str]) -> Comparison {
    let msgs = messages(path, ports);
    let ours = our_fields(&msgs);
    let theirs = tshark_fields(path, FIELDS, extra);
    let mut c = Comparison::default();
    for (frame, t) in &theirs {
        if !t.contains_key("rpc.xid") {
            continue;
        }
        let Some((o, d)) = ours.get(frame) else {
            c.missed.push(*frame);
            continue;
        };
        c.frames += 1;
        // Programs without a body decoder here (NFSv2, NLM, ...): only the RPC header compares.
        let header_only = d
            .as_ref()
            .is_some_and(|d| d.outcome == Outcome::Unsupported);
        c.header_only += header_only as usize;
        let nfs_v2 = t.get("rpc.program").is_some_and(|p| p[0] == "100003")
            && t.get("rpc.programversion")
                .is_some_and(|v| v.iter().all(|v| v == "2"));
        let v2_call = nfs_v2 && t.get("rpc.msgtyp").is_some_and(|v| v[0] == "0");
        let acl = t.get("rpc.program").is_some_and(|p| p[0] == "100227");
        for field in FIELDS
            .iter()
            .filter(|f| !header_only || f.starts_with("rpc."))
            .filter(|f| nfs_v2 || !V2_FIELDS.contains(f))
            .filter(|f| !v2_call || !V2_ATTR_FIELDS.contains(f))
            .filter(|f| acl || !ACL_FIELDS.contains(f))
        {
            let tv = normalize(field, t.get(*field).cloned().unwrap_or_default());
            let ov = normalize(field, o.get(*field).cloned().unwrap_or_default());
            if tv.is_empty() && ov.is_empty() {
                continue;
            }
            c.values += 1;
            // A name cut by the end of a truncated message: tshark shows the part it has, this
            // crate drops it (a partial name would make a false entry in the names table), and
            // with it the directory handle that came just before it.
            let cut = d.as_ref().is_some_and(|d| d.truncated);
            let at_cut = NAME_FIELDS.contains(field) || *field == "nfs.fhandle";
            if cut && at_cut && tv.len() == ov.len() + 1 && ov.iter().all(|v| tv.contains(v)) {
                c.cut_names += 1;
                continue;
            }
            if tv != ov {
                c.mismatches.push(format!(
                    "{}: frame {frame} {field}: tshark {tv:?}, ours {ov:?}",
                    path.display()
                ));
            }
        }
    }
    c
}
