//! The server side: a backend whose runners are processes. Loading a
//! model starts `rkllm-server --runner`, hands it the backend settings and
//! the model, and waits for its answer; a generation sends one run order
//! and turns the runner's reports back into tokens for the sink.
//!
//! Whatever happens to the runner (a signal, an exit, a stall) comes back
//! as [`BackendError::Lost`] with the cause; the server goes on.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Write};
use std::ops::Range;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::frame::{self, Filled, FrameReader};
use super::{BackendSettings, LoadOrder, RunOrderRef};
use crate::backend::{Backend, BackendError, Generation, Runner, TokenSink, ValidRunRequest};
use crate::model::ModelSpec;
use crate::plan::probe::Verdicts;

/// How runner processes are started and watched (config `[engine]`).
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// The program and leading arguments that start a runner: the
    /// server's own binary, after the configured prefix (`taskset`,
    /// `nice`, an emulator). `--runner NAME` is appended.
    pub command: Vec<OsString>,
    /// How long a model may take to load.
    pub load_timeout: Duration,
    /// How long a generation may go without any output before its runner
    /// is killed.
    pub stall_timeout: Duration,
    /// How long a runner may take to finish a run after an abort, and to
    /// exit once told to before SIGTERM (then 2 s more before SIGKILL).
    pub stop_timeout: Duration,
}

/// Runs the models of `inner` in runner processes. It answers for the
/// inner backend (kind, parameters, checks) and never generates itself.
#[derive(Debug)]
pub struct ProcessBackend {
    inner: Arc<dyn Backend>,
    settings: BackendSettings,
    runner: RunnerSettings,
}

impl ProcessBackend {
    /// `inner` is the backend `settings` builds, here for its answers.
    pub fn new(inner: Arc<dyn Backend>, settings: BackendSettings, runner: RunnerSettings) -> Self {
        Self {
            inner,
            settings,
            runner,
        }
    }
}

