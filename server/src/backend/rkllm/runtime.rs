//! Loading `librkllmrt.so` and choosing its ABI.
//!
//! The library is opened once; its ABI comes from `--runtime-abi`, or with
//! `auto` from the version the file carries. An unknown version, a
//! contradiction between the flag and the file, a missing file or a
//! missing symbol stops the start with a message that names the path, the
//! version found and what to do. The ABI is never guessed.

use std::path::{Path, PathBuf};

use rkllm_sys::version::{Abi, Version, find_version};
use rkllm_sys::{libloading, v1_2, v1_3_0};

/// The declarations of one ABI, bound to the loaded library.
pub(super) enum Api {
    V1_3(v1_3_0::RkllmApi),
    V1_2(v1_2::RkllmApi),
}

/// Calls a function whose signature both ABIs share, on whichever ABI is
/// loaded: `shared_call!(runtime.api, rkllm_abort(handle))`. The caller
/// provides the `unsafe` block and its justification.
macro_rules! shared_call {
    ($api:expr, $name:ident($($arg:expr),* $(,)?)) => {
        match &$api {
            $crate::backend::rkllm::runtime::Api::V1_3(api) => api.$name($($arg),*),
            $crate::backend::rkllm::runtime::Api::V1_2(api) => api.$name($($arg),*),
        }
    };
}
pub(super) use shared_call;

/// A loaded runtime library. Shared (`Arc`) by every handle made from it,
/// so the library stays loaded while any handle exists.
pub struct Runtime {
    pub(super) api: Api,
    path: PathBuf,
    version: Option<Version>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("abi", &self.abi())
            .finish()
    }
}

/// Why the runtime could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(String);

const SUPPORTED: &str = "1.3.0 and 1.2.1 to 1.2.3";

impl Runtime {
    /// Opens the library at `path` (a bare file name is looked up by the
    /// dynamic loader) and binds the ABI `choice` asks for (`None`: the
    /// one its version says).
    ///
    /// # Errors
    /// A missing or unloadable library, an unknown version, a flag that
    /// contradicts the file, a missing symbol.
    pub fn load(path: &Path, choice: Option<Abi>) -> Result<Self, LoadError> {
        let bare_name = path.components().count() == 1 && !path.to_string_lossy().contains('/');
        if !bare_name && !path.exists() {
            return Err(LoadError(format!(
                "the RKLLM runtime {} does not exist; install librkllmrt.so ({SUPPORTED}) or pass --runtime PATH",
                path.display()
            )));
        }
        // SAFETY: loading runs the library's initialisers; librkllmrt.so (or
        // the test double) is a plain C/C++ library whose initialisers only
        // set up its own state.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| {
            LoadError(format!(
                "cannot load the RKLLM runtime {}: {e}; install librkllmrt.so ({SUPPORTED}) or pass --runtime PATH",
                path.display()
            ))
        })?;
        let file = if bare_name {
            loaded_path(path).unwrap_or_else(|| path.to_owned())
        } else {
            path.to_owned()
        };
        // SAFETY: only the symbol's address is looked up; it is not called.
        let has_init = unsafe { library.get::<unsafe extern "C" fn()>(b"rkllm_init\0") }.is_ok();
        if !has_init {
            return Err(LoadError(format!(
                "{} is not the RKLLM runtime: it has no rkllm_init function; install \
                 librkllmrt.so ({SUPPORTED}) from Rockchip's rknn-llm release (see \
                 docs/board-setup.md) or pass --runtime PATH",
                file.display()
            )));
        }
        let version = std::fs::read(&file)
            .ok()
            .and_then(|bytes| find_version(&bytes));
        let abi = choose_abi(&file, version, choice)?;
        let missing = |e: libloading::Error| {
            LoadError(format!(
                "the RKLLM runtime {} (version {}) lacks a function of the {} ABI: {e}; \
                 is it a librkllmrt.so of version {SUPPORTED}?",
                file.display(),
                version.map_or_else(|| "unknown".to_owned(), |v| v.to_string()),
                abi.versions()
            ))
        };
        // SAFETY: the ABI was chosen from the version the file carries (or
        // the operator's explicit choice, checked against it), so the
        // declared signatures are the library's.
        let api = unsafe {
            match abi {
                Abi::V1_3 => Api::V1_3(v1_3_0::RkllmApi::from_library(library).map_err(missing)?),
                Abi::V1_2 => Api::V1_2(v1_2::RkllmApi::from_library(library).map_err(missing)?),
            }
        };
        tracing::info!(
            runtime = %file.display(),
            version = %version.map_or_else(|| "unknown".to_owned(), |v| v.to_string()),
            abi = abi.versions(),
            "RKLLM runtime loaded"
        );
        Ok(Self {
            api,
            path: file,
            version,
        })
    }

    /// The ABI in use.
    pub fn abi(&self) -> Abi {
        match self.api {
            Api::V1_3(_) => Abi::V1_3,
            Api::V1_2(_) => Abi::V1_2,
        }
    }

    /// The library file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version the file carries, when found.
    pub fn version(&self) -> Option<Version> {
        self.version
    }
}

