use std::path::PathBuf;

/// Everything that can go wrong in this crate. Each message says what is wrong and what to do,
/// on one line, so the CLI can print it as it is.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("key file {}: not found; make one with `tapdeck keygen` or pass the right path", path.display())]
    KeyFileMissing { path: PathBuf },

    #[error("key file {}: already exists; refusing to overwrite a key (move it away first if you really mean to replace it)", path.display())]
    KeyFileExists { path: PathBuf },

    #[error("key file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("key file {}: readable or writable by group or others (mode {mode:04o}); run `chmod 600 {}`", path.display(), path.display())]
    KeyFilePermissions { path: PathBuf, mode: u32 },

    #[error("key file {}: {}{reason}; is this a tapdeck-anon key file?", path.display(), at_line(line))]
    KeyFileFormat {
        path: PathBuf,
        /// 1-based; `None` when the problem is the file as a whole.
        line: Option<usize>,
        reason: String,
    },

    #[error("wrong key: the data was anonymized with key id {expected}, this key file has id {found}; use the key file the dataset was made with")]
    WrongKey { expected: String, found: String },

    #[error("{input:?} is not an encrypted name (encrypted names start with '~')")]
    NotEncrypted { input: String },

    #[error("{input:?} is not valid base64url after the '~' marker; the name is damaged or was not made by tapdeck")]
    BadEncoding { input: String },

    #[error("{input:?} does not decrypt with this key: wrong key file, or the name was altered")]
    Authentication { input: String },
}

fn at_line(line: &Option<usize>) -> String {
    line.map(|n| format!("line {n}: ")).unwrap_or_default()
}

/// Keeps error messages short when a caller hands us a huge string.
pub(crate) fn excerpt(s: &str) -> String {
    const MAX: usize = 80;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
