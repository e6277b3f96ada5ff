//! Conversation snapshots: the runtime's prefill of conversations, kept in
//! prompt-cache files so that a conversation that comes back after another
//! one ran is not prefilled again from its start.
//!
//! The runtime holds one conversation in its KV cache (`keep_history`); a
//! chat whose next turn arrives after another chat ran is sent whole. Each
//! such run saves its prefill (`save_prompt_cache`) as a snapshot of the
//! prompt sent. Before a conversation is sent whole, the snapshot sharing
//! the longest prefix with its prompt is loaded (`rkllm_load_prompt_cache`):
//! the runtime matches a loaded cache by longest common prefix (RKLLM_ABI.md
//! §3.5) and prefills only the rest. A conversation that opens with a long
//! system prompt (an agent's) has that prompt saved first, on its own, so
//! every conversation that starts with it reuses it.
//!
//! The files live in a folder per model file under `[rkllm] snapshot_dir`,
//! owner-only, each with a `.json` beside it: what it was made from (model
//! file, runtime, chat template), the prompt it holds, and its size and
//! SHA-256. They are bounded in bytes on disk, the `.json` files and the
//! folder included (`[rkllm] snapshot_max_mb`), and in number, the least
//! recently used evicted first; a file made from something else is removed
//! when the model loads; a file that does not match its fingerprint, or
//! that the runtime refuses, is removed and its request prefilled in full
//! (which saves it again). Nothing about a snapshot ever fails a request
//! or a load.
//!
//! The disk keeps a reserve (`[rkllm] snapshot_min_free_mb`): no save is
//! made that would leave it less, as far as the snapshots saved so far
//! tell its size, and one that did is removed. A save that fails leaves
//! nothing behind. What stops the saves (the reserve, a failing write) is
//! warned once, and said again only after a snapshot was saved since.

use std::ffi::CString;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::RkllmRunner;
use super::prompt_cache::{
    NotBuilt, PromptCache, Stamp, digest, install_as, refused, write_private,
};
use super::runtime::Runtime;
use crate::backend::SnapshotReport;
use crate::model::ModelSpec;
use crate::plan::snapshots::{self as plan, Keeping, Kept, Load, Store, common_prefix};
use crate::vocab::CancelToken;

/// Files at most per model, whatever their bytes.
const MAX_FILES: usize = 256;

/// What a `.json` beside a snapshot holds besides the prompt, at most
/// (the prompt's escapes and what it was made from), for the estimate of
/// a save's size.
const FINGERPRINT_EXTRA: u64 = 1024;

/// Where a model's snapshots go, how many bytes they may take and how
/// many the disk keeps free (`[rkllm] snapshot_dir`, `snapshot_max_mb`,
/// `snapshot_min_free_mb`); `None` or 0 bytes: none kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotSettings {
    /// The folder; each model has its own folder in it.
    pub dir: Option<PathBuf>,
    /// Bytes all of a model's snapshots may take on disk, their `.json`
    /// files and their folder included.
    pub max_bytes: u64,
    /// Bytes the disk keeps free: no snapshot is saved that would leave
    /// less.
    #[serde(default)]
    pub min_free_bytes: u64,
}

/// What a snapshot was made from: one made from another model file,
/// runtime or chat template is of no use and is removed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct MadeFrom {
    model_file: String,
    model_size: u64,
    model_modified: u64,
    runtime_version: Option<String>,
    abi: String,
    template_sha256: String,
}

/// The `.json` beside a snapshot.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Fingerprint {
    #[serde(flatten)]
    made_from: MadeFrom,
    /// The prompt whose prefill it holds.
    prompt: String,
    /// A system prompt saved on its own.
    #[serde(default)]
    system_prefix: bool,
    cache_size: u64,
    cache_sha256: String,
}

/// One snapshot on disk.
#[derive(Debug)]
struct Entry {
    /// File name without extension (from the prompt's SHA-256).
    stem: String,
    prompt: String,
    system_prefix: bool,
    bytes: u64,
    sha256: String,
    /// What it and its `.json` take on disk.
    disk: u64,
    /// When it was last used or saved (a counter).
    used: u64,
    /// The file as it was when its SHA-256 was last found right: checked
    /// in full again only when it changed.
    verified: Option<Stamp>,
}

/// A model's snapshots, as its runner keeps them.
#[derive(Debug)]
pub(super) struct Snapshots {
    model: String,
    dir: PathBuf,
    max_bytes: u64,
    /// The disk's reserve.
    min_free: u64,
    /// Bytes of snapshot per byte of prompt, the most any save made:
    /// what a save is expected to take.
    per_prompt_byte: f64,
    /// What stopped the saves, said once; `None` once a save is made.
    trouble: Option<Trouble>,
    made_from: MadeFrom,
    entries: Vec<Entry>,
    clock: u64,
    /// The snapshot the runtime holds now.
    loaded: Option<String>,
    /// Counts not yet reported.
    hits: u32,
    misses: u32,
    /// The runtime wrote no file when asked to save one (a model whose
    /// runtime saves no prompt cache, Qwen3.5's): nothing is saved any more.
    saves_failed: bool,
}

/// What stops snapshots from being saved, warned once until a snapshot is
/// saved again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trouble {
    /// The save would leave the disk less than its reserve.
    Reserve,
    /// Writing a snapshot or its `.json` failed so.
    Write(std::io::ErrorKind),
}

