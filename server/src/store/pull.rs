//! Pulling a model into the store: choose the file, download it (resuming
//! what an earlier attempt left), check its SHA-256, and install it with
//! its manifest. Two pulls of one model never download it twice: they
//! take turns on a lock file, and the second finds the model in place.
//!
//! A pull refuses what this server cannot run (a vision model without an
//! RKNN runtime) unless asked to store it only, and every name it takes
//! from the request or the hub is checked before any file is touched.

use std::io;
use std::path::{Path, PathBuf};

use tokio::time::Instant;

use super::choose::{Board, choose_encoder, choose_file};
use super::download::{FileJob, PullLimits, fetch_file, file_name};
use super::error::PullError;
use super::hf::Hub;
use super::names::{check_file_name, check_name, check_repo_path, name_for_file};
use super::progress::Progress;
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
            Some(f) => {
                check_repo_path(f).map_err(|m| {
                    PullError::BadSource(format!(
                        "{f:?} is not a file of a repository (no `..`, no empty parts): {m}"
                    ))
                })?;
                Some(f.to_owned())
            }
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
    /// Whether a vision model may be pulled: `Err` says why this server
    /// cannot run one (`Ok` too when the model is to be stored only).
    pub vision_runtime: Result<(), String>,
    /// What bounds the pull.
    pub limits: PullLimits,
}

fn io_error(context: &str) -> impl Fn(io::Error) -> PullError + '_ {
    move |e| PullError::Io(format!("{context}: {e}"))
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

/// A file of the repository (or the URL) to download.
struct Wanted {
    /// Its address at the endpoint.
    url: String,
    /// Its path in the repository (or the URL's last part).
    path: String,
    /// The SHA-256 the file list publishes.
    listed_sha: Option<String>,
}

/// What a pull's source says to download: the model file and, for a
/// vision model, its encoder.
struct Plan {
    repo: Option<String>,
    model: Wanted,
    encoder: Option<Wanted>,
}

/// Reads the source and chooses its files; refuses a vision model this
/// server cannot run (unless it is to be stored only).
async fn plan(hub: &Hub, request: &PullRequest, source: &Source) -> Result<Plan, PullError> {
    let revision = request.revision.as_str();
    match source {
        Source::Url(url) => {
            hub.check_url(url)?;
            let file = url
                .split(['?', '#'])
                .next()
                .and_then(|u| u.rsplit('/').next())
                .filter(|f| !f.is_empty())
                .ok_or_else(|| PullError::BadSource(format!("{url}: no file name in the URL")))?
                .to_owned();
            Ok(Plan {
                repo: None,
                model: Wanted {
                    url: url.clone(),
                    path: file,
                    listed_sha: None,
                },
                encoder: None,
            })
        }
        Source::Repo { repo, file } => {
            let files = hub.list_files(repo, revision).await?;
            let board = Board {
                platform: request.platform.as_deref(),
                runtime_version: request.runtime_version.as_deref(),
            };
            let chosen = choose_file(repo, &files, file.as_deref(), board)?;
            let encoder = choose_encoder(repo, &files, &chosen.path, board)?;
            if let (Some(encoder), Err(why)) = (encoder, &request.vision_runtime) {
                return Err(PullError::NeedsVisionRuntime {
                    repo: repo.clone(),
                    spec: request.spec.clone(),
                    model: chosen.path.clone(),
                    encoder: encoder.path.clone(),
                    why: why.trim_end_matches('.').to_owned(),
                });
            }
            let wanted = |path: &str, sha: &Option<String>| Wanted {
                url: hub.resolve_url(repo, revision, path),
                path: path.to_owned(),
                listed_sha: sha.clone(),
            };
            Ok(Plan {
                repo: Some(repo.clone()),
                model: wanted(&chosen.path, &chosen.sha256),
                encoder: encoder.map(|e| wanted(&e.path, &e.sha256)),
            })
        }
    }
}

