//! Starts the real `rkllm-server` binary on 127.0.0.1:0 and talks to it
//! as clients do: an HTTP client (reqwest) and a WebSocket client
//! (tokio-tungstenite).

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Upper bound on any single wait in these tests, so a broken server
/// fails a test instead of hanging it. Not a performance assertion.
pub const LIVENESS: Duration = Duration::from_secs(60);

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// A scratch directory removed on drop.
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    pub fn new() -> Self {
        let n = NEXT_DIR.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("rkllm-e2e-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Self(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A config file body for the mock backend.
pub fn mock_config(tokens_per_second: f64, prefill_ms: u64, extra: &str) -> String {
    format!(
        "[mock]\ntokens_per_second = {tokens_per_second:?}\nprefill_ms = {prefill_ms}\n{extra}\n"
    )
}

/// The server binary under test: the one Cargo built with the tests, or
/// `RKLLM_E2E_SERVER` (the aarch64 release binary, run under an emulator
/// named by `RKLLM_E2E_RUNNER`: cross/test-aarch64.sh).
pub fn server_binary() -> String {
    std::env::var("RKLLM_E2E_SERVER")
        .ok()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_rkllm-server").to_owned())
}

/// Whether the server runs under an emulator (`RKLLM_E2E_RUNNER`).
pub fn emulated() -> bool {
    std::env::var("RKLLM_E2E_RUNNER").is_ok_and(|r| !r.trim().is_empty())
}

/// How many times a server that hangs before it has started (or failed to
/// start) is tried: once natively; twice under qemu-user, which now and
/// then hangs a freshly started multi-threaded process on a loaded machine
/// (seen twice in CI, never reproduced in hundreds of runs; the same start
/// runs natively in every suite without retry). The retry is announced.
fn start_attempts() -> usize {
    if emulated() { 2 } else { 1 }
}

/// A command that runs the server binary. When the tests run for another
/// architecture under an emulator, `RKLLM_E2E_RUNNER` names it (for
/// example `qemu-aarch64 -L /usr/aarch64-linux-gnu`) and prefixes the
/// server too. Inherited `RKLLM_SERVER_*` variables are removed.
pub fn server_command() -> Command {
    server_command_under(&[])
}

/// [`server_command`] run by the command `prefix` (a program and its
/// arguments, the server's command line following them), such as
/// `unshare` putting it in a namespace of its own.
pub fn server_command_under(prefix: &[OsString]) -> Command {
    let runner = std::env::var("RKLLM_E2E_RUNNER").unwrap_or_default();
    let words: Vec<OsString> = prefix
        .iter()
        .cloned()
        .chain(runner.split_whitespace().map(OsString::from))
        .chain([OsString::from(server_binary())])
        .collect();
    let mut command = Command::new(&words[0]);
    command.args(&words[1..]);
    for (key, _) in std::env::vars() {
        if key.starts_with("RKLLM_SERVER_") || key.starts_with("FAKE_RKLLM_") {
            command.env_remove(key);
        }
    }
    // Never the developer's own model store: an empty one of the tests.
    command.env(
        "XDG_DATA_HOME",
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("no-store"),
    );
    if !runner.trim().is_empty() {
        // Runner processes are the same binary: under the emulator too.
        command.env("RKLLM_SERVER_RUNNER_PREFIX", runner.trim());
    }
    command
}

/// Before a server on the runtime double starts, probes its models' runtime
/// as an operator would (`doctor --probe --local --no-measure`), so that the
/// server finds the verdicts kept and the double's log (`FAKE_RKLLM_LOG`)
/// holds only the runs of the test's requests. A test of the probes at
/// load sets `RKLLM_E2E_PROBE_AT_LOAD` in the server's environment. A
/// model that does not load here is left for the server to probe.
fn probe_before(
    config: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
    prefix: &[OsString],
    scratch: &std::path::Path,
) {
    let on_double = args.windows(2).any(|w| w == ["--backend", "rkllm"])
        && env.iter().any(|(k, _)| *k == "FAKE_RKLLM_LOG");
    if !on_double || env.iter().any(|(k, _)| *k == "RKLLM_E2E_PROBE_AT_LOAD") {
        return;
    }
    let elsewhere = scratch.join("probe-before.log");
    let mut command = server_command_under(prefix);
    command
        .arg("--config")
        .arg(config)
        .args(args)
        .envs(env.iter().copied())
        .env("FAKE_RKLLM_LOG", &elsewhere)
        .args(["doctor", "--probe", "--local", "--no-measure", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _ = command.status();
}

/// Which build of the fake runtime (tests/fake-rkllmrt) a test needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fake {
    /// ABI 1.3.0, version 1.3.0.
    V1_3,
    /// ABI 1.2.1-1.2.3, version 1.2.3.
    V1_2,
    /// ABI 1.3.0 without `rkllm_abort`.
    V1_3WithoutAbort,
    /// ABI 1.3.0 carrying an unknown version, 9.9.9.
    UnknownVersion,
}

/// Builds (once per test process) and returns the fake runtime library.
/// The C compiler is `RKLLM_FAKE_CC` (default `cc`), so the fake can be
/// built for the target the tests run on.
pub fn fake_runtime(fake: Fake) -> PathBuf {
    let (name, defines): (&str, &[&str]) = match fake {
        Fake::V1_3 => ("v1_3", &["-DFAKE_ABI_V1_3"]),
        Fake::V1_2 => ("v1_2", &["-DFAKE_ABI_V1_2"]),
        Fake::V1_3WithoutAbort => ("no_abort", &["-DFAKE_ABI_V1_3", "-DFAKE_OMIT_ABORT"]),
        Fake::UnknownVersion => ("v9_9_9", &["-DFAKE_ABI_V1_3", "-DFAKE_VERSION=\"9.9.9\""]),
    };
    build_fake(
        &format!("librkllmrt-fake-{name}"),
        "tests/fake-rkllmrt/fake_rkllmrt.c",
        "rkllm-sys/include",
        defines,
    )
}

/// Builds (once per test process) and returns the fake RKNN runtime
/// (tests/fake-rknnrt), with `RKLLM_FAKE_CC` like [`fake_runtime`].
pub fn fake_rknn_runtime() -> PathBuf {
    build_fake(
        "librknnrt-fake",
        "tests/fake-rknnrt/fake_rknnrt.c",
        "rknn-sys/include",
        &[],
    )
}

/// Compiles a test double `source` (with the headers in `include`) into
/// a shared library named `name`, once per test process.
fn build_fake(name: &str, source: &str, include: &str, defines: &[&str]) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap();
    if let Some((_, path)) = built.iter().find(|(n, _)| n == name) {
        return path.clone();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fakes");
    std::fs::create_dir_all(&dir).expect("fake runtime dir");
    let out = dir.join(format!("{name}-{}.so", std::process::id()));
    let cc = std::env::var("RKLLM_FAKE_CC").unwrap_or_else(|_| "cc".to_owned());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror"])
        .args(defines)
        .arg("-I")
        .arg(root.join(include))
        .arg(root.join(source))
        .arg("-o")
        .arg(&out)
        .arg("-lpthread")
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc}: {e}"));
    assert!(status.success(), "building {source} failed");
    built.push((name.to_owned(), out.clone()));
    out
}

/// Runs the server expecting it to fail at start; returns the exit code
/// and what it wrote on stderr.
pub fn start_failure(args: &[&str], env: &[(&str, &str)], config: Option<&str>) -> (i32, String) {
    let dir = ScratchDir::new();
    let mut attempt = 0;
    let (status, reader) = loop {
        attempt += 1;
        let mut command = server_command();
        if let Some(config) = config {
            let path = dir.0.join("bad.toml");
            std::fs::write(&path, config).unwrap();
            command.arg("--config").arg(path);
        }
        if !args.iter().any(|a| a.starts_with("--listen")) {
            // Should it start after all, it must not take a real port.
            command.args(["--listen", "127.0.0.1:0"]);
        }
        let mut child = command
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run rkllm-server");
        let mut stderr = child.stderr.take().expect("stderr");
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
            text
        });
        let deadline = std::time::Instant::now() + LIVENESS;
        let exited = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break Some(status);
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        match exited {
            Some(status) => break (status, reader),
            None => {
                let said = reader.join().unwrap_or_default();
                assert!(
                    attempt < start_attempts(),
                    "the server started although it should have failed: {args:?}; it printed: {said}"
                );
                eprintln!(
                    "note: the emulated server neither started nor exited within {LIVENESS:?} \
                     (it printed: {said:?}); trying once more: {args:?}"
                );
            }
        }
    };
    let stderr = reader.join().unwrap_or_default();
    let code = status
        .code()
        .unwrap_or_else(|| panic!("the server was killed by a signal: {status:?}, {stderr}"));
    (code, stderr)
}

