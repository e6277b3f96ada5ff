//! A model's tokenizer (its Hugging Face `tokenizer.json`, which structured
//! output needs) and the store: where a `tokenizer` setting points (a file,
//! or a repository on the hub), which repository a pull takes it from (the
//! model's own, else a base model its model card names), and fetching it
//! with the same client, checks and limits as model files (and at most
//! [`MAX_TOKENIZER_BYTES`]). A tokenizer that cannot be had, or is of a
//! kind the constraint engine cannot read, never fails a pull or a start:
//! it is recorded with why. One that breaks the bounds of a tokenizer (a
//! damaged or hostile file: ids far beyond its vocabulary, absurd counts)
//! fails the pull, which then stores nothing. Every fetched tokenizer is
//! read in the sandbox (`crate::sandbox`), where a failure cannot take the
//! server down.
//!
//! Every repository and path used here, whether from a setting, a file list
//! or a model card, is checked as a pull's source is, and nothing is
//! fetched but from the configured endpoint.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::download::{FileJob, PullLimits, fetch_file};
use super::error::PullError;
use super::hf::{Hub, RepoFile};
use super::lock::NameLock;
use super::progress::Progress;
use super::source::Source;
use super::{Store, StoredTokenizer};
use crate::model::tokenizer::MAX_TOKENIZER_BYTES;
use crate::sandbox::{Reply, Sandbox};

/// The tokenizer's name, in a repository and in a model's folder.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// The revision a base model's or a configured tokenizer's repository is
/// read at.
const OTHER_REVISION: &str = "main";

/// Largest model card read for its base models.
const MAX_CARD_BYTES: usize = 1 << 20;

/// Base models a pull looks at, at most.
const MAX_BASE_MODELS: usize = 3;

/// Where a `tokenizer` setting points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerSetting {
    /// A `tokenizer.json` file.
    File(PathBuf),
    /// One in a repository on the hub, fetched into the store.
    Hub(HubTokenizer),
}

/// A `tokenizer.json` in a repository on the hub.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HubTokenizer {
    /// `owner/repo`.
    pub repo: String,
    /// Its path there (default `tokenizer.json`).
    pub path: String,
}

impl HubTokenizer {
    /// As a setting names it: `owner/repo`, or `owner/repo:path`.
    pub fn label(&self) -> String {
        if self.path == TOKENIZER_FILE {
            self.repo.clone()
        } else {
            format!("{}:{}", self.repo, self.path)
        }
    }

    /// Where a configured one is kept in the store `models_dir`:
    /// `.tokenizers/OWNER/REPO/PATH`.
    pub fn cached_path(&self, models_dir: &Path) -> PathBuf {
        let mut path = models_dir.join(".tokenizers");
        for part in self.repo.split('/').chain(self.path.split('/')) {
            path.push(part);
        }
        path
    }
}

impl TokenizerSetting {
    /// Reads a `tokenizer` setting. A value that starts with `/` or `.`, or
    /// ends in `.json` without a `:`, is a file (a relative one from the
    /// working folder); anything else is a Hugging Face repository,
    /// `owner/repo` (its `tokenizer.json`) or `owner/repo:path/in/repo.json`.
    ///
    /// # Errors
    /// A value that is neither, saying what is expected.
    pub fn parse(value: &str) -> Result<Self, String> {
        if value.trim().is_empty() {
            return Err("is empty: name a tokenizer.json file or a Hugging Face owner/repo".into());
        }
        let is_json = value.to_ascii_lowercase().ends_with(".json");
        if value.starts_with('/') || value.starts_with('.') || (is_json && !value.contains(':')) {
            return Ok(Self::File(PathBuf::from(value)));
        }
        match Source::parse(value) {
            Ok(Source::Repo { repo, file }) => Ok(Self::Hub(HubTokenizer {
                repo,
                path: file.unwrap_or_else(|| TOKENIZER_FILE.to_owned()),
            })),
            _ => Err(format!(
                "{value:?} is neither a tokenizer.json file (a path starting with `/` or `.`, or \
                 ending in .json) nor a Hugging Face repository (owner/repo, or \
                 owner/repo:path/to/tokenizer.json)"
            )),
        }
    }
}

