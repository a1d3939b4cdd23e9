//! ONC RPC (RFC 5531) and NFSv2 / NFSv3 / NFSv4 / MOUNT / NLM / NSM / NFS_ACL message decoding
//! over XDR.
//!
//! Input is one complete RPC message (a UDP payload, or a TCP record without its record mark);
//! reassembly is the caller's job. [`parse_message`] reads the RPC header; [`decode_message`] (or
//! [`decode`] with explicit program/version/procedure) turns the body into plain records
//! ([`Decoded`]) for the dataset tables. Nothing here panics on hostile bytes, and nothing
//! allocates more than the input's length can justify.
//!
//! Each side of a transaction reports only what it carries: a call has arguments (file handles,
//! offsets, names), a reply has status, results and attributes. The converter joins them by xid
//! (and, within an NFSv4 COMPOUND, by operation index); [`resolve_names`] does the one join that
//! needs both sides.

pub mod mount;
pub mod names;
pub mod nfs2;
pub mod nfs3;
pub mod nfs4;
pub mod nfsacl;
pub mod nlm;
pub mod nsm;
pub mod rpc;
pub mod xdr;

pub use names::program_name;
pub use rpc::{
    parse_message, Auth, AuthSys, CallHeader, Direction, GssCred, Header, ReplyHeader, RpcMessage,
};

pub const PROG_PORTMAP: u32 = 100000;
pub const PROG_NFS: u32 = 100003;
pub const PROG_MOUNT: u32 = 100005;
pub const PROG_NLM: u32 = 100021;
pub const PROG_NSM: u32 = 100024;
pub const PROG_NFS_ACL: u32 = 100227;

/// Why bytes could not be decoded. `Truncated` means more bytes would have helped (a cut
/// capture, or a TCP record not complete yet); `Invalid` means they never will.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("message truncated")]
    Truncated,
    #[error("invalid message: {0}")]
    Invalid(&'static str),
}

/// What a reply needs to know about its call, which the caller remembers per xid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallInfo {
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    /// From [`CallHeader::gss_wrapped`]: the reply's body is wrapped too.
    pub gss_wrapped: bool,
}

impl CallHeader<'_> {
    pub fn info(&self) -> CallInfo {
        CallInfo {
            prog: self.prog,
            vers: self.vers,
            proc_: self.proc_,
            gss_wrapped: self.gss_wrapped(),
        }
    }
}

/// Whether the body was decoded, and if not, why not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Outcome {
    /// Decoded (possibly partly: see [`Decoded::truncated`] and [`Decoded::invalid`]).
    #[default]
    Decoded,
    /// A program or version without a body decoder (portmap, ...).
    Unsupported,
    /// RPCSEC_GSS integrity/privacy or a GSS context procedure: the body is not plain XDR args.
    GssWrapped,
    /// A reply whose call was not seen: its procedure is unknown.
    NoCall,
    /// A reply that was not accepted with SUCCESS carries no results.
    NoResults,
}

/// The records one message's body yields. Empty vectors mean "nothing of that kind".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    pub outcome: Outcome,
    /// The body ended before the decoder was done; everything read before the cut is kept.
    pub truncated: bool,
    /// The body broke the protocol at some point; everything read before it is kept.
    pub invalid: Option<&'static str>,
    /// NFSv4 COMPOUND header (tag, minorversion on calls, overall status on replies).
    pub compound: Option<Compound>,
    /// NFSv2/v3: one entry for the procedure. NFSv4: one per operation of the COMPOUND, in order,
    /// up to where decoding stopped.
    pub ops: Vec<NfsOp>,
    pub mount: Option<MountRecord>,
    pub nlm: Option<NlmRecord>,
    pub nsm: Option<NsmRecord>,
    pub acl: Option<AclRecord>,
    /// NFSv4: the opcode whose arguments/results this decoder cannot walk past; the ops after it
    /// in the COMPOUND are not listed (the op itself is, with its status on replies).
    pub undecoded_op: Option<u32>,
    /// fattr4 attribute lists whose walk stopped early because an attribute without a decoder
    /// (or a malformed one) came first; the attributes before it are kept. Lists cut by the end
    /// of the message count as `truncated` instead.
    pub unknown_attr_lists: u32,
}

