//! COMPOUND calls and replies exactly as a real client and server sent them: libnfs 5 against
//! nfs-ganesha 4.3 (NFSv4.0) in the rig of `tests/nfs` (`make_capture.py --workload mixed`).
//! Each body is the RPC message body (after the call or reply header) of one TCP record; the
//! frame numbers are those of that capture. Expected values were checked against tshark's
//! decoding of the same frames.

use super::{decode_call, decode_reply};
use crate::{resolve_names, AttrObject, Decoded};

/// Bytes from hex digits; whitespace is ignored, so bodies can be laid out 32 bytes a line.
fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn call(body: &str) -> Decoded {
    let d = decode_call(1, &hex(body));
    assert!(clean(&d), "{d:?}");
    d
}

fn reply(body: &str) -> Decoded {
    let d = decode_reply(1, &hex(body));
    assert!(clean(&d), "{d:?}");
    d
}

fn clean(d: &Decoded) -> bool {
    !d.truncated && d.invalid.is_none() && d.undecoded_op.is_none() && d.unknown_attr_lists == 0
}

fn names(d: &Decoded) -> Vec<&'static str> {
    d.ops.iter().map(|o| o.op_name).collect()
}

fn statuses(d: &Decoded) -> Vec<Option<u32>> {
    d.ops.iter().map(|o| o.status).collect()
}

/// The export's root directory handle as ganesha hands it out (PUTFH arguments below).
const FH_EXPORT: &str = "4300000112449d9f5b4c1603a0e301a1629800efbffddb00";

#[test]
fn setclientid_and_its_confirmation() {
    // Frames 4598/4599: SETCLIENTID (verifier, "Libnfs pid:23814 1795643314", callback
    // program 0 on "tcp" "0.0.0.0.0.0", ident 1).
    let c = call(
        "00000000 00000000 00000001 00000023 065d00008f0cab00 0000001b 4c69626e
         6673207069643a32333831342031373935363433333134 00 00000000 00000003
         74637000 0000000b 302e302e302e302e302e3000 00000001",
    );
    assert_eq!(names(&c), ["SETCLIENTID"]);
    let comp = c.compound.as_ref().unwrap();
    assert_eq!((comp.minorversion, comp.num_ops), (Some(0), 1));
    // clientid 0x6b0757b100000001 and the confirmation verifier.
    let r = reply("00000000 00000000 00000001 00000023 00000000 6b0757b100000001 0100000000000000");
    assert_eq!(statuses(&r), [Some(0)]);
    // Frames 4600/4601: SETCLIENTID_CONFIRM with that clientid and verifier.
    let c = call("00000000 00000000 00000001 00000024 6b0757b100000001 0100000000000000");
    assert_eq!(names(&c), ["SETCLIENTID_CONFIRM"]);
    let r = reply("00000000 00000000 00000001 00000024 00000000");
    assert_eq!(statuses(&r), [Some(0)]);
}

#[test]
fn lookup_from_the_root_with_getattr_and_getfh() {
    // Frames 4602/4603: PUTROOTFH; LOOKUP "export"; GETATTR (type, change, size, fsid,
    // fileid | mode, numlinks, owner, owner_group, space_used, times); GETFH.
    let c = call(
        "00000000 00000000 00000004 00000018 0000000f 00000006 6578706f72740000
         00000009 00000002 00100012 0030a03a 0000000a",
    );
    assert_eq!(names(&c), ["PUTROOTFH", "LOOKUP", "GETATTR", "GETFH"]);
    assert_eq!(c.ops[1].names[0].name, b"export");
    assert_eq!(
        c.ops[1].names[0].dir_fh, None,
        "the root handle is not on the wire"
    );
    let r = reply(
        "00000000 00000000 00000004 00000018 00000000 0000000f 00000000 00000009
         00000000 00000002 00100012 0030a03a 00000058
         00000002 0000000000001000 00000000009861a1 000001ed 00000002 00000001 30000000
         00000001 30000000 0000000000001000 000000006b0757b1 31770627 000000006b0757b1
         31770627 000000006b0757b1 31770627 0000000a 00000000 00000017
         4300000112449d9f5b4c1603a0e301a161980085ad1d6a00",
    );
    assert_eq!(statuses(&r), [Some(0); 4]);
    let a = &r.ops[2].attrs[0];
    assert_eq!(a.object, AttrObject::Object);
    assert_eq!(
        (a.ftype, a.size, a.fileid, a.mode, a.nlink),
        (Some(2), Some(4096), Some(9_986_465), Some(0o755), Some(2))
    );
    assert_eq!((a.uid, a.gid, a.used), (Some(0), Some(0), Some(4096)));
    assert_eq!(a.mtime_ns, Some(0x6b07_57b1 * 1_000_000_000 + 0x3177_0627));
    let fh = hex("4300000112449d9f5b4c1603a0e301a161980085ad1d6a");
    assert_eq!(r.ops[3].fh.as_deref(), Some(&fh[..]));
    assert_eq!(
        r.ops[1].fh.as_deref(),
        Some(&fh[..]),
        "GETFH names LOOKUP's result"
    );
    assert_eq!(
        r.ops[2].fh.as_deref(),
        Some(&fh[..]),
        "and what GETATTR acted on"
    );
    let resolved = resolve_names(&c, &r);
    assert_eq!(resolved[0].fh.as_deref(), Some(&fh[..]));
}