/// A running server.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// The `--tcp` line protocol address, when started with one.
    pub tcp_addr: Option<SocketAddr>,
    pub http: reqwest::Client,
    log: Arc<Mutex<Vec<String>>>,
    /// The thread that reads its stderr into `log`, until it closes.
    reader: Option<std::thread::JoinHandle<()>>,
    _dir: ScratchDir,
}

impl Server {
    /// Starts the server with a config file and extra flags.
    pub fn start(config: &str, args: &[&str]) -> Self {
        Self::start_env(config, args, &[])
    }

    /// Starts the server with a config file, extra flags and environment.
    pub fn start_env(config: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_prepared(config, args, env, |_| {})
    }

    /// Starts the server on the rkllm backend over the runtime test double
    /// of `fake`, which logs its events to `log` and gives its tokens at
    /// once; `args` and `env` come on top.
    pub fn start_on_fake(
        config: &str,
        fake: Fake,
        log: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let runtime = fake_runtime(fake);
        let mut all_args = vec!["--backend", "rkllm", "--runtime", runtime.to_str().unwrap()];
        all_args.extend_from_slice(args);
        let mut all_env = vec![
            ("FAKE_RKLLM_LOG", log.to_str().unwrap()),
            ("FAKE_RKLLM_TOKEN_MS", "0"),
        ];
        all_env.extend_from_slice(env);
        Self::start_env(config, &all_args, &all_env)
    }

