//! Untrusted input worked on where a failure cannot take the server down.
//! A model's chat template (from its repository) is a program, and a
//! `tokenizer.json` decides how large its tables are: either can ask for
//! more memory than the board has. Both run here, in helper processes
//! (`rkllm-server --sandbox`), each with its memory bounded by the kernel
//! (`RLIMIT_DATA`), every job with a time bound, and every reply with a
//! size bound. A helper that breaks a bound dies alone: that one job fails
//! with why, and the next job starts a new helper.
//!
//! Nothing here runs on the async workers: a job is a line written to a
//! helper and a line read back. At most [`SandboxSettings::helpers`] jobs
//! run at once; the others wait their turn. Helpers start on first use and
//! are kept while the server runs.
//!
//! Where no helper can be started (an empty command: the in-process tests
//! of the error table), jobs run on a blocking thread with the same code,
//! bounded by the template engine's fuel and output bound but not in
//! memory.

mod child;
mod job;

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

pub use child::serve;
pub use job::{Job, Reply};

use crate::model::template::RenderJob;

/// Longest job line (a conversation with its template).
pub const MAX_JOB_BYTES: usize = 64 << 20;

/// Longest reply line: a rendered prompt, as JSON.
const MAX_REPLY_BYTES: usize = 2 * crate::model::template::MAX_RENDERED_BYTES + 4096;

/// Memory a helper rendering templates may take.
pub const DEFAULT_RENDER_MEMORY: u64 = 256 << 20;

/// Memory a helper checking a tokenizer may take (the largest real
/// `tokenizer.json` files are tens of MB, parsed into a few hundred).
pub const DEFAULT_TOKENIZER_MEMORY: u64 = 1 << 30;

/// Longest a job may run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Helpers at work at once.
pub const DEFAULT_HELPERS: usize = 2;

/// How the sandbox runs its helpers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    /// The command that starts a helper (this binary, behind any runner
    /// prefix); `--sandbox BYTES` is added. Empty: jobs run in-thread.
    pub command: Vec<OsString>,
    /// Memory a rendering helper may take.
    pub render_memory: u64,
    /// Memory a tokenizer check may take.
    pub tokenizer_memory: u64,
    /// Longest a job may run.
    pub timeout: Duration,
    /// Jobs at once.
    pub helpers: usize,
}

impl SandboxSettings {
    /// Helpers started with `command` and the default bounds.
    pub fn new(command: Vec<OsString>) -> Self {
        Self {
            command,
            render_memory: DEFAULT_RENDER_MEMORY,
            tokenizer_memory: DEFAULT_TOKENIZER_MEMORY,
            timeout: DEFAULT_TIMEOUT,
            helpers: DEFAULT_HELPERS,
        }
    }

    /// Jobs in-thread (no helper processes): only the fuel and output
    /// bounds hold.
    pub fn in_thread() -> Self {
        Self::new(Vec::new())
    }
}

/// The exit status of a child whose program could not be run (the
/// shell's and `posix_spawn`'s convention).
const CANNOT_RUN: i32 = 127;

/// Why a job gave no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// The helper ended during the job: it took more memory than its bound
    /// (or crashed).
    #[error(
        "it took more than the {} MiB of memory it may use (its helper process ended: {status})",
        memory >> 20
    )]
    Memory {
        /// The bound.
        memory: u64,
        /// How the helper ended.
        status: String,
    },
    /// The job ran past its time bound; its helper was stopped.
    #[error("it did not finish within {} s", timeout.as_secs_f64())]
    Timeout {
        /// The bound.
        timeout: Duration,
    },
    /// No helper could be started or spoken to.
    #[error("the sandbox is not available: {0}")]
    Unavailable(String),
}

