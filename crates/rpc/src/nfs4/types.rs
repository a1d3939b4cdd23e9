//! The XDR types that several NFSv4 operations share (RFC 7530 section 2, RFC 8881 section 3),
//! read or skipped, and the small helpers that fill an [`NfsOp`] from them.

use super::Walk;
use crate::xdr::{Xdr, UNBOUNDED};
use crate::{time_ns, Error, NameEntry, NameRole, NfsOp, ReadWrite};

pub(super) const NFS4_FHSIZE: usize = 128;

/// nfs_fh4.
pub(super) fn fh4(x: &mut Xdr<'_>) -> Result<Vec<u8>, Error> {
    Ok(x.opaque(NFS4_FHSIZE)?.to_vec())
}

/// component4 (a UTF-8 string on the wire, kept as bytes).
pub(super) fn component(x: &mut Xdr<'_>) -> Result<Vec<u8>, Error> {
    Ok(x.string(UNBOUNDED)?.to_vec())
}

/// stateid4: seqid and 12 opaque bytes, kept whole.
pub(super) fn stateid(x: &mut Xdr<'_>) -> Result<[u8; 16], Error> {
    let b = x.fixed(16)?;
    let mut s = [0; 16];
    s.copy_from_slice(b);
    Ok(s)
}

/// A bitmap4 as its raw words (big-endian u32s).
pub(super) fn bitmap<'a>(x: &mut Xdr<'a>) -> Result<&'a [u8], Error> {
    let n = x.count(4)? as usize;
    x.fixed(n * 4)
}

pub(super) fn skip_bitmap(x: &mut Xdr<'_>) -> Result<(), Error> {
    bitmap(x).map(|_| ())
}

/// fattr4 whose attributes are not reported (arguments: CREATE, SETATTR, VERIFY, ...).
pub(super) fn skip_fattr4(x: &mut Xdr<'_>) -> Result<(), Error> {
    bitmap(x)?;
    x.opaque(UNBOUNDED).map(|_| ())
}

/// nfstime4 in nanoseconds since the epoch (None beyond an i64).
pub(super) fn nfstime4(x: &mut Xdr<'_>) -> Result<Option<i64>, Error> {
    let sec = x.i64()?;
    let nsec = x.u32()?;
    Ok(time_ns(sec, nsec))
}

pub(super) fn skip_u32s(x: &mut Xdr<'_>, n: usize) -> Result<(), Error> {
    x.skip(4 * n)
}

/// An array whose items (at least `min_item` bytes each) `item` skips.
pub(super) fn skip_array(
    x: &mut Xdr<'_>,
    min_item: usize,
    mut item: impl FnMut(&mut Xdr<'_>) -> Result<(), Error>,
) -> Result<(), Error> {
    let n = x.count(min_item)?;
    for _ in 0..n {
        item(x)?;
    }
    Ok(())
}

pub(super) fn skip_u32(x: &mut Xdr<'_>) -> Result<(), Error> {
    x.u32().map(|_| ())
}

pub(super) fn skip_opaque(x: &mut Xdr<'_>) -> Result<(), Error> {
    x.opaque(UNBOUNDED).map(|_| ())
}

/// change_info4: atomic, before, after.
pub(super) fn change_info(x: &mut Xdr<'_>) -> Result<(), Error> {
    x.bool()?;
    x.skip(16)
}

/// nfsace4: type, flag, access_mask, who.
pub(super) fn nfsace4(x: &mut Xdr<'_>) -> Result<(), Error> {
    skip_u32s(x, 3)?;
    skip_opaque(x)
}

/// open_delegation4 (OPEN, WANT_DELEGATION results).
pub(super) fn open_delegation(x: &mut Xdr<'_>) -> Result<(), Error> {
    match x.u32()? {
        0 => Ok(()), // OPEN_DELEGATE_NONE
        1 => {
            // OPEN_DELEGATE_READ: stateid, recall, permissions
            x.skip(16)?;
            x.bool()?;
            nfsace4(x)
        }
        2 => {
            // OPEN_DELEGATE_WRITE: stateid, recall, space_limit, permissions
            x.skip(16)?;
            x.bool()?;
            match x.u32()? {
                1 => x.skip(8)?,
                2 => skip_u32s(x, 2)?,
                _ => return Err(Error::Invalid("limit_by4 out of range")),
            }
            nfsace4(x)
        }
        // OPEN_DELEGATE_NONE_EXT: why_no_delegation4, with a bool for two of the reasons
        3 => match x.u32()? {
            1 | 2 => x.bool().map(|_| ()),
            _ => Ok(()),
        },
        _ => Err(Error::Invalid("open_delegation_type4 out of range")),
    }
}

/// LOCK4denied: offset, length, locktype, owner.
pub(super) fn lock_denied(x: &mut Xdr<'_>) -> Result<(), Error> {
    x.skip(16)?;
    x.u32()?;
    x.u64()?;
    skip_opaque(x)
}

/// SECINFO4resok: flavours, RPCSEC_GSS ones with their triple.
pub(super) fn secinfo4(x: &mut Xdr<'_>) -> Result<(), Error> {
    skip_array(x, 4, |x| {
        if x.u32()? == 6 {
            skip_opaque(x)?;
            skip_u32s(x, 2)?;
        }
        Ok(())
    })
}

/// callback_sec_parms4<>: false when a flavour has no known encoding.
pub(super) fn callback_sec_parms(x: &mut Xdr<'_>) -> Walk {
    let n = x.count(4)?;
    for _ in 0..n {
        match x.u32()? {
            0 => {} // AUTH_NONE
            1 => {
                // AUTH_SYS: authsys_parms
                x.u32()?;
                x.string(255)?;
                skip_u32s(x, 2)?;
                skip_array(x, 4, skip_u32)?;
            }
            6 => {
                // RPCSEC_GSS: gss_cb_handles4
                x.u32()?;
                skip_opaque(x)?;
                skip_opaque(x)?;
            }
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// channel_attrs4.
pub(super) fn channel_attrs(x: &mut Xdr<'_>) -> Result<(), Error> {
    skip_u32s(x, 6)?;
    skip_array(x, 4, skip_u32)
}

/// state_protect_ops4: must-enforce and must-allow bitmaps.
pub(super) fn state_protect_ops(x: &mut Xdr<'_>) -> Result<(), Error> {
    bitmap(x)?;
    skip_bitmap(x)
}

/// nfs_impl_id4<1>: domain, name, date.
pub(super) fn impl_id(x: &mut Xdr<'_>) -> Result<(), Error> {
    skip_array(x, 20, |x| {
        skip_opaque(x)?;
        skip_opaque(x)?;
        x.skip(12)
    })
}

/// The op's READ/WRITE details, created on first use.
pub(super) fn rw(op: &mut NfsOp) -> &mut ReadWrite {
    op.rw.get_or_insert_with(ReadWrite::default)
}

/// Adds a name the op acts on in directory `dir`.
pub(super) fn name_under(op: &mut NfsOp, dir: &Option<Vec<u8>>, role: NameRole, name: Vec<u8>) {
    op.names.push(NameEntry {
        role,
        dir_fh: dir.clone(),
        name,
        ..Default::default()
    });
}
