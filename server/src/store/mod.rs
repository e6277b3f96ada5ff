//! The model store: models pulled from Hugging Face (or a URL) into
//! `models_dir`, one folder per model holding its `.rkllm` file and a
//! `manifest.json` (name, source, size, sha256, when pulled, and the
//! settings a `[[models]]` entry takes). The store turns manifests into
//! model specs for the engine; `pull` fetches models (see [`pull`]).
//!
//! A folder without a manifest is not a model: the manifest is written
//! last, by rename, so a pull cut short never shows up half-done.
//! Downloads in progress live in `models_dir/.partial/`, where an
//! interrupted pull resumes.
//!
//! A model's tokenizer (`tokenizer.json`, for structured output) is pulled
//! with it into its folder, from its repository or the base model its card
//! names, and recorded in the manifest, or the manifest says why there is
//! none (see [`tokenizer`]). Removing a model removes its folder, tokenizer
//! included. A configured model's `tokenizer = "owner/repo"` is fetched
//! into `models_dir/.tokenizers/`, which `rm` leaves alone.
//!
//! A manifest names files only inside its model's folder: every file name
//! it holds is checked (see [`Manifest::check`]) when it is read and before
//! it is written, and one that fails is refused, never used.

mod adopt;
mod choose;
mod download;
mod error;
mod hf;
mod lock;
mod names;
mod progress;
pub mod pull;
mod reach;
mod source;
mod template;
pub mod tokenizer;

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::TokenizerOrigin;
use crate::model::JinjaTemplate;
use crate::model::tokenizer::TokenizerSource;
use crate::model::{ModelSettings, ModelSpec, VisionSpec};

pub use download::PullLimits;
pub use error::PullError;
pub use hf::Hub;
pub use names::{FileDetails, check_file_name, check_name, check_repo_path, details_of};
pub use progress::Progress;
pub use pull::PullRequest;
pub use source::Source;
pub use tokenizer::{HubTokenizer, TOKENIZER_FILE, TokenizerSetting};

/// Where a stored model came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// What was asked for: `owner/repo[:file]` or a URL.
    pub spec: String,
    /// The Hugging Face repository, when it came from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Its revision (branch, tag or commit) and the commit it resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The commit Hugging Face reported for that revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The file in the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The URL the file was downloaded from (before redirects).
    pub url: String,
}

/// A stored model's `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Name clients use.
    pub name: String,
    /// The model file, in the model's folder.
    pub file: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Whether `sha256` was checked against one the source published
    /// (otherwise it was computed and recorded).
    pub sha256_verified: bool,
    /// When it was pulled (Unix seconds).
    pub pulled_unix: u64,
    /// Where it came from.
    pub source: Origin,
    /// Chat template: `builtin` (default), `chatml` or `llama3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<String>,
    /// Init settings, as a `[[models]]` entry takes them.
    #[serde(default)]
    pub settings: ModelSettings,
    /// The vision encoder pulled with a vision-language model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision_encoder: Option<StoredFile>,
    /// The model's tokenizer, which structured output needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<StoredTokenizer>,
    /// Why the pull found no tokenizer (absent in a manifest written before
    /// tokenizers were pulled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_missing: Option<String>,
}

impl Manifest {
    /// The model's files in its folder, each with the key that names it.
    pub fn files(&self) -> Vec<(&'static str, &str)> {
        let mut files = vec![("file", self.file.as_str())];
        if let Some(encoder) = &self.vision_encoder {
            files.push(("vision_encoder.file", encoder.file.as_str()));
        }
        if let Some(tokenizer) = &self.tokenizer {
            files.push(("tokenizer.file", tokenizer.file.as_str()));
        }
        files
    }

