//! A TPACKET_V3 receive ring: blocks the kernel fills with packets and hands to user space
//! by flipping a status word, and that we hand back the same way as soon as they are read.
//!
//! Layouts are linux/if_packet.h's, taken from the `libc` crate (`tpacket_block_desc`,
//! `tpacket_hdr_v1`, `tpacket3_hdr`); fields are read at their `offset_of!` positions from a
//! bounds-checked byte slice, so a malformed block can stop the walk but never read outside
//! the ring.

use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Offsets inside a block descriptor. `hdr` is a union whose only member is `bh1`, at
/// offset 0 of it.
const BLOCK_STATUS: usize =
    offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, block_status);
const NUM_PKTS: usize =
    offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, num_pkts);
const FIRST_PKT: usize = offset_of!(libc::tpacket_block_desc, hdr)
    + offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt);

/// Offsets inside a packet header.
mod pkt {
    use super::*;
    pub const NEXT: usize = offset_of!(libc::tpacket3_hdr, tp_next_offset);
    pub const SEC: usize = offset_of!(libc::tpacket3_hdr, tp_sec);
    pub const NSEC: usize = offset_of!(libc::tpacket3_hdr, tp_nsec);
    pub const SNAPLEN: usize = offset_of!(libc::tpacket3_hdr, tp_snaplen);
    pub const LEN: usize = offset_of!(libc::tpacket3_hdr, tp_len);
    pub const STATUS: usize = offset_of!(libc::tpacket3_hdr, tp_status);
    pub const MAC: usize = offset_of!(libc::tpacket3_hdr, tp_mac);
    pub const VLAN_TCI: usize =
        offset_of!(libc::tpacket3_hdr, hv1) + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tci);
    pub const VLAN_TPID: usize =
        offset_of!(libc::tpacket3_hdr, hv1) + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tpid);
    /// The header plus the `sockaddr_ll` the kernel writes after it; packet data starts
    /// beyond this.
    pub const HDRLEN: usize = libc::TPACKET3_HDRLEN;
    pub const HEADER: usize = size_of::<libc::tpacket3_hdr>();
    /// `sll_pkttype` of the `sockaddr_ll`, which ends where `HDRLEN` does.
    pub const PKTTYPE: usize =
        HDRLEN - size_of::<libc::sockaddr_ll>() + offset_of!(libc::sockaddr_ll, sll_pkttype);
}

/// Bytes the kernel leaves free before each frame (`PACKET_RESERVE`), so a VLAN tag the
/// driver stripped can be put back in place, as libpcap does.
pub const VLAN_RESERVE: u32 = 4;
const ETH_ADDRS: usize = 12;

/// One packet as the kernel wrote it.
pub struct Frame<'a> {
    pub ts_ns: u64,
    pub orig_len: u32,
    /// `sll_pkttype`: PACKET_HOST, PACKET_OUTGOING and so on (linux/if_packet.h).
    pub pkttype: u8,
    pub data: &'a [u8],
}

pub struct Ring {
    base: *mut u8,
    block_size: usize,
    blocks: usize,
    next: usize,
    snaplen: u32,
}

// SAFETY: the mapping belongs to this ring alone (the socket's other users never see the
// pointer) and every access goes through `&mut self`.
unsafe impl Send for Ring {}

