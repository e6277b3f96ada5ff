//! Downloading one file of a pull into the store's work folder: resuming
//! what an earlier attempt left, checking its SHA-256, and keeping a
//! hostile or broken host within bounds. A download never writes past the
//! size its host declared (nor, when it declared none, past
//! `[store] max_file_bytes`), stops before the disk's free space falls
//! under `[store] min_free_bytes`, and is cut when its host sends less
//! than `[store] min_bytes_per_sec` over a window or the pull outlives its
//! deadline (what arrived is then kept, to resume).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::error::PullError;
use super::hf::{Hub, Resolved};
use super::names::check_file_name;
use super::progress::Progress;

/// What bounds a pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullLimits {
    /// Largest file taken, declared or not (`[store] max_file_bytes`).
    pub max_file_bytes: u64,
    /// Free space a download leaves on the store's disk (`[store] min_free_bytes`).
    pub min_free_bytes: u64,
    /// Slowest host accepted, over `rate_window` (`[store] min_bytes_per_sec`; 0: any).
    pub min_bytes_per_sec: u64,
    /// The window over which the rate is measured (`[store] rate_window_secs`).
    pub rate_window: Duration,
    /// Longest pull, from when it has its model's lock (`[store] pull_timeout_secs`).
    pub timeout: Duration,
}

/// How often, in bytes written, the free space is looked at again.
const SPACE_CHECK_BYTES: u64 = 4 << 20;

/// Longest wait for a host's answer to a download request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// One file to download.
pub(super) struct FileJob<'a> {
    /// The endpoint's client.
    pub hub: &'a Hub,
    /// The file's address at the endpoint (an earlier attempt is resumed
    /// only if it was of this address).
    pub url: &'a str,
    /// What the address said of the file.
    pub resolved: &'a Resolved,
    /// The repository (or the URL), for messages.
    pub repo: &'a str,
    /// The file's path in the repository.
    pub file: &'a str,
    /// The SHA-256 its source published.
    pub expected: Option<&'a str>,
    /// What bounds it.
    pub limits: &'a PullLimits,
    /// When the whole pull must be done.
    pub deadline: Instant,
}

/// One file downloaded and checked, waiting in the work folder.
#[derive(Debug)]
pub(super) struct Fetched {
    /// Where it waits.
    pub path: PathBuf,
    /// Its name in the model's folder.
    pub name: String,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Its size.
    pub size: u64,
}

/// What an earlier, interrupted download of a file left.
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
struct PartialMeta {
    url: String,
    etag: Option<String>,
    size: Option<u64>,
}

/// The last part of a path in a repository.
pub(super) fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn io_error(context: &str) -> impl Fn(io::Error) -> PullError + '_ {
    move |e| PullError::Io(format!("{context}: {e}"))
}

fn is_disk_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

