//! The stdio and TCP line transports, driven over real pipes and sockets,
//! and `rkllm-client`'s handling of a child server.

use std::process::Stdio;
use std::time::Duration;

use rkllm_client::{Client, CloseStage};
use rkllm_server::transport::chunked::FrameAssembler;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::harness::{
    Fake, LIVENESS, ScratchDir, Server, fake_runtime, mock_config, server_command,
};

/// A server started with `--stdio`, spoken to over raw pipes.
struct StdioServer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    _dir: ScratchDir,
}

impl StdioServer {
    fn start(config: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = ScratchDir::new();
        let path = dir.0.join("stdio.toml");
        std::fs::write(&path, config).unwrap();
        let mut command = tokio::process::Command::from(server_command());
        command
            .arg("--stdio")
            .arg("--config")
            .arg(&path)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("spawn --stdio");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
            _dir: dir,
        }
    }

    async fn write(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).await.unwrap();
        stdin.flush().await.unwrap();
    }

    async fn line(&mut self) -> String {
        let mut line = String::new();
        let n = tokio::time::timeout(LIVENESS, self.stdout.read_line(&mut line))
            .await
            .expect("no output from the server")
            .unwrap();
        assert!(n > 0, "the server closed its output");
        line
    }

    async fn message(&mut self) -> Value {
        let line = self.line().await;
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    }

    /// Closes stdin and reads everything until the process exits.
    async fn finish(mut self) -> (std::process::ExitStatus, Vec<String>, String) {
        drop(self.stdin.take());
        let mut rest = String::new();
        tokio::time::timeout(LIVENESS, self.stdout.read_to_string(&mut rest))
            .await
            .unwrap()
            .unwrap();
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = tokio::time::timeout(LIVENESS, err.read_to_string(&mut stderr)).await;
        }
        let status = tokio::time::timeout(LIVENESS, self.child.wait())
            .await
            .unwrap()
            .unwrap();
        (status, rest.lines().map(str::to_owned).collect(), stderr)
    }
}

fn request(id: i64, method: &str, params: Value) -> String {
    format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    )
}

#[tokio::test]
async fn hostile_input_over_real_pipes_gets_errors_and_the_transport_goes_on() {
    let config = mock_config(
        0.0,
        0,
        "[limits]\nmax_request_bytes = 4096\nmax_prompt_bytes = 1024\n",
    );
    let mut server = StdioServer::start(&config, &[], &[]);
    let long = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":77,\"pad\":\"{}\"}}\n",
        "x".repeat(20_000)
    );
    // (input, expected error code, expected id); each is followed by a ping.
    let cases: Vec<(Vec<u8>, Option<i64>, Value)> = vec![
        (long.into_bytes(), Some(-32007), json!(77)),
        (
            b"\xff\xfe{\"jsonrpc\":\"2.0\"}\n".to_vec(),
            Some(-32700),
            Value::Null,
        ),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\n".to_vec(),
            Some(-32700),
            json!(5),
        ),
        (b"\n\n\r\n   \n\t\n".repeat(2000), None, Value::Null),
        (
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}\r\n"
                .as_bytes()
                .to_vec(),
            None,
            Value::Null,
        ),
        (b"not json\n".to_vec(), Some(-32700), Value::Null),
        (b"[]\n".to_vec(), Some(-32600), Value::Null),
        (
            b"{\"jsonrpc\":\"2.0\",\"method\":\"nope\"}\n".to_vec(),
            None,
            Value::Null,
        ),
    ];
    let mut ping_id = 1000;
    for (input, code, id) in cases {
        // Split every input in awkward places.
        for piece in input.chunks(7) {
            server.write(piece).await;
        }
        ping_id += 1;
        server
            .write(request(ping_id, "ping", json!({})).as_bytes())
            .await;
        let mut got_ping = false;
        let mut got_error = code.is_none();
        while !got_ping || !got_error {
            let message = server.message().await;
            if message["id"] == ping_id {
                assert_eq!(message["result"], json!({}));
                got_ping = true;
            } else if message["id"] == 6 {
                assert_eq!(message["result"], json!({}), "CRLF and a BOM are accepted");
            } else {
                assert_eq!(message["error"]["code"], json!(code.unwrap()), "{message}");
                assert_eq!(message["id"], id, "{message}");
                got_error = true;
            }
        }
    }
    let (status, rest, stderr) = server.finish().await;
    assert!(status.success(), "{status:?} {stderr}");
    assert!(rest.is_empty(), "{rest:?}");
    assert!(
        stderr.contains("line over the limit"),
        "bad input is logged: {stderr}"
    );
    assert!(
        !stderr.contains(&"x".repeat(200)),
        "logs show only a short preview"
    );
}

