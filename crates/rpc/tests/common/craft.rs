//! Builders for hand-made RPC messages and the pcap files that carry them to tshark.

use std::io::Write;
use std::path::Path;

/// A small XDR writer.
#[derive(Clone, Default)]
pub struct W(pub Vec<u8>);

impl W {
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn opaque(self, b: &[u8]) -> Self {
        self.u32(b.len() as u32).fixed(b)
    }
    /// Bytes plus XDR padding.
    pub fn fixed(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        while self.0.len() % 4 != 0 {
            self.0.push(0);
        }
        self
    }
    pub fn w(self, other: &W) -> Self {
        self.fixed(&other.0)
    }
    /// An NFSv3 fattr3.
    pub fn fattr3(self, ftype: u32, fileid: u64) -> Self {
        self.u32(ftype)
            .u32(0o644)
            .u32(1)
            .u32(1000)
            .u32(100)
            .u64(4096)
            .u64(8192)
            .u32(0)
            .u32(0)
            .u64(7)
            .u64(fileid)
            .u32(1_700_000_000)
            .u32(1)
            .u32(1_700_000_001)
            .u32(2)
            .u32(1_700_000_002)
            .u32(3)
    }
    pub fn post_op_attr(self, fileid: u64) -> Self {
        self.u32(1).fattr3(1, fileid)
    }
    /// wcc_data with before and after attributes.
    pub fn wcc(self, fileid: u64) -> Self {
        self.u32(1)
            .u64(4096)
            .u32(1)
            .u32(2)
            .u32(3)
            .u32(4)
            .post_op_attr(fileid)
    }
}

/// An RPC call header with AUTH_SYS credentials (machine "client", uid 1000, gid 100, gids 100 27).
pub fn call(xid: u32, prog: u32, vers: u32, proc_: u32) -> W {
    let cred = W::default()
        .u32(42)
        .opaque(b"client")
        .u32(1000)
        .u32(100)
        .u32(2)
        .u32(100)
        .u32(27);
    W::default()
        .u32(xid)
        .u32(0)
        .u32(2)
        .u32(prog)
        .u32(vers)
        .u32(proc_)
        .u32(1)
        .opaque(&cred.0)
        .u32(0)
        .u32(0)
}

/// An accepted, successful RPC reply header.
pub fn reply(xid: u32) -> W {
    W::default().u32(xid).u32(1).u32(0).u32(0).u32(0).u32(0)
}

/// Writes a classic pcap of Ethernet/IPv4/UDP frames, one per message: `to_server` messages
/// go client:800 -> server:`port`, the others back.
pub fn write_udp_pcap(path: &Path, messages: &[(bool, u16, Vec<u8>)]) {
    write_udp_pcap_snapped(path, messages, usize::MAX)
}

/// Like [`write_udp_pcap`], with every frame cut to `snaplen` bytes as a header-only capture
/// would store it (the original length stays in the record header).
pub fn write_udp_pcap_snapped(path: &Path, messages: &[(bool, u16, Vec<u8>)], snaplen: usize) {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&262144u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    let (client, server) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    for (i, (to_server, port, payload)) in messages.iter().enumerate() {
        let (src, dst, sport, dport) = if *to_server {
            (client, server, 800, *port)
        } else {
            (server, client, *port, 800)
        };
        let mut f = vec![2, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 8, 0];
        let udp_len = 8 + payload.len();
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 1, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        out.extend_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        let stored = f.len().min(snaplen);
        out.extend_from_slice(&(stored as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&f[..stored]);
    }
    std::fs::File::create(path)
        .and_then(|mut file| file.write_all(&out))
        .expect("write pcap");
}