/// Downloads `job` into `work`, resuming an earlier attempt at the same
/// version, and checks it against its published SHA-256. A wrong
/// checksum, a host that sends more than it declared, a file over the
/// size limit and a full disk leave nothing behind.
pub(super) async fn fetch_file(
    job: &FileJob<'_>,
    work: &Path,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Fetched, PullError> {
    let name = file_name(job.file).to_owned();
    check_file_name(&name).map_err(|m| PullError::BadSource(format!("the file name: {m}")))?;
    if let Some(size) = job.resolved.size {
        check_size(job, size, &format!(" (its host declares {size} bytes)"))?;
    }
    let part = work.join(format!("{name}.part"));
    let meta_path = work.join(format!("{name}.part.json"));
    let meta = PartialMeta {
        url: job.url.to_owned(),
        etag: job.resolved.etag.clone(),
        size: job.resolved.size,
    };
    let resumable = std::fs::read(&meta_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<PartialMeta>(&b).ok())
        .is_some_and(|old| old == meta);
    if !resumable {
        let _ = std::fs::remove_file(&part);
        let text = serde_json::to_vec(&meta).unwrap_or_default();
        std::fs::write(&meta_path, text).map_err(io_error(&meta_path.display().to_string()))?;
    }
    let (sha256, size) = match download(job, &part, progress).await {
        Ok(done) => done,
        Err(err) => {
            let discard = match &err {
                PullError::Checksum { .. }
                | PullError::DiskFull { .. }
                | PullError::Oversize { .. }
                | PullError::TooLarge { .. } => true,
                PullError::LowSpace { kept, .. } => !kept.is_empty(),
                _ => false,
            };
            if discard {
                let _ = std::fs::remove_dir_all(work);
            }
            return Err(err);
        }
    };
    progress(Progress::Verifying);
    if let Some(expected) = job.expected
        && !expected.eq_ignore_ascii_case(&sha256)
    {
        let _ = std::fs::remove_dir_all(work);
        return Err(PullError::Checksum {
            file: job.file.to_owned(),
            expected: expected.to_owned(),
            got: sha256,
        });
    }
    Ok(Fetched {
        path: part,
        name,
        sha256,
        size,
    })
}

/// Refuses a file larger than `[store] max_file_bytes`.
fn check_size(job: &FileJob<'_>, size: u64, declared: &str) -> Result<(), PullError> {
    if size > job.limits.max_file_bytes {
        return Err(PullError::TooLarge {
            file: job.file.to_owned(),
            limit: job.limits.max_file_bytes,
            declared: declared.to_owned(),
        });
    }
    Ok(())
}

/// Bytes free for this user on the file system holding `dir`, when known.
fn free_bytes(dir: &Path) -> Option<u64> {
    let stats = rustix::fs::statvfs(dir).ok()?;
    Some(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// The store's folder, from a part file in `store/.partial/NAME/`.
fn store_dir_of(part: &Path) -> String {
    part.ancestors()
        .nth(3)
        .map_or_else(String::new, |p| p.display().to_string())
}

/// Refuses to go on when `need` more bytes would leave less than
/// `[store] min_free_bytes` free; `kept` says what becomes of the part.
fn check_space(
    job: &FileJob<'_>,
    part: &Path,
    need: u64,
    kept: &'static str,
) -> Result<(), PullError> {
    let Some(free) = part.parent().and_then(free_bytes) else {
        // Unknown: a full disk is still caught by the write itself.
        return Ok(());
    };
    if free < need.saturating_add(job.limits.min_free_bytes) {
        return Err(PullError::LowSpace {
            dir: store_dir_of(part),
            file: job.file.to_owned(),
            free,
            need,
            margin: job.limits.min_free_bytes,
            kept,
        });
    }
    Ok(())
}

/// The bytes a host sent in the current window of `[store] rate_window_secs`.
struct RateWindow {
    min: u64,
    length: Duration,
    end: Instant,
    bytes: u64,
}

impl RateWindow {
    fn new(limits: &PullLimits) -> Self {
        Self {
            min: limits.min_bytes_per_sec,
            length: limits.rate_window,
            end: Instant::now() + limits.rate_window,
            bytes: 0,
        }
    }

    /// At the end of a window: whether the host kept to the minimum rate.
    fn check(&mut self, now: Instant, file: &str) -> Result<(), PullError> {
        if now < self.end {
            return Ok(());
        }
        let needed = self.min.saturating_mul(self.length.as_secs().max(1));
        if self.bytes < needed {
            return Err(PullError::TooSlow {
                file: file.to_owned(),
                got: self.bytes,
                window: self.length.as_secs(),
                min: self.min,
            });
        }
        self.end = now + self.length;
        self.bytes = 0;
        Ok(())
    }
}

/// Downloads into `part`, resuming from its length; returns its SHA-256
/// and size once complete.
async fn download(
    job: &FileJob<'_>,
    part: &Path,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<(String, u64), PullError> {
    let what = format!("{}: {}", job.repo, job.file);
    let part_label = part.display().to_string();
    let Answer {
        response,
        have,
        complete,
        declared,
    } = ask(job, part, &what).await?;
    let out = tokio::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(have == 0)
        .append(have > 0)
        .open(part)
        .await
        .map_err(io_error(&part_label))?;
    let mut hasher = Sha256::new();
    if have > 0 {
        hash_earlier(part, have, &mut hasher).await?;
    }
    let mut receiving = Receiving {
        job,
        part,
        out,
        hasher,
        got: have,
        declared,
        // Never more than declared; without a declaration, the size limit.
        limit: declared.unwrap_or(job.limits.max_file_bytes),
        reported: None,
        space_checked: have,
        rate: RateWindow::new(job.limits),
        sha256: job.expected.map(str::to_owned),
    };
    if !complete {
        receiving = receiving.receive(response, progress).await?;
    }
    receiving.finish(progress).await
}

/// The host's answer to a download request, as the download goes on
/// from it.
struct Answer {
    response: reqwest::Response,
    /// The bytes of the part file the answer goes on from (0: from the
    /// start).
    have: u64,
    /// The part file is complete already (the host answered 416 for what
    /// is there): nothing more to send.
    complete: bool,
    /// What the host declared: to the resolve request, else to this one.
    declared: Option<u64>,
}

/// Asks the host for what the part file lacks (all of it when what is
/// there cannot be resumed), after checking that what it declares fits
/// the size limit and the disk.
async fn ask(job: &FileJob<'_>, part: &Path, what: &str) -> Result<Answer, PullError> {
    let (hub, resolved, file) = (job.hub, job.resolved, job.file);
    let mut have = std::fs::metadata(part).map_or(0, |m| m.len());
    if resolved.size.is_some_and(|s| have > s) {
        have = 0;
    }
    // Room for what is declared (at least the margin) before asking.
    check_space(
        job,
        part,
        resolved.size.map_or(0, |s| s.saturating_sub(have)),
        "",
    )?;
    let mut response = request(job, hub, have, what).await?;
    let mut status = response.status().as_u16();
    if status == 416 && resolved.size != Some(have) {
        // A stale partial: start over.
        have = 0;
        response = request(job, hub, 0, what).await?;
        status = response.status().as_u16();
    }
    if status != 206 && status != 416 {
        // Not resumed (no Range support, or the file changed): start over.
        have = 0;
    }
    // 416 for what is there: nothing more to send.
    let complete = status == 416;
    let sent_length = response
        .content_length()
        .map(|len| len + if status == 206 { have } else { 0 });
    // What the host declared: to the resolve request, else to this one.
    let declared = resolved.size.or(sent_length);
    if let (Some(declared), Some(sent)) = (resolved.size, sent_length)
        && sent > declared
        && !complete
    {
        return Err(PullError::Oversize {
            file: file.to_owned(),
            declared,
        });
    }
    if resolved.size.is_none()
        && let Some(size) = declared
    {
        // Declared only now, by the download's own answer.
        check_size(job, size, &format!(" (its host declares {size} bytes)"))?;
        check_space(job, part, size.saturating_sub(have), "")?;
    }
    Ok(Answer {
        response,
        have,
        complete,
        declared,
    })
}

/// A download under way: the part file, its hash so far, and the bounds
/// each chunk is held to.
struct Receiving<'a> {
    job: &'a FileJob<'a>,
    part: &'a Path,
    out: tokio::fs::File,
    hasher: Sha256,
    /// The bytes in the part file.
    got: u64,
    declared: Option<u64>,
    /// The most the part file may hold.
    limit: u64,
    /// `got` when progress was last reported.
    reported: Option<u64>,
    /// `got` when the free space was last looked at.
    space_checked: u64,
    rate: RateWindow,
    /// The SHA-256 the progress reports name.
    sha256: Option<String>,
}

impl Receiving<'_> {
    /// Takes the answer's chunks until it ends, the pull's deadline passes
    /// or the host falls under the minimum rate. What arrived stays to be
    /// resumed, unless a chunk was refused (that removes the part file).
    async fn receive(
        mut self,
        mut response: reqwest::Response,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Self, PullError> {
        let job = self.job;
        loop {
            let next =
                tokio::time::timeout_at(self.rate.end.min(job.deadline), response.chunk()).await;
            let chunk = match next {
                Ok(Ok(Some(chunk))) => Some(chunk),
                Ok(Ok(None)) => break,
                Ok(Err(_)) => {
                    let _ = self.out.flush().await;
                    return Err(PullError::Cut {
                        got: self.got,
                        total: self.declared,
                    });
                }
                // A quiet moment: the rate and the deadline are looked at below.
                Err(_) => None,
            };
            if let Some(chunk) = chunk
                && let Err(err) = self.take(&chunk, progress).await
            {
                let part = self.part;
                drop(self);
                let _ = std::fs::remove_file(part);
                return Err(err);
            }
            let now = Instant::now();
            if now >= job.deadline {
                let _ = self.out.flush().await;
                return Err(PullError::TimedOut(job.limits.timeout.as_secs()));
            }
            if let Err(err) = self.rate.check(now, job.file) {
                let _ = self.out.flush().await;
                return Err(err);
            }
        }
        Ok(self)
    }

    /// Writes one chunk, unless it would pass the limit, and hashes it;
    /// looks at the free space again every [`SPACE_CHECK_BYTES`], and
    /// reports progress.
    async fn take(
        &mut self,
        chunk: &[u8],
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<(), PullError> {
        let (job, part, file) = (self.job, self.part, self.job.file);
        if self.got + chunk.len() as u64 > self.limit {
            return Err(match self.declared {
                Some(declared) => PullError::Oversize {
                    file: file.to_owned(),
                    declared,
                },
                None => PullError::TooLarge {
                    file: file.to_owned(),
                    limit: self.limit,
                    declared: " (its host declared no size)".to_owned(),
                },
            });
        }
        if let Err(e) = self.out.write_all(chunk).await {
            return Err(if is_disk_full(&e) {
                PullError::DiskFull {
                    dir: store_dir_of(part),
                    file: file.to_owned(),
                    size: self
                        .declared
                        .map_or_else(|| "size unknown".to_owned(), |t| format!("{t} bytes")),
                }
            } else {
                PullError::Io(format!("{}: {e}", part.display()))
            });
        }
        self.hasher.update(chunk);
        self.got += chunk.len() as u64;
        self.rate.bytes += chunk.len() as u64;
        if self.got - self.space_checked >= SPACE_CHECK_BYTES {
            self.space_checked = self.got;
            let need = self.declared.map_or(0, |d| d.saturating_sub(self.got));
            check_space(job, part, need, "; the partial download was removed")?;
        }
        // Report at most every 1/1000 of the file (or 1 MiB).
        let step = self.declared.map_or(1 << 20, |t| (t / 1000).max(64 << 10));
        if self.reported.is_none_or(|r: u64| self.got - r >= step) {
            self.reported = Some(self.got);
            progress(Progress::Downloading {
                file: file.to_owned(),
                sha256: self.sha256.clone(),
                completed: self.got,
                total: self.declared,
            });
        }
        Ok(())
    }

    /// Flushes the part file to the disk; refuses it when the host sent
    /// less than it declared. Returns its SHA-256 and size.
    async fn finish(
        mut self,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<(String, u64), PullError> {
        let part_label = self.part.display().to_string();
        self.out.flush().await.map_err(io_error(&part_label))?;
        self.out.sync_all().await.map_err(io_error(&part_label))?;
        let got = self.got;
        if self.declared.is_some_and(|t| got < t) {
            return Err(PullError::Cut {
                got,
                total: self.declared,
            });
        }
        progress(Progress::Downloading {
            file: self.job.file.to_owned(),
            sha256: self.sha256,
            completed: got,
            total: Some(got),
        });
        Ok((hex(&self.hasher.finalize()), got))
    }
}

/// Asks the host for the file from byte `from`, waiting for its answer no
/// longer than [`ANSWER_TIMEOUT`] (and the pull's deadline).
async fn request(
    job: &FileJob<'_>,
    hub: &Hub,
    from: u64,
    what: &str,
) -> Result<reqwest::Response, PullError> {
    let until = job.deadline.min(Instant::now() + ANSWER_TIMEOUT);
    match tokio::time::timeout_at(until, hub.download(job.resolved, from, job.repo, what)).await {
        Ok(answer) => answer,
        Err(_) if until == job.deadline => Err(PullError::TimedOut(job.limits.timeout.as_secs())),
        Err(_) => Err(PullError::Transfer(format!(
            "{what}: no answer within {} s",
            ANSWER_TIMEOUT.as_secs()
        ))),
    }
}

/// Hashes the first `have` bytes of `part`, what an earlier attempt wrote.
async fn hash_earlier(part: &Path, have: u64, hasher: &mut Sha256) -> Result<(), PullError> {
    let part_label = part.display().to_string();
    let mut earlier = tokio::fs::File::open(part)
        .await
        .map_err(io_error(&part_label))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut left = have;
    while left > 0 {
        let n = earlier
            .read(&mut buf)
            .await
            .map_err(io_error(&part_label))?;
        if n == 0 {
            break;
        }
        let n = n.min(usize::try_from(left).unwrap_or(usize::MAX));
        hasher.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(())
}

/// `bytes` in lower-case hex.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(min: u64, window: u64) -> PullLimits {
        PullLimits {
            max_file_bytes: 1 << 30,
            min_free_bytes: 0,
            min_bytes_per_sec: min,
            rate_window: Duration::from_secs(window),
            timeout: Duration::from_secs(3600),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_below_the_minimum_rate_is_refused_and_one_above_starts_another() {
        let mut rate = RateWindow::new(&limits(100, 10));
        rate.bytes = 5000;
        // Inside the window nothing is judged.
        assert!(rate.check(Instant::now(), "f").is_ok());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(rate.check(Instant::now(), "f").is_ok());
        assert_eq!(rate.bytes, 0, "a new window");
        rate.bytes = 999;
        tokio::time::advance(Duration::from_secs(10)).await;
        let err = rate.check(Instant::now(), "f").unwrap_err().to_string();
        assert!(err.contains("min_bytes_per_sec (100)"), "{err}");
        assert!(err.contains("999 bytes in the last 10 s"), "{err}");
        // 0 accepts any host.
        let mut any = RateWindow::new(&limits(0, 1));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(any.check(Instant::now(), "f").is_ok());
    }
}
