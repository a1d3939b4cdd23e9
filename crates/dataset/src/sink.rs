//! Writing one table's rows for one source file: sorted by time, split into hourly
//! partitions, one Parquet file per partition, one row group per flush. Files are written
//! under a temporary name and renamed when complete, so a reader never sees half a file.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::{KeyValue, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use arrow_array::{Array, Int64Array, RecordBatch, UInt32Array};

use crate::error::{DatasetError, Result};
use crate::tables::{Columns, RowGroupRow, Table, SCHEMA_VERSION};

/// Rows buffered before they are sorted and written as a row group. Near DuckDB's own
/// (122 880): small enough that time-range lookups skip most of a file and that encoding
/// keeps pace with decoding on another core, large enough to compress well.
pub const ROW_GROUP_ROWS: usize = 128 * 1024;

/// One table's rows for one source file. Rows are gathered here, column by column; full
/// batches go to a thread of their own that sorts, partitions and encodes them, so decoding
/// and Parquet encoding run on two cores even when there is one source file.
pub struct TableSink<T: Table> {
    cols: T::Columns,
    written: u64,
    encoder: Option<Encoder<T>>,
    /// Until the first full batch, so that a small table costs no thread.
    pending: Option<TableFiles>,
}

struct Encoder<T: Table> {
    tx: std::sync::mpsc::SyncSender<T::Columns>,
    /// Emptied batches come back, so their memory is faulted in once, not per batch.
    spare: std::sync::mpsc::Receiver<T::Columns>,
    thread: std::thread::JoinHandle<Result<Vec<RowGroupRow>>>,
}

/// The files one table writes for one source: a Parquet writer per hour partition.
struct TableFiles {
    root: PathBuf,
    file_id: i32,
    source: String,
    writers: BTreeMap<String, Partition>,
    catalog: Vec<RowGroupRow>,
}

struct Partition {
    writer: ArrowWriter<File>,
    tmp: PathBuf,
    path: PathBuf,
    /// Path relative to the dataset root, for the catalog.
    rel: String,
    row_groups: i32,
}

impl<T: Table> TableSink<T> {
    pub fn new(root: &Path, file_id: i32, source: &str) -> TableSink<T> {
        TableSink {
            cols: T::Columns::default(),
            written: 0,
            encoder: None,
            pending: Some(TableFiles {
                root: root.to_path_buf(),
                file_id,
                source: source.to_string(),
                writers: BTreeMap::new(),
                catalog: Vec::new(),
            }),
        }
    }

    pub fn push(&mut self, row: T) -> Result<()> {
        self.cols.push(row);
        if self.cols.len() >= ROW_GROUP_ROWS {
            self.written += self.cols.len() as u64;
            self.send()?;
        }
        Ok(())
    }

    /// Hands the full batch to the encoder and takes an empty one in its place.
    fn send(&mut self) -> Result<()> {
        self.start_encoder()?;
        let enc = self.encoder.as_ref().expect("started above");
        let mut next = enc.spare.try_recv().unwrap_or_else(|_| {
            let mut c = T::Columns::default();
            c.reserve(ROW_GROUP_ROWS);
            c
        });
        std::mem::swap(&mut next, &mut self.cols);
        if enc.tx.send(next).is_err() {
            // The encoder stopped on an error; finish() reports it.
            return self.fail();
        }
        Ok(())
    }

    fn start_encoder(&mut self) -> Result<()> {
        if self.encoder.is_none() {
            let mut files = self
                .pending
                .take()
                .expect("files before the encoder starts");
            // One batch in flight: decoding stays at most one batch ahead of encoding.
            let (tx, rx) = std::sync::mpsc::sync_channel::<T::Columns>(1);
            let (spare_tx, spare) = std::sync::mpsc::sync_channel::<T::Columns>(2);
            let thread = std::thread::Builder::new()
                .name(format!("encode-{}", T::NAME))
                .spawn(move || {
                    for mut cols in rx {
                        files.write_batch::<T>(&cols)?;
                        cols.clear();
                        let _ = spare_tx.try_send(cols);
                    }
                    files.finish()
                })
                .map_err(DatasetError::EncoderThread)?;
            self.encoder = Some(Encoder { tx, spare, thread });
        }
        Ok(())
    }