    /// Checks its name and every file name it holds: each must be a plain
    /// name in the model's folder (see [`check_file_name`]).
    ///
    /// # Errors
    /// The first bad one, with its key.
    pub fn check(&self) -> Result<(), String> {
        check_name(&self.name).map_err(|m| format!("name: {m}"))?;
        let files = self.files();
        for (at, (key, file)) in files.iter().enumerate() {
            check_file_name(file).map_err(|m| format!("{key}: {m}"))?;
            if let Some((other, _)) = files[..at].iter().find(|(_, f)| f == file) {
                return Err(format!("{key}: {file:?} is the file {other} names too"));
            }
        }
        Ok(())
    }
}

/// A stored model's tokenizer, in its folder, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredTokenizer {
    /// Its name in the model's folder (`tokenizer.json`).
    pub file: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Whether `sha256` was checked against a published one.
    pub sha256_verified: bool,
    /// The repository it came from: the model's own, or its base model.
    pub repository: String,
    /// Its path there.
    pub path: String,
    /// The revision it was read at.
    pub revision: String,
    /// The commit that revision resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Tokens in its vocabulary, as read when it was pulled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<usize>,
    /// The model's own chat template, from the `tokenizer_config.json`
    /// beside it (see [`template`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<JinjaTemplate>,
    /// Why the pull recorded no chat template (absent in a manifest
    /// written before templates were pulled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template_missing: Option<String>,
}

/// A further file of a stored model, in its folder.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredFile {
    /// Its name in the model's folder.
    pub file: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Whether `sha256` was checked against a published one.
    pub sha256_verified: bool,
}

/// The folder of stored models.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// Name of a model's manifest in its folder.
pub const MANIFEST: &str = "manifest.json";

impl Store {
    /// The store in `dir` (created when first written to).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of model `name`.
    pub fn model_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Where downloads in progress are kept.
    pub fn partial_dir(&self) -> PathBuf {
        self.dir.join(".partial")
    }