/// The base models a model card (README.md) names in its front matter
/// (`base_model:`, one or a list, flow or block style), each a checked
/// `owner/repo`, in order, at most [`MAX_BASE_MODELS`]. Anything else in
/// the card is not read.
pub(super) fn base_models(card: &str) -> Vec<String> {
    let mut lines = card.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Vec::new();
    }
    let front: Vec<&str> = lines
        .take_while(|l| !matches!(l.trim_end(), "---" | "..."))
        .collect();
    let mut named = Vec::new();
    if let Some(at) = front.iter().position(|l| l.starts_with("base_model:")) {
        let value = without_comment(&front[at]["base_model:".len()..]).trim();
        if let Some(list) = value.strip_prefix('[') {
            named.extend(list.trim_end_matches(']').split(',').map(unquote));
        } else if !value.is_empty() {
            named.push(unquote(value));
        } else {
            for line in &front[at + 1..] {
                let item = without_comment(line).trim();
                if item.is_empty() {
                    continue;
                }
                match item.strip_prefix('-') {
                    Some(rest) => named.push(unquote(rest)),
                    None => break,
                }
            }
        }
    }
    let mut repos: Vec<String> = Vec::new();
    for name in named {
        if let Ok(Source::Repo { repo, file: None }) = Source::parse(&name)
            && !repos.contains(&repo)
        {
            repos.push(repo);
        }
    }
    repos.truncate(MAX_BASE_MODELS);
    repos
}

fn without_comment(line: &str) -> &str {
    match line.find(" #") {
        Some(at) => &line[..at],
        None if line.trim_start().starts_with('#') => "",
        None => line,
    }
}

fn unquote(value: &str) -> String {
    let value = value.trim();
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(value)
        .to_owned()
}

/// What a tokenizer fetch works with.
pub(super) struct Fetcher<'a> {
    /// The endpoint's client.
    pub hub: &'a Hub,
    /// The pull's limits (the file size capped at [`MAX_TOKENIZER_BYTES`]).
    pub limits: &'a PullLimits,
    /// The work folder: the tokenizer downloads into a folder of its own
    /// in it.
    pub work: &'a Path,
    /// When the whole pull must be done.
    pub deadline: Instant,
    /// Where the tokenizer is read.
    pub sandbox: &'a Sandbox,
}

/// Why a pull brings no tokenizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoTokenizer {
    /// None could be had, or it is of a kind structured output cannot
    /// use: recorded in the manifest, the pull goes on.
    Missing(String),
    /// The file breaks the bounds of a tokenizer: the pull is refused.
    Refused(String),
}

impl NoTokenizer {
    /// Its words.
    pub fn why(&self) -> &str {
        match self {
            Self::Missing(why) | Self::Refused(why) => why,
        }
    }
}

/// A tokenizer fetched and checked, waiting in the work folder.
#[derive(Debug)]
pub(super) struct Got {
    /// Where it waits.
    pub part: PathBuf,
    /// What the manifest records of it.
    pub stored: StoredTokenizer,
}

