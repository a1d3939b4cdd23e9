//! The dataset's tables, one row struct each. The struct *is* the schema: field order is
//! column order, field types decide Arrow types (see `columns`). docs/dataset.md describes
//! every column; keep the two in step.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Schema, SchemaRef};

use crate::columns::{Addr, ColumnType, Hex};

/// Raised when a column is removed or retyped; adding a column keeps it.
pub const SCHEMA_VERSION: u32 = 1;

/// A table of the dataset.
pub trait Table: Sized + Send + 'static {
    /// Directory name under the dataset root.
    const NAME: &'static str;
    fn schema() -> SchemaRef;
    fn batch(rows: &[Self]) -> RecordBatch;
    /// Capture time, for sorting and partitioning by hour.
    fn time_ns(&self) -> i64;
    /// Where rows gather before they become a batch.
    type Columns: Columns<Self>;
    /// Columns that get a bloom filter: lookups by key.
    const BLOOM: &'static [&'static str] = &[];
}

/// A table's rows held column by column (see `table!`).
pub trait Columns<T>: Default + Send + 'static {
    fn push(&mut self, row: T);
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Empties every column, keeping its memory.
    fn clear(&mut self);
    fn reserve(&mut self, n: usize);
    fn time_ns(&self) -> &[i64];
    fn batch(&self) -> RecordBatch;
}

macro_rules! table {
    (
        $(#[$meta:meta])*
        $row:ident / $cols:ident = $name:literal, bloom [$($bloom:literal),*] {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct $row {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        /// The same fields, one vector per column: rows pushed here are laid out the way
        /// Arrow wants them, so building a batch reads each column once, in order.
        #[derive(Debug, Default)]
        pub struct $cols {
            $( pub $field: Vec<$ty>, )*
        }

        impl $row {
            fn schema_uncached() -> Schema {
                Schema::new(vec![ $( <$ty as ColumnType>::field(stringify!($field)), )* ])
            }
            fn columns(rows: &[Self]) -> Vec<ArrayRef> {
                vec![ $( <$ty as ColumnType>::array(rows.iter().map(|r| &r.$field)), )* ]
            }
            /// Column names, in order.
            pub const COLUMNS: &'static [&'static str] = &[ $( stringify!($field), )* ];
            pub const BLOOM_COLUMNS: &'static [&'static str] = &[$($bloom),*];
        }

        // The plain tables (catalog, capture stats) are written whole, from rows.
        #[allow(dead_code)]
        impl $cols {
            fn push_row(&mut self, row: $row) {
                $( self.$field.push(row.$field); )*
            }
            fn arrays(&self) -> Vec<ArrayRef> {
                vec![ $( <$ty as ColumnType>::array(self.$field.iter()), )* ]
            }
            fn clear_all(&mut self) {
                $( self.$field.clear(); )*
            }
            fn reserve_all(&mut self, n: usize) {
                $( self.$field.reserve(n); )*
            }
        }
    };
}

macro_rules! timed {
    ($row:ident / $cols:ident = $name:literal) => {
        impl Table for $row {
            const NAME: &'static str = $name;
            const BLOOM: &'static [&'static str] = $row::BLOOM_COLUMNS;
            type Columns = $cols;
            fn schema() -> SchemaRef {
                static SCHEMA: std::sync::OnceLock<SchemaRef> = std::sync::OnceLock::new();
                SCHEMA
                    .get_or_init(|| Arc::new($row::schema_uncached()))
                    .clone()
            }
            fn batch(rows: &[Self]) -> RecordBatch {
                RecordBatch::try_new(Self::schema(), $row::columns(rows))
                    .expect("columns follow the schema by construction")
            }
            fn time_ns(&self) -> i64 {
                self.time_ns
            }
        }

        impl Columns<$row> for $cols {
            fn push(&mut self, row: $row) {
                self.push_row(row)
            }
            fn len(&self) -> usize {
                self.time_ns.len()
            }
            fn clear(&mut self) {
                self.clear_all()
            }
            fn reserve(&mut self, n: usize) {
                self.reserve_all(n)
            }
            fn time_ns(&self) -> &[i64] {
                &self.time_ns
            }
            fn batch(&self) -> RecordBatch {
                RecordBatch::try_new($row::schema(), self.arrays())
                    .expect("columns follow the schema by construction")
            }
        }
    };
}

