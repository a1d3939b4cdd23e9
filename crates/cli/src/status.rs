//! `tapdeck status`: what a running `tapdeck serve` says about itself, in a few lines.

use tapdeck_service::status::{ClientError, TlsFile};

use crate::args::StatusArgs;

pub fn run(args: &StatusArgs) -> anyhow::Result<i32> {
    let doc =
        tapdeck_service::status::fetch(&args.remote.to_remote(&args.listen)).map_err(worded)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", describe(&doc));
    }
    // Scripts can test the exit status: 0 healthy, 1 not.
    Ok(if doc["health"]["healthy"].as_bool() == Some(true) {
        0
    } else {
        1
    })
}

/// A client's error in one line, worded with the flags of `status` and `query` that gave
/// its files, and what to do about it.
pub fn worded(e: ClientError) -> anyhow::Error {
    let flag = |file: &TlsFile| match file {
        TlsFile::CaCert => "--cacert",
        TlsFile::Cert => "--cert",
        TlsFile::Key => "--key",
    };
    let line = match &e {
        ClientError::Read { file, path, source } => {
            format!("cannot read {} {}: {source}", flag(file), path.display())
        }
        ClientError::NotPem { file, path, reason } => {
            format!("{} {}: not PEM: {reason}", flag(file), path.display())
        }
        ClientError::NoCertificate { file, path } => format!(
            "{} {} holds no certificate (-----BEGIN CERTIFICATE-----)",
            flag(file),
            path.display()
        ),
        ClientError::NoPrivateKey { path, reason } => {
            format!("--key {} holds no PEM private key: {reason}", path.display())
        }
        ClientError::CertWithoutKey => {
            "--cert and --key go together (a client certificate and its key)".into()
        }
        ClientError::TokenNameWithoutFile => {
            "--token-name names a token of --token-file: give the file too".into()
        }
        ClientError::Tls { addr, reason } => format!(
            "TLS with {addr} failed ({reason}): does --cacert hold the CA of the service's certificate, and does the service want a client certificate (--cert, --key)?"
        ),
        ClientError::Unreachable { addr, reason } => format!(
            "no tapdeck service answers at {addr} ({reason}): is `tapdeck serve` running, and is the address (and http or https) right?"
        ),
        ClientError::TokenRequired { url } => format!(
            "{url} wants a token: pass --token-file (a file with one of the service's tokens)"
        ),
        other => other.to_string(),
    };
    anyhow::Error::msg(line)
}

fn describe(doc: &serde_json::Value) -> String {
    let h = &doc["health"];
    let mut out = format!(
        "tapdeck {} at {}: {}\n",
        doc["version"].as_str().unwrap_or("?"),
        h["phase"].as_str().unwrap_or("?"),
        if h["healthy"].as_bool() == Some(true) {
            "healthy".to_string()
        } else {
            format!(
                "UNHEALTHY: {}",
                h["reasons"]
                    .as_array()
                    .map(|r| r
                        .iter()
                        .filter_map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join("; "))
                    .unwrap_or_default()
            )
        }
    );
    let s = &doc["stats"];
    if s.is_null() {
        return out;
    }
    let t = &s["totals"];
    let d = &t["dropped"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    out += &format!(
        "  packets: seen {}  stored {}  dropped {} (kernel {}, staging full {}, write error {})  in flight {}\n",
        n(&t["seen"]),
        n(&t["stored"]),
        n(&d["kernel"]) + n(&d["staging_full"]) + n(&d["write_error"]),
        n(&d["kernel"]),
        n(&d["staging_full"]),
        n(&d["write_error"]),
        n(&t["in_flight"]),
    );
    out += &format!(
        "  files: {} written, {} deleted by retention; {} bytes written; running {:.0} s\n",
        n(&s["files_written"]),
        n(&s["files_deleted"]),
        n(&s["bytes_written"]),
        s["elapsed_s"].as_f64().unwrap_or(0.0)
    );
    let now_ns = tapdeck_recorder::recorder::now_ns();
    if let Some(h) = doc["horizon_ns"].as_u64() {
        out += &format!(
            "  horizon: the oldest packet stored is {:.0} s old\n",
            now_ns.saturating_sub(h) as f64 / 1e9
        );
    }
    for d in doc["data_dirs"].as_array().into_iter().flatten() {
        out += &format!(
            "  {} {}: {:.1} GB free of {:.1} GB\n",
            if d["up"].as_bool() == Some(true) {
                "dir"
            } else {
                "FAILING dir"
            },
            d["path"].as_str().unwrap_or("?"),
            n(&d["free_bytes"]) as f64 / 1e9,
            n(&d["size_bytes"]) as f64 / 1e9
        );
    }
    out
}
