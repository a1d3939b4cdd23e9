//! RPC header parsing and every body decoder, on arbitrary bytes: must never panic, and the
//! number of records must stay bounded by the input's length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapdeck_rpc::{decode, decode_message, parse_message, CallInfo, Direction};

const PROGRAMS: [(u32, u32); 12] = [
    (100003, 3),
    (100003, 4),
    (100005, 1),
    (100005, 2),
    (100005, 3),
    (100003, 2),
    (100021, 4),
    (100021, 1),
    (100021, 3),
    (100024, 1),
    (100227, 2),
    (100227, 3),
];

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = parse_message(data) {
        let own = msg.call().map(|c| c.info());
        let _ = decode_message(&msg, own);
        for (i, &(prog, vers)) in PROGRAMS.iter().enumerate() {
            let info = CallInfo { prog, vers, proc_: (msg.xid % 24) ^ i as u32, gss_wrapped: false };
            let _ = decode_message(&msg, Some(info));
        }
    }
    // Program, version and procedure from the first two bytes; the rest is the body.
    if let [sel, proc_byte, body @ ..] = data {
        let (prog, vers) = PROGRAMS[*sel as usize % PROGRAMS.len()];
        // NFSv4 has only NULL and COMPOUND: mostly pick COMPOUND there.
        let proc_ = if (prog, vers) == (100003, 4) { (*proc_byte % 3).min(1) as u32 } else { *proc_byte as u32 % 24 };
        for dir in [Direction::Call, Direction::Reply] {
            let d = decode(prog, vers, proc_, dir, body);
            assert!(d.ops.len() <= body.len() / 4 + 1, "more ops than the body can hold");
            let names: usize = d.ops.iter().map(|o| o.names.len()).sum();
            assert!(names <= body.len() / 4 + 1, "more names than the body can hold");
            // NLM/NSM/NFS_ACL: what a record holds came from the body.
            if let Some(r) = &d.nlm {
                let held = [&r.cookie, &r.caller_name, &r.fh, &r.oh].iter().filter_map(|b| b.as_ref()).map(Vec::len).sum::<usize>();
                assert!(held <= body.len(), "NLM fields longer than the body");
            }
            if let Some(a) = &d.acl {
                assert!(a.attrs.len() <= 1 && a.fh.as_ref().is_none_or(|f| f.len() <= body.len()));
            }
        }
    }
});