/// One helper process.
#[derive(Debug)]
struct Helper {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// The helpers and the turn every job waits for.
#[derive(Debug)]
pub struct Sandbox {
    settings: SandboxSettings,
    /// Rendering helpers waiting for a job. Synchronous: a push or a pop,
    /// never held across an await.
    idle: Mutex<Vec<Helper>>,
    turns: tokio::sync::Semaphore,
}

impl Sandbox {
    /// A sandbox; no helper starts until a job comes.
    pub fn new(settings: SandboxSettings) -> Self {
        let helpers = settings.helpers.max(1);
        Self {
            settings,
            idle: Mutex::new(Vec::new()),
            turns: tokio::sync::Semaphore::new(helpers),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> &SandboxSettings {
        &self.settings
    }

    /// Renders a chat template.
    ///
    /// # Errors
    /// What the template raised or failed on, or the bound it broke, in
    /// words naming the model's chat template.
    pub async fn render(&self, job: RenderJob) -> Result<String, String> {
        match self.run(Job::Render(job), Kind::Render).await {
            Ok(Reply::Rendered(prompt)) => Ok(prompt),
            Ok(Reply::Failed(why) | Reply::OutOfBounds(why)) => Err(why),
            Ok(other) => Err(format!("the model's chat template: an odd reply {other:?}")),
            Err(e) => Err(format!("the model's chat template: {e}")),
        }
    }

    /// Reads the `tokenizer.json` at `path` as the constraint engine will.
    ///
    /// # Errors
    /// A job that gave no reply.
    pub async fn check_tokenizer(&self, path: std::path::PathBuf) -> Result<Reply, SandboxError> {
        self.run(Job::Tokenizer(path), Kind::Tokenizer).await
    }

    async fn run(&self, job: Job, kind: Kind) -> Result<Reply, SandboxError> {
        let _turn = self
            .turns
            .acquire()
            .await
            .map_err(|e| SandboxError::Unavailable(e.to_string()))?;
        if self.settings.command.is_empty() {
            return tokio::task::spawn_blocking(move || job.run())
                .await
                .map_err(|e| SandboxError::Unavailable(e.to_string()));
        }
        let memory = match kind {
            Kind::Render => self.settings.render_memory,
            Kind::Tokenizer => self.settings.tokenizer_memory,
        };
        let mut line =
            serde_json::to_vec(&job).map_err(|e| SandboxError::Unavailable(e.to_string()))?;
        if line.len() > MAX_JOB_BYTES {
            return Err(SandboxError::Unavailable(format!(
                "the job is larger than {MAX_JOB_BYTES} bytes"
            )));
        }
        line.push(b'\n');
        // A tokenizer check takes a helper of its own, with more memory,
        // which ends after it.
        let reused = match kind {
            Kind::Render => self.idle.lock().pop(),
            Kind::Tokenizer => None,
        };
        let mut helper = match reused {
            Some(helper) => helper,
            None => self.start(memory)?,
        };
        let timeout = self.settings.timeout;
        match tokio::time::timeout(timeout, exchange(&mut helper, &line)).await {
            Ok(Ok(reply)) => {
                if kind == Kind::Render {
                    self.idle.lock().push(helper);
                }
                Ok(reply)
            }
            Ok(Err(_)) => {
                // It ended (or garbled its reply): no more of it.
                let _ = helper.child.start_kill();
                let (status, code) = match helper.child.wait().await {
                    Ok(status) => (status.to_string(), status.code()),
                    Err(e) => (e.to_string(), None),
                };
                let mut said = String::new();
                if let Some(mut stderr) = helper.child.stderr.take() {
                    let mut bytes = Vec::new();
                    let _ = (&mut stderr).take(4096).read_to_end(&mut bytes).await;
                    said = String::from_utf8_lossy(&bytes).trim().to_owned();
                }
                tracing::warn!(%status, said = %said, "a sandbox helper ended during a job");
                if code == Some(CANNOT_RUN) {
                    // The program never ran: a failed exec reported by the
                    // child (so it is where spawning cannot report it, as
                    // under an emulator).
                    return Err(SandboxError::Unavailable(format!(
                        "cannot start a helper: its program could not be run ({status})"
                    )));
                }
                Err(SandboxError::Memory { memory, status })
            }
            Err(_) => {
                let _ = helper.child.start_kill();
                let _ = helper.child.wait().await;
                Err(SandboxError::Timeout { timeout })
            }
        }
    }

    fn start(&self, memory: u64) -> Result<Helper, SandboxError> {
        let (program, args) = self
            .settings
            .command
            .split_first()
            .ok_or_else(|| SandboxError::Unavailable("no command".into()))?;
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .arg("--sandbox")
            .arg(memory.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SandboxError::Unavailable(format!("cannot start a helper: {e}")))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        match (stdin, stdout) {
            (Some(stdin), Some(stdout)) => Ok(Helper {
                child,
                stdin,
                stdout: BufReader::new(stdout),
            }),
            _ => Err(SandboxError::Unavailable("a helper without pipes".into())),
        }
    }
}

/// Chat templates are rendered here: the model's prompt builder hands its
/// renders to the sandbox.
impl crate::model::prompt::Render for Sandbox {
    async fn render(&self, job: RenderJob) -> Result<String, String> {
        Sandbox::render(self, job).await
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Render,
    Tokenizer,
}

/// Writes one job line and reads its reply line.
async fn exchange(helper: &mut Helper, line: &[u8]) -> std::io::Result<Reply> {
    helper.stdin.write_all(line).await?;
    helper.stdin.flush().await?;
    let mut reply = Vec::new();
    (&mut helper.stdout)
        .take(MAX_REPLY_BYTES as u64 + 1)
        .read_until(b'\n', &mut reply)
        .await?;
    if reply.last() != Some(&b'\n') {
        return Err(std::io::Error::other("no whole reply"));
    }
    serde_json::from_slice(&reply).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests;
