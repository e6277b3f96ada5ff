//! A model's prompt-cache file (config `system_prompt_cache`): the
//! runtime's prefill of a fixed prompt, built once, kept with a `.json`
//! fingerprint beside it, and loaded before the requests that start with
//! the prompt.
//!
//! The fingerprint records what the file was made from (model file,
//! prompt, runtime) and the file's own size and SHA-256. A cache only
//! saves time, so it never fails a model: a file that does not match its
//! fingerprint, or that the runtime refuses, is removed and built again,
//! with one warning naming the path and the cause, and the model serves
//! without it meanwhile. Found at load, it is rebuilt during the load;
//! found when it is loaded again before a request, that request runs
//! without it and the next request that starts with the prompt rebuilds
//! it first. Both files are fsynced before they are renamed into place,
//! and their folder after, so a power cut leaves a pair that matches or
//! one that the fingerprint shows to be damaged.
//!
//! The SHA-256 is checked once per model load (the runtime reads the
//! whole file then anyway); before each later reload only the file's
//! size, time and inode are compared with what was checked, and a file
//! that changed is checked in full again.

use std::ffi::{CStr, CString};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest as _, Sha256};

use super::RkllmRunner;
use super::runtime::Runtime;
use super::text::Once;
use crate::backend::{TokenOutput, TokenSink, ValidRunRequest};
use crate::model::{ModelSpec, Prompt, PromptCacheSpec, Sampling};
use crate::vocab::{CancelToken, FinishReason};

/// A model's prompt cache as its runner holds it.
pub(super) struct PromptCache {
    /// The text every cached request starts with.
    prompt: String,
    model: String,
    path: PathBuf,
    c_path: CString,
    /// The fingerprint beside it (`PATH.json`).
    sidecar: PathBuf,
    made_from: MadeFrom,
    /// The file as it was when its size and SHA-256 were last checked.
    checked: Option<Stamp>,
    state: State,
}

/// Where a runner's prompt cache stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The runtime holds it.
    Loaded,
    /// Checked on disk, released so that other prompts prefill from the
    /// start; loaded again for the next request that starts with it.
    Released,
    /// Found damaged after the load and removed: the next request that
    /// starts with the prompt builds it again first.
    Rebuild,
}

impl PromptCache {
    fn new(model: &ModelSpec, spec: &PromptCacheSpec, runtime: &Runtime) -> Result<Self, String> {
        let model_path = model.path.clone().unwrap_or_default();
        Ok(Self {
            prompt: spec.prompt.clone(),
            model: model.name.clone(),
            c_path: CString::new(spec.path.to_string_lossy().into_owned())
                .map_err(|_| "the path contains a NUL byte".to_owned())?,
            sidecar: PathBuf::from(format!("{}.json", spec.path.display())),
            path: spec.path.clone(),
            made_from: MadeFrom::new(&model_path, &spec.prompt, runtime),
            checked: None,
            state: State::Released,
        })
    }

    /// The text it covers, when the runtime holds it now.
    pub(super) fn loaded_prompt(&self) -> Option<&str> {
        (self.state == State::Loaded).then_some(self.prompt.as_str())
    }

    /// Another prompt cache (a conversation snapshot) took its place in
    /// the runtime: loaded again for the next request that starts with it.
    pub(super) fn displaced(&mut self) {
        if self.state == State::Loaded {
            self.state = State::Released;
        }
    }

    /// Logs, once, that the file is damaged and why, and removes it (and
    /// its fingerprint) so that it is built again.
    fn damaged(&self, cause: &str, next: &str) {
        tracing::warn!(
            model = %self.model,
            cache = %self.path.display(),
            cause,
            "prompt cache damaged: removed; {next}"
        );
        self.remove_files();
    }

    fn remove_files(&self) {
        for path in [&self.path, &self.sidecar] {
            if let Err(e) = std::fs::remove_file(path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(
                    file = %path.display(),
                    error = %e,
                    "cannot remove a prompt-cache file"
                );
            }
        }
    }