#[tokio::test]
async fn requests_are_served_concurrently_so_ping_and_abort_answer_during_a_generation() {
    let server = server_command();
    let program = server.get_program().to_string_lossy().into_owned();
    let mut args: Vec<String> = server
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    args.extend(["--stdio", "--mock-tokens-per-second", "20"].map(String::from));
    let mut client = Client::spawn(&program, &args, &[]).unwrap();
    let init = client.initialize().await.unwrap();
    assert_eq!(init["capabilities"]["streaming"], true);
    let started = client
        .request(
            "run",
            json!({"prompt": "long @mock(length=100000)", "stream": true}),
            |_| {},
        )
        .await
        .unwrap();
    let stream_id = started["stream_id"].as_str().unwrap().to_owned();
    let mut chunks = Vec::new();
    client
        .request("ping", json!({}), |n| chunks.push(n.clone()))
        .await
        .unwrap();
    while chunks.len() < 2 {
        chunks.push(client.next_message().await.unwrap().unwrap());
    }
    let aborted = client
        .request("abort", json!({"stream_id": stream_id}), |n| {
            chunks.push(n.clone())
        })
        .await;
    assert_eq!(aborted.unwrap(), json!({"aborted": true}));
    let end = loop {
        let note = match chunks.iter().position(|c| c["params"]["end"] == true) {
            Some(i) => chunks.remove(i),
            None => client.next_message().await.unwrap().unwrap(),
        };
        if note["params"]["end"] == true {
            break note;
        }
    };
    assert_eq!(end["params"]["finish_reason"], "abort");
    assert!(client.is_alive());
    let (stage, status) = client.close().await.unwrap().unwrap();
    assert_eq!(stage, CloseStage::Exited);
    assert!(status.success());
}

#[tokio::test]
async fn on_stdin_eof_accepted_requests_are_answered_and_the_process_exits_zero() {
    let mut server = StdioServer::start(&mock_config(200.0, 0, ""), &[], &[]);
    server
        .write(request(1, "run", json!({"prompt": "eof @mock(length=30)"})).as_bytes())
        .await;
    server
        .write(
            request(
                2,
                "tools/call",
                json!({"name": "generate", "arguments": {"prompt": "eof too"}}),
            )
            .as_bytes(),
        )
        .await;
    let (status, lines, _) = server.finish().await;
    assert!(status.success(), "{status:?}");
    let answers: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let run = answers.iter().find(|m| m["id"] == 1).expect("run answered");
    assert!(
        run["result"]["usage"]["completion_tokens"]
            .as_u64()
            .unwrap()
            > 0,
        "{run}"
    );
    let tool = answers
        .iter()
        .find(|m| m["id"] == 2)
        .expect("tools/call answered");
    assert_eq!(tool["result"]["isError"], false, "{tool}");
}

#[tokio::test]
async fn the_runtimes_own_prints_never_reach_the_protocol_output() {
    let dir = ScratchDir::new();
    let model = dir.0.join("m.rkllm");
    std::fs::write(&model, "Hello 東京 🦀").unwrap();
    let runtime = fake_runtime(Fake::V1_3);
    let args = [
        "--backend",
        "rkllm",
        "--runtime",
        runtime.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
    ];
    let mut server = StdioServer::start(&mock_config(0.0, 0, ""), &args, &[]);
    for id in 1..=3 {
        server
            .write(request(id, "run", json!({"prompt": "hi"})).as_bytes())
            .await;
        let message = server.message().await;
        assert_eq!(message["result"]["text"], "Hello 東京 🦀", "{message}");
    }
    let (status, rest, stderr) = server.finish().await;
    assert!(status.success());
    assert!(
        rest.iter()
            .all(|l| serde_json::from_str::<Value>(l).is_ok()),
        "{rest:?}"
    );
    assert!(
        stderr.contains("I rkllm: rkllm-runtime version"),
        "the runtime's prints went to stderr: {stderr}"
    );
    assert!(stderr.contains("I rkllm: fake run started"), "{stderr}");
}

