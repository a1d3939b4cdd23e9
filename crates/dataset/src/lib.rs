//! Convert traces into tapdeck's Parquet dataset: tables, catalog, two-pass transaction ids