    /// Whether the file is still the one checked, or, when it changed,
    /// whether it passes the check again.
    fn recheck(&mut self) -> Result<(), String> {
        match Stamp::of(&self.path) {
            Ok(now) if Some(now) == self.checked => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err("the file is gone".into());
            }
            Err(e) => return Err(format!("cannot read it: {e}")),
        }
        match check(&self.path, &self.sidecar, &self.made_from) {
            Check::Valid(stamp) => {
                self.checked = Some(stamp);
                Ok(())
            }
            Check::Absent => Err("the file is gone".into()),
            Check::Stale(why) => Err(why.into()),
            Check::Damaged(why) => Err(why),
        }
    }
}

/// What a prompt cache file was made from: a file made for another model
/// file, prompt or runtime is built again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct MadeFrom {
    model_file: String,
    model_size: u64,
    model_modified: u64,
    prompt_sha256: String,
    runtime_version: Option<String>,
    abi: String,
}

impl MadeFrom {
    fn new(model_path: &Path, prompt: &str, runtime: &Runtime) -> Self {
        let meta = std::fs::metadata(model_path).ok();
        let modified = meta
            .as_ref()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        Self {
            model_file: model_path.display().to_string(),
            model_size: meta.map_or(0, |m| m.len()),
            model_modified: modified,
            prompt_sha256: format!("{:x}", Sha256::digest(prompt.as_bytes())),
            runtime_version: runtime.version().map(|v| v.to_string()),
            abi: runtime.abi().versions().to_owned(),
        }
    }
}

/// The `.json` beside a cache file. Fingerprints written before the size
/// and hash were recorded lack them; such a cache is built again.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Fingerprint {
    #[serde(flatten)]
    made_from: MadeFrom,
    #[serde(default)]
    cache_size: Option<u64>,
    #[serde(default)]
    cache_sha256: Option<String>,
}

/// A file's identity and size as `stat` tells them, to notice a file
/// replaced or changed since it was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    dev: u64,
    ino: u64,
}

impl Stamp {
    pub(super) fn of(path: &Path) -> std::io::Result<Self> {
        std::fs::metadata(path).map(|m| Self::from_metadata(&m))
    }

    fn from_metadata(meta: &std::fs::Metadata) -> Self {
        Self {
            len: meta.len(),
            modified: meta.modified().ok(),
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// What is on disk for a cache.
#[derive(Debug, PartialEq, Eq)]
enum Check {
    /// A file its fingerprint vouches for (made from this model file,
    /// prompt and runtime; its size and SHA-256).
    Valid(Stamp),
    /// No cache file.
    Absent,
    /// A sound file made from something else, or fingerprinted without a
    /// size and hash: built again, no warning.
    Stale(&'static str),
    /// A file its fingerprint does not vouch for: why.
    Damaged(String),
}

/// Checks the cache file at `path` against its fingerprint at `sidecar`.
fn check(path: &Path, sidecar: &Path, made_from: &MadeFrom) -> Check {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Check::Absent;
        }
        Err(e) => return Check::Damaged(format!("cannot read it: {e}")),
    };
    let recorded = match std::fs::read(sidecar) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Check::Damaged(format!("its fingerprint {} is missing", sidecar.display()));
        }
        Err(e) => {
            return Check::Damaged(format!(
                "cannot read its fingerprint {}: {e}",
                sidecar.display()
            ));
        }
    };
    let fingerprint: Fingerprint = match serde_json::from_slice(&recorded) {
        Ok(fingerprint) => fingerprint,
        Err(e) => {
            return Check::Damaged(format!(
                "its fingerprint {} is not valid: {e}",
                sidecar.display()
            ));
        }
    };
    if fingerprint.made_from != *made_from {
        return Check::Stale("it was made from another model file, prompt or runtime");
    }
    let (Some(size), Some(sha256)) = (fingerprint.cache_size, fingerprint.cache_sha256) else {
        return Check::Stale("its fingerprint records no size and SHA-256");
    };
    if meta.len() != size {
        return Check::Damaged(format!(
            "it holds {} bytes, its fingerprint says {size}",
            meta.len()
        ));
    }
    let digest = std::fs::File::open(path).and_then(|mut f| digest(&mut f));
    match digest {
        Ok((len, hex)) if len == size && hex == sha256 => Check::Valid(Stamp::from_metadata(&meta)),
        Ok(_) => Check::Damaged("its SHA-256 is not the one its fingerprint records".into()),
        Err(e) => Check::Damaged(format!("cannot read it: {e}")),
    }
}

