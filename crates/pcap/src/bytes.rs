//! A bounds-checked cursor over untrusted bytes: every reader in this crate (the pcap and
//! pcapng readers, the container's frame walker, chunk index and seek table) takes its fields
//! through [`Cursor`], so no length from the input is ever used to index a slice by hand.
//!
//! A read that runs past the end is a [`ShortInput`] naming the field and the offset it
//! started at (in the file, when the cursor knows where its bytes came from); it never
//! panics. Sequential reads (`u32`, `bytes`) advance the cursor; positional reads (`u32_at`)
//! read a field of a fixed layout without moving it. A failed read leaves the cursor as it was.

/// Byte order of the multi-byte fields a cursor reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    Little,
    Big,
}

/// The input ended before a field did.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} at byte offset {offset} needs {need} bytes but only {have} remain")]
pub struct ShortInput {
    /// Where the field starts: the cursor's base offset plus its position.
    pub offset: u64,
    /// What was being read, as a user would name it ("chunk index version").
    pub field: &'static str,
    pub need: usize,
    pub have: usize,
}

/// Where a positional read starts: an offset, or a field's byte range from a layout module
/// (`ng_field::EPB_CAPLEN`), whose width must be the width read.
pub trait Place {
    fn start(&self, width: usize) -> usize;
}

impl Place for usize {
    #[inline]
    fn start(&self, _width: usize) -> usize {
        *self
    }
}

impl Place for std::ops::Range<usize> {
    #[inline]
    fn start(&self, width: usize) -> usize {
        debug_assert_eq!(self.len(), width, "field {self:?} read as {width} bytes");
        self.start
    }
}

/// Reads fields from a borrowed byte slice. Cheap to copy; never allocates.
#[derive(Debug, Clone, Copy)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf[0]` in the input as a whole, for errors.
    base: u64,
    order: ByteOrder,
}

impl<'a> Cursor<'a> {
    /// A little-endian cursor over `buf`, whose first byte is at offset 0.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor {
            buf,
            pos: 0,
            base: 0,
            order: ByteOrder::Little,
        }
    }

    /// The same bytes, found at `base` in the input: errors report offsets from there.
    #[inline]
    pub fn based_at(self, base: u64) -> Self {
        Cursor { base, ..self }
    }

    /// The same bytes, read in byte order `order`.
    #[inline]
    pub fn with_order(self, order: ByteOrder) -> Self {
        Cursor { order, ..self }
    }

    /// Bytes read so far (the position in `buf`).
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Offset of the next byte in the input as a whole.
    #[inline]
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The bytes not read yet.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// The `n` bytes at `at` (from the start of the buffer), without moving.
    #[inline]
    pub fn bytes_at(
        &self,
        at: usize,
        n: usize,
        field: &'static str,
    ) -> Result<&'a [u8], ShortInput> {
        at.checked_add(n)
            .and_then(|end| self.buf.get(at..end))
            .ok_or_else(|| ShortInput {
                offset: self.base.saturating_add(at as u64),
                field,
                need: n,
                have: self.buf.len().saturating_sub(at),
            })
    }

    /// The next `n` bytes.
    #[inline]
    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], ShortInput> {
        let b = self.bytes_at(self.pos, n, field)?;
        self.pos += n;
        Ok(b)
    }

    /// Skips `n` bytes.
    #[inline]
    pub fn skip(&mut self, n: usize, field: &'static str) -> Result<(), ShortInput> {
        self.bytes(n, field).map(|_| ())
    }

    /// A cursor over the `n` bytes at `at`, its offsets still those of the whole input.
    #[inline]
    pub fn sub(&self, at: usize, n: usize, field: &'static str) -> Result<Cursor<'a>, ShortInput> {
        let buf = self.bytes_at(at, n, field)?;
        Ok(Cursor {
            buf,
            pos: 0,
            base: self.base + at as u64,
            order: self.order,
        })
    }

    #[inline]
    fn array_at<const N: usize>(
        &self,
        at: impl Place,
        field: &'static str,
    ) -> Result<[u8; N], ShortInput> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes_at(at.start(N), N, field)?);
        Ok(a)
    }

    #[inline]
    pub fn u8_at(&self, at: impl Place, field: &'static str) -> Result<u8, ShortInput> {
        Ok(self.array_at::<1>(at, field)?[0])
    }

    #[inline]
    pub fn u16_at(&self, at: impl Place, field: &'static str) -> Result<u16, ShortInput> {
        let a = self.array_at(at, field)?;
        Ok(match self.order {
            ByteOrder::Little => u16::from_le_bytes(a),
            ByteOrder::Big => u16::from_be_bytes(a),
        })
    }

    #[inline]
    pub fn u32_at(&self, at: impl Place, field: &'static str) -> Result<u32, ShortInput> {
        let a = self.array_at(at, field)?;
        Ok(match self.order {
            ByteOrder::Little => u32::from_le_bytes(a),
            ByteOrder::Big => u32::from_be_bytes(a),
        })
    }

    #[inline]
    pub fn u64_at(&self, at: impl Place, field: &'static str) -> Result<u64, ShortInput> {
        let a = self.array_at(at, field)?;
        Ok(match self.order {
            ByteOrder::Little => u64::from_le_bytes(a),
            ByteOrder::Big => u64::from_be_bytes(a),
        })
    }

    #[inline]
    pub fn u8(&mut self, field: &'static str) -> Result<u8, ShortInput> {
        let v = self.u8_at(self.pos, field)?;
        self.pos += 1;
        Ok(v)
    }

    #[inline]
    pub fn u16(&mut self, field: &'static str) -> Result<u16, ShortInput> {
        let v = self.u16_at(self.pos, field)?;
        self.pos += 2;
        Ok(v)
    }

    #[inline]
    pub fn u32(&mut self, field: &'static str) -> Result<u32, ShortInput> {
        let v = self.u32_at(self.pos, field)?;
        self.pos += 4;
        Ok(v)
    }

    #[inline]
    pub fn u64(&mut self, field: &'static str) -> Result<u64, ShortInput> {
        let v = self.u64_at(self.pos, field)?;
        self.pos += 8;
        Ok(v)
    }
}

