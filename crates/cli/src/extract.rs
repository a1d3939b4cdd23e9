//! `tapdeck extract`: wires the store's extraction to libpcap's filter compiler.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Context;
use tapdeck_pcap::{Format, Packet};
use tapdeck_store::extract::{self, ExtractError, TimeWindow};
use tapdeck_store::read::Store;

use crate::args::ExtractArgs;

pub fn run(args: &ExtractArgs) -> anyhow::Result<i32> {
    let time = |flag: &str, v: &Option<String>| -> anyhow::Result<Option<u64>> {
        v.as_deref()
            .map(extract::parse_time)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
    };
    let window = TimeWindow {
        start_ns: time("start", &args.start)?,
        end_ns: time("end", &args.end)?,
    };
    if let (Some(s), Some(e)) = (window.start_ns, window.end_ns) {
        anyhow::ensure!(
            s < e,
            "--start must be before --end: the range [start, end) is empty"
        );
    }
    let store = Store::open(&args.store)?;
    let plan = extract::plan(&store, window)?;
    let format = match args.format.as_deref() {
        Some("pcap") => Format::Pcap,
        Some(_) => Format::Pcapng,
        None => plan.store_format.unwrap_or(Format::Pcapng),
    };

    let expr = args.filter.join(" ");
    let mut programs = HashMap::new();
    if !expr.trim().is_empty() {
        // Compile once per link type, before any output is written.
        for lt in plan.linktypes() {
            let program = pcap::Capture::dead(pcap::Linktype(i32::from(lt)))
                .and_then(|c| c.compile(&expr, true))
                .map_err(|e| {
                    anyhow::anyhow!("filter '{expr}' does not compile for link type {lt}: {e}")
                })?;
            programs.insert(lt, program);
        }
    }
    let mut filter =
        |lt: u16, p: &Packet<'_>| programs.get(&lt).is_none_or(|prog| prog.filter(p.data));

    let (files_selected, chunks_selected) = (plan.files_selected, plan.chunks_selected);
    let result = if args.write == "-" {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        plan.write(format, &mut filter, &mut out)
            .and_then(|r| out.flush().map(|_| r).map_err(ExtractError::from))
    } else {
        let mut out = std::fs::File::create(&args.write)
            .with_context(|| format!("cannot create {}", args.write))?;
        plan.write(format, &mut filter, &mut out)
    };
    let report = match result {
        Ok(r) => r,
        // The reader (e.g. `tcpdump -c N`) went away: what it wanted, it has.
        Err(ExtractError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
        Err(ExtractError::Output(e)) => anyhow::bail!("{}: writing failed: {e}", args.write),
        Err(e) => return Err(e.into()),
    };
    eprintln!(
        "tapdeck: wrote {} packets ({} left out by the filter); decoded {} of {} files, {} of {} chunks (selected {} files, {} chunks by the index)",
        report.packets_written,
        report.packets_filtered,
        report.files_decoded,
        report.files_total,
        report.chunks_decoded,
        report.chunks_total,
        files_selected,
        chunks_selected
    );
    Ok(0)
}