impl Backend for ProcessBackend {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn overrides(&self) -> &'static [&'static str] {
        self.inner.overrides()
    }

    fn probes(&self) -> bool {
        self.inner.probes()
    }

    fn lanes(&self) -> usize {
        self.inner.lanes()
    }

    fn check(&self, request: &ValidRunRequest) -> Result<(), String> {
        self.inner.check(request)
    }

    fn preflight(&self, model: &ModelSpec) -> Result<(), String> {
        self.inner.preflight(model)
    }

    fn context_length(&self, model: &ModelSpec) -> Option<u32> {
        self.inner.context_length(model)
    }

    fn tokenizer(&self, model: &ModelSpec) -> Option<crate::model::tokenizer::TokenizerSource> {
        self.inner.tokenizer(model)
    }

    fn load(&self, model: &ModelSpec) -> Result<Box<dyn Runner>, BackendError> {
        let load_error = |message: String| BackendError::Load {
            model: model.name.clone(),
            message,
        };
        let Some((program, args)) = self.runner.command.split_first() else {
            return Err(load_error("no runner command".into()));
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .arg("--runner")
            .arg(&model.name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C at the terminal is the
            // server's to handle; the runner stops when the server says.
            .process_group(0);
        super::death::die_with_this_thread(&mut command);
        let mut child = command.spawn().map_err(|e| {
            load_error(format!(
                "cannot start a runner process ({}): {e}",
                program.to_string_lossy()
            ))
        })?;
        let (Some(orders), Some(reports), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(load_error("the runner's pipes are missing".into()));
        };
        // Orders carry a request's images (hundreds of KiB of base64): a
        // larger pipe takes one in a few writes instead of 64 KiB at a
        // time. Best effort: the system may cap it (fs.pipe-max-size).
        if let Err(e) = rustix::pipe::fcntl_setpipe_size(&orders, 1 << 20) {
            tracing::debug!(error = %e, "could not enlarge the order pipe");
        }
        let tail = Arc::new(StderrTail::default());
        let stderr_thread = {
            let tail = Arc::clone(&tail);
            let name = model.name.clone();
            std::thread::Builder::new()
                .name(format!("runner-log-{}", model.name))
                .spawn(move || tail.follow(stderr, &name))
                .ok()
        };
        let mut runner = ProcessRunner {
            model: model.name.clone(),
            child,
            orders: Arc::new(Mutex::new(Some(orders))),
            reports,
            reader: FrameReader::default(),
            tail,
            stderr_thread,
            next_id: 0,
            settings: self.runner.clone(),
            lost: None,
            verdicts: None,
        };
        let mut order = Vec::new();
        frame::json_frame(
            &mut order,
            frame::LOAD,
            None,
            &LoadOrder {
                backend: self.settings.clone(),
                model: model.clone(),
            },
        );
        if runner.send(&order).is_err() {
            let cause = runner.died();
            return Err(load_error(format!(
                "its runner died while loading: {cause}"
            )));
        }
        let deadline = Instant::now() + self.runner.load_timeout;
        loop {
            match runner.wait_frame(deadline) {
                Ok((frame::LOADED, body)) => {
                    let outcome: Result<Option<Verdicts>, BackendError> =
                        serde_json::from_slice(runner.reader.body(body)).unwrap_or_else(|e| {
                            Err(load_error(format!("bad answer from its runner: {e}")))
                        });
                    return match outcome {
                        Ok(verdicts) => {
                            runner.verdicts = verdicts;
                            Ok(Box::new(runner))
                        }
                        Err(err) => {
                            runner.lost = Some("not loaded".into());
                            Err(err)
                        }
                    };
                }
                Ok(_) => {}
                Err(Wait::Eof) => {
                    let cause = runner.died();
                    return Err(load_error(format!(
                        "its runner died while loading: {cause}"
                    )));
                }
                Err(Wait::Timeout) => {
                    runner.kill();
                    return Err(load_error(format!(
                        "not loaded within {} s (engine.load_timeout_secs); its runner was killed",
                        self.runner.load_timeout.as_secs()
                    )));
                }
                Err(Wait::Broken(err)) => {
                    runner.kill();
                    return Err(load_error(format!("its runner broke the protocol: {err}")));
                }
            }
        }
    }
}

/// The longest single wait for a frame: the loop then looks again at
/// whether the run was cancelled.
const POLL_SLICE: Duration = Duration::from_millis(250);

/// Why no frame came.
enum Wait {
    /// The runner closed its end: it exited or is exiting.
    Eof,
    /// Nothing within the deadline.
    Timeout,
    /// A read error or a malformed frame.
    Broken(io::Error),
}

/// One model in a runner process.
struct ProcessRunner {
    model: String,
    child: Child,
    /// The order pipe; cancel hooks hold it weakly, so dropping the runner
    /// closes it whatever hooks remain.
    orders: Arc<Mutex<Option<ChildStdin>>>,
    reports: ChildStdout,
    reader: FrameReader,
    tail: Arc<StderrTail>,
    stderr_thread: Option<std::thread::JoinHandle<()>>,
    next_id: u64,
    settings: RunnerSettings,
    /// Set once the runner is gone, with the cause.
    lost: Option<String>,
    /// What the runner's probes found at load.
    verdicts: Option<Verdicts>,
}

/// Writes an `ABORT` for run `id`, if the runner is still there.
fn send_abort(orders: &Weak<Mutex<Option<ChildStdin>>>, id: u64) {
    if let Some(orders) = orders.upgrade() {
        let mut buf = Vec::with_capacity(13);
        frame::id_frame(&mut buf, frame::ABORT, id);
        if let Some(pipe) = orders.lock().as_mut() {
            let _ = pipe.write_all(&buf);
        }
    }
}

impl ProcessRunner {
    fn send(&self, bytes: &[u8]) -> io::Result<()> {
        match self.orders.lock().as_mut() {
            Some(pipe) => pipe.write_all(bytes),
            None => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// The next frame from the runner, waiting until `deadline`.
    fn wait_frame(&mut self, deadline: Instant) -> Result<(u8, Range<usize>), Wait> {
        loop {
            if let Some(frame) = self.reader.next_frame().map_err(Wait::Broken)? {
                return Ok(frame);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Wait::Timeout);
            }
            let timeout = rustix::event::Timespec {
                tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut fds = [rustix::event::PollFd::new(
                &self.reports,
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(err) => return Err(Wait::Broken(err.into())),
            }
            match self.reader.fill(&mut self.reports) {
                Ok(Filled::Data) => {}
                Ok(Filled::Eof) => return Err(Wait::Eof),
                Err(err) => return Err(Wait::Broken(err)),
            }
        }
    }

    /// The runner closed its pipe: waits for its exit and returns the cause,
    /// logging its last lines of output.
    fn died(&mut self) -> String {
        let status = wait_for(&mut self.child, Duration::from_secs(2)).or_else(|| {
            let _ = self.child.kill();
            self.child.wait().ok()
        });
        let cause = status.map_or_else(|| "its runner vanished".to_owned(), describe_exit);
        self.lost_with(cause)
    }

    /// Kills the runner (a stall, a broken protocol).
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.lost.get_or_insert_with(|| "killed".into());
    }

    fn lost_with(&mut self, cause: String) -> String {
        let lines = self.tail.last_lines(Duration::from_millis(500));
        tracing::error!(
            model = %self.model,
            pid = self.child.id(),
            cause = %cause,
            "runner lost; its last output:\n{}",
            if lines.is_empty() { "(none)".to_owned() } else { lines.join("\n") }
        );
        self.lost = Some(cause.clone());
        cause
    }
}

impl Runner for ProcessRunner {
    fn generate(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
    ) -> Result<Generation, BackendError> {
        self.alive()?;
        self.next_id += 1;
        let id = self.next_id;
        let mut order = Vec::new();
        frame::json_frame(
            &mut order,
            frame::RUN,
            Some(id),
            &RunOrderRef {
                request,
                stamp: sink.stamps(),
            },
        );
        if self.send(&order).is_err() {
            let message = self.died();
            return Err(BackendError::Lost { message });
        }
        let orders = Arc::downgrade(&self.orders);
        let hook_orders = orders.clone();
        sink.cancel_token()
            .on_cancel(move || send_abort(&hook_orders, id));
        let mut abort_sent = false;
        // Once the run is stopped, the runner has `stop_timeout` to finish it.
        let mut stop_by: Option<Instant> = None;
        let mut last_output = Instant::now();
        loop {
            if stop_by.is_none() && (abort_sent || sink.cancel_token().is_cancelled()) {
                stop_by = Some(Instant::now() + self.settings.stop_timeout);
            }
            let mut deadline = last_output + self.settings.stall_timeout;
            if let Some(stop_by) = stop_by {
                deadline = deadline.min(stop_by);
            }
            let (kind, body) = match self.wait_frame(deadline.min(Instant::now() + POLL_SLICE)) {
                Ok(frame) => frame,
                Err(Wait::Eof) => {
                    let message = self.died();
                    return Err(BackendError::Lost { message });
                }
                Err(Wait::Timeout) if Instant::now() < deadline => continue,
                Err(Wait::Timeout) if stop_by.is_some_and(|t| Instant::now() >= t) => {
                    let _ = self.child.kill();
                    let message = self.lost_with(format!(
                        "runtime did not stop within {} s of an abort; its runner was killed",
                        self.settings.stop_timeout.as_secs()
                    ));
                    let _ = self.child.wait();
                    return Err(BackendError::Lost { message });
                }
                Err(Wait::Timeout) => {
                    let _ = self.child.kill();
                    let message = self.lost_with(format!(
                        "runtime stalled: no output for {} s (engine.stall_timeout_secs); its runner was killed",
                        self.settings.stall_timeout.as_secs()
                    ));
                    let _ = self.child.wait();
                    return Err(BackendError::Lost { message });
                }
                Err(Wait::Broken(err)) => {
                    self.kill();
                    let message = self.lost_with(format!("runner broke the protocol: {err}"));
                    return Err(BackendError::Lost { message });
                }
            };
            last_output = Instant::now();
            let body = self.reader.body(body);
            match kind {
                frame::TOKENS => {
                    if let Some(t) = frame::tokens_of(body)
                        && t.id == id
                        && !sink.tokens_bytes_at(
                            t.text,
                            t.tokens,
                            (t.produced_ns != 0).then_some(t.produced_ns),
                        )
                        && !abort_sent
                    {
                        // The stream ended or a stop string was hit.
                        abort_sent = true;
                        send_abort(&orders, id);
                    }
                }
                frame::LOGPROBS if frame::id_of(body) == Some(id) => {
                    let entries: Vec<crate::vocab::TokenLogprob> =
                        serde_json::from_slice(&body[8..]).unwrap_or_default();
                    for entry in entries {
                        sink.logprob(entry);
                    }
                }
                frame::PREFILL if frame::id_of(body) == Some(id) => {
                    if let Ok([done, total]) = serde_json::from_slice::<[u32; 2]>(&body[8..]) {
                        sink.prefill_progress(done, total);
                    }
                }
                frame::PROMPT => {
                    if let Some((run, tokens)) = frame::prompt_of(body)
                        && run == id
                    {
                        sink.set_prompt_tokens(tokens);
                    }
                }
                frame::DONE if frame::id_of(body) == Some(id) => {
                    return serde_json::from_slice(&body[8..]).unwrap_or_else(|e| {
                        Err(BackendError::Runtime {
                            code: None,
                            message: format!("bad report from the runner: {e}"),
                        })
                    });
                }
                _ => {}
            }
        }
    }

    fn alive(&mut self) -> Result<(), BackendError> {
        if let Some(cause) = &self.lost {
            return Err(BackendError::Lost {
                message: cause.clone(),
            });
        }
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                let message = self.lost_with(describe_exit(status));
                Err(BackendError::Lost { message })
            }
            Err(err) => {
                let message = self.lost_with(format!("cannot check its runner: {err}"));
                Err(BackendError::Lost { message })
            }
        }
    }

    fn verdicts(&self) -> Option<Verdicts> {
        self.verdicts.clone()
    }

    fn process_id(&self) -> Option<u32> {
        Some(self.child.id())
    }
}

impl Drop for ProcessRunner {
    /// Closes the order pipe (the runner destroys its model and exits),
    /// then SIGTERM, then SIGKILL for a runner that does not.
    fn drop(&mut self) {
        drop(self.orders.lock().take());
        if self.lost.is_none() {
            let mut status = wait_for(&mut self.child, self.settings.stop_timeout);
            if status.is_none() {
                tracing::warn!(model = %self.model, "runner did not exit; sending SIGTERM");
                if let Some(pid) =
                    rustix::process::Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(0))
                {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                }
                status = wait_for(&mut self.child, Duration::from_secs(2));
            }
            if status.is_none() {
                tracing::warn!(model = %self.model, "runner ignored SIGTERM; sending SIGKILL");
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
        if let Some(thread) = self.stderr_thread.take() {
            // The pipe ends with the runner; do not wait on a grandchild
            // that may hold it.
            if self.tail.wait_closed(Duration::from_millis(500)) {
                let _ = thread.join();
            }
        }
    }
}

/// Polls for the child's exit until `timeout`.
fn wait_for(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => return None,
        }
    }
}

