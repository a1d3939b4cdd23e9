//! The collector side: [`Decoder`] checks a whole message before it hands out any record or
//! changes any template, so a malformed message leaves no trace but its error.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::ie::{self, VARLEN};
use crate::wire::{
    read_header, u16_at, u32_at, uint, MessageHeader, HEADER_LEN, MIN_DATA_SET_ID,
    OPTIONS_TEMPLATE_SET_ID, SET_HEADER_LEN, TEMPLATE_SET_ID, VERSION,
};
use crate::{time, Error, ExporterStats, InterfaceInfo, PacketReport, Record};

/// Templates kept per exporter address unless [`Decoder::with_template_limit`] says otherwise.
pub const DEFAULT_TEMPLATE_LIMIT: usize = 1024;

/// What a field of a template means to this decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Ignore,
    TimeSeconds,
    TimeMilliseconds,
    TimeMicroseconds,
    TimeNanoseconds,
    Interface,
    Selector,
    FrameSize,
    Section,
    ProcessId,
    StartTimeMs,
    Messages,
    Records,
    Ignored,
    NotSent,
    Observed,
    Selected,
    IfName,
    IfDescription,
    FrameType,
}

/// Which record a template's data records become.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateKind {
    /// Has dataLinkFrameSection: [`Record::Packet`].
    PacketReport,
    /// An options template with exporter counts: [`Record::ExporterStats`].
    ExporterStats,
    /// An options template scoped by ingressInterface with interfaceName: [`Record::Interface`].
    Interface,
    /// Anything else: its records are counted in [`MessageInfo::unknown_records`].
    Other,
}

#[derive(Clone, Copy, Debug)]
struct Field {
    /// Octets, or [`VARLEN`].
    len: u16,
    role: Role,
}

/// A template as received, compiled for decoding.
#[derive(Clone, Debug)]
pub struct Template {
    pub id: u16,
    /// Scope fields (0 for a template that is not an options template).
    pub scope: u16,
    pub kind: TemplateKind,
    fields: Vec<Field>,
    /// The shortest record (variable-length fields count one octet); anything shorter at the
    /// end of a set is padding.
    min_len: usize,
}

impl Template {
    pub fn field_count(&self) -> usize {
        self.fields.len()
    }
}

/// Reads one template or options template record (not a withdrawal) at `at`, returning it and
/// the offset after it.
fn parse_template(
    b: &[u8],
    at: usize,
    end: usize,
    options: bool,
) -> Result<(Template, usize), Error> {
    let trunc = |what| Error::Truncated { what, at };
    let head = if options { 6 } else { 4 };
    if end - at < head {
        return Err(trunc("template record header"));
    }
    let id = u16_at(b, at);
    let count = u16_at(b, at + 2) as usize;
    if id < MIN_DATA_SET_ID {
        return Err(Error::Invalid {
            what: "template id below 256",
            at,
        });
    }
    let scope = if options { u16_at(b, at + 4) } else { 0 };
    if options && (scope == 0 || scope as usize > count) {
        return Err(Error::Invalid {
            what: "options template scope field count",
            at: at + 4,
        });
    }
    let mut p = at + head;
    let mut fields = Vec::with_capacity(count.min((end - p) / 4));
    let mut min_len = 0usize;
    let mut kinds = KindSeen::default();
    for i in 0..count {
        if end - p < 4 {
            return Err(Error::Truncated {
                what: "field specifier",
                at: p,
            });
        }
        let raw = u16_at(b, p);
        let len = u16_at(b, p + 2);
        let enterprise = if raw & 0x8000 != 0 {
            if end - p < 8 {
                return Err(Error::Truncated {
                    what: "enterprise number",
                    at: p + 4,
                });
            }
            let pen = u32_at(b, p + 4);
            p += 8;
            pen
        } else {
            p += 4;
            0
        };
        if len == 0 {
            return Err(Error::Invalid {
                what: "field length 0",
                at: p - 2,
            });
        }
        let role = if enterprise == 0 {
            role_of(raw, len, options, i < scope as usize)
                .map_err(|what| Error::Invalid { what, at: p - 2 })?
        } else {
            Role::Ignore
        };
        kinds.note(role, i < scope as usize);
        min_len += if len == VARLEN { 1 } else { len as usize };
        fields.push(Field { len, role });
    }
    let kind = kinds.kind(options);
    Ok((
        Template {
            id,
            scope,
            kind,
            fields,
            min_len,
        },
        p,
    ))
}

