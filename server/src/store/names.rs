//! Model names, the names and paths of files that come from a manifest or
//! from the hub, and what a `.rkllm` file's name says about it.
//!
//! Every name or path that reaches the file system is checked here, by one
//! rule: no path separator, no leading `.`, so nothing can leave its folder.

/// Checks a model name: 1 to 100 characters of letters, digits, `.`, `_`
/// and `-`, not starting with `.`; so no path separator and no `..` can
/// reach the file system.
///
/// # Errors
/// What is wrong with it.
pub fn check_name(name: &str) -> Result<(), String> {
    check_part("model name", name)
}

/// Checks the name of a file in a model's folder (from a manifest, or the
/// last part of a path on the hub), by the rule of [`check_name`].
///
/// # Errors
/// What is wrong with it.
pub fn check_file_name(name: &str) -> Result<(), String> {
    check_part("file name", name)
}

/// Checks a file's path in a repository (`sub/dir/model.rkllm`): parts
/// separated by `/`, each a file name by [`check_file_name`]'s rule.
///
/// # Errors
/// What is wrong with it.
pub fn check_repo_path(path: &str) -> Result<(), String> {
    if path.len() > 1000 {
        return Err(format!(
            "file path {:?}… is longer than 1000 characters",
            path.chars().take(40).collect::<String>()
        ));
    }
    path.split('/').try_for_each(|part| {
        check_part("file path part", part).map_err(|m| format!("in file path {path:?}: {m}"))
    })
}

/// The one rule: 1 to 100 characters of letters, digits, `.`, `_` and
/// `-`, not starting with `.`.
fn check_part(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 100 {
        return Err(format!("{what} {name:?} must be 1 to 100 characters long"));
    }
    if name.starts_with('.') {
        return Err(format!("{what} {name:?} must not start with `.`"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "{what} {name:?} may hold only letters, digits, `.`, `_` and `-`, not {bad:?}"
        ));
    }
    Ok(())
}

/// A store name for a file: its stem, lower-cased, with anything but
/// letters, digits, `.`, `_` and `-` replaced by `-`.
pub fn name_for_file(file: &str) -> String {
    let base = file.rsplit('/').next().unwrap_or(file);
    let stem = base
        .strip_suffix(".rkllm")
        .or_else(|| base.strip_suffix(".RKLLM"))
        .unwrap_or(base);
    let mut name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    while name.starts_with('.') {
        name.remove(0);
    }
    name.truncate(100);
    name
}

/// What a `.rkllm` file's name says: the chip it was converted for, its
/// quantisation and the runtime version it was made with, when it says.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FileDetails {
    /// `rk3588` or `rk3576`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// `w8a8`, `w4a16`, `w4a16_g128`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    /// `1.2.1`, `1.1.4`, … (a `v` prefix dropped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_version: Option<String>,
}

/// Reads [`FileDetails`] from a file name such as
/// `Qwen2.5-1.5B-Instruct_w8a8_g128_rk3588_v1.2.1.rkllm`.
pub fn details_of(file: &str) -> FileDetails {
    let lower = file.to_ascii_lowercase();
    let lower = lower.strip_suffix(".rkllm").unwrap_or(&lower);
    let words: Vec<&str> = lower.split(['_', '-', ' ', '/']).collect();
    let platform = ["rk3588", "rk3576", "rk3562"]
        .into_iter()
        .find(|p| lower.contains(p))
        .map(str::to_owned);
    let mut quantization = None;
    for (i, w) in words.iter().enumerate() {
        let is_quant = w.len() >= 4
            && w.starts_with('w')
            && w[1..].contains('a')
            && w[1..].chars().all(|c| c.is_ascii_digit() || c == 'a');
        if is_quant {
            let mut q = (*w).to_owned();
            if let Some(group) = words.get(i + 1)
                && group.len() > 1
                && group.starts_with('g')
                && group[1..].chars().all(|c| c.is_ascii_digit())
            {
                q.push('_');
                q.push_str(group);
            }
            quantization = Some(q);
            break;
        }
    }
    let runtime_version = words.iter().find_map(|w| {
        let v = w.strip_prefix('v').unwrap_or(w);
        let parts: Vec<&str> = v.split('.').collect();
        (parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())))
        .then(|| v.to_owned())
    });
    FileDetails {
        platform,
        quantization,
        runtime_version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for good in ["qwen2.5-1.5b", "a", "Model_1", "x.y-z"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "", "..", "../etc", "a/b", "a\\b", ".hidden", "a b", "é", "x\0y",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&"a".repeat(101)).is_err());
        assert!(check_file_name("../../victim.txt").is_err());
        assert!(check_file_name("vision.rknn").is_ok());
    }

    #[test]
    fn repository_paths_are_checked_part_by_part() {
        for good in ["m.rkllm", "sub/dir/m_rk3588.rkllm"] {
            assert!(check_repo_path(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "../../x.rknn",
            "a/../b.rkllm",
            "a//b.rkllm",
            "/abs.rkllm",
            "a/",
            "a\\..\\b",
            ".hidden/m.rkllm",
        ] {
            assert!(check_repo_path(bad).is_err(), "{bad:?}");
        }
        assert!(check_repo_path(&"a/".repeat(600)).is_err());
    }

    #[test]
    fn file_names_become_store_names() {
        assert_eq!(
            name_for_file("Qwen2.5-1.5B-Instruct_W8A8_RK3588.rkllm"),
            "qwen2.5-1.5b-instruct_w8a8_rk3588"
        );
        assert_eq!(name_for_file("dir/..odd name!.rkllm"), "odd-name-");
    }

    #[test]
    fn file_names_say_platform_quantisation_and_runtime() {
        assert_eq!(
            details_of("Qwen2.5-1.5B-Instruct_w8a8_g128_rk3588_v1.2.1.rkllm"),
            FileDetails {
                platform: Some("rk3588".into()),
                quantization: Some("w8a8_g128".into()),
                runtime_version: Some("1.2.1".into()),
            }
        );
        assert_eq!(
            details_of("model-RK3576-W4A16.rkllm"),
            FileDetails {
                platform: Some("rk3576".into()),
                quantization: Some("w4a16".into()),
                runtime_version: None,
            }
        );
        assert_eq!(details_of("plain.rkllm"), FileDetails::default());
    }
}