/// One NFSv2/v3 procedure's body decoded by `walk` into a single op named by `name`; a
/// procedure number above `last` is invalid (`out_of_range` says so).
pub(crate) fn decode_procedure(
    proc_: u32,
    body: &[u8],
    (last, out_of_range): (u32, &'static str),
    name: fn(u32) -> &'static str,
    walk: fn(u32, &mut xdr::Xdr<'_>, &mut NfsOp) -> Result<(), Error>,
) -> Decoded {
    let mut d = Decoded::default();
    let mut op = NfsOp {
        op: proc_,
        op_name: name(proc_),
        ..Default::default()
    };
    let mut x = xdr::Xdr::new(body);
    let r = if proc_ > last {
        Err(Error::Invalid(out_of_range))
    } else {
        walk(proc_, &mut x, &mut op)
    };
    d.ops.push(op);
    d.finish(r, &x);
    d
}

/// The NFSv4 COMPOUND envelope.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compound {
    pub tag: Vec<u8>,
    /// Calls only.
    pub minorversion: Option<u32>,
    /// Replies only: the status of the last operation executed.
    pub status: Option<u32>,
    /// The operation count on the wire (may exceed `ops.len()` when decoding stopped).
    pub num_ops: u32,
}

/// One NFS operation: an NFSv2/v3 procedure or one NFSv4 COMPOUND operation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NfsOp {
    /// Position in the COMPOUND (always 0 for NFSv2/v3).
    pub index: u16,
    /// NFSv2/v3 procedure number or NFSv4 opcode.
    pub op: u32,
    pub op_name: &'static str,
    /// nfsstat (v2) / nfsstat3 / nfsstat4, replies only.
    pub status: Option<u32>,
    /// Calls: the file handle the operation acts on (NFSv2/v3: the first handle argument, the
    /// directory for name operations; NFSv4: the current filehandle on entry, or PUTFH's argument).
    /// Replies: the handle the operation yields (NFSv2/v3 LOOKUP/CREATE/... object; NFSv4: the current
    /// filehandle after the operation, when a later GETFH in the same reply reveals it).
    pub fh: Option<Vec<u8>>,
    /// NFSv4 stateid argument or result (READ, WRITE, OPEN, CLOSE, LOCK, ...).
    pub stateid: Option<[u8; 16]>,
    pub rw: Option<ReadWrite>,
    pub attrs: Vec<Attrs>,
    pub names: Vec<NameEntry>,
}

/// READ / WRITE / COMMIT details. Calls carry offset/count/stable, replies count/eof/committed.
/// READDIR/READDIRPLUS (v2, v3 and v4) report their `eof` here too, and NFSv2/v3 READDIR its
/// count. NFSv2 has no stable, committed or READ eof, and its WRITE reply no count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadWrite {
    pub offset: Option<u64>,
    /// Bytes requested (READ, COMMIT, NFSv2/v3 READDIR) or offered (WRITE; NFSv2: the data's
    /// length).
    pub count: Option<u32>,
    /// Bytes actually returned (READ reply; NFSv2: the data's length) or written (WRITE reply).
    pub returned: Option<u32>,
    pub eof: Option<bool>,
    /// stable_how (WRITE call): 0 UNSTABLE, 1 DATA_SYNC, 2 FILE_SYNC.
    pub stable: Option<u32>,
    /// stable_how committed (WRITE reply).
    pub committed: Option<u32>,
}

