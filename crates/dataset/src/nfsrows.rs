//! The `nfs_*`, `mount` and `nlm_ops` rows of one decoded RPC message: one function per table family,
//! with a reply's rows completed from its call (the handle a name operation acts on, the
//! offset a READ asked for, the names a LOOKUP sent).

use tapdeck_rpc::{
    resolve_names, AttrObject, CallInfo, Decoded, NameEntry, NameRole, NfsOp, Outcome, ReadWrite,
    PROG_MOUNT, PROG_NFS, PROG_NLM,
};

use crate::anonymize::Anonymizer;
use crate::columns::Hex;
use crate::error::Result;
use crate::nlmrows;
use crate::rpc_sinks::RpcSinks;
use crate::tables::{MountRow, NfsAttrRow, NfsNameRow, NfsOpRow, NfsRwRow, RpcRow};

/// Writes the rows of decoded message `d` whose rpc row is `row`. For a reply, `call` is
/// the decoded call when it was seen in this file (or its warm-up).
pub fn write(
    out: &mut RpcSinks,
    row: &RpcRow,
    info: CallInfo,
    d: &Decoded,
    call: Option<&Decoded>,
    anon: &mut Anonymizer,
) -> Result<()> {
    if info.prog == PROG_MOUNT {
        return mount_row(out, row, d, anon);
    }
    if info.prog == PROG_NLM {
        return nlmrows::write(out, row, d, call, anon);
    }
    if info.prog != PROG_NFS || !matches!(info.vers, 2..=4) || d.outcome != Outcome::Decoded {
        return Ok(());
    }
    let vers = info.vers as i8;
    let minor = d
        .compound
        .as_ref()
        .and_then(|c| c.minorversion)
        .map(|m| m as i8);
    for op in &d.ops {
        let cop = call_op(call, op);
        op_rows(out, row, vers, minor, op, cop)?;
        attr_rows(out, row, vers, op, cop)?;
    }
    name_rows(out, row, vers, names(row, d, call), anon)
}

/// The call's operation that a reply's operation answers.
fn call_op<'a>(call: Option<&'a Decoded>, op: &NfsOp) -> Option<&'a NfsOp> {
    call.and_then(|c| c.ops.iter().find(|o| o.index == op.index && o.op == op.op))
}

fn is_call(row: &RpcRow) -> bool {
    row.direction == "call"
}

fn mount_row(out: &mut RpcSinks, row: &RpcRow, d: &Decoded, anon: &mut Anonymizer) -> Result<()> {
    let Some(m) = &d.mount else {
        return Ok(());
    };
    out.mount.push(MountRow {
        time_ns: row.time_ns,
        file_id: row.file_id,
        record: row.record,
        transaction_id: row.transaction_id,
        direction: row.direction,
        client_addr: row.client_addr,
        server_addr: row.server_addr,
        procedure_name: m.proc_name,
        dirpath: m.dirpath.as_deref().map(|p| anon.path(p)),
        status: m.status.map(|s| s as i32),
        fh: m.fh.clone().map(Hex),
    })
}

/// One `nfs_ops` row, and an `nfs_rw` row for a READ or WRITE.
fn op_rows(
    out: &mut RpcSinks,
    row: &RpcRow,
    vers: i8,
    minor: Option<i8>,
    op: &NfsOp,
    cop: Option<&NfsOp>,
) -> Result<()> {
    // The handle the operation acts on: the call's, or for a reply the call's when known (a
    // v3 reply carries the object, not the directory, for name operations).
    let fh = if is_call(row) {
        op.fh.clone()
    } else {
        cop.and_then(|c| c.fh.clone()).or_else(|| op.fh.clone())
    };
    out.nfs_ops.push(NfsOpRow {
        time_ns: row.time_ns,
        file_id: row.file_id,
        record: row.record,
        transaction_id: row.transaction_id,
        direction: row.direction,
        client_addr: row.client_addr,
        server_addr: row.server_addr,
        nfs_version: vers,
        minor_version: minor,
        op_index: op.index as i16,
        op_num: op.op as i32,
        operation: op.op_name,
        status: op.status.map(|s| s as i32),
        fh: fh.clone().map(Hex),
    })?;
    // An NFSv2 WRITE reply carries no read/write results, yet has its row (see v2_written).
    let v2_write_reply = vers == 2 && op.op_name == "WRITE" && !is_call(row);
    let Some(rw) = op
        .rw
        .or_else(|| v2_write_reply.then(ReadWrite::default))
        .filter(|_| matches!(op.op_name, "READ" | "WRITE"))
    else {
        return Ok(());
    };
    let asked = cop.and_then(|c| c.rw);
    out.nfs_rw.push(NfsRwRow {
        time_ns: row.time_ns,
        file_id: row.file_id,
        record: row.record,
        transaction_id: row.transaction_id,
        direction: row.direction,
        nfs_version: vers,
        op_index: op.index as i16,
        operation: op.op_name,
        fh: fh.map(Hex),
        offset: rw
            .offset
            .or_else(|| asked.and_then(|r| r.offset))
            .map(|v| v as i64),
        count: rw
            .count
            .or_else(|| asked.and_then(|r| r.count))
            .map(i64::from),
        bytes: rw
            .returned
            .or_else(|| v2_written(vers, op, asked))
            .map(i64::from),
        eof: rw.eof,
        stable: rw.stable.or(rw.committed).map(|v| v as i8),
    })
}

