//! Why a conversion failed, with what it was doing and to which file, table or field.
//!
//! Each message is the one line a user sees (the CLI prints it as is), so the cause's text is
//! part of it; the cause itself is kept too ([`std::error::Error::source`]) for callers that
//! want to tell, say, a full disk from a permission problem.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A file or directory of the dataset (or its state) could not be made, written, renamed,
    /// removed, opened or locked.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// An input, or a directory under one, could not be read.
    #[error("{}: {source}", path.display())]
    Input {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// An input named on the command line does not exist (or cannot be looked at).
    #[error(
        "{}: {source}; name trace files, stores or directories that exist",
        path.display()
    )]
    MissingInput {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("no trace files in the inputs: name pcap or pcapng files, stores or directories holding them")]
    NoTraceFiles,
    /// A tapdeck store among the inputs could not be opened.
    #[error(transparent)]
    Store(#[from] tapdeck_store::read::FileError),
    /// A trace file could not be opened for reading.
    #[error(transparent)]
    Trace(#[from] tapdeck_capture::SourceError),
    /// A Parquet file being written (`path`, still under its temporary name) failed.
    #[error("{}: {source}", path.display())]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("cannot sort the {table} rows by time: {source}")]
    SortRows {
        table: &'static str,
        #[source]
        source: arrow_schema::ArrowError,
    },
    #[error("cannot start an encoder thread: {0}")]
    EncoderThread(#[source] io::Error),
    /// A table's encoder thread was asked for after it had been taken.
    #[error("the {table} encoder is gone")]
    EncoderGone { table: &'static str },
    #[error("the {table} encoder panicked")]
    EncoderPanicked { table: &'static str },
    /// The encoder refused rows without reporting an error of its own.
    #[error("the {table} encoder stopped early")]
    EncoderStopped { table: &'static str },
    /// `dataset.json` is there but is not one of ours.
    #[error(
        "{}: not a tapdeck dataset description ({source}); convert into a new directory",
        path.display()
    )]
    DatasetJson {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// `dataset.json`'s `schema_version` is newer than this converter's.
    #[error(
        "{} was written with dataset schema {schema_version} by a newer tapdeck; convert with that version or into a new directory",
        dir.display()
    )]
    NewerSchema { dir: PathBuf, schema_version: u32 },
    /// `dataset.json`'s `key_id` or `addresses_anonymized` differ from this run's options.
    /// (The binary words the remedy with its flags.)
    #[error(
        "{} was converted with different anonymization (key {key_id:?}, addresses {addresses_anonymized}); convert with the same anonymization, or into a new directory",
        dir.display()
    )]
    AnonymizationMismatch {
        dir: PathBuf,
        key_id: Option<String>,
        addresses_anonymized: bool,
    },
}

impl DatasetError {
    /// A failed filesystem operation: `action` is the verb of the message ("create",
    /// "write", "rename", ...).
    pub fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| DatasetError::Io {
            action,
            path,
            source,
        }
    }

    /// A failed Parquet write to `path`.
    pub fn parquet(path: impl Into<PathBuf>) -> impl FnOnce(parquet::errors::ParquetError) -> Self {
        let path = path.into();
        move |source| DatasetError::Parquet { path, source }
    }
}

pub type Result<T, E = DatasetError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages are what users (and scripts) have seen since errors were strings.
    #[test]
    fn messages_are_one_line_with_the_cause() {
        let denied = || io::Error::from_raw_os_error(13);
        let cases = [
            (
                DatasetError::io("create", "/d/nfs_ops")(denied()),
                "cannot create /d/nfs_ops: Permission denied (os error 13)",
            ),
            (
                DatasetError::MissingInput {
                    path: "/x".into(),
                    source: io::Error::from_raw_os_error(2),
                },
                "/x: No such file or directory (os error 2); name trace files, stores or directories that exist",
            ),
            (
                DatasetError::NewerSchema {
                    dir: "/d".into(),
                    schema_version: 9,
                },
                "/d was written with dataset schema 9 by a newer tapdeck; convert with that version or into a new directory",
            ),
            (
                DatasetError::AnonymizationMismatch {
                    dir: "/d".into(),
                    key_id: Some("ab12".into()),
                    addresses_anonymized: true,
                },
                "/d was converted with different anonymization (key Some(\"ab12\"), addresses true); convert with the same anonymization, or into a new directory",
            ),
            (
                DatasetError::EncoderStopped { table: "rpc" },
                "the rpc encoder stopped early",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
        let e = DatasetError::io("write", "/d/dataset.json")(denied());
        let cause = std::error::Error::source(&e).expect("the cause is kept");
        assert_eq!(
            cause.downcast_ref::<io::Error>().map(io::Error::kind),
            Some(io::ErrorKind::PermissionDenied)
        );
    }
}
