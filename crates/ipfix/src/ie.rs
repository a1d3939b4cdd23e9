//! Information element numbers (IANA "IPFIX Information Elements" registry) and the templates
//! tapdeck sends. Everything here is IANA-assigned (enterprise 0): tapdeck defines no
//! enterprise-specific elements, so any IPFIX collector can name every field it receives.

/// Length of a variable-length field in a template (RFC 7011 §7).
pub const VARLEN: u16 = 65535;

pub const OCTET_DELTA_COUNT: u16 = 1;
pub const INGRESS_INTERFACE: u16 = 10;
pub const EXPORTED_MESSAGE_TOTAL_COUNT: u16 = 41;
pub const EXPORTED_FLOW_RECORD_TOTAL_COUNT: u16 = 42;
pub const INTERFACE_NAME: u16 = 82;
pub const INTERFACE_DESCRIPTION: u16 = 83;
pub const EXPORTING_PROCESS_ID: u16 = 144;
pub const SYSTEM_INIT_TIME_MILLISECONDS: u16 = 160;
pub const IGNORED_PACKET_TOTAL_COUNT: u16 = 164;
pub const NOT_SENT_PACKET_TOTAL_COUNT: u16 = 167;
pub const SELECTOR_ID: u16 = 302;
pub const DATA_LINK_FRAME_SIZE: u16 = 312;
pub const DATA_LINK_FRAME_SECTION: u16 = 315;
pub const SELECTOR_ID_TOTAL_PKTS_OBSERVED: u16 = 318;
pub const SELECTOR_ID_TOTAL_PKTS_SELECTED: u16 = 319;
pub const OBSERVATION_TIME_SECONDS: u16 = 322;
pub const OBSERVATION_TIME_MILLISECONDS: u16 = 323;
pub const OBSERVATION_TIME_MICROSECONDS: u16 = 324;
pub const OBSERVATION_TIME_NANOSECONDS: u16 = 325;
pub const LAYER2_OCTET_DELTA_COUNT: u16 = 352;
pub const DATA_LINK_FRAME_TYPE: u16 = 408;

/// dataLinkFrameType values (IANA registry): what the frame section starts with.
pub const FRAME_TYPE_ETHERNET: u16 = 0x01;
pub const FRAME_TYPE_IEEE802_11: u16 = 0x02;

/// Packet reports of frames up to 65535 bytes long (dataLinkFrameSize is unsigned16).
pub const PACKET_REPORT_TEMPLATE: u16 = 256;
/// Packet reports of longer frames (loopback captures with segmentation offload): the
/// original length travels as layer2OctetDeltaCount instead of dataLinkFrameSize.
pub const LARGE_PACKET_REPORT_TEMPLATE: u16 = 257;
/// Options template: the exporter's own counts (one record per exporting process and selector).
pub const EXPORTER_STATS_TEMPLATE: u16 = 258;
/// Options template: one record per capture interface (its name and frame type).
pub const INTERFACE_TEMPLATE: u16 = 259;

/// A field specifier as sent: element id (enterprise 0) and length on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    pub ie: u16,
    pub len: u16,
}

const fn f(ie: u16, len: u16) -> FieldSpec {
    FieldSpec { ie, len }
}

/// One of the templates this crate sends. `scope` is non-zero for options templates: the
/// first `scope` fields are scope fields.
#[derive(Clone, Copy, Debug)]
pub struct TemplateDef {
    pub id: u16,
    pub scope: u16,
    pub fields: &'static [FieldSpec],
}

impl TemplateDef {
    /// Bytes of a record with `varlen` bytes in its variable-length field (0 if it has none),
    /// not counting the variable-length prefix.
    pub(crate) const fn fixed_len(&self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < self.fields.len() {
            if self.fields[i].len != VARLEN {
                n += self.fields[i].len as usize;
            }
            i += 1;
        }
        n
    }
}

/// observationTimeNanoseconds, ingressInterface, selectorId (reduced-size to 4 octets),
/// dataLinkFrameSize, dataLinkFrameSection (variable length).
pub const PACKET_REPORT: TemplateDef = TemplateDef {
    id: PACKET_REPORT_TEMPLATE,
    scope: 0,
    fields: &[
        f(OBSERVATION_TIME_NANOSECONDS, 8),
        f(INGRESS_INTERFACE, 4),
        f(SELECTOR_ID, 4),
        f(DATA_LINK_FRAME_SIZE, 2),
        f(DATA_LINK_FRAME_SECTION, VARLEN),
    ],
};

/// As [`PACKET_REPORT`], with layer2OctetDeltaCount (reduced-size to 4 octets) in place of
/// dataLinkFrameSize.
pub const LARGE_PACKET_REPORT: TemplateDef = TemplateDef {
    id: LARGE_PACKET_REPORT_TEMPLATE,
    scope: 0,
    fields: &[
        f(OBSERVATION_TIME_NANOSECONDS, 8),
        f(INGRESS_INTERFACE, 4),
        f(SELECTOR_ID, 4),
        f(LAYER2_OCTET_DELTA_COUNT, 4),
        f(DATA_LINK_FRAME_SECTION, VARLEN),
    ],
};

/// Scope exportingProcessId and selectorId; then systemInitTimeMilliseconds (the exporter's
/// start, which tells a collector about restarts), exportedMessageTotalCount,
/// exportedFlowRecordTotalCount (packet reports sent), ignoredPacketTotalCount,
/// notSentPacketTotalCount, selectorIDTotalPktsObserved, selectorIDTotalPktsSelected.
pub const EXPORTER_STATS: TemplateDef = TemplateDef {
    id: EXPORTER_STATS_TEMPLATE,
    scope: 2,
    fields: &[
        f(EXPORTING_PROCESS_ID, 4),
        f(SELECTOR_ID, 4),
        f(SYSTEM_INIT_TIME_MILLISECONDS, 8),
        f(EXPORTED_MESSAGE_TOTAL_COUNT, 8),
        f(EXPORTED_FLOW_RECORD_TOTAL_COUNT, 8),
        f(IGNORED_PACKET_TOTAL_COUNT, 8),
        f(NOT_SENT_PACKET_TOTAL_COUNT, 8),
        f(SELECTOR_ID_TOTAL_PKTS_OBSERVED, 8),
        f(SELECTOR_ID_TOTAL_PKTS_SELECTED, 8),
    ],
};

/// Scope ingressInterface; then interfaceName, interfaceDescription (both variable length)
/// and dataLinkFrameType.
pub const INTERFACE: TemplateDef = TemplateDef {
    id: INTERFACE_TEMPLATE,
    scope: 1,
    fields: &[
        f(INGRESS_INTERFACE, 4),
        f(INTERFACE_NAME, VARLEN),
        f(INTERFACE_DESCRIPTION, VARLEN),
        f(DATA_LINK_FRAME_TYPE, 2),
    ],
};
