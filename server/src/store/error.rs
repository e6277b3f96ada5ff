//! Why a pull failed.

/// Why a pull failed; each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The source cannot be read.
    #[error("{0}")]
    BadSource(String),
    /// The model name is not allowed.
    #[error("{0}")]
    BadName(String),
    /// Not there.
    #[error("not found: {0}")]
    NotFound(String),
    /// Gated or private.
    #[error(
        "access to {repo} was refused (HTTP {status}): it is gated or private; accept its terms on \
         Hugging Face and set HF_TOKEN to a token that may read it"
    )]
    Denied {
        /// The repository.
        repo: String,
        /// 401 or 403.
        status: u16,
    },
    /// The hub does not know the token sent.
    #[error(
        "Hugging Face refused the token in HF_TOKEN while reading {repo}: it is not a valid token; \
         set HF_TOKEN to a token from https://huggingface.co/settings/tokens, or unset it for a \
         public repository"
    )]
    BadToken {
        /// The repository.
        repo: String,
    },
    /// The repository has no `.rkllm` file.
    #[error("{0} has no .rkllm file")]
    NoModelFile(String),
    /// Several files fit; the user must choose.
    #[error(
        "{repo} holds several .rkllm files and none is clearly for this board{hint}; choose one with \
         {repo}:FILE:\n  {}",
        files.join("\n  ")
    )]
    Ambiguous {
        /// The repository.
        repo: String,
        /// What was known of the board.
        hint: String,
        /// The candidates.
        files: Vec<String>,
    },
    /// Plain HTTP where only https is allowed.
    #[error(
        "refusing {0}: models are downloaded over https only (an http:// mirror must be configured \
         as the endpoint, HF_ENDPOINT or [store] endpoint)"
    )]
    Insecure(String),
    /// The hub (or its file host, or the proxy) could not be reached.
    #[error("cannot reach the model host: {what}; {hint}")]
    Unreachable {
        /// What failed, naming the host.
        what: String,
        /// What to do about it.
        hint: String,
    },
    /// The transfer failed.
    #[error("download failed: {0}")]
    Transfer(String),
    /// The connection ended early; what arrived is kept.
    #[error(
        "the connection was cut after {got} of {} bytes; pull again to resume where it stopped",
        total.map_or_else(|| "?".to_owned(), |t| t.to_string())
    )]
    Cut {
        /// Bytes in place.
        got: u64,
        /// The file's size.
        total: Option<u64>,
    },
    /// The file is not what its source published.
    #[error(
        "checksum mismatch for {file}: expected sha256 {expected}, got {got}; the download was discarded"
    )]
    Checksum {
        /// The file.
        file: String,
        /// What was published.
        expected: String,
        /// What arrived.
        got: String,
    },
    /// The disk is full.
    #[error("no space left in {dir} for {file} ({size}); the partial download was removed")]
    DiskFull {
        /// The store.
        dir: String,
        /// The file.
        file: String,
        /// Its size, in words.
        size: String,
    },
    /// Not enough free space for the file and the margin kept free.
    #[error(
        "not enough free space in {dir} for {file}: {free} bytes free, {need} more needed and \
         [store] min_free_bytes ({margin}) kept free; free some space (or lower min_free_bytes){kept}"
    )]
    LowSpace {
        /// The store.
        dir: String,
        /// The file.
        file: String,
        /// Bytes free.
        free: u64,
        /// Bytes still to download, as far as known.
        need: u64,
        /// `[store] min_free_bytes`.
        margin: u64,
        /// What became of the partial download, in words.
        kept: &'static str,
    },
    /// The file is larger than the store takes.
    #[error(
        "{file} is larger than [store] max_file_bytes ({limit} bytes){declared}; raise that \
         setting to pull it"
    )]
    TooLarge {
        /// The file.
        file: String,
        /// `[store] max_file_bytes`.
        limit: u64,
        /// What the host declared, in words (empty when it declared nothing).
        declared: String,
    },
    /// The host sent more than it declared.
    #[error(
        "the host sent more than the {declared} bytes it declared for {file}; the download was \
         cut there and discarded"
    )]
    Oversize {
        /// The file.
        file: String,
        /// Its declared size.
        declared: u64,
    },
    /// The host is slower than the store accepts.
    #[error(
        "{file}: the host sent {got} bytes in the last {window} s, below [store] min_bytes_per_sec \
         ({min}); what arrived is kept: pull again to resume"
    )]
    TooSlow {
        /// The file.
        file: String,
        /// Bytes received in the window.
        got: u64,
        /// `[store] rate_window_secs`.
        window: u64,
        /// `[store] min_bytes_per_sec`.
        min: u64,
    },
    /// The pull took longer than allowed.
    #[error(
        "the pull did not finish within [store] pull_timeout_secs ({0} s); what arrived is kept: \
         pull again to resume"
    )]
    TimedOut(u64),
    /// The repository lists a file the store would not take.
    #[error("{0}")]
    BadListing(String),
    /// A vision model, and this server cannot run its encoder.
    #[error(
        "{repo}: {model} is a vision model and needs its vision encoder {encoder}, which this server \
         cannot run: {why}. To store it anyway (to serve it once the RKNN runtime is installed, \
         or from another server sharing the store): `rkllm-server pull --store-only {spec}`, or \
         POST /api/pull {{\"model\": \"{spec}\", \"store_only\": true}}"
    )]
    NeedsVisionRuntime {
        /// The repository.
        repo: String,
        /// What was asked for.
        spec: String,
        /// The model file.
        model: String,
        /// The encoder file.
        encoder: String,
        /// Why this server cannot run it.
        why: String,
    },
    /// A file of the repository breaks the bounds of what it should be (a
    /// damaged or hostile tokenizer): nothing was stored.
    #[error("{0}; the pull was refused and nothing was stored")]
    BadContent(String),
    /// Another file-system error.
    #[error("{0}")]
    Io(String),
}