/// The readers that report defects as messages (the pcapng block parsers) take the short
/// read's own sentence.
impl From<ShortInput> for String {
    #[inline]
    fn from(e: ShortInput) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_both_byte_orders_and_advances() {
        let b = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
        let mut c = Cursor::new(&b);
        assert_eq!(c.u8("a").unwrap(), 1);
        assert_eq!(c.u16("b").unwrap(), 0x0302);
        assert_eq!(c.u32("c").unwrap(), 0x0706_0504);
        assert_eq!(c.u64("d").unwrap(), 0x0F0E_0D0C_0B0A_0908);
        assert!(c.is_empty());
        let c = Cursor::new(&b).with_order(ByteOrder::Big);
        assert_eq!(c.u16_at(1, "b").unwrap(), 0x0203);
        assert_eq!(c.u32_at(3, "c").unwrap(), 0x0405_0607);
        assert_eq!(c.u64_at(7, "d").unwrap(), 0x0809_0A0B_0C0D_0E0F);
        assert_eq!(c.position(), 0);
    }

    #[test]
    fn short_reads_name_the_field_and_offset_and_leave_the_cursor_alone() {
        let b = [0u8; 6];
        let mut c = Cursor::new(&b).based_at(100);
        c.skip(4, "head").unwrap();
        let e = c.u32("chunk index version").unwrap_err();
        assert_eq!(
            e,
            ShortInput {
                offset: 104,
                field: "chunk index version",
                need: 4,
                have: 2
            }
        );
        assert_eq!(
            e.to_string(),
            "chunk index version at byte offset 104 needs 4 bytes but only 2 remain"
        );
        assert_eq!((c.position(), c.offset(), c.remaining()), (4, 104, 2));
        // Positions and lengths near usize::MAX do not overflow.
        assert!(c.bytes(usize::MAX, "huge").is_err());
        assert!(c.bytes_at(usize::MAX, 2, "far").is_err());
        assert!(c.u64_at(usize::MAX - 3, "far").is_err());
        let sub = c.sub(2, 4, "sub").unwrap();
        assert_eq!((sub.offset(), sub.remaining()), (102, 4));
        assert!(c.sub(4, 3, "sub").is_err());
    }
}
