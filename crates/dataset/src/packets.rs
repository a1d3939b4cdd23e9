//! The `packets` table: one row per captured packet, from the header views of
//! `tapdeck-decode`.

use tapdeck_decode::flow::FlowKey;
use tapdeck_decode::packet::{dissect, Headers, Transport};

use tapdeck_pcap::Packet;

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

/// Dissects a frame of the given link type (re-exported for the converter loop).
pub fn headers(linktype: u16, data: &[u8]) -> Headers<'_> {
    dissect(u32::from(linktype), data)
}