table! {
    /// One row per captured packet.
    PacketRow / PacketColumns = "packets", bloom [] {
        time_ns: i64,
        file_id: i32,
        record: i64,
        interface: i32,
        /// `in` or `out` as the capturing interface saw the packet; null when unknown.
        direction: Option<&'static str>,
        wire_len: i32,
        cap_len: i32,
        vlan: Option<i32>,
        ip_version: Option<i8>,
        src_addr: Option<Addr>,
        dst_addr: Option<Addr>,
        protocol: Option<i16>,
        src_port: Option<i32>,
        dst_port: Option<i32>,
        tcp_flags: Option<i16>,
        tcp_seq: Option<i64>,
        tcp_ack: Option<i64>,
        ip_fragment: bool,
        flow_id: Option<i64>,
    }
}
timed!(PacketRow / PacketColumns = "packets");

table! {
    /// One row per ONC RPC call or reply.
    RpcRow / RpcColumns = "rpc", bloom ["transaction_id", "xid"] {
        time_ns: i64,
        file_id: i32,
        record: i64,
        transaction_id: i64,
        direction: &'static str,
        transport: &'static str,
        client_addr: Option<Addr>,
        server_addr: Option<Addr>,
        client_port: Option<i32>,
        server_port: Option<i32>,
        xid: i64,
        program: Option<i32>,
        version: Option<i32>,
        procedure: Option<i32>,
        program_name: Option<&'static str>,
        procedure_name: Option<&'static str>,
        reply_stat: Option<i8>,
        accept_stat: Option<i32>,
        reject_stat: Option<i32>,
        auth_stat: Option<i32>,
        auth_flavor: Option<i32>,
        uid: Option<i64>,
        gid: Option<i64>,
        message_len: i32,
        payload_len: i32,
        truncated: bool,
        matched: bool,
        first_time_ns: Option<i64>,
        retransmit: bool,
    }
}
timed!(RpcRow / RpcColumns = "rpc");

table! {
    /// One row per NFS operation (NFSv4: per operation inside a COMPOUND).
    NfsOpRow / NfsOpColumns = "nfs_ops", bloom ["transaction_id", "fh"] {
        time_ns: i64,
        file_id: i32,
        record: i64,
        transaction_id: i64,
        direction: &'static str,
        client_addr: Option<Addr>,
        server_addr: Option<Addr>,
        nfs_version: i8,
        minor_version: Option<i8>,
        op_index: i16,
        op_num: i32,
        operation: &'static str,
        status: Option<i32>,
        fh: Option<Hex>,
    }
}
timed!(NfsOpRow / NfsOpColumns = "nfs_ops");

table! {
    /// Reads and writes.
    NfsRwRow / NfsRwColumns = "nfs_rw", bloom ["transaction_id", "fh"] {
        time_ns: i64,
        file_id: i32,
        record: i64,
        transaction_id: i64,
        direction: &'static str,
        nfs_version: i8,
        op_index: i16,
        operation: &'static str,
        fh: Option<Hex>,
        offset: Option<i64>,
        count: Option<i64>,
        bytes: Option<i64>,
        eof: Option<bool>,
        stable: Option<i8>,
    }
}
timed!(NfsRwRow / NfsRwColumns = "nfs_rw");