/// The role of an IANA element, checking its length against its data type; reduced-size
/// encoding (RFC 7011 §6.2) is accepted for unsigned integers.
fn role_of(ie_id: u16, len: u16, options: bool, scope: bool) -> Result<Role, &'static str> {
    let uint_up_to = |max: u16, role: Role, what| if len <= max { Ok(role) } else { Err(what) };
    let exact = |n: u16, role: Role, what| if len == n { Ok(role) } else { Err(what) };
    if !options {
        return match ie_id {
            ie::OBSERVATION_TIME_SECONDS => {
                exact(4, Role::TimeSeconds, "observationTimeSeconds length")
            }
            ie::OBSERVATION_TIME_MILLISECONDS => exact(
                8,
                Role::TimeMilliseconds,
                "observationTimeMilliseconds length",
            ),
            ie::OBSERVATION_TIME_MICROSECONDS => exact(
                8,
                Role::TimeMicroseconds,
                "observationTimeMicroseconds length",
            ),
            ie::OBSERVATION_TIME_NANOSECONDS => exact(
                8,
                Role::TimeNanoseconds,
                "observationTimeNanoseconds length",
            ),
            ie::INGRESS_INTERFACE => uint_up_to(4, Role::Interface, "ingressInterface length"),
            ie::SELECTOR_ID => uint_up_to(8, Role::Selector, "selectorId length"),
            ie::DATA_LINK_FRAME_SIZE => uint_up_to(2, Role::FrameSize, "dataLinkFrameSize length"),
            ie::LAYER2_OCTET_DELTA_COUNT => {
                uint_up_to(8, Role::FrameSize, "layer2OctetDeltaCount length")
            }
            ie::DATA_LINK_FRAME_SECTION => Ok(Role::Section),
            _ => Ok(Role::Ignore),
        };
    }
    match (ie_id, scope) {
        (ie::EXPORTING_PROCESS_ID, true) => {
            uint_up_to(4, Role::ProcessId, "exportingProcessId length")
        }
        (ie::SELECTOR_ID, true) => uint_up_to(8, Role::Selector, "selectorId length"),
        (ie::INGRESS_INTERFACE, true) => uint_up_to(4, Role::Interface, "ingressInterface length"),
        (ie::SYSTEM_INIT_TIME_MILLISECONDS, false) => {
            exact(8, Role::StartTimeMs, "systemInitTimeMilliseconds length")
        }
        (ie::EXPORTED_MESSAGE_TOTAL_COUNT, false) => {
            uint_up_to(8, Role::Messages, "exportedMessageTotalCount length")
        }
        (ie::EXPORTED_FLOW_RECORD_TOTAL_COUNT, false) => {
            uint_up_to(8, Role::Records, "exportedFlowRecordTotalCount length")
        }
        (ie::IGNORED_PACKET_TOTAL_COUNT, false) => {
            uint_up_to(8, Role::Ignored, "ignoredPacketTotalCount length")
        }
        (ie::NOT_SENT_PACKET_TOTAL_COUNT, false) => {
            uint_up_to(8, Role::NotSent, "notSentPacketTotalCount length")
        }
        (ie::SELECTOR_ID_TOTAL_PKTS_OBSERVED, false) => {
            uint_up_to(8, Role::Observed, "selectorIDTotalPktsObserved length")
        }
        (ie::SELECTOR_ID_TOTAL_PKTS_SELECTED, false) => {
            uint_up_to(8, Role::Selected, "selectorIDTotalPktsSelected length")
        }
        (ie::INTERFACE_NAME, false) => Ok(Role::IfName),
        (ie::INTERFACE_DESCRIPTION, false) => Ok(Role::IfDescription),
        (ie::DATA_LINK_FRAME_TYPE, false) => {
            uint_up_to(2, Role::FrameType, "dataLinkFrameType length")
        }
        _ => Ok(Role::Ignore),
    }
}

#[derive(Default)]
struct KindSeen {
    section: bool,
    counts: bool,
    interface_scope: bool,
    if_name: bool,
}

impl KindSeen {
    fn note(&mut self, role: Role, scope: bool) {
        match role {
            Role::Section => self.section = true,
            Role::StartTimeMs | Role::Ignored | Role::NotSent | Role::Observed | Role::Selected => {
                self.counts = true
            }
            Role::Interface if scope => self.interface_scope = true,
            Role::IfName => self.if_name = true,
            _ => {}
        }
    }

    fn kind(&self, options: bool) -> TemplateKind {
        match options {
            false if self.section => TemplateKind::PacketReport,
            true if self.counts => TemplateKind::ExporterStats,
            true if self.interface_scope && self.if_name => TemplateKind::Interface,
            _ => TemplateKind::Other,
        }
    }
}

type DomainKey = (SocketAddr, u32);

/// What one decoder keeps at most, so that no sender — an allowed exporter's address can be
/// forged over UDP — makes it grow without bound. A template costs about 120 octets plus 4
/// per field, so the defaults bound one decoder to about 4 MiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TemplateLimits {
    /// Templates per exporter address (all its ports and observation domains).
    pub per_address: usize,
    /// Field specifiers per exporter address.
    pub fields_per_address: usize,
    /// Templates in all.
    pub total: usize,
    /// Field specifiers in all.
    pub fields_total: usize,
    /// A session (address, port, domain) that decoded nothing for this long gives its
    /// templates up when another needs the room.
    pub idle: Duration,
}

impl Default for TemplateLimits {
    fn default() -> Self {
        TemplateLimits {
            per_address: DEFAULT_TEMPLATE_LIMIT,
            fields_per_address: 32_768,
            total: 16_384,
            fields_total: 524_288,
            idle: Duration::from_secs(60),
        }
    }
}

/// The templates of one session: an exporter's address, port and observation domain.
struct Session {
    templates: HashMap<u16, Template>,
    last_used: Instant,
}

#[derive(Clone, Copy, Default)]
struct Usage {
    templates: usize,
    fields: usize,
}

impl Usage {
    fn add(&mut self, t: &Template) {
        self.templates += 1;
        self.fields += t.fields.len();
    }

    fn sub(&mut self, t: &Template) {
        self.templates -= 1;
        self.fields -= t.fields.len();
    }
}

/// Templates per (exporter, observation domain), bounded per exporter address and in all
/// ([`TemplateLimits`]).
#[derive(Default)]
pub struct TemplateStore {
    domains: HashMap<DomainKey, Session>,
    per_address: HashMap<IpAddr, Usage>,
    total: Usage,
    limits: TemplateLimits,
    /// When idle sessions were last looked for (at most once a second).
    last_expiry: Option<Instant>,
}

impl TemplateStore {
    pub fn get(&self, exporter: SocketAddr, domain: u32, id: u16) -> Option<&Template> {
        self.domains.get(&(exporter, domain))?.templates.get(&id)
    }

    /// Templates held for one exporter address (all its ports and domains).
    pub fn count(&self, exporter: SocketAddr) -> usize {
        self.per_address
            .get(&exporter.ip())
            .map_or(0, |u| u.templates)
    }

