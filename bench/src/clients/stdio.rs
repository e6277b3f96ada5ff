//! The stdio transport's one connection that many streams share.

use super::*;

/// One stdio connection shared by many streams: a writer, and a reader
/// task that routes each pushed chunk to its stream's channel.
#[derive(Debug)]
pub struct StdioMux {
    writer: tokio::sync::Mutex<tokio::process::ChildStdin>,
    routes: Arc<std::sync::Mutex<Routes>>,
    next_id: std::sync::atomic::AtomicU64,
}

type Received = (u64, ChunkMsg);

#[derive(Debug, Default)]
struct Routes {
    /// Requests waiting for their response.
    waiting: HashMap<u64, oneshot::Sender<Result<mpsc::UnboundedReceiver<Received>, String>>>,
    /// Streams being received.
    streams: HashMap<String, mpsc::UnboundedSender<Received>>,
    /// Chunks that came before their stream's `run` response.
    early: HashMap<String, Vec<Received>>,
}

impl StdioMux {
    /// Takes over the server's stdin and stdout.
    pub fn new(stdin: std::process::ChildStdin, stdout: std::process::ChildStdout) -> Arc<Self> {
        let stdin = tokio::process::ChildStdin::from_std(stdin).expect("stdin in the runtime");
        let stdout = tokio::process::ChildStdout::from_std(stdout).expect("stdout in the runtime");
        let routes: Arc<std::sync::Mutex<Routes>> = Arc::default();
        let reader_routes = Arc::clone(&routes);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let now = monotonic_ns();
                if let Ok(msg) = serde_json::from_str::<RpcMsg>(&line) {
                    route(&reader_routes, msg, now);
                }
            }
        });
        Arc::new(Self {
            writer: tokio::sync::Mutex::new(stdin),
            routes,
            next_id: std::sync::atomic::AtomicU64::new(1),
        })
    }

    pub(super) async fn stream(
        &self,
        prompt: &str,
        spec: StreamSpec,
        totals: &mut Totals,
    ) -> Result<(), String> {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.routes.lock().expect("routes").waiting.insert(id, tx);
        let mut line = run_request(id, prompt, spec.tokens);
        line.push('\n');
        let sent = monotonic_ns();
        self.writer
            .lock()
            .await
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("stdio write: {e}"))?;
        let mut chunks = rx.await.map_err(|_| "stdio closed".to_owned())??;
        let mut first = true;
        while let Some((now, chunk)) = chunks.recv().await {
            if chunk.end {
                end_chunk(totals, &chunk);
                return Ok(());
            }
            totals.chunk(sent, now, chunk.produced_ns, &mut first);
        }
        Err("stdio closed mid-stream".into())
    }
}

fn route(routes: &std::sync::Mutex<Routes>, msg: RpcMsg, now: u64) {
    let mut routes = routes.lock().expect("routes");
    if let Some(chunk) = msg.params {
        let Some(id) = chunk.stream_id.clone() else {
            return;
        };
        let end = chunk.end;
        match routes.streams.get(&id) {
            Some(tx) => {
                let _ = tx.send((now, chunk));
                if end {
                    routes.streams.remove(&id);
                }
            }
            None => routes.early.entry(id).or_default().push((now, chunk)),
        }
        return;
    }
    let Some(waiter) = msg.id.and_then(|id| routes.waiting.remove(&id)) else {
        return;
    };
    let Some(stream_id) = msg.result.and_then(|r| r.stream_id) else {
        let _ = waiter.send(Err(format!("run failed: {:?}", msg.error)));
        return;
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let mut ended = false;
    for early in routes.early.remove(&stream_id).unwrap_or_default() {
        ended |= early.1.end;
        let _ = tx.send(early);
    }
    if !ended {
        routes.streams.insert(stream_id, tx);
    }
    let _ = waiter.send(Ok(rx));
}
