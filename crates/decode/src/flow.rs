//! Symmetric flow keys and the stable flow id stored in the dataset.
//!
//! # The flow id, exactly
//! `flow_id` = XXH3-64 with seed 0 over these 40 bytes:
//!
//! | bytes  | field |
//! |--------|-------|
//! | 0      | IP version (4 or 6) |
//! | 1      | IP protocol |
//! | 2..4   | VLAN id, big-endian; `0xffff` when untagged |
//! | 4..20  | lower endpoint's address (IPv4 as `::ffff:a.b.c.d`) |
//! | 20..22 | lower endpoint's port, big-endian (0 without ports) |
//! | 22..38 | higher endpoint's address |
//! | 38..40 | higher endpoint's port |
//!
//! "Lower" is the endpoint whose 18 bytes (address then big-endian port) compare smaller,
//! so both directions give the same id. XXH3 is a frozen specification (since xxHash
//! 0.8.0), so the id is the same on every machine and version. Do not change this layout:
//! ids already stored in datasets depend on it.

use crate::packet::Headers;

/// VLAN field value in the canonical layout for an untagged frame.
const NO_VLAN: u16 = 0xffff;

/// One side of a connection: address (16-byte form) and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Endpoint {
    pub addr: [u8; 16],
    pub port: u16,
}

/// A directional 5-tuple plus VLAN: who sent this packet to whom. Ordered, so that
/// whatever is done over many connections at once can be done in a fixed order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FlowKey {
    pub version: u8,
    pub protocol: u8,
    pub vlan: Option<u16>,
    pub src: Endpoint,
    pub dst: Endpoint,
}

impl FlowKey {
    /// The key of a dissected packet; `None` without an IP header. Packets without ports
    /// (ICMP, fragments, other protocols) get port 0.
    pub fn from_headers(h: &Headers<'_>) -> Option<FlowKey> {
        let ip = h.ip?;
        let (sp, dp) = h.transport.ports().unwrap_or((0, 0));
        Some(FlowKey {
            version: ip.version,
            protocol: ip.protocol,
            vlan: h.vlan,
            src: Endpoint {
                addr: ip.src,
                port: sp,
            },
            dst: Endpoint {
                addr: ip.dst,
                port: dp,
            },
        })
    }

    /// The same connection seen from the other side.
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            ..*self
        }
    }

    /// The direction-free form: endpoints sorted. Returns it and whether `self` was the
    /// reverse of it (its source is the higher endpoint).
    pub fn canonical(&self) -> (FlowKey, bool) {
        if self.src <= self.dst {
            (*self, false)
        } else {
            (self.reversed(), true)
        }
    }

    /// The symmetric, stable flow id (see the module docs for the exact layout).
    pub fn id(&self) -> u64 {
        flow_id(
            self.version,
            self.protocol,
            self.vlan,
            (self.src.addr, self.src.port),
            (self.dst.addr, self.dst.port),
        )
    }
}

/// Symmetric, stable flow id: identical for both directions of a connection. See the module
/// docs for the exact hash input.
pub fn flow_id(
    version: u8,
    protocol: u8,
    vlan: Option<u16>,
    a: ([u8; 16], u16),
    b: ([u8; 16], u16),
) -> u64 {
    let ea = Endpoint {
        addr: a.0,
        port: a.1,
    };
    let eb = Endpoint {
        addr: b.0,
        port: b.1,
    };
    let (lo, hi) = if ea <= eb { (ea, eb) } else { (eb, ea) };
    let mut buf = [0u8; 40];
    buf[0] = version;
    buf[1] = protocol;
    buf[2..4].copy_from_slice(&vlan.unwrap_or(NO_VLAN).to_be_bytes());
    buf[4..20].copy_from_slice(&lo.addr);
    buf[20..22].copy_from_slice(&lo.port.to_be_bytes());
    buf[22..38].copy_from_slice(&hi.addr);
    buf[38..40].copy_from_slice(&hi.port.to_be_bytes());
    xxhash_rust::xxh3::xxh3_64(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::v4_mapped;

    fn key(sa: [u8; 4], sp: u16, da: [u8; 4], dp: u16) -> FlowKey {
        FlowKey {
            version: 4,
            protocol: 6,
            vlan: None,
            src: Endpoint {
                addr: v4_mapped(sa),
                port: sp,
            },
            dst: Endpoint {
                addr: v4_mapped(da),
                port: dp,
            },
        }
    }

    #[test]
    fn symmetric_and_discriminating() {
        let k = key([10, 0, 0, 1], 800, [10, 0, 0, 2], 2049);
        assert_eq!(k.id(), k.reversed().id());
        assert_ne!(k.id(), key([10, 0, 0, 1], 801, [10, 0, 0, 2], 2049).id());
        // Swapping only the ports is another connection.
        assert_ne!(k.id(), key([10, 0, 0, 1], 2049, [10, 0, 0, 2], 800).id());
        let mut v = k;
        v.vlan = Some(0);
        assert_ne!(k.id(), v.id());
        let mut u = k;
        u.protocol = 17;
        assert_ne!(k.id(), u.id());
        assert_eq!(k.canonical().0, k.reversed().canonical().0);
        assert_ne!(k.canonical().1, k.reversed().canonical().1);
    }

    /// Pins the documented layout: a change here breaks every stored dataset.
    #[test]
    fn stable_value() {
        let k = key([10, 0, 0, 1], 800, [10, 0, 0, 2], 2049);
        let mut buf = [0u8; 40];
        buf[0] = 4;
        buf[1] = 6;
        buf[2] = 0xff;
        buf[3] = 0xff;
        buf[4..20].copy_from_slice(&v4_mapped([10, 0, 0, 1]));
        buf[20..22].copy_from_slice(&800u16.to_be_bytes());
        buf[22..38].copy_from_slice(&v4_mapped([10, 0, 0, 2]));
        buf[38..40].copy_from_slice(&2049u16.to_be_bytes());
        assert_eq!(k.id(), xxhash_rust::xxh3::xxh3_64(&buf));
        // The published XXH3-64 value of the empty input (seed 0): it is XXH3 we call.
        assert_eq!(xxhash_rust::xxh3::xxh3_64(b""), 0x2d06_8005_38d3_94c2);
        assert_eq!(k.id(), 0x5b02_fe50_3df0_a87e_u64, "got {:#x}", k.id());
    }
}
