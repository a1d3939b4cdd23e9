//! The `nlm_ops` row of one decoded NLM message. A reply says little of its own (a cookie
//! and a status, a TEST reply the lock in the way), so its row repeats the lock its call
//! asked for: each row reads alone, and `status` sits beside the lock it answers.

use tapdeck_rpc::names::nlm_stat_name;
use tapdeck_rpc::{Decoded, Outcome};

use crate::anonymize::Anonymizer;
use crate::columns::Hex;
use crate::error::Result;
use crate::rpc_sinks::RpcSinks;
use crate::tables::{NlmOpRow, RpcRow};

/// Writes the row of NLM message `d` whose rpc row is `row`; for a reply, `call` is its
/// decoded call when this file (or its warm-up) holds it.
pub fn write(
    out: &mut RpcSinks,
    row: &RpcRow,
    d: &Decoded,
    call: Option<&Decoded>,
    anon: &mut Anonymizer,
) -> Result<()> {
    let Some(r) = d.nlm.as_ref().filter(|_| d.outcome == Outcome::Decoded) else {
        return Ok(());
    };
    // A reply's lock is its call's (a reply never carries one).
    let lock = if row.direction == "call" {
        r
    } else {
        call.and_then(|c| c.nlm.as_ref()).unwrap_or(r)
    };
    let hex = |b: &Option<Vec<u8>>| b.clone().map(Hex);
    let wide = |v: Option<u64>| v.map(|v| v as i64);
    let holder = r.holder.as_ref();
    out.nlm_ops.push(NlmOpRow {
        time_ns: row.time_ns,
        file_id: row.file_id,
        record: row.record,
        transaction_id: row.transaction_id,
        direction: row.direction,
        client_addr: row.client_addr,
        server_addr: row.server_addr,
        nlm_version: r.vers as i8,
        procedure: r.proc_ as i32,
        operation: r.proc_name,
        cookie: hex(&r.cookie),
        caller_name: lock.caller_name.as_deref().map(|n| anon.name(n)),
        fh: hex(&lock.fh),
        oh: hex(&lock.oh),
        svid: lock.svid.map(i64::from),
        exclusive: lock.exclusive,
        offset: wide(lock.offset),
        length: wide(lock.length),
        block: lock.block,
        reclaim: lock.reclaim,
        state: lock.state.map(i64::from),
        share_mode: lock.share_mode.map(|v| v as i32),
        share_access: lock.share_access.map(|v| v as i32),
        status: r.status.map(|s| s as i32),
        status_name: r.status.map(nlm_stat_name),
        holder_exclusive: holder.and_then(|h| h.exclusive),
        holder_svid: holder.and_then(|h| h.svid).map(i64::from),
        holder_oh: holder.and_then(|h| h.oh.clone()).map(Hex),
        holder_offset: wide(holder.and_then(|h| h.offset)),
        holder_length: wide(holder.and_then(|h| h.length)),
    })
}
