//! The store's lock of one name: a lock file in the downloads' folder that
//! pulls (and fetches of a configured tokenizer) of that name take turns
//! on, in this process or another.

use std::io;
use std::path::Path;

use super::error::PullError;
use super::progress::Progress;

fn io_error(context: &str) -> impl Fn(io::Error) -> PullError + '_ {
    move |e| PullError::Io(format!("{context}: {e}"))
}

/// Holds the store's lock for one model name while a pull runs; other
/// pulls of that name, in this process or another, wait for it.
pub(super) struct NameLock {
    _file: std::fs::File,
}

impl NameLock {
    /// Takes the lock of `name` in `dir`, waiting for whoever holds it.
    pub(super) async fn take(
        dir: &Path,
        name: &str,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Self, PullError> {
        std::fs::create_dir_all(dir).map_err(io_error(&dir.display().to_string()))?;
        let path = dir.join(format!("{name}.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_error(&path.display().to_string()))?;
        use rustix::fs::{FlockOperation, flock};
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok() {
            return Ok(Self { _file: file });
        }
        progress(Progress::Waiting);
        let file = tokio::task::spawn_blocking(move || {
            flock(&file, FlockOperation::LockExclusive).map(|()| file)
        })
        .await
        .map_err(|e| PullError::Io(format!("waiting for another pull: {e}")))?
        .map_err(|e| PullError::Io(format!("{}: {e}", path.display())))?;
        Ok(Self { _file: file })
    }
}