    /// Templates held in all, and their field specifiers.
    pub fn total(&self) -> (usize, usize) {
        (self.total.templates, self.total.fields)
    }

    /// Sessions (address, port, domain) with templates.
    pub fn sessions(&self) -> usize {
        self.domains.len()
    }

    /// Whether a new template `t` fits under the limits (after giving up idle sessions'
    /// templates if it would not); the error names the limit.
    fn admit(&mut self, key: DomainKey, t: &Template) -> Result<(), Error> {
        for attempt in 0..2 {
            let a = self
                .per_address
                .get(&key.0.ip())
                .copied()
                .unwrap_or_default();
            let over = if a.templates + 1 > self.limits.per_address {
                Some(("templates per exporter address", self.limits.per_address))
            } else if a.fields + t.fields.len() > self.limits.fields_per_address {
                Some((
                    "template fields per exporter address",
                    self.limits.fields_per_address,
                ))
            } else if self.total.templates + 1 > self.limits.total {
                Some(("templates in all", self.limits.total))
            } else if self.total.fields + t.fields.len() > self.limits.fields_total {
                Some(("template fields in all", self.limits.fields_total))
            } else {
                None
            };
            match over {
                None => return Ok(()),
                Some((what, limit)) if attempt == 1 || !self.expire_idle(key) => {
                    return Err(Error::TemplateLimit { what, limit })
                }
                Some(_) => {}
            }
        }
        unreachable!("the second attempt returns")
    }