/// Which object an [`Attrs`] describes, relative to its operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttrObject {
    /// The object itself (GETATTR, the looked-up or created object, the file read or written).
    #[default]
    Object,
    /// The directory of a name operation (LOOKUP dir_attributes, CREATE/REMOVE dir wcc, READDIR).
    Directory,
    /// RENAME's source directory (fromdir_wcc).
    FromDirectory,
    /// RENAME's target directory (todir_wcc).
    ToDirectory,
    /// The directory entry at this index of the operation's `names` (READDIRPLUS, NFSv4 READDIR).
    Entry(u32),
}

/// File attributes from an NFSv2 fattr, an NFSv3 fattr3 (post_op_attr, wcc after-attributes) or
/// an NFSv4 fattr4. Times are nanoseconds since the epoch (NFSv2's microseconds times 1000).
/// NFSv2/v3 fsid goes into `fsid.0` with `fsid.1 = 0`, NFSv2 rdev into `rdev.0` with `rdev.1 = 0`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    pub object: AttrObject,
    /// ftype3 / nfs_ftype4 (1 regular, 2 directory, 3 block, 4 char, 5 symlink, 6 socket, 7 fifo);
    /// NFSv2 ftype as sent (1 to 5 the same; RFC 1094 defines no others, implementations send
    /// 6 socket, 7 bad, 8 fifo).
    pub ftype: Option<u32>,
    pub mode: Option<u32>,
    pub nlink: Option<u32>,
    /// NFSv2/v3 uid/gid; NFSv4: the owner/owner_group strings when they are plain numbers.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// NFSv4 owner and owner_group strings, as sent.
    pub owner: Option<Vec<u8>>,
    pub owner_group: Option<Vec<u8>>,
    pub size: Option<u64>,
    /// Bytes used (NFSv3 used, NFSv4 space_used); NFSv2 says `blocks` instead.
    pub used: Option<u64>,
    /// NFSv2 only: the block size, and the number of blocks the file takes (RFC 1094 leaves
    /// their product's meaning to the server, so no `used` is made of them).
    pub blocksize: Option<u32>,
    pub blocks: Option<u32>,
    pub rdev: Option<(u32, u32)>,
    pub fsid: Option<(u64, u64)>,
    pub fileid: Option<u64>,
    pub atime_ns: Option<i64>,
    pub mtime_ns: Option<i64>,
    pub ctime_ns: Option<i64>,
    /// NFSv4 change attribute.
    pub change: Option<u64>,
    /// NFSv4 filehandle attribute (READDIR entries that asked for it).
    pub fh: Option<Vec<u8>>,
}

/// Which part a name plays in its operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NameRole {
    /// The name the operation looks up, creates, removes, links or opens.
    #[default]
    Target,
    RenameFrom,
    RenameTo,
    /// An entry of a READDIR / READDIRPLUS reply.
    DirEntry,
}

/// A (directory, name) pair seen on the wire, with what is known about the object it names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NameEntry {
    pub role: NameRole,
    /// The directory handle, when this side of the transaction knows it.
    pub dir_fh: Option<Vec<u8>>,
    pub name: Vec<u8>,
    /// The object's handle: LINK's source file, READDIRPLUS entries, NFSv4 READDIR entries that
    /// asked for the filehandle attribute; see [`resolve_names`] for the rest.
    pub fh: Option<Vec<u8>>,
    pub fileid: Option<u64>,
    pub cookie: Option<u64>,
}

/// A MOUNT protocol call or reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountRecord {
    pub proc_: u32,
    pub proc_name: &'static str,
    /// MNT and UMNT calls.
    pub dirpath: Option<Vec<u8>>,
    /// MNT replies: mountstat3 (v3) or the fhstatus status (v1).
    pub status: Option<u32>,
    pub fh: Option<Vec<u8>>,
    pub auth_flavors: Vec<u32>,
    /// EXPORT replies.
    pub exports: Vec<Export>,
    /// DUMP replies: (hostname, directory).
    pub mounts: Vec<(Vec<u8>, Vec<u8>)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Export {
    pub dir: Vec<u8>,
    pub groups: Vec<Vec<u8>>,
}

