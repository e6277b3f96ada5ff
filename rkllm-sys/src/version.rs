//! Which ABI a runtime library speaks, read from the version it carries.
//!
//! The RKLLM API has no version call, and symbol probing cannot tell 1.2.x
//! from 1.3.0 (same names, incompatible signatures), so the version is read
//! from the library file itself: the runtime embeds a marker
//! `RKLLM SDK (version: X.Y.Z` and prints `rkllm-runtime version: X.Y.Z`.
//! A version that is unknown here is refused, never guessed: a wrong ABI is
//! memory corruption.

use std::fmt;

/// A runtime version `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The ABIs with declarations in this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abi {
    /// Runtime 1.3.0 ([`crate::v1_3_0`]).
    V1_3,
    /// Runtimes 1.2.1, 1.2.2 and 1.2.3 ([`crate::v1_2`]).
    V1_2,
}

impl Abi {
    /// The ABI of a runtime version, if this crate supports it.
    pub fn for_version(version: Version) -> Option<Self> {
        match (version.major, version.minor, version.patch) {
            (1, 3, 0) => Some(Self::V1_3),
            (1, 2, 1..=3) => Some(Self::V1_2),
            _ => None,
        }
    }

    /// The versions an ABI covers, for messages.
    pub fn versions(self) -> &'static str {
        match self {
            Self::V1_3 => "1.3.0",
            Self::V1_2 => "1.2.1 to 1.2.3",
        }
    }
}

/// Markers after which a runtime library carries its version.
pub const VERSION_MARKERS: [&[u8]; 2] = [b"RKLLM SDK (version:", b"rkllm-runtime version:"];

/// Finds the runtime version in the bytes of a library file.
pub fn find_version(bytes: &[u8]) -> Option<Version> {
    VERSION_MARKERS.iter().find_map(|marker| {
        let mut from = 0;
        while let Some(pos) = find(&bytes[from..], marker) {
            let after = from + pos + marker.len();
            if let Some(version) = parse_version(&bytes[after..]) {
                return Some(version);
            }
            from = after;
        }
        None
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Parses `X.Y.Z` after optional spaces.
fn parse_version(bytes: &[u8]) -> Option<Version> {
    let text: &[u8] = &bytes[..bytes.len().min(32)];
    let start = text.iter().position(|b| *b != b' ')?;
    let mut parts = [0u32; 3];
    let mut at = start;
    for (i, part) in parts.iter_mut().enumerate() {
        let digits = text[at..].iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 4 {
            return None;
        }
        *part = std::str::from_utf8(&text[at..at + digits])
            .ok()?
            .parse()
            .ok()?;
        at += digits;
        if i < 2 {
            if text.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
    }
    Some(Version {
        major: parts[0],
        minor: parts[1],
        patch: parts[2],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    #[test]
    fn both_marker_forms_are_read() {
        let lib = b"\x7fELF....RKLLM SDK (version: 1.2.3 (abc123@2025-11-01))\0more";
        assert_eq!(find_version(lib), Some(v(1, 2, 3)));
        let lib = b"junk\0rkllm-runtime version: 1.3.0, rknpu driver version: %s\0";
        assert_eq!(find_version(lib), Some(v(1, 3, 0)));
    }

    #[test]
    fn a_marker_without_a_version_is_skipped() {
        let lib = b"rkllm-runtime version: %s\0RKLLM SDK (version: 1.3.0 x";
        assert_eq!(find_version(lib), Some(v(1, 3, 0)));
        assert_eq!(find_version(b"rkllm-runtime version: %s\0"), None);
        assert_eq!(find_version(b"nothing here"), None);
    }

    #[test]
    fn only_known_versions_map_to_an_abi() {
        assert_eq!(Abi::for_version(v(1, 3, 0)), Some(Abi::V1_3));
        for patch in 1..=3 {
            assert_eq!(Abi::for_version(v(1, 2, patch)), Some(Abi::V1_2));
        }
        for unknown in [v(1, 2, 0), v(1, 1, 4), v(1, 3, 1), v(2, 0, 0)] {
            assert_eq!(Abi::for_version(unknown), None, "{unknown}");
        }
    }
}
