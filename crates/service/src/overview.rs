//! The stores at a glance, for the page, `/api/v1/files`, `/api/v1/info` and (when serving
//! stores read-only) `/api/v1/stats`: read from the files once and kept, so that what they
//! cost does not grow with the number of requests.
//!
//! A listing is read again when it is older than [`MAX_AGE`], or at once when the recorder
//! finished or deleted a file since, or the served stores changed. Requests that arrive
//! while it is being read wait for that one reading; the reading runs on a blocking thread
//! at idle priority, like a query.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::history::Timeline;
use crate::query::{self, QueryError};
use crate::state::Service;

/// How old a listing may be before a request reads the stores again.
pub const MAX_AGE: Duration = Duration::from_secs(2);

/// What the overview endpoints show.
pub struct Listing {
    /// `/api/v1/info`'s document.
    pub info: serde_json::Value,
    /// `/api/v1/files`'s list.
    pub files: serde_json::Value,
    /// The stores' per-minute counts from their files (`None` while recording: the
    /// recorder keeps them in memory).
    pub timeline: Option<Timeline>,
}

/// What a listing was read from: when this differs, it is read again.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    stores: Vec<PathBuf>,
    files_written: u64,
    files_deleted: u64,
    recording: bool,
}

impl Key {
    fn of(service: &Service) -> Key {
        let stores = service.stores.read().unwrap().clone();
        let counts = service.live().map(|live| {
            let stats = &live.stats;
            use std::sync::atomic::Ordering::Relaxed;
            (
                stats.files_written.load(Relaxed),
                stats.files_deleted.load(Relaxed),
            )
        });
        let recording = service.timeline.lock().unwrap().is_some();
        let (files_written, files_deleted) = counts.unwrap_or_default();
        Key {
            stores,
            files_written,
            files_deleted,
            recording,
        }
    }
}

struct Cached {
    key: Key,
    read_at: Instant,
    listing: Arc<Listing>,
}

/// The last listing; see the module's documentation.
#[derive(Default)]
pub struct Overview {
    cached: tokio::sync::Mutex<Option<Cached>>,
}

impl Overview {
    /// The listing of `service`'s stores as of at most [`MAX_AGE`] ago.
    pub async fn get(&self, service: &Service) -> Result<Arc<Listing>, QueryError> {
        let key = Key::of(service);
        // Held while reading: concurrent requests wait for the one reading.
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref() {
            if c.key == key && c.read_at.elapsed() < MAX_AGE {
                return Ok(Arc::clone(&c.listing));
            }
        }
        let (stores, recording) = (key.stores.clone(), key.recording);
        let listing = tokio::task::spawn_blocking(move || {
            query::lower_priority();
            read(&stores, recording)
        })
        .await
        .map_err(|_| QueryError::Store("reading the stores failed".into()))??;
        let listing = Arc::new(listing);
        *cached = Some(Cached {
            key,
            read_at: Instant::now(),
            listing: Arc::clone(&listing),
        });
        Ok(listing)
    }
}

fn read(stores: &[PathBuf], recording: bool) -> Result<Listing, QueryError> {
    let (info, files) = query::overview(stores)?;
    let timeline = (!recording).then(|| {
        let mut all = Timeline::default();
        for store in stores {
            all.merge(&Timeline::read(store));
        }
        all
    });
    Ok(Listing {
        info,
        files,
        timeline,
    })
}
