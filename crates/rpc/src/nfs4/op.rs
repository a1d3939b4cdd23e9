//! The NFSv4 operations, one line each in opcode order: number, the name tshark and our tables
//! use, and the functions that walk the operation's arguments and results.

use super::{args, results};

macro_rules! operations {
    ($($(#[$doc:meta])* $num:literal $variant:ident $name:literal $args:path, $results:path;)*) => {
        /// An NFSv4 operation code (`nfs_opnum4`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Op {
            $($(#[$doc])* $variant = $num,)*
        }

        impl Op {
            /// The operation with this number, if a minor version defines one.
            pub fn from_u32(n: u32) -> Option<Op> {
                match n {
                    $($num => Some(Op::$variant),)*
                    _ => None,
                }
            }

            /// The operation's name as the RFCs and tshark spell it (`OPEN_CONFIRM`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Op::$variant => $name,)*
                }
            }

            /// The name of operation number `n`; "unknown" for numbers no minor version
            /// defines.
            pub fn name_of(n: u32) -> &'static str {
                Op::from_u32(n).map_or("unknown", Op::name)
            }

            /// Walks the operation's arguments in a call.
            pub(super) fn args(self) -> args::Args {
                match self {
                    $(Op::$variant => $args,)*
                }
            }

            /// Walks the operation's results in a reply (after its status).
            pub(super) fn results(self) -> results::Results {
                match self {
                    $(Op::$variant => $results,)*
                }
            }
        }
    };
}

