//! The one way a file under the board's root is opened, listed or read.
//!
//! What is under `[board] sys_root` is outside input: a FIFO, a device, a
//! socket, a huge file or a symlink out of the tree must cost nothing and
//! block nothing. So:
//!
//! - A path is resolved one component at a time from the root, each
//!   directory held open while the next is looked up. Symlinks are followed
//!   as if the root were `/` (sysfs's own links, `class/devfreq/dmc` →
//!   `../../devices/…`, and `/proc/device-tree` → `/sys/firmware/…`, work
//!   under any root), and no link, absolute or `..`, can lead out of it; at
//!   most [`MAX_SYMLINKS`] links are followed per path, and it is at most
//!   [`MAX_DEPTH`] folders deep.
//! - A file is read only if it is a regular file: it is looked at before it
//!   is opened (a FIFO, a device or a socket is never opened), opened with
//!   `O_NONBLOCK` and `O_NOFOLLOW` from its directory, and looked at again
//!   (so one put in its place meanwhile, a FIFO too, opens without waiting
//!   and is refused).
//! - A file longer than [`MAX_FILE_BYTES`], or a directory with more than
//!   [`MAX_ENTRIES`] entries, is refused whole (never cut): the kernel's
//!   attributes are a page at most.
//!
//! Every refusal is an `io::Error` that says why, for the snapshot's
//! reasons. The time a read takes is bounded above this module (a read of
//! a file on a hung filesystem blocks in the kernel whatever the flags).

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};

/// The longest file read; a longer one is refused.
pub const MAX_FILE_BYTES: usize = 16 * 1024;
/// The most entries a directory may have; one with more is refused.
pub const MAX_ENTRIES: usize = 512;
/// The most symlinks followed while resolving one path.
pub const MAX_SYMLINKS: usize = 40;
/// The deepest a resolved path may go, in folders below the root (each is
/// held open while the path is resolved).
pub const MAX_DEPTH: usize = 64;

/// A tree of the board's files, rooted at `[board] sys_root`.
pub(crate) struct Tree<'a> {
    root: PathBuf,
    /// The path being read now (for the reason of a read that is stuck).
    now: Option<&'a Mutex<Option<PathBuf>>>,
}

/// A path resolved under the root: the directory it is in (held open),
/// its name there, and what it is.
struct Found {
    /// The root, then each directory down to the one holding `name`.
    dirs: Vec<OwnedFd>,
    name: OsString,
    stat: Stat,
}

impl Found {
    fn dir(&self) -> BorrowedFd<'_> {
        self.dirs.last().expect("the root is held").as_fd()
    }
}

/// An error saying `what`.
fn refused(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// What a file's type is called in a refusal.
fn kind_name(stat: &Stat) -> &'static str {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of an unknown type",
    }
}

fn is(stat: &Stat, kind: FileType) -> bool {
    FileType::from_raw_mode(stat.st_mode) == kind
}

