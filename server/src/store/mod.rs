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

mod error;
mod hf;
mod names;
pub mod pull;

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::{ChatTemplate, ModelSettings, ModelSpec, VisionSpec};

pub use error::PullError;
pub use hf::Hub;
pub use names::{FileDetails, check_name, details_of};
pub use pull::{Progress, PullRequest, Source};

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

    /// Every stored model, by name. Folders without a readable manifest
    /// are skipped (and logged).
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
                match self.get(&name) {
                    Ok(Some(m)) => Some(m),
                    Ok(None) => None,
                    Err(err) => {
                        tracing::warn!(model = %name, error = %err, "unreadable manifest skipped");
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
    /// A manifest that cannot be read or parsed.
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
        if manifest.name != name || check_name(&manifest.file).is_err() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: the manifest does not match its folder", path.display()),
            ));
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
            template: manifest
                .chat_template
                .as_deref()
                .and_then(ChatTemplate::named)
                .unwrap_or_default(),
            settings: manifest.settings.clone(),
            embedding: None,
            lora: Vec::new(),
            prompt_cache: None,
            reasoning: crate::engine::ReasoningMode::resolve("auto", &manifest.name)
                .unwrap_or_default(),
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

    /// Writes `manifest` into its folder, atomically.
    ///
    /// # Errors
    /// The write's error.
    pub fn write_manifest(&self, manifest: &Manifest) -> io::Result<()> {
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
}

impl Service {
    /// A pull of `spec`, stored as `name` (default: from the file name).
    pub fn request(
        &self,
        spec: &str,
        name: Option<String>,
        revision: Option<String>,
    ) -> PullRequest {
        PullRequest {
            spec: spec.to_owned(),
            name,
            revision: revision.unwrap_or_else(|| self.revision.clone()),
            platform: self.platform.clone(),
            runtime_version: self.runtime_version.clone(),
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
        assert_eq!(spec.template, ChatTemplate::ChatMl);
        assert_eq!(spec.settings.max_context_len, Some(2048));
        assert_eq!(spec.path.unwrap(), dir.join("a-model/m.rkllm"));
        assert!(store.remove("a-model").unwrap());
        assert!(!store.remove("a-model").unwrap());
        assert!(store.get("../etc").is_err());
        assert!(store.remove("..").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
