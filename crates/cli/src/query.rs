//! `tapdeck query`: the client of `/api/v1/packets`, the stenoread of tapdeck.

use std::io::Write;

use crate::args::QueryArgs;

pub fn run(args: &QueryArgs) -> anyhow::Result<i32> {
    let filter = args.filter.join(" ");
    let params = [
        ("start", args.window.start.as_deref()),
        ("end", args.window.end.as_deref()),
        ("filter", Some(filter.as_str()).filter(|f| !f.is_empty())),
        ("format", args.window.format.as_deref()),
    ];
    let remote = args.remote.to_remote(&args.addr);
    let mut reader =
        tapdeck_service::status::fetch_packets(&remote, &params).map_err(crate::wording::client)?;
    let copied = if args.window.write == "-" {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let n = std::io::copy(&mut reader, &mut out);
        n.and_then(|n| out.flush().map(|_| n))
    } else {
        let mut out = std::fs::File::create(&args.window.write)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", args.window.write))?;
        std::io::copy(&mut reader, &mut out)
    };
    match copied {
        Ok(bytes) => {
            eprintln!(
                "tapdeck: query wrote {bytes} bytes to {}",
                args.window.write
            );
            Ok(0)
        }
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => anyhow::bail!(
            "the answer stopped early ({e}): {} holds what came before; the service's log says why (a limit: query-max-bytes, query-max-seconds)",
            args.window.write
        ),
    }
}