/// `runtime crashed: SIGABRT`, `runner exited with code 3`.
fn describe_exit(status: ExitStatus) -> String {
    if let Some(signal) = status.signal() {
        let name = match signal {
            4 => "SIGILL".to_owned(),
            6 => "SIGABRT".to_owned(),
            7 => "SIGBUS".to_owned(),
            8 => "SIGFPE".to_owned(),
            9 => "SIGKILL".to_owned(),
            11 => "SIGSEGV".to_owned(),
            15 => "SIGTERM".to_owned(),
            other => format!("signal {other}"),
        };
        format!("runtime crashed: {name}")
    } else {
        match status.code() {
            Some(code) => format!("runner exited unexpectedly with code {code}"),
            None => "runner exited unexpectedly".to_owned(),
        }
    }
}

/// The level of a line the runner's own logger wrote (`  WARN message`),
/// with the rest of the line; `None` for anything else (the runtime's
/// prints, the runner's informational lines).
fn runner_level(line: &str) -> (Option<tracing::Level>, &str) {
    let trimmed = line.trim_start();
    for (word, level) in [
        ("ERROR ", tracing::Level::ERROR),
        ("WARN ", tracing::Level::WARN),
    ] {
        if let Some(rest) = trimmed.strip_prefix(word) {
            return (Some(level), rest);
        }
    }
    (None, line)
}

