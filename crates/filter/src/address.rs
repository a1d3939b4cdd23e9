//! Addresses as the index compares them: under a mask (libpcap's `net`), and as the
//! Bloom filter hashes them.

/// Addresses compared under a mask (libpcap's `(field & mask) == addr`).
pub(crate) trait Masked: Copy + Ord {
    const ZERO: Self;
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn not(self) -> Self;
    /// Ones then zeros (a CIDR prefix).
    fn is_prefix(self) -> bool;
}

macro_rules! masked {
    ($t:ty) => {
        impl Masked for $t {
            const ZERO: Self = 0;
            fn and(self, o: Self) -> Self {
                self & o
            }
            fn or(self, o: Self) -> Self {
                self | o
            }
            fn not(self) -> Self {
                !self
            }
            fn is_prefix(self) -> bool {
                self.leading_ones() + self.trailing_zeros() == <$t>::BITS
            }
        }
    };
}
masked!(u32);
masked!(u128);

/// An address as the filter hashes it.
pub(crate) trait BloomKey: Masked {
    /// The address's network-order bytes, written into `buf`; the slice of them.
    fn key(self, buf: &mut [u8; 16]) -> &[u8];
}

impl BloomKey for u32 {
    fn key(self, buf: &mut [u8; 16]) -> &[u8] {
        buf[..4].copy_from_slice(&self.to_be_bytes());
        &buf[..4]
    }
}

impl BloomKey for u128 {
    fn key(self, buf: &mut [u8; 16]) -> &[u8] {
        *buf = self.to_be_bytes();
        &buf[..]
    }
}
