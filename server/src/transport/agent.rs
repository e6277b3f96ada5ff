//! HAProxy's agent check (`agent_listen`): for each connection the server
//! writes one line describing its load and closes it. HAProxy reads the
//! words of the line (`docs/cluster.md`):
//!
//! - `ready up N%` while serving: N scales the server's weight, so new
//!   work goes to the nodes with the least of it. N is 100 for an idle
//!   node that has a model loaded and 50 when none is (the first request
//!   would pay for the load), divided by one plus the generations running
//!   and waiting; at least 1.
//! - `drain` once shutdown has begun: no new work, while requests pinned
//!   to this node (a polled stream, an MCP session) still reach it.
//!
//! Whether the node may take work at all is `/ready`'s business (HAProxy's
//! health check); the agent only weighs.

use std::sync::Weak;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use super::serve::accept;
use super::state::AppState;
use crate::engine::NodeLoad;

/// The agent's line for a node with `load`.
pub fn reply(load: NodeLoad, shutting_down: bool) -> String {
    if shutting_down {
        return "drain\n".to_owned();
    }
    let base = if load.loaded_models > 0 { 100 } else { 50 };
    let weight = (base / (1 + load.queued + load.running)).max(1);
    format!("ready up {weight}%\n")
}

/// Answers agent checks on `listener` until `state` drops (also while
/// shutting down, when the answer is `drain`). It holds the state weakly,
/// so that the state can drop.
pub async fn serve_agent(listener: TcpListener, state: Weak<AppState>) {
    loop {
        let Some((mut socket, _)) = accept(&listener, "agent_listen").await else {
            continue;
        };
        let Some(state) = state.upgrade() else {
            return;
        };
        let line = reply(state.service.node_load(), state.is_shutting_down());
        drop(state);
        tokio::spawn(async move {
            let _ = socket.write_all(line.as_bytes()).await;
            let _ = socket.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(queued: usize, running: usize, loaded_models: usize) -> NodeLoad {
        NodeLoad {
            queued,
            running,
            loaded_models,
        }
    }

    #[test]
    fn the_weight_falls_with_the_work_and_draining_wins() {
        assert_eq!(reply(load(0, 0, 1), false), "ready up 100%\n");
        assert_eq!(reply(load(0, 0, 0), false), "ready up 50%\n");
        assert_eq!(reply(load(0, 1, 1), false), "ready up 50%\n");
        assert_eq!(reply(load(3, 1, 1), false), "ready up 20%\n");
        assert_eq!(reply(load(500, 1, 1), false), "ready up 1%\n");
        assert_eq!(reply(load(0, 0, 1), true), "drain\n");
    }
}