/// The length and SHA-256 (lowercase hex) of what `file` holds from where
/// it stands.
pub(super) fn digest(file: &mut std::fs::File) -> std::io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                len += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((len, format!("{:x}", hasher.finalize())))
}

/// The folder a file is in (`.` for a bare name).
pub(super) fn folder(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Flushes a folder's entries (a rename in it) to the disk.
fn sync_folder(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(folder(path))?.sync_all()
}

/// Moves the file the runtime wrote at `tmp` to `path`: readable by its
/// owner only, flushed to the disk before the rename and the folder
/// after. Returns its length and SHA-256.
pub(super) fn install(tmp: &Path, path: &Path) -> std::io::Result<(u64, String)> {
    install_as(tmp, path, true)
}

/// [`install`], flushed to the disk only when `durable` (a file whose
/// loss costs only time may skip the wait: its SHA-256 finds it damaged).
pub(super) fn install_as(tmp: &Path, path: &Path, durable: bool) -> std::io::Result<(u64, String)> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(tmp)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    let (len, sha256) = digest(&mut file)?;
    if durable {
        file.sync_all()?;
    }
    drop(file);
    std::fs::rename(tmp, path)?;
    if durable {
        sync_folder(path)?;
    }
    Ok((len, sha256))
}

/// Writes `bytes` to `path` through a temporary file, readable by its
/// owner only, flushed before the rename and the folder after. A write
/// that fails (a full disk) leaves no temporary file behind.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_folder(path)
}

/// Discards a run's output (the run that builds a prompt cache).
pub(super) struct NullOutput(pub(super) CancelToken);

impl TokenOutput for NullOutput {
    fn push(&self, _text: &str, _thinking: bool, _tokens: u32, _produced_ns: Option<u64>) -> bool {
        true
    }
    fn stamp_now(&self) -> Option<u64> {
        None
    }
    fn set_prompt_tokens(&self, _tokens: u32) {}
    fn cancel_token(&self) -> &CancelToken {
        &self.0
    }
}

/// How a build ended without a cache.
pub(super) enum NotBuilt {
    /// The request it was built for went away first: tried again later.
    Aborted,
    /// It cannot be built: why.
    Failed(String),
}

impl RkllmRunner {
    /// At load: loads the model's prompt cache, building it first when
    /// there is none made from this model file, prompt and runtime, or the
    /// one there is damaged. Never fails the load: a cache that cannot be
    /// built or loaded is left out, with a warning.
    pub(super) fn prepare_prompt_cache(&mut self, model: &ModelSpec, spec: &PromptCacheSpec) {
        let mut cache = match PromptCache::new(model, spec, &self.handle.runtime) {
            Ok(cache) => cache,
            Err(why) => {
                tracing::warn!(
                    model = %model.name,
                    cache = %spec.path.display(),
                    cause = %why,
                    "prompt cache left out: the model runs without it"
                );
                return;
            }
        };
        let rebuild = "building it again now";
        match check(&cache.path, &cache.sidecar, &cache.made_from) {
            Check::Valid(stamp) => {
                cache.checked = Some(stamp);
                match self.load_cache_file(&cache.c_path) {
                    Ok(()) => {
                        cache.state = State::Loaded;
                        tracing::info!(
                            model = %cache.model,
                            cache = %cache.path.display(),
                            "prompt cache loaded"
                        );
                        self.prompt_cache = Some(cache);
                        return;
                    }
                    Err(rc) => cache.damaged(&refused(rc), rebuild),
                }
            }
            Check::Absent => {}
            Check::Stale(why) => {
                tracing::info!(
                    model = %cache.model,
                    cache = %cache.path.display(),
                    cause = why,
                    "prompt cache out of date: building it again"
                );
            }
            Check::Damaged(why) => cache.damaged(&why, rebuild),
        }
        self.prompt_cache = self.build_and_load(cache, &CancelToken::new());
    }

