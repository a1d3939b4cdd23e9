//! The RPC-derived tables of one source file, which the engine and the per-program row
//! builders (`nfsrows`, `nlmrows`) all write into.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::Result;
use crate::sink::TableSink;
use crate::tables::{
    MountRow, NfsAttrRow, NfsNameRow, NfsOpRow, NfsRwRow, NlmOpRow, RowGroupRow, RpcRow,
};

/// The RPC-derived tables of one source file.
pub struct RpcSinks {
    pub rpc: TableSink<RpcRow>,
    pub nfs_ops: TableSink<NfsOpRow>,
    pub nfs_rw: TableSink<NfsRwRow>,
    pub nfs_attrs: TableSink<NfsAttrRow>,
    pub nfs_names: TableSink<NfsNameRow>,
    pub mount: TableSink<MountRow>,
    pub nlm_ops: TableSink<NlmOpRow>,
}

impl RpcSinks {
    pub fn new(root: &Path, file_id: i32, source: &str) -> RpcSinks {
        RpcSinks {
            rpc: TableSink::new(root, file_id, source),
            nfs_ops: TableSink::new(root, file_id, source),
            nfs_rw: TableSink::new(root, file_id, source),
            nfs_attrs: TableSink::new(root, file_id, source),
            nfs_names: TableSink::new(root, file_id, source),
            mount: TableSink::new(root, file_id, source),
            nlm_ops: TableSink::new(root, file_id, source),
        }
    }

    pub fn finish(self, counts: &mut BTreeMap<String, u64>) -> Result<Vec<RowGroupRow>> {
        let mut groups = Vec::new();
        counts.insert("rows.rpc".into(), self.rpc.rows());
        counts.insert("rows.nfs_ops".into(), self.nfs_ops.rows());
        counts.insert("rows.nfs_rw".into(), self.nfs_rw.rows());
        counts.insert("rows.nfs_attrs".into(), self.nfs_attrs.rows());
        counts.insert("rows.nfs_names".into(), self.nfs_names.rows());
        counts.insert("rows.mount".into(), self.mount.rows());
        counts.insert("rows.nlm_ops".into(), self.nlm_ops.rows());
        // Every table's last batch is encoded at once, each on its own thread.
        let closing = [
            self.rpc.close()?,
            self.nfs_ops.close()?,
            self.nfs_rw.close()?,
            self.nfs_attrs.close()?,
            self.nfs_names.close()?,
            self.mount.close()?,
            self.nlm_ops.close()?,
        ];
        for c in closing {
            groups.extend(c.join()?);
        }
        Ok(groups)
    }
}
