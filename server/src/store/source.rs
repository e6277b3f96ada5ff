//! What a pull names: a repository on the Hugging Face endpoint (with a
//! file of it, or not) or a file's URL, checked before anything is asked
//! of the hub.

use super::error::PullError;
use super::names::check_repo_path;

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