    /// The encoder refused a batch: it stopped on an error, which joining it reports.
    fn fail(&mut self) -> Result<()> {
        let e = self
            .encoder
            .take()
            .ok_or(DatasetError::EncoderGone { table: T::NAME })?;
        drop(e.tx);
        Closing::Encoding {
            table: T::NAME,
            sent: false,
            thread: e.thread,
        }
        .join()
        .map(|_| ())
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u64 {
        self.written + self.cols.len() as u64
    }

    /// Writes what is buffered, completes every file, and returns the row groups written.
    pub fn finish(self) -> Result<Vec<RowGroupRow>> {
        self.close()?.join()
    }

    /// Hands what is buffered to the encoder thread (started now if this table never
    /// filled a batch) and returns without waiting, so that several tables finish their
    /// files in parallel; [`Closing::join`] waits.
    pub fn close(mut self) -> Result<Closing> {
        if self.cols.is_empty() && self.encoder.is_none() {
            let files = self.pending.take().expect("no encoder, so files are here");
            return Ok(Closing::Done(files.finish()));
        }
        self.start_encoder()?;
        let rest = std::mem::take(&mut self.cols);
        let e = self.encoder.take().expect("started above");
        let sent = rest.is_empty() || e.tx.send(rest).is_ok();
        drop(e.tx);
        Ok(Closing::Encoding {
            table: T::NAME,
            sent,
            thread: e.thread,
        })
    }
}

/// A table whose last rows are being written.
pub enum Closing {
    Done(Result<Vec<RowGroupRow>>),
    Encoding {
        table: &'static str,
        /// The last rows reached the encoder (it had not stopped on an error).
        sent: bool,
        thread: std::thread::JoinHandle<Result<Vec<RowGroupRow>>>,
    },
}

impl Closing {
    /// Waits until every file of the table is complete; returns its row groups.
    pub fn join(self) -> Result<Vec<RowGroupRow>> {
        match self {
            Closing::Done(r) => r,
            Closing::Encoding {
                table,
                sent,
                thread,
            } => {
                let r = thread
                    .join()
                    .map_err(|_| DatasetError::EncoderPanicked { table })?;
                if !sent && r.is_ok() {
                    return Err(DatasetError::EncoderStopped { table });
                }
                r
            }
        }
    }
}

impl TableFiles {
    /// Sorts a batch by time (stably; a single capture file is almost always in order
    /// already, and then nothing moves) and writes one row group per hour it spans.
    fn write_batch<T: Table>(&mut self, cols: &T::Columns) -> Result<()> {
        if cols.is_empty() {
            return Ok(());
        }
        let mut batch = cols.batch();
        let mut times = std::borrow::Cow::Borrowed(cols.time_ns());
        if !times.windows(2).all(|w| w[0] <= w[1]) {
            let mut order: Vec<u32> = (0..times.len() as u32).collect();
            order.sort_by_key(|&i| times[i as usize]);
            times = order.iter().map(|&i| times[i as usize]).collect();
            batch = arrow_select::take::take_record_batch(&batch, &UInt32Array::from(order))
                .map_err(|source| DatasetError::SortRows {
                    table: T::NAME,
                    source,
                })?;
        }
        let mut start = 0;
        while start < times.len() {
            let hour = hour_of(times[start]);
            let end = start + times[start..].partition_point(|&t| hour_of(t) == hour);
            let slice = batch.slice(start, end - start);
            self.write_group::<T>(&hour, &slice, (times[start], times[end - 1]))?;
            start = end;
        }
        Ok(())
    }

