//! Each operation's arguments, one function per operation in opcode order (the order of
//! RFC 7530 section 16, RFC 8881 section 18, RFC 7862 section 15 and RFC 8276 section 8.4).
//!
//! Every function reads exactly its `OPNAME4args` and returns `Ok(true)`, or `Ok(false)` when it
//! cannot know where the arguments end. Along the way it fills the op's fields and moves the
//! current and saved filehandles the way the server will.

use super::types::*;
use super::{FhState, Walk};
use crate::xdr::Xdr;
use crate::{Error, NameEntry, NameRole, NfsOp};

/// The shape every argument decoder has.
pub(super) type Args = fn(&mut Xdr<'_>, &mut NfsOp, &mut FhState) -> Walk;

/// GETFH, READLINK, ILLEGAL: no arguments.
pub(super) fn none(_: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    Ok(true)
}

/// COPY, COPY_NOTIFY, LAYOUTERROR, LAYOUTSTATS, WRITE_SAME: not decoded, so the walk stops.
pub(super) fn not_walked(_: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    Ok(false)
}

/// ACCESS4args: access.
pub(super) fn access(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u32()?;
    Ok(true)
}

/// CLOSE4args: seqid, open_stateid.
pub(super) fn close(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u32()?;
    op.stateid = Some(stateid(x)?);
    Ok(true)
}

/// COMMIT4args: offset, count.
pub(super) fn commit(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    let rw = rw(op);
    rw.offset = Some(x.u64()?);
    rw.count = Some(x.u32()?);
    Ok(true)
}

/// CREATE4args: objtype (with NF4LNK's linkdata or a device's specdata4), objname under the
/// current filehandle, createattrs. The new object becomes the current filehandle.
pub(super) fn create(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Walk {
    match x.u32()? {
        5 => skip_opaque(x)?,
        3 | 4 => x.skip(8)?,
        _ => {}
    }
    let name = component(x)?;
    name_under(op, &st.cur, NameRole::Target, name);
    st.cur = None;
    skip_fattr4(x)?;
    Ok(true)
}

/// DELEGPURGE4args: clientid.
pub(super) fn delegpurge(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u64()?;
    Ok(true)
}

/// DELEGRETURN4args: deleg_stateid.
pub(super) fn delegreturn(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    Ok(true)
}

/// GETATTR4args: attr_request.
pub(super) fn getattr(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    skip_bitmap(x)?;
    Ok(true)
}

/// LINK4args: newname, in the current filehandle's directory, for the saved filehandle's file.
pub(super) fn link(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Walk {
    let name = component(x)?;
    op.names.push(NameEntry {
        role: NameRole::Target,
        dir_fh: st.cur.clone(),
        name,
        fh: st.saved.clone(),
        ..Default::default()
    });
    Ok(true)
}

/// LOCK4args: locktype, reclaim, offset, length, and a locker4: a new lock owner
/// (open_to_lock_owner4) or an existing one (exist_lock_owner4).
pub(super) fn lock(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u32()?;
    x.bool()?;
    x.u64()?;
    x.u64()?;
    if x.bool()? {
        x.u32()?; // open_seqid
        op.stateid = Some(stateid(x)?);
        x.u32()?; // lock_seqid
        x.u64()?; // lock_owner4: clientid, owner
        skip_opaque(x)?;
    } else {
        op.stateid = Some(stateid(x)?);
        x.u32()?; // lock_seqid
    }
    Ok(true)
}

/// LOCKT4args: locktype, offset, length, owner (clientid, owner).
pub(super) fn lockt(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u32()?;
    x.skip(24)?;
    skip_opaque(x)?;
    Ok(true)
}

/// LOCKU4args: locktype, seqid, lock_stateid, offset, length.
pub(super) fn locku(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    skip_u32s(x, 2)?;
    op.stateid = Some(stateid(x)?);
    x.skip(16)?;
    Ok(true)
}

/// LOOKUP4args: objname under the current filehandle, which becomes the object.
pub(super) fn lookup(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Walk {
    let name = component(x)?;
    name_under(op, &st.cur, NameRole::Target, name);
    st.cur = None;
    Ok(true)
}

/// LOOKUPP: no arguments; the parent becomes the current filehandle.
pub(super) fn lookupp(_: &mut Xdr<'_>, _: &mut NfsOp, st: &mut FhState) -> Walk {
    st.cur = None;
    Ok(true)
}

/// NVERIFY4args: obj_attributes.
pub(super) fn nverify(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    skip_fattr4(x)?;
    Ok(true)
}

/// OPEN4args: seqid, share_access, share_deny, owner, openhow, claim. A name claimed under the
/// current filehandle makes the opened file the current filehandle.
pub(super) fn open(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Walk {
    skip_u32s(x, 3)?; // seqid, share_access, share_deny
    x.u64()?; // open_owner4 clientid
    skip_opaque(x)?; // owner
    if x.u32()? == 1 {
        createhow4(x)?; // OPEN4_CREATE
    }
    open_claim4(x, op, st)?;
    Ok(true)
}

/// createhow4: UNCHECKED4 and GUARDED4 carry attributes, EXCLUSIVE4 a verifier,
/// EXCLUSIVE4_1 both.
fn createhow4(x: &mut Xdr<'_>) -> Result<(), Error> {
    match x.u32()? {
        0 | 1 => skip_fattr4(x),
        2 => x.skip(8),
        3 => {
            x.skip(8)?;
            skip_fattr4(x)
        }
        _ => Err(Error::Invalid("createmode4 out of range")),
    }
}

/// open_claim4.
fn open_claim4(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Result<(), Error> {
    match x.u32()? {
        0 | 3 => {
            // CLAIM_NULL, CLAIM_DELEGATE_PREV: a name under the current (directory) handle
            let name = component(x)?;
            name_under(op, &st.cur, NameRole::Target, name);
            st.cur = None;
        }
        1 => x.u32().map(|_| ())?, // CLAIM_PREVIOUS: the current fh is the file
        2 => {
            // CLAIM_DELEGATE_CUR: the delegation's stateid and a name
            op.stateid = Some(stateid(x)?);
            let name = component(x)?;
            name_under(op, &st.cur, NameRole::Target, name);
            st.cur = None;
        }
        4 | 6 => {}                          // CLAIM_FH, CLAIM_DELEG_PREV_FH
        5 => op.stateid = Some(stateid(x)?), // CLAIM_DELEG_CUR_FH
        _ => return Err(Error::Invalid("open_claim_type4 out of range")),
    }
    Ok(())
}

/// OPENATTR4args: createdir; the named attribute directory becomes the current filehandle.
pub(super) fn openattr(x: &mut Xdr<'_>, _: &mut NfsOp, st: &mut FhState) -> Walk {
    x.bool()?;
    st.cur = None;
    Ok(true)
}

/// OPEN_CONFIRM4args: open_stateid, seqid.
pub(super) fn open_confirm(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    x.u32()?;
    Ok(true)
}

/// OPEN_DOWNGRADE4args: open_stateid, seqid, share_access, share_deny.
pub(super) fn open_downgrade(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    skip_u32s(x, 3)?;
    Ok(true)
}

/// PUTFH4args: object, which becomes the current filehandle.
pub(super) fn putfh(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Walk {
    let fh = fh4(x)?;
    op.fh = Some(fh.clone());
    st.cur = Some(fh);
    Ok(true)
}

/// PUTPUBFH: no arguments; the public filehandle (not on the wire) becomes the current one.
pub(super) fn putpubfh(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Walk {
    putrootfh(x, op, st)
}

/// PUTROOTFH: no arguments; the root filehandle (not on the wire) becomes the current one.
pub(super) fn putrootfh(_: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Walk {
    op.fh = None;
    st.cur = None;
    Ok(true)
}

/// READ4args (and READ_PLUS4args): stateid, offset, count.
pub(super) fn read(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    let rw = rw(op);
    rw.offset = Some(x.u64()?);
    rw.count = Some(x.u32()?);
    Ok(true)
}

/// READDIR4args: cookie, cookieverf, dircount, maxcount, attr_request.
pub(super) fn readdir(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u64()?;
    x.skip(8)?;
    skip_u32s(x, 2)?;
    skip_bitmap(x)?;
    Ok(true)
}

/// REMOVE4args: target, in the current filehandle's directory.
pub(super) fn remove(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Walk {
    let name = component(x)?;
    name_under(op, &st.cur, NameRole::Target, name);
    Ok(true)
}

/// RENAME4args: oldname in the saved filehandle's directory, newname in the current one's.
pub(super) fn rename(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Walk {
    let from = component(x)?;
    name_under(op, &st.saved, NameRole::RenameFrom, from);
    let to = component(x)?;
    name_under(op, &st.cur, NameRole::RenameTo, to);
    Ok(true)
}

/// RENEW4args: clientid.
pub(super) fn renew(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u64()?;
    Ok(true)
}

/// RESTOREFH: no arguments; the saved filehandle becomes the current one.
pub(super) fn restorefh(_: &mut Xdr<'_>, _: &mut NfsOp, st: &mut FhState) -> Walk {
    st.cur = st.saved.clone();
    Ok(true)
}

/// SAVEFH: no arguments; the current filehandle is saved.
pub(super) fn savefh(_: &mut Xdr<'_>, _: &mut NfsOp, st: &mut FhState) -> Walk {
    st.saved = st.cur.clone();
    Ok(true)
}

/// SECINFO4args: name. SECINFO consumes the current filehandle.
pub(super) fn secinfo(x: &mut Xdr<'_>, _: &mut NfsOp, st: &mut FhState) -> Walk {
    component(x)?;
    st.cur = None;
    Ok(true)
}

/// SETATTR4args: stateid, obj_attributes.
pub(super) fn setattr(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    skip_fattr4(x)?;
    Ok(true)
}

/// SETCLIENTID4args: client (verifier, id), callback (cb_program, r_netid, r_addr),
/// callback_ident.
pub(super) fn setclientid(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.skip(8)?;
    skip_opaque(x)?;
    x.u32()?;
    skip_opaque(x)?;
    skip_opaque(x)?;
    x.u32()?;
    Ok(true)
}

/// SETCLIENTID_CONFIRM4args: clientid, setclientid_confirm.
pub(super) fn setclientid_confirm(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.skip(16)?;
    Ok(true)
}

/// VERIFY4args: obj_attributes.
pub(super) fn verify(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    skip_fattr4(x)?;
    Ok(true)
}

/// WRITE4args: stateid, offset, stable, data. The data's length comes before it: it is kept
/// even when the data was not captured.
pub(super) fn write(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    let rw = rw(op);
    rw.offset = Some(x.u64()?);
    rw.stable = Some(x.u32()?);
    let len = x.u32()?;
    rw.count = Some(len);
    x.skip(len as usize)?;
    Ok(true)
}

/// RELEASE_LOCKOWNER4args: lock_owner (clientid, owner).
pub(super) fn release_lockowner(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u64()?;
    skip_opaque(x)?;
    Ok(true)
}

/// BACKCHANNEL_CTL4args: cb_program, sec_parms.
pub(super) fn backchannel_ctl(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u32()?;
    callback_sec_parms(x)
}

/// BIND_CONN_TO_SESSION4args: sessid, dir, use_conn_in_rdma_mode.
pub(super) fn bind_conn_to_session(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.skip(16)?;
    x.u32()?;
    x.bool()?;
    Ok(true)
}

/// EXCHANGE_ID4args: clientowner (verifier, ownerid), flags, state_protect, client_impl_id.
pub(super) fn exchange_id(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.skip(8)?;
    skip_opaque(x)?;
    x.u32()?;
    match x.u32()? {
        0 => {}                     // SP4_NONE
        1 => state_protect_ops(x)?, // SP4_MACH_CRED
        2 => {
            // SP4_SSV: ops, hash and encryption algorithms, window, handles
            state_protect_ops(x)?;
            skip_array(x, 4, skip_opaque)?;
            skip_array(x, 4, skip_opaque)?;
            skip_u32s(x, 2)?;
        }
        _ => return Ok(false),
    }
    impl_id(x)?;
    Ok(true)
}

/// CREATE_SESSION4args: clientid, sequence, flags, fore and back channel attributes,
/// cb_program, sec_parms.
pub(super) fn create_session(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u64()?;
    skip_u32s(x, 2)?;
    channel_attrs(x)?;
    channel_attrs(x)?;
    x.u32()?;
    callback_sec_parms(x)
}

/// DESTROY_SESSION4args: sessionid.
pub(super) fn destroy_session(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.skip(16)?;
    Ok(true)
}

/// FREE_STATEID4args: stateid.
pub(super) fn free_stateid(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    Ok(true)
}

/// GET_DIR_DELEGATION4args: signal_deleg_avail, notification_types, child and directory
/// notification delays, child_attributes, dir_attributes.
pub(super) fn get_dir_delegation(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.bool()?;
    bitmap(x)?;
    x.skip(24)?;
    bitmap(x)?;
    bitmap(x)?;
    Ok(true)
}

/// GETDEVICEINFO4args: device_id, layout_type, maxcount, notify_types.
pub(super) fn getdeviceinfo(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.skip(16)?;
    skip_u32s(x, 2)?;
    skip_bitmap(x)?;
    Ok(true)
}

/// GETDEVICELIST4args: layout_type, maxdevices, cookie, cookieverf.
pub(super) fn getdevicelist(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    skip_u32s(x, 2)?;
    x.skip(16)?;
    Ok(true)
}

/// LAYOUTCOMMIT4args: offset, length, reclaim, stateid, last_write_offset (newoffset4),
/// time_modify (newtime4), layoutupdate.
pub(super) fn layoutcommit(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    x.skip(16)?;
    x.bool()?;
    op.stateid = Some(stateid(x)?);
    if x.bool()? {
        x.u64()?;
    }
    if x.bool()? {
        x.skip(12)?;
    }
    x.u32()?;
    skip_opaque(x)?;
    Ok(true)
}

/// LAYOUTGET4args: signal_layout_avail, layout_type, iomode, offset, length, minlength,
/// stateid, maxcount.
pub(super) fn layoutget(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    x.bool()?;
    skip_u32s(x, 2)?;
    x.skip(24)?;
    op.stateid = Some(stateid(x)?);
    x.u32()?;
    Ok(true)
}

/// LAYOUTRETURN4args: reclaim, layout_type, iomode, layoutreturn4 (a file's range, stateid and
/// body; or a whole filesystem or all).
pub(super) fn layoutreturn(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    x.bool()?;
    skip_u32s(x, 2)?;
    match x.u32()? {
        1 => {
            x.skip(16)?;
            op.stateid = Some(stateid(x)?);
            skip_opaque(x)?;
        }
        2 | 3 => {}
        _ => return Ok(false),
    }
    Ok(true)
}

/// SECINFO_NO_NAME4args: style (current filehandle or its parent).
pub(super) fn secinfo_no_name(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u32()?;
    Ok(true)
}

/// SEQUENCE4args: sessionid, sequenceid, slotid, highest_slotid, cachethis.
pub(super) fn sequence(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.skip(16)?;
    skip_u32s(x, 3)?;
    x.bool()?;
    Ok(true)
}

/// SET_SSV4args: ssv, digest.
pub(super) fn set_ssv(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    skip_opaque(x)?;
    skip_opaque(x)?;
    Ok(true)
}

/// TEST_STATEID4args: stateids.
pub(super) fn test_stateid(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    skip_array(x, 16, |x| x.skip(16))?;
    Ok(true)
}

/// WANT_DELEGATION4args: want, claim (deleg_claim4: CLAIM_PREVIOUS's delegation type, or
/// CLAIM_FH / CLAIM_DELEG_PREV_FH without arguments).
pub(super) fn want_delegation(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u32()?;
    match x.u32()? {
        1 => x.u32().map(|_| ())?,
        4 | 6 => {}
        _ => return Ok(false),
    }
    Ok(true)
}

/// DESTROY_CLIENTID4args: clientid.
pub(super) fn destroy_clientid(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u64()?;
    Ok(true)
}

/// RECLAIM_COMPLETE4args: one_fs.
pub(super) fn reclaim_complete(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.bool()?;
    Ok(true)
}

/// ALLOCATE4args (and DEALLOCATE4args): stateid, offset, length.
pub(super) fn allocate(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    let rw = rw(op);
    rw.offset = Some(x.u64()?);
    x.u64()?;
    Ok(true)
}

/// IO_ADVISE4args: stateid, offset, count, hints.
pub(super) fn io_advise(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    x.skip(16)?;
    skip_bitmap(x)?;
    Ok(true)
}

/// OFFLOAD_CANCEL4args: stateid.
pub(super) fn offload_cancel(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    Ok(true)
}

/// OFFLOAD_STATUS4args: stateid.
pub(super) fn offload_status(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    Ok(true)
}

/// SEEK4args: stateid, offset, what.
pub(super) fn seek(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    rw(op).offset = Some(x.u64()?);
    x.u32()?;
    Ok(true)
}

/// CLONE4args: src_stateid, dst_stateid, src_offset, dst_offset, count.
pub(super) fn clone(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState) -> Walk {
    op.stateid = Some(stateid(x)?);
    x.skip(16 + 24)?;
    Ok(true)
}

/// GETXATTR4args (and REMOVEXATTR4args): name.
pub(super) fn getxattr(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    component(x)?;
    Ok(true)
}

/// SETXATTR4args: option, name, value.
pub(super) fn setxattr(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u32()?;
    component(x)?;
    skip_opaque(x)?;
    Ok(true)
}

/// LISTXATTRS4args: cookie, maxcount.
pub(super) fn listxattrs(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState) -> Walk {
    x.u64()?;
    x.u32()?;
    Ok(true)
}
