//! Pulling a model into the store: choose the file, download it (resuming
//! what an earlier attempt left), check its SHA-256, and install it with
//! its manifest. Two pulls of one model never download it twice: they
//! take turns on a lock file, and the second finds the model in place.

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::error::PullError;
use super::hf::{Hub, RepoFile, Resolved};
use super::names::{check_name, details_of, name_for_file};
use super::{Manifest, Origin, Store, StoredFile};

/// What to pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `owner/repo[:file]` on the Hugging Face endpoint.
    Repo {
        /// `owner/repo`.
        repo: String,
        /// The file, when named.
        file: Option<String>,
    },
    /// A file's URL.
    Url(String),
}

impl Source {
    /// Reads `owner/repo`, `owner/repo:file`, `hf.co/owner/repo[:file]`
    /// or an `https://` URL.
    ///
    /// # Errors
    /// Anything else, with what is expected.
    pub fn parse(spec: &str) -> Result<Self, PullError> {
        let spec = spec.trim();
        if spec.starts_with("https://") || spec.starts_with("http://") {
            return Ok(Self::Url(spec.to_owned()));
        }
        let spec = spec
            .strip_prefix("hf.co/")
            .or_else(|| spec.strip_prefix("huggingface.co/"))
            .unwrap_or(spec);
        let (repo, file) = match spec.split_once(':') {
            Some((repo, file)) => (repo, Some(file)),
            None => (spec, None),
        };
        let part_ok = |p: &str| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        };
        let bad = || {
            PullError::BadSource(format!(
                "{spec:?}: expected owner/repo, owner/repo:file.rkllm or an https:// URL"
            ))
        };
        let mut parts = repo.split('/');
        let (Some(owner), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        if !part_ok(owner) || !part_ok(name) {
            return Err(bad());
        }
        let file = match file {
            Some(f) if f.is_empty() || f.split('/').any(|p| !part_ok(p)) => {
                return Err(PullError::BadSource(format!(
                    "{f:?} is not a file of a repository (no `..`, no empty parts)"
                )));
            }
            Some(f) => Some(f.to_owned()),
            None => None,
        };
        Ok(Self::Repo {
            repo: repo.to_owned(),
            file,
        })
    }
}

/// A pull, as the CLI or `/api/pull` asks for it.
#[derive(Debug, Clone)]
pub struct PullRequest {
    /// What was asked for (see [`Source::parse`]).
    pub spec: String,
    /// The store name (default: from the file's name).
    pub name: Option<String>,
    /// Branch, tag or commit (default `main`).
    pub revision: String,
    /// This board's chip (`rk3588`, `rk3576`), to choose among files.
    pub platform: Option<String>,
    /// The runtime's version, to choose among files.
    pub runtime_version: Option<String>,
}

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

fn io_error(context: &str) -> impl Fn(io::Error) -> PullError + '_ {
    move |e| PullError::Io(format!("{context}: {e}"))
}

fn is_disk_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

/// Chooses the model file among a repository's files: the one named, the
/// only `.rkllm`, or the only one for this platform (and runtime version).
fn choose_file<'a>(
    repo: &str,
    files: &'a [RepoFile],
    wanted: Option<&str>,
    request: &PullRequest,
) -> Result<&'a RepoFile, PullError> {
    if let Some(wanted) = wanted {
        return files
            .iter()
            .find(|f| f.path == wanted)
            .ok_or_else(|| PullError::NotFound(format!("{repo} has no file {wanted}")));
    }
    let models: Vec<&RepoFile> = files
        .iter()
        .filter(|f| f.path.to_ascii_lowercase().ends_with(".rkllm"))
        .collect();
    if models.is_empty() {
        return Err(PullError::NoModelFile(repo.to_owned()));
    }
    if let [only] = models.as_slice() {
        return Ok(only);
    }
    let mut fitting = models.clone();
    if let Some(platform) = &request.platform {
        let on_platform: Vec<&RepoFile> = fitting
            .iter()
            .copied()
            .filter(|f| details_of(&f.path).platform.as_deref() == Some(platform.as_str()))
            .collect();
        if !on_platform.is_empty() {
            fitting = on_platform;
        }
    }
    if fitting.len() > 1
        && let Some(version) = &request.runtime_version
    {
        let for_runtime: Vec<&RepoFile> = fitting
            .iter()
            .copied()
            .filter(|f| details_of(&f.path).runtime_version.as_deref() == Some(version.as_str()))
            .collect();
        if !for_runtime.is_empty() {
            fitting = for_runtime;
        }
    }
    if let [only] = fitting.as_slice() {
        return Ok(only);
    }
    let hint = match (&request.platform, &request.runtime_version) {
        (Some(p), Some(v)) => format!(" ({p}, runtime {v})"),
        (Some(p), None) => format!(" ({p})"),
        (None, Some(v)) => format!(" (runtime {v}; the chip is unknown)"),
        (None, None) => " (the chip is unknown)".to_owned(),
    };
    Err(PullError::Ambiguous {
        repo: repo.to_owned(),
        hint,
        files: fitting.iter().map(|f| f.path.clone()).collect(),
    })
}