/// An NLM call, reply or asynchronous message. Calls carry the lock (or share) and its
/// flags, replies and `_RES` messages the status; fields the message does not carry are None.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NlmRecord {
    pub vers: u32,
    pub proc_: u32,
    pub proc_name: &'static str,
    /// The netobj a client picks to match replies and `_RES` messages to its requests.
    pub cookie: Option<Vec<u8>>,
    pub block: Option<bool>,
    pub exclusive: Option<bool>,
    pub reclaim: Option<bool>,
    /// The caller's NSM state (LOCK, NM_LOCK), or FREE_ALL's.
    pub state: Option<u32>,
    /// The lock's (or share's) caller; FREE_ALL's host.
    pub caller_name: Option<Vec<u8>>,
    pub fh: Option<Vec<u8>>,
    /// The lock owner handle.
    pub oh: Option<Vec<u8>>,
    /// The owner's process id on the caller.
    pub svid: Option<u32>,
    /// 32 bits in v1/v3, 64 in v4. A length of 0 means "to the end of the file".
    pub offset: Option<u64>,
    pub length: Option<u64>,
    /// SHARE/UNSHARE: fsh_mode (deny) and fsh_access.
    pub share_mode: Option<u32>,
    pub share_access: Option<u32>,
    /// nlm_stats / nlm4_stats: replies and `_RES` messages.
    pub status: Option<u32>,
    /// SHARE/UNSHARE replies.
    pub sequence: Option<u32>,
    /// TEST (and TEST_RES) denied: the conflicting lock.
    pub holder: Option<NlmHolder>,
}

/// nlm_holder: who holds the lock a TEST ran into.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NlmHolder {
    pub exclusive: Option<bool>,
    pub svid: Option<u32>,
    pub oh: Option<Vec<u8>>,
    pub offset: Option<u64>,
    pub length: Option<u64>,
}

/// An NSM (status monitor) call or reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NsmRecord {
    pub proc_: u32,
    pub proc_name: &'static str,
    /// The host watched (STAT, MON, UNMON) or the host that changed state (NOTIFY).
    pub mon_name: Option<Vec<u8>>,
    /// MON/UNMON/UNMON_ALL: who to call back, and with which RPC procedure.
    pub my_name: Option<Vec<u8>>,
    pub my_prog: Option<u32>,
    pub my_vers: Option<u32>,
    pub my_proc: Option<u32>,
    /// STAT/MON replies: 0 STAT_SUCC, 1 STAT_FAIL.
    pub result: Option<u32>,
    /// The monitor's state number (replies), or the notifying host's (NOTIFY).
    pub state: Option<u32>,
}

/// An NFS_ACL call or reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AclRecord {
    pub vers: u32,
    pub proc_: u32,
    pub proc_name: &'static str,
    /// Calls: the object; GETXATTRDIR replies: the attribute directory.
    pub fh: Option<Vec<u8>>,
    /// Which parts of the ACL are asked for or carried (1 entries, 2 count, 4 default
    /// entries, 8 default count).
    pub mask: Option<u32>,
    /// nfsstat (v2) / nfsstat3 (v3), replies only.
    pub status: Option<u32>,
    /// The access ACL's and the default ACL's entry counts.
    pub acl_count: Option<u32>,
    pub default_acl_count: Option<u32>,
    /// v2 ACCESS: the bits asked for (calls) or granted (replies).
    pub access: Option<u32>,
    pub attrs: Vec<Attrs>,
}

impl Decoded {
    fn with_outcome(outcome: Outcome) -> Self {
        Decoded {
            outcome,
            ..Default::default()
        }
    }

    /// Records how a decoder ended: truncation and invalid content keep what was read.
    fn finish(&mut self, r: Result<(), Error>, x: &xdr::Xdr<'_>) {
        match r {
            Ok(()) => self.truncated |= x.padding_cut(),
            Err(Error::Truncated) => self.truncated = true,
            Err(Error::Invalid(why)) => self.invalid = Some(why),
        }
    }
}

