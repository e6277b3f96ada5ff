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
use super::download::{Fetched, FileJob, PullLimits, fetch_file, file_name};
use super::error::PullError;
use super::hf::{Hub, RepoFile, Resolved};
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
    let plan = plan(hub, request, &source).await?;
    let base_name = file_name(&plan.model.path).to_owned();
    let name = store_name(request, &plan, &base_name)?;
    let partial_dir = store.partial_dir();
    let _lock = NameLock::take(&partial_dir, &name, progress).await?;
    let deadline = Instant::now() + request.limits.timeout;

    let repo_label = plan.repo.clone().unwrap_or_else(|| plan.model.url.clone());
    let work = partial_dir.join(&name);
    let pulling = Pulling {
        store,
        hub,
        request,
        name: &name,
        work: &work,
        deadline,
        repo_label: &repo_label,
    };
    let (resolved, expected) = pulling.resolve(&plan.model).await?;
    let tokenizers = Tokenizers {
        fetcher: tokenizer::Fetcher {
            hub,
            limits: &request.limits,
            work: &work,
            deadline,
            sandbox: &request.sandbox,
        },
        wanted: ForPull {
            repo: plan.repo.as_deref(),
            revision: &request.revision,
            files: &plan.files,
            model_path: &plan.model.path,
            named: request.tokenizer.as_ref(),
        },
    };
    let named = tokenizers.named(progress).await?;

    // Already there (another pull just brought it, or a repeated pull)?
    if let Some(existing) = pulling.in_place(&plan, expected.as_deref(), &resolved) {
        return pulling
            .complete_in_place(existing, &tokenizers, named, progress)
            .await;
    }
    let model_file = ModelFile {
        base_name,
        resolved,
        expected,
    };
    pulling
        .download(&source, &plan, model_file, &tokenizers, named, progress)
        .await
}

/// The name the model is stored under (given, or made from its file's
/// name), checked with the names of its files.
fn store_name(request: &PullRequest, plan: &Plan, base_name: &str) -> Result<String, PullError> {
    let name = match &request.name {
        Some(name) => name.clone(),
        None => name_for_file(base_name),
    };
    check_name(&name).map_err(PullError::BadName)?;
    for path in std::iter::once(&plan.model)
        .chain(&plan.encoder)
        .map(|w| &w.path)
    {
        check_file_name(file_name(path))
            .map_err(|m| PullError::BadSource(format!("the file name: {m}")))?;
    }
    Ok(name)
}

/// A pull's tokenizer: where it is looked for, and the work folder it is
/// fetched into.
struct Tokenizers<'a> {
    fetcher: tokenizer::Fetcher<'a>,
    wanted: ForPull<'a>,
}

impl Tokenizers<'_> {
    /// A tokenizer the pull names is fetched first: it is had, or the pull
    /// fails before anything else is downloaded.
    async fn named(
        &self,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Option<Got>, PullError> {
        if self.wanted.named.is_none() {
            return Ok(None);
        }
        let work = self.fetcher.work;
        std::fs::create_dir_all(work).map_err(io_error(&work.display().to_string()))?;
        let got = tokenizer::for_pull(&self.fetcher, &self.wanted, progress)
            .await
            .map_err(|e| match e {
                NoTokenizer::Refused(why) => self.refuse(why),
                NoTokenizer::Missing(why) => PullError::Transfer(why),
            })?;
        Ok(Some(got))
    }

    /// The tokenizer fetched first, if any, else the one looked for now.
    async fn find(
        &self,
        named: Option<Got>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Got, NoTokenizer> {
        match named {
            Some(got) => Ok(got),
            None => tokenizer::for_pull(&self.fetcher, &self.wanted, progress).await,
        }
    }

    /// A tokenizer that breaks the bounds of one fails the pull, which
    /// then stores nothing.
    fn refuse(&self, why: String) -> PullError {
        let _ = std::fs::remove_dir_all(self.fetcher.work);
        PullError::BadContent(why)
    }
}

/// What is known of the model file before it is downloaded.
struct ModelFile {
    /// Its name in the model's folder.
    base_name: String,
    /// What its address said of it.
    resolved: Resolved,
    /// The SHA-256 it is checked against, when published.
    expected: Option<String>,
}

/// A pull once its files are chosen, its name taken and its lock held.
struct Pulling<'a> {
    store: &'a Store,
    hub: &'a Hub,
    request: &'a PullRequest,
    name: &'a str,
    /// Its folder under `.partial/`.
    work: &'a Path,
    deadline: Instant,
    /// The repository (or the URL), for messages.
    repo_label: &'a str,
}