/// An NFSv2 WRITE reply says only that the write succeeded: RFC 1094's WRITE writes all of
/// its data or fails, so the bytes written are the bytes the call sent.
fn v2_written(vers: i8, op: &NfsOp, asked: Option<ReadWrite>) -> Option<u32> {
    (vers == 2 && op.op_name == "WRITE" && op.status == Some(0))
        .then(|| asked.and_then(|r| r.count))
        .flatten()
}

/// The table's ftype (v3's numbers): NFSv2 sends its own for the types RFC 1094 did not
/// define (6 socket as v3, 7 NFBAD, 8 fifo).
fn ftype(vers: i8, t: u32) -> Option<i8> {
    match (vers, t) {
        (2, 7) => None,
        (2, 8) => Some(7),
        _ => Some(t as i8),
    }
}

/// One `nfs_attrs` row per set of attributes the operation carries.
fn attr_rows(
    out: &mut RpcSinks,
    row: &RpcRow,
    vers: i8,
    op: &NfsOp,
    cop: Option<&NfsOp>,
) -> Result<()> {
    for a in &op.attrs {
        // The object the attributes describe.
        let fh = match a.object {
            AttrObject::Object if is_call(row) => op.fh.clone(),
            AttrObject::Object => op.fh.clone().or_else(|| cop.and_then(|c| c.fh.clone())),
            AttrObject::Directory | AttrObject::FromDirectory => cop.and_then(|c| c.fh.clone()),
            AttrObject::ToDirectory => cop.and_then(|c| {
                c.names
                    .iter()
                    .find(|n| n.role == NameRole::RenameTo)
                    .and_then(|n| n.dir_fh.clone())
            }),
            AttrObject::Entry(i) => op
                .names
                .get(i as usize)
                .and_then(|n| n.fh.clone())
                .or_else(|| a.fh.clone()),
        };
        let text = |b: &Option<Vec<u8>>| {
            b.as_deref()
                .map(|o| String::from_utf8_lossy(o).into_owned())
        };
        out.nfs_attrs.push(NfsAttrRow {
            time_ns: row.time_ns,
            file_id: row.file_id,
            record: row.record,
            transaction_id: row.transaction_id,
            nfs_version: vers,
            operation: op.op_name,
            fh: fh.map(Hex),
            ftype: a.ftype.and_then(|v| ftype(vers, v)),
            mode: a.mode.map(|v| v as i32),
            nlink: a.nlink.map(i64::from),
            uid: a.uid.map(i64::from),
            gid: a.gid.map(i64::from),
            owner: text(&a.owner),
            owner_group: text(&a.owner_group),
            size: a.size.map(|v| v as i64),
            used: a.used.map(|v| v as i64),
            fileid: a.fileid.map(|v| v as i64),
            atime_ns: a.atime_ns,
            mtime_ns: a.mtime_ns,
            ctime_ns: a.ctime_ns,
        })?;
    }
    Ok(())
}

/// The names of a message with the operation that carries each: a call's as sent; a
/// reply's are the call's with the handles the reply reveals, plus directory entries.
fn names(row: &RpcRow, d: &Decoded, call: Option<&Decoded>) -> Vec<(&'static str, NameEntry)> {
    if is_call(row) {
        return d
            .ops
            .iter()
            .flat_map(|op| op.names.iter().map(move |n| (op.op_name, n.clone())))
            .collect();
    }
    let mut v: Vec<(&'static str, NameEntry)> = Vec::new();
    if let Some(c) = call {
        for n in resolve_names(c, d) {
            let op = c
                .ops
                .iter()
                .find(|o| o.names.iter().any(|x| x.name == n.name))
                .map_or("", |o| o.op_name);
            v.push((op, n));
        }
    }
    for op in &d.ops {
        for n in op.names.iter().filter(|n| n.role == NameRole::DirEntry) {
            let mut n = n.clone();
            if n.dir_fh.is_none() {
                n.dir_fh = call_op(call, op).and_then(|c| c.fh.clone());
            }
            v.push((op.op_name, n));
        }
    }
    v
}

/// One `nfs_names` row per name; a rename's target goes with its source, as
/// `to_dir_fh` / `to_name`.
fn name_rows(
    out: &mut RpcSinks,
    row: &RpcRow,
    vers: i8,
    names: Vec<(&'static str, NameEntry)>,
    anon: &mut Anonymizer,
) -> Result<()> {
    let rename_to = names
        .iter()
        .rev()
        .find(|(_, n)| n.role == NameRole::RenameTo)
        .map(|(_, n)| (n.dir_fh.clone(), n.name.clone()));
    for (op_name, n) in names {
        let (to_dir, to_name) = match n.role {
            NameRole::RenameTo => continue,
            NameRole::RenameFrom => rename_to
                .clone()
                .map_or((None, None), |(d, nm)| (d, Some(nm))),
            _ => (None, None),
        };
        out.nfs_names.push(NfsNameRow {
            time_ns: row.time_ns,
            file_id: row.file_id,
            record: row.record,
            transaction_id: row.transaction_id,
            direction: row.direction,
            nfs_version: vers,
            operation: op_name,
            dir_fh: n.dir_fh.map(Hex),
            name: Some(anon.name(&n.name)),
            fh: n.fh.map(Hex),
            fileid: n.fileid.map(|v| v as i64),
            to_dir_fh: to_dir.map(Hex),
            to_name: to_name.map(|t| anon.name(&t)),
        })?;
    }
    Ok(())
}