/// Decodes a message body given its program, version and procedure (for replies: the call's).
/// NFS v2/v3/v4, MOUNT v1/v2/v3, NLM v1-v4, NSM v1 and NFS_ACL v2/v3 have decoders; everything
/// else is [`Outcome::Unsupported`].
pub fn decode(prog: u32, vers: u32, proc_: u32, direction: Direction, body: &[u8]) -> Decoded {
    match (prog, vers, direction) {
        (PROG_NFS, 2, Direction::Call) => nfs2::decode_call(proc_, body),
        (PROG_NFS, 2, Direction::Reply) => nfs2::decode_reply(proc_, body),
        (PROG_NFS, 3, Direction::Call) => nfs3::decode_call(proc_, body),
        (PROG_NFS, 3, Direction::Reply) => nfs3::decode_reply(proc_, body),
        (PROG_NFS, 4, Direction::Call) => nfs4::decode_call(proc_, body),
        (PROG_NFS, 4, Direction::Reply) => nfs4::decode_reply(proc_, body),
        (PROG_MOUNT, 1..=3, Direction::Call) => mount::decode_call(vers, proc_, body),
        (PROG_MOUNT, 1..=3, Direction::Reply) => mount::decode_reply(vers, proc_, body),
        (PROG_NLM, 1..=4, Direction::Call) => nlm::decode_call(vers, proc_, body),
        (PROG_NLM, 1..=4, Direction::Reply) => nlm::decode_reply(vers, proc_, body),
        (PROG_NSM, 1, Direction::Call) => nsm::decode_call(proc_, body),
        (PROG_NSM, 1, Direction::Reply) => nsm::decode_reply(proc_, body),
        (PROG_NFS_ACL, 2..=3, Direction::Call) => nfsacl::decode_call(vers, proc_, body),
        (PROG_NFS_ACL, 2..=3, Direction::Reply) => nfsacl::decode_reply(vers, proc_, body),
        _ => Decoded::with_outcome(Outcome::Unsupported),
    }
}

/// Decodes a parsed message's body. A reply needs its call's [`CallInfo`] (remembered by xid);
/// for a call, `call` is ignored.
pub fn decode_message(msg: &RpcMessage<'_>, call: Option<CallInfo>) -> Decoded {
    let info = match &msg.header {
        Header::Call(c) => c.info(),
        Header::Reply(r) => {
            let Some(info) = call else {
                return Decoded::with_outcome(Outcome::NoCall);
            };
            if r.accept_stat != Some(0) {
                return Decoded::with_outcome(Outcome::NoResults);
            }
            info
        }
    };
    if info.gss_wrapped {
        return Decoded::with_outcome(Outcome::GssWrapped);
    }
    decode(info.prog, info.vers, info.proc_, msg.direction(), msg.body)
}

/// The call's names with their object handles filled in from the reply where the reply tells
/// them: NFSv2 LOOKUP/CREATE/MKDIR and NFSv3 LOOKUP/CREATE/MKDIR/SYMLINK/MKNOD object handles, and NFSv4 LOOKUP/OPEN/CREATE
/// results revealed by a GETFH later in the COMPOUND. Ops are matched by index. An NFSv4
/// reply answers its COMPOUND's operations only up to the first that failed; names of the
/// operations after it (the server never ran them) are left out.
pub fn resolve_names(call: &Decoded, reply: &Decoded) -> Vec<NameEntry> {
    let mut out = Vec::new();
    // The reply's operation count on the wire, so ops the decoder could not walk count too.
    let answered = |index: u16| {
        reply
            .compound
            .as_ref()
            .is_none_or(|c| u32::from(index) < c.num_ops)
    };
    for op in call.ops.iter().filter(|op| answered(op.index)) {
        let reply_op = reply
            .ops
            .iter()
            .find(|r| r.index == op.index && r.op == op.op);
        for n in &op.names {
            let mut n = n.clone();
            if n.fh.is_none() && n.role == NameRole::Target {
                n.fh = reply_op.and_then(|r| r.fh.clone());
            }
            out.push(n);
        }
    }
    out
}

