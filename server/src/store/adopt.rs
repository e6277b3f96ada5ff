//! A `.rkllm` file put into the store by hand becomes a model: a file
//! copied into `models_dir` is moved into a folder of its own, and a
//! folder holding one `.rkllm` file without a manifest gets one. Its
//! SHA-256 is computed once, when the manifest is written (marked as
//! computed, not verified); the running server then serves it like a
//! pulled model.
//!
//! A file is taken only once it has settled (unchanged for [`SETTLE`], so
//! a copy still being written is left alone), never while a pull holds the
//! lock of its name, and never when it is a configured model's file.
//! What cannot be taken is warned about once.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::download::hex;
use super::names::{check_file_name, check_name, name_for_file};
use super::{MANIFEST, Manifest, Origin, Store, warned};

/// How long a file must be left unchanged before it is taken.
pub const SETTLE: Duration = Duration::from_secs(5);

/// Why there is no tokenizer for a model put in place by hand.
const NO_TOKENIZER: &str = "the model file was put into the store by hand; name a tokenizer with \
     `tokenizer` in a [[models]] entry, or pull the model from its repository";

fn is_model_file(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("rkllm"))
}

/// Whether `path` has been left unchanged for [`SETTLE`] (its content
/// and, through its change time, its place: a rename counts).
fn settled(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let changed =
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(meta.ctime()).unwrap_or(0));
    let latest = meta.modified().map_or(changed, |m| m.max(changed));
    SystemTime::now()
        .duration_since(latest)
        .is_ok_and(|age| age >= SETTLE)
}

/// The SHA-256 of the file at `path`, hex, and its size.
fn digest(path: &Path) -> io::Result<(String, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let size = io::copy(&mut file, &mut hasher)?;
    Ok((hex(&hasher.finalize()), size))
}

/// The store's lock of `name`, when no pull holds it.
fn try_lock(store: &Store, name: &str) -> Option<std::fs::File> {
    use rustix::fs::{FlockOperation, flock};
    let dir = store.partial_dir();
    std::fs::create_dir_all(&dir).ok()?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!("{name}.lock")))
        .ok()?;
    flock(&file, FlockOperation::NonBlockingLockExclusive).ok()?;
    Some(file)
}

/// Warns (once) that `path` was not taken, and why.
fn refuse(path: &Path, why: &str) {
    let err = io::Error::other(why.to_owned());
    if warned::first_time(path, &err) {
        tracing::warn!(file = %path.display(), "not taken as a model: {why}");
    }
}