    /// Every stored model, by name. Folders without a manifest are
    /// skipped; a manifest that cannot be read or is refused is skipped
    /// and warned about once (again only when it changes).
    pub fn list(&self) -> Vec<Manifest> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut models: Vec<Manifest> = entries
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                check_name(&name).ok()?;
                // A file (a `.rkllm` put here by hand) waits for `adopt_dropped`.
                if !self.model_dir(&name).is_dir() {
                    return None;
                }
                let path = self.model_dir(&name).join(MANIFEST);
                match self.get(&name) {
                    Ok(found) => {
                        warned::forget(&path);
                        found
                    }
                    Err(err) => {
                        if warned::first_time(&path, &err) {
                            tracing::warn!(
                                model = %name,
                                error = %err,
                                "manifest refused: the model is not served until it is fixed or \
                                 pulled again"
                            );
                        }
                        None
                    }
                }
            })
            .collect();
        models.sort_by(|a, b| a.name.cmp(&b.name));
        models
    }

    /// Model `name`, if stored.
    ///
    /// # Errors
    /// A manifest that cannot be read or parsed, that belongs to another
    /// folder, or that names a file outside its folder.
    pub fn get(&self, name: &str) -> io::Result<Option<Manifest>> {
        check_name(name).map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
        let path = self.model_dir(name).join(MANIFEST);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let manifest: Manifest = serde_json::from_str(&text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        })?;
        let refused = |why: String| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {why}", path.display()),
            )
        };
        manifest.check().map_err(refused)?;
        if manifest.name != name {
            return Err(refused(format!(
                "name {:?} does not match its folder {name:?}",
                manifest.name
            )));
        }
        Ok(Some(manifest))
    }

    /// Removes model `name`: its manifest first (so it stops being a
    /// model at once), then its folder. Returns whether it was stored.
    ///
    /// # Errors
    /// A bad name, or a folder that cannot be removed.
    pub fn remove(&self, name: &str) -> io::Result<bool> {
        check_name(name).map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
        let dir = self.model_dir(name);
        match std::fs::remove_file(dir.join(MANIFEST)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        }
        std::fs::remove_dir_all(&dir)?;
        Ok(true)
    }

    /// The engine's spec of a stored model.
    pub fn spec(&self, manifest: &Manifest) -> ModelSpec {
        ModelSpec {
            name: manifest.name.clone(),
            path: Some(self.model_dir(&manifest.name).join(&manifest.file)),
            template: template::of(manifest),
            settings: manifest.settings.clone(),
            embedding: None,
            reranker: false,
            lora: Vec::new(),
            prompt_cache: None,
            reasoning: crate::model::ReasoningMode::resolve("auto", &manifest.name)
                .unwrap_or_default(),
            // Where it is, or would be: a pull that brings one later needs
            // no new spec (see `tokenizer_origin` for why it is missing).
            tokenizer: Some(TokenizerSource::File(
                self.model_dir(&manifest.name).join(
                    manifest
                        .tokenizer
                        .as_ref()
                        .map_or(TOKENIZER_FILE, |t| t.file.as_str()),
                ),
            )),
            // Defaults for its family (from its name); a `[[models]]`
            // entry of the same name can set every vision key.
            vision: manifest.vision_encoder.as_ref().and_then(|encoder| {
                VisionSpec::defaults(
                    &manifest.name,
                    &self.model_dir(&manifest.name).join(&encoder.file),
                    None,
                )
                .ok()
            }),
        }
    }

    /// Where a stored model's tokenizer came from, or why it has none, and
    /// how to give it one.
    pub fn tokenizer_origin(&self, manifest: &Manifest) -> TokenizerOrigin {
        let fix = format!(
            "pull it again naming one, `rkllm-server pull --tokenizer OWNER/REPO {}`, or declare \
             it in a [[models]] entry with its `path` and `tokenizer`",
            manifest.source.spec
        );
        match &manifest.tokenizer {
            Some(tokenizer) => TokenizerOrigin {
                from: Some(if tokenizer.path == TOKENIZER_FILE {
                    tokenizer.repository.clone()
                } else {
                    format!("{}:{}", tokenizer.repository, tokenizer.path)
                }),
                missing: Some(format!(
                    "its tokenizer.json is missing from {}",
                    self.model_dir(&manifest.name).display()
                )),
                fix: Some(fix),
            },
            None => TokenizerOrigin {
                from: None,
                missing: Some(manifest.tokenizer_missing.clone().unwrap_or_else(|| {
                    "it was pulled without one (by a version that did not pull tokenizers)".into()
                })),
                fix: Some(fix),
            },
        }
    }

    /// Writes `manifest` into its folder, atomically.
    ///
    /// # Errors
    /// A manifest that [`Manifest::check`] refuses, or the write's error.
    pub fn write_manifest(&self, manifest: &Manifest) -> io::Result<()> {
        manifest
            .check()
            .map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
        let dir = self.model_dir(&manifest.name);
        let tmp = dir.join(format!(".{MANIFEST}.tmp"));
        let text = serde_json::to_vec_pretty(manifest).map_err(io::Error::other)?;
        write_synced(&tmp, &text)?;
        std::fs::rename(&tmp, dir.join(MANIFEST))?;
        sync_dir(&dir);
        Ok(())
    }
}

/// Writes a whole file and flushes it to disk.
fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Flushes a directory's entries (a rename in it) to disk; best effort.
fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Which broken manifests have been warned about. The store is read
/// again every two seconds while the server runs; a broken manifest is
/// warned about once, and again only when it changes.
mod warned {
    use std::collections::BTreeMap;
    use std::hash::{Hash, Hasher};
    use std::io;
    use std::path::{Path, PathBuf};

    /// Each manifest warned about, with a digest of its content (or of the
    /// error, when it cannot be read). Synchronous: held for one lookup.
    static WARNED: parking_lot::Mutex<BTreeMap<PathBuf, u64>> =
        parking_lot::Mutex::new(BTreeMap::new());

    /// Whether the refusal of `path` (with `err`) is news: the first for
    /// this file, or since its content changed.
    pub(super) fn first_time(path: &Path, err: &io::Error) -> bool {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        match std::fs::read(path) {
            Ok(bytes) => bytes.hash(&mut hasher),
            Err(read) => read.kind().hash(&mut hasher),
        }
        err.to_string().hash(&mut hasher);
        let digest = hasher.finish();
        WARNED.lock().insert(path.to_owned(), digest) != Some(digest)
    }

