//! Every header view of `tapdeck_decode::wire` over arbitrary bytes: the first byte picks
//! the view (and, for an IPv6 extension header, its type), the rest is the buffer. Checks:
//! no accessor panics once `new_checked` succeeded, variable parts (IPv4 options and data,
//! TCP options, extension headers) stay inside the buffer, and an extension chain walk never
//! claims more bytes than it was given. Then `dissect` over the same bytes as Ethernet: a
//! reported fragment's data starts inside the frame, after the network header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapdeck_decode::wire::{
    ipv6, EthernetFrame, ExtensionChain, IcmpPacket, Ipv4Packet, Ipv6ExtHeader, Ipv6FragmentHeader,
    Ipv6Packet, NullHeader, Sll2Header, SllHeader, TcpPacket, UdpPacket, VlanTag,
};
use tapdeck_decode::{dissect, Transport};

const EXT_KINDS: [u8; 6] = [0, 43, 44, 51, 60, 6];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, b)) = data.split_first() else {
        return;
    };
    let len = b.len();
    match sel % 12 {
        0 => {
            if let Ok(v) = EthernetFrame::new_checked(b) {
                let _ = (v.dst_addr(), v.src_addr(), v.ethertype());
                assert_eq!(v.payload().len() + v.header_len(), len);
            }
        }
        1 => {
            if let Ok(v) = VlanTag::new_checked(b) {
                let _ = (v.vlan_id(), v.priority(), v.drop_eligible(), v.ethertype());
                assert_eq!(v.payload().len() + 4, len);
            }
        }
        2 => {
            if let Ok(v) = Ipv4Packet::new_checked(b) {
                let _ = (
                    v.tos(),
                    v.total_len(),
                    v.ident(),
                    v.dont_frag(),
                    v.more_frags(),
                );
                let _ = (v.frag_offset(), v.ttl(), v.protocol(), v.checksum());
                let _ = (v.src_addr(), v.dst_addr());
                match v.check_header_len() {
                    Ok(hl) => {
                        assert!((20..=len).contains(&hl));
                        assert_eq!(v.options().unwrap().len(), hl - 20);
                        if let Ok(p) = v.payload() {
                            assert!(hl + p.len() <= len);
                        }
                    }
                    Err(_) => assert!(v.options().is_err() && v.payload().is_err()),
                }
            }
        }
        3 => {
            if let Ok(v) = Ipv6Packet::new_checked(b) {
                let _ = (
                    v.version(),
                    v.traffic_class(),
                    v.flow_label(),
                    v.hop_limit(),
                );
                let _ = (v.src_addr(), v.dst_addr());
                assert!(v.payload().len() + 40 <= len);
                let chain = ExtensionChain::walk(v.next_header(), &b[40..]);
                assert!(chain.len <= len - 40);
                if let Some(f) = chain.fragment {
                    assert!(f.data_offset <= chain.len);
                }
                if chain.end.is_ok() {
                    assert!(!ipv6::is_extension_header(chain.next_header));
                }
            }
        }
        4 => {
            let kind = EXT_KINDS[usize::from(sel / 12) % EXT_KINDS.len()];
            if let Ok(v) = Ipv6ExtHeader::new_checked(kind, b) {
                assert!(v.header_len() <= len && v.data().len() + 2 == v.header_len());
                let _ = (v.kind(), v.next_header());
            }
            if let Ok(v) = Ipv6FragmentHeader::new_checked(b) {
                let _ = (v.next_header(), v.frag_offset(), v.more_frags(), v.ident());
            }
            let chain = ExtensionChain::walk(kind, b);
            assert!(chain.len <= len);
            if let Some(f) = chain.fragment {
                assert!(f.data_offset <= len);
            }
        }
        5 => {
            if let Ok(v) = TcpPacket::new_checked(b) {
                let _ = (v.src_port(), v.dst_port(), v.seq_number(), v.ack_number());
                let _ = (v.flags(), v.window_len(), v.checksum(), v.urgent_at());
                assert_eq!(v.options().len() + 20 + v.payload().len(), len);
            }
        }
        6 => {
            if let Ok(v) = UdpPacket::new_checked(b) {
                let _ = (
                    v.src_port(),
                    v.dst_port(),
                    v.len(),
                    v.is_empty(),
                    v.checksum(),
                );
                assert!(v.payload().len() + 8 <= len);
            }
        }
        7 => {
            if let Ok(v) = IcmpPacket::new_checked(b) {
                let _ = (v.msg_type(), v.code(), v.checksum(), v.rest_of_header());
                assert_eq!(v.body().len() + 8, len);
            }
        }
        8 => {
            if let Ok(v) = SllHeader::new_checked(b) {
                let _ = (
                    v.packet_type(),
                    v.hardware_type(),
                    v.address_len(),
                    v.address(),
                );
                assert_eq!(v.payload().len() + 16, len);
                let _ = v.protocol();
            }
        }
        9 => {
            if let Ok(v) = Sll2Header::new_checked(b) {
                let _ = (
                    v.protocol(),
                    v.reserved(),
                    v.interface_index(),
                    v.hardware_type(),
                );
                let _ = (v.packet_type(), v.address_len(), v.address());
                assert_eq!(v.payload().len() + 20, len);
            }
        }
        10 => {
            if let Ok(v) = NullHeader::new_checked(b) {
                // Garbage fits 16 bits in neither order: then it is no family at all.
                if v.family() > 0xffff {
                    assert_eq!(v.ethertype(), None);
                }
                assert_eq!(v.payload().len() + 4, len);
            }
        }
        _ => {}
    }
    let h = dissect(1, b);
    if let Some(f) = h.fragment {
        let ip = h.ip.expect("a fragment has an IP header");
        assert!(ip.fragment && ip.fragment_offset == f.offset);
        assert!(f.data_offset as usize <= len);
        assert!(f.data_offset > h.network_offset);
        if f.offset != 0 {
            assert_eq!(h.transport, Transport::None);
        }
    }
});