/// Nanoseconds since the epoch, or None when they do not fit in an i64 (years beyond 2262).
fn time_ns(sec: i64, nsec: u32) -> Option<i64> {
    sec.checked_mul(1_000_000_000)?.checked_add(nsec as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_names_unsupported_programs() {
        for prog in [PROG_PORTMAP, PROG_NLM, PROG_NSM, PROG_NFS_ACL] {
            assert!(program_name(prog).is_some());
        }
        assert_eq!(
            decode(PROG_PORTMAP, 2, 1, Direction::Call, &[]).outcome,
            Outcome::Unsupported
        );
        for (prog, vers) in [(PROG_NLM, 5), (PROG_NSM, 2), (PROG_NFS_ACL, 1)] {
            assert_eq!(
                decode(prog, vers, 1, Direction::Call, &[]).outcome,
                Outcome::Unsupported
            );
        }
        let nlm = decode(PROG_NLM, 4, 2, Direction::Call, &[]);
        assert_eq!((nlm.outcome, nlm.truncated), (Outcome::Decoded, true));
        assert_eq!(nlm.nlm.unwrap().proc_name, "LOCK");
        assert_eq!(
            decode(PROG_NFS, 5, 1, Direction::Call, &[]).outcome,
            Outcome::Unsupported
        );
        assert_eq!(
            decode(PROG_NFS, 2, 1, Direction::Call, &[]).outcome,
            Outcome::Decoded
        );
    }

    #[test]
    fn replies_need_their_call_and_success() {
        let reply = [
            0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let m = parse_message(&reply).unwrap();
        assert_eq!(decode_message(&m, None).outcome, Outcome::NoCall);
        let info = CallInfo {
            prog: PROG_NFS,
            vers: 3,
            proc_: 0,
            gss_wrapped: false,
        };
        let d = decode_message(&m, Some(info));
        assert_eq!(d.outcome, Outcome::Decoded);
        assert_eq!(d.ops[0].op_name, "NULL");
        let wrapped = CallInfo {
            gss_wrapped: true,
            ..info
        };
        assert_eq!(
            decode_message(&m, Some(wrapped)).outcome,
            Outcome::GssWrapped
        );
        let garbage_args = [
            0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4,
        ];
        let m = parse_message(&garbage_args).unwrap();
        assert_eq!(decode_message(&m, Some(info)).outcome, Outcome::NoResults);
    }

    #[test]
    fn v4_reply_names_stop_at_the_failed_operation() {
        // PUTROOTFH; LOOKUP "a"; LOOKUP "b"; LOOKUP "c" answered up to "b" (NFS4ERR_NOENT).
        let lookup = |index: u16, name: &[u8]| NfsOp {
            index,
            op: 15,
            op_name: "LOOKUP",
            names: vec![NameEntry {
                name: name.to_vec(),
                ..NameEntry::default()
            }],
            ..NfsOp::default()
        };
        let call = Decoded {
            compound: Some(Compound {
                num_ops: 4,
                ..Compound::default()
            }),
            ops: vec![
                NfsOp::default(),
                lookup(1, b"a"),
                lookup(2, b"b"),
                lookup(3, b"c"),
            ],
            ..Decoded::default()
        };
        let reply = Decoded {
            compound: Some(Compound {
                num_ops: 3,
                status: Some(2),
                ..Compound::default()
            }),
            ops: vec![NfsOp::default(), lookup(1, b""), lookup(2, b"")],
            ..Decoded::default()
        };
        let names: Vec<Vec<u8>> = resolve_names(&call, &reply)
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(names, vec![b"a".to_vec(), b"b".to_vec()]);
    }

    #[test]
    fn time_ns_saturates_to_none() {
        assert_eq!(time_ns(1, 5), Some(1_000_000_005));
        assert_eq!(time_ns(-1, 0), Some(-1_000_000_000));
        assert_eq!(time_ns(i64::MAX, 0), None);
    }
}