    /// Before a run that sends `prompt` whole: the prompt cache is loaded
    /// when the prompt starts with its text (built again first if it was
    /// found damaged), and released otherwise, so that other prompts are
    /// prefilled from the start. `cancel` is the request's: a client that
    /// leaves stops a rebuild too.
    pub(super) fn sync_prompt_cache(&mut self, prompt: &str, cancel: &CancelToken) {
        let Some(mut cache) = self.prompt_cache.take() else {
            return;
        };
        let wanted = prompt.starts_with(&cache.prompt);
        if matches!(
            (wanted, cache.state),
            (true, State::Released | State::Rebuild) | (false, State::Loaded)
        ) {
            // The runtime's loaded cache changes: no snapshot is held any more.
            if let Some(snapshots) = self.snapshots.as_mut() {
                snapshots.unloaded();
            }
        }
        match (wanted, cache.state) {
            (true, State::Released) => {
                let loaded = cache
                    .recheck()
                    .and_then(|()| self.load_cache_file(&cache.c_path).map_err(refused));
                match loaded {
                    Ok(()) => cache.state = State::Loaded,
                    Err(why) => {
                        cache.damaged(
                            &why,
                            "this request runs without it; the next one that starts with its \
                             prompt builds it again",
                        );
                        cache.state = State::Rebuild;
                    }
                }
            }
            (true, State::Rebuild) => {
                self.prompt_cache = self.build_and_load(cache, cancel);
                return;
            }
            (false, State::Loaded) => {
                self.release_cache_file();
                cache.state = State::Released;
            }
            _ => {}
        }
        self.prompt_cache = Some(cache);
    }

    /// Builds the cache and loads it. Returns it, or `None` when it cannot
    /// be had for this load (warned), or in [`State::Rebuild`] when the
    /// request that was building it went away.
    fn build_and_load(
        &mut self,
        mut cache: PromptCache,
        cancel: &CancelToken,
    ) -> Option<PromptCache> {
        match self.build_prompt_cache(&cache, cancel) {
            Ok(stamp) => cache.checked = Some(stamp),
            Err(NotBuilt::Aborted) => {
                cache.state = State::Rebuild;
                return Some(cache);
            }
            Err(NotBuilt::Failed(why)) => {
                tracing::warn!(
                    model = %cache.model,
                    cache = %cache.path.display(),
                    cause = %why,
                    "prompt cache cannot be built: the model runs without it until it loads again"
                );
                return None;
            }
        }
        match self.load_cache_file(&cache.c_path) {
            Ok(()) => {
                cache.state = State::Loaded;
                tracing::info!(
                    model = %cache.model,
                    cache = %cache.path.display(),
                    "prompt cache built and loaded"
                );
                Some(cache)
            }
            Err(rc) => {
                tracing::warn!(
                    model = %cache.model,
                    cache = %cache.path.display(),
                    cause = %refused(rc),
                    "the runtime refused the prompt cache it had just built: removed; the model \
                     runs without it until it loads again"
                );
                cache.remove_files();
                None
            }
        }
    }