impl Ring {
    /// Maps the ring of `fd`, set up before with `PACKET_RX_RING`.
    pub fn map(
        fd: BorrowedFd<'_>,
        block_size: usize,
        blocks: usize,
        snaplen: u32,
    ) -> io::Result<Ring> {
        let len = block_size * blocks;
        // SAFETY: a fresh shared mapping of the socket's ring; checked for failure below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Ring {
            base: base.cast(),
            block_size,
            blocks,
            next: 0,
            snaplen,
        })
    }

    /// The status word of block `i`, shared with the kernel.
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: the word lies inside the mapping (i < blocks), is 4-byte aligned (blocks
        // are page-aligned, the offset is 8) and lives as long as `self`. The kernel writes
        // it too, which is why it is only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(self.base.add(i * self.block_size + BLOCK_STATUS).cast()) }
    }

    /// Whether the next block is ready for us.
    pub fn ready(&self) -> bool {
        self.status(self.next).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// The packet count the next block says it holds, once the kernel has handed it over.
    pub fn ready_packets(&self) -> Option<u32> {
        if !self.ready() {
            return None;
        }
        // SAFETY: as in `take_block`: the block is ours until it is given back, and this
        // slice does not outlive the call.
        let block = unsafe {
            std::slice::from_raw_parts(self.base.add(self.next * self.block_size), self.block_size)
        };
        u32_at(block, NUM_PKTS)
    }

    /// If the kernel has handed over the next block, passes up to `max` of its packets to
    /// `each` (the rest are skipped), returns the block to the kernel and says how many
    /// packets it held. Returns `None` when the block still belongs to the kernel.
    pub fn take_block(&mut self, max: u64, mut each: impl FnMut(Frame<'_>)) -> Option<u32> {
        if !self.ready() {
            return None;
        }
        let i = self.next;
        // SAFETY: the acquire load in `ready` saw TP_STATUS_USER: the kernel has finished
        // the block and does not touch it until we store TP_STATUS_KERNEL below, after this
        // slice is last used. Nothing else aliases the mapping.
        let block = unsafe {
            std::slice::from_raw_parts_mut(self.base.add(i * self.block_size), self.block_size)
        };
        let packets = walk(block, max, self.snaplen, &mut each);
        self.status(i)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (i + 1) % self.blocks;
        Some(packets)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped; no slice into it outlives `&mut self`.
        unsafe {
            libc::munmap(self.base.cast(), self.block_size * self.blocks);
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// Walks the packets of a block the kernel handed over; returns its packet count.
fn walk(block: &mut [u8], max: u64, snaplen: u32, each: &mut impl FnMut(Frame<'_>)) -> u32 {
    let (Some(count), Some(first)) = (u32_at(block, NUM_PKTS), u32_at(block, FIRST_PKT)) else {
        return 0;
    };
    let mut at = first as usize;
    for n in 0..count {
        if u64::from(n) >= max {
            break;
        }
        let Some(next) = frame(block, at, snaplen, each) else {
            tracing::warn!("a malformed TPACKET_V3 block: skipping its remaining packets");
            break;
        };
        if next == 0 {
            break;
        }
        at += next as usize;
    }
    count
}

/// Delivers the packet whose header is at `at`; returns its `tp_next_offset`.
fn frame(
    block: &mut [u8],
    at: usize,
    snaplen: u32,
    each: &mut impl FnMut(Frame<'_>),
) -> Option<u32> {
    let h = block.get(at..at + pkt::HEADER)?;
    let next = u32_at(h, pkt::NEXT)?;
    let ts_ns = u64::from(u32_at(h, pkt::SEC)?) * 1_000_000_000 + u64::from(u32_at(h, pkt::NSEC)?);
    let caplen = u32_at(h, pkt::SNAPLEN)? as usize;
    let mut orig_len = u32_at(h, pkt::LEN)?;
    let status = u32_at(h, pkt::STATUS)?;
    let pkttype = *block.get(at + pkt::PKTTYPE)?;
    let mut mac = at + usize::from(u16_at(h, pkt::MAC)?);
    let mut end = mac.checked_add(caplen)?;
    if end > block.len() {
        return None;
    }
    // The kernel strips VLAN tags before taps see the frame, keeping the tag beside it;
    // put it back where it was on the wire (the reserved bytes make room for it).
    if status & libc::TP_STATUS_VLAN_VALID != 0
        && caplen >= ETH_ADDRS
        && mac >= at + pkt::HDRLEN + VLAN_RESERVE as usize
    {
        let tci = u32_at(h, pkt::VLAN_TCI)? as u16;
        let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
            u16_at(h, pkt::VLAN_TPID)?
        } else {
            0x8100
        };
        block.copy_within(mac..mac + ETH_ADDRS, mac - 4);
        mac -= 4;
        block[mac + ETH_ADDRS..mac + ETH_ADDRS + 2].copy_from_slice(&tpid.to_be_bytes());
        block[mac + ETH_ADDRS + 2..mac + ETH_ADDRS + 4].copy_from_slice(&tci.to_be_bytes());
        orig_len += 4;
        end = (mac + caplen + 4).min(mac + snaplen as usize);
    }
    each(Frame {
        ts_ns,
        orig_len,
        pkttype,
        data: &block[mac..end],
    });
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One frame as the kernel lays it out: header at `AT`, `sockaddr_ll` after it, data at
    /// `tp_mac`.
    fn frame_with_pkttype(pkttype: u8) -> (u8, Vec<u8>) {
        const AT: usize = 64;
        let mac = pkt::HDRLEN + VLAN_RESERVE as usize;
        let data = [0xab; 20];
        let mut block = vec![0u8; 512];
        let put = |b: &mut [u8], at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        put(&mut block, AT + pkt::SNAPLEN, data.len() as u32);
        put(&mut block, AT + pkt::LEN, 60);
        block[AT + pkt::MAC..AT + pkt::MAC + 2].copy_from_slice(&(mac as u16).to_ne_bytes());
        block[AT + pkt::PKTTYPE] = pkttype;
        block[AT + mac..AT + mac + data.len()].copy_from_slice(&data);
        let mut got = None;
        frame(&mut block, AT, 256, &mut |f: Frame<'_>| {
            got = Some((f.pkttype, f.data.to_vec()));
        })
        .expect("a well-formed frame");
        got.expect("the frame was delivered")
    }

    #[test]
    fn the_packet_type_comes_from_the_sockaddr_ll_after_the_header() {
        assert_eq!(
            pkt::PKTTYPE,
            pkt::HDRLEN - 20 + 10,
            "sockaddr_ll is 20 bytes"
        );
        for t in [0, 1, 2, 3, 4] {
            let (pkttype, data) = frame_with_pkttype(t);
            assert_eq!(pkttype, t);
            assert_eq!(data, [0xab; 20]);
        }
    }
}
