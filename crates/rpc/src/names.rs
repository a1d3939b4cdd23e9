//! Names of programs, procedures and operations, spelled as Wireshark/tshark spells them so
//! that tables and tshark output can be compared by eye.

use crate::nfs4::Op;

/// The well-known name of an RPC program, for the programs the dataset names.
pub fn program_name(prog: u32) -> Option<&'static str> {
    Some(match prog {
        100000 => "PORTMAP",
        100003 => "NFS",
        100005 => "MOUNT",
        100021 => "NLM",
        100024 => "NSM",
        100227 => "NFS_ACL",
        _ => return None,
    })
}

/// RFC 1094 section 2.2; ROOT and WRITECACHE are obsolete but numbered.
const NFS2_PROCS: [&str; 18] = [
    "NULL",
    "GETATTR",
    "SETATTR",
    "ROOT",
    "LOOKUP",
    "READLINK",
    "READ",
    "WRITECACHE",
    "WRITE",
    "CREATE",
    "REMOVE",
    "RENAME",
    "LINK",
    "SYMLINK",
    "MKDIR",
    "RMDIR",
    "READDIR",
    "STATFS",
];

/// NFSv2 procedure name; "unknown" outside 0..=17.
pub fn nfs2_proc_name(proc_: u32) -> &'static str {
    NFS2_PROCS.get(proc_ as usize).copied().unwrap_or("unknown")
}

const NFS3_PROCS: [&str; 22] = [
    "NULL",
    "GETATTR",
    "SETATTR",
    "LOOKUP",
    "ACCESS",
    "READLINK",
    "READ",
    "WRITE",
    "CREATE",
    "MKDIR",
    "SYMLINK",
    "MKNOD",
    "REMOVE",
    "RMDIR",
    "RENAME",
    "LINK",
    "READDIR",
    "READDIRPLUS",
    "FSSTAT",
    "FSINFO",
    "PATHCONF",
    "COMMIT",
];

/// NFSv3 procedure name; "unknown" outside 0..=21.
pub fn nfs3_proc_name(proc_: u32) -> &'static str {
    NFS3_PROCS.get(proc_ as usize).copied().unwrap_or("unknown")
}

pub const NFS4_OP_ILLEGAL: u32 = Op::Illegal as u32;

/// NFSv4 operation name; "unknown" for numbers no minor version defines.
pub fn nfs4_op_name(op: u32) -> &'static str {
    Op::name_of(op)
}

/// NFSv4 procedures (not operations): 0 NULL, 1 COMPOUND.
pub fn nfs4_proc_name(proc_: u32) -> &'static str {
    match proc_ {
        0 => "NULL",
        1 => "COMPOUND",
        _ => "unknown",
    }
}

/// MOUNT procedure name (v1-v3 share 0..=5; v1/v2 add EXPORTALL, v2 PATHCONF).
pub fn mount_proc_name(proc_: u32) -> &'static str {
    match proc_ {
        0 => "NULL",
        1 => "MNT",
        2 => "DUMP",
        3 => "UMNT",
        4 => "UMNTALL",
        5 => "EXPORT",
        6 => "EXPORTALL",
        7 => "PATHCONF",
        _ => "unknown",
    }
}

/// PORTMAP v2 (RFC 1833 section 3) and rpcbind v3/v4 (section 2) procedures.
const PORTMAP2_PROCS: [&str; 6] = ["NULL", "SET", "UNSET", "GETPORT", "DUMP", "CALLIT"];
const RPCBIND3_PROCS: [&str; 9] = [
    "NULL",
    "SET",
    "UNSET",
    "GETADDR",
    "DUMP",
    "CALLIT",
    "GETTIME",
    "UADDR2TADDR",
    "TADDR2UADDR",
];
const RPCBIND4_PROCS: [&str; 13] = [
    "NULL",
    "SET",
    "UNSET",
    "GETADDR",
    "DUMP",
    "BCAST",
    "GETTIME",
    "UADDR2TADDR",
    "TADDR2UADDR",
    "GETVERSADDR",
    "INDIRECT",
    "GETADDRLIST",
    "GETSTAT",
];