/// The vision encoder (`.rknn`) to pull with `model`, when the repository
/// has any: the one for this board's platform, and among several the one
/// whose name shares the longest start with the model's.
fn choose_encoder<'a>(
    files: &'a [RepoFile],
    model: &str,
    request: &PullRequest,
) -> Option<&'a RepoFile> {
    let encoders: Vec<&RepoFile> = files
        .iter()
        .filter(|f| f.path.to_ascii_lowercase().ends_with(".rknn"))
        .collect();
    let on_platform: Vec<&RepoFile> = encoders
        .iter()
        .copied()
        .filter(|f| {
            request.platform.is_some()
                && details_of(&f.path).platform.as_deref() == request.platform.as_deref()
        })
        .collect();
    let fitting = if on_platform.is_empty() {
        encoders
    } else {
        on_platform
    };
    let shared = |f: &RepoFile| {
        f.path
            .bytes()
            .zip(model.bytes())
            .take_while(|(a, b)| a.eq_ignore_ascii_case(b))
            .count()
    };
    fitting
        .into_iter()
        .max_by(|a, b| shared(a).cmp(&shared(b)).then_with(|| b.path.cmp(&a.path)))
}

/// Holds the store's lock for one model name while a pull runs; other
/// pulls of that name, in this process or another, wait for it.
struct NameLock {
    _file: std::fs::File,
}