impl Pulling<'_> {
    /// What the address of `wanted` says of it, and the SHA-256 it is to
    /// have (the file list's, else the address's).
    async fn resolve(&self, wanted: &Wanted) -> Result<(Resolved, Option<String>), PullError> {
        let resolved = self
            .hub
            .resolve(
                &wanted.url,
                self.repo_label,
                &format!("{}: {}", self.repo_label, wanted.path),
            )
            .await?;
        let expected = wanted
            .listed_sha
            .clone()
            .or_else(|| resolved.sha256.clone());
        Ok((resolved, expected))
    }

    /// Downloads `wanted` into the work folder and checks it.
    async fn fetch(
        &self,
        wanted: &Wanted,
        resolved: &Resolved,
        expected: Option<&str>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Fetched, PullError> {
        let job = FileJob {
            hub: self.hub,
            url: &wanted.url,
            resolved,
            repo: self.repo_label,
            file: &wanted.path,
            expected,
            limits: &self.request.limits,
            deadline: self.deadline,
        };
        fetch_file(&job, self.work, progress).await
    }

    /// The stored model, when it is this very file (and encoder).
    fn in_place(
        &self,
        plan: &Plan,
        expected: Option<&str>,
        resolved: &Resolved,
    ) -> Option<Manifest> {
        let existing = self.store.get(self.name).ok().flatten()?;
        (existing.source.url == plan.model.url
            && expected.is_none_or(|e| e == existing.sha256)
            && resolved.size.is_none_or(|s| s == existing.size)
            && self
                .store
                .model_dir(self.name)
                .join(&existing.file)
                .is_file()
            && plan.encoder.as_ref().map(|e| file_name(&e.path))
                == existing.vision_encoder.as_ref().map(|v| v.file.as_str()))
        .then_some(existing)
    }

    /// A model in place keeps its files; what it lacks of its tokenizer
    /// (or, pulled before chat templates were, of its template) is had now.
    async fn complete_in_place(
        &self,
        existing: Manifest,
        tokenizers: &Tokenizers<'_>,
        named: Option<Got>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Manifest, PullError> {
        let (store, name, request) = (self.store, self.name, self.request);
        let has_tokenizer = existing.tokenizer.as_ref().is_some_and(|t| {
            store.model_dir(name).join(&t.file).is_file()
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
                super::template::record(self.hub, &request.sandbox, t).await;
                store
                    .write_manifest(&existing)
                    .map_err(io_error(&store.model_dir(name).display().to_string()))?;
            }
            progress(Progress::Done { fresh: false });
            return Ok(existing);
        }
        // The model is in place without its tokenizer: only that is fetched.
        let work = self.work;
        std::fs::create_dir_all(work).map_err(io_error(&work.display().to_string()))?;
        let found = tokenizers.find(named, progress).await;
        if let Err(NoTokenizer::Refused(why)) = found {
            return Err(tokenizers.refuse(why));
        }
        progress(Progress::Writing);
        let manifest = install_tokenizer(store, existing, found.map_err(|e| e.why().to_owned()))?;
        let _ = std::fs::remove_dir_all(work);
        progress(Progress::Done { fresh: false });
        Ok(manifest)
    }

    /// Downloads the model file, its encoder and its tokenizer, and
    /// installs them with their manifest.
    async fn download(
        &self,
        source: &Source,
        plan: &Plan,
        model: ModelFile,
        tokenizers: &Tokenizers<'_>,
        named: Option<Got>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Manifest, PullError> {
        let work = self.work;
        std::fs::create_dir_all(work).map_err(io_error(&work.display().to_string()))?;
        let ModelFile {
            base_name,
            resolved,
            expected,
        } = model;
        let part = self
            .fetch(&plan.model, &resolved, expected.as_deref(), progress)
            .await?;
        let encoder = match &plan.encoder {
            None => None,
            Some(wanted) => {
                let (resolved, expected) = self.resolve(wanted).await?;
                let fetched = self
                    .fetch(wanted, &resolved, expected.as_deref(), progress)
                    .await?;
                Some((fetched, expected.is_some()))
            }
        };
        let found = tokenizers.find(named, progress).await;
        progress(Progress::Writing);
        let encoder_part = encoder.as_ref().map(|(e, _)| e.path.clone());
        let (tokenizer_part, tokenizer, tokenizer_missing) = match found {
            Ok(Got { part, stored }) => (Some(part), Some(stored), None),
            Err(NoTokenizer::Missing(why)) => (None, None, Some(why)),
            Err(NoTokenizer::Refused(why)) => return Err(tokenizers.refuse(why)),
        };
        let request = self.request;
        let manifest = install(
            self.store,
            Parts {
                model: &part.path,
                encoder: encoder_part.as_deref(),
                tokenizer: tokenizer_part.as_deref(),
            },
            Manifest {
                name: self.name.to_owned(),
                file: base_name,
                size: part.size,
                sha256: part.sha256.clone(),
                sha256_verified: expected.is_some(),
                pulled_unix: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                source: Origin {
                    spec: request.spec.clone(),
                    repository: plan.repo.clone(),
                    revision: matches!(source, Source::Repo { .. })
                        .then(|| request.revision.clone()),
                    commit: resolved.commit.clone(),
                    file: Some(plan.model.path.clone()),
                    url: plan.model.url.clone(),
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
        let _ = std::fs::remove_dir_all(work);
        progress(Progress::Done { fresh: true });
        Ok(manifest)
    }
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
