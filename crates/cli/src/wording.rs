//! The libraries' errors as the user reads them. A library names the value and the cause;
//! only the binary knows which flag gave the value, so it adds the flag (and what to change)
//! here, in one place, keeping the one-line messages users and scripts have always read.

use tapdeck_capture::{SettingError, SourceError};
use tapdeck_dataset::DatasetError;
use tapdeck_forward::error::{ForwardError, TlsFile};
use tapdeck_service::status::{ClientError, TlsFile as ClientTlsFile};

/// A forward error as the user reads it: the library names the value and the cause, this
/// adds the flag that gave the value.
pub(crate) fn forward(e: ForwardError) -> anyhow::Error {
    let flag = |file: &TlsFile| match file {
        TlsFile::Cert => "--tls-cert",
        TlsFile::Key => "--tls-key",
        TlsFile::ServerCa => "--tls-ca",
        TlsFile::ClientCa => "--tls-client-ca",
    };
    let message = match &e {
        ForwardError::NoCollector => format!("{e} (--to HOST:PORT)"),
        ForwardError::MessagesTooSmall { .. } => format!("{e}: raise --mtu or the path's MTU"),
        ForwardError::IpfixFile { .. } => format!("--ipfix-file {e}"),
        ForwardError::NoSockets => "--sockets must be at least 1".to_string(),
        ForwardError::PortInUse { .. }
        | ForwardError::NoSuchAddress { .. }
        | ForwardError::Listen { .. } => format!("--listen {e}"),
        ForwardError::TlsFile { file, path, what } => {
            format!("{} {}: {what}", flag(file), path.display())
        }
        ForwardError::KeyMismatch { key, cert } => format!(
            "--tls-key {} is not the key of the certificate in --tls-cert {}",
            key.display(),
            cert.display()
        ),
        ForwardError::ServerName { .. } => format!("--to tls://{e}"),
        _ => return anyhow::Error::new(e),
    };
    anyhow::anyhow!(message)
}

/// A capture error as the user reads it: the library names the value and the cause, this
/// adds the flag that set it and what to change.
pub(crate) fn capture(e: SourceError) -> anyhow::Error {
    let SourceError::Setting(s) = &e else {
        return anyhow::anyhow!("{e}");
    };
    let message = match s {
        SettingError::NoInterface => format!("{s} (-i IF)"),
        SettingError::NoThreads => "--threads must be at least 1".to_string(),
        SettingError::ZeroSnaplen => "--snaplen must be at least 1".to_string(),
        SettingError::RingGeometry { block, page, frame } => format!(
            "--ring-block-size {block} must be a nonzero multiple of the page size ({page}) and \
             of the frame size ({frame}), and --ring-blocks at least 1"
        ),
        SettingError::RingTooLarge { .. } => format!("{s}: lower --ring-blocks"),
        SettingError::RingOverHalfMemory { .. }
        | SettingError::RingAlloc { .. }
        | SettingError::RingRefused { .. } => {
            format!("{s}: lower --ring-blocks or --ring-block-size")
        }
        SettingError::Fanout { iface, cause } => {
            format!("{iface}: cannot join a PACKET_FANOUT group for --threads: {cause}")
        }
        SettingError::Libpcap(e) => format!("--filter: cannot start libpcap: {e}"),
        SettingError::Filter { expr, what } => format!("--filter '{expr}': {what}"),
        SettingError::FilterTooLong { expr, insns } => format!(
            "--filter '{expr}' compiles to {insns} instructions, more than the kernel takes"
        ),
        SettingError::NotAUserName { user } => format!("--user {user:?}: not a user name"),
        SettingError::NoSuchUser { user, why } => format!("--user {user}: {why}"),
        SettingError::SwitchUser { user, what, cause } => format!(
            "--user {user}: cannot {what}: {cause} (tapdeck must start as root to switch users)"
        ),
        SettingError::RootRegainable { user } => format!(
            "--user {user}: root privileges could be regained after switching; refusing to go on"
        ),
    };
    anyhow::anyhow!(message)
}