/// PORTMAP/rpcbind procedure name by version; "unknown" outside the version's table.
pub fn portmap_proc_name(vers: u32, proc_: u32) -> &'static str {
    let table: &[&'static str] = match vers {
        2 => &PORTMAP2_PROCS,
        3 => &RPCBIND3_PROCS,
        4 => &RPCBIND4_PROCS,
        _ => &[],
    };
    match table.get(proc_ as usize) {
        Some(n) => n,
        None if proc_ == 0 => "NULL",
        None => "unknown",
    }
}

/// NLM procedures (XNFS chapters 10 and 14): v1 (and the never-published v2) define 0..=15,
/// v3 and v4 add 20..=23 (DOS share reservations, the monitor-less lock and FREE_ALL).
const NLM_PROCS: [&str; 16] = [
    "NULL",
    "TEST",
    "LOCK",
    "CANCEL",
    "UNLOCK",
    "GRANTED",
    "TEST_MSG",
    "LOCK_MSG",
    "CANCEL_MSG",
    "UNLOCK_MSG",
    "GRANTED_MSG",
    "TEST_RES",
    "LOCK_RES",
    "CANCEL_RES",
    "UNLOCK_RES",
    "GRANTED_RES",
];

/// NLM procedure name by version; "unknown" outside the version's table.
pub fn nlm_proc_name(vers: u32, proc_: u32) -> &'static str {
    match (vers, proc_) {
        (_, 0..=15) => NLM_PROCS[proc_ as usize],
        (3 | 4, 20) => "SHARE",
        (3 | 4, 21) => "UNSHARE",
        (3 | 4, 22) => "NM_LOCK",
        (3 | 4, 23) => "FREE_ALL",
        _ => "unknown",
    }
}

/// nlm_stats / nlm4_stats as tshark names them (it says NLM_BIG for NLM4_FBIG).
pub fn nlm_stat_name(stat: u32) -> &'static str {
    const NAMES: [&str; 10] = [
        "NLM_GRANTED",
        "NLM_DENIED",
        "NLM_DENIED_NOLOCKS",
        "NLM_BLOCKED",
        "NLM_DENIED_GRACE_PERIOD",
        "NLM_DEADLCK",
        "NLM_ROFS",
        "NLM_STALE_FH",
        "NLM_BIG",
        "NLM_FAILED",
    ];
    NAMES.get(stat as usize).copied().unwrap_or("unknown")
}

/// NSM (status monitor, program 100024 version 1) procedures.
const NSM_PROCS: [&str; 7] = [
    "NULL",
    "STAT",
    "MON",
    "UNMON",
    "UNMON_ALL",
    "SIMU_CRASH",
    "NOTIFY",
];

pub fn nsm_proc_name(proc_: u32) -> &'static str {
    NSM_PROCS.get(proc_ as usize).copied().unwrap_or("unknown")
}

/// NFS_ACL (program 100227) procedures: v2 has GETATTR and ACCESS where v3 uses NFSv3's own.
pub fn nfsacl_proc_name(vers: u32, proc_: u32) -> &'static str {
    const V2: [&str; 6] = [
        "NULL",
        "GETACL",
        "SETACL",
        "GETATTR",
        "ACCESS",
        "GETXATTRDIR",
    ];
    const V3: [&str; 4] = ["NULL", "GETACL", "SETACL", "GETXATTRDIR"];
    let table: &[&'static str] = match vers {
        2 => &V2,
        3 => &V3,
        _ => &["NULL"],
    };
    table.get(proc_ as usize).copied().unwrap_or("unknown")
}