table! {
    /// Attributes carried in replies.
    NfsAttrRow / NfsAttrColumns = "nfs_attrs", bloom ["transaction_id", "fh"] {
        time_ns: i64,
        file_id: i32,
        record: i64,
        transaction_id: i64,
        nfs_version: i8,
        operation: &'static str,
        fh: Option<Hex>,
        ftype: Option<i8>,
        mode: Option<i32>,
        nlink: Option<i64>,
        uid: Option<i64>,
        gid: Option<i64>,
        owner: Option<String>,
        owner_group: Option<String>,
        size: Option<i64>,
        used: Option<i64>,
        fileid: Option<i64>,
        atime_ns: Option<i64>,
        mtime_ns: Option<i64>,
        ctime_ns: Option<i64>,
    }
}
timed!(NfsAttrRow / NfsAttrColumns = "nfs_attrs");

table! {
    /// Names seen in directory operations and listings.
    NfsNameRow / NfsNameColumns = "nfs_names", bloom ["transaction_id", "dir_fh", "fh"] {
        time_ns: i64,
        file_id: i32,
        record: i64,
        transaction_id: i64,
        direction: &'static str,
        nfs_version: i8,
        operation: &'static str,
        dir_fh: Option<Hex>,
        name: Option<String>,
        fh: Option<Hex>,
        fileid: Option<i64>,
        to_dir_fh: Option<Hex>,
        to_name: Option<String>,
    }
}
timed!(NfsNameRow / NfsNameColumns = "nfs_names");

table! {
    /// MOUNT protocol calls and replies.
    MountRow / MountColumns = "mount", bloom ["transaction_id"] {
        time_ns: i64,
        file_id: i32,
        record: i64,
        transaction_id: i64,
        direction: &'static str,
        client_addr: Option<Addr>,
        server_addr: Option<Addr>,
        procedure_name: &'static str,
        dirpath: Option<String>,
        status: Option<i32>,
        fh: Option<Hex>,
    }
}
timed!(MountRow / MountColumns = "mount");

table! {
    /// NLM (lock manager) calls, replies and asynchronous messages, one row each.
    NlmOpRow / NlmOpColumns = "nlm_ops", bloom ["transaction_id", "fh"] {
        time_ns: i64,
        file_id: i32,
        record: i64,
        transaction_id: i64,
        direction: &'static str,
        client_addr: Option<Addr>,
        server_addr: Option<Addr>,
        nlm_version: i8,
        procedure: i32,
        operation: &'static str,
        cookie: Option<Hex>,
        caller_name: Option<String>,
        fh: Option<Hex>,
        oh: Option<Hex>,
        svid: Option<i64>,
        exclusive: Option<bool>,
        offset: Option<i64>,
        length: Option<i64>,
        block: Option<bool>,
        reclaim: Option<bool>,
        state: Option<i64>,
        share_mode: Option<i32>,
        share_access: Option<i32>,
        status: Option<i32>,
        status_name: Option<&'static str>,
        holder_exclusive: Option<bool>,
        holder_svid: Option<i64>,
        holder_oh: Option<Hex>,
        holder_offset: Option<i64>,
        holder_length: Option<i64>,
    }
}
timed!(NlmOpRow / NlmOpColumns = "nlm_ops");

table! {
    /// What the capture says about its own loss: one row per source file and interface.
    CaptureStatsRow / CaptureStatsColumns = "capture_stats", bloom [] {
        file_id: i32,
        interface: i32,
        interface_name: Option<String>,
        link_type: i32,
        first_time_ns: Option<i64>,
        last_time_ns: Option<i64>,
        packets: i64,
        received: Option<i64>,
        kernel_dropped: Option<i64>,
        staging_dropped: Option<i64>,
        write_dropped: Option<i64>,
        if_dropped: Option<i64>,
        forward_lost: Option<i64>,
        source: &'static str,
        /// Files and bytes the recorder's retention deleted from the store (on one row per
        /// store, see `capture.rs`).
        files_deleted: Option<i64>,
        bytes_deleted: Option<i64>,
    }
}

