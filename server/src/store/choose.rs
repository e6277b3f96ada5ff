//! Which of a repository's files a pull takes: the model file for this
//! board and, for a vision model, its encoder. A listing is the hub's word:
//! every candidate's path is checked (see [`check_repo_path`]) before it is
//! chosen, and a listing that names one the store would not take is refused.

use super::error::PullError;
use super::hf::RepoFile;
use super::names::{check_repo_path, details_of};

/// What is known of this board, to choose among files.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Board<'a> {
    /// `rk3588`, `rk3576`, …
    pub platform: Option<&'a str>,
    /// The runtime's version.
    pub runtime_version: Option<&'a str>,
}

/// The files of `repo` whose names end in `extension` (any case), each
/// with a path the store takes.
///
/// # Errors
/// [`PullError::BadListing`] naming the first that is not.
fn candidates<'a>(
    repo: &str,
    files: &'a [RepoFile],
    extension: &str,
) -> Result<Vec<&'a RepoFile>, PullError> {
    let found: Vec<&RepoFile> = files
        .iter()
        .filter(|f| f.path.to_ascii_lowercase().ends_with(extension))
        .collect();
    for file in &found {
        check_repo_path(&file.path).map_err(|m| {
            PullError::BadListing(format!(
                "{repo} lists {:?}, a path the store does not take ({m}); the repository was \
                 refused",
                file.path
            ))
        })?;
    }
    Ok(found)
}

/// Chooses the model file among a repository's files: the one named, the
/// only `.rkllm`, or the only one for this platform (and runtime version).
///
/// # Errors
/// None there, several that fit, or a listing with a bad path.
pub(super) fn choose_file<'a>(
    repo: &str,
    files: &'a [RepoFile],
    wanted: Option<&str>,
    board: Board<'_>,
) -> Result<&'a RepoFile, PullError> {
    if let Some(wanted) = wanted {
        let found = files
            .iter()
            .find(|f| f.path == wanted)
            .ok_or_else(|| PullError::NotFound(format!("{repo} has no file {wanted}")))?;
        check_repo_path(&found.path).map_err(PullError::BadSource)?;
        return Ok(found);
    }
    let models = candidates(repo, files, ".rkllm")?;
    if models.is_empty() {
        return Err(PullError::NoModelFile(repo.to_owned()));
    }
    if let [only] = models.as_slice() {
        return Ok(only);
    }
    let mut fitting = models.clone();
    if let Some(platform) = board.platform {
        let on_platform: Vec<&RepoFile> = fitting
            .iter()
            .copied()
            .filter(|f| details_of(&f.path).platform.as_deref() == Some(platform))
            .collect();
        if !on_platform.is_empty() {
            fitting = on_platform;
        }
    }
    if fitting.len() > 1
        && let Some(version) = board.runtime_version
    {
        let for_runtime: Vec<&RepoFile> = fitting
            .iter()
            .copied()
            .filter(|f| details_of(&f.path).runtime_version.as_deref() == Some(version))
            .collect();
        if !for_runtime.is_empty() {
            fitting = for_runtime;
        }
    }
    if let [only] = fitting.as_slice() {
        return Ok(only);
    }
    let hint = match (board.platform, board.runtime_version) {
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
///
/// # Errors
/// A listing with a bad path.
pub(super) fn choose_encoder<'a>(
    repo: &str,
    files: &'a [RepoFile],
    model: &str,
    board: Board<'_>,
) -> Result<Option<&'a RepoFile>, PullError> {
    let encoders = candidates(repo, files, ".rknn")?;
    let on_platform: Vec<&RepoFile> = encoders
        .iter()
        .copied()
        .filter(|f| {
            board.platform.is_some() && details_of(&f.path).platform.as_deref() == board.platform
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
    Ok(fitting
        .into_iter()
        .max_by(|a, b| shared(a).cmp(&shared(b)).then_with(|| b.path.cmp(&a.path))))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn board<'a>(platform: Option<&'a str>, runtime: Option<&'a str>) -> Board<'a> {
        Board {
            platform,
            runtime_version: runtime,
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
            choose_encoder("o/r", &all, "qwen2-vl-2b_w8a8_rk3588.rkllm", board(p, None))
                .unwrap()
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
        let none = choose_encoder("o/r", &text_only, "m.rkllm", board(Some("rk3588"), None));
        assert!(none.unwrap().is_none());
    }

    #[test]
    fn a_listing_naming_a_path_outside_the_repository_is_refused() {
        let hostile = files(&["m_rk3588.rkllm", "../../../x.rknn", ".gitattributes"]);
        let err = choose_encoder("o/r", &hostile, "m_rk3588.rkllm", board(None, None))
            .unwrap_err()
            .to_string();
        assert!(err.contains("../../../x.rknn"), "{err}");
        let hostile = files(&["a/../../m.rkllm", "b.rkllm"]);
        assert!(matches!(
            choose_file("o/r", &hostile, None, board(None, None)),
            Err(PullError::BadListing(_))
        ));
        // Files the store never takes may have any name.
        let fine = files(&["m.rkllm", ".gitattributes"]);
        assert!(choose_file("o/r", &fine, None, board(None, None)).is_ok());
    }

    #[test]
    fn the_file_for_this_board_is_chosen() {
        let all = files(&[
            "README.md",
            "m_w8a8_rk3588_v1.1.4.rkllm",
            "m_w8a8_rk3588_v1.2.1.rkllm",
            "m_w8a8_rk3576_v1.2.1.rkllm",
        ]);
        let pick = |p, v| choose_file("o/r", &all, None, board(p, v)).map(|f| f.path.clone());
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
            board(None, None),
        );
        assert_eq!(named.unwrap().path, "m_w8a8_rk3588_v1.1.4.rkllm");
        assert!(choose_file("o/r", &all, Some("nope.rkllm"), board(None, None)).is_err());
        assert!(matches!(
            choose_file("o/r", &files(&["README.md"]), None, board(None, None)),
            Err(PullError::NoModelFile(_))
        ));
        let one = files(&["README.md", "only.rkllm"]);
        assert_eq!(
            choose_file("o/r", &one, None, board(Some("rk3576"), None))
                .unwrap()
                .path,
            "only.rkllm"
        );
    }
}
