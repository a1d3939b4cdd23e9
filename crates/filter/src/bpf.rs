//! libpcap's programs for a filter, one per link type: what decides every packet of the
//! chunks the [`Predicate`](crate::Predicate) could not rule out. The CLI's extract and
//! the service's queries compile through here, so both accept and refuse the same filters.

use std::collections::HashMap;

/// A filter libpcap refuses for a link type.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct CompileError {
    pub linktype: u16,
    #[source]
    pub error: pcap::Error,
}

/// A filter compiled once for each link type its packets may have.
#[derive(Default)]
pub struct LinkPrograms {
    /// Empty for an empty filter: every packet passes.
    programs: HashMap<u16, pcap::BpfProgram>,
}

impl std::fmt::Debug for LinkPrograms {
    /// The link types compiled for (libpcap's programs do not print).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut linktypes: Vec<&u16> = self.programs.keys().collect();
        linktypes.sort_unstable();
        f.debug_struct("LinkPrograms")
            .field("linktypes", &linktypes)
            .finish()
    }
}

impl LinkPrograms {
    /// Compiles `expr` (optimized, as tcpdump does) for each of `linktypes`, before any
    /// packet is read; a blank filter needs no program.
    pub fn compile(expr: &str, linktypes: &[u16]) -> Result<LinkPrograms, CompileError> {
        let mut programs = HashMap::new();
        if expr.trim().is_empty() {
            return Ok(LinkPrograms { programs });
        }
        for &linktype in linktypes {
            let program = pcap::Capture::dead(pcap::Linktype(i32::from(linktype)))
                .and_then(|c| c.compile(expr, true))
                .map_err(|error| CompileError { linktype, error })?;
            programs.insert(linktype, program);
        }
        Ok(LinkPrograms { programs })
    }

    /// Does the filter accept `frame`, a packet of `linktype`? A link type it was not
    /// compiled for (none, for a blank filter) passes everything.
    pub fn matches(&self, linktype: u16, frame: &[u8]) -> bool {
        self.programs
            .get(&linktype)
            .is_none_or(|program| program.filter(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blank_filter_passes_everything_and_a_bad_one_names_its_link_type() {
        let all = LinkPrograms::compile("  ", &[1]).unwrap();
        assert!(all.matches(1, &[0u8; 14]));
        let e = LinkPrograms::compile("tcp and", &[1]).unwrap_err();
        assert_eq!(e.linktype, 1);
        let udp = LinkPrograms::compile("udp", &[1]).unwrap();
        assert!(!udp.matches(1, &[0u8; 60]), "an all-zero frame is not IPv4");
    }
}