/// Lines of a runner's stderr kept for the log when it dies.
const TAIL_LINES: usize = 20;

/// Follows a runner's stderr: each line goes to the log, the last few are
/// kept for a crash report.
#[derive(Debug, Default)]
struct StderrTail {
    lines: Mutex<(VecDeque<String>, bool)>,
    closed: Condvar,
}

impl StderrTail {
    fn follow(&self, stderr: std::process::ChildStderr, model: &str) {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                    match runner_level(&text) {
                        (Some(tracing::Level::ERROR), rest) => {
                            tracing::error!(target: "rkllm_server::runner", model, "{rest}");
                        }
                        (Some(tracing::Level::WARN), rest) => {
                            tracing::warn!(target: "rkllm_server::runner", model, "{rest}");
                        }
                        _ => tracing::info!(target: "rkllm_server::runner", model, "{text}"),
                    }
                    let mut lines = self.lines.lock();
                    if lines.0.len() == TAIL_LINES {
                        lines.0.pop_front();
                    }
                    lines.0.push_back(text);
                }
            }
        }
        self.lines.lock().1 = true;
        self.closed.notify_all();
    }

    /// Waits up to `timeout` for the pipe to close; returns whether it did.
    fn wait_closed(&self, timeout: Duration) -> bool {
        let mut lines = self.lines.lock();
        if !lines.1 {
            let _ = self.closed.wait_for(&mut lines, timeout);
        }
        lines.1
    }

    /// The last lines, once the pipe closed (or `timeout` passed).
    fn last_lines(&self, timeout: Duration) -> Vec<String> {
        self.wait_closed(timeout);
        self.lines.lock().0.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::runner_level;
    use tracing::Level;

    #[test]
    fn a_runner_warning_keeps_its_level_and_the_runtime_prints_are_information() {
        assert_eq!(
            runner_level(" WARN prompt cache damaged model=chat"),
            (Some(Level::WARN), "prompt cache damaged model=chat")
        );
        assert_eq!(runner_level("ERROR lost"), (Some(Level::ERROR), "lost"));
        assert_eq!(
            runner_level(" INFO model loaded"),
            (None, " INFO model loaded")
        );
        assert_eq!(
            runner_level("E rkllm: failed to load prompt cache"),
            (None, "E rkllm: failed to load prompt cache")
        );
    }
}