    fn write_group<T: Table>(
        &mut self,
        hour: &str,
        batch: &RecordBatch,
        (min_time_ns, max_time_ns): (i64, i64),
    ) -> Result<()> {
        if !self.writers.contains_key(hour) {
            let p = self.open_partition::<T>(hour)?;
            self.writers.insert(hour.to_string(), p);
        }
        let part = self.writers.get_mut(hour).expect("inserted above");
        part.writer
            .write(batch)
            .map_err(DatasetError::parquet(&part.tmp))?;
        part.writer
            .flush()
            .map_err(DatasetError::parquet(&part.tmp))?;
        let tids = batch
            .column_by_name("transaction_id")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .map(|a| {
                a.iter()
                    .flatten()
                    .fold((i64::MAX, i64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
            })
            .filter(|(lo, hi)| lo <= hi);
        self.catalog.push(RowGroupRow {
            table: T::NAME.to_string(),
            path: part.rel.clone(),
            row_group: part.row_groups,
            rows: batch.num_rows() as i64,
            min_time_ns,
            max_time_ns,
            min_transaction_id: tids.map(|t| t.0),
            max_transaction_id: tids.map(|t| t.1),
        });
        part.row_groups += 1;
        Ok(())
    }

    fn open_partition<T: Table>(&self, hour: &str) -> Result<Partition> {
        let dir = self.root.join(T::NAME).join(format!("hour={hour}"));
        std::fs::create_dir_all(&dir).map_err(DatasetError::io("create", &dir))?;
        let name = part_name(self.file_id);
        let path = dir.join(&name);
        let tmp = dir.join(format!(".{name}.tmp"));
        let file = File::create(&tmp).map_err(DatasetError::io("create", &tmp))?;
        let props = writer_properties::<T>(&self.source);
        let writer = ArrowWriter::try_new(file, T::schema(), Some(props))
            .map_err(DatasetError::parquet(&tmp))?;
        Ok(Partition {
            writer,
            tmp,
            path,
            rel: format!("{}/hour={hour}/{name}", T::NAME),
            row_groups: 0,
        })
    }

    fn finish(mut self) -> Result<Vec<RowGroupRow>> {
        for (_, p) in std::mem::take(&mut self.writers) {
            p.writer.close().map_err(DatasetError::parquet(&p.tmp))?;
            std::fs::rename(&p.tmp, &p.path).map_err(DatasetError::io("rename", &p.tmp))?;
        }
        Ok(self.catalog)
    }
}

/// The data file name a source file owns in every partition.
pub fn part_name(file_id: i32) -> String {
    format!("part-{file_id:06}-0.parquet")
}

/// Settings every data file shares: zstd, page statistics, bloom filters on the key
/// columns, the time sort order, and what wrote it.
fn writer_properties<T: Table>(source: &str) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(3).expect("valid level"),
        ))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_sorting_columns(Some(vec![SortingColumn {
            column_idx: 0,
            descending: false,
            nulls_first: false,
        }]))
        .set_key_value_metadata(Some(vec![
            KeyValue::new("tapdeck.schema_version".into(), SCHEMA_VERSION.to_string()),
            KeyValue::new("tapdeck.table".into(), T::NAME.to_string()),
            KeyValue::new(
                "tapdeck.converter".into(),
                format!("tapdeck {}", env!("CARGO_PKG_VERSION")),
            ),
            KeyValue::new("tapdeck.source".into(), source.to_string()),
        ]));
    for col in T::BLOOM {
        b = b.set_column_bloom_filter_enabled(ColumnPath::from(*col), true);
    }
    for field in T::schema().fields() {
        let name = field.name().as_str();
        let path = || ColumnPath::from(name);
        match name {
            // Ascending (or nearly) and all distinct: a dictionary never pays, and deltas
            // pack to a few bits.
            "time_ns" | "record" | "transaction_id" => {
                b = b
                    .set_column_dictionary_enabled(path(), false)
                    .set_column_encoding(path(), Encoding::DELTA_BINARY_PACKED);
            }
            // Random 32-bit numbers: a dictionary is built, overflows and is thrown away.
            "tcp_seq" | "tcp_ack" => b = b.set_column_dictionary_enabled(path(), false),
            _ => {}
        }
    }
    b.build()
}