#[test]
fn a_failing_lookup_ends_the_reply() {
    // Frames 6265/6266: PUTROOTFH; LOOKUP export, no, such, dir; GETATTR; GETFH, answered
    // up to LOOKUP "no" with NFS4ERR_NOENT.
    let c = call(
        "00000000 00000000 00000007 00000018 0000000f 00000006 6578706f72740000
         0000000f 00000002 6e6f0000 0000000f 00000004 73756368 0000000f 00000003
         64697200 00000009 00000002 00100012 0030a03a 0000000a",
    );
    let looked_up: Vec<&[u8]> = c.ops[1..5].iter().map(|o| &o.names[0].name[..]).collect();
    assert_eq!(looked_up, [&b"export"[..], b"no", b"such", b"dir"]);
    let r = reply(
        "00000002 00000000 00000003 00000018 00000000 0000000f 00000000 0000000f
         00000002",
    );
    let comp = r.compound.as_ref().unwrap();
    assert_eq!((comp.status, comp.num_ops), (Some(2), 3));
    assert_eq!(statuses(&r), [Some(0), Some(0), Some(2)]);
    let resolved: Vec<Vec<u8>> = resolve_names(&c, &r).into_iter().map(|n| n.name).collect();
    assert_eq!(resolved, [b"export".to_vec(), b"no".to_vec()]);
}

#[test]
fn open_creating_a_file_exclusively() {
    // Frames 4681/4682: PUTFH dir; GETATTR; ACCESS; OPEN seqid 0, share access both, deny
    // none, owner (clientid, "Libnfs pid:23817 1795643314"), OPEN4_CREATE EXCLUSIVE4 with a
    // verifier, CLAIM_NULL "zero.bin"; GETFH.
    let dir = "4300000112449d9f5b4c1603a0e301816298006943e14a00";
    let c = call(&format!(
        "00000000 00000000 00000005 00000016 00000017 {dir}
         00000009 00000002 00100012 0030a03a 00000003 00000004
         00000012 00000000 00000002 00000000 6b0757b100000004 0000001b
         4c69626e6673207069643a32333831372031373935363433333134 00 00000001
         00000002 095d000048f354ff 00000000 00000008 7a65726f2e62696e 0000000a"
    ));
    assert_eq!(names(&c), ["PUTFH", "GETATTR", "ACCESS", "OPEN", "GETFH"]);
    let dir = hex(&dir[..46]);
    let open = &c.ops[3];
    assert_eq!(open.fh.as_deref(), Some(&dir[..]));
    assert_eq!(open.names[0].name, b"zero.bin");
    assert_eq!(open.names[0].dir_fh.as_deref(), Some(&dir[..]));
    assert_eq!(
        c.ops[4].fh, None,
        "after OPEN the current fh is the new file"
    );
    let r = reply(
        "00000000 00000000 00000005 00000016 00000000 00000009 00000000 00000002
         00100012 0030a03a 00000058 00000002 0000000000001000 0000000000986281
         000001ed 00000003 00000001 30000000 00000001 30000000 0000000000001000
         000000006b0757b2 161812e4 000000006b0757b2 161812e4 000000006b0757b2
         161812e4 00000003 00000000 00000004 00000004
         00000012 00000000 00000001 04000000b157076b01000000 00000000 18eb6814a85e86e4
         18eb6814ca0c3c31 00000006 00000002 00000000 00208000 00000000
         0000000a 00000000 00000017 4300000112449d9f5b4c1603a0e30160659800feda48c800",
    );
    assert_eq!(statuses(&r), [Some(0); 5]);
    assert_eq!(r.ops[1].attrs[0].fileid, Some(9_986_689));
    let stateid = hex("00000001 04000000b157076b01000000");
    assert_eq!(
        r.ops[3].stateid.as_ref().map(|s| &s[..]),
        Some(&stateid[..])
    );
    let file = hex("4300000112449d9f5b4c1603a0e30160659800feda48c8");
    assert_eq!(
        r.ops[3].fh.as_deref(),
        Some(&file[..]),
        "GETFH names OPEN's file"
    );
    let resolved = resolve_names(&c, &r);
    assert_eq!(resolved[0].fh.as_deref(), Some(&file[..]));
}

