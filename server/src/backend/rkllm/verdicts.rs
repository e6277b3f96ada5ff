//! The probes' verdicts kept on disk, so that a model is probed once per
//! runtime and model file: a file per model under `[rkllm] probe_dir` (the
//! state directory's `probes`), owner-only, keyed by the probes' version,
//! the runtime's version and SHA-256, the model file's SHA-256 and what
//! the probes could run (a tokenizer, the server's template). A server
//! restart, or the model evicted and loaded again, reads them back; the
//! model file is hashed again only when its size, time or inode changed.
//! A file that cannot be read or does not match is probed over; one that
//! cannot be written only means the next load probes again.

use std::io::Read as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::prompt_cache::{digest, write_private};
use crate::plan::probe::{Check, Observed, PROBE_SET};

/// Largest verdict file read back (it is a few kB).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Where a model's verdicts are kept, and what they were made from.
#[derive(Debug)]
pub(super) struct Store {
    path: PathBuf,
    model_file: PathBuf,
    runtime_file: PathBuf,
}

/// What verdicts are made from: verdicts made from anything else are
/// probed again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Key {
    pub probe_set: u32,
    pub runtime_version: Option<String>,
    pub runtime_sha256: String,
    pub model_sha256: String,
    /// The probes had ids to feed (the model's tokenizer).
    pub tokenizer: bool,
    /// The server renders the model's template.
    pub server_template: bool,
}

/// A file's identity, to tell whether it changed since it was hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    len: u64,
    modified_ns: i128,
    dev: u64,
    ino: u64,
}

impl Stamp {
    fn of(path: &Path) -> Option<Self> {
        let meta = std::fs::metadata(path).ok()?;
        Some(Self {
            len: meta.len(),
            modified_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

/// A verdict file.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    key: Key,
    /// The model file as it was when `key.model_sha256` was computed.
    model_stamp: Stamp,
    checks: Vec<Check>,
    observed: Observed,
    probed_at: u64,
}

/// Verdicts read back.
#[derive(Debug)]
pub(super) struct Kept {
    pub checks: Vec<Check>,
    pub observed: Observed,
    pub probed_at: u64,
}

impl Store {
    /// The store of model `name` (file `model_file`) run by the runtime
    /// library `runtime_file`, in `dir`.
    pub fn new(dir: &Path, name: &str, model_file: &Path, runtime_file: &Path) -> Self {
        let file_hash = format!(
            "{:x}",
            Sha256::digest(model_file.to_string_lossy().as_bytes())
        );
        Self {
            path: dir.join(format!(
                "{}-{}.json",
                super::snapshots::folder_name(name),
                &file_hash[..8]
            )),
            model_file: model_file.to_owned(),
            runtime_file: runtime_file.to_owned(),
        }
    }

    /// The key of verdicts made now, with the model file's SHA-256 taken
    /// from what is kept when the file did not change since.
    pub fn key(
        &self,
        runtime_version: Option<String>,
        tokenizer: bool,
        server_template: bool,
    ) -> Option<(Key, ModelHash)> {
        let runtime_sha256 = sha256_of(&self.runtime_file)?;
        let stamp = Stamp::of(&self.model_file)?;
        let kept = self.read().filter(|s| s.model_stamp == stamp);
        let model_sha256 = match kept {
            Some(stored) => stored.key.model_sha256,
            None => sha256_of(&self.model_file)?,
        };
        Some((
            Key {
                probe_set: PROBE_SET,
                runtime_version,
                runtime_sha256,
                model_sha256,
                tokenizer,
                server_template,
            },
            ModelHash(stamp),
        ))
    }

    /// The verdicts kept for `key`, when there are.
    pub fn kept(&self, key: &Key) -> Option<Kept> {
        let stored = self.read().filter(|s| &s.key == key)?;
        Some(Kept {
            checks: stored.checks,
            observed: stored.observed,
            probed_at: stored.probed_at,
        })
    }

    /// Keeps verdicts made for `key`.
    pub fn keep(
        &self,
        key: Key,
        hash: ModelHash,
        checks: &[Check],
        observed: &Observed,
        probed_at: u64,
    ) {
        let stored = Stored {
            key,
            model_stamp: hash.0,
            checks: checks.to_vec(),
            observed: observed.clone(),
            probed_at,
        };
        let written = self
            .path
            .parent()
            .map_or(Ok(()), |dir| {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
            })
            .and_then(|()| {
                let text = serde_json::to_vec_pretty(&stored).unwrap_or_default();
                write_private(&self.path, &text)
            });
        if let Err(e) = written {
            tracing::warn!(
                file = %self.path.display(),
                error = %e,
                "the probes' verdicts cannot be kept: the model is probed again at its next load"
            );
        }
    }

    fn read(&self) -> Option<Stored> {
        let file = std::fs::File::open(&self.path).ok()?;
        let mut text = Vec::new();
        file.take(MAX_FILE_BYTES + 1).read_to_end(&mut text).ok()?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return None;
        }
        serde_json::from_slice(&text).ok()
    }
}

/// The model file's identity when its SHA-256 was taken.
#[derive(Debug, Clone, Copy)]
pub(super) struct ModelHash(Stamp);

fn sha256_of(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    digest(&mut file).ok().map(|(_, sha)| sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "rkllm-verdicts-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn verdicts_are_kept_per_runtime_and_model_file_and_probed_again_when_either_changes() {
        let dir = scratch();
        let (model, runtime) = (dir.join("m.rkllm"), dir.join("librkllmrt.so"));
        std::fs::write(&model, "weights").unwrap();
        std::fs::write(&runtime, "runtime 1").unwrap();
        let store = Store::new(&dir.join("probes"), "m", &model, &runtime);
        let (key, hash) = store.key(Some("1.3.0".into()), true, true).unwrap();
        assert!(store.kept(&key).is_none(), "nothing kept yet");
        let checks = vec![Check {
            name: "pause_keeps_kv".into(),
            passed: true,
            detail: "held".into(),
            ran: true,
        }];
        store.keep(key.clone(), hash, &checks, &Observed::default(), 7);
        let kept = store.kept(&key).unwrap();
        assert_eq!((kept.checks, kept.probed_at), (checks, 7));
        let mode = std::fs::metadata(&store.path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600, "owner-only");
        // The same files: the same key, without hashing the model again.
        assert_eq!(store.key(Some("1.3.0".into()), true, true).unwrap().0, key);
        // Another runtime library, or another model file: another key.
        std::fs::write(&runtime, "runtime 2").unwrap();
        let (other, _) = store.key(Some("1.3.0".into()), true, true).unwrap();
        assert_ne!(other, key);
        assert!(store.kept(&other).is_none());
        std::fs::write(&runtime, "runtime 1").unwrap();
        std::fs::write(&model, "other weights").unwrap();
        assert_ne!(store.key(Some("1.3.0".into()), true, true).unwrap().0, key);
        // A tokenizer added since: probed again.
        std::fs::write(&model, "weights").unwrap();
        assert_ne!(
            store
                .key(Some("1.3.0".into()), false, true)
                .unwrap()
                .0
                .tokenizer,
            key.tokenizer
        );
        // A damaged file is no verdict.
        std::fs::write(&store.path, "{not json").unwrap();
        assert!(store.kept(&key).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
