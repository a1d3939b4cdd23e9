//! Convert traces into tapdeck's Parquet dataset: the tables of docs/dataset.md, the
//! catalog, two-pass transaction ids, and anonymization.

pub mod anonymize;
pub mod capture;
pub mod columns;
pub mod convert;
mod error;
mod nfsrows;
mod nlmrows;
pub mod packets;
mod rpc_sinks;
pub mod rpcx;
pub mod sink;
pub mod source;
pub mod span;
pub mod state;
pub mod tables;

pub use anonymize::Anonymization;
pub use convert::{convert, ConvertOptions, Report};
pub use error::DatasetError;
pub use tables::SCHEMA_VERSION;
