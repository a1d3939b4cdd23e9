"""The dataset contract (docs/dataset.md, schema version 1) as Arrow schemas.

The reader checks files against it and the test fixtures are written from it, so a change to the
contract is made here once.
"""

import pyarrow as pa

SCHEMA_VERSION = 1

i8, i16, i32, i64 = pa.int8(), pa.int16(), pa.int32(), pa.int64()
s, b = pa.string(), pa.bool_()

_ids = [("time_ns", i64), ("file_id", i32), ("record", i64)]

TABLES: dict[str, pa.Schema] = {
    "packets": pa.schema(
        _ids
        + [
            ("interface", i32),
            ("direction", s),
            ("wire_len", i32),
            ("cap_len", i32),
            ("vlan", i32),
            ("ip_version", i8),
            ("src_addr", s),
            ("dst_addr", s),
            ("protocol", i16),
            ("src_port", i32),
            ("dst_port", i32),
            ("tcp_flags", i16),
            ("tcp_seq", i64),
            ("tcp_ack", i64),
            ("ip_fragment", b),
            ("flow_id", i64),
        ]
    ),
    "rpc": pa.schema(
        _ids
        + [
            ("transaction_id", i64),
            ("direction", s),
            ("transport", s),
            ("client_addr", s),
            ("server_addr", s),
            ("client_port", i32),
            ("server_port", i32),
            ("xid", i64),
            ("program", i32),
            ("version", i32),
            ("procedure", i32),
            ("program_name", s),
            ("procedure_name", s),
            ("reply_stat", i8),
            ("accept_stat", i32),
            ("reject_stat", i32),
            ("auth_stat", i32),
            ("auth_flavor", i32),
            ("uid", i64),
            ("gid", i64),
            ("message_len", i32),
            ("payload_len", i32),
            ("truncated", b),
            ("matched", b),
            ("first_time_ns", i64),
            ("retransmit", b),
        ]
    ),
    "nfs_ops": pa.schema(
        _ids
        + [
            ("transaction_id", i64),
            ("direction", s),
            ("client_addr", s),
            ("server_addr", s),
            ("nfs_version", i8),
            ("minor_version", i8),
            ("op_index", i16),
            ("op_num", i32),
            ("operation", s),
            ("status", i32),
            ("fh", s),
        ]
    ),
    "nfs_rw": pa.schema(
        _ids
        + [
            ("transaction_id", i64),
            ("direction", s),
            ("nfs_version", i8),
            ("op_index", i16),
            ("operation", s),
            ("fh", s),
            ("offset", i64),
            ("count", i64),
            ("bytes", i64),
            ("eof", b),
            ("stable", i8),
        ]
    ),
    "nfs_attrs": pa.schema(
        _ids
        + [
            ("transaction_id", i64),
            ("nfs_version", i8),
            ("operation", s),
            ("fh", s),
            ("ftype", i8),
            ("mode", i32),
            ("nlink", i64),
            ("uid", i64),
            ("gid", i64),
            ("owner", s),
            ("owner_group", s),
            ("size", i64),
            ("used", i64),
            ("fileid", i64),
            ("atime_ns", i64),
            ("mtime_ns", i64),
            ("ctime_ns", i64),
        ]
    ),
    "nfs_names": pa.schema(
        _ids
        + [
            ("transaction_id", i64),
            ("direction", s),
            ("nfs_version", i8),
            ("operation", s),
            ("dir_fh", s),
            ("name", s),
            ("fh", s),
            ("fileid", i64),
            ("to_dir_fh", s),
            ("to_name", s),
        ]
    ),
    "mount": pa.schema(
        _ids
        + [
            ("transaction_id", i64),
            ("direction", s),
            ("client_addr", s),
            ("server_addr", s),
            ("procedure_name", s),
            ("dirpath", s),
            ("status", i32),
            ("fh", s),
        ]
    ),
    "nlm_ops": pa.schema(
        _ids
        + [
            ("transaction_id", i64),
            ("direction", s),
            ("client_addr", s),
            ("server_addr", s),
            ("nlm_version", i8),
            ("procedure", i32),
            ("operation", s),
            ("cookie", s),
            ("caller_name", s),
            ("fh", s),
            ("oh", s),
            ("svid", i64),
            ("exclusive", b),
            ("offset", i64),
            ("length", i64),
            ("block", b),
            ("reclaim", b),
            ("state", i64),
            ("share_mode", i32),
            ("share_access", i32),
            ("status", i32),
            ("status_name", s),
            ("holder_exclusive", b),
            ("holder_svid", i64),
            ("holder_oh", s),
            ("holder_offset", i64),
            ("holder_length", i64),
        ]
    ),
    "capture_stats": pa.schema(
        [
            ("file_id", i32),
            ("interface", i32),
            ("interface_name", s),
            ("link_type", i32),
            ("first_time_ns", i64),
            ("last_time_ns", i64),
            ("packets", i64),
            ("received", i64),
            ("kernel_dropped", i64),
            ("staging_dropped", i64),
            ("write_dropped", i64),
            ("if_dropped", i64),
            ("forward_lost", i64),
            ("source", s),
            ("files_deleted", i64),
            ("bytes_deleted", i64),
        ]
    ),
}

# Columns added to a table without raising SCHEMA_VERSION (docs/dataset.md: adding a column does
# not). Files converted before a column existed lack it; the engines read it there as null.
ADDED_COLUMNS: dict[str, list[str]] = {
    "packets": ["direction"],
    "capture_stats": ["files_deleted", "bytes_deleted"],
}

# Tables partitioned by hour=YYYY-MM-DDTHH whose rows carry a capture time.
TIMED_TABLES = ["packets", "rpc", "nfs_ops", "nfs_rw", "nfs_attrs", "nfs_names", "mount", "nlm_ops"]

CATALOG: dict[str, pa.Schema] = {
    "sources": pa.schema(
        [
            ("file_id", i32),
            ("path", s),
            ("size", i64),
            ("mtime_ns", i64),
            ("format", s),
            ("packets", i64),
            ("first_time_ns", i64),
            ("last_time_ns", i64),
            ("rpc_messages", i64),
        ]
    ),
    "row_groups": pa.schema(
        [
            ("table", s),
            ("path", s),
            ("row_group", i32),
            ("rows", i64),
            ("min_time_ns", i64),
            ("max_time_ns", i64),
            ("min_transaction_id", i64),
            ("max_transaction_id", i64),
        ]
    ),
}


def duckdb_type(t: pa.DataType) -> str:
    """The SQL type name of an Arrow type of the contract (portable: DuckDB and Spark)."""
    return {
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INT",
        pa.int64(): "BIGINT",
        pa.string(): "VARCHAR",
        pa.bool_(): "BOOLEAN",
    }[t]
