//! Background tasks with an owner. A task started through [`Tasks`] ends
//! when its `Tasks` drops: the `Tasks` is a drop guard whose `Drop` tells
//! every task it started to stop, and each stops at its next await. Whoever
//! holds the `Tasks` owns the tasks, so nothing that loops for a server's
//! life outlives what it serves (a dropped state, a finished `run`, a test
//! that built a server in process).
//!
//! A task holds what it works on, never its owner (or only weakly): an
//! owner kept alive by its own task would never drop.
//!
//! [`Live`] counts the tasks still running, and outlives the set, so that
//! one can see them end.
//!
//! A leaf: it uses nothing of the server.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// The owner of some background tasks: they end when it drops.
#[derive(Debug)]
pub struct Tasks {
    /// `true` once the owner has dropped; every task watches it.
    stop: watch::Sender<bool>,
    live: Live,
}

impl Default for Tasks {
    fn default() -> Self {
        Self::new()
    }
}

impl Tasks {
    /// A set with no task yet.
    pub fn new() -> Self {
        Self {
            stop: watch::Sender::new(false),
            live: Live::default(),
        }
    }

    /// Starts `task` on the current runtime. It runs until it returns or
    /// this set drops, whichever comes first; in the second case it is
    /// dropped at the await it is waiting at.
    ///
    /// # Panics
    /// Outside a Tokio runtime, as `tokio::spawn` does.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut stop = self.stop.subscribe();
        let running = self.live.enter();
        tokio::spawn(async move {
            let _running = running;
            tokio::select! {
                biased;
                // An error is the sender gone, which is a stop too.
                _ = stop.wait_for(|stopped| *stopped) => {}
                () = task => {}
            }
        })
    }

    /// The count of this set's running tasks, which outlives the set.
    pub fn live(&self) -> Live {
        self.live.clone()
    }

    /// Ends the tasks now: the same as dropping the set.
    pub fn abort(self) {}
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// How many of a set's tasks are running.
#[derive(Debug, Clone, Default)]
pub struct Live(Arc<Count>);

#[derive(Debug, Default)]
struct Count {
    running: AtomicUsize,
    none_left: Notify,
}

/// Held by a running task, whose end (returned, stopped, panicked, or
/// dropped with its runtime) it counts.
#[derive(Debug)]
struct Running(Live);

impl Drop for Running {
    fn drop(&mut self) {
        let count = &(self.0).0;
        if count.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            count.none_left.notify_waiters();
        }
    }
}

impl Live {
    fn enter(&self) -> Running {
        self.0.running.fetch_add(1, Ordering::AcqRel);
        Running(self.clone())
    }

    /// Tasks running now.
    pub fn count(&self) -> usize {
        self.0.running.load(Ordering::Acquire)
    }

    /// Resolves once none of the set's tasks runs.
    pub async fn ended(&self) {
        loop {
            let none_left = self.0.none_left.notified();
            tokio::pin!(none_left);
            none_left.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            none_left.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Upper bound on waiting for a task to end, so that a task that does
    /// not fails the test instead of hanging it.
    const LIVENESS: Duration = Duration::from_secs(10);

    /// A task that never returns by itself, and notes that it has dropped.
    fn forever(dropped: Arc<Notify>) -> impl Future<Output = ()> + Send + 'static {
        struct Noted(Arc<Notify>);
        impl Drop for Noted {
            fn drop(&mut self) {
                self.0.notify_one();
            }
        }
        async move {
            let _noted = Noted(dropped);
            let mut ticks = tokio::time::interval(Duration::from_millis(5));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
            }
        }
    }

    #[tokio::test]
    async fn dropping_the_owner_ends_its_tasks() {
        let tasks = Tasks::new();
        let dropped = Arc::new(Notify::new());
        let first = tasks.spawn(forever(Arc::clone(&dropped)));
        let second = tasks.spawn(forever(Arc::new(Notify::new())));
        let live = tasks.live();
        assert_eq!(live.count(), 2);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!first.is_finished() && !second.is_finished());

        drop(tasks);
        tokio::time::timeout(LIVENESS, live.ended())
            .await
            .expect("both tasks end once their owner drops");
        assert_eq!(live.count(), 0);
        tokio::time::timeout(LIVENESS, dropped.notified())
            .await
            .expect("the task's future was dropped");
        first.await.expect("stopped, not panicked");
        second.await.expect("stopped, not panicked");
    }

    #[tokio::test]
    async fn a_task_that_returns_is_counted_out_and_abort_ends_the_rest() {
        let tasks = Tasks::new();
        let live = tasks.live();
        tasks.spawn(async {}).await.unwrap();
        assert_eq!(live.count(), 0);
        tasks.spawn(forever(Arc::new(Notify::new())));
        assert_eq!(live.count(), 1);
        tasks.abort();
        tokio::time::timeout(LIVENESS, live.ended())
            .await
            .expect("abort ends the task");
    }
}