table! {
    /// The catalog of source trace files.
    SourceRow / SourceColumns = "sources", bloom [] {
        file_id: i32,
        path: String,
        size: i64,
        mtime_ns: i64,
        format: String,
        packets: i64,
        first_time_ns: Option<i64>,
        last_time_ns: Option<i64>,
        rpc_messages: i64,
    }
}

table! {
    /// The catalog of row groups: where each time and id range lives.
    RowGroupRow / RowGroupColumns = "row_groups", bloom [] {
        table: String,
        path: String,
        row_group: i32,
        rows: i64,
        min_time_ns: i64,
        max_time_ns: i64,
        min_transaction_id: Option<i64>,
        max_transaction_id: Option<i64>,
    }
}

/// Batches for the untimed tables (catalog, capture stats), written whole.
macro_rules! plain {
    ($row:ident) => {
        impl $row {
            pub fn schema() -> SchemaRef {
                Arc::new($row::schema_uncached())
            }
            pub fn batch(rows: &[Self]) -> RecordBatch {
                RecordBatch::try_new(Self::schema(), $row::columns(rows))
                    .expect("columns follow the schema by construction")
            }
        }
    };
}
plain!(CaptureStatsRow);
plain!(SourceRow);
plain!(RowGroupRow);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_match_the_documented_columns() {
        let doc = include_str!("../../../docs/dataset.md");
        for (table, cols) in [
            ("packets", PacketRow::COLUMNS),
            ("rpc", RpcRow::COLUMNS),
            ("nfs_ops", NfsOpRow::COLUMNS),
            ("nfs_rw", NfsRwRow::COLUMNS),
            ("nfs_attrs", NfsAttrRow::COLUMNS),
            ("nfs_names", NfsNameRow::COLUMNS),
            ("mount", MountRow::COLUMNS),
            ("nlm_ops", NlmOpRow::COLUMNS),
            ("capture_stats", CaptureStatsRow::COLUMNS),
            ("sources", SourceRow::COLUMNS),
            ("row_groups", RowGroupRow::COLUMNS),
        ] {
            for c in cols {
                assert!(
                    mentions_word(doc, c),
                    "column {table}.{c} is not described in docs/dataset.md"
                );
            }
        }
    }

    /// `word` appears in `text` not as part of a longer identifier.
    fn mentions_word(text: &str, word: &str) -> bool {
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        text.match_indices(word).any(|(i, _)| {
            let before = text[..i].chars().next_back().is_none_or(|c| !ident(c));
            let after = text[i + word.len()..]
                .chars()
                .next()
                .is_none_or(|c| !ident(c));
            before && after
        })
    }

    #[test]
    fn a_batch_has_one_column_per_field() {
        let rows = vec![PacketRow::default(), PacketRow::default()];
        let b = PacketRow::batch(&rows);
        assert_eq!(b.num_columns(), PacketRow::COLUMNS.len());
        assert_eq!(b.num_rows(), 2);
        let r = RpcRow::batch(&[RpcRow::default()]);
        assert_eq!(r.num_columns(), RpcRow::COLUMNS.len());
    }

    #[test]
    fn columns_hold_the_same_batch_as_rows() {
        let rows: Vec<PacketRow> = (0..5)
            .map(|i| PacketRow {
                time_ns: 10 - i,
                record: i,
                src_addr: (i % 2 == 0).then(|| Addr("198.18.0.1".parse().unwrap())),
                tcp_seq: Some(i * 7),
                ..Default::default()
            })
            .collect();
        let mut cols = PacketColumns::default();
        rows.iter().cloned().for_each(|r| cols.push(r));
        assert_eq!(cols.len(), 5);
        assert_eq!(cols.time_ns(), &[10, 9, 8, 7, 6]);
        assert_eq!(Columns::batch(&cols), PacketRow::batch(&rows));
        cols.clear();
        assert!(cols.is_empty());
    }
}