/// Whether two stats are of one file.
fn same(a: &Stat, b: &Stat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

impl<'a> Tree<'a> {
    /// The tree under `root`.
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
            now: None,
        }
    }

    /// The same, noting in `now` the path each read is at.
    pub(crate) fn noting(root: &Path, now: &'a Mutex<Option<PathBuf>>) -> Self {
        Self {
            root: root.to_owned(),
            now: Some(now),
        }
    }

    /// `rel` under the root, for messages.
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    fn note(&self, rel: Option<&str>) {
        if let Some(now) = self.now {
            *now.lock() = rel.map(|rel| self.path(rel));
        }
    }

    /// Resolves `rel` one component at a time, symlinks inside the root.
    fn resolve(&self, rel: &str) -> io::Result<Found> {
        let root = rustix::fs::open(
            self.root.as_path(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut dirs = vec![root];
        let mut pending: VecDeque<OsString> = components(OsStr::new(rel)).collect();
        let mut links = 0;
        loop {
            let Some(name) = pending.pop_front() else {
                // The path ends at a directory (the root, or after `..`).
                let stat = rustix::fs::fstat(dirs.last().expect("the root is held"))?;
                return Ok(Found {
                    dirs,
                    name: OsString::from("."),
                    stat,
                });
            };
            if name == ".." {
                // Never above the root, as `/..` is `/`.
                if dirs.len() > 1 {
                    dirs.pop();
                }
                continue;
            }
            let dir = dirs.last().expect("the root is held");
            let stat = rustix::fs::statat(dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)?;
            if is(&stat, FileType::Symlink) {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(rustix::io::Errno::LOOP.into());
                }
                let target = OsString::from_vec(
                    rustix::fs::readlinkat(dir, name.as_os_str(), Vec::new())?.into_bytes(),
                );
                if target.as_bytes().starts_with(b"/") {
                    dirs.truncate(1);
                }
                for part in components(&target).collect::<Vec<_>>().into_iter().rev() {
                    pending.push_front(part);
                }
                continue;
            }
            if pending.is_empty() {
                return Ok(Found { dirs, name, stat });
            }
            if !is(&stat, FileType::Directory) {
                return Err(rustix::io::Errno::NOTDIR.into());
            }
            if dirs.len() > MAX_DEPTH {
                return Err(rustix::io::Errno::NAMETOOLONG.into());
            }
            let next = rustix::fs::openat(
                dir,
                name.as_os_str(),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            dirs.push(next);
        }
    }

    /// Whether `rel` exists under the root (whatever it is).
    pub(crate) fn exists(&self, rel: &str) -> bool {
        self.note(Some(rel));
        let found = self.resolve(rel).is_ok();
        self.note(None);
        found
    }

    /// The bytes of the regular file `rel`, at most [`MAX_FILE_BYTES`].
    pub(crate) fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        self.note(Some(rel));
        let bytes = self.read_unnoted(rel);
        self.note(None);
        bytes
    }

    fn read_unnoted(&self, rel: &str) -> io::Result<Vec<u8>> {
        let found = self.resolve(rel)?;
        if !is(&found.stat, FileType::RegularFile) {
            return Err(refused(format!(
                "{}, not a regular file: not read",
                kind_name(&found.stat)
            )));
        }
        let fd = rustix::fs::openat(
            found.dir(),
            found.name.as_os_str(),
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let stat = rustix::fs::fstat(&fd)?;
        if !is(&stat, FileType::RegularFile) || !same(&stat, &found.stat) {
            return Err(refused(format!(
                "replaced while being opened (now {}): not read",
                kind_name(&stat)
            )));
        }
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(MAX_FILE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)?;
        if bytes.len() > MAX_FILE_BYTES {
            return Err(refused(format!(
                "longer than {MAX_FILE_BYTES} bytes: not a kernel file, refused"
            )));
        }
        Ok(bytes)
    }

    /// The text of the regular file `rel` (see [`Tree::read`]).
    pub(crate) fn read_text(&self, rel: &str) -> io::Result<String> {
        String::from_utf8(self.read(rel)?).map_err(|_| refused("not UTF-8 text"))
    }

    /// The names in the directory `rel`, at most [`MAX_ENTRIES`].
    pub(crate) fn list(&self, rel: &str) -> io::Result<Vec<String>> {
        self.note(Some(rel));
        let names = self.list_unnoted(rel);
        self.note(None);
        names
    }

    fn list_unnoted(&self, rel: &str) -> io::Result<Vec<String>> {
        let found = self.resolve(rel)?;
        if !is(&found.stat, FileType::Directory) {
            return Err(rustix::io::Errno::NOTDIR.into());
        }
        let fd = rustix::fs::openat(
            found.dir(),
            found.name.as_os_str(),
            OFlags::RDONLY
                | OFlags::DIRECTORY
                | OFlags::NONBLOCK
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::new(fd)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if names.len() == MAX_ENTRIES {
                return Err(refused(format!(
                    "more than {MAX_ENTRIES} entries: not a kernel directory, refused"
                )));
            }
            names.push(String::from_utf8_lossy(name).into_owned());
        }
        Ok(names)
    }

    /// Whether this process can open the device node `rel` for reading and
    /// writing; `None` when there is no such node (absent, or neither a
    /// character device nor, in a fake tree, a regular file). Opened
    /// without blocking and closed at once.
    pub(crate) fn node_opens(&self, rel: &str) -> Option<bool> {
        self.note(Some(rel));
        let opens = self.node_opens_unnoted(rel);
        self.note(None);
        opens
    }

    fn node_opens_unnoted(&self, rel: &str) -> Option<bool> {
        let found = self.resolve(rel).ok()?;
        if !is(&found.stat, FileType::CharacterDevice) && !is(&found.stat, FileType::RegularFile) {
            return None;
        }
        let opened = rustix::fs::openat(
            found.dir(),
            found.name.as_os_str(),
            OFlags::RDWR | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        );
        Some(opened.is_ok_and(|fd| rustix::fs::fstat(&fd).is_ok_and(|s| same(&s, &found.stat))))
    }
}

/// The parts of a path that name something (`.` and empty ones left out).
fn components(path: &OsStr) -> impl Iterator<Item = OsString> + '_ {
    path.as_bytes()
        .split(|&b| b == b'/')
        .filter(|part| !part.is_empty() && *part != b".")
        .map(|part| OsString::from_vec(part.to_vec()))
}

#[cfg(test)]
mod tests;