    /// Drops the templates of sessions idle for longer than the limit (never `keep`'s);
    /// looks at most once a second. Returns whether it dropped any.
    fn expire_idle(&mut self, keep: DomainKey) -> bool {
        let now = Instant::now();
        if self
            .last_expiry
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return false;
        }
        self.last_expiry = Some(now);
        let idle = self.limits.idle;
        let stale: Vec<DomainKey> = self
            .domains
            .iter()
            .filter(|(k, s)| **k != keep && now.duration_since(s.last_used) > idle)
            .map(|(k, _)| *k)
            .collect();
        for k in &stale {
            self.drop_session(*k);
        }
        !stale.is_empty()
    }

    fn drop_session(&mut self, key: DomainKey) {
        if let Some(s) = self.domains.remove(&key) {
            for t in s.templates.values() {
                self.unaccount(key, t);
            }
        }
    }

    fn unaccount(&mut self, key: DomainKey, t: &Template) {
        self.total.sub(t);
        if let Some(u) = self.per_address.get_mut(&key.0.ip()) {
            u.sub(t);
            if u.templates == 0 {
                self.per_address.remove(&key.0.ip());
            }
        }
    }

    fn put(&mut self, key: DomainKey, t: Template) -> Option<Template> {
        self.total.add(&t);
        self.per_address.entry(key.0.ip()).or_default().add(&t);
        let session = self.domains.entry(key).or_insert_with(|| Session {
            templates: HashMap::new(),
            last_used: Instant::now(),
        });
        let old = session.templates.insert(t.id, t);
        if let Some(o) = &old {
            self.unaccount(key, o);
        }
        old
    }

    fn take(&mut self, key: DomainKey, id: u16) -> Option<Template> {
        let session = self.domains.get_mut(&key)?;
        let old = session.templates.remove(&id);
        if session.templates.is_empty() {
            self.domains.remove(&key);
        }
        if let Some(o) = &old {
            self.unaccount(key, o);
        }
        old
    }

    /// Marks a session as in use (a message of it decoded).
    fn touch(&mut self, key: DomainKey) {
        if let Some(s) = self.domains.get_mut(&key) {
            s.last_used = Instant::now();
        }
    }

    fn ids(&self, key: DomainKey, options: bool) -> Vec<u16> {
        self.domains
            .get(&key)
            .map(|m| {
                m.templates
                    .values()
                    .filter(|t| (t.scope != 0) == options)
                    .map(|t| t.id)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Forgets everything an exporter (address and port) sent.
    pub fn forget(&mut self, exporter: SocketAddr) {
        let keys: Vec<DomainKey> = self
            .domains
            .keys()
            .filter(|k| k.0 == exporter)
            .copied()
            .collect();
        for k in keys {
            self.drop_session(k);
        }
    }
}

/// What one message held besides its records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageInfo {
    pub header: MessageHeader,
    /// Data records of every set whose template was known: what the sequence number counts.
    pub data_records: u32,
    /// Data records of templates this decoder has no use for ([`TemplateKind::Other`]).
    pub unknown_records: u32,
    /// Data sets whose template was never seen (or withdrawn): their records cannot even be
    /// counted, so the sequence number cannot be checked against this message.
    pub sets_without_template: u32,
    /// Template and options template records (definitions).
    pub templates: u32,
    /// Template withdrawals (one per withdrawal record, "all templates" counting once).
    pub withdrawals: u32,
}

enum Undo {
    /// Restore `prev` (or remove the id when there was none).
    Put {
        key: DomainKey,
        id: u16,
        prev: Option<Template>,
    },
}

/// A strict IPFIX message decoder with a [`TemplateStore`].
pub struct Decoder {
    store: TemplateStore,
    undo: Vec<Undo>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    pub fn new() -> Self {
        Decoder::with_limits(TemplateLimits::default())
    }

    /// At most `limit` templates kept per exporter address (other limits the defaults); a
    /// message that would pass it is rejected with [`Error::TemplateLimit`].
    pub fn with_template_limit(limit: usize) -> Self {
        Decoder::with_limits(TemplateLimits {
            per_address: limit,
            ..TemplateLimits::default()
        })
    }

    pub fn with_limits(limits: TemplateLimits) -> Self {
        Decoder {
            store: TemplateStore {
                limits,
                ..TemplateStore::default()
            },
            undo: Vec::new(),
        }
    }

    pub fn templates(&self) -> &TemplateStore {
        &self.store
    }

    pub fn templates_mut(&mut self) -> &mut TemplateStore {
        &mut self.store
    }

    /// Decodes one whole message (one UDP datagram, or one message of an RFC 5655 file) from
    /// `exporter` into `out` (cleared first). Template sets are applied in order, so data sets
    /// may use templates defined earlier in the same message. On error `out` is left empty and
    /// the template store as it was.
    pub fn decode<'m>(
        &mut self,
        exporter: SocketAddr,
        message: &'m [u8],
        out: &mut Vec<Record<'m>>,
    ) -> Result<MessageInfo, Error> {
        out.clear();
        self.undo.clear();
        let result = self.decode_inner(exporter, message, &mut |r| out.push(r));
        match &result {
            Ok(info) => self.store.touch((exporter, info.header.domain)),
            Err(_) => {
                out.clear();
                self.rollback();
            }
        }
        self.undo.clear();
        result
    }

    /// As [`Decoder::decode`], handing each record to `f` instead of a vector, so that a
    /// caller needs no buffer that outlives the message. The message is checked whole first
    /// (a dry run whose template changes are undone), so `f` sees records only of a valid
    /// message.
    pub fn decode_each<'m>(
        &mut self,
        exporter: SocketAddr,
        message: &'m [u8],
        mut f: impl FnMut(Record<'m>),
    ) -> Result<MessageInfo, Error> {
        self.undo.clear();
        let dry = self.decode_inner(exporter, message, &mut |_| {});
        self.rollback();
        dry?;
        let result = self.decode_inner(exporter, message, &mut f);
        match &result {
            Ok(info) => self.store.touch((exporter, info.header.domain)),
            Err(_) => self.rollback(),
        }
        self.undo.clear();
        result
    }

    fn rollback(&mut self) {
        while let Some(Undo::Put { key, id, prev }) = self.undo.pop() {
            match prev {
                Some(t) => {
                    self.store.put(key, t);
                }
                None => {
                    self.store.take(key, id);
                }
            }
        }
    }

    fn decode_inner<'m>(
        &mut self,
        exporter: SocketAddr,
        b: &'m [u8],
        out: &mut impl FnMut(Record<'m>),
    ) -> Result<MessageInfo, Error> {
        let header = read_header(b).ok_or(Error::Truncated {
            what: "message header",
            at: 0,
        })?;
        if u16_at(b, 0) != VERSION {
            return Err(Error::Invalid {
                what: "version (not 10)",
                at: 0,
            });
        }
        let len = header.length as usize;
        if len < HEADER_LEN {
            return Err(Error::Invalid {
                what: "message length below 16",
                at: 2,
            });
        }
        if len > b.len() {
            return Err(Error::Truncated {
                what: "message (length field)",
                at: b.len(),
            });
        }
        if len < b.len() {
            return Err(Error::Invalid {
                what: "bytes after the message length",
                at: len,
            });
        }
        let key = (exporter, header.domain);
        let mut info = MessageInfo {
            header,
            ..Default::default()
        };
        let mut at = HEADER_LEN;
        while at < len {
            if len - at < SET_HEADER_LEN {
                return Err(Error::Truncated {
                    what: "set header",
                    at,
                });
            }
            let set_id = u16_at(b, at);
            let set_len = u16_at(b, at + 2) as usize;
            if set_len < SET_HEADER_LEN {
                return Err(Error::Invalid {
                    what: "set length below 4",
                    at: at + 2,
                });
            }
            if set_len > len - at {
                return Err(Error::Truncated {
                    what: "set (length field)",
                    at,
                });
            }
            let end = at + set_len;
            let body = at + SET_HEADER_LEN;
            match set_id {
                TEMPLATE_SET_ID | OPTIONS_TEMPLATE_SET_ID => self.template_set(
                    b,
                    body,
                    end,
                    key,
                    set_id == OPTIONS_TEMPLATE_SET_ID,
                    &mut info,
                )?,
                id if id >= MIN_DATA_SET_ID => match self.store.get(key.0, key.1, id) {
                    Some(t) => data_set(t, b, body, end, &header, out, &mut info)?,
                    None => info.sets_without_template += 1,
                },
                _ => {
                    return Err(Error::Invalid {
                        what: "set id (0, 1 and 4-255 are reserved)",
                        at,
                    })
                }
            }
            at = end;
        }
        Ok(info)
    }

    fn template_set(
        &mut self,
        b: &[u8],
        mut at: usize,
        end: usize,
        key: DomainKey,
        options: bool,
        info: &mut MessageInfo,
    ) -> Result<(), Error> {
        let set_id = if options {
            OPTIONS_TEMPLATE_SET_ID
        } else {
            TEMPLATE_SET_ID
        };
        // Fewer octets than the smallest record (a withdrawal) are padding.
        while end - at >= 4 {
            let id = u16_at(b, at);
            if u16_at(b, at + 2) == 0 {
                info.withdrawals += 1;
                if id == set_id {
                    for id in self.store.ids(key, options) {
                        let prev = self.store.take(key, id);
                        self.undo.push(Undo::Put { key, id, prev });
                    }
                } else if id >= MIN_DATA_SET_ID {
                    if self
                        .store
                        .get(key.0, key.1, id)
                        .is_some_and(|t| (t.scope != 0) != options)
                    {
                        return Err(Error::Invalid {
                            what: "withdrawal in the wrong kind of template set",
                            at,
                        });
                    }
                    let prev = self.store.take(key, id);
                    if prev.is_some() {
                        self.undo.push(Undo::Put { key, id, prev });
                    }
                } else {
                    return Err(Error::Invalid {
                        what: "template id below 256",
                        at,
                    });
                }
                at += 4;
                continue;
            }
            let (t, next) = parse_template(b, at, end, options)?;
            if self.store.get(key.0, key.1, t.id).is_none() {
                self.store.admit(key, &t)?;
            }
            let id = t.id;
            let prev = self.store.put(key, t);
            self.undo.push(Undo::Put { key, id, prev });
            info.templates += 1;
            at = next;
        }
        Ok(())
    }
}