    /// Has the runtime prefill the cache's prompt and save its state, then
    /// installs the file and its fingerprint. Returns the installed file's
    /// stamp.
    fn build_prompt_cache(
        &mut self,
        cache: &PromptCache,
        cancel: &CancelToken,
    ) -> Result<Stamp, NotBuilt> {
        let failed = NotBuilt::Failed;
        let dir = folder(&cache.path);
        std::fs::create_dir_all(dir)
            .map_err(|e| failed(format!("cannot create {}: {e}", dir.display())))?;
        let tmp = cache
            .path
            .with_extension(format!("building-{}", std::process::id()));
        let installed = self
            .prefill_and_save(&cache.prompt, &cache.model, &tmp, cancel)
            .and_then(|()| {
                install(&tmp, &cache.path).map_err(|e| failed(format!("cannot install it: {e}")))
            });
        let (cache_size, cache_sha256) = match installed {
            Ok(installed) => installed,
            Err(not_built) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(not_built);
            }
        };
        let fingerprint = Fingerprint {
            made_from: cache.made_from.clone(),
            cache_size: Some(cache_size),
            cache_sha256: Some(cache_sha256),
        };
        let text = serde_json::to_vec_pretty(&fingerprint).unwrap_or_default();
        write_private(&cache.sidecar, &text).map_err(|e| {
            // A cache without its fingerprint is of no use.
            let _ = std::fs::remove_file(&cache.path);
            failed(format!("cannot write {}: {e}", cache.sidecar.display()))
        })?;
        Stamp::of(&cache.path).map_err(|e| failed(format!("cannot read it back: {e}")))
    }

    /// Has the runtime prefill `prompt` alone and save its state at `tmp`:
    /// a run of one token whose output is discarded, with the history
    /// cleared after it (its state is not a conversation).
    pub(super) fn prefill_and_save(
        &mut self,
        prompt: &str,
        model: &str,
        tmp: &Path,
        cancel: &CancelToken,
    ) -> Result<(), NotBuilt> {
        self.prefill_and_save_as(prompt, ("user", false), model, tmp, cancel)
    }

    /// [`RkllmRunner::prefill_and_save`] with the runtime's template applied
    /// as `role` and the thinking switch of a chat's own run (`voice`), so
    /// that the state matches that run's.
    pub(super) fn prefill_and_save_as(
        &mut self,
        prompt: &str,
        (role, thinking): (&str, bool),
        model: &str,
        tmp: &Path,
        cancel: &CancelToken,
    ) -> Result<(), NotBuilt> {
        let failed = NotBuilt::Failed;
        let _ = std::fs::remove_file(tmp);
        let save = CString::new(tmp.to_string_lossy().into_owned())
            .map_err(|_| failed("the path contains a NUL byte".into()))?;
        let request = ValidRunRequest {
            prompt: Prompt {
                thinking,
                ..Prompt::plain(prompt)
            },
            model: model.to_owned(),
            max_tokens: 1,
            max_tokens_requested: true,
            sampling: Sampling::default(),
            images: Vec::new(),
            embed: None,
            clear_cache: false,
            refresh_snapshot: false,
            probe: None,
            stop: Vec::new(),
            constraint: None,
            lora: None,
        };
        let null = NullOutput(cancel.clone());
        let mut sink = TokenSink::new(&null, false);
        let once = Once {
            save: Some(&save),
            ..Once::plain(prompt, role)
        };
        let built = self.run_once(&request, &mut sink, once);
        if let Ok(Some(reuse)) = built.as_ref().map(|g| g.prompt_reuse) {
            self.held.side_prefilled = self.held.side_prefilled.saturating_add(reuse.prefilled);
        }
        self.clear_history();
        match built {
            _ if cancel.is_cancelled() => Err(NotBuilt::Aborted),
            Ok(g) if g.finish_reason == FinishReason::Abort => Err(NotBuilt::Aborted),
            Err(e) => Err(failed(format!("building it failed: {e}"))),
            Ok(_) if !tmp.is_file() => Err(failed("the runtime did not write it".into())),
            Ok(_) => Ok(()),
        }
    }

    /// `rkllm_release_prompt_cache`: prompts prefill from their start.
    pub(super) fn release_cache_file(&self) {
        let rc = self.handle.release_cache();
        tracing::debug!(rc, "rkllm_release_prompt_cache");
    }

    /// `rkllm_load_prompt_cache`; the runtime's code when it refuses.
    pub(super) fn load_cache_file(&self, path: &CStr) -> Result<(), i32> {
        self.handle.load_cache(path)
    }
}