#[test]
fn open_confirm_setattr_write_commit_close_on_the_opened_file() {
    const FILE: &str = "00000017 4300000112449d9f5b4c1603a0e30160659800feda48c800";
    // Frames 4683/4684: PUTFH; OPEN_CONFIRM (stateid seqid 1, seqid 1).
    let c = call(&format!(
        "00000000 00000000 00000002 00000016 {FILE}
         00000014 00000001 04000000b157076b01000000 00000001"
    ));
    assert_eq!(names(&c), ["PUTFH", "OPEN_CONFIRM"]);
    assert_eq!(c.ops[1].stateid.unwrap()[..4], [0, 0, 0, 1]);
    assert_eq!(c.ops[1].fh, c.ops[0].fh);
    let r = reply(
        "00000000 00000000 00000002 00000016 00000000 00000014 00000000
         00000002 04000000b157076b01000000",
    );
    assert_eq!(r.ops[1].stateid.unwrap()[..4], [0, 0, 0, 2]);
    // Frames 4685/4686: PUTFH; SETATTR stateid seqid 2, mode 0660.
    let c = call(&format!(
        "00000000 00000000 00000002 00000016 {FILE}
         00000022 00000002 04000000b157076b01000000 00000002 00000000 00000002
         00000004 000001b0"
    ));
    assert_eq!(names(&c), ["PUTFH", "SETATTR"]);
    assert_eq!(c.ops[1].stateid.unwrap()[..4], [0, 0, 0, 2]);
    let r = reply(
        "00000000 00000000 00000002 00000016 00000000 00000022 00000000 00000002
         00000000 00000002",
    );
    assert_eq!(statuses(&r), [Some(0), Some(0)]);
    // Frames 4711/4712 (another file): PUTFH; COMMIT offset 0 count 0; CLOSE seqid 2.
    let c = call(
        "00000000 00000000 00000003 00000016 00000017
         4300000112449d9f5b4c1603a0e30166659800f36d6b9100 00000005 0000000000000000
         00000000 00000004 00000002 00000002 05000000b157076b01000000",
    );
    assert_eq!(names(&c), ["PUTFH", "COMMIT", "CLOSE"]);
    let commit = c.ops[1].rw.unwrap();
    assert_eq!((commit.offset, commit.count), (Some(0), Some(0)));
    assert_eq!(c.ops[2].stateid.unwrap()[..4], [0, 0, 0, 2]);
    let r = reply(
        "00000000 00000000 00000003 00000016 00000000 00000005 00000000
         b157076b00000000 00000004 00000000 00000003 05000000b157076b01000000",
    );
    assert_eq!(statuses(&r), [Some(0); 3]);
    assert_eq!(r.ops[2].stateid.unwrap()[..4], [0, 0, 0, 3]);
}

