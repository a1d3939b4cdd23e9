//! The `packets` table: one row per captured packet, from the header views of
//! `tapdeck-decode`.

use tapdeck_decode::flow::FlowKey;
use tapdeck_decode::packet::{dissect, Headers, Transport};

use tapdeck_pcap::{Direction, Packet};

use crate::anonymize::Anonymizer;
use crate::columns::Addr;
use crate::tables::PacketRow;

/// The row for one packet; `h` is its dissection.
pub fn packet_row(
    h: &Headers<'_>,
    p: &Packet<'_>,
    file_id: i32,
    record: i64,
    anon: &mut Anonymizer,
) -> PacketRow {
    let mut row = PacketRow {
        time_ns: p.ts_ns as i64,
        file_id,
        record,
        interface: p.iface as i32,
        direction: p.direction().map(direction_name),
        wire_len: p.orig_len as i32,
        cap_len: p.data.len() as i32,
        vlan: h.vlan.map(i32::from),
        ..Default::default()
    };
    if let Some(ip) = &h.ip {
        row.ip_version = Some(ip.version as i8);
        row.src_addr = Some(Addr(anon.ip(ip.src_addr())));
        row.dst_addr = Some(Addr(anon.ip(ip.dst_addr())));
        row.protocol = Some(i16::from(ip.protocol));
        row.ip_fragment = ip.fragment;
        row.flow_id = FlowKey::from_headers(h).map(|k| k.id() as i64);
    }
    match h.transport {
        Transport::Tcp(t) => {
            row.src_port = Some(i32::from(t.src_port));
            row.dst_port = Some(i32::from(t.dst_port));
            row.tcp_flags = Some(t.flags as i16);
            row.tcp_seq = Some(i64::from(t.seq));
            row.tcp_ack = Some(i64::from(t.ack));
        }
        Transport::Udp(u) => {
            row.src_port = Some(i32::from(u.src_port));
            row.dst_port = Some(i32::from(u.dst_port));
        }
        _ => {}
    }
    row
}

/// The `direction` column's values (docs/dataset.md).
fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::Inbound => "in",
        Direction::Outbound => "out",
    }
}

/// Dissects a frame of the given link type (re-exported for the converter loop).
pub fn headers(linktype: u16, data: &[u8]) -> Headers<'_> {
    dissect(u32::from(linktype), data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapdeck_pcap::PacketFlags;

    fn direction_of(flags: Option<PacketFlags>) -> Option<&'static str> {
        let frame = [0u8; 14]; // Ethernet, type 0: no IP
        let p = Packet {
            ts_ns: 1,
            iface: 0,
            orig_len: 14,
            flags,
            data: &frame,
        };
        let h = headers(1, &frame);
        packet_row(&h, &p, 0, 1, &mut Anonymizer::default()).direction
    }

    #[test]
    fn direction_comes_from_the_packet_flags() {
        assert_eq!(direction_of(PacketFlags::from_pkttype(4)), Some("out"));
        assert_eq!(direction_of(PacketFlags::from_pkttype(0)), Some("in"));
        assert_eq!(direction_of(PacketFlags::from_pkttype(3)), Some("in"));
        // No flags, or flags without a direction (reception type only).
        assert_eq!(direction_of(None), None);
        assert_eq!(direction_of(Some(PacketFlags(0b100))), None);
    }
}