/// Fetches `path` of `repo` at `revision` and checks that the constraint
/// engine reads it.
async fn fetch(
    fetcher: &Fetcher<'_>,
    (repo, revision, path): (&str, &str, &str),
    listed_sha: Option<String>,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Got, NoTokenizer> {
    let hub = fetcher.hub;
    let url = hub.resolve_url(repo, revision, path);
    let resolved = hub
        .resolve(&url, repo, &format!("{repo}: {path}"))
        .await
        .map_err(|e| NoTokenizer::Missing(e.to_string()))?;
    let expected = listed_sha.or_else(|| resolved.sha256.clone());
    let limits = PullLimits {
        max_file_bytes: fetcher.limits.max_file_bytes.min(MAX_TOKENIZER_BYTES),
        ..*fetcher.limits
    };
    // A folder of its own: a refused download removes its folder, never
    // the model's finished file beside it.
    let work = fetcher.work.join("tokenizer");
    std::fs::create_dir_all(&work)
        .map_err(|e| NoTokenizer::Missing(format!("{}: {e}", work.display())))?;
    let job = FileJob {
        hub,
        url: &url,
        resolved: &resolved,
        repo,
        file: path,
        expected: expected.as_deref(),
        limits: &limits,
        deadline: fetcher.deadline,
    };
    let fetched = fetch_file(&job, &work, progress).await.map_err(|e| {
        let _ = std::fs::remove_dir_all(&work);
        match e {
            PullError::TooLarge { .. } if limits.max_file_bytes == MAX_TOKENIZER_BYTES => {
                NoTokenizer::Refused(format!(
                    "{repo}: {path} is larger than {MAX_TOKENIZER_BYTES} bytes, more than any \
                     tokenizer.json"
                ))
            }
            other => NoTokenizer::Missing(format!("{repo}: {other}")),
        }
    })?;
    let tokens = match fetcher.sandbox.check_tokenizer(fetched.path.clone()).await {
        Ok(Reply::Tokens(tokens)) => tokens,
        outcome => {
            let _ = std::fs::remove_dir_all(&work);
            return Err(match outcome {
                Ok(Reply::Failed(why)) => NoTokenizer::Missing(format!(
                    "{repo}: {path} is not a tokenizer structured output can use: {why}"
                )),
                Ok(Reply::OutOfBounds(why)) => NoTokenizer::Refused(format!(
                    "{repo}: {path} is not a tokenizer this server takes: {why}"
                )),
                Ok(other) => NoTokenizer::Missing(format!("{repo}: {path}: {other:?}")),
                Err(e) => NoTokenizer::Refused(format!(
                    "{repo}: {path} is not a tokenizer this server takes: reading it, {e}"
                )),
            });
        }
    };
    Ok(Got {
        part: fetched.path,
        stored: StoredTokenizer {
            file: TOKENIZER_FILE.to_owned(),
            size: fetched.size,
            sha256: fetched.sha256,
            sha256_verified: expected.is_some(),
            repository: repo.to_owned(),
            path: path.to_owned(),
            revision: revision.to_owned(),
            commit: resolved.commit,
            tokens: Some(tokens),
            chat_template: None,
            chat_template_missing: None,
        },
    })
}

/// Where a pull looks for the model's tokenizer.
pub(super) struct ForPull<'a> {
    /// The model's repository (none when pulled by URL).
    pub repo: Option<&'a str>,
    /// Its revision.
    pub revision: &'a str,
    /// Its file list.
    pub files: &'a [RepoFile],
    /// The model file's path there.
    pub model_path: &'a str,
    /// The tokenizer the pull names (`--tokenizer`), which is then the one
    /// taken.
    pub named: Option<&'a HubTokenizer>,
}

/// The tokenizer of a pulled model: the one named, else the
/// `tokenizer.json` beside the model file (or at the top) of its
/// repository, else the first of the base models its card names that has
/// one; with the chat template beside it (see [`super::template`]).
///
/// # Errors
/// Why there is none, in words for the manifest, or why the pull is
/// refused.
pub(super) async fn for_pull(
    fetcher: &Fetcher<'_>,
    wanted: &ForPull<'_>,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Got, NoTokenizer> {
    let mut got = find(fetcher, wanted, progress).await?;
    super::template::record(fetcher.hub, fetcher.sandbox, &mut got.stored).await;
    Ok(got)
}