impl Store {
    /// Turns the `.rkllm` files put into the store by hand into models
    /// (see the module's notes), leaving alone the files of `keep` (the
    /// configured models'). Returns the names of the models it made.
    pub fn adopt_dropped(&self, keep: &[PathBuf]) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.dir()) else {
            return Vec::new();
        };
        let keep: Vec<PathBuf> = keep
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        let kept = |path: &Path| std::fs::canonicalize(path).is_ok_and(|p| keep.contains(&p));
        let mut made = Vec::new();
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if file_name.starts_with('.') || kept(&path) {
                continue;
            }
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let found = if meta.is_file() && is_model_file(&path) {
                Some((name_for_file(&file_name), path.clone(), meta))
            } else if meta.is_dir() && !path.join(MANIFEST).exists() {
                self.lone_model_file(&path, &kept)
                    .map(|(file, meta)| (file_name.clone(), file, meta))
            } else {
                None
            };
            let Some((name, file, meta)) = found else {
                continue;
            };
            if !settled(&meta) {
                continue;
            }
            match self.adopt(&name, &file) {
                Ok(true) => made.push(name),
                Ok(false) => {}
                Err(why) => refuse(&file, &why),
            }
        }
        made
    }

    /// The one `.rkllm` file in folder `dir`, if it holds exactly one.
    fn lone_model_file(
        &self,
        dir: &Path,
        kept: &dyn Fn(&Path) -> bool,
    ) -> Option<(PathBuf, std::fs::Metadata)> {
        let mut files = std::fs::read_dir(dir)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| is_model_file(p));
        let file = files.next()?;
        if files.next().is_some() {
            refuse(
                dir,
                "the folder holds several .rkllm files and no manifest; keep one per folder",
            );
            return None;
        }
        if kept(&file) {
            return None;
        }
        let meta = std::fs::metadata(&file).ok()?;
        meta.is_file().then_some((file, meta))
    }

    /// Makes model `name` of `file` (in the store's folder, or already in
    /// the model's own). Returns whether it did (not when a pull of that
    /// name is running, or the file changed meanwhile: next time).
    fn adopt(&self, name: &str, file: &Path) -> Result<bool, String> {
        check_name(name).map_err(|m| format!("its model name {name:?}: {m}"))?;
        let base = file
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        check_file_name(&base).map_err(|m| format!("its file name: {m}"))?;
        let dir = self.model_dir(name);
        let in_place = file.parent() == Some(dir.as_path());
        if !in_place && dir.join(MANIFEST).exists() {
            return Err(format!(
                "a model named {name} is already stored; rename the file, or `rkllm-server rm \
                 {name}` first"
            ));
        }
        if !in_place && dir.join(&base).exists() {
            return Err(format!("{} is already there", dir.join(&base).display()));
        }
        let Some(_lock) = try_lock(self, name) else {
            return Ok(false);
        };
        let before = std::fs::metadata(file).map_err(|e| e.to_string())?;
        let (sha256, size) = digest(file).map_err(|e| format!("cannot read it: {e}"))?;
        let after = std::fs::metadata(file).map_err(|e| e.to_string())?;
        if after.len() != before.len() || after.modified().ok() != before.modified().ok() {
            return Ok(false);
        }
        if self.get(name).ok().flatten().is_some() && in_place {
            // A pull finished meanwhile.
            return Ok(false);
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let target = dir.join(&base);
        if !in_place {
            std::fs::rename(file, &target).map_err(|e| format!("cannot move it: {e}"))?;
        }
        let manifest = Manifest {
            name: name.to_owned(),
            file: base.clone(),
            size,
            sha256,
            sha256_verified: false,
            pulled_unix: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            source: Origin {
                spec: format!("a file put into the store ({base})"),
                repository: None,
                revision: None,
                commit: None,
                file: Some(base),
                url: format!("file://{}", target.display()),
            },
            chat_template: None,
            settings: crate::model::ModelSettings::default(),
            vision_encoder: None,
            tokenizer: None,
            tokenizer_missing: Some(NO_TOKENIZER.to_owned()),
        };
        self.write_manifest(&manifest)
            .map_err(|e| format!("cannot write its manifest: {e}"))?;
        tracing::info!(
            model = %name,
            file = %target.display(),
            sha256 = %manifest.sha256,
            "a model file put into the store is now a model"
        );
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty folder of its own for test `tag`.
    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rkllm-adopt-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn age(path: &Path) {
        let old = SystemTime::now() - SETTLE * 2;
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(old).unwrap();
    }

    #[test]
    fn a_fresh_file_waits_and_a_settled_one_needs_its_change_time_old_too() {
        let dir = scratch("fresh");
        let store = Store::new(dir.clone());
        let file = dir.join("Tiny_rk3588.rkllm");
        std::fs::write(&file, b"model").unwrap();
        assert!(store.adopt_dropped(&[]).is_empty());
        age(&file);
        // Its change time is still now: it is left for a later round.
        assert!(store.adopt_dropped(&[]).is_empty());
        assert!(file.exists());
    }

    #[test]
    fn a_file_in_its_own_folder_gets_a_manifest_with_its_checksum() {
        let dir = scratch("own");
        let store = Store::new(dir.clone());
        std::fs::create_dir(dir.join("mine")).unwrap();
        let file = dir.join("mine/m.rkllm");
        std::fs::write(&file, b"model").unwrap();
        assert!(store.adopt("mine", &file).unwrap());
        let manifest = store.get("mine").unwrap().unwrap();
        assert_eq!(manifest.file, "m.rkllm");
        assert_eq!(manifest.size, 5);
        assert_eq!(hex(&Sha256::digest(b"model")), manifest.sha256);
        assert!(!manifest.sha256_verified);
    }

    #[test]
    fn a_file_with_the_name_of_a_stored_model_is_refused() {
        let dir = scratch("clash");
        let store = Store::new(dir.clone());
        std::fs::create_dir(dir.join("m")).unwrap();
        std::fs::write(dir.join("m/m.rkllm"), b"one").unwrap();
        assert!(store.adopt("m", &dir.join("m/m.rkllm")).unwrap());
        let loose = dir.join("m.rkllm");
        std::fs::write(&loose, b"two").unwrap();
        let err = store.adopt("m", &loose).unwrap_err();
        assert!(err.contains("already stored"), "{err}");
        assert!(loose.exists());
    }
}