/// A procedure's name for any program this crate knows; "unknown" otherwise.
pub fn proc_name(prog: u32, vers: u32, proc_: u32) -> &'static str {
    match (prog, vers) {
        (100000, _) => portmap_proc_name(vers, proc_),
        (100003, 2) => nfs2_proc_name(proc_),
        (100003, 3) => nfs3_proc_name(proc_),
        (100003, 4) => nfs4_proc_name(proc_),
        (100005, _) => mount_proc_name(proc_),
        (100021, _) => nlm_proc_name(vers, proc_),
        (100024, _) => nsm_proc_name(proc_),
        (100227, _) => nfsacl_proc_name(vers, proc_),
        _ if proc_ == 0 => "NULL",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_numbers_match_the_rfcs() {
        assert_eq!(nfs4_op_name(3), "ACCESS");
        assert_eq!(nfs4_op_name(22), "PUTFH");
        assert_eq!(nfs4_op_name(25), "READ");
        assert_eq!(nfs4_op_name(38), "WRITE");
        assert_eq!(nfs4_op_name(39), "RELEASE_LOCKOWNER");
        assert_eq!(nfs4_op_name(53), "SEQUENCE");
        assert_eq!(nfs4_op_name(58), "RECLAIM_COMPLETE");
        assert_eq!(nfs4_op_name(69), "SEEK");
        assert_eq!(nfs4_op_name(75), "REMOVEXATTR");
        assert_eq!(nfs4_op_name(76), "unknown");
        assert_eq!(nfs4_op_name(2), "unknown");
        assert_eq!(nfs4_op_name(10044), "ILLEGAL");
        assert_eq!(nfs3_proc_name(17), "READDIRPLUS");
        assert_eq!(nfs3_proc_name(21), "COMMIT");
        assert_eq!(nfs3_proc_name(22), "unknown");
        assert_eq!(proc_name(100003, 2, 0), "NULL");
        assert_eq!(proc_name(100003, 2, 8), "WRITE");
        assert_eq!(proc_name(100003, 2, 14), "MKDIR");
        assert_eq!(proc_name(100003, 2, 17), "STATFS");
        assert_eq!(proc_name(100003, 2, 18), "unknown");
    }

    #[test]
    fn portmap_names_follow_rfc_1833() {
        assert_eq!(proc_name(100000, 2, 3), "GETPORT");
        assert_eq!(proc_name(100000, 2, 4), "DUMP");
        assert_eq!(proc_name(100000, 2, 6), "unknown");
        assert_eq!(proc_name(100000, 3, 3), "GETADDR");
        assert_eq!(proc_name(100000, 4, 5), "BCAST");
        assert_eq!(proc_name(100000, 4, 12), "GETSTAT");
        assert_eq!(proc_name(100000, 4, 13), "unknown");
        assert_eq!(proc_name(100000, 9, 0), "NULL");
    }

    #[test]
    fn nlm_nsm_and_acl_names_follow_tshark() {
        assert_eq!(proc_name(100021, 1, 2), "LOCK");
        assert_eq!(proc_name(100021, 4, 12), "LOCK_RES");
        assert_eq!(proc_name(100021, 4, 15), "GRANTED_RES");
        assert_eq!(proc_name(100021, 4, 16), "unknown");
        assert_eq!(proc_name(100021, 3, 20), "SHARE");
        assert_eq!(proc_name(100021, 4, 23), "FREE_ALL");
        assert_eq!(proc_name(100021, 1, 20), "unknown");
        assert_eq!(nlm_stat_name(8), "NLM_BIG");
        assert_eq!(nlm_stat_name(10), "unknown");
        assert_eq!(proc_name(100024, 1, 2), "MON");
        assert_eq!(proc_name(100024, 1, 6), "NOTIFY");
        assert_eq!(proc_name(100024, 1, 7), "unknown");
        assert_eq!(proc_name(100227, 3, 1), "GETACL");
        assert_eq!(proc_name(100227, 3, 4), "unknown");
        assert_eq!(proc_name(100227, 2, 4), "ACCESS");
    }
}
