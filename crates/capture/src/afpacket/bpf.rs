//! Capture filters for the kernel: a tcpdump expression compiled by libpcap, with the snap
//! length folded into its accept instructions, as libpcap itself does on Linux.

use crate::{SettingError, SourceError};

/// `BPF_RET | BPF_K` (linux/filter.h, linux/bpf_common.h): return the constant `k`.
const BPF_RET_K: u16 = 0x06;

/// The snap length when none is given: libpcap's and tcpdump's default (MAXIMUM_SNAPLEN),
/// large enough for the biggest segmentation-offloaded frame.
pub const DEFAULT_SNAPLEN: u32 = 262_144;

/// A classic BPF program in the kernel's layout, ready for `SO_ATTACH_FILTER`.
#[derive(Debug, Clone)]
pub struct KernelFilter {
    pub insns: Vec<libc::sock_filter>,
}

/// Compiles `expr` for `linktype` and limits every packet it accepts to `snaplen` bytes.
/// Without an expression, and with no snap length below the default, returns `None`: no
/// filter at all is cheaper than one that accepts everything.
pub fn build(
    expr: Option<&str>,
    linktype: u16,
    snaplen: u32,
) -> Result<Option<KernelFilter>, SourceError> {
    let Some(expr) = expr else {
        if snaplen >= DEFAULT_SNAPLEN {
            return Ok(None);
        }
        // The one-instruction program libpcap attaches for a snap length alone.
        return Ok(Some(KernelFilter {
            insns: vec![insn(BPF_RET_K, 0, 0, snaplen)],
        }));
    };
    let dead = pcap::Capture::dead(pcap::Linktype(i32::from(linktype)))
        .map_err(|e| SettingError::Libpcap(e.to_string()))?;
    let program = dead.compile(expr, true).map_err(|e| SettingError::Filter {
        expr: expr.to_string(),
        what: e.to_string(),
    })?;
    let mut insns = to_kernel(program.get_instructions());
    set_snaplen(&mut insns, snaplen);
    if insns.len() > usize::from(u16::MAX) {
        return Err(SettingError::FilterTooLong {
            expr: expr.to_string(),
            insns: insns.len(),
        }
        .into());
    }
    Ok(Some(KernelFilter { insns }))
}

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

// The cast in `to_kernel` needs these to be the same size and alignment.
const _: () = {
    assert!(
        std::mem::size_of::<pcap::BpfInstruction>() == std::mem::size_of::<libc::sock_filter>()
    );
    assert!(
        std::mem::align_of::<pcap::BpfInstruction>() == std::mem::align_of::<libc::sock_filter>()
    );
};

/// Copies libpcap's instructions into the kernel's type.
fn to_kernel(program: &[pcap::BpfInstruction]) -> Vec<libc::sock_filter> {
    // SAFETY: `pcap::BpfInstruction` is `#[repr(transparent)]` over libpcap's `struct
    // bpf_insn` { u16 code; u8 jt; u8 jf; u32 k; } (`#[repr(C)]`), and `libc::sock_filter`
    // is linux/filter.h's `struct sock_filter` with the same four fields in the same order,
    // also `#[repr(C)]`: identical layouts (size and alignment are checked above), every bit
    // pattern valid for both. libpcap's BPF and Linux's classic BPF share the encoding: the
    // kernel's own `SO_ATTACH_FILTER` users (libpcap's pcap-linux.c) pass `bpf_insn` arrays
    // straight to it. The slice borrows from `program`, which outlives this copy.
    let kernel: &[libc::sock_filter] = unsafe {
        std::slice::from_raw_parts(program.as_ptr().cast::<libc::sock_filter>(), program.len())
    };
    kernel.to_vec()
}

/// A filter's return value is how many bytes of the packet to keep (0 drops it). libpcap's
/// programs accept with `ret #<snaplen of the handle>` — 65535 for the dead handle we
/// compile on, which says nothing about what the user asked — and reject with `ret #0`.
/// So every nonzero constant return becomes the requested snap length; the kernel then
/// copies at most that many bytes into the ring, and still reports the packet's full length.
/// (`ret a`, never emitted by libpcap's compiler for capture filters, is left alone.)
fn set_snaplen(insns: &mut [libc::sock_filter], snaplen: u32) {
    for i in insns.iter_mut().filter(|i| i.code == BPF_RET_K && i.k > 0) {
        i.k = snaplen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cast_agrees_with_libpcaps_own_rendering() {
        let dead = pcap::Capture::dead(pcap::Linktype(1)).unwrap();
        let program = dead
            .compile("udp port 53 or tcp[13] & 2 != 0", true)
            .unwrap();
        let ours = to_kernel(program.get_instructions());
        let theirs: Vec<String> = program
            .get_instructions()
            .iter()
            .map(|i| i.to_string())
            .collect();
        assert_eq!(ours.len(), theirs.len());
        for (o, t) in ours.iter().zip(&theirs) {
            assert_eq!(format!("{} {} {} {}", o.code, o.jt, o.jf, o.k), *t);
        }
    }

    #[test]
    fn accepts_return_the_snap_length_and_rejects_stay_zero() {
        let f = build(Some("udp"), 1, 96).unwrap().unwrap();
        let rets: Vec<u32> = f
            .insns
            .iter()
            .filter(|i| i.code == BPF_RET_K)
            .map(|i| i.k)
            .collect();
        assert!(rets.contains(&96) && rets.contains(&0), "{rets:?}");
        assert!(rets.iter().all(|&k| k == 96 || k == 0));
    }

    #[test]
    fn no_filter_needs_no_program_unless_the_snap_length_is_short() {
        assert!(build(None, 1, DEFAULT_SNAPLEN).unwrap().is_none());
        let f = build(None, 1, 64).unwrap().unwrap();
        assert_eq!(f.insns.len(), 1);
        assert_eq!((f.insns[0].code, f.insns[0].k), (BPF_RET_K, 64));
    }

    #[test]
    fn a_bad_expression_is_one_line_naming_it() {
        let e = build(Some("udp prot 53"), 1, DEFAULT_SNAPLEN).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(&e, SourceError::Setting(SettingError::Filter { expr, what })
                if expr == "udp prot 53" && !what.is_empty()),
            "{msg}"
        );
        assert!(msg.starts_with("capture filter 'udp prot 53': "), "{msg}");
        assert!(!msg.contains('\n'));
    }
}