    /// Starts the server like [`Server::start_env`], with `prepare` applied
    /// to its command first (to set a resource limit, say).
    pub fn start_prepared(
        config: &str,
        args: &[&str],
        env: &[(&str, &str)],
        prepare: impl Fn(&mut Command),
    ) -> Self {
        Self::start_with(config, args, env, &[], prepare)
    }

    /// Starts the server like [`Server::start_env`], run by the command
    /// `prefix` ([`server_command_under`]).
    pub fn start_under(
        prefix: &[OsString],
        config: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_with(config, args, env, prefix, |_| {})
    }

    fn start_with(
        config: &str,
        args: &[&str],
        env: &[(&str, &str)],
        prefix: &[OsString],
        prepare: impl Fn(&mut Command),
    ) -> Self {
        let dir = ScratchDir::new();
        let path = dir.0.join("rkllm-server.toml");
        std::fs::write(&path, config).expect("write config");
        probe_before(&path, args, env, prefix, &dir.0);
        let mut attempt = 0;
        let (child, log, reader, addr, tcp_addr) = loop {
            attempt += 1;
            let mut command = server_command_under(prefix);
            command
                .arg("--config")
                .arg(&path)
                .args(["--listen", "127.0.0.1:0", "--log-level", "info"])
                .args(args)
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            prepare(&mut command);
            let mut child = command.spawn().expect("spawn rkllm-server");
            let stderr = child.stderr.take().expect("stderr");
            let log = Arc::new(Mutex::new(Vec::new()));
            let (addr_tx, addr_rx) = mpsc::channel();
            let log_sink = Arc::clone(&log);
            let reader = std::thread::spawn(move || {
                let mut tcp = None;
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(addr) = line.strip_prefix("rkllm-server line protocol on tcp://") {
                        tcp = addr.parse::<SocketAddr>().ok();
                    }
                    if let Some(addr) = line.strip_prefix("rkllm-server listening on http://") {
                        let _ = addr_tx
                            .send((addr.parse::<SocketAddr>().expect("listen address"), tcp));
                    }
                    log_sink.lock().unwrap().push(line);
                }
            });
            match addr_rx.recv_timeout(LIVENESS) {
                Ok((addr, tcp_addr)) => break (child, log, reader, addr, tcp_addr),
                Err(why) => {
                    // How it ended says why: a crash, an exit, or still running.
                    let status = child.try_wait();
                    let _ = child.kill();
                    let _ = child.wait();
                    let hung = matches!(status, Ok(None));
                    assert!(
                        hung && attempt < start_attempts(),
                        "server did not start ({why:?}; exit status {status:?}): {:?}",
                        log.lock().unwrap()
                    );
                    eprintln!(
                        "note: the emulated server did not start within {LIVENESS:?} and is \
                         still running (it printed: {:?}); trying once more",
                        log.lock().unwrap()
                    );
                }
            }
        };
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .timeout(LIVENESS)
            .build()
            .expect("http client");
        Self {
            child,
            addr,
            tcp_addr,
            http,
            log,
            reader: Some(reader),
            _dir: dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Posts a raw body to `/mcp`; returns the status and the body text.
    pub async fn post_raw(&self, body: impl Into<reqwest::Body>) -> (u16, String) {
        let response = self
            .http
            .post(self.mcp_url())
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("POST /mcp");
        let status = response.status().as_u16();
        (status, response.text().await.expect("body"))
    }

    /// Sends one JSON-RPC request over HTTP and returns the whole response.
    pub async fn call(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let (status, text) = self.post_raw(body.to_string()).await;
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).expect("JSON response")
    }

