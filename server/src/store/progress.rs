//! What a pull is doing, as it reports it to whoever shows progress (the
//! command line's bar, `/api/pull`'s lines).

/// What a pull is doing, for progress reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Reading the repository's file list.
    Resolving,
    /// Another pull of this model is under way; waiting for it.
    Waiting,
    /// Bytes of `file` so far, of `total` when known.
    Downloading {
        /// The file.
        file: String,
        /// Its SHA-256, when published.
        sha256: Option<String>,
        /// Bytes in place (including what an earlier attempt left).
        completed: u64,
        /// Its size.
        total: Option<u64>,
    },
    /// Checking the SHA-256.
    Verifying,
    /// Writing the manifest.
    Writing,
    /// The model is in the store (`fresh`: downloaded now; otherwise it
    /// was there already).
    Done {
        /// Downloaded by this pull.
        fresh: bool,
    },
}