/// Pulls a model into `store`; `progress` hears what happens.
///
/// # Errors
/// See [`PullError`]; nothing half-written is left in the store (a cut,
/// slow or timed-out download stays in `.partial/` to be resumed).
pub async fn pull(
    store: &Store,
    hub: &Hub,
    request: &PullRequest,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Manifest, PullError> {
    progress(Progress::Resolving);
    let source = Source::parse(&request.spec)?;
    let Plan {
        repo,
        model,
        encoder,
    } = plan(hub, request, &source).await?;
    let base_name = file_name(&model.path).to_owned();
    let name = match &request.name {
        Some(name) => name.clone(),
        None => name_for_file(&base_name),
    };
    check_name(&name).map_err(PullError::BadName)?;
    for path in std::iter::once(&model).chain(&encoder).map(|w| &w.path) {
        check_file_name(file_name(path))
            .map_err(|m| PullError::BadSource(format!("the file name: {m}")))?;
    }
    let partial_dir = store.partial_dir();
    let _lock = NameLock::take(&partial_dir, &name, progress).await?;
    let deadline = Instant::now() + request.limits.timeout;

    let repo_label = repo.clone().unwrap_or_else(|| model.url.clone());
    let resolved = hub
        .resolve(
            &model.url,
            &repo_label,
            &format!("{repo_label}: {}", model.path),
        )
        .await?;
    let expected = model.listed_sha.clone().or_else(|| resolved.sha256.clone());

    // Already there (another pull just brought it, or a repeated pull)?
    if let Ok(Some(existing)) = store.get(&name)
        && existing.source.url == model.url
        && expected.as_deref().is_none_or(|e| e == existing.sha256)
        && resolved.size.is_none_or(|s| s == existing.size)
        && store.model_dir(&name).join(&existing.file).is_file()
        && encoder.as_ref().map(|e| file_name(&e.path))
            == existing.vision_encoder.as_ref().map(|v| v.file.as_str())
    {
        progress(Progress::Done { fresh: false });
        return Ok(existing);
    }

    let work = partial_dir.join(&name);
    std::fs::create_dir_all(&work).map_err(io_error(&work.display().to_string()))?;
    let part = fetch_file(
        &FileJob {
            hub,
            url: &model.url,
            resolved: &resolved,
            repo: &repo_label,
            file: &model.path,
            expected: expected.as_deref(),
            limits: &request.limits,
            deadline,
        },
        &work,
        progress,
    )
    .await?;
    let encoder = match &encoder {
        None => None,
        Some(wanted) => {
            let resolved = hub
                .resolve(
                    &wanted.url,
                    &repo_label,
                    &format!("{repo_label}: {}", wanted.path),
                )
                .await?;
            let expected = wanted
                .listed_sha
                .clone()
                .or_else(|| resolved.sha256.clone());
            let job = FileJob {
                hub,
                url: &wanted.url,
                resolved: &resolved,
                repo: &repo_label,
                file: &wanted.path,
                expected: expected.as_deref(),
                limits: &request.limits,
                deadline,
            };
            let fetched = fetch_file(&job, &work, progress).await?;
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
                revision: matches!(source, Source::Repo { .. }).then(|| request.revision.clone()),
                commit: resolved.commit.clone(),
                file: Some(model.path.clone()),
                url: model.url,
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

/// Moves the finished files into the model's folder (the model, then its
/// vision encoder) and writes the manifest last; files of an older pull
/// go once the new ones are in (only those a valid manifest names: one
/// that is refused names nothing to remove).
fn install(
    store: &Store,
    part: &Path,
    encoder: Option<&Path>,
    manifest: Manifest,
) -> Result<Manifest, PullError> {
    manifest.check().map_err(PullError::BadSource)?;
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
        let kept: Vec<&str> = manifest.files().into_iter().map(|(_, f)| f).collect();
        for (_, file) in old.files() {
            if !kept.contains(&file) {
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
            "owner/repo:a//b.rkllm",
            "owner/re po",
        ] {
            assert!(Source::parse(bad).is_err(), "{bad}");
        }
    }
}
