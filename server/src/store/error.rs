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
    /// Another file-system error.
    #[error("{0}")]
    Io(String),
}

impl PullError {
    /// The HTTP status an API answers this error with.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::BadSource(_) | Self::BadName(_) | Self::Insecure(_) | Self::Ambiguous { .. } => {
                400
            }
            Self::NotFound(_) | Self::NoModelFile(_) => 404,
            Self::Denied { .. } => 403,
            Self::DiskFull { .. } => 507,
            Self::Transfer(_) | Self::Cut { .. } | Self::Checksum { .. } => 502,
            Self::Io(_) => 500,
        }
    }
}