    /// `path` is fine (or gone): a later refusal is news again.
    pub(super) fn forget(path: &Path) {
        let mut warned = WARNED.lock();
        if !warned.is_empty() {
            warned.remove(path);
        }
    }
}

/// The store with what pulls need: the Hub client and how to choose files.
#[derive(Debug, Clone)]
pub struct Service {
    /// The store.
    pub store: Store,
    /// The Hugging Face endpoint.
    pub hub: Hub,
    /// Revision pulled when none is named.
    pub revision: String,
    /// This board's chip.
    pub platform: Option<String>,
    /// The runtime's version, when known.
    pub runtime_version: Option<String>,
    /// Whether the HTTP APIs may pull and delete.
    pub api_pull: bool,
    /// Whether this server can run a vision model's encoder: `Err` says
    /// why not (the `rkllm` backend without a loadable RKNN runtime).
    pub vision_runtime: Result<(), String>,
    /// What bounds a pull.
    pub limits: PullLimits,
    /// Where a pulled tokenizer is checked and a pulled chat template
    /// test-rendered (untrusted input, bounded there).
    pub sandbox: std::sync::Arc<crate::sandbox::Sandbox>,
}

impl Service {
    /// Pulls what `request` names into the store, telling `on_progress` how
    /// it goes; the manifest stored, with the model's spec to serve it.
    ///
    /// # Errors
    /// See [`pull::pull`].
    pub async fn pull(
        &self,
        request: &PullRequest,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<(Manifest, crate::model::ModelSpec), PullError> {
        let manifest = pull::pull(&self.store, &self.hub, request, on_progress).await?;
        let spec = self.store.spec(&manifest);
        Ok((manifest, spec))
    }

    /// The store's folder, absolute where it can be made so.
    pub fn models_dir(&self) -> std::path::PathBuf {
        std::path::absolute(self.store.dir()).unwrap_or_else(|_| self.store.dir().to_owned())
    }

    /// The stored model `name`'s manifest, read off the async workers.
    ///
    /// # Errors
    /// A name that is not a model's, or a manifest that cannot be read.
    pub async fn stored(&self, name: &str) -> io::Result<Option<Manifest>> {
        let (store, name) = (self.store.clone(), name.to_owned());
        tokio::task::spawn_blocking(move || store.get(&name))
            .await
            .map_err(io::Error::other)?
    }

    /// Removes the stored model `name`, off the async workers; whether it
    /// was there.
    ///
    /// # Errors
    /// What removing its files failed with.
    pub async fn remove(&self, name: &str) -> io::Result<bool> {
        let (store, name) = (self.store.clone(), name.to_owned());
        tokio::task::spawn_blocking(move || store.remove(&name))
            .await
            .map_err(io::Error::other)?
    }

    /// The folder of the stored model `name`.
    pub fn model_dir(&self, name: &str) -> std::path::PathBuf {
        self.store.model_dir(name)
    }

    /// The manifest of the stored model `name` whose file is `path` (not a
    /// configured model of the same name); reads it from the disk.
    pub fn manifest_of(&self, name: &str, path: Option<&Path>) -> Option<Manifest> {
        self.store
            .get(name)
            .ok()
            .flatten()
            .filter(|m| path.is_some_and(|p| p.ends_with(&m.file)))
    }

    /// A pull of `spec`, stored as `name` (default: from the file name);
    /// `store_only` stores a model this server cannot run.
    pub fn request(
        &self,
        spec: &str,
        name: Option<String>,
        revision: Option<String>,
        store_only: bool,
    ) -> PullRequest {
        PullRequest {
            spec: spec.to_owned(),
            name,
            revision: revision.unwrap_or_else(|| self.revision.clone()),
            platform: self.platform.clone(),
            runtime_version: self.runtime_version.clone(),
            vision_runtime: if store_only {
                Ok(())
            } else {
                self.vision_runtime.clone()
            },
            limits: self.limits,
            tokenizer: None,
            sandbox: std::sync::Arc::clone(&self.sandbox),
        }
    }

    /// The stored model that `spec` was pulled as (`owner/repo:file`, …).
    pub fn find_by_source(&self, spec: &str) -> Option<Manifest> {
        let bare = spec.strip_suffix(":latest").unwrap_or(spec);
        self.store
            .list()
            .into_iter()
            .find(|m| m.source.spec == spec || m.source.spec == bare)
    }
}

/// The default store: `$XDG_DATA_HOME/rkllm-server/models`, or
/// `~/.local/share/rkllm-server/models` (the service sets its own).
pub fn default_dir() -> PathBuf {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/share"))
        })
        .unwrap_or_else(|| PathBuf::from("/var/lib"));
    data.join("rkllm-server").join("models")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(name: &str) -> Manifest {
        Manifest {
            name: name.into(),
            file: "m.rkllm".into(),
            size: 3,
            sha256: "ab".into(),
            sha256_verified: false,
            pulled_unix: 1,
            source: Origin {
                spec: "o/r".into(),
                repository: Some("o/r".into()),
                revision: Some("main".into()),
                commit: None,
                file: Some("m.rkllm".into()),
                url: "https://example.org/o/r/resolve/main/m.rkllm".into(),
            },
            chat_template: Some("chatml".into()),
            settings: ModelSettings {
                max_context_len: Some(2048),
                ..ModelSettings::default()
            },
            vision_encoder: None,
            tokenizer: None,
            tokenizer_missing: None,
        }
    }

    #[test]
    fn manifests_list_show_become_specs_and_are_removed() {
        let dir = std::env::temp_dir().join(format!("rkllm-store-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::new(dir.clone());
        assert!(store.list().is_empty());
        for name in ["b-model", "a-model"] {
            std::fs::create_dir_all(store.model_dir(name)).unwrap();
            std::fs::write(store.model_dir(name).join("m.rkllm"), "abc").unwrap();
            store.write_manifest(&manifest(name)).unwrap();
        }
        // A folder without a manifest (a pull cut short) is not a model.
        std::fs::create_dir_all(store.model_dir("half")).unwrap();
        let names: Vec<String> = store.list().into_iter().map(|m| m.name).collect();
        assert_eq!(names, ["a-model", "b-model"]);
        let spec = store.spec(&store.get("a-model").unwrap().unwrap());
        assert_eq!(spec.template, crate::model::ChatTemplate::ChatMl);
        assert_eq!(spec.settings.max_context_len, Some(2048));
        assert_eq!(spec.path.unwrap(), dir.join("a-model/m.rkllm"));
        assert!(store.remove("a-model").unwrap());
        assert!(!store.remove("a-model").unwrap());
        assert!(store.get("../etc").is_err());
        assert!(store.remove("..").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_manifest_naming_a_file_outside_its_folder_is_refused() {
        let dir = std::env::temp_dir().join(format!("rkllm-store-escape-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::new(dir.clone());
        std::fs::create_dir_all(store.model_dir("m")).unwrap();
        let mut bad = manifest("m");
        bad.vision_encoder = Some(StoredFile {
            file: "../../victim.txt".into(),
            size: 1,
            sha256: "ab".into(),
            sha256_verified: false,
        });
        // Not written by the store...
        assert!(store.write_manifest(&bad).is_err());
        // ...nor read when written by something else.
        let text = serde_json::to_string(&bad).unwrap();
        std::fs::write(store.model_dir("m").join(MANIFEST), text).unwrap();
        let err = store.get("m").unwrap_err().to_string();
        assert!(err.contains("vision_encoder.file"), "{err}");
        assert!(store.list().is_empty());
        bad.vision_encoder = None;
        bad.file = "../m.rkllm".into();
        assert!(bad.check().unwrap_err().starts_with("file:"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn stored_tokenizer() -> StoredTokenizer {
        StoredTokenizer {
            file: TOKENIZER_FILE.into(),
            size: 5,
            sha256: "cd".into(),
            sha256_verified: false,
            repository: "acme/base".into(),
            path: TOKENIZER_FILE.into(),
            revision: "main".into(),
            commit: Some("0123".into()),
            tokens: Some(308),
            chat_template: None,
            chat_template_missing: None,
        }
    }

    #[test]
    fn a_manifest_records_its_tokenizer_and_an_old_one_without_still_loads() {
        let dir = std::env::temp_dir().join(format!("rkllm-store-tok-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::new(dir.clone());
        std::fs::create_dir_all(store.model_dir("m")).unwrap();

        // Written before tokenizers were pulled: no tokenizer fields at all.
        let mut old = serde_json::to_value(manifest("m")).unwrap();
        let object = old.as_object_mut().unwrap();
        assert!(!object.contains_key("tokenizer"));
        assert!(!object.contains_key("tokenizer_missing"));
        std::fs::write(store.model_dir("m").join(MANIFEST), old.to_string()).unwrap();
        let read = store.get("m").unwrap().unwrap();
        assert_eq!(read.tokenizer, None);
        let spec = store.spec(&read);
        let Some(TokenizerSource::File(path)) = &spec.tokenizer else {
            panic!("{spec:?}")
        };
        // Where it would be, so that a later pull bringing it needs no new spec.
        assert_eq!(*path, dir.join("m").join(TOKENIZER_FILE));
        let origin = store.tokenizer_origin(&read);
        assert!(
            origin
                .missing
                .as_deref()
                .unwrap()
                .contains("pulled without one"),
            "{origin:?}"
        );
        assert!(origin.fix.as_deref().unwrap().contains("--tokenizer"));

        // Recorded, it is written and read with where it came from.
        let mut with = manifest("m");
        with.tokenizer = Some(stored_tokenizer());
        store.write_manifest(&with).unwrap();
        let text = std::fs::read_to_string(store.model_dir("m").join(MANIFEST)).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["tokenizer"]["repository"], "acme/base");
        assert_eq!(json["tokenizer"]["sha256"], "cd");
        assert_eq!(json["tokenizer"]["size"], 5);
        assert_eq!(store.get("m").unwrap().unwrap(), with);
        let origin = store.tokenizer_origin(&with);
        assert_eq!(origin.from.as_deref(), Some("acme/base"));
        assert!(origin.missing.unwrap().contains("is missing from"));

        // Why there is none, when the pull found none.
        let mut none = manifest("m");
        none.tokenizer_missing = Some("acme/none has no tokenizer.json".into());
        assert_eq!(
            store.tokenizer_origin(&none).missing.as_deref(),
            Some("acme/none has no tokenizer.json")
        );

        // Its file stays in the folder, and is not another file of the model.
        let mut bad = with.clone();
        bad.tokenizer.as_mut().unwrap().file = "../tokenizer.json".into();
        assert!(bad.check().unwrap_err().starts_with("tokenizer.file:"));
        bad.tokenizer.as_mut().unwrap().file = "m.rkllm".into();
        let err = bad.check().unwrap_err();
        assert!(err.contains("the file file names too"), "{err}");
        assert!(store.write_manifest(&bad).is_err());

        // Removing the model removes its tokenizer.
        std::fs::write(store.model_dir("m").join(TOKENIZER_FILE), "{}").unwrap();
        assert!(store.remove("m").unwrap());
        assert!(!store.model_dir("m").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_broken_manifest_is_news_once_until_it_changes() {
        let dir = std::env::temp_dir().join(format!("rkllm-store-warned-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(MANIFEST);
        let err = io::Error::new(io::ErrorKind::InvalidData, "broken");
        std::fs::write(&path, "{").unwrap();
        assert!(warned::first_time(&path, &err));
        assert!(!warned::first_time(&path, &err));
        std::fs::write(&path, "{{").unwrap();
        assert!(warned::first_time(&path, &err));
        assert!(!warned::first_time(&path, &err));
        // Fixed, then broken the same way again: news again.
        warned::forget(&path);
        assert!(warned::first_time(&path, &err));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
