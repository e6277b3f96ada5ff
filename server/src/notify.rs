//! The systemd notify protocol (`Type=notify`): `READY=1` once every model
//! is loaded and the server listens, `STOPPING=1` when shutdown begins,
//! and `WATCHDOG=1` every half `WatchdogSec` from a task that first checks
//! that the engine is alive (every model worker running). Without
//! `NOTIFY_SOCKET` (not under systemd) every call does nothing.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::time::Duration;

use crate::task::Tasks;
use crate::transport::AppState;

/// A connection to systemd's notify socket.
#[derive(Debug)]
pub struct SystemdNotifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
}

impl SystemdNotifier {
    /// Reads `NOTIFY_SOCKET` (a path, or `@name` for the abstract
    /// namespace) and `WATCHDOG_USEC`/`WATCHDOG_PID`.
    pub fn from_env() -> Self {
        let target = std::env::var_os("NOTIFY_SOCKET").and_then(|path| {
            let path = path.to_string_lossy().into_owned();
            let addr = match path.strip_prefix('@') {
                Some(name) => SocketAddr::from_abstract_name(name.as_bytes()).ok()?,
                None => SocketAddr::from_pathname(&path).ok()?,
            };
            Some((UnixDatagram::unbound().ok()?, addr))
        });
        let for_us = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            .is_none_or(|pid| pid == std::process::id());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.parse::<u64>().ok())
            .filter(|&u| u > 0 && for_us)
            .map(Duration::from_micros);
        Self { target, watchdog }
    }

    /// Sends one state update; errors are logged, never fatal.
    pub fn notify(&self, state: &str) {
        if let Some((socket, addr)) = &self.target {
            if let Err(err) = socket.send_to_addr(state.as_bytes(), addr) {
                tracing::warn!(error = %err, "cannot notify systemd");
            }
        }
    }

    /// Everything is loaded and listening.
    pub fn ready(&self) {
        self.notify("READY=1\nSTATUS=serving");
    }

    /// Shutdown has begun.
    pub fn stopping(&self) {
        self.notify("STOPPING=1\nSTATUS=stopping");
    }

    /// Starts the watchdog task when systemd asked for one: a ping every
    /// half period while the model supervisor is sound (every worker
    /// thread runs, no model's lock is stuck). A dead or stuck supervisor
    /// stops the pings, and systemd restarts the service; a runner
    /// process's crash does not (the supervisor restarts it). The task
    /// holds the engine only, and ends when the returned guard drops.
    pub fn spawn_watchdog(self: &Arc<Self>, state: Arc<AppState>) -> Option<Tasks> {
        let period = self.watchdog? / 2;
        let notifier = Arc::clone(self);
        let engine = Arc::clone(&state.engine);
        let watchdog = Tasks::new();
        watchdog.spawn(async move {
            let mut ticks = tokio::time::interval(period);
            // A late ping goes out at once and the next keeps to the
            // schedule; missed ones are not made up for.
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                ticks.tick().await;
                let engine = Arc::clone(&engine);
                let healthy = tokio::task::spawn_blocking(move || engine.supervisor_healthy())
                    .await
                    .unwrap_or(false);
                if healthy {
                    notifier.notify("WATCHDOG=1");
                } else {
                    tracing::error!("the model supervisor is not sound: no watchdog ping");
                }
            }
        });
        Some(watchdog)
    }
}
