//! Pulling a model into the store: choose the file, download it (resuming
//! what an earlier attempt left), check its SHA-256, and install it with
//! its manifest. Two pulls of one model never download it twice: they
//! take turns on a lock file, and the second finds the model in place.
//!
//! A pull refuses what this server cannot run (a vision model without an
//! RKNN runtime) unless asked to store it only, and every name it takes
//! from the request or the hub is checked before any file is touched.
//!
//! The model's tokenizer comes along when it can be had (see
//! [`super::tokenizer`]), with the chat template beside it (see
//! [`super::template`]); a model in place without one (or pulled before
//! templates were) gets it from a later pull, without its file being
//! downloaded again.

use std::io;
use std::path::{Path, PathBuf};

use tokio::time::Instant;

use super::choose::{Board, choose_encoder, choose_file};
use super::download::{FileJob, PullLimits, fetch_file, file_name};
use super::error::PullError;
use super::hf::{Hub, RepoFile};
use super::lock::NameLock;
use super::names::{check_file_name, check_name, name_for_file};
use super::progress::Progress;
use super::source::Source;
use super::tokenizer::{self, ForPull, Got, HubTokenizer, NoTokenizer};
use super::{Manifest, Origin, Store, StoredFile};

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
    /// The tokenizer to take (`--tokenizer`), instead of looking for one.
    pub tokenizer: Option<HubTokenizer>,
    /// Where the tokenizer is read and the chat template test-rendered.
    pub sandbox: std::sync::Arc<crate::sandbox::Sandbox>,
}

fn io_error(context: &str) -> impl Fn(io::Error) -> PullError + '_ {
    move |e| PullError::Io(format!("{context}: {e}"))
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
    /// The repository's files (none for a URL).
    files: Vec<RepoFile>,
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
                files: Vec::new(),
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
            let model = wanted(&chosen.path, &chosen.sha256);
            let encoder = encoder.map(|e| wanted(&e.path, &e.sha256));
            Ok(Plan {
                repo: Some(repo.clone()),
                model,
                encoder,
                files,
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
        files,
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

    let work = partial_dir.join(&name);
    let wanted_tokenizer = ForPull {
        repo: repo.as_deref(),
        revision: &request.revision,
        files: &files,
        model_path: &model.path,
        named: request.tokenizer.as_ref(),
    };
    let fetcher = tokenizer::Fetcher {
        hub,
        limits: &request.limits,
        work: &work,
        deadline,
        sandbox: &request.sandbox,
    };
    // A tokenizer that breaks the bounds of one fails the pull, which
    // then stores nothing.
    let refuse = |why: String| {
        let _ = std::fs::remove_dir_all(&work);
        PullError::BadContent(why)
    };

    // A tokenizer the pull names is fetched first: it is had, or the pull
    // fails before anything else is downloaded.
    let named = match &request.tokenizer {
        Some(_) => {
            std::fs::create_dir_all(&work).map_err(io_error(&work.display().to_string()))?;
            let got = tokenizer::for_pull(&fetcher, &wanted_tokenizer, progress)
                .await
                .map_err(|e| match e {
                    NoTokenizer::Refused(why) => refuse(why),
                    NoTokenizer::Missing(why) => PullError::Transfer(why),
                })?;
            Some(got)
        }
        None => None,
    };

    // Already there (another pull just brought it, or a repeated pull)?
    if let Ok(Some(existing)) = store.get(&name)
        && existing.source.url == model.url
        && expected.as_deref().is_none_or(|e| e == existing.sha256)
        && resolved.size.is_none_or(|s| s == existing.size)
        && store.model_dir(&name).join(&existing.file).is_file()
        && encoder.as_ref().map(|e| file_name(&e.path))
            == existing.vision_encoder.as_ref().map(|v| v.file.as_str())
    {
        let has_tokenizer = existing.tokenizer.as_ref().is_some_and(|t| {
            store.model_dir(&name).join(&t.file).is_file()
                && request
                    .tokenizer
                    .as_ref()
                    .is_none_or(|named| named.repo == t.repository && named.path == t.path)
        });
        if has_tokenizer {
            let mut existing = existing;
            // Pulled before chat templates were: only the template is read.
            if let Some(t) = existing.tokenizer.as_mut()
                && t.chat_template.is_none()
                && t.chat_template_missing.is_none()
            {
                progress(Progress::Writing);
                super::template::record(hub, &request.sandbox, t).await;
                store
                    .write_manifest(&existing)
                    .map_err(io_error(&store.model_dir(&name).display().to_string()))?;
            }
            progress(Progress::Done { fresh: false });
            return Ok(existing);
        }
        // The model is in place without its tokenizer: only that is fetched.
        std::fs::create_dir_all(&work).map_err(io_error(&work.display().to_string()))?;
        let found = match named {
            Some(got) => Ok(got),
            None => tokenizer::for_pull(&fetcher, &wanted_tokenizer, progress).await,
        };
        if let Err(NoTokenizer::Refused(why)) = found {
            return Err(refuse(why));
        }
        progress(Progress::Writing);
        let manifest = install_tokenizer(store, existing, found.map_err(|e| e.why().to_owned()))?;
        let _ = std::fs::remove_dir_all(&work);
        progress(Progress::Done { fresh: false });
        return Ok(manifest);
    }

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
    let found = match named {
        Some(got) => Ok(got),
        None => tokenizer::for_pull(&fetcher, &wanted_tokenizer, progress).await,
    };
    progress(Progress::Writing);
    let encoder_part = encoder.as_ref().map(|(e, _)| e.path.clone());
    let (tokenizer_part, tokenizer, tokenizer_missing) = match found {
        Ok(Got { part, stored }) => (Some(part), Some(stored), None),
        Err(NoTokenizer::Missing(why)) => (None, None, Some(why)),
        Err(NoTokenizer::Refused(why)) => return Err(refuse(why)),
    };
    let manifest = install(
        store,
        Parts {
            model: &part.path,
            encoder: encoder_part.as_deref(),
            tokenizer: tokenizer_part.as_deref(),
        },
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
            settings: crate::model::ModelSettings::default(),
            vision_encoder: encoder.map(|(e, verified)| StoredFile {
                file: e.name,
                size: e.size,
                sha256: e.sha256,
                sha256_verified: verified,
            }),
            tokenizer,
            tokenizer_missing,
        },
    )?;
    let _ = std::fs::remove_dir_all(&work);
    progress(Progress::Done { fresh: true });
    Ok(manifest)
}