/// Why a save was not kept.
#[derive(Debug)]
struct NotKept {
    trouble: Trouble,
    why: String,
}

/// What the file system of the snapshots has free.
#[derive(Debug, Clone, Copy)]
struct Free {
    /// Bytes an unprivileged writer may still take.
    bytes: u64,
    /// Files it may still make, when the file system counts them.
    files: Option<u64>,
    /// Its unit of allocation.
    block: u64,
}

impl Free {
    /// `bytes` in whole blocks.
    fn blocks(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.block).saturating_mul(self.block)
    }
}

/// What a file takes on disk: its blocks, or its length when the file
/// system reports fewer (a file not written out yet, or held inline).
fn on_disk(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    meta.len().max(meta.blocks().saturating_mul(512))
}

fn stem_of(prompt: &str) -> String {
    let hash = format!("{:x}", Sha256::digest(prompt.as_bytes()));
    hash[..32].to_owned()
}

/// A model name as a folder name: other characters than letters, digits,
/// `.`, `-` and `_` become `_`.
pub(super) fn folder_name(model: &str) -> String {
    let name: String = model
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.starts_with('.') || name.is_empty() {
        format!("_{name}")
    } else {
        name
    }
}

impl Snapshots {
    /// The model's snapshots, when it keeps them (the model's `snapshots`
    /// setting, a folder and a byte budget). Files made from something else
    /// are removed, and files cut short.
    pub(super) fn open(
        model: &ModelSpec,
        settings: &SnapshotSettings,
        runtime: &Runtime,
    ) -> Option<Self> {
        if !model.settings.snapshots.unwrap_or(true) || settings.max_bytes == 0 {
            return None;
        }
        let model_path = model.path.clone().unwrap_or_default();
        // One folder per model file: two models of one name never share.
        let file_hash = format!(
            "{:x}",
            Sha256::digest(model_path.to_string_lossy().as_bytes())
        );
        let dir = settings.dir.as_ref()?.join(format!(
            "{}-{}",
            folder_name(&model.name),
            &file_hash[..8]
        ));
        // Owner-only: the folder and those it needs (an existing
        // `snapshot_dir` keeps its mode; the model's folder is made
        // owner-only in any case).
        let made = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)));
        if let Err(e) = made {
            tracing::warn!(
                model = %model.name,
                dir = %dir.display(),
                error = %e,
                "conversation snapshots are off for this model: cannot make their folder"
            );
            return None;
        }
        let meta = std::fs::metadata(&model_path).ok();
        let made_from = MadeFrom {
            model_file: model_path.display().to_string(),
            model_size: meta.as_ref().map_or(0, std::fs::Metadata::len),
            model_modified: meta
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs()),
            runtime_version: runtime.version().map(|v| v.to_string()),
            abi: runtime.abi().versions().to_owned(),
            template_sha256: format!(
                "{:x}",
                Sha256::digest(format!("{:?}", model.template).as_bytes())
            ),
        };
        let mut snapshots = Self {
            model: model.name.clone(),
            dir,
            max_bytes: settings.max_bytes,
            min_free: settings.min_free_bytes,
            per_prompt_byte: 1.0,
            trouble: None,
            made_from,
            entries: Vec::new(),
            clock: 0,
            loaded: None,
            hits: 0,
            misses: 0,
            saves_failed: false,
        };
        snapshots.scan();
        Some(snapshots)
    }

    fn path(&self, stem: &str) -> PathBuf {
        self.dir.join(format!("{stem}.snapshot"))
    }

    fn sidecar(&self, stem: &str) -> PathBuf {
        self.dir.join(format!("{stem}.snapshot.json"))
    }

    /// Where a run saves the snapshot it is making.
    pub(super) fn building_path(&self) -> PathBuf {
        self.dir
            .join(format!("building-{}.snapshot-tmp", std::process::id()))
    }

    /// Reads the folder: keeps the snapshots made from this model file,
    /// runtime and template whose size is the one recorded; removes the
    /// rest, and files left by an interrupted save.
    fn scan(&mut self) {
        let Ok(listing) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut names: Vec<String> = listing
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in &names {
            // Left by a save that did not finish (the file's, or its
            // fingerprint's through `write_private`).
            if name.ends_with(".snapshot-tmp") || name.contains(".snapshot.tmp-") {
                let _ = std::fs::remove_file(self.dir.join(name));
                continue;
            }
            if let Some(stem) = name.strip_suffix(".snapshot")
                && !names.contains(&format!("{name}.json"))
            {
                self.remove_files(stem);
            }
            let Some(stem) = name.strip_suffix(".snapshot.json") else {
                continue;
            };
            match self.read_entry(stem) {
                Ok(entry) => self.entries.push(entry),
                Err(why) => {
                    tracing::info!(
                        model = %self.model,
                        snapshot = %self.path(stem).display(),
                        cause = %why,
                        "conversation snapshot removed"
                    );
                    self.remove_files(stem);
                }
            }
        }
        // The least recently used first when the budget is spent: the
        // oldest files, as far as their times tell.
        let mut by_time: Vec<(std::time::SystemTime, usize)> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let time = std::fs::metadata(self.path(&e.stem))
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                (time, i)
            })
            .collect();
        by_time.sort();
        for (order, (_, index)) in by_time.into_iter().enumerate() {
            self.entries[index].used = order as u64 + 1;
        }
        self.clock = self.entries.len() as u64;
        for entry in &self.entries {
            self.per_prompt_byte = self
                .per_prompt_byte
                .max(entry.bytes as f64 / entry.prompt.len().max(1) as f64);
        }
        self.evict();
    }

    fn read_entry(&self, stem: &str) -> Result<Entry, String> {
        let text = std::fs::read(self.sidecar(stem)).map_err(|e| format!("cannot read: {e}"))?;
        let fingerprint: Fingerprint = serde_json::from_slice(&text)
            .map_err(|e| format!("its fingerprint is not valid: {e}"))?;
        if fingerprint.made_from != self.made_from {
            return Err("made from another model file, runtime or chat template".into());
        }
        let meta =
            std::fs::metadata(self.path(stem)).map_err(|e| format!("cannot read it: {e}"))?;
        let len = meta.len();
        let disk = on_disk(&meta)
            + std::fs::metadata(self.sidecar(stem)).map_or(text.len() as u64, |m| on_disk(&m));
        if len != fingerprint.cache_size {
            return Err(format!(
                "it holds {len} bytes, its fingerprint says {}",
                fingerprint.cache_size
            ));
        }
        Ok(Entry {
            stem: stem.to_owned(),
            prompt: fingerprint.prompt,
            system_prefix: fingerprint.system_prefix,
            bytes: len,
            sha256: fingerprint.cache_sha256,
            disk,
            used: 0,
            verified: None,
        })
    }

    fn remove_files(&self, stem: &str) {
        for path in [self.path(stem), self.sidecar(stem)] {
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(file = %path.display(), error = %e, "cannot remove a snapshot file");
            }
        }
    }

    /// Removes a snapshot's files. The runtime may still hold it (it is
    /// released, or replaced, before the next conversation sent whole).
    fn remove(&mut self, index: usize) {
        let entry = self.entries.remove(index);
        self.remove_files(&entry.stem);
    }

    /// The snapshots as the planner sees them.
    fn kept(&self) -> Vec<Kept<'_>> {
        self.entries
            .iter()
            .map(|e| Kept {
                prompt: &e.prompt,
                used: e.used,
                system_prefix: e.system_prefix,
            })
            .collect()
    }

    /// The snapshot sharing the longest prefix with `prompt`, and that
    /// length ([`plan::best`]).
    pub(super) fn best(&self, prompt: &str) -> Option<(usize, usize)> {
        plan::best(&self.kept(), prompt)
    }

    /// Whether a snapshot of exactly `prompt` is kept (marked used).
    pub(super) fn holds(&mut self, prompt: &str) -> bool {
        self.clock += 1;
        let clock = self.clock;
        match self.entries.iter_mut().find(|e| e.prompt == prompt) {
            Some(entry) => {
                entry.used = clock;
                true
            }
            None => false,
        }
    }

    /// The snapshot at `index` ready to load: its path when its bytes are
    /// still the ones recorded; otherwise it is removed, with why. The
    /// SHA-256 is computed once per file and runner; later only the file's
    /// size, time and inode are compared with what was checked.
    pub(super) fn checked_path(&mut self, index: usize) -> Result<(String, CString), String> {
        let entry = &self.entries[index];
        let path = self.path(&entry.stem);
        let now = Stamp::of(&path).ok();
        let matches = if now.is_some() && now == entry.verified {
            Ok(())
        } else {
            std::fs::File::open(&path)
                .and_then(|mut f| digest(&mut f))
                .map_err(|e| format!("cannot read it: {e}"))
                .and_then(|(len, sha256)| {
                    if len == entry.bytes && sha256 == entry.sha256 {
                        Ok(())
                    } else {
                        Err("its size or SHA-256 is not the one its fingerprint records".to_owned())
                    }
                })
        };
        if matches.is_ok() {
            self.entries[index].verified = now;
        }
        let entry = &self.entries[index];
        let c_path = CString::new(path.to_string_lossy().into_owned())
            .map_err(|_| "the path contains a NUL byte".to_owned());
        match matches.and(c_path) {
            Ok(c_path) => Ok((entry.stem.clone(), c_path)),
            Err(why) => {
                self.damaged(index, &why);
                Err(why)
            }
        }
    }

    /// A snapshot the runtime refused, or whose bytes changed: removed,
    /// with a warning; the conversation's next run saves it again.
    pub(super) fn damaged(&mut self, index: usize, why: &str) {
        tracing::warn!(
            model = %self.model,
            snapshot = %self.path(&self.entries[index].stem).display(),
            cause = why,
            "conversation snapshot damaged: removed; the conversation is prefilled in full and \
             saved again"
        );
        self.remove(index);
    }

    /// The runtime now holds the snapshot `stem`: a hit.
    pub(super) fn loaded_now(&mut self, index: usize) {
        self.clock += 1;
        self.entries[index].used = self.clock;
        self.loaded = Some(self.entries[index].stem.clone());
        self.hits += 1;
    }

    /// The runtime holds the snapshot at `index` already: a hit.
    pub(super) fn is_loaded(&self, index: usize) -> bool {
        self.loaded.as_deref() == Some(self.entries[index].stem.as_str())
    }

    /// The runtime cannot save snapshots: none is made any more by this
    /// runner (said once).
    fn saving_failed(&mut self, why: &str) {
        if !self.saves_failed {
            self.saves_failed = true;
            tracing::warn!(
                model = %self.model,
                cause = why,
                "conversation snapshots cannot be saved: none is made for this model until it \
                 loads again (those kept are still used)"
            );
        }
    }

    /// Whether a snapshot of `prompt` would be saved now: none of exactly
    /// it is kept (one that is is marked used), saves work and there is
    /// room.
    pub(super) fn would_save(&mut self, prompt: &str) -> bool {
        !self.saves_failed && !self.holds(prompt) && self.room_for(prompt)
    }

    /// The hits and misses not yet reported, taken (to be put back after a
    /// restore that is not a conversation's).
    pub(super) fn take_tally(&mut self) -> (u32, u32) {
        (
            std::mem::take(&mut self.hits),
            std::mem::take(&mut self.misses),
        )
    }

    /// Puts back what [`Snapshots::take_tally`] took.
    pub(super) fn put_tally(&mut self, (hits, misses): (u32, u32)) {
        self.hits = hits;
        self.misses = misses;
    }

    /// A conversation sent whole with no snapshot to start from.
    pub(super) fn missed(&mut self) {
        self.misses += 1;
    }

    /// Bytes at the start of `prompt` the snapshot the runtime holds
    /// covers (0: it holds none).
    pub(super) fn loaded_shared(&self, prompt: &str) -> usize {
        let loaded = self.loaded.as_deref();
        self.entries
            .iter()
            .find(|e| loaded == Some(e.stem.as_str()))
            .map_or(0, |e| common_prefix(&e.prompt, prompt))
    }

    /// Whether the runtime holds one of these snapshots.
    pub(super) fn any_loaded(&self) -> bool {
        self.loaded.is_some()
    }

    /// The runtime holds none of them any more (released, or another cache
    /// took its place).
    pub(super) fn unloaded(&mut self) {
        self.loaded = None;
    }

    /// What the disk has free, when it can be told.
    fn free(&self) -> Option<Free> {
        match rustix::fs::statvfs(&self.dir) {
            Ok(stat) => Some(Free {
                bytes: stat.f_bavail.saturating_mul(stat.f_frsize),
                files: (stat.f_files > 0).then_some(stat.f_favail),
                block: stat.f_frsize.max(1),
            }),
            Err(e) => {
                tracing::debug!(model = %self.model, error = %e, "statvfs of the snapshots");
                None
            }
        }
    }

    /// Whether a snapshot of `prompt` and its `.json` leave the disk its
    /// reserve, as big as the saves made so far suggest it is; with why
    /// not. A disk whose free space cannot be read has room (a save that
    /// fails there leaves nothing behind).
    fn has_room(&self, prompt: &str) -> Result<(), String> {
        let Some(free) = self.free() else {
            return Ok(());
        };
        let len = prompt.len() as u64;
        let expected = free.blocks((self.per_prompt_byte * len as f64).ceil() as u64)
            + free.blocks(len + len / 8 + FINGERPRINT_EXTRA);
        let wanted = self.min_free.saturating_add(expected);
        if free.files.is_some_and(|files| files < 3) {
            Err("the disk has no room for more files".to_owned())
        } else if free.bytes < wanted {
            Err(format!(
                "the disk has {} bytes free; a save of about {expected} bytes would leave less \
                 than its reserve of {} bytes ([rkllm] snapshot_min_free_mb)",
                free.bytes, self.min_free
            ))
        } else {
            Ok(())
        }
    }

    /// Before a save of `prompt`: whether the disk has room for it
    /// (otherwise said, once).
    pub(super) fn room_for(&mut self, prompt: &str) -> bool {
        match self.has_room(prompt) {
            Ok(()) => true,
            Err(why) => {
                self.stopped(Trouble::Reserve, &why);
                false
            }
        }
    }

    /// Saves stopped for `trouble`: warned when it is not what stopped the
    /// last one (said again only after a snapshot was saved since).
    fn stopped(&mut self, trouble: Trouble, why: &str) {
        if self.trouble == Some(trouble) {
            tracing::debug!(model = %self.model, cause = why, "conversation snapshot not saved");
            return;
        }
        self.trouble = Some(trouble);
        match trouble {
            Trouble::Reserve => tracing::warn!(
                model = %self.model,
                cause = why,
                "conversation snapshots not saved: the disk is at its free-space reserve; chats \
                 are answered without new snapshots until there is room (said once)"
            ),
            Trouble::Write(_) => tracing::warn!(
                model = %self.model,
                cause = why,
                "conversation snapshot not kept: nothing of it is left; later failures of this \
                 kind are not logged until a snapshot is saved again"
            ),
        }
    }

    /// A snapshot was saved: whatever stopped the saves is over.
    fn saved(&mut self) {
        match self.trouble.take() {
            Some(Trouble::Reserve) => tracing::info!(
                model = %self.model,
                "conversation snapshots saved again: the disk has room above its free-space reserve"
            ),
            Some(Trouble::Write(_)) => {
                tracing::info!(model = %self.model, "conversation snapshots saved again");
            }
            None => {}
        }
    }

    /// Installs the snapshot a run saved at `tmp` for `prompt`. Snapshots
    /// of earlier turns of the same conversation (prompts this one starts
    /// with) go; a system prompt saved on its own stays. A save that took
    /// the disk below its reserve, or that cannot be installed, is removed.
    pub(super) fn keep(&mut self, prompt: &str, system_prefix: bool, tmp: &Path) {
        self.keep_as(prompt, system_prefix, Keeping::Whole, tmp);
    }

    /// [`Snapshots::keep`] for a prompt kept as `keeping` says: a code
    /// completion's replaces the others of its file.
    pub(super) fn keep_as(
        &mut self,
        prompt: &str,
        system_prefix: bool,
        keeping: Keeping,
        tmp: &Path,
    ) {
        if let Ok(meta) = std::fs::metadata(tmp) {
            self.per_prompt_byte = self
                .per_prompt_byte
                .max(meta.len() as f64 / prompt.len().max(1) as f64);
        }
        match self.install(prompt, system_prefix, keeping, tmp) {
            Ok(()) => self.saved(),
            Err(not_kept) => {
                let _ = std::fs::remove_file(tmp);
                self.stopped(not_kept.trouble, &not_kept.why);
            }
        }
    }

    /// The runtime wrote no snapshot when asked to: the disk's doing when
    /// it is at its reserve (said once), else the runtime cannot save
    /// them.
    pub(super) fn not_written(&mut self, prompt: &str, why: &str) {
        match self.has_room(prompt) {
            Ok(()) => self.saving_failed(why),
            Err(room) => self.stopped(Trouble::Reserve, &format!("{why}; {room}")),
        }
    }

    fn install(
        &mut self,
        prompt: &str,
        system_prefix: bool,
        keeping: Keeping,
        tmp: &Path,
    ) -> Result<(), NotKept> {
        let write = |what: &str, path: &Path, e: &std::io::Error| NotKept {
            trouble: Trouble::Write(e.kind()),
            why: format!("cannot {what} {}: {e}", path.display()),
        };
        let stem = stem_of(prompt);
        let path = self.path(&stem);
        // Not flushed to the disk before the answer's end: a snapshot lost
        // to a power cut is found by its SHA-256 and only costs a prefill.
        let (bytes, sha256) =
            install_as(tmp, &path, false).map_err(|e| write("install", &path, &e))?;
        let fingerprint = Fingerprint {
            made_from: self.made_from.clone(),
            prompt: prompt.to_owned(),
            system_prefix,
            cache_size: bytes,
            cache_sha256: sha256.clone(),
        };
        let text = serde_json::to_vec(&fingerprint).unwrap_or_default();
        // The snapshot is on the disk: its `.json` must leave the reserve
        // too, and a disk with nothing left may have cut the save short.
        if let Some(free) = self.free()
            && free.bytes < self.min_free.saturating_add(free.blocks(text.len() as u64))
        {
            let _ = std::fs::remove_file(&path);
            return Err(NotKept {
                trouble: Trouble::Reserve,
                why: format!(
                    "the save of {bytes} bytes left the disk {} bytes free, below its reserve of \
                     {} bytes ([rkllm] snapshot_min_free_mb) with its fingerprint",
                    free.bytes, self.min_free
                ),
            });
        }
        let sidecar = self.sidecar(&stem);
        if let Err(e) = write_private(&sidecar, &text) {
            let _ = std::fs::remove_file(&path);
            return Err(write("write", &sidecar, &e));
        }
        let disk = [&path, &sidecar]
            .iter()
            .map(|p| std::fs::metadata(p).map_or(0, |m| on_disk(&m)))
            .sum();
        self.entries.retain(|e| e.stem != stem);
        let earlier = plan::replaced(&self.kept(), prompt, keeping);
        for index in earlier.into_iter().rev() {
            self.remove(index);
        }
        self.clock += 1;
        self.entries.push(Entry {
            stem,
            prompt: prompt.to_owned(),
            system_prefix,
            bytes,
            sha256,
            disk,
            used: self.clock,
            verified: Stamp::of(&path).ok(),
        });
        self.evict();
        Ok(())
    }

    /// What the folder takes on disk: itself, the snapshots and their
    /// `.json` files.
    fn total(&self) -> u64 {
        let folder = std::fs::metadata(&self.dir).map_or(0, |m| on_disk(&m));
        folder + self.entries.iter().map(|e| e.disk).sum::<u64>()
    }

    /// Removes the least recently used snapshots until the folder fits the
    /// byte budget and [`MAX_FILES`].
    fn evict(&mut self) {
        let folder = std::fs::metadata(&self.dir).map_or(0, |m| on_disk(&m));
        let disk: Vec<u64> = self.entries.iter().map(|e| e.disk).collect();
        let mut gone = plan::evicted(&self.kept(), &disk, folder, self.max_bytes, MAX_FILES);
        gone.sort_unstable();
        for index in gone.into_iter().rev() {
            tracing::debug!(
                model = %self.model,
                snapshot = %self.entries[index].stem,
                "conversation snapshot evicted"
            );
            self.remove(index);
        }
    }

    /// What to report after a run: the counts since the last report, and
    /// what is kept now.
    pub(super) fn report(&mut self) -> SnapshotReport {
        let report = SnapshotReport {
            hits: self.hits,
            misses: self.misses,
            files: u32::try_from(self.entries.len()).unwrap_or(u32::MAX),
            bytes: self.total(),
        };
        self.hits = 0;
        self.misses = 0;
        report
    }
}

