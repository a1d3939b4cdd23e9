"""Builds datasets exactly as docs/dataset.md describes them, from rows given in Python.

Until the converter writes real datasets the tests run on these: hive partitions
`hour=YYYY-MM-DDTHH`, files `part-<file id, 6 digits>-<n>.parquet` sorted by `time_ns`, zstd,
key-value metadata with `tapdeck.schema_version`, `dataset.json`, `capture_stats` and the catalog.
"""

import datetime as dt
import json
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tapdeck_analyze import schema

NS = 1_000_000_000
# 2026-11-23T08:00:00Z: fixtures start on an hour so that hand-computed buckets stay readable.
T0 = 1795420800 * NS
CLIENT, SERVER = "10.0.0.1", "10.0.0.2"


def hour_of(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns // NS, dt.timezone.utc).strftime("%Y-%m-%dT%H")


class DatasetBuilder:
    def __init__(self):
        self.rows: dict[str, list[dict]] = defaultdict(list)
        self.capture_stats: list[dict] = []
        self.next_tid = 1
        self.next_record: dict[int, int] = defaultdict(int)

    # -- plain rows ----------------------------------------------------------------------------

    def add(self, table: str, **row) -> dict:
        self.rows[table].append(row)
        return row

    def record(self, file_id: int) -> int:
        self.next_record[file_id] += 1
        return self.next_record[file_id]

    def packet(self, time_ns, wire_len=100, src=CLIENT, dst=SERVER, protocol=6, file_id=0, **kw):
        row = dict(
            time_ns=time_ns,
            file_id=file_id,
            record=self.record(file_id),
            interface=0,
            wire_len=wire_len,
            cap_len=min(wire_len, 262144),
            ip_version=None if protocol is None else (6 if ":" in (src or "") else 4),
            src_addr=src,
            dst_addr=dst,
            protocol=protocol,
            src_port=kw.pop("src_port", 40000),
            dst_port=kw.pop("dst_port", 2049),
            flow_id=kw.pop("flow_id", hash(tuple(sorted([str(src), str(dst)]))) & 0xFFFF),
        )
        row.update(kw)
        return self.add("packets", **row)

    # -- RPC transactions ------------------------------------------------------------------------

    def nfs(
        self,
        call_ns,
        reply_ns=None,
        op="GETATTR",
        version=3,
        procedure=None,
        client=CLIENT,
        server=SERVER,
        retransmits=(),
        duplicate_replies=(),
        v4_ops=(),
        status=0,
        fh=None,
        offset=None,
        count=None,
        nbytes=None,
        transport="tcp",
        xid=None,
        file_id=0,
        program=100003,
    ) -> int:
        """One NFS transaction: a call at `call_ns` (plus retransmissions at `retransmits`), a
        reply at `reply_ns` (plus duplicates); rows in packets, rpc, nfs_ops, nfs_rw. For v4
        `op` is COMPOUND and `v4_ops` the operations. Returns the transaction id."""
        tid = self.next_tid
        self.next_tid += 1
        xid = tid * 7 if xid is None else xid
        common = dict(
            transaction_id=tid,
            transport=transport,
            client_addr=client,
            server_addr=server,
            client_port=800,
            server_port=2049,
            xid=xid,
        )
        ops = list(v4_ops) if version == 4 else [op]
        answered = reply_ns is not None
        for i, t in enumerate([call_ns, *retransmits]):
            self.packet(t, 200, client, server, file_id=file_id)
            rec = self.next_record[file_id]
            self.add(
                "rpc",
                time_ns=t,
                file_id=file_id,
                record=rec,
                direction="call",
                program=program,
                version=version,
                procedure=procedure,
                program_name="NFS" if program == 100003 else "MOUNT",
                procedure_name=op,
                auth_flavor=1,
                uid=0,
                gid=0,
                message_len=128,
                payload_len=100,
                truncated=False,
                matched=answered,
                first_time_ns=call_ns,
                retransmit=i > 0,
                **common,
            )
            self._nfs_rows(t, file_id, rec, tid, "call", client, server, version, ops, None, fh)
            if op in ("READ", "WRITE") or "READ" in ops or "WRITE" in ops:
                rw = "WRITE" if "WRITE" in ops else "READ"
                self.add(
                    "nfs_rw",
                    time_ns=t,
                    file_id=file_id,
                    record=rec,
                    transaction_id=tid,
                    direction="call",
                    nfs_version=version,
                    operation=rw,
                    fh=fh,
                    offset=offset,
                    count=count,
                )
        if answered:
            for i, t in enumerate([reply_ns, *duplicate_replies]):
                self.packet(t, 300, server, client, file_id=file_id, src_port=2049, dst_port=800)
                rec = self.next_record[file_id]
                self.add(
                    "rpc",
                    time_ns=t,
                    file_id=file_id,
                    record=rec,
                    direction="reply",
                    program=program,
                    version=version,
                    procedure=procedure,
                    program_name="NFS" if program == 100003 else "MOUNT",
                    procedure_name=op,
                    reply_stat=0,
                    accept_stat=0,
                    message_len=256,
                    payload_len=200,
                    truncated=False,
                    matched=True,
                    first_time_ns=call_ns,  # as the converter writes it on a matched reply
                    retransmit=i > 0,
                    **common,
                )
                self._nfs_rows(
                    t, file_id, rec, tid, "reply", client, server, version, ops, status, fh
                )
                if "READ" in ops or "WRITE" in ops:
                    rw = "WRITE" if "WRITE" in ops else "READ"
                    self.add(
                        "nfs_rw",
                        time_ns=t,
                        file_id=file_id,
                        record=rec,
                        transaction_id=tid,
                        direction="reply",
                        nfs_version=version,
                        operation=rw,
                        fh=fh,
                        bytes=nbytes if nbytes is not None else count,
                        eof=False if rw == "READ" else None,
                    )
        return tid

    def unmatched_reply(self, reply_ns, client=CLIENT, server=SERVER, file_id=0, xid=99999):
        tid = self.next_tid
        self.next_tid += 1
        self.packet(reply_ns, 300, server, client, file_id=file_id)
        self.add(
            "rpc",
            time_ns=reply_ns,
            file_id=file_id,
            record=self.next_record[file_id],
            transaction_id=tid,
            direction="reply",
            transport="tcp",
            client_addr=client,
            server_addr=server,
            client_port=800,
            server_port=2049,
            xid=xid,
            reply_stat=0,
            accept_stat=0,
            message_len=256,
            payload_len=200,
            truncated=False,
            matched=False,
            retransmit=False,
        )
        return tid

    def _nfs_rows(self, t, file_id, rec, tid, direction, client, server, version, ops, status, fh):
        for i, op in enumerate(ops):
            self.add(
                "nfs_ops",
                time_ns=t,
                file_id=file_id,
                record=rec,
                transaction_id=tid,
                direction=direction,
                client_addr=client,
                server_addr=server,
                nfs_version=version,
                minor_version=1 if version == 4 else None,
                op_index=i,
                op_num=0,
                operation=op,
                status=status if direction == "reply" else None,
                fh=fh,
            )

    # -- writing ---------------------------------------------------------------------------------

    def write(
        self,
        path,
        schema_version: int = 1,
        rows_per_group: int | None = None,
        file_version: dict[str, int] | None = None,
        meta: dict | None = None,
    ) -> Path:
        """Writes the dataset to `path` and returns it. `file_version` overrides
        `tapdeck.schema_version` of one table's files (to test version checks)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        file_version = file_version or {}
        written_files = []
        for table in schema.TIMED_TABLES:
            rows = self.rows.get(table, [])
            parts: dict[tuple[int, str], list[dict]] = defaultdict(list)
            for row in rows:
                parts[(row["file_id"], hour_of(row["time_ns"]))].append(row)
            for (file_id, hour), part_rows in sorted(parts.items()):
                part_rows.sort(key=lambda r: (r["time_ns"], r["record"]))
                out = path / table / f"hour={hour}" / f"part-{file_id:06d}-0.parquet"
                version = file_version.get(table, schema_version)
                self._write_file(
                    out, table, schema.TABLES[table], part_rows, version, rows_per_group
                )
                written_files.append((table, out, part_rows))
        stats = self.capture_stats or self._default_capture_stats()
        self._write_file(
            path / "capture_stats" / "part-000000-0.parquet",
            "capture_stats",
            schema.TABLES["capture_stats"],
            stats,
            file_version.get("capture_stats", schema_version),
        )
        self._write_catalog(path, written_files, schema_version)
        doc = {
            "name": path.name,
            "schema_version": schema_version,
            "converter": "tests/datasetbuilder.py",
        }
        doc.update(meta or {})
        (path / "dataset.json").write_text(json.dumps(doc, indent=2))
        return path

    def _default_capture_stats(self) -> list[dict]:
        by_file: dict[int, list[int]] = defaultdict(list)
        for row in self.rows.get("packets", []):
            by_file[row["file_id"]].append(row["time_ns"])
        return [
            dict(
                file_id=f,
                interface=0,
                interface_name="eth0",
                link_type=1,
                first_time_ns=min(ts),
                last_time_ns=max(ts),
                packets=len(ts),
                kernel_dropped=0,
                staging_dropped=0,
                write_dropped=0,
                if_dropped=None,
                forward_lost=None,
                source="tapdeck",
            )
            for f, ts in sorted(by_file.items())
        ]

    @staticmethod
    def _write_file(out, table, sch, rows, version, rows_per_group=None):
        out.parent.mkdir(parents=True, exist_ok=True)
        cols = {f.name: [r.get(f.name) for r in rows] for f in sch}
        t = pa.table(cols, schema=sch).replace_schema_metadata(
            {
                "tapdeck.schema_version": str(version),
                "tapdeck.table": table,
                "tapdeck.converter": "datasetbuilder 0",
                "tapdeck.source": "fixture.pcapng",
            }
        )
        pq.write_table(
            t,
            out,
            compression="zstd",
            row_group_size=rows_per_group or max(1, len(rows)),
            write_statistics=True,
        )

    def _write_catalog(self, path, files, version):
        packets = self.rows.get("packets", [])
        by_file: dict[int, list[dict]] = defaultdict(list)
        for row in packets:
            by_file[row["file_id"]].append(row)
        rpc_count: dict[int, int] = defaultdict(int)
        for row in self.rows.get("rpc", []):
            rpc_count[row["file_id"]] += 1
        sources = []
        for f, rows in sorted(by_file.items()):
            ts = [r["time_ns"] for r in rows]
            sources.append(
                dict(
                    file_id=f,
                    path=f"/traces/{f}.pcapng",
                    size=1000,
                    mtime_ns=min(ts),
                    format="pcapng",
                    packets=len(rows),
                    first_time_ns=min(ts),
                    last_time_ns=max(ts),
                    rpc_messages=rpc_count[f],
                )
            )
        self._write_file(
            path / "catalog" / "sources.parquet",
            "catalog/sources",
            schema.CATALOG["sources"],
            sources,
            version,
        )
        groups = []
        for table, out, rows in files:
            md = pq.ParquetFile(out).metadata
            start = 0
            for g in range(md.num_row_groups):
                n = md.row_group(g).num_rows
                chunk = rows[start : start + n]
                start += n
                tids = [r.get("transaction_id") for r in chunk if r.get("transaction_id")]
                groups.append(
                    dict(
                        table=table,
                        path=str(out.relative_to(path)),
                        row_group=g,
                        rows=n,
                        min_time_ns=chunk[0]["time_ns"],
                        max_time_ns=chunk[-1]["time_ns"],
                        min_transaction_id=min(tids) if tids else None,
                        max_transaction_id=max(tids) if tids else None,
                    )
                )
        self._write_file(
            path / "catalog" / "row_groups.parquet",
            "catalog/row_groups",
            schema.CATALOG["row_groups"],
            groups,
            version,
        )