/// The finished files of a pull, waiting in its work folder.
struct Parts<'a> {
    model: &'a Path,
    encoder: Option<&'a Path>,
    tokenizer: Option<&'a Path>,
}

/// Moves the finished files into the model's folder (the model, then its
/// vision encoder and tokenizer) and writes the manifest last; files of an
/// older pull go once the new ones are in (only those a valid manifest
/// names: one that is refused names nothing to remove).
fn install(store: &Store, parts: Parts<'_>, manifest: Manifest) -> Result<Manifest, PullError> {
    manifest.check().map_err(PullError::BadSource)?;
    let dir = store.model_dir(&manifest.name);
    std::fs::create_dir_all(&dir).map_err(io_error(&dir.display().to_string()))?;
    let old = store.get(&manifest.name).ok().flatten();
    let target: PathBuf = dir.join(&manifest.file);
    std::fs::rename(parts.model, &target).map_err(io_error(&target.display().to_string()))?;
    if let (Some(encoder), Some(stored)) = (parts.encoder, &manifest.vision_encoder) {
        let target = dir.join(&stored.file);
        std::fs::rename(encoder, &target).map_err(io_error(&target.display().to_string()))?;
    }
    if let (Some(tokenizer), Some(stored)) = (parts.tokenizer, &manifest.tokenizer) {
        let target = dir.join(&stored.file);
        std::fs::rename(tokenizer, &target).map_err(io_error(&target.display().to_string()))?;
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

/// Records what a later pull found of a stored model's tokenizer: moves it
/// into the model's folder and writes the manifest again (with why there
/// is none, when there is none).
fn install_tokenizer(
    store: &Store,
    mut manifest: Manifest,
    found: Result<Got, String>,
) -> Result<Manifest, PullError> {
    let dir = store.model_dir(&manifest.name);
    match found {
        Ok(Got { part, stored }) => {
            let target = dir.join(&stored.file);
            manifest.tokenizer = Some(stored);
            manifest.tokenizer_missing = None;
            manifest.check().map_err(PullError::BadSource)?;
            std::fs::rename(&part, &target).map_err(io_error(&target.display().to_string()))?;
        }
        Err(why) => {
            manifest.tokenizer = None;
            manifest.tokenizer_missing = Some(why);
        }
    }
    store
        .write_manifest(&manifest)
        .map_err(io_error(&dir.display().to_string()))?;
    Ok(manifest)
}