#[test]
fn write_and_read_carry_offsets_counts_and_flags() {
    // Frames 4733/4734: PUTFH; WRITE stateid seqid 2, offset 0, UNSTABLE4, 200 bytes (half
    // random, half zeros).
    let c = call(
        "00000000 00000000 00000002 00000016 00000017
         4300000112449d9f5b4c1603a0e30168659800aa400ffc00 00000026
         00000002 06000000b157076b01000000 0000000000000000 00000000 000000c8
         ebb0244f19a160db2fb910adcac21c35707083199bf8041b1081395d70ecd6f5
         16f5547b9203aebf4204d560c1f0ce703a363ad7020bb2f5a3a2e39831da5029
         791cbd61b3faa985c2320bb2f6840cd3f8b972e14941cfe0313e95862a186925
         6dc11e6c00000000000000000000000000000000000000000000000000000000
         0000000000000000000000000000000000000000000000000000000000000000
         0000000000000000000000000000000000000000000000000000000000000000
         0000000000000000",
    );
    let w = c.ops[1].rw.unwrap();
    assert_eq!((w.offset, w.count, w.stable), (Some(0), Some(200), Some(0)));
    assert_eq!(c.ops[1].fh, c.ops[0].fh);
    let r = reply(
        "00000000 00000000 00000002 00000016 00000000 00000026 00000000 000000c8
         00000000 b157076b00000000",
    );
    let w = r.ops[1].rw.unwrap();
    assert_eq!((w.returned, w.committed), (Some(200), Some(0)));
    // Frames 6217/6218: PUTFH; READ stateid seqid 2, offset 0, count 17; 17 bytes and eof.
    let c = call(
        "00000000 00000000 00000002 00000016 00000017
         4300000112449d9f5b4c1603a0e30132639800eed00c6c00 00000019
         00000002 0e000000b157076b01000000 0000000000000000 00000011",
    );
    let rd = c.ops[1].rw.unwrap();
    assert_eq!((rd.offset, rd.count), (Some(0), Some(17)));
    assert_eq!(c.ops[1].stateid.unwrap()[..4], [0, 0, 0, 2]);
    let r = reply(
        "00000000 00000000 00000002 00000016 00000000 00000019 00000000 00000001
         00000011 a63a89321ebc29bc0000000000000000 00000000",
    );
    let rd = r.ops[1].rw.unwrap();
    assert_eq!((rd.returned, rd.eof), (Some(17), Some(true)));
}

#[test]
fn readdir_lists_entries_with_their_attributes() {
    // Frames 4620/4621: PUTFH export; GETATTR; GETFH; READDIR cookie 0, dircount and
    // maxcount 8192, the GETATTR attributes; two entries, eof.
    let c = call(&format!(
        "00000000 00000000 00000004 00000016 00000017 {FH_EXPORT}
         00000009 00000002 00100012 0030a03a 0000000a
         0000001a 0000000000000000 0000000000000000 00002000 00002000
         00000002 00100012 0030a03a"
    ));
    assert_eq!(names(&c), ["PUTFH", "GETATTR", "GETFH", "READDIR"]);
    let r = reply(&format!(
        "00000000 00000000 00000004 00000016 00000000 00000009 00000000 00000002
         00100012 0030a03a 00000058 00000002 0000000000001000 00000000009862a1
         000001ed 00000004 00000001 30000000 00000001 30000000 0000000000001000
         000000006b0757b2 161812e4 000000006b0757b2 161812e4 000000006b0757b2
         161812e4 0000000a 00000000 00000017 {FH_EXPORT}
         0000001a 00000000 0000000000000000
         00000001 6afd3ebdacb48187 00000009 656d7074795f646972000000
         00000002 00100012 0030a03a 00000058 00000002 0000000000001000
         00000000009862e1 000001ed 00000002 00000001 30000000 00000001 30000000
         0000000000001000 000000006b0757b2 161812e4 000000006b0757b2 161812e4
         000000006b0757b2 161812e4
         00000001 7fffffffffffffff 00000001 61000000
         00000002 00100012 0030a03a 00000058 00000002 0000000000001000
         00000000009862b1 000001ed 00000003 00000001 30000000 00000001 30000000
         0000000000001000 000000006b0757b2 161812e4 000000006b0757b2 18f7a353
         000000006b0757b2 18f7a353
         00000000 00000001"
    ));
    let readdir = &r.ops[3];
    let export = hex(&FH_EXPORT[..46]);
    assert_eq!(readdir.fh.as_deref(), Some(&export[..]));
    let entries: Vec<_> = readdir
        .names
        .iter()
        .map(|n| (&n.name[..], n.cookie, n.fileid, n.dir_fh.as_deref()))
        .collect();
    assert_eq!(
        entries,
        [
            (
                &b"empty_dir"[..],
                Some(7_709_387_121_495_409_031),
                Some(9_986_785),
                Some(&export[..])
            ),
            (
                &b"a"[..],
                Some(i64::MAX as u64),
                Some(9_986_737),
                Some(&export[..])
            ),
        ]
    );
    assert_eq!(readdir.attrs[1].object, AttrObject::Entry(1));
    assert_eq!(readdir.attrs[1].nlink, Some(3));
    assert_eq!(readdir.rw.unwrap().eof, Some(true));
}