#[tokio::test]
async fn chunked_framing_reassembles_interleaved_input_and_frames_large_output() {
    // The buffer limit is raised: on a busy machine the unthrottled mock can
    // run far ahead of the reader, and this test is about framing.
    let config = mock_config(
        0.0,
        0,
        "[limits]\nmax_tokens = 60000\n[streams]\nmax_stream_bytes = 67108864\n",
    );
    let mut server = StdioServer::start(&config, &["--stdio-framing", "chunked"], &[]);
    let a = request(
        1,
        "run",
        json!({"prompt": "framed request one", "max_tokens": 5}),
    );
    let b = request(2, "ping", json!({}));
    let (a, b) = (a.trim_end(), b.trim_end());
    let (a1, a2) = a.split_at(a.len() / 2);
    let (b1, b2) = b.split_at(b.len() / 3);
    let frames = format!(
        "A:1:2:{a2}\nB:0:2:{b1}\n{{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}}\nA:0:2:{a1}\nB:1:2:{b2}\n"
    );
    server.write(frames.as_bytes()).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(server.message().await);
    }
    for id in [1, 2, 3] {
        let m = seen
            .iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("{id}: {seen:?}"));
        assert!(m.get("result").is_some(), "{m}");
    }
    // A bad frame and a garbage frame fail alone; the transport goes on.
    server.write(b"C:5:2:nope\nD:0:x:y\n").await;
    for _ in 0..2 {
        assert_eq!(server.message().await["error"]["code"], -32600);
    }
    // A large answer comes back as frames that reassemble.
    server
        .write(
            request(
                4,
                "run",
                json!({"prompt": "big @mock(length=50000)", "max_tokens": 60000}),
            )
            .as_bytes(),
        )
        .await;
    let mut assembler = FrameAssembler::new(16 << 20, 4, Duration::from_secs(30));
    let whole = loop {
        let line = server.line().await;
        let line = line.trim_end();
        assert!(!line.starts_with('{'), "a large message must be framed");
        assert!(line.len() <= 61 * 1024, "frames are at most 60 KiB of data");
        if let Some(whole) = assembler.push(line, std::time::Instant::now()).unwrap() {
            break whole;
        }
    };
    let message: Value = serde_json::from_str(&whole).unwrap();
    assert_eq!(message["id"], 4);
    assert!(
        message["result"]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{message}"))
            .len()
            > 60 * 1024
    );
    // A message whose chunks stop coming fails at EOF.
    server.write(b"E:0:3:{\"jsonrpc\"\n").await;
    let (status, rest, _) = server.finish().await;
    assert!(status.success());
    let last: Value =
        serde_json::from_str(rest.last().expect("an error for the truncated message")).unwrap();
    assert_eq!(last["error"]["code"], -32600);
    assert_eq!(last["error"]["data"]["messageId"], "E");
}

#[tokio::test]
async fn tcp_serves_the_same_line_protocol() {
    let server = Server::start(&mock_config(0.0, 0, ""), &["--tcp", "127.0.0.1:0"]);
    let addr = server.tcp_addr.expect("the tcp address is printed");
    let socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (reader, mut writer) = socket.into_split();
    let mut reader = BufReader::new(reader);
    writer
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"run\",\"params\":{\"prompt\":\"tcp\"}}\n",
        )
        .await
        .unwrap();
    writer.write_all(b"garbage\n").await.unwrap();
    let mut answers = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        tokio::time::timeout(LIVENESS, reader.read_line(&mut line))
            .await
            .unwrap()
            .unwrap();
        answers.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    let run = answers.iter().find(|m| m["id"] == 1).unwrap();
    let http = server.ok("run", json!({"prompt": "tcp"})).await;
    assert_eq!(run["result"]["text"], http["text"]);
    assert!(answers.iter().any(|m| m["error"]["code"] == -32700));
}

#[tokio::test]
async fn the_client_escalates_to_sigterm_and_sigkill_for_a_child_that_ignores_stdin_eof() {
    let client = Client::spawn("sleep", &["30".into()], &[]).unwrap();
    let (stage, _) = client.close().await.unwrap().unwrap();
    assert_eq!(stage, CloseStage::Terminated);

    let stubborn = "trap '' TERM; while :; do sleep 0.1; done".to_owned();
    let mut client = Client::spawn("sh", &["-c".into(), stubborn], &[]).unwrap();
    assert!(client.is_alive());
    let (stage, status) = client.close().await.unwrap().unwrap();
    assert_eq!(stage, CloseStage::Killed);
    assert!(!status.success());
}

#[tokio::test]
async fn a_runner_crash_over_stdio_is_an_error_and_the_next_request_is_served() {
    let config = mock_config(0.0, 0, "runner = \"process\"\n");
    let mut server = StdioServer::start(&config, &[], &[]);
    server
        .write(
            request(
                1,
                "run",
                json!({"prompt": "crash @mock(length=50, crash_after=5)"}),
            )
            .as_bytes(),
        )
        .await;
    let crashed = server.message().await;
    assert_eq!(crashed["error"]["code"], -32004, "{crashed}");
    assert!(
        crashed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("runtime crashed: SIGABRT"),
        "{crashed}"
    );
    server
        .write(request(2, "run", json!({"prompt": "still here"})).as_bytes())
        .await;
    let served = server.message().await;
    assert_eq!(served["result"]["finish_reason"], "stop", "{served}");
    let (status, _, _) = server.finish().await;
    assert!(status.success());
}