impl RkllmRunner {
    /// Before a chat is sent whole (`system`: its system message's text,
    /// empty without one): saves its long system prompt on
    /// its own when no snapshot covers it yet, then has the runtime hold the
    /// snapshot that shares the longest prefix with `prompt` (unless the
    /// model's system-prompt cache, loaded already, covers more). Returns
    /// where the run saves its own snapshot, unless one of exactly this
    /// prompt is kept.
    pub(super) fn restore_snapshot(
        &mut self,
        model: &str,
        system: &str,
        prompt: &str,
        keeping: Keeping,
        cancel: &CancelToken,
    ) -> Option<PathBuf> {
        let mut snaps = self.snapshots.take()?;
        let system_cache = self
            .prompt_cache
            .as_ref()
            .and_then(PromptCache::loaded_prompt)
            .map(|p| common_prefix(p, prompt));
        if system_cache.is_some() {
            // The system-prompt cache took the runtime's place.
            snaps.unloaded();
        }
        let covered = system_cache.unwrap_or(0);
        let store = |s: &Snapshots| {
            let kept = s.kept();
            plan::restore_keeping(
                Store {
                    kept: &kept,
                    saves: !s.saves_failed,
                },
                system,
                prompt,
                covered,
                keeping,
            )
        };
        let mut restore = store(&snaps);
        if let Some(end) = restore.save_prefix
            && snaps.room_for(&prompt[..end])
        {
            let tmp = snaps.building_path();
            match self.prefill_and_save(&prompt[..end], model, &tmp, cancel) {
                Ok(()) => snaps.keep(&prompt[..end], true, &tmp),
                Err(not_built) => {
                    let _ = std::fs::remove_file(&tmp);
                    if let NotBuilt::Failed(why) = not_built {
                        snaps.not_written(&prompt[..end], &why);
                    }
                }
            }
            restore = store(&snaps);
        }
        if cancel.is_cancelled() {
            self.snapshots = Some(snaps);
            return None;
        }
        match restore.load {
            Load::Snapshot(index) => self.hold_snapshot(&mut snaps, index),
            Load::Release => {
                snaps.missed();
                if snaps.any_loaded() {
                    self.handle.release_cache();
                    snaps.unloaded();
                }
            }
            Load::AsItIs => {}
        }
        // Marks an exact one used, as the plan saw it.
        let save = (restore.save && !snaps.holds(prompt) && snaps.room_for(prompt)).then(|| {
            let path = snaps.building_path();
            // Nothing a run that went wrong left may pass for this one's.
            let _ = std::fs::remove_file(&path);
            path
        });
        self.snapshots = Some(snaps);
        save
    }