/// The tokenizer of a pulled model, as [`for_pull`] finds it.
async fn find(
    fetcher: &Fetcher<'_>,
    wanted: &ForPull<'_>,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Got, NoTokenizer> {
    use NoTokenizer::Missing;
    if let Some(named) = wanted.named {
        return fetch(
            fetcher,
            (&named.repo, OTHER_REVISION, &named.path),
            None,
            progress,
        )
        .await
        .map_err(|e| match e {
            Missing(why) => Missing(format!(
                "the tokenizer named, {}, could not be had: {why}",
                named.label()
            )),
            refused => refused,
        });
    }
    let Some(repo) = wanted.repo else {
        return Err(Missing(
            "it was pulled by URL, and no repository names its tokenizer".into(),
        ));
    };
    let beside = wanted
        .model_path
        .rsplit_once('/')
        .map(|(dir, _)| format!("{dir}/{TOKENIZER_FILE}"));
    let own = beside
        .iter()
        .map(String::as_str)
        .chain([TOKENIZER_FILE])
        .find_map(|path| wanted.files.iter().find(|f| f.path == path));
    if let Some(own) = own {
        return fetch(
            fetcher,
            (repo, wanted.revision, &own.path),
            own.sha256.clone(),
            progress,
        )
        .await;
    }
    if !wanted.files.iter().any(|f| f.path == "README.md") {
        return Err(Missing(format!(
            "{repo} has no tokenizer.json and no model card (README.md) naming a base model"
        )));
    }
    let card = fetcher
        .hub
        .read_text(repo, wanted.revision, "README.md", MAX_CARD_BYTES)
        .await
        .map_err(|e| {
            Missing(format!(
                "{repo} has no tokenizer.json, and its model card: {e}"
            ))
        })?;
    let bases = base_models(&card);
    if bases.is_empty() {
        return Err(Missing(format!(
            "{repo} has no tokenizer.json and its model card names no base model"
        )));
    }
    let mut why = Vec::new();
    for base in &bases {
        let found = match fetcher.hub.list_files(base, OTHER_REVISION).await {
            Ok(files) => files.into_iter().find(|f| f.path == TOKENIZER_FILE),
            Err(e) => {
                why.push(format!("{base}: {e}"));
                continue;
            }
        };
        let Some(found) = found else {
            why.push(format!("{base} has no tokenizer.json"));
            continue;
        };
        match fetch(
            fetcher,
            (base, OTHER_REVISION, &found.path),
            found.sha256,
            progress,
        )
        .await
        {
            Ok(got) => return Ok(got),
            Err(Missing(e)) => why.push(e),
            Err(refused) => return Err(refused),
        }
    }
    Err(Missing(format!(
        "{repo} has no tokenizer.json, nor has the base model its card names ({})",
        why.join("; ")
    )))
}

