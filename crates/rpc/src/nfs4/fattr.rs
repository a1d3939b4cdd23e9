//! fattr4 (RFC 7530 section 5, RFC 8881 section 5, RFC 7862 section 12, RFC 8276 section 8.2):
//! the attributes we report, read in bitmap order; the others skipped by their encoding.

use super::types::*;
use super::{FhState, Walk};
use crate::xdr::{Xdr, UNBOUNDED};
use crate::{AttrObject, Attrs, Error};

/// Decodes an fattr4 into `out`: the bitmap says which attributes follow, in bit order, each
/// with its own fixed encoding. An attribute without a decoder ends the walk of that list
/// (counted), since its length cannot be known; the list itself has a length, so the message
/// walk goes on. A list cut by the end of the message yields the attributes before the cut.
pub(super) fn fattr4(
    x: &mut Xdr<'_>,
    object: AttrObject,
    st: &mut FhState,
    out: &mut Vec<Attrs>,
) -> Result<(), Error> {
    let words = bitmap(x)?;
    let (list, cut) = x.opaque_prefix()?;
    let mut a = Attrs {
        object,
        ..Default::default()
    };
    let mut y = Xdr::new(list);
    let mut r = Ok(());
    'walk: for (w, word) in words.chunks_exact(4).enumerate() {
        let word = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        for bit in 0..32 {
            if word & (1 << bit) == 0 {
                continue;
            }
            let attr = (w as u32).saturating_mul(32).saturating_add(bit);
            match attribute(attr, &mut y, &mut a) {
                Ok(true) => {}
                Err(Error::Truncated) if cut => {
                    r = Err(Error::Truncated);
                    break 'walk;
                }
                Ok(false) | Err(_) => {
                    st.unknown_attr_lists += 1;
                    break 'walk;
                }
            }
        }
    }
    out.push(a);
    if cut {
        return Err(Error::Truncated);
    }
    r
}

fn number(s: &[u8]) -> Option<u32> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Reads one attribute by number into `a`; false for attributes without a decoder.
fn attribute(attr: u32, y: &mut Xdr<'_>, a: &mut Attrs) -> Walk {
    match attr {
        1 => a.ftype = Some(y.u32()?),
        3 => a.change = Some(y.u64()?),
        4 => a.size = Some(y.u64()?),
        8 => a.fsid = Some((y.u64()?, y.u64()?)),
        19 => a.fh = Some(fh4(y)?),
        20 => a.fileid = Some(y.u64()?),
        33 => a.mode = Some(y.u32()?),
        35 => a.nlink = Some(y.u32()?),
        36 => {
            let s = y.string(UNBOUNDED)?;
            a.uid = number(s);
            a.owner = Some(s.to_vec());
        }
        37 => {
            let s = y.string(UNBOUNDED)?;
            a.gid = number(s);
            a.owner_group = Some(s.to_vec());
        }
        41 => a.rdev = Some((y.u32()?, y.u32()?)),
        45 => a.used = Some(y.u64()?),
        47 => a.atime_ns = nfstime4(y)?,
        52 => a.ctime_ns = nfstime4(y)?,
        53 => a.mtime_ns = nfstime4(y)?,
        // bool and u32 attributes
        2 | 5 | 6 | 7 | 9 | 10 | 11 | 13 | 14 | 15 | 16 | 17 | 18 | 25 | 26 | 28 | 29 | 34 | 46
        | 64 | 65 | 75 | 76 | 78 | 81 => y.skip(4)?,
        // u64 attributes
        21 | 22 | 23 | 27 | 30 | 31 | 38 | 39 | 40 | 42 | 43 | 44 | 55 | 72 | 77 => y.skip(8)?,
        0 | 74 => bitmap(y).map(|_| ())?,
        12 => acl(y)?,
        24 => {
            pathname(y)?;
            skip_array(y, 8, |y| {
                skip_array(y, 4, skip_opaque)?;
                pathname(y)
            })?;
        }
        32 => skip_opaque(y)?,
        48 | 54 => {
            if y.u32()? == 1 {
                y.skip(12)?;
            }
        }
        49 | 50 | 51 | 56 | 57 => y.skip(12)?,
        58 | 59 => {
            y.u32()?;
            acl(y)?;
        }
        60 | 73 | 80 => y.skip(if attr == 60 { 16 } else { 8 })?,
        61 => {
            y.bool()?;
            y.u32()?;
            skip_opaque(y)?;
            skip_opaque(y)?;
            y.skip(4 + 12)?;
        }
        62 => skip_array(y, 4, |y| y.skip(4))?,
        63 => {
            y.u32()?;
            skip_opaque(y)?;
        }
        68 | 70 => {
            y.u64()?;
            skip_array(y, 12, |y| y.skip(12))?;
        }
        69 | 71 => {
            y.bool()?;
            skip_array(y, 8, |y| y.skip(8))?;
        }
        79 => {
            skip_u32s(y, 2)?;
            skip_opaque(y)?;
        }
        _ => return Ok(false), // fs_locations_info, mdsthreshold, and numbers past 4.2
    }
    Ok(true)
}

fn acl(y: &mut Xdr<'_>) -> Result<(), Error> {
    skip_array(y, 16, nfsace4)
}

fn pathname(y: &mut Xdr<'_>) -> Result<(), Error> {
    skip_array(y, 4, skip_opaque)
}