fn choose_abi(
    file: &Path,
    version: Option<Version>,
    wanted: Option<Abi>,
) -> Result<Abi, LoadError> {
    let detected = version.map(|v| (v, Abi::for_version(v)));
    match (detected, wanted) {
        (Some((v, None)), _) => Err(LoadError(format!(
            "the RKLLM runtime {} carries version {v}, which this build does not support \
             (supported: {SUPPORTED}); refusing to guess its ABI: install a supported runtime",
            file.display()
        ))),
        (Some((_, Some(abi))), None) => Ok(abi),
        (Some((v, Some(abi))), Some(wanted)) if abi == wanted => {
            tracing::debug!(version = %v, "runtime version matches --runtime-abi");
            Ok(abi)
        }
        (Some((v, Some(abi))), Some(wanted)) => Err(LoadError(format!(
            "--runtime-abi asks for the {} ABI, but {} carries version {v} (the {} ABI); \
             a wrong ABI corrupts memory: pass --runtime-abi auto or the matching version",
            wanted.versions(),
            file.display(),
            abi.versions()
        ))),
        (None, Some(wanted)) => {
            tracing::warn!(
                runtime = %file.display(),
                abi = wanted.versions(),
                "no version found in the runtime library; trusting --runtime-abi"
            );
            Ok(wanted)
        }
        (None, None) => Err(LoadError(format!(
            "cannot find the version of the RKLLM runtime {}; if you know it, pass \
             --runtime-abi 1.3 (for 1.3.0) or --runtime-abi 1.2 (for 1.2.1 to 1.2.3)",
            file.display()
        ))),
    }
}

/// Where the dynamic loader found a library given by bare name, read from
/// this process's memory map.
fn loaded_path(name: &Path) -> Option<PathBuf> {
    let name = name.to_str()?;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|file| Path::new(file).file_name().and_then(|f| f.to_str()) == Some(name))
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    const V130: Version = Version {
        major: 1,
        minor: 3,
        patch: 0,
    };
    const V123: Version = Version {
        major: 1,
        minor: 2,
        patch: 3,
    };
    const V999: Version = Version {
        major: 9,
        minor: 9,
        patch: 9,
    };

    fn pick(version: Option<Version>, choice: Option<Abi>) -> Result<Abi, String> {
        choose_abi(Path::new("/lib/librkllmrt.so"), version, choice).map_err(|e| e.0)
    }

    #[test]
    fn auto_follows_the_version_in_the_file() {
        assert_eq!(pick(Some(V130), None), Ok(Abi::V1_3));
        assert_eq!(pick(Some(V123), None), Ok(Abi::V1_2));
    }

    #[test]
    fn a_flag_that_contradicts_the_file_is_refused() {
        let err = pick(Some(V130), Some(Abi::V1_2)).unwrap_err();
        assert!(
            err.contains("1.3.0") && err.contains("--runtime-abi"),
            "{err}"
        );
        assert_eq!(pick(Some(V123), Some(Abi::V1_2)), Ok(Abi::V1_2));
    }

    #[test]
    fn unknown_versions_are_refused_even_with_a_flag() {
        for choice in [None, Some(Abi::V1_3)] {
            let err = pick(Some(V999), choice).unwrap_err();
            assert!(
                err.contains("9.9.9") && err.contains("/lib/librkllmrt.so"),
                "{err}"
            );
        }
    }

    #[test]
    fn without_a_version_only_an_explicit_flag_is_trusted() {
        assert!(pick(None, None).unwrap_err().contains("--runtime-abi"));
        assert_eq!(pick(None, Some(Abi::V1_3)), Ok(Abi::V1_3));
    }
}
