//! A cancellation token shared by a stream, its queued job and the backend
//! thread that runs it.
//!
//! Cancelling is idempotent, never blocks for longer than the hooks take,
//! and wakes both async waiters and OS threads parked in
//! [`CancelToken::wait_timeout`]. Hooks registered by a backend (for the
//! real runtime: `rkllm_abort`) run exactly once, on the cancelling thread.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

type Hook = Box<dyn FnOnce() + Send>;

/// A clonable, thread-safe cancellation flag with wake-ups and hooks.
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    // Synchronous lock: held only to flip the flag, swap hooks out or park
    // a backend thread; never across an await.
    hooks: Mutex<Vec<Hook>>,
    parked: Condvar,
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// True once [`cancel`](Self::cancel) has been called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::Acquire)
    }

    /// Cancels: sets the flag, wakes parked threads and runs the hooks once.
    pub fn cancel(&self) {
        let hooks = {
            let mut hooks = self.inner.hooks.lock();
            if self.inner.cancelled.swap(true, Ordering::AcqRel) {
                return;
            }
            self.inner.parked.notify_all();
            std::mem::take(&mut *hooks)
        };
        for hook in hooks {
            hook();
        }
    }

    /// Registers a hook that runs when the token is cancelled, or at once
    /// if it already is. Hooks are one-shot and live as long as the token.
    pub fn on_cancel(&self, hook: impl FnOnce() + Send + 'static) {
        let mut hooks = self.inner.hooks.lock();
        if self.is_cancelled() {
            drop(hooks);
            hook();
        } else {
            hooks.push(Box::new(hook));
        }
    }

    /// Parks the calling OS thread for up to `timeout`, returning early
    /// (with `true`) if the token is cancelled. For backend threads only;
    /// never call it on the async runtime.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut guard = self.inner.hooks.lock();
        while !self.is_cancelled() {
            if self
                .inner
                .parked
                .wait_until(&mut guard, deadline)
                .timed_out()
            {
                return self.is_cancelled();
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn hooks_run_once_even_when_cancelled_twice() {
        let token = CancelToken::new();
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        token.on_cancel(move || {
            c.fetch_add(1, Ordering::SeqCst);
        });
        token.cancel();
        token.cancel();
        assert_eq!(count.load(Ordering::SeqCst), 1);
        assert!(token.is_cancelled());
    }

    #[test]
    fn a_hook_added_after_cancel_runs_at_once() {
        let token = CancelToken::new();
        token.cancel();
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        token.on_cancel(move || r.store(true, Ordering::SeqCst));
        assert!(ran.load(Ordering::SeqCst));
    }

    #[test]
    fn a_parked_thread_wakes_on_cancel() {
        let token = CancelToken::new();
        let t = token.clone();
        let waiter = std::thread::spawn(move || t.wait_timeout(Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(20));
        token.cancel();
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn wait_timeout_returns_false_when_nothing_cancels() {
        let token = CancelToken::new();
        assert!(!token.wait_timeout(Duration::from_millis(5)));
    }
}