/// Writes a small table (catalog, capture stats) as one file.
pub fn write_whole(path: &Path, table: &str, batch: &arrow_array::RecordBatch) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(DatasetError::io("create", dir))?;
    }
    // Unique per process: shards running at the same time write the catalog too.
    let tmp = path.with_extension(format!("parquet.{}.tmp", std::process::id()));
    let file = File::create(&tmp).map_err(DatasetError::io("create", &tmp))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(3).expect("valid level"),
        ))
        .set_key_value_metadata(Some(vec![
            KeyValue::new("tapdeck.schema_version".into(), SCHEMA_VERSION.to_string()),
            KeyValue::new("tapdeck.table".into(), table.to_string()),
        ]))
        .build();
    let written = ArrowWriter::try_new(file, batch.schema(), Some(props)).and_then(|mut w| {
        w.write(batch)?;
        w.close()
    });
    written.map_err(DatasetError::parquet(&tmp))?;
    std::fs::rename(&tmp, path).map_err(DatasetError::io("rename", &tmp))
}

/// The UTC hour of a time, as partitions name it: `2026-11-23T08`.
pub fn hour_of(time_ns: i64) -> String {
    let secs = time_ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let hour = secs.rem_euclid(86_400) / 3600;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{hour:02}")
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::tables::PacketRow;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    /// More rows than one batch, across two hours, pushed out of order: every row comes
    /// back, each file sorted by time, and the catalog accounts for them all.
    #[test]
    fn batches_are_encoded_on_their_own_thread_and_all_rows_arrive() {
        let dir = tempfile::tempdir().unwrap();
        let hour = 3_600_000_000_000i64;
        let base = 1_795_420_800_000_000_000i64; // 2026-11-23T08:00Z
        let n = ROW_GROUP_ROWS + ROW_GROUP_ROWS / 2;
        let mut sink = TableSink::<PacketRow>::new(dir.path(), 7, "test");
        for i in 0..n as i64 {
            // Descending within each half, so sorting is needed.
            let t = base + (i % 2) * hour + (n as i64 - i) * 1000;
            sink.push(PacketRow {
                time_ns: t,
                record: i,
                ..Default::default()
            })
            .unwrap();
        }
        assert_eq!(sink.rows(), n as u64);
        let catalog = sink.finish().unwrap();
        assert_eq!(catalog.iter().map(|r| r.rows).sum::<i64>(), n as i64);
        let mut total = 0;
        for h in ["2026-11-23T08", "2026-11-23T09"] {
            let path = dir
                .path()
                .join(format!("packets/hour={h}/part-000007-0.parquet"));
            let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
                .unwrap()
                .build()
                .unwrap();
            for batch in reader {
                let batch = batch.unwrap();
                let times = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<arrow_array::Int64Array>()
                    .unwrap();
                assert!(times.values().windows(2).all(|w| w[0] <= w[1]));
                assert!(times.values().iter().all(|&t| hour_of(t) == h));
                total += batch.num_rows();
            }
        }
        assert_eq!(total, n);
    }

    #[test]
    fn hours_are_utc_calendar_hours() {
        assert_eq!(hour_of(0), "1970-01-01T00");
        // 2026-11-23T08:40:28Z
        assert_eq!(hour_of(1_795_423_228_000_000_000), "2026-11-23T08");
        // 2000-02-29T23:59:59Z, a leap day
        assert_eq!(hour_of(951_868_799_000_000_000), "2000-02-29T23");
        assert_eq!(hour_of(-1), "1969-12-31T23");
    }
}