impl NameLock {
    async fn take(
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

/// What an earlier, interrupted download of a file left.
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
struct PartialMeta {
    url: String,
    etag: Option<String>,
    size: Option<u64>,
}

/// Pulls a model into `store`; `progress` hears what happens.
///
/// # Errors
/// See [`PullError`]; nothing half-written is left in the store (a cut
/// download stays in `.partial/` to be resumed).
pub async fn pull(
    store: &Store,
    hub: &Hub,
    request: &PullRequest,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Manifest, PullError> {
    progress(Progress::Resolving);
    let source = Source::parse(&request.spec)?;
    let revision = request.revision.as_str();
    let (url, repo, file, listed_sha, encoder) = match &source {
        Source::Url(url) => {
            hub.check_url(url)?;
            let file = url
                .split(['?', '#'])
                .next()
                .and_then(|u| u.rsplit('/').next())
                .filter(|f| !f.is_empty())
                .ok_or_else(|| PullError::BadSource(format!("{url}: no file name in the URL")))?
                .to_owned();
            (url.clone(), None, file, None, None)
        }
        Source::Repo { repo, file } => {
            let files = hub.list_files(repo, revision).await?;
            let chosen = choose_file(repo, &files, file.as_deref(), request)?;
            let encoder = choose_encoder(&files, &chosen.path, request).map(|e| {
                (
                    hub.resolve_url(repo, revision, &e.path),
                    e.path.clone(),
                    e.sha256.clone(),
                )
            });
            (
                hub.resolve_url(repo, revision, &chosen.path),
                Some(repo.clone()),
                chosen.path.clone(),
                chosen.sha256.clone(),
                encoder,
            )
        }
    };
    let base_name = file.rsplit('/').next().unwrap_or(&file).to_owned();
    let name = match &request.name {
        Some(name) => name.clone(),
        None => name_for_file(&base_name),
    };
    check_name(&name).map_err(PullError::BadName)?;
    check_name(&base_name).map_err(|m| PullError::BadSource(format!("the file name: {m}")))?;
    let partial_dir = store.partial_dir();
    let _lock = NameLock::take(&partial_dir, &name, progress).await?;

    let repo_label = repo.clone().unwrap_or_else(|| url.clone());
    let resolved = hub
        .resolve(&url, &repo_label, &format!("{repo_label}: {file}"))
        .await?;
    let expected = listed_sha.or_else(|| resolved.sha256.clone());

    // Already there (another pull just brought it, or a repeated pull)?
    if let Ok(Some(existing)) = store.get(&name)
        && existing.source.url == url
        && expected.as_deref().is_none_or(|e| e == existing.sha256)
        && resolved.size.is_none_or(|s| s == existing.size)
        && store.model_dir(&name).join(&existing.file).is_file()
        && encoder.as_ref().map(|(_, path, _)| file_name(path))
            == existing.vision_encoder.as_ref().map(|v| v.file.as_str())
    {
        progress(Progress::Done { fresh: false });
        return Ok(existing);
    }

    let work = partial_dir.join(&name);
    std::fs::create_dir_all(&work).map_err(io_error(&work.display().to_string()))?;
    let part = fetch_file(
        hub,
        &url,
        &resolved,
        &work,
        &repo_label,
        &file,
        expected.as_deref(),
        progress,
    )
    .await?;
    let encoder = match &encoder {
        None => None,
        Some((encoder_url, path, listed)) => {
            let resolved = hub
                .resolve(encoder_url, &repo_label, &format!("{repo_label}: {path}"))
                .await?;
            let expected = listed.clone().or_else(|| resolved.sha256.clone());
            let fetched = fetch_file(
                hub,
                encoder_url,
                &resolved,
                &work,
                &repo_label,
                path,
                expected.as_deref(),
                progress,
            )
            .await?;
            Some((fetched, expected.is_some()))
        }
    };
    progress(Progress::Writing);
    let encoder_part = encoder.as_ref().map(|(e, _)| e.path.clone());
    let manifest = install(
        store,
        &part.path,
        encoder_part.as_deref(),
        Manifest {
            name: name.clone(),
            file: base_name.clone(),
            size: part.size,
            sha256: part.sha256.clone(),
            sha256_verified: expected.is_some(),
            pulled_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            source: Origin {
                spec: request.spec.clone(),
                repository: repo,
                revision: matches!(source, Source::Repo { .. }).then(|| revision.to_owned()),
                commit: resolved.commit.clone(),
                file: Some(file.clone()),
                url,
            },
            chat_template: None,
            settings: crate::engine::ModelSettings::default(),
            vision_encoder: encoder.map(|(e, verified)| StoredFile {
                file: e.name,
                size: e.size,
                sha256: e.sha256,
                sha256_verified: verified,
            }),
        },
    )?;
    let _ = std::fs::remove_dir_all(&work);
    progress(Progress::Done { fresh: true });
    Ok(manifest)
}

/// One file downloaded and checked, waiting in the work folder.
#[derive(Debug)]
struct Fetched {
    path: PathBuf,
    /// Its name in the model's folder.
    name: String,
    sha256: String,
    size: u64,
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Downloads `file` (resolved to `resolved`) into `work`, resuming an
/// earlier attempt at the same version, and checks it against `expected`.
/// A wrong checksum or a full disk leaves nothing behind.
#[allow(clippy::too_many_arguments)]
async fn fetch_file(
    hub: &Hub,
    url: &str,
    resolved: &Resolved,
    work: &Path,
    repo_label: &str,
    file: &str,
    expected: Option<&str>,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Fetched, PullError> {
    let name = file_name(file).to_owned();
    check_name(&name).map_err(|m| PullError::BadSource(format!("the file name: {m}")))?;
    let part = work.join(format!("{name}.part"));
    let meta_path = work.join(format!("{name}.part.json"));
    let meta = PartialMeta {
        url: url.to_owned(),
        etag: resolved.etag.clone(),
        size: resolved.size,
    };
    let resumable = std::fs::read(&meta_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<PartialMeta>(&b).ok())
        .is_some_and(|old| old == meta);
    if !resumable {
        let _ = std::fs::remove_file(&part);
        let text = serde_json::to_vec(&meta).unwrap_or_default();
        std::fs::write(&meta_path, text).map_err(io_error(&meta_path.display().to_string()))?;
    }
    let (sha256, size) =
        match download(hub, resolved, &part, repo_label, file, expected, progress).await {
            Ok(done) => done,
            Err(err) => {
                if matches!(err, PullError::Checksum { .. } | PullError::DiskFull { .. }) {
                    let _ = std::fs::remove_dir_all(work);
                }
                return Err(err);
            }
        };
    progress(Progress::Verifying);
    if let Some(expected) = expected
        && !expected.eq_ignore_ascii_case(&sha256)
    {
        let _ = std::fs::remove_dir_all(work);
        return Err(PullError::Checksum {
            file: file.to_owned(),
            expected: expected.to_owned(),
            got: sha256,
        });
    }
    Ok(Fetched {
        path: part,
        name,
        sha256,
        size,
    })
}

/// Downloads into `part`, resuming from its length; returns its SHA-256
/// and size once complete.
async fn download(
    hub: &Hub,
    resolved: &Resolved,
    part: &Path,
    repo: &str,
    file: &str,
    published: Option<&str>,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<(String, u64), PullError> {
    let part_label = part.display().to_string();
    let mut have = std::fs::metadata(part).map_or(0, |m| m.len());
    if resolved.size.is_some_and(|s| have > s) {
        have = 0;
    }
    let mut response = hub
        .download(resolved, have, repo, &format!("{repo}: {file}"))
        .await?;
    let status = response.status().as_u16();
    if status == 416 {
        // Nothing more to send: either complete, or a stale partial.
        if resolved.size != Some(have) {
            have = 0;
            response = hub
                .download(resolved, 0, repo, &format!("{repo}: {file}"))
                .await?;
        }
    } else if status != 206 {
        // Not resumed (no Range support, or the file changed): start over.
        have = 0;
    }
    let mut out = tokio::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(have == 0)
        .append(have > 0)
        .open(part)
        .await
        .map_err(io_error(&part_label))?;
    let mut hasher = Sha256::new();
    if have > 0 {
        // Hash what an earlier attempt wrote.
        let mut earlier = tokio::fs::File::open(part)
            .await
            .map_err(io_error(&part_label))?;
        let mut buf = vec![0u8; 1 << 16];
        let mut left = have;
        while left > 0 {
            let n = earlier
                .read(&mut buf)
                .await
                .map_err(io_error(&part_label))?;
            if n == 0 {
                break;
            }
            let n = n.min(usize::try_from(left).unwrap_or(usize::MAX));
            hasher.update(&buf[..n]);
            left -= n as u64;
        }
    }
    let total = resolved.size.or_else(|| {
        response
            .content_length()
            .map(|len| len + if status == 206 { have } else { 0 })
    });
    let mut got = have;
    let mut reported = None;
    let sha256 = published.map(str::to_owned);
    if status != 416 || resolved.size != Some(have) || have == 0 {
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(_) => {
                    let _ = out.flush().await;
                    return Err(PullError::Cut { got, total });
                }
            };
            if let Err(e) = out.write_all(&chunk).await {
                drop(out);
                let _ = std::fs::remove_file(part);
                return Err(if is_disk_full(&e) {
                    PullError::DiskFull {
                        dir: part
                            .parent()
                            .and_then(Path::parent)
                            .and_then(Path::parent)
                            .map_or_else(String::new, |p| p.display().to_string()),
                        file: file.to_owned(),
                        size: total
                            .map_or_else(|| "size unknown".to_owned(), |t| format!("{t} bytes")),
                    }
                } else {
                    PullError::Io(format!("{part_label}: {e}"))
                });
            }
            hasher.update(&chunk);
            got += chunk.len() as u64;
            // Report at most every 1/1000 of the file (or 1 MiB).
            let step = total.map_or(1 << 20, |t| (t / 1000).max(64 << 10));
            if reported.is_none_or(|r: u64| got - r >= step) {
                reported = Some(got);
                progress(Progress::Downloading {
                    file: file.to_owned(),
                    sha256: sha256.clone(),
                    completed: got,
                    total,
                });
            }
        }
    }
    out.flush().await.map_err(io_error(&part_label))?;
    out.sync_all().await.map_err(io_error(&part_label))?;
    if total.is_some_and(|t| got < t) {
        return Err(PullError::Cut { got, total });
    }
    progress(Progress::Downloading {
        file: file.to_owned(),
        sha256,
        completed: got,
        total: Some(got),
    });
    Ok((hex(&hasher.finalize()), got))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Moves the finished files into the model's folder (the model, then its
/// vision encoder) and writes the manifest last; files of an older pull
/// go once the new ones are in.
fn install(
    store: &Store,
    part: &Path,
    encoder: Option<&Path>,
    manifest: Manifest,
) -> Result<Manifest, PullError> {
    let dir = store.model_dir(&manifest.name);
    std::fs::create_dir_all(&dir).map_err(io_error(&dir.display().to_string()))?;
    let old = store.get(&manifest.name).ok().flatten();
    let target: PathBuf = dir.join(&manifest.file);
    std::fs::rename(part, &target).map_err(io_error(&target.display().to_string()))?;
    if let (Some(encoder), Some(stored)) = (encoder, &manifest.vision_encoder) {
        let target = dir.join(&stored.file);
        std::fs::rename(encoder, &target).map_err(io_error(&target.display().to_string()))?;
    }
    store
        .write_manifest(&manifest)
        .map_err(io_error(&dir.display().to_string()))?;
    if let Some(old) = old {
        let kept = [
            Some(manifest.file.as_str()),
            manifest.vision_encoder.as_ref().map(|v| v.file.as_str()),
        ];
        let olds = [Some(old.file), old.vision_encoder.map(|v| v.file)];
        for file in olds.into_iter().flatten() {
            if !kept.contains(&Some(file.as_str())) {
                let _ = std::fs::remove_file(dir.join(file));
            }
        }
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_read_and_bad_ones_refused() {
        assert_eq!(
            Source::parse("owner/repo").unwrap(),
            Source::Repo {
                repo: "owner/repo".into(),
                file: None
            }
        );
        assert_eq!(
            Source::parse("hf.co/owner/repo:sub/m.rkllm").unwrap(),
            Source::Repo {
                repo: "owner/repo".into(),
                file: Some("sub/m.rkllm".into())
            }
        );
        assert!(matches!(
            Source::parse("https://example.org/m.rkllm").unwrap(),
            Source::Url(_)
        ));
        for bad in [
            "repo",
            "a/b/c",
            "../x",
            "owner/..",
            "owner/repo:../etc/passwd",
            "owner/repo:",
            "owner/re po",
        ] {
            assert!(Source::parse(bad).is_err(), "{bad}");
        }
    }

    fn files(names: &[&str]) -> Vec<RepoFile> {
        names
            .iter()
            .map(|n| RepoFile {
                path: (*n).into(),
                size: 1,
                sha256: None,
            })
            .collect()
    }

    fn request(platform: Option<&str>, runtime: Option<&str>) -> PullRequest {
        PullRequest {
            spec: "o/r".into(),
            name: None,
            revision: "main".into(),
            platform: platform.map(Into::into),
            runtime_version: runtime.map(Into::into),
        }
    }

    #[test]
    fn the_vision_encoder_for_this_board_comes_along() {
        let all = files(&[
            "qwen2-vl-2b_w8a8_rk3588.rkllm",
            "qwen2-vl-2b_vision_rk3588.rknn",
            "qwen2-vl-2b_vision_rk3576.rknn",
            "other_vision_rk3588.rknn",
        ]);
        let pick = |p| {
            choose_encoder(&all, "qwen2-vl-2b_w8a8_rk3588.rkllm", &request(p, None))
                .map(|f| f.path.clone())
        };
        assert_eq!(
            pick(Some("rk3588")).unwrap(),
            "qwen2-vl-2b_vision_rk3588.rknn"
        );
        assert_eq!(
            pick(Some("rk3576")).unwrap(),
            "qwen2-vl-2b_vision_rk3576.rknn"
        );
        let text_only = files(&["m.rkllm", "README.md"]);
        assert!(choose_encoder(&text_only, "m.rkllm", &request(Some("rk3588"), None)).is_none());
    }

    #[test]
    fn the_file_for_this_board_is_chosen() {
        let all = files(&[
            "README.md",
            "m_w8a8_rk3588_v1.1.4.rkllm",
            "m_w8a8_rk3588_v1.2.1.rkllm",
            "m_w8a8_rk3576_v1.2.1.rkllm",
        ]);
        let pick = |p, v| choose_file("o/r", &all, None, &request(p, v)).map(|f| f.path.clone());
        assert_eq!(
            pick(Some("rk3588"), Some("1.2.1")).unwrap(),
            "m_w8a8_rk3588_v1.2.1.rkllm"
        );
        assert_eq!(
            pick(Some("rk3576"), None).unwrap(),
            "m_w8a8_rk3576_v1.2.1.rkllm"
        );
        let ambiguous = pick(Some("rk3588"), None).unwrap_err().to_string();
        assert!(ambiguous.contains("o/r:FILE"), "{ambiguous}");
        assert!(
            ambiguous.contains("m_w8a8_rk3588_v1.1.4.rkllm"),
            "{ambiguous}"
        );
        assert!(!ambiguous.contains("rk3576_v1"), "{ambiguous}");
        assert!(pick(None, None).is_err());
        let named = choose_file(
            "o/r",
            &all,
            Some("m_w8a8_rk3588_v1.1.4.rkllm"),
            &request(None, None),
        );
        assert_eq!(named.unwrap().path, "m_w8a8_rk3588_v1.1.4.rkllm");
        assert!(choose_file("o/r", &all, Some("nope.rkllm"), &request(None, None)).is_err());
        assert!(matches!(
            choose_file("o/r", &files(&["README.md"]), None, &request(None, None)),
            Err(PullError::NoModelFile(_))
        ));
        let one = files(&["README.md", "only.rkllm"]);
        assert_eq!(
            choose_file("o/r", &one, None, &request(Some("rk3576"), None))
                .unwrap()
                .path,
            "only.rkllm"
        );
    }
}
