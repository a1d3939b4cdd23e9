//! Reading the trace stores that `tapdeck-recorder` writes: the manifest and file names
//! (`meta`), opening stored files from their chunk index (`read`), merging files and stores
//! into one time-ordered packet stream (`extract`), and checking and finalizing damaged or
//! unfinished files (`verify`, `finalize`), and the flow index of a chunk (`flows`, built
//! the same way by the recorder, by `verify` and by `index`, which adds it to files written
//! without one). Nothing here records; the recorder depends on this crate, never the
//! reverse.

pub mod extract;
pub mod finalize;
pub mod flows;
pub mod index;
pub mod lock;
pub mod meta;
pub mod read;
pub mod verify;
