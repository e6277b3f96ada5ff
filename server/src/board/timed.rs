//! Reads of the board bounded in time.
//!
//! Every file is opened without blocking (`file.rs`), but a read can still
//! block in the kernel: a file on a hung FUSE or network filesystem, a
//! driver slow to answer. Such a read cannot be interrupted, so it is left
//! behind: past the budget the caller takes what was read so far (each
//! source is put in the snapshot as soon as it is read) with the path the
//! read is stuck at as the reason for the rest. `doctor` reads once
//! ([`read_within`]); `/metrics` reads through a [`Sampler`], which never
//! has more than one read in flight: a scrape that finds one still within
//! its budget waits for it and shares its answer, and one that finds it
//! stuck past its budget answers without the board's figures at once,
//! without starting another.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::file::Tree;
use super::{Missing, Scope, Snapshot, read};

/// How long a read of the board may take before what it has is used.
pub const READ_BUDGET: Duration = Duration::from_secs(2);

/// A read under way: what it has read so far, and the file it is at.
pub(super) struct Progress {
    snapshot: Mutex<Snapshot>,
    now: Mutex<Option<PathBuf>>,
}

impl Progress {
    fn new(root: &Path) -> Self {
        Self {
            snapshot: Mutex::new(Snapshot::empty(root)),
            now: Mutex::new(None),
        }
    }

    /// Reads the board's sources of `scope` under `root` into this.
    pub(super) fn run(&self, root: &Path, scope: Scope) {
        read::snapshot(&Tree::noting(root, &self.now), scope, &self.snapshot);
    }

    /// Notes that the read is at `path` now (the reader under test).
    #[cfg(test)]
    pub(super) fn at(&self, path: Option<PathBuf>) {
        *self.now.lock() = path;
    }

    /// Fills what was read (the reader under test).
    #[cfg(test)]
    pub(super) fn fill(&self, fill: impl FnOnce(&mut Snapshot)) {
        fill(&mut self.snapshot.lock());
    }

    /// Why a read that has not finished has no more to show.
    fn stuck(&self, budget: Duration) -> Missing {
        let at = self.now.lock().clone();
        Missing {
            source: "board",
            reason: match at {
                Some(path) => format!(
                    "{}: no answer within {budget:?}; the board's sources after it are left out \
                     until it returns",
                    path.display()
                ),
                None => format!("the board's read did not finish within {budget:?}"),
            },
        }
    }

    /// What was read so far; unfinished, with the reason.
    fn taken(&self, budget: Duration) -> Snapshot {
        let mut snapshot = self.snapshot.lock().clone();
        if !snapshot.finished {
            snapshot.missing.push(self.stuck(budget));
        }
        snapshot
    }
}

/// Reads the board under `root` on a thread of its own, waiting at most
/// `budget` for it: the whole snapshot, or what was read by then (a read
/// stuck in the kernel is left to itself).
pub fn read_within(root: &Path, scope: Scope, budget: Duration) -> Snapshot {
    let owned = root.to_owned();
    within(root, budget, move |progress| progress.run(&owned, scope))
}

/// Runs `reader` on a thread of its own, waiting at most `budget` for it.
fn within(
    root: &Path,
    budget: Duration,
    reader: impl FnOnce(&Progress) + Send + 'static,
) -> Snapshot {
    let progress = Arc::new(Progress::new(root));
    let (done, finished) = std::sync::mpsc::channel();
    let running = Arc::clone(&progress);
    let spawned = std::thread::Builder::new()
        .name("board-read".into())
        .spawn(move || {
            reader(&running);
            let _ = done.send(());
        });
    match spawned {
        Ok(_) => {
            let _ = finished.recv_timeout(budget);
            progress.taken(budget)
        }
        // No thread to spare: nothing read.
        Err(err) => {
            let mut snapshot = Snapshot::empty(root);
            snapshot.missing.push(Missing {
                source: "board",
                reason: format!("no thread to read the board: {err}"),
            });
            snapshot
        }
    }
}

/// How a [`Sampler`] reads (the board's files; a stand-in in tests).
type Reader = Arc<dyn Fn(&Path, &Progress) + Send + Sync>;

/// The board's reads for `/metrics`: each within a budget, one at a time.
pub struct Sampler {
    root: PathBuf,
    budget: Duration,
    reader: Reader,
    flight: Mutex<Option<Arc<Flight>>>,
}

/// One read in flight.
struct Flight {
    progress: Progress,
    started: Instant,
    done: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("root", &self.root)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Sampler {
    /// Reads the board under `root` within [`READ_BUDGET`].
    pub fn new(root: PathBuf) -> Self {
        Self::with_reader(
            root,
            READ_BUDGET,
            Arc::new(|root: &Path, progress: &Progress| progress.run(root, Scope::Metrics)),
        )
    }

    pub(super) fn with_reader(root: PathBuf, budget: Duration, reader: Reader) -> Self {
        Self {
            root,
            budget,
            reader,
            flight: Mutex::new(None),
        }
    }

    /// The board now: what the read in flight (or a new one) has within
    /// its budget. Needs a Tokio runtime (the read runs on its blocking
    /// threads).
    pub async fn sample(&self) -> Snapshot {
        let flight = {
            let mut slot = self.flight.lock();
            match slot.as_ref() {
                Some(flight) if !*flight.done.borrow() => Arc::clone(flight),
                _ => {
                    let flight = Arc::new(Flight {
                        progress: Progress::new(&self.root),
                        started: Instant::now(),
                        done: tokio::sync::watch::Sender::new(false),
                    });
                    let (reader, root, running) = (
                        Arc::clone(&self.reader),
                        self.root.clone(),
                        Arc::clone(&flight),
                    );
                    tokio::task::spawn_blocking(move || {
                        // Done however the read ends (a panic too).
                        let _done = MarkDone(&running);
                        reader(&root, &running.progress);
                    });
                    *slot = Some(Arc::clone(&flight));
                    flight
                }
            }
        };
        let deadline = flight.started + self.budget;
        if Instant::now() >= deadline && !*flight.done.borrow() {
            // Stuck since an earlier scrape: what it read then is stale.
            let mut snapshot = Snapshot::empty(&self.root);
            snapshot.missing.push(flight.progress.stuck(self.budget));
            return snapshot;
        }
        let mut done = flight.done.subscribe();
        let _ = tokio::time::timeout_at(deadline.into(), done.wait_for(|done| *done)).await;
        flight.progress.taken(self.budget)
    }
}

/// Marks its flight done when dropped.
struct MarkDone<'a>(&'a Flight);

impl Drop for MarkDone<'_> {
    fn drop(&mut self) {
        self.0.done.send_replace(true);
    }
}

#[cfg(test)]
mod tests;