/// What a refusal of `rkllm_load_prompt_cache` says.
pub(super) fn refused(rc: i32) -> String {
    format!("the runtime cannot load it (rkllm_load_prompt_cache returned {rc})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made_from(prompt: &str) -> MadeFrom {
        MadeFrom {
            model_file: "/models/m.rkllm".into(),
            model_size: 10,
            model_modified: 1,
            prompt_sha256: format!("{:x}", Sha256::digest(prompt.as_bytes())),
            runtime_version: Some("1.2.3".into()),
            abi: "1.2.1-1.2.3".into(),
        }
    }

    struct Files {
        _dir: scratch::Dir,
        cache: PathBuf,
        sidecar: PathBuf,
    }

    /// A cache file and its fingerprint as a build leaves them.
    fn built(content: &[u8]) -> Files {
        let dir = scratch::Dir::new();
        let cache = dir.0.join("c.prompt-cache");
        let sidecar = dir.0.join("c.prompt-cache.json");
        std::fs::write(&cache, content).unwrap();
        let fingerprint = Fingerprint {
            made_from: made_from("system"),
            cache_size: Some(content.len() as u64),
            cache_sha256: Some(format!("{:x}", Sha256::digest(content))),
        };
        std::fs::write(&sidecar, serde_json::to_vec(&fingerprint).unwrap()).unwrap();
        Files {
            _dir: dir,
            cache,
            sidecar,
        }
    }

    fn damage(check: &Check) -> &str {
        match check {
            Check::Damaged(why) => why,
            other => panic!("not damaged: {other:?}"),
        }
    }

    #[test]
    fn a_file_that_matches_its_fingerprint_is_valid() {
        let f = built(b"cache bytes");
        let stamp = Stamp::of(&f.cache).unwrap();
        assert_eq!(
            check(&f.cache, &f.sidecar, &made_from("system")),
            Check::Valid(stamp)
        );
    }

    #[test]
    fn a_file_of_another_size_or_content_is_damaged() {
        let f = built(b"cache bytes");
        std::fs::write(&f.cache, b"").unwrap();
        let why = damage(&check(&f.cache, &f.sidecar, &made_from("system"))).to_owned();
        assert!(why.contains("0 bytes") && why.contains("11"), "{why}");
        std::fs::write(&f.cache, b"cache bytez").unwrap();
        let why = damage(&check(&f.cache, &f.sidecar, &made_from("system"))).to_owned();
        assert!(why.contains("SHA-256"), "{why}");
    }

    #[test]
    fn a_missing_or_unreadable_fingerprint_is_damage() {
        let f = built(b"cache bytes");
        std::fs::write(&f.sidecar, b"{\"model_file\": ").unwrap();
        let why = damage(&check(&f.cache, &f.sidecar, &made_from("system"))).to_owned();
        assert!(why.contains("not valid"), "{why}");
        std::fs::remove_file(&f.sidecar).unwrap();
        let why = damage(&check(&f.cache, &f.sidecar, &made_from("system"))).to_owned();
        assert!(why.contains("missing"), "{why}");
    }

    #[test]
    fn a_file_made_from_something_else_or_without_a_hash_is_stale() {
        let f = built(b"cache bytes");
        assert!(matches!(
            check(&f.cache, &f.sidecar, &made_from("another prompt")),
            Check::Stale(_)
        ));
        // A fingerprint written before sizes and hashes were recorded.
        let old = serde_json::to_vec(&made_from("system")).unwrap();
        std::fs::write(&f.sidecar, old).unwrap();
        assert!(matches!(
            check(&f.cache, &f.sidecar, &made_from("system")),
            Check::Stale(_)
        ));
        std::fs::remove_file(&f.cache).unwrap();
        assert_eq!(
            check(&f.cache, &f.sidecar, &made_from("system")),
            Check::Absent
        );
    }

    #[test]
    fn an_installed_file_is_private_and_its_digest_is_its_content() {
        let dir = scratch::Dir::new();
        let (tmp, path) = (dir.0.join("c.building-1"), dir.0.join("c"));
        std::fs::write(&tmp, b"abc").unwrap();
        let (len, sha256) = install(&tmp, &path).unwrap();
        assert_eq!(len, 3);
        // SHA-256("abc"), FIPS 180-2's first example.
        assert_eq!(
            sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(!tmp.exists());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }

    /// A scratch folder removed on drop.
    mod scratch {
        use std::path::PathBuf;
        use std::sync::atomic::{AtomicUsize, Ordering};

        pub struct Dir(pub PathBuf);

        impl Dir {
            pub fn new() -> Self {
                static NEXT: AtomicUsize = AtomicUsize::new(0);
                let dir = std::env::temp_dir().join(format!(
                    "rkllm-prompt-cache-{}-{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::SeqCst)
                ));
                std::fs::create_dir_all(&dir).unwrap();
                Self(dir)
            }
        }

        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }
}