/// Fetches a configured `tokenizer = "owner/repo"` into the store (see
/// [`HubTokenizer::cached_path`]) unless it is there already; returns its
/// path. Two servers sharing the store fetch it once.
///
/// # Errors
/// Why it could not be had, or why it is refused (a file that breaks the
/// bounds of a tokenizer: not kept).
pub async fn fetch_configured(
    store: &Store,
    hub: &Hub,
    limits: &PullLimits,
    sandbox: &Sandbox,
    wanted: &HubTokenizer,
) -> Result<PathBuf, NoTokenizer> {
    let missing = |why: String| NoTokenizer::Missing(why);
    let target = wanted.cached_path(store.dir());
    if target.is_file() {
        return Ok(target);
    }
    let digest = Sha256::digest(wanted.label().as_bytes());
    let key: String = format!(
        "tokenizer-{}",
        digest[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let partial = store.partial_dir();
    let mut quiet = |_: Progress| {};
    let _lock = NameLock::take(&partial, &key, &mut quiet)
        .await
        .map_err(|e| missing(e.to_string()))?;
    if target.is_file() {
        // Another server sharing the store fetched it meanwhile.
        return Ok(target);
    }
    let work = partial.join(&key);
    let fetcher = Fetcher {
        hub,
        limits,
        work: &work,
        deadline: Instant::now() + limits.timeout,
        sandbox,
    };
    let got = fetch(
        &fetcher,
        (&wanted.repo, OTHER_REVISION, &wanted.path),
        None,
        &mut quiet,
    )
    .await?;
    let folder = target.parent().unwrap_or(store.dir());
    std::fs::create_dir_all(folder).map_err(|e| missing(format!("{}: {e}", folder.display())))?;
    std::fs::rename(&got.part, &target)
        .map_err(|e| missing(format!("{}: {e}", target.display())))?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_a_file_or_a_repository() {
        let file = |p: &str| TokenizerSetting::File(PathBuf::from(p));
        let hub = |repo: &str, path: &str| {
            TokenizerSetting::Hub(HubTokenizer {
                repo: repo.into(),
                path: path.into(),
            })
        };
        for (value, expected) in [
            ("/opt/qwen/tokenizer.json", file("/opt/qwen/tokenizer.json")),
            ("./tokenizer.json", file("./tokenizer.json")),
            ("../t/qwen", file("../t/qwen")),
            (
                "models/qwen/tokenizer.json",
                file("models/qwen/tokenizer.json"),
            ),
            ("tokenizer.JSON", file("tokenizer.JSON")),
            ("/odd:name.json", file("/odd:name.json")),
            (
                "Qwen/Qwen2.5-1.5B-Instruct",
                hub("Qwen/Qwen2.5-1.5B-Instruct", "tokenizer.json"),
            ),
            ("hf.co/acme/base", hub("acme/base", "tokenizer.json")),
            (
                "acme/base:sub/tokenizer.json",
                hub("acme/base", "sub/tokenizer.json"),
            ),
        ] {
            assert_eq!(TokenizerSetting::parse(value).unwrap(), expected, "{value}");
        }
        for bad in [
            "",
            "  ",
            "qwen",
            "a/b/c",
            "https://example.org/tokenizer.json",
            "acme/base:../x.json",
            "acme/ba se",
        ] {
            let err = TokenizerSetting::parse(bad).unwrap_err();
            assert!(
                err.contains("owner/repo") && err.contains("tokenizer.json"),
                "{bad:?}: {err}"
            );
        }
        let TokenizerSetting::Hub(nested) = hub("acme/base", "sub/tokenizer.json") else {
            unreachable!()
        };
        assert_eq!(nested.label(), "acme/base:sub/tokenizer.json");
        assert_eq!(
            nested.cached_path(Path::new("/store")),
            Path::new("/store/.tokenizers/acme/base/sub/tokenizer.json")
        );
    }

    #[test]
    fn base_models_are_read_from_a_model_cards_front_matter() {
        let card = |front: &str| format!("---\n{front}\n---\n# A model\nbase_model: not/this\n");
        assert_eq!(
            base_models(&card(
                "license: mit\nbase_model: Qwen/Qwen2.5-1.5B-Instruct"
            )),
            ["Qwen/Qwen2.5-1.5B-Instruct"]
        );
        assert_eq!(
            base_models(&card("base_model: \"acme/base\"  # the original")),
            ["acme/base"]
        );
        assert_eq!(
            base_models(&card("base_model: ['a/one', \"b/two\"]\nlicense: mit")),
            ["a/one", "b/two"]
        );
        assert_eq!(
            base_models(&card(
                "base_model:\n- a/one\n  # a comment\n  - 'b/two'\nbase_model_relation: quantized\n\
                 tags:\n- c/three"
            )),
            ["a/one", "b/two"]
        );
        // Names that are not repositories, repeated ones and more than
        // three are left out.
        assert_eq!(
            base_models(&card(
                "base_model: [../etc, https://evil.example/x, a/one, a/one, b/two, c/three, d/four]"
            )),
            ["a/one", "b/two", "c/three"]
        );
        for none in [
            "# no front matter\nbase_model: a/one\n".to_owned(),
            card("base_model_relation: quantized"),
            card("license: mit"),
            card("  base_model: a/one"),
        ] {
            assert!(base_models(&none).is_empty(), "{none:?}");
        }
    }
}