/// Field values of one record, as far as this decoder understands them.
#[derive(Default)]
struct Values<'m> {
    time_ns: Option<u64>,
    interface: u64,
    selector: u64,
    frame_size: Option<u64>,
    section: &'m [u8],
    process: u64,
    start_ms: u64,
    messages: u64,
    records: u64,
    ignored: u64,
    not_sent: u64,
    observed: u64,
    selected: u64,
    if_name: &'m [u8],
    if_descr: &'m [u8],
    frame_type: u64,
}

fn data_set<'m>(
    t: &Template,
    b: &'m [u8],
    mut at: usize,
    end: usize,
    header: &MessageHeader,
    out: &mut impl FnMut(Record<'m>),
    info: &mut MessageInfo,
) -> Result<(), Error> {
    while end - at >= t.min_len {
        let record_at = at;
        let mut v = Values::default();
        for f in &t.fields {
            let len = if f.len == VARLEN {
                if at >= end {
                    return Err(Error::Truncated {
                        what: "variable-length prefix",
                        at,
                    });
                }
                if b[at] < 255 {
                    at += 1;
                    b[at - 1] as usize
                } else {
                    if end - at < 3 {
                        return Err(Error::Truncated {
                            what: "variable-length prefix",
                            at,
                        });
                    }
                    at += 3;
                    u16_at(b, at - 2) as usize
                }
            } else {
                f.len as usize
            };
            if len > end - at {
                return Err(Error::Truncated {
                    what: "data record field",
                    at,
                });
            }
            let value = &b[at..at + len];
            at += len;
            match f.role {
                Role::Ignore => {}
                Role::TimeSeconds => v.time_ns = Some(uint(value).saturating_mul(1_000_000_000)),
                Role::TimeMilliseconds => v.time_ns = Some(uint(value).saturating_mul(1_000_000)),
                Role::TimeMicroseconds => v.time_ns = Some(time::ntp_micro_to_unix_ns(uint(value))),
                Role::TimeNanoseconds => v.time_ns = Some(time::ntp_to_unix_ns(uint(value))),
                Role::Interface => v.interface = uint(value),
                Role::Selector => v.selector = uint(value),
                Role::FrameSize => v.frame_size = Some(uint(value)),
                Role::Section => v.section = value,
                Role::ProcessId => v.process = uint(value),
                Role::StartTimeMs => v.start_ms = uint(value),
                Role::Messages => v.messages = uint(value),
                Role::Records => v.records = uint(value),
                Role::Ignored => v.ignored = uint(value),
                Role::NotSent => v.not_sent = uint(value),
                Role::Observed => v.observed = uint(value),
                Role::Selected => v.selected = uint(value),
                Role::IfName => v.if_name = value,
                Role::IfDescription => v.if_descr = value,
                Role::FrameType => v.frame_type = uint(value),
            }
        }
        info.data_records += 1;
        match t.kind {
            TemplateKind::PacketReport => out(Record::Packet(PacketReport {
                time_ns: v
                    .time_ns
                    .unwrap_or(header.export_time as u64 * 1_000_000_000),
                interface: v.interface as u32,
                selector: v.selector,
                frame_size: v.frame_size.unwrap_or(v.section.len() as u64),
                frame_section: v.section,
            })),
            TemplateKind::ExporterStats => out(Record::ExporterStats(ExporterStats {
                exporting_process: v.process as u32,
                selector: v.selector,
                start_time_ms: v.start_ms,
                messages: v.messages,
                records: v.records,
                ignored_packets: v.ignored,
                not_sent_packets: v.not_sent,
                observed_packets: v.observed,
                selected_packets: v.selected,
            })),
            TemplateKind::Interface => {
                let text = |s: &'m [u8], what| {
                    std::str::from_utf8(s).map_err(|_| Error::Invalid {
                        what,
                        at: record_at,
                    })
                };
                out(Record::Interface(InterfaceInfo {
                    id: v.interface as u32,
                    name: text(v.if_name, "interfaceName (not UTF-8)")?,
                    description: text(v.if_descr, "interfaceDescription (not UTF-8)")?,
                    frame_type: v.frame_type as u16,
                }))
            }
            TemplateKind::Other => info.unknown_records += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::max_section_len;
    use crate::ie::FRAME_TYPE_ETHERNET;
    use crate::{BuildError, MessageBuilder};

    const T0: u64 = 1_795_392_000_123_456_789;

    fn exporter() -> SocketAddr {
        "198.18.0.1:50000".parse().unwrap()
    }

    fn header(sequence: u32) -> MessageHeader {
        MessageHeader {
            export_time: 1_795_392_000,
            sequence,
            domain: 7,
            ..Default::default()
        }
    }

    fn frame(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// A message with every kind of set: templates, an interface, stats and packet reports of
    /// section lengths 0, 1, 254 (1-octet prefix), 255, 300 (3-octet prefix); a report of a
    /// long frame has to wait for the next message.
    fn full_message(buf: &mut [u8]) -> (usize, Vec<Vec<u8>>) {
        let frames = vec![
            frame(0, 1),
            frame(1, 2),
            frame(254, 3),
            frame(255, 4),
            frame(300, 5),
            frame(64, 6),
        ];
        let mut b = MessageBuilder::new(buf, 9000, header(0)).unwrap();
        b.add_templates().unwrap();
        b.add_interface(&InterfaceInfo {
            id: 3,
            name: "eth0",
            description: "mirror port",
            frame_type: FRAME_TYPE_ETHERNET,
        })
        .unwrap();
        b.add_exporter_stats(&stats()).unwrap();
        for (i, f) in frames.iter().enumerate() {
            let size = if i == 5 { 70_000 } else { f.len() as u64 + 10 };
            let r = PacketReport {
                time_ns: T0 + i as u64,
                interface: 3,
                selector: 1,
                frame_size: size,
                frame_section: f,
            };
            if i == 5 {
                // Packet reports of the other template, and anything else, wait for the next message.
                assert_eq!(b.add_packet_report(&r), Err(BuildError::Full));
                assert_eq!(b.add_exporter_stats(&stats()), Err(BuildError::Full));
                assert_eq!(b.add_templates(), Err(BuildError::Full));
                continue;
            }
            b.add_packet_report(&r).unwrap();
        }
        let built = b.finish();
        assert_eq!(built.data_records, 7);
        (built.len, frames)
    }

    fn stats() -> ExporterStats {
        ExporterStats {
            exporting_process: 42,
            selector: 1,
            start_time_ms: 1_795_391_000_000,
            messages: 10,
            records: 200,
            ignored_packets: 3,
            not_sent_packets: 4,
            observed_packets: 207,
            selected_packets: 207,
        }
    }

    #[test]
    fn round_trip() {
        let mut buf = [0u8; 9000];
        let (len, frames) = full_message(&mut buf);
        let mut d = Decoder::new();
        let mut out = Vec::new();
        let info = d.decode(exporter(), &buf[..len], &mut out).unwrap();
        assert_eq!(
            (
                info.data_records,
                info.templates,
                info.unknown_records,
                info.sets_without_template
            ),
            (7, 4, 0, 0)
        );
        assert_eq!(info.header.domain, 7);
        assert_eq!(out.len(), 7);
        assert_eq!(
            out[0],
            Record::Interface(InterfaceInfo {
                id: 3,
                name: "eth0",
                description: "mirror port",
                frame_type: 1
            })
        );
        assert_eq!(out[1], Record::ExporterStats(stats()));
        for (i, f) in frames.iter().enumerate().take(5) {
            let want = PacketReport {
                time_ns: T0 + i as u64,
                interface: 3,
                selector: 1,
                frame_size: f.len() as u64 + 10,
                frame_section: f,
            };
            assert_eq!(out[2 + i], Record::Packet(want));
        }
        // The next message needs no templates; a new exporter (or domain) does.
        let mut buf = [0u8; 1500];
        let mut out = Vec::new();
        let mut b = MessageBuilder::new(&mut buf, 1500, header(7)).unwrap();
        let f = frame(54, 9);
        let r = PacketReport {
            time_ns: T0,
            interface: 1,
            selector: 2,
            frame_size: 70_000,
            frame_section: &f,
        };
        b.add_packet_report(&r).unwrap();
        let n = b.finish().len;
        let info = d.decode(exporter(), &buf[..n], &mut out).unwrap();
        assert_eq!((info.data_records, info.header.sequence), (1, 7));
        assert_eq!(out, vec![Record::Packet(r)]);
        let other: SocketAddr = "198.18.0.9:50000".parse().unwrap();
        let info = d.decode(other, &buf[..n], &mut out).unwrap();
        assert_eq!(
            (info.data_records, info.sets_without_template, out.len()),
            (0, 1, 0)
        );
    }

    #[test]
    fn builder_respects_its_limit() {
        let mut buf = vec![0u8; 4000];
        for limit in [16usize, 40, 100, 512, 1472, 2000] {
            let Ok(mut b) = MessageBuilder::new(&mut buf, limit, header(0)) else {
                unreachable!()
            };
            let f = frame(54, 0);
            let mut n = 0;
            let res = loop {
                match b.add_packet_report(&PacketReport {
                    time_ns: T0,
                    interface: 1,
                    selector: 1,
                    frame_size: 60,
                    frame_section: &f,
                }) {
                    Ok(()) => n += 1,
                    Err(e) => break e,
                }
            };
            let built = b.finish();
            assert!(built.len <= limit);
            assert_eq!(built.data_records, n);
            // 16 + 4 + n * (18 + 1 + 54)
            if limit >= 16 + 4 + 73 {
                assert_eq!(res, BuildError::Full);
                assert!(limit - built.len < 73, "limit {limit} len {}", built.len);
            } else {
                assert_eq!(res, BuildError::TooLarge(limit));
            }
        }
        assert!(MessageBuilder::new(&mut buf, 15, header(0)).is_err());
        // The largest section fits exactly.
        let big = frame(max_section_len(1472), 1);
        let mut b = MessageBuilder::new(&mut buf, 1472, header(0)).unwrap();
        b.add_packet_report(&PacketReport {
            time_ns: 0,
            interface: 0,
            selector: 0,
            frame_size: 70_000,
            frame_section: &big,
        })
        .unwrap();
        assert_eq!(b.finish().len, 1472);
        let mut b = MessageBuilder::new(&mut buf, 1472, header(0)).unwrap();
        let over = frame(max_section_len(1472) + 1, 1);
        let r = PacketReport {
            time_ns: 0,
            interface: 0,
            selector: 0,
            frame_size: 70_000,
            frame_section: &over,
        };
        assert_eq!(b.add_packet_report(&r), Err(BuildError::TooLarge(1472)));
        let r = PacketReport {
            selector: 1 << 32,
            ..r
        };
        assert_eq!(
            b.add_packet_report(&r),
            Err(BuildError::OutOfRange("selector id"))
        );
        assert!(b.is_empty());
    }

    /// Every prefix of a message, read as a datagram (length field too long) and with the
    /// length field patched to the prefix (sets cut): an error, never a panic, and the
    /// template store unchanged.
    #[test]
    fn truncation_at_every_byte() {
        let mut buf = [0u8; 9000];
        let (len, _) = full_message(&mut buf);
        let mut d = Decoder::new();
        let mut out = Vec::new();
        for cut in 0..len {
            let err = d.decode(exporter(), &buf[..cut], &mut out).unwrap_err();
            let mut out = Vec::new();
            assert!(matches!(err, Error::Truncated { .. }), "cut {cut}: {err}");
            if cut >= HEADER_LEN {
                let mut m = buf[..cut].to_vec();
                m[2..4].copy_from_slice(&(cut as u16).to_be_bytes());
                // Cuts at a set boundary are whole messages; any other cut is an error.
                if let Err(e) = d.decode(exporter(), &m, &mut out) {
                    assert!(out.is_empty());
                    assert!(!e.to_string().is_empty());
                }
                d.templates_mut().forget(exporter());
            }
            assert_eq!(d.templates().count(exporter()), 0);
        }
    }

    /// Each byte replaced by several values: never a panic; on error nothing is yielded and the
    /// store is as before; on success every record's bytes lie inside the message.
    #[test]
    fn corruption_at_every_byte() {
        let mut buf = [0u8; 9000];
        let (len, _) = full_message(&mut buf);
        let mut d = Decoder::new();
        let (mut ok, mut err) = (0, 0);
        for at in 0..len {
            for v in [0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff, buf[at] ^ 0x10] {
                let mut m = buf[..len].to_vec();
                m[at] = v;
                let before = d.templates().count(exporter());
                let mut out = Vec::new();
                match d.decode(exporter(), &m, &mut out) {
                    Ok(info) => {
                        ok += 1;
                        assert!(out.len() <= info.data_records as usize);
                        // decode_each sees the same records (templates from the first pass
                        // are in the store now, which a message that defines them ignores).
                        d.templates_mut().forget(exporter());
                        let mut each = Vec::new();
                        assert_eq!(d.decode_each(exporter(), &m, |r| each.push(r)), Ok(info));
                        assert_eq!(each, out);
                    }
                    Err(_) => {
                        err += 1;
                        assert!(out.is_empty());
                        assert_eq!(d.templates().count(exporter()), before);
                    }
                }
                d.templates_mut().forget(exporter());
            }
        }
        assert!(ok > 0 && err > 0, "ok {ok} err {err}");
    }

    fn run(d: &mut Decoder, e: SocketAddr, m: &[u8]) -> Result<MessageInfo, Error> {
        d.decode(e, m, &mut Vec::new())
    }

    fn msg(sets: &[(u16, &[u8])]) -> Vec<u8> {
        let mut m = vec![0, 10, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7];
        for (id, body) in sets {
            m.extend_from_slice(&id.to_be_bytes());
            m.extend_from_slice(&((body.len() + 4) as u16).to_be_bytes());
            m.extend_from_slice(body);
        }
        let n = m.len() as u16;
        m[2..4].copy_from_slice(&n.to_be_bytes());
        m
    }

    #[test]
    fn strict_rejections() {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        let e = exporter();
        let invalid = |d: &mut Decoder, m: &[u8], what: &str| {
            let mut out = Vec::new();
            match d.decode(e, m, &mut out) {
                Err(Error::Invalid { what: w, .. }) => assert!(w.contains(what), "{w} vs {what}"),
                other => panic!("{what}: {other:?}"),
            }
        };
        let mut m = msg(&[]);
        m[1] = 9;
        invalid(&mut d, &m, "version");
        invalid(&mut d, &msg(&[(1, &[])]), "set id");
        invalid(&mut d, &msg(&[(255, &[])]), "set id");
        let mut m = msg(&[(256, &[0; 4])]);
        m[18..20].copy_from_slice(&3u16.to_be_bytes());
        invalid(&mut d, &m, "set length below 4");
        let mut m = msg(&[]);
        m.push(0);
        invalid(&mut d, &m, "bytes after");
        invalid(
            &mut d,
            &msg(&[(2, &[0, 255, 0, 1, 0, 1, 0, 4])]),
            "template id below 256",
        );
        invalid(
            &mut d,
            &msg(&[(2, &[1, 0, 0, 1, 0, 1, 0, 0])]),
            "field length 0",
        );
        invalid(
            &mut d,
            &msg(&[(2, &[1, 0, 0, 1, 1, 69, 0, 4])]),
            "observationTimeNanoseconds length",
        );
        invalid(
            &mut d,
            &msg(&[(2, &[1, 0, 0, 1, 0, 10, 0, 8])]),
            "ingressInterface length",
        );
        invalid(
            &mut d,
            &msg(&[(3, &[1, 0, 0, 1, 0, 0, 0, 10, 0, 4])]),
            "scope",
        );
        invalid(
            &mut d,
            &msg(&[(3, &[1, 0, 0, 1, 0, 2, 0, 10, 0, 4])]),
            "scope",
        );
        // Template with an enterprise element whose number is cut off.
        let m = msg(&[(2, &[1, 0, 0, 1, 0x80, 1, 0, 4, 0, 0])]);
        assert!(matches!(
            d.decode(e, &m, &mut out),
            Err(Error::Truncated { .. })
        ));
        // A data record overrunning its set: the template of the first set is undone too.
        let m = msg(&[
            (2, &[1, 0, 0, 1, 0, 1, 0, 4]),
            (256, &[0, 0, 0, 1, 0, 0, 0, 2]),
            (256, &[0, 0]),
        ]);
        d.decode(e, &m, &mut out).unwrap();
        assert_eq!(out.len(), 0);
        d.templates_mut().forget(e);
        let m = msg(&[
            (2, &[1, 0, 0, 1, 0x81, 59, 0, 0, 0xff, 0xff]),
            (256, &[5, 1, 2]),
        ]);
        assert!(matches!(
            d.decode(e, &m, &mut out),
            Err(Error::Truncated { .. })
        ));
        assert_eq!(d.templates().count(e), 0);
    }

    #[test]
    fn padding_and_unknown_templates() {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        let e = exporter();
        // octetDeltaCount (8) only: an Other template; 2 records and 3 octets of padding.
        let mut data = vec![0u8; 16];
        data.extend_from_slice(&[0, 0, 0]);
        let m = msg(&[(2, &[1, 0, 0, 1, 0, 1, 0, 8, 0, 0]), (256, &data)]);
        let info = d.decode(e, &m, &mut out).unwrap();
        assert_eq!(
            (info.templates, info.data_records, info.unknown_records),
            (1, 2, 2)
        );
        assert_eq!(
            d.templates().get(e, 7, 256).unwrap().kind,
            TemplateKind::Other
        );
        // An enterprise element is skipped over, variable length included.
        let m = msg(&[
            (
                2,
                &[
                    1, 1, 0, 2, 0x80, 1, 0xff, 0xff, 0, 0, 0x7f, 0xbd, 1, 59, 0xff, 0xff,
                ],
            ),
            (257, &[3, 9, 9, 9, 255, 0, 2, 0xaa, 0xbb]),
        ]);
        d.decode(e, &m, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        let Record::Packet(p) = out[0] else { panic!() };
        assert_eq!(
            (p.frame_section, p.frame_size, p.time_ns),
            (&[0xaa, 0xbb][..], 2, 1_000_000_000)
        );
    }

    #[test]
    fn withdrawals() {
        let mut buf = [0u8; 9000];
        let (len, _) = full_message(&mut buf);
        let mut d = Decoder::new();
        let mut out = Vec::new();
        let e = exporter();
        d.decode(e, &buf[..len], &mut out).unwrap();
        assert_eq!(d.templates().count(e), 4);
        let info = run(&mut d, e, &msg(&[(2, &[1, 0, 0, 0])])).unwrap();
        assert_eq!(info.withdrawals, 1);
        assert!(d.templates().get(e, 7, 256).is_none());
        // Withdrawing an options template in a template set is an error, and undoes nothing wrong.
        assert!(run(&mut d, e, &msg(&[(2, &[1, 2, 0, 0])])).is_err());
        assert_eq!(d.templates().count(e), 3);
        run(&mut d, e, &msg(&[(3, &[0, 3, 0, 0])])).unwrap();
        assert_eq!(d.templates().count(e), 1);
        // Withdraw all, then fail in the same message: everything comes back.
        assert!(run(&mut d, e, &msg(&[(2, &[0, 2, 0, 0]), (1, &[])])).is_err());
        assert_eq!(d.templates().count(e), 1);
        run(&mut d, e, &msg(&[(2, &[0, 2, 0, 0])])).unwrap();
        assert_eq!(d.templates().count(e), 0);
    }

    #[test]
    fn template_limit() {
        let mut d = Decoder::with_template_limit(2);
        let t = |id: u16| {
            let mut v = id.to_be_bytes().to_vec();
            v.extend_from_slice(&[0, 1, 0, 1, 0, 8]);
            v
        };
        let body: Vec<u8> = [t(256), t(257)].concat();
        run(&mut d, exporter(), &msg(&[(2, &body)])).unwrap();
        // Redefining is fine, a third is not.
        run(&mut d, exporter(), &msg(&[(2, &t(257))])).unwrap();
        assert_eq!(
            run(&mut d, exporter(), &msg(&[(2, &t(258))])),
            Err(Error::TemplateLimit {
                what: "templates per exporter address",
                limit: 2
            })
        );
    }

    /// Other ports of one address share its limit; the total limit holds across addresses;
    /// an idle session gives its templates up to a newcomer.
    #[test]
    fn template_limits_per_address_and_in_all() {
        let t = |id: u16| {
            let mut v = id.to_be_bytes().to_vec();
            v.extend_from_slice(&[0, 1, 0, 1, 0, 8]);
            v
        };
        let mut d = Decoder::with_limits(TemplateLimits {
            per_address: 3,
            fields_per_address: 100,
            total: 5,
            fields_total: 100,
            idle: Duration::from_secs(3600),
        });
        let at = |ip: &str, port: u16| SocketAddr::new(ip.parse().unwrap(), port);
        for port in 0..3 {
            run(&mut d, at("198.18.0.1", port), &msg(&[(2, &t(256))])).unwrap();
        }
        let full = run(&mut d, at("198.18.0.1", 9), &msg(&[(2, &t(256))]));
        assert!(
            matches!(full, Err(Error::TemplateLimit { what, .. }) if what.contains("address")),
            "{full:?}"
        );
        run(
            &mut d,
            at("198.18.0.2", 1),
            &msg(&[(2, &[t(256), t(257)].concat())]),
        )
        .unwrap();
        let full = run(&mut d, at("198.18.0.3", 1), &msg(&[(2, &t(256))]));
        assert!(
            matches!(full, Err(Error::TemplateLimit { what, .. }) if what.contains("in all")),
            "{full:?}"
        );
        assert_eq!(d.templates().total(), (5, 5));
        // Idle sessions (here: any, with a zero idle time) make room.
        d.templates_mut().limits.idle = Duration::ZERO;
        d.templates_mut().last_expiry = None;
        run(&mut d, at("198.18.0.3", 1), &msg(&[(2, &t(256))])).unwrap();
        assert_eq!(d.templates().total(), (1, 1));
        assert_eq!(d.templates().sessions(), 1);
    }
}
