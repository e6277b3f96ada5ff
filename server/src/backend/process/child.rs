//! The runner side: `rkllm-server --runner` loads one model with the
//! backend the server names and runs the server's orders until its order
//! pipe closes.
//!
//! The main thread loads the model and runs generations; one thread reads
//! orders, so an `ABORT` reaches the running generation at once; reports
//! are written by the thread that makes them when they come at a model's
//! pace, and by a writer thread in bursts, so that tokens that pile up go
//! out merged in one write.

use std::io::{Read, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::frame::{self, FrameReader};
use super::{LoadOrder, RunOrder};
use crate::backend::{BackendError, Generation, TokenOutput, TokenSink};
use crate::plan::probe::Verdicts;
use crate::vocab::{CancelToken, monotonic_ns};

/// Serves one model: `orders` is the pipe from the server, `reports` the
/// pipe to it. Returns the process's exit code.
pub fn serve(mut orders: impl Read + Send + 'static, reports: impl Write + Send + 'static) -> i32 {
    // The runner must not outlive the server, whatever kills it.
    if let Err(err) =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
    {
        eprintln!("rkllm-server runner: cannot ask to die with the server: {err}");
    }
    let outbox = Outbox::start(reports);
    let mut reader = FrameReader::default();
    let order: LoadOrder = match reader.read_frame(&mut orders) {
        Ok(Some((frame::LOAD, body))) => match serde_json::from_slice(&body) {
            Ok(order) => order,
            Err(err) => {
                eprintln!("rkllm-server runner: bad load order: {err}");
                return 2;
            }
        },
        Ok(None) => return 0,
        Ok(Some((kind, _))) => {
            eprintln!("rkllm-server runner: expected a load order, got frame {kind}");
            return 2;
        }
        Err(err) => {
            eprintln!("rkllm-server runner: cannot read the load order: {err}");
            return 2;
        }
    };
    let loaded = order
        .backend
        .build()
        .and_then(|backend| backend.load(&order.model));
    let mut runner = match loaded {
        Ok(runner) => {
            let loaded: Result<Option<Verdicts>, BackendError> = Ok(runner.verdicts());
            outbox.json(frame::LOADED, None, &loaded);
            runner
        }
        Err(err) => {
            outbox.json(frame::LOADED, None, &Err::<Option<Verdicts>, _>(err));
            outbox.close();
            return 1;
        }
    };

    // Orders are read on their own thread; runs come to this one in order.
    let current: Arc<Mutex<Option<(u64, CancelToken)>>> = Arc::default();
    let (runs, queued) = mpsc::channel::<(u64, RunOrder, CancelToken)>();
    let reader_current = Arc::clone(&current);
    let order_reader = std::thread::Builder::new()
        .name("runner-orders".into())
        .spawn(move || read_orders(orders, reader, &reader_current, &runs));
    if let Err(err) = order_reader {
        eprintln!("rkllm-server runner: cannot start the order reader: {err}");
        return 2;
    }
    for (id, order, cancel) in queued {
        let output = RunOutput {
            id,
            stamp: order.stamp,
            cancel,
            outbox: &outbox,
        };
        let mut sink = TokenSink::new(&output, order.request.prompt.turns().is_some());
        let result = catch_unwind(AssertUnwindSafe(|| {
            runner.generate(&order.request, &mut sink)
        }));
        let result: Result<Generation, BackendError> = match result {
            Ok(Ok(generation)) => {
                if !output.cancel.is_cancelled() {
                    sink.flush();
                }
                Ok(generation)
            }
            Ok(Err(err)) => Err(err),
            Err(_) => Err(BackendError::Runtime {
                code: None,
                message: "generation failed: internal backend error".into(),
            }),
        };
        *current.lock() = None;
        outbox.json(frame::DONE, Some(id), &result);
    }
    // The order pipe closed: the server unloads this model.
    drop(runner);
    outbox.close();
    0
}

/// Reads orders until the pipe closes: runs go to the main thread, aborts
/// cancel the current run at once.
fn read_orders(
    mut orders: impl Read,
    mut reader: FrameReader,
    current: &Mutex<Option<(u64, CancelToken)>>,
    runs: &mpsc::Sender<(u64, RunOrder, CancelToken)>,
) {
    loop {
        let (kind, body) = match reader.read_frame(&mut orders) {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(err) => {
                eprintln!("rkllm-server runner: bad order: {err}");
                break;
            }
        };
        match (kind, frame::id_of(&body)) {
            (frame::RUN, Some(id)) => match serde_json::from_slice::<RunOrder>(&body[8..]) {
                Ok(order) => {
                    let cancel = CancelToken::new();
                    *current.lock() = Some((id, cancel.clone()));
                    if runs.send((id, order, cancel)).is_err() {
                        break;
                    }
                }
                Err(err) => {
                    eprintln!("rkllm-server runner: bad run order: {err}");
                    break;
                }
            },
            (frame::ABORT, Some(id)) => {
                if let Some((running, cancel)) = &*current.lock()
                    && *running == id
                {
                    cancel.cancel();
                }
            }
            _ => eprintln!("rkllm-server runner: unexpected frame {kind}"),
        }
    }
    // The server is done with this runner: stop what runs.
    if let Some((_, cancel)) = &*current.lock() {
        cancel.cancel();
    }
}

/// Where one run's tokens go: into the outbox, as `TOKENS` frames.
struct RunOutput<'a> {
    id: u64,
    stamp: bool,
    cancel: CancelToken,
    outbox: &'a Outbox,
}

