//! MCP sessions over HTTP: ids handed out by `initialize`, each holding
//! the session's JSON-RPC connection state, ended by `DELETE /mcp` or
//! after `mcp.session_idle_secs` without a request.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::Rng;
use tokio::time::Instant;

use crate::rpc::Connection;
use crate::task::Tasks;

/// One MCP session over HTTP.
#[derive(Debug)]
pub struct McpSession {
    /// The session's protocol state.
    pub conn: Arc<Connection>,
    last_seen: Mutex<Instant>,
}

/// Every open MCP session.
#[derive(Debug)]
pub struct McpSessions {
    idle: Duration,
    // Synchronous lock: one map operation per request.
    map: Mutex<HashMap<String, Arc<McpSession>>>,
}

impl McpSessions {
    /// Sessions that end after `idle` without a request.
    pub fn new(idle: Duration) -> Self {
        Self {
            idle,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Opens a session; returns its id (32 hex digits from a CSPRNG).
    pub fn open(&self, conn: Arc<Connection>) -> String {
        let mut rng = rand::rng();
        let id: String = (0..16)
            .map(|_| format!("{:02x}", rng.random::<u8>()))
            .collect();
        let session = Arc::new(McpSession {
            conn,
            last_seen: Mutex::new(Instant::now()),
        });
        self.map.lock().insert(id.clone(), session);
        id
    }

    /// The live session with this id, marked as used.
    pub fn get(&self, id: &str) -> Option<Arc<McpSession>> {
        let session = self.map.lock().get(id).cloned()?;
        *session.last_seen.lock() = Instant::now();
        Some(session)
    }

    /// Ends a session, cancelling its requests in flight.
    pub fn close(&self, id: &str) -> bool {
        let session = self.map.lock().remove(id);
        session.inspect(|s| s.conn.cancel_all()).is_some()
    }

    /// Ends the sessions idle since before `now - idle`.
    pub fn expire(&self, now: Instant) -> usize {
        let idle = self.idle;
        let expired: Vec<Arc<McpSession>> = {
            let mut map = self.map.lock();
            let ids: Vec<String> = map
                .iter()
                .filter(|(_, s)| now.saturating_duration_since(*s.last_seen.lock()) >= idle)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        expired.iter().for_each(|s| s.conn.cancel_all());
        expired.len()
    }

    /// Open sessions.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Whether no session is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs the idle expiry until the returned guard drops (or is
    /// aborted). A late check runs once, and the next a whole period after
    /// it.
    pub fn spawn_reaper(self: &Arc<Self>) -> Tasks {
        let sessions = Arc::clone(self);
        let reaper = Tasks::new();
        reaper.spawn(async move {
            let period = (sessions.idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                sessions.expire(Instant::now());
            }
        });
        reaper
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_sessions_expire_and_unknown_ids_are_not_found() {
        let sessions = McpSessions::new(Duration::from_secs(60));
        let id = sessions.open(Arc::new(Connection::new(false)));
        assert_eq!(id.len(), 32);
        assert!(sessions.get(&id).is_some());
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(sessions.expire(Instant::now()), 0);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(sessions.expire(Instant::now()), 1);
        assert!(sessions.get(&id).is_none());
        assert!(!sessions.close("nope"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_expiry_runs_until_its_guard_drops() {
        let sessions = Arc::new(McpSessions::new(Duration::from_secs(60)));
        let reaper = sessions.spawn_reaper();
        let live = reaper.live();
        let id = sessions.open(Arc::new(Connection::new(false)));
        tokio::time::advance(Duration::from_secs(61)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(sessions.get(&id).is_none(), "the idle session expired");

        drop(reaper);
        live.ended().await;
        assert_eq!(Arc::strong_count(&sessions), 1, "the expiry let go");
    }
}