operations! {
    // NFSv4.0, RFC 7530 section 16
    3 Access "ACCESS" args::access, results::access;
    4 Close "CLOSE" args::close, results::close;
    5 Commit "COMMIT" args::commit, results::commit;
    6 Create "CREATE" args::create, results::create;
    7 Delegpurge "DELEGPURGE" args::delegpurge, results::none;
    8 Delegreturn "DELEGRETURN" args::delegreturn, results::none;
    9 Getattr "GETATTR" args::getattr, results::getattr;
    10 Getfh "GETFH" args::none, results::getfh;
    11 Link "LINK" args::link, results::link;
    12 Lock "LOCK" args::lock, results::lock;
    13 Lockt "LOCKT" args::lockt, results::lockt;
    14 Locku "LOCKU" args::locku, results::locku;
    15 Lookup "LOOKUP" args::lookup, results::none;
    16 Lookupp "LOOKUPP" args::lookupp, results::none;
    17 Nverify "NVERIFY" args::nverify, results::none;
    18 Open "OPEN" args::open, results::open;
    19 Openattr "OPENATTR" args::openattr, results::none;
    20 OpenConfirm "OPEN_CONFIRM" args::open_confirm, results::open_confirm;
    21 OpenDowngrade "OPEN_DOWNGRADE" args::open_downgrade, results::open_downgrade;
    22 Putfh "PUTFH" args::putfh, results::none;
    23 Putpubfh "PUTPUBFH" args::putpubfh, results::none;
    24 Putrootfh "PUTROOTFH" args::putrootfh, results::none;
    25 Read "READ" args::read, results::read;
    26 Readdir "READDIR" args::readdir, results::readdir;
    27 Readlink "READLINK" args::none, results::readlink;
    28 Remove "REMOVE" args::remove, results::remove;
    29 Rename "RENAME" args::rename, results::rename;
    30 Renew "RENEW" args::renew, results::none;
    31 Restorefh "RESTOREFH" args::restorefh, results::none;
    32 Savefh "SAVEFH" args::savefh, results::savefh;
    33 Secinfo "SECINFO" args::secinfo, results::secinfo;
    34 Setattr "SETATTR" args::setattr, results::setattr;
    35 Setclientid "SETCLIENTID" args::setclientid, results::setclientid;
    36 SetclientidConfirm "SETCLIENTID_CONFIRM" args::setclientid_confirm, results::none;
    37 Verify "VERIFY" args::verify, results::none;
    38 Write "WRITE" args::write, results::write;
    39 ReleaseLockowner "RELEASE_LOCKOWNER" args::release_lockowner, results::none;
    // NFSv4.1, RFC 8881 section 18
    40 BackchannelCtl "BACKCHANNEL_CTL" args::backchannel_ctl, results::none;
    41 BindConnToSession "BIND_CONN_TO_SESSION" args::bind_conn_to_session, results::bind_conn_to_session;
    42 ExchangeId "EXCHANGE_ID" args::exchange_id, results::exchange_id;
    43 CreateSession "CREATE_SESSION" args::create_session, results::create_session;
    44 DestroySession "DESTROY_SESSION" args::destroy_session, results::none;
    45 FreeStateid "FREE_STATEID" args::free_stateid, results::none;
    46 GetDirDelegation "GET_DIR_DELEGATION" args::get_dir_delegation, results::get_dir_delegation;
    47 Getdeviceinfo "GETDEVICEINFO" args::getdeviceinfo, results::getdeviceinfo;
    48 Getdevicelist "GETDEVICELIST" args::getdevicelist, results::getdevicelist;
    49 Layoutcommit "LAYOUTCOMMIT" args::layoutcommit, results::layoutcommit;
    50 Layoutget "LAYOUTGET" args::layoutget, results::layoutget;
    51 Layoutreturn "LAYOUTRETURN" args::layoutreturn, results::layoutreturn;
    52 SecinfoNoName "SECINFO_NO_NAME" args::secinfo_no_name, results::secinfo;
    53 Sequence "SEQUENCE" args::sequence, results::sequence;
    54 SetSsv "SET_SSV" args::set_ssv, results::set_ssv;
    55 TestStateid "TEST_STATEID" args::test_stateid, results::test_stateid;
    56 WantDelegation "WANT_DELEGATION" args::want_delegation, results::want_delegation;
    57 DestroyClientid "DESTROY_CLIENTID" args::destroy_clientid, results::none;
    58 ReclaimComplete "RECLAIM_COMPLETE" args::reclaim_complete, results::none;
    // NFSv4.2, RFC 7862 section 15
    59 Allocate "ALLOCATE" args::allocate, results::none;
    60 Copy "COPY" args::not_walked, results::not_walked;
    61 CopyNotify "COPY_NOTIFY" args::not_walked, results::not_walked;
    62 Deallocate "DEALLOCATE" args::allocate, results::none;
    63 IoAdvise "IO_ADVISE" args::io_advise, results::io_advise;
    64 Layouterror "LAYOUTERROR" args::not_walked, results::none;
    65 Layoutstats "LAYOUTSTATS" args::not_walked, results::none;
    66 OffloadCancel "OFFLOAD_CANCEL" args::offload_cancel, results::none;
    67 OffloadStatus "OFFLOAD_STATUS" args::offload_status, results::offload_status;
    68 ReadPlus "READ_PLUS" args::read, results::read_plus;
    69 Seek "SEEK" args::seek, results::seek;
    70 WriteSame "WRITE_SAME" args::not_walked, results::not_walked;
    71 Clone "CLONE" args::clone, results::none;
    // Extended attributes, RFC 8276 section 8.4
    72 Getxattr "GETXATTR" args::getxattr, results::getxattr;
    73 Setxattr "SETXATTR" args::setxattr, results::setxattr;
    74 Listxattrs "LISTXATTRS" args::listxattrs, results::listxattrs;
    75 Removexattr "REMOVEXATTR" args::getxattr, results::setxattr;
    /// The reply to an operation number the server does not know (RFC 7530 section 16.37).
    10044 Illegal "ILLEGAL" args::none, results::none;
}

impl Op {
    /// The op leaves a current filehandle that its reply does not state (until a GETFH does).
    pub(super) fn sets_unknown_fh(self) -> bool {
        use Op::*;
        matches!(
            self,
            Create | Lookup | Lookupp | Open | Openattr | Putfh | Putpubfh | Putrootfh | Restorefh
        )
    }

    /// The op's reply carries results even when its status is an error (LOCK's and LOCKT's
    /// LOCK4denied, SETATTR's attrsset, SETCLIENTID's clientaddr on NFS4ERR_CLID_INUSE, ...).
    pub(super) fn results_on_error(self) -> bool {
        use Op::*;
        matches!(
            self,
            Lock | Lockt | Setattr | Setclientid | GetDirDelegation | Getdeviceinfo | Layoutget
        )
    }
}