    /// Sends `body` as JSON to `path` (with the API key `key`, if any).
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        key: Option<&str>,
    ) -> reqwest::Response {
        let mut request = self
            .http
            .request(method, format!("http://{}{path}", self.addr));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.expect("HTTP request")
    }

    /// Sends `body` as JSON to `path`, waiting up to `wait` for the answer
    /// instead of [`LIVENESS`]: for a request that is expected to wait for
    /// many others queued before it.
    pub async fn send_waiting(&self, path: &str, body: Value, wait: Duration) -> reqwest::Response {
        self.http
            .post(format!("http://{}{path}", self.addr))
            .json(&body)
            .timeout(wait)
            .send()
            .await
            .unwrap_or_else(|e| panic!("HTTP request to {path} (waited up to {wait:?}): {e}"))
    }

    /// `GET path` (with the API key `key`, if any) as JSON.
    pub async fn get_json(&self, path: &str, key: Option<&str>) -> Value {
        self.send(reqwest::Method::GET, path, None, key)
            .await
            .json()
            .await
            .expect("a JSON body")
    }

    /// `POST path` with a JSON `body` (no API key); the answer as JSON.
    pub async fn post_json(&self, path: &str, body: Value) -> Value {
        self.send(reqwest::Method::POST, path, Some(body), None)
            .await
            .json()
            .await
            .expect("a JSON body")
    }

    /// The `result` of a call that must succeed.
    pub async fn ok(&self, method: &str, params: Value) -> Value {
        let response = self.call(method, params).await;
        assert!(
            response.get("error").is_none(),
            "{method} failed: {response}"
        );
        response["result"].clone()
    }

    /// The error code of a call that must fail.
    pub async fn error_code(&self, method: &str, params: Value) -> i64 {
        let response = self.call(method, params).await;
        response["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("{method} should fail: {response}"))
    }

    /// Polls a stream to its end with long polls; returns every chunk.
    pub async fn poll_to_end(&self, stream_id: &str) -> Vec<Value> {
        let mut chunks = Vec::new();
        let mut from_seq = 0;
        loop {
            let result = self
                .ok(
                    "run",
                    json!({"stream_id": stream_id, "from_seq": from_seq, "wait_ms": 5000}),
                )
                .await;
            for chunk in result["chunks"].as_array().expect("chunks") {
                from_seq = chunk["seq"].as_u64().expect("seq") + 1;
                chunks.push(chunk.clone());
            }
            if result["has_more"] == json!(false) {
                return chunks;
            }
        }
    }

    /// The text of `GET /metrics`.
    pub async fn metrics_text(&self) -> String {
        let url = format!("http://{}/metrics", self.addr);
        self.http
            .get(url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Waits (bounded) until `stream_status` reports `state`.
    pub async fn wait_state(&self, stream_id: &str, state: &str) {
        let deadline = tokio::time::Instant::now() + LIVENESS;
        loop {
            let status = self
                .ok("stream_status", json!({"stream_id": stream_id}))
                .await;
            if status["state"] == state {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "stream never reached {state}: {status}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Stops the server (SIGTERM) and returns its whole log: every line it
    /// wrote to stderr before it exited, its runners' lines included (a
    /// runner's stderr is read to its end before the server exits).
    pub fn stop_and_log(&mut self) -> Vec<String> {
        self.terminate();
        assert!(self.wait_exit().success(), "{:?}", self.log());
        if let Some(reader) = self.reader.take() {
            let deadline = std::time::Instant::now() + LIVENESS;
            while !reader.is_finished() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the server's stderr did not close"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            reader.join().expect("the log reader");
        }
        self.log()
    }

    /// Waits for the process to exit (bounded by [`LIVENESS`]).
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = std::time::Instant::now() + LIVENESS;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A WebSocket JSON-RPC client.
pub struct Ws {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: i64,
}

impl Ws {
    pub async fn connect(server: &Server) -> Self {
        let (socket, _) = tokio_tungstenite::connect_async(server.ws_url())
            .await
            .expect("WebSocket connect");
        Self {
            socket,
            next_id: 1000,
        }
    }

    pub async fn send_text(&mut self, text: &str) {
        self.socket
            .send(Message::Text(text.into()))
            .await
            .expect("send");
    }

    /// Sends a request with a fresh integer id; returns the id.
    pub async fn request(&mut self, method: &str, params: Value) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_text(&message.to_string()).await;
        id
    }

    /// The next JSON message (bounded wait).
    pub async fn recv(&mut self) -> Value {
        loop {
            let frame = tokio::time::timeout(LIVENESS, self.socket.next())
                .await
                .expect("no message from the server")
                .expect("socket closed")
                .expect("socket error");
            match frame {
                Message::Text(text) => return serde_json::from_str(&text).expect("JSON"),
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }

    /// The next message, or `None` if the socket closed.
    pub async fn recv_or_close(&mut self) -> Option<Value> {
        loop {
            let frame = tokio::time::timeout(LIVENESS, self.socket.next())
                .await
                .expect("no message from the server");
            match frame {
                Some(Ok(Message::Text(text))) => {
                    return Some(serde_json::from_str(&text).expect("JSON"));
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                _ => return None,
            }
        }
    }

    /// Waits for the response with `id`, collecting notifications met on
    /// the way into `notes`.
    pub async fn response(&mut self, id: i64, notes: &mut Vec<Value>) -> Value {
        loop {
            let message = self.recv().await;
            if message.get("id") == Some(&json!(id)) {
                return message;
            }
            assert!(
                message.get("method").is_some(),
                "unexpected message {message}"
            );
            notes.push(message);
        }
    }

    /// Starts a stream with `run` (`stream: true` is added) and returns its
    /// id with the notifications that arrived before the response.
    pub async fn start_stream(&mut self, mut params: Value) -> (String, Vec<Value>) {
        params["stream"] = json!(true);
        let id = self.request("run", params).await;
        let mut notes = Vec::new();
        let response = self.response(id, &mut notes).await;
        let stream_id = response["result"]["stream_id"]
            .as_str()
            .unwrap_or_else(|| panic!("run failed: {response}"))
            .to_owned();
        (stream_id, notes)
    }

    /// Collects pushed chunks of `stream_id` until its end chunk.
    pub async fn chunks_to_end(&mut self, stream_id: &str, mut notes: Vec<Value>) -> Vec<Value> {
        let mut chunks = Vec::new();
        loop {
            let note = match notes.is_empty() {
                true => self.recv().await,
                false => notes.remove(0),
            };
            assert_eq!(note["method"], "run", "{note}");
            if note["params"]["stream_id"] != stream_id {
                continue;
            }
            let end = note["params"]["end"] == json!(true);
            chunks.push(note["params"].clone());
            if end {
                return chunks;
            }
        }
    }

    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}

/// Checks the chunk invariants and returns the joined text.
pub fn check_chunks(chunks: &[Value]) -> String {
    assert!(!chunks.is_empty());
    let mut text = String::new();
    for (i, chunk) in chunks.iter().enumerate() {
        assert_eq!(
            chunk["seq"],
            json!(i as u64),
            "seq numbers must be contiguous from 0"
        );
        let last = i + 1 == chunks.len();
        assert_eq!(
            chunk["end"],
            json!(last),
            "exactly one end chunk, and it is last: {chunk}"
        );
        let delta = chunk["delta"].as_str().expect("delta is a string");
        assert!(
            !delta.contains('\u{FFFD}'),
            "a split character reached a delta: {delta:?}"
        );
        if !last {
            assert!(!delta.is_empty(), "empty delta in {chunk}");
        }
        text.push_str(delta);
    }
    let end = chunks.last().unwrap();
    assert!(end["finish_reason"].is_string(), "{end}");
    assert!(end["usage"]["completion_tokens"].is_u64(), "{end}");
    text
}

/// `POST path` with a JSON body that must succeed; the response's text.
pub async fn post_text(server: &Server, path: &str, body: Value) -> String {
    let response = server
        .send(reqwest::Method::POST, path, Some(body), None)
        .await;
    let status = response.status();
    let text = response.text().await.expect("a body");
    assert_eq!(status, 200, "{path}: {text}");
    text
}

/// An SSE response's `data:` events, `[DONE]` last.
pub async fn sse(server: &Server, path: &str, body: Value) -> Vec<Value> {
    let text = post_text(server, path, body).await;
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("an SSE event is JSON"))
        .collect()
}

/// An NDJSON response's lines, `done: true` last.
pub async fn ndjson(server: &Server, path: &str, body: Value) -> Vec<Value> {
    let text = post_text(server, path, body).await;
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("an NDJSON line is JSON"))
        .collect();
    assert_eq!(
        lines.last().map(|l| &l["done"]),
        Some(&json!(true)),
        "{text}"
    );
    lines
}

/// The mock's tokenizer, `server/assets/mock-tokenizer.json` (the runtime
/// test double's vocabulary in logits mode).
pub fn mock_tokenizer() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/mock-tokenizer.json")
}

/// The mock's tokenizer ([`mock_tokenizer`]) with `tokens` added after its
/// own, each with whether it is special.
pub fn mock_tokenizer_with(tokens: &[(&str, bool)]) -> String {
    let text = std::fs::read_to_string(mock_tokenizer()).unwrap();
    let mut json: Value = serde_json::from_str(&text).unwrap();
    let added = json["added_tokens"].as_array_mut().unwrap();
    let next = added.iter().filter_map(|t| t["id"].as_u64()).max().unwrap() + 1;
    for (i, (token, special)) in tokens.iter().enumerate() {
        added.push(serde_json::json!({"id": next + i as u64, "content": token,
            "single_word": false, "lstrip": false, "rstrip": false, "normalized": false,
            "special": special}));
    }
    json.to_string()
}

/// ChatML as a model's own (Jinja) chat template: a chat is sent whole,
/// rendered with it, and each render starts with the previous one.
pub const CHATML_JINJA: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A loopback port nothing listens on: free just now, and below the
/// kernel's range for ephemeral ports, so that no server another test
/// starts on port 0 can be given it in between.
pub fn closed_port() -> u16 {
    (20_000..32_000)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free port below the ephemeral range")
}

/// The value of the series `name` of model `model` in a `GET /metrics`
/// text, summed over the series that also carry each of `labels`; `None`
/// when there is none.
pub fn model_metric(
    metrics: &str,
    name: &str,
    model: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    let model = format!("model=\"{model}\"");
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|rest| rest.split_once("} "))
        .filter(|(set, _)| {
            let set: Vec<&str> = set.split(',').collect();
            set.contains(&model.as_str()) && wanted.iter().all(|w| set.contains(&w.as_str()))
        })
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .fold(None, |sum, v| Some(sum.unwrap_or(0.0) + v))
}

/// What [`CHATML_JINJA`] renders for `messages` (role, text), as the
/// server sends it.
pub fn render_chatml(messages: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (role, text) in messages {
        out.push_str(&format!("<|im_start|>{role}\n{text}<|im_end|>\n"));
    }
    out + "<|im_start|>assistant\n"
}