/// A client's error in one line, worded with the flags of `status` and `query` that gave
/// its files, and what to do about it.
pub(crate) fn client(e: ClientError) -> anyhow::Error {
    let flag = |file: &ClientTlsFile| match file {
        ClientTlsFile::CaCert => "--cacert",
        ClientTlsFile::Cert => "--cert",
        ClientTlsFile::Key => "--key",
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

/// A conversion error as the user reads it: the remedy for a dataset converted with other
/// anonymization names the flags.
pub(crate) fn dataset(e: DatasetError) -> anyhow::Error {
    match e {
        DatasetError::AnonymizationMismatch {
            dir,
            key_id,
            addresses_anonymized,
        } => anyhow::anyhow!(
            "{} was converted with different anonymization (key {key_id:?}, addresses {addresses_anonymized}); use the same --key and --anonymize-ips, or a new directory",
            dir.display()
        ),
        e => anyhow::Error::msg(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages users have read since the library named the flags itself.
    #[test]
    fn forward_errors_name_their_flags() {
        let at: std::net::SocketAddr = "198.18.0.1:4739".parse().unwrap();
        let cases = [
            (
                ForwardError::NoCollector,
                "name at least one collector (--to HOST:PORT)",
            ),
            (
                ForwardError::MessagesTooSmall {
                    to: at,
                    len: 100,
                    min: 548,
                },
                "collector 198.18.0.1:4739: messages of 100 octets are too small (at least 548): raise --mtu or the path's MTU",
            ),
            (ForwardError::NoSockets, "--sockets must be at least 1"),
            (
                ForwardError::PortInUse { listen: at },
                "--listen 198.18.0.1:4739: the port is in use by another program; choose another port or stop it",
            ),
            (
                ForwardError::NoSuchAddress { listen: at },
                "--listen 198.18.0.1:4739: no interface here has that address",
            ),
            (
                ForwardError::IpfixFile {
                    path: "/x.ipfix".into(),
                    cause: std::io::Error::from_raw_os_error(13),
                },
                "--ipfix-file /x.ipfix: cannot create it: Permission denied (os error 13)",
            ),
            (
                ForwardError::TlsFile {
                    file: TlsFile::ClientCa,
                    path: "/ca.pem".into(),
                    what: "not PEM".into(),
                },
                "--tls-client-ca /ca.pem: not PEM",
            ),
            (
                ForwardError::KeyMismatch {
                    key: "/k.pem".into(),
                    cert: "/c.pem".into(),
                },
                "--tls-key /k.pem is not the key of the certificate in --tls-cert /c.pem",
            ),
            (
                ForwardError::ServerName { host: "a b".into() },
                "--to tls://a b: not a host name or address",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(format!("{:#}", forward(e)), want);
        }
    }

    /// The message users (and scripts) have seen since errors were strings.
    #[test]
    fn anonymization_mismatch_names_the_flags() {
        let e = dataset(DatasetError::AnonymizationMismatch {
            dir: "/d".into(),
            key_id: Some("ab12".into()),
            addresses_anonymized: true,
        });
        assert_eq!(
            e.to_string(),
            "/d was converted with different anonymization (key Some(\"ab12\"), addresses true); use the same --key and --anonymize-ips, or a new directory"
        );
    }

    /// The messages users have read since the library named the flags itself.
    #[test]
    fn capture_errors_name_their_flags() {
        let enomem = || std::io::Error::from_raw_os_error(libc::ENOMEM);
        let cases: Vec<(SettingError, &str)> = vec![
            (
                SettingError::NoInterface,
                "name at least one interface to capture (-i IF)",
            ),
            (SettingError::NoThreads, "--threads must be at least 1"),
            (SettingError::ZeroSnaplen, "--snaplen must be at least 1"),
            (
                SettingError::RingGeometry {
                    block: 1000,
                    page: 4096,
                    frame: 2048,
                },
                "--ring-block-size 1000 must be a nonzero multiple of the page size (4096) and of the frame size (2048), and --ring-blocks at least 1",
            ),
            (
                SettingError::RingTooLarge {
                    blocks: 9,
                    block: 4096,
                },
                "a ring of 9 blocks of 4096 bytes is too large: lower --ring-blocks",
            ),
            (
                SettingError::RingOverHalfMemory {
                    iface: "eth0".into(),
                    blocks: 4096,
                    block: 1 << 22,
                    bytes: 1 << 34,
                },
                "a receive ring of 16384 MiB on eth0 (4096 blocks of 4194304 bytes) is more than half of this machine's memory: lower --ring-blocks or --ring-block-size",
            ),
            (
                SettingError::RingAlloc {
                    iface: "eth0".into(),
                    blocks: 64,
                    block: 1 << 22,
                    bytes: 1 << 28,
                    cause: enomem(),
                },
                "cannot allocate a 256 MiB receive ring on eth0 (64 blocks of 4194304 bytes: Cannot allocate memory (os error 12)): lower --ring-blocks or --ring-block-size",
            ),
            (
                SettingError::RingRefused {
                    iface: "eth0".into(),
                    blocks: 64,
                    block: 1 << 22,
                    cause: std::io::Error::from_raw_os_error(libc::EINVAL),
                },
                "eth0: the kernel refused a ring of 64 blocks of 4194304 bytes (Invalid argument (os error 22)); it must stay under 4 GiB: lower --ring-blocks or --ring-block-size",
            ),
            (
                SettingError::Fanout {
                    iface: "eth0".into(),
                    cause: std::io::Error::from_raw_os_error(libc::EINVAL),
                },
                "eth0: cannot join a PACKET_FANOUT group for --threads: Invalid argument (os error 22)",
            ),
            (
                SettingError::Filter {
                    expr: "udp prot 53".into(),
                    what: "syntax error".into(),
                },
                "--filter 'udp prot 53': syntax error",
            ),
            (
                SettingError::FilterTooLong {
                    expr: "tcp".into(),
                    insns: 70000,
                },
                "--filter 'tcp' compiles to 70000 instructions, more than the kernel takes",
            ),
            (
                SettingError::NotAUserName {
                    user: "a\0b".into(),
                },
                "--user \"a\\0b\": not a user name",
            ),
            (
                SettingError::NoSuchUser {
                    user: "tdnosuchuser".into(),
                    why: "no such user (see /etc/passwd)".into(),
                },
                "--user tdnosuchuser: no such user (see /etc/passwd)",
            ),
            (
                SettingError::SwitchUser {
                    user: "nobody".into(),
                    what: "set the user id",
                    cause: std::io::Error::from_raw_os_error(libc::EPERM),
                },
                "--user nobody: cannot set the user id: Operation not permitted (os error 1) (tapdeck must start as root to switch users)",
            ),
            (
                SettingError::RootRegainable {
                    user: "nobody".into(),
                },
                "--user nobody: root privileges could be regained after switching; refusing to go on",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(format!("{:#}", capture(e.into())), want);
        }
        let other = capture(SourceError::Other(
            "no interface named x (see `ip link`)".into(),
        ));
        assert_eq!(other.to_string(), "no interface named x (see `ip link`)");
    }
}
