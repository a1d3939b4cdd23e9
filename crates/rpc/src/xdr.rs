//! A bounds-checked XDR (RFC 4506) reader over a borrowed byte slice.
//!
//! Every read checks the remaining length first and returns [`Error::Truncated`] when the bytes
//! run out, so a decoder can keep what it read before the cut. Lengths taken from the wire are
//! compared with the bytes that remain *before* anything is sliced or allocated.

use crate::Error;

/// A cursor over XDR-encoded bytes. Reads advance the cursor; a failed read leaves it unchanged.
#[derive(Clone, Debug)]
pub struct Xdr<'a> {
    buf: &'a [u8],
    pos: usize,
    padding_cut: bool,
}

/// Rounds an XDR item length up to the next multiple of four.
fn padded(len: usize) -> usize {
    len.saturating_add(3) & !3
}

impl<'a> Xdr<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Xdr {
            buf,
            pos: 0,
            padding_cut: false,
        }
    }

    /// Bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Takes `n` raw bytes without padding.
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if n > self.remaining() {
            return Err(Error::Truncated);
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub fn u32(&mut self) -> Result<u32, Error> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i32(&mut self) -> Result<i32, Error> {
        Ok(self.u32()? as i32)
    }

    pub fn u64(&mut self) -> Result<u64, Error> {
        if self.remaining() < 8 {
            return Err(Error::Truncated);
        }
        let hi = self.u32()? as u64;
        let lo = self.u32()? as u64;
        Ok(hi << 32 | lo)
    }

    pub fn i64(&mut self) -> Result<i64, Error> {
        Ok(self.u64()? as i64)
    }

    /// An XDR bool: only 0 and 1 are valid.
    pub fn bool(&mut self) -> Result<bool, Error> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => {
                self.pos -= 4;
                Err(Error::Invalid("bool other than 0 or 1"))
            }
        }
    }

    /// Fixed-length opaque: `n` bytes plus padding to four. When the bytes are all there but the
    /// buffer ends inside the padding (a capture cut just there), the bytes are returned and
    /// [`Xdr::padding_cut`] reports the cut.
    pub fn fixed(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let total = padded(n);
        if n > self.remaining() {
            return Err(Error::Truncated);
        }
        let out = &self.buf[self.pos..self.pos + n];
        if total > self.remaining() {
            self.padding_cut = true;
            self.pos = self.buf.len();
        } else {
            self.pos += total;
        }
        Ok(out)
    }

    /// True when the buffer ended inside an item's padding: the message was cut.
    pub fn padding_cut(&self) -> bool {
        self.padding_cut
    }

    /// A variable-length opaque's length and whatever of its bytes are present (all of them
    /// unless the buffer ends first, which sets `cut`): lets a decoder use a cut list's start.
    pub fn opaque_prefix(&mut self) -> Result<(&'a [u8], bool), Error> {
        let len = self.u32()? as usize;
        if len <= self.remaining() {
            return Ok((self.fixed(len)?, false));
        }
        let out = self.rest();
        self.pos = self.buf.len();
        Ok((out, true))
    }

    /// Variable-length opaque with an upper bound `max` (the protocol's `opaque<max>`).
    /// A length above `max` is invalid; one above the remaining bytes is truncation.
    pub fn opaque(&mut self, max: usize) -> Result<&'a [u8], Error> {
        let start = self.pos;
        let len = self.u32()? as usize;
        if len > max {
            self.pos = start;
            return Err(Error::Invalid("opaque longer than its protocol maximum"));
        }
        self.fixed(len).inspect_err(|_| self.pos = start)
    }

    /// An XDR string: an opaque whose bytes are not checked for UTF-8 (names on the wire are bytes).
    pub fn string(&mut self, max: usize) -> Result<&'a [u8], Error> {
        self.opaque(max)
    }

    /// Skips `n` bytes plus padding.
    pub fn skip(&mut self, n: usize) -> Result<(), Error> {
        self.fixed(n).map(|_| ())
    }

    /// Reads an array count and checks that `count` items of at least `min_item` bytes each can fit:
    /// this bounds loops and allocations by the input's length.
    pub fn count(&mut self, min_item: usize) -> Result<u32, Error> {
        let n = self.u32()?;
        if (n as usize).saturating_mul(min_item.max(1)) > self.remaining() {
            // Not enough bytes for the items: a cut message looks the same as a lying count.
            return Err(Error::Truncated);
        }
        Ok(n)
    }
}

/// XDR's unbounded `opaque<>` / `string<>`: the rest of the message is the bound.
pub const UNBOUNDED: usize = usize::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_scalars_big_endian() {
        let b = [
            0, 0, 0, 7, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 1,
        ];
        let mut x = Xdr::new(&b);
        assert_eq!(x.u32(), Ok(7));
        assert_eq!(x.i32(), Ok(-2));
        assert_eq!(x.u64(), Ok(1 << 32 | 2));
        assert_eq!(x.bool(), Ok(true));
        assert!(x.is_empty());
        assert_eq!(x.u32(), Err(Error::Truncated));
    }

    #[test]
    fn opaque_is_padded_and_bounded() {
        let b = [0, 0, 0, 3, b'a', b'b', b'c', 0, 0, 0, 0, 9];
        let mut x = Xdr::new(&b);
        assert_eq!(x.opaque(8), Ok(&b"abc"[..]));
        assert_eq!(x.position(), 8);
        assert_eq!(x.u32(), Ok(9));
        let mut x = Xdr::new(&b);
        assert_eq!(
            x.opaque(2),
            Err(Error::Invalid("opaque longer than its protocol maximum"))
        );
        assert_eq!(x.position(), 0, "a failed read does not move the cursor");
    }

    #[test]
    fn lengths_beyond_the_buffer_are_truncation_not_panics() {
        let b = [0xff, 0xff, 0xff, 0xff, 1, 2];
        let mut x = Xdr::new(&b);
        assert_eq!(x.opaque(UNBOUNDED), Err(Error::Truncated));
        assert_eq!(x.u64(), Err(Error::Truncated));
        assert_eq!(x.count(4), Err(Error::Truncated));
        // Padding: 3 bytes of data need 4 on the wire; a cut in the padding keeps the data.
        let b = [0, 0, 0, 3, b'a', b'b', b'c'];
        let mut x = Xdr::new(&b);
        assert!(!x.padding_cut());
        assert_eq!(x.opaque(10), Ok(&b"abc"[..]));
        assert!(x.padding_cut() && x.is_empty());
        assert_eq!(Xdr::new(&b[..6]).opaque(10), Err(Error::Truncated));
        let mut x = Xdr::new(&b[..6]);
        assert_eq!(x.opaque_prefix(), Ok((&b"ab"[..], true)));
        assert_eq!(
            Xdr::new(&[0, 0, 0, 2]).bool(),
            Err(Error::Invalid("bool other than 0 or 1"))
        );
    }
}