impl TokenOutput for RunOutput<'_> {
    fn push(&self, text: &str, _thinking: bool, tokens: u32, produced_ns: Option<u64>) -> bool {
        self.outbox
            .tokens(self.id, tokens, produced_ns.unwrap_or(0), text.as_bytes());
        !self.cancel.is_cancelled()
    }

    fn stamp_now(&self) -> Option<u64> {
        self.stamp.then(monotonic_ns)
    }

    fn logprobs(&self, entries: Vec<crate::vocab::TokenLogprob>) {
        self.outbox.json(frame::LOGPROBS, Some(self.id), &entries);
    }

    fn set_prompt_tokens(&self, tokens: u32) {
        self.outbox
            .frame(|buf| frame::prompt_frame(buf, self.id, tokens));
    }

    fn prefill_progress(&self, done: u32, total: u32) {
        self.outbox
            .json(frame::PREFILL, Some(self.id), &[done, total]);
    }

    fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }
}

struct Pending {
    buf: Vec<u8>,
    /// The `TOKENS` frame at the end of `buf` that more tokens of the same
    /// run may join: (run id, offset).
    open_tokens: Option<(u64, usize)>,
    /// A thread is writing: what is added now goes out in its next write.
    writing: bool,
    /// The writer thread is asked to write.
    wake_writer: bool,
    closed: bool,
    /// When the last write ended.
    last_write: Instant,
}

/// Reports closer together than this are written by the writer thread, so
/// that a fast producer is not held up by the pipe and its tokens go out
/// merged; reports further apart are written at once by the thread that
/// produced them (no thread to wake: one `write` per token at a model's pace).
const BURST: Duration = Duration::from_micros(500);

struct OutboxInner {
    pending: Mutex<Pending>,
    wake: Condvar,
    /// The pipe, and the spare buffer being written.
    pipe: Mutex<(Box<dyn Write + Send>, Vec<u8>)>,
}

impl OutboxInner {
    /// Writes until the buffer is empty; the caller has set `writing`.
    fn drain(&self) {
        let mut pipe = self.pipe.lock();
        let (out, spare) = &mut *pipe;
        loop {
            {
                let mut p = self.pending.lock();
                if p.buf.is_empty() {
                    p.writing = false;
                    p.last_write = Instant::now();
                    return;
                }
                std::mem::swap(&mut p.buf, spare);
                p.open_tokens = None;
            }
            if out.write_all(spare).and_then(|()| out.flush()).is_err() {
                // The server is gone; nothing left to do here.
                std::process::exit(3);
            }
            spare.clear();
        }
    }
}

/// Reports on their way to the server (see [`BURST`] for who writes them).
struct Outbox {
    inner: Arc<OutboxInner>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Outbox {
    fn start(reports: impl Write + Send + 'static) -> Self {
        let inner = Arc::new(OutboxInner {
            pending: Mutex::new(Pending {
                buf: Vec::new(),
                open_tokens: None,
                writing: false,
                wake_writer: false,
                closed: false,
                last_write: Instant::now() - BURST,
            }),
            wake: Condvar::new(),
            pipe: Mutex::new((Box::new(reports), Vec::new())),
        });
        let shared = Arc::clone(&inner);
        let writer = std::thread::Builder::new()
            .name("runner-reports".into())
            .spawn(move || {
                loop {
                    {
                        let mut p = shared.pending.lock();
                        while !p.wake_writer && !p.closed {
                            shared.wake.wait(&mut p);
                        }
                        if !p.wake_writer {
                            return;
                        }
                        p.wake_writer = false;
                    }
                    shared.drain();
                }
            })
            .ok();
        Self {
            inner,
            writer: Mutex::new(writer),
        }
    }

    /// Adds to the buffer with `add`; then, unless a write is under way
    /// (it takes this too), writes it here or has the writer thread do it.
    fn add(&self, add: impl FnOnce(&mut Pending)) {
        let inline = {
            let mut p = self.inner.pending.lock();
            add(&mut p);
            if p.writing {
                return;
            }
            p.writing = true;
            if p.last_write.elapsed() < BURST {
                p.wake_writer = true;
                self.inner.wake.notify_one();
                false
            } else {
                true
            }
        };
        if inline {
            self.inner.drain();
        }
    }

    fn frame(&self, write: impl FnOnce(&mut Vec<u8>)) {
        self.add(|p| {
            write(&mut p.buf);
            p.open_tokens = None;
        });
    }

    fn json(&self, kind: u8, id: Option<u64>, value: &impl serde::Serialize) {
        self.frame(|buf| frame::json_frame(buf, kind, id, value));
    }

    fn tokens(&self, id: u64, tokens: u32, produced_ns: u64, text: &[u8]) {
        self.add(|p| match p.open_tokens {
            Some((open, at)) if open == id => frame::extend_tokens(&mut p.buf, at, tokens, text),
            _ => {
                let at = p.buf.len();
                frame::tokens_frame(&mut p.buf, id, tokens, produced_ns, text);
                p.open_tokens = Some((id, at));
            }
        });
    }

    /// Waits until everything added is written, and stops the writer.
    fn close(&self) {
        {
            let mut p = self.inner.pending.lock();
            p.closed = true;
            self.inner.wake.notify_all();
        }
        if let Some(writer) = self.writer.lock().take() {
            let _ = writer.join();
        }
        // An inline write still under way holds the pipe: wait for it.
        drop(self.inner.pipe.lock());
    }
}