    /// Has the runtime hold the snapshot at `index` (a hit), loading it
    /// unless it holds it already; one the runtime refuses, or whose bytes
    /// changed, is removed (a miss).
    fn hold_snapshot(&mut self, snaps: &mut Snapshots, index: usize) {
        if snaps.is_loaded(index) {
            snaps.loaded_now(index);
            return;
        }
        let Ok((_, path)) = snaps.checked_path(index) else {
            snaps.missed();
            return;
        };
        match self.handle.load_cache(&path) {
            Ok(()) => {
                snaps.loaded_now(index);
                if let Some(cache) = self.prompt_cache.as_mut() {
                    cache.displaced();
                }
            }
            Err(rc) => {
                snaps.damaged(index, &refused(rc));
                // What the runtime holds after a refusal is not known: the
                // system-prompt cache too is loaded again when wanted.
                snaps.unloaded();
                if let Some(cache) = self.prompt_cache.as_mut() {
                    cache.displaced();
                }
                snaps.missed();
            }
        }
    }

    /// After a run that was to save a snapshot of `prompt` at `tmp`: kept
    /// when the run went well and the runtime wrote it.
    /// `ran`: the run ended well (not aborted: an aborted run's runner
    /// must answer its abort at once, and its prefill may be cut short).
    pub(super) fn keep_snapshot(&mut self, prompt: &str, keeping: Keeping, tmp: &Path, ran: bool) {
        match self.snapshots.as_mut() {
            Some(snaps) if ran && tmp.is_file() => snaps.keep_as(prompt, false, keeping, tmp),
            Some(snaps) if ran => {
                snaps.not_written(prompt, "the runtime wrote no prompt cache when asked to");
            }
            _ => {
                let _ = std::fs::remove_file(tmp);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_prefix_stops_at_a_character_boundary() {
        assert_eq!(common_prefix("abcdef", "abcxyz"), 3);
        assert_eq!(common_prefix("abc", "abcdef"), 3);
        assert_eq!(common_prefix("", "abc"), 0);
        // "é" is two bytes; "è" shares its first byte only.
        assert_eq!(common_prefix("aé", "aè"), 1);
    }

    /// A model's snapshots in a scratch folder, as a runner of `model_size`
    /// bytes of model file would open them.
    fn opened(dir: &Path, model_size: u64, max_bytes: u64) -> Snapshots {
        let mut snapshots = Snapshots {
            model: "m".into(),
            dir: dir.to_owned(),
            max_bytes,
            min_free: 0,
            per_prompt_byte: 1.0,
            trouble: None,
            made_from: MadeFrom {
                model_file: "/models/m.rkllm".into(),
                model_size,
                model_modified: 1,
                runtime_version: Some("1.2.3".into()),
                abi: "1.2.1-1.2.3".into(),
                template_sha256: "t".into(),
            },
            entries: Vec::new(),
            clock: 0,
            loaded: None,
            hits: 0,
            misses: 0,
            saves_failed: false,
        };
        snapshots.scan();
        snapshots
    }

    /// Has `snapshots` keep a file of `len` bytes for `prompt`, as a run
    /// that saved it would.
    fn save(snapshots: &mut Snapshots, prompt: &str, len: usize, system: bool) {
        let tmp = snapshots.building_path();
        std::fs::write(&tmp, vec![b'k'; len]).unwrap();
        snapshots.keep(prompt, system, &tmp);
        assert!(!tmp.exists());
    }

    fn prompts(snapshots: &Snapshots) -> Vec<&str> {
        let mut prompts: Vec<&str> = snapshots
            .entries
            .iter()
            .map(|e| e.prompt.as_str())
            .collect();
        prompts.sort_unstable();
        prompts
    }

    fn scratch() -> PathBuf {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rkllm-snapshots-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_chats_later_turn_replaces_its_earlier_ones_and_the_longest_prefix_wins() {
        let dir = scratch();
        let mut snapshots = opened(&dir, 10, 1 << 20);
        let system = "S".repeat(100);
        save(&mut snapshots, &system, 10, true);
        save(&mut snapshots, &format!("{system}|a1"), 10, false);
        save(&mut snapshots, &format!("{system}|b1"), 10, false);
        save(&mut snapshots, &format!("{system}|a1|r|a2"), 10, false);
        // a1 went with a2; the system prompt stays for every chat.
        let a2 = format!("{system}|a1|r|a2");
        let b1 = format!("{system}|b1");
        let mut want = vec![system.as_str(), a2.as_str(), b1.as_str()];
        want.sort_unstable();
        assert_eq!(prompts(&snapshots), want);
        let (best, shared) = snapshots.best(&format!("{system}|a1|r|a2|r|a3")).unwrap();
        assert_eq!(snapshots.entries[best].prompt, a2);
        assert_eq!(shared, a2.len());
        let (best, _) = snapshots.best(&format!("{system}|c1")).unwrap();
        assert!(snapshots.entries[best].prompt.starts_with(&system));
        // Under 64 bytes in common is not worth a load.
        assert!(snapshots.best("something else").is_none());
        // Owner-only files.
        for entry in &snapshots.entries {
            let mode = std::fs::metadata(snapshots.path(&entry.stem))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        let report = snapshots.report();
        assert_eq!(report.files, 3);
        assert_eq!(report.bytes, du(&dir));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_least_recently_used_go_past_the_budget() {
        let dir = scratch();
        let mut snapshots = opened(&dir, 10, 1 << 20);
        let chat = |n: usize| format!("{}{n}", "x".repeat(80));
        save(&mut snapshots, &chat(1), 100, false);
        save(&mut snapshots, &chat(2), 100, false);
        // Room for two on disk, not three.
        let two = snapshots.total();
        snapshots.max_bytes = two + (two - std::fs::metadata(&dir).map_or(0, |m| on_disk(&m))) / 4;
        // Chat 1 is used again: chat 2 is now the least recently used.
        let (index, _) = snapshots.best(&format!("{}/more", chat(1))).unwrap();
        snapshots.loaded_now(index);
        save(&mut snapshots, &chat(3), 100, false);
        assert_eq!(prompts(&snapshots), vec![chat(1), chat(3)]);
        assert!(
            !snapshots
                .dir
                .join(format!("{}.snapshot", stem_of(&chat(2))))
                .exists()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_reopened_folder_keeps_what_matches_and_drops_the_rest() {
        let dir = scratch();
        let mut snapshots = opened(&dir, 10, 1 << 20);
        let (kept, cut, changed) = ("k".repeat(70), "c".repeat(70), "h".repeat(70));
        for prompt in [&kept, &cut, &changed] {
            save(&mut snapshots, prompt, 40, false);
        }
        std::fs::write(snapshots.path(&stem_of(&cut)), b"short").unwrap();
        std::fs::write(snapshots.path(&stem_of(&changed)), vec![b'z'; 40]).unwrap();
        std::fs::write(dir.join("building-1.snapshot-tmp"), b"left over").unwrap();
        drop(snapshots);
        let mut snapshots = opened(&dir, 10, 1 << 20);
        // Cut short: gone at once; the same size with other bytes: kept
        // until the check before its load finds it.
        assert_eq!(prompts(&snapshots), vec![&changed, &kept]);
        assert!(!dir.join("building-1.snapshot-tmp").exists());
        let index = snapshots
            .entries
            .iter()
            .position(|e| e.prompt == changed)
            .unwrap();
        assert!(snapshots.checked_path(index).is_err());
        let index = snapshots
            .entries
            .iter()
            .position(|e| e.prompt == kept)
            .unwrap();
        assert!(snapshots.checked_path(index).is_ok());
        assert_eq!(prompts(&snapshots), vec![&kept]);
        drop(snapshots);
        // Another model file: nothing is of use.
        let snapshots = opened(&dir, 11, 1 << 20);
        assert!(snapshots.entries.is_empty());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The names in `dir`, sorted.
    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_save_whose_fingerprint_cannot_be_written_leaves_no_file_behind() {
        let dir = scratch();
        let mut snapshots = opened(&dir, 10, 1 << 20);
        let prompt = "p".repeat(70);
        // A folder where its fingerprint goes: the rename onto it fails.
        let blocked = format!("{}.snapshot.json", stem_of(&prompt));
        std::fs::create_dir(dir.join(&blocked)).unwrap();
        save(&mut snapshots, &prompt, 40, false);
        assert!(snapshots.entries.is_empty());
        assert_eq!(listing(&dir), vec![blocked]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// What the folder and every file in it take on disk.
    fn du(dir: &Path) -> u64 {
        let files: u64 = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| on_disk(&e.unwrap().metadata().unwrap()))
            .sum();
        on_disk(&std::fs::metadata(dir).unwrap()) + files
    }

    /// The lines `f` logs, at info and above.
    fn logged(f: impl FnOnce()) -> Vec<String> {
        #[derive(Clone, Default)]
        struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let sink = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_owned).collect()
    }

    fn count(lines: &[String], level: &str) -> usize {
        lines.iter().filter(|l| l.contains(level)).count()
    }

    #[test]
    fn the_budget_counts_the_fingerprints_and_the_folder_on_disk() {
        let dir = scratch();
        let max = 20 * 1024;
        let mut snapshots = opened(&dir, 10, max);
        for n in 0..5 {
            save(
                &mut snapshots,
                &format!("{}{n}", "q".repeat(3000)),
                3000,
                false,
            );
            assert!(
                du(&dir) <= max,
                "{} bytes on disk: {:?}",
                du(&dir),
                listing(&dir)
            );
            assert_eq!(snapshots.report().bytes, du(&dir));
        }
        assert!(!snapshots.entries.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn below_the_reserve_nothing_is_saved_and_it_is_said_once_until_a_save_is_made() {
        let dir = scratch();
        let mut snapshots = opened(&dir, 10, 1 << 20);
        let prompt = "r".repeat(100);
        let lines = logged(|| {
            snapshots.min_free = u64::MAX / 2;
            for _ in 0..3 {
                assert!(!snapshots.room_for(&prompt));
            }
            snapshots.min_free = 0;
            assert!(snapshots.room_for(&prompt));
            save(&mut snapshots, &prompt, 40, false);
            snapshots.min_free = u64::MAX / 2;
            for _ in 0..3 {
                assert!(!snapshots.room_for("another prompt"));
            }
        });
        assert_eq!(count(&lines, "WARN"), 2, "{lines:#?}");
        assert_eq!(count(&lines, "INFO"), 1, "{lines:#?}");
        assert!(
            lines.iter().all(|l| l.contains("free-space reserve")),
            "{lines:#?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_save_that_took_the_disk_below_its_reserve_is_removed() {
        let dir = scratch();
        let mut snapshots = opened(&dir, 10, 1 << 20);
        snapshots.min_free = u64::MAX / 2;
        let lines = logged(|| {
            save(&mut snapshots, &"s".repeat(100), 40, false);
            save(&mut snapshots, &"t".repeat(100), 40, false);
        });
        assert!(snapshots.entries.is_empty());
        assert_eq!(listing(&dir), Vec::<String>::new());
        assert_eq!(count(&lines, "WARN"), 1, "{lines:#?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn failed_writes_are_said_once_until_a_save_is_made_and_leave_nothing() {
        let dir = scratch();
        let mut snapshots = opened(&dir, 10, 1 << 20);
        let blocked = |snapshots: &Snapshots, prompt: &str| {
            std::fs::create_dir(snapshots.sidecar(&stem_of(prompt))).unwrap();
        };
        let failing: Vec<String> = (0..4).map(|n| format!("{}{n}", "w".repeat(80))).collect();
        let lines = logged(|| {
            for prompt in &failing[..3] {
                blocked(&snapshots, prompt);
                save(&mut snapshots, prompt, 40, false);
            }
            save(&mut snapshots, &"ok".repeat(40), 40, false);
            blocked(&snapshots, &failing[3]);
            save(&mut snapshots, &failing[3], 40, false);
        });
        assert_eq!(count(&lines, "WARN"), 2, "{lines:#?}");
        assert_eq!(count(&lines, "INFO"), 1, "{lines:#?}");
        assert_eq!(prompts(&snapshots), vec!["ok".repeat(40)]);
        // The blocking folders, and the one snapshot kept.
        assert_eq!(listing(&dir).len(), 4 + 2, "{:?}", listing(&dir));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn model_names_become_plain_folder_names() {
        assert_eq!(folder_name("qwen2.5-1.5b"), "qwen2.5-1.5b");
        assert_eq!(folder_name("org/model:q8"), "org_model_q8");
        assert_eq!(folder_name(".."), "_..");
        assert_eq!(folder_name(""), "_");
    }
}
