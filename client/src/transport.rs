//! The three transports of [`crate::Client`].

use std::collections::VecDeque;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::{CLOSE_WAIT, ClientError};

/// How a child process ended when it was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseStage {
    /// It exited after its stdin was closed.
    Exited,
    /// It needed SIGTERM.
    Terminated,
    /// It needed SIGKILL.
    Killed,
}

pub(crate) struct StdioChild {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    line: String,
    /// The child's last lines on stderr, when they are kept, not shown.
    stderr_tail: Option<Arc<Mutex<VecDeque<String>>>>,
    /// The task that keeps them, done once the child's stderr is closed.
    stderr_reader: Option<tokio::task::JoinHandle<()>>,
}

/// Lines of a quiet child's stderr kept for an error message.
const STDERR_LINES: usize = 40;

/// The lines kept of a quiet child's stderr, as they are now.
fn tail_lines(tail: &Mutex<VecDeque<String>>) -> Vec<String> {
    let tail = tail
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    tail.iter().cloned().collect()
}

pub(crate) struct WsConn {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

pub(crate) struct HttpConn {
    client: reqwest::Client,
    url: String,
    session: Option<String>,
    protocol: Option<String>,
    api_key: Option<String>,
}

pub(crate) enum Transport {
    Stdio(Box<StdioChild>),
    Ws(Box<WsConn>),
    Http(HttpConn),
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Stdio(_) => "Transport::Stdio",
            Self::Ws(_) => "Transport::Ws",
            Self::Http(_) => "Transport::Http",
        })
    }
}

fn parse(text: &str) -> Result<Value, ClientError> {
    serde_json::from_str(text)
        .map_err(|e| ClientError::Protocol(format!("invalid JSON from the server: {e}")))
}

fn is_response(message: &Value) -> bool {
    message.get("method").is_none() && message.get("id").is_some()
}

impl Transport {
    /// Starts the child; with `quiet`, its stderr is kept (the last
    /// lines, for [`Self::stderr_tail`]) instead of passed through.
    pub(crate) fn spawn(
        program: &str,
        args: &[String],
        env: &[(String, String)],
        quiet: bool,
    ) -> Result<Self, ClientError> {
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if quiet {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ClientError::Transport(format!("cannot start {program}: {e}")))?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| ClientError::transport("no stdout"))?;
        let mut stderr_reader = None;
        let stderr_tail = child.stderr.take().map(|stderr| {
            let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LINES)));
            let keep = Arc::clone(&tail);
            stderr_reader = Some(tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut tail = keep
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if tail.len() == STDERR_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            }));
            tail
        });
        Ok(Self::Stdio(Box::new(StdioChild {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            line: String::new(),
            stderr_tail,
            stderr_reader,
        })))
    }

    /// The last lines a quiet child wrote on stderr.
    pub(crate) fn stderr_tail(&self) -> Vec<String> {
        match self {
            Self::Stdio(child) => child
                .stderr_tail
                .as_deref()
                .map_or_else(Vec::new, tail_lines),
            Self::Ws(_) | Self::Http(_) => Vec::new(),
        }
    }

    pub(crate) async fn connect_ws(url: &str, api_key: Option<&str>) -> Result<Self, ClientError> {
        let mut request = url.into_client_request().map_err(ClientError::transport)?;
        if let Some(key) = api_key {
            let value = format!("Bearer {key}")
                .parse()
                .map_err(|_| ClientError::transport("the API key is not a valid header value"))?;
            request.headers_mut().insert("authorization", value);
        }
        let (socket, _) = tokio_tungstenite::connect_async(request)
            .await
            .map_err(|e| ClientError::transport_chain(&e))?;
        Ok(Self::Ws(Box::new(WsConn { socket })))
    }

    pub(crate) fn http(url: &str, api_key: Option<&str>) -> Self {
        Self::Http(HttpConn {
            client: reqwest::Client::new(),
            url: url.to_owned(),
            session: None,
            protocol: None,
            api_key: api_key.map(str::to_owned),
        })
    }

    async fn send(&mut self, message: &Value) -> Result<(), ClientError> {
        let text = message.to_string();
        match self {
            Self::Stdio(child) => {
                let stdin = child
                    .stdin
                    .as_mut()
                    .ok_or_else(|| ClientError::transport("stdin is closed"))?;
                stdin
                    .write_all(text.as_bytes())
                    .await
                    .map_err(ClientError::transport)?;
                stdin
                    .write_all(b"\n")
                    .await
                    .map_err(ClientError::transport)?;
                stdin.flush().await.map_err(ClientError::transport)
            }
            Self::Ws(ws) => ws
                .socket
                .send(Message::Text(text.into()))
                .await
                .map_err(ClientError::transport),
            Self::Http(_) => Err(ClientError::transport("HTTP sends with a request")),
        }
    }

    pub(crate) async fn next_message(&mut self) -> Result<Option<Value>, ClientError> {
        match self {
            Self::Stdio(child) => loop {
                child.line.clear();
                let n = child
                    .stdout
                    .read_line(&mut child.line)
                    .await
                    .map_err(ClientError::transport)?;
                if n == 0 {
                    return Ok(None);
                }
                let line = child.line.trim();
                if !line.is_empty() {
                    return parse(line).map(Some);
                }
            },
            Self::Ws(ws) => loop {
                match ws.socket.next().await {
                    Some(Ok(Message::Text(text))) => return parse(&text).map(Some),
                    Some(Ok(Message::Close(_))) | None => return Ok(None),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(ClientError::transport(e)),
                }
            },
            Self::Http(_) => Err(ClientError::transport(
                "HTTP cannot receive pushed messages",
            )),
        }
    }

    pub(crate) async fn send_notification(&mut self, message: &Value) -> Result<(), ClientError> {
        match self {
            Self::Http(http) => http.post(message, &mut |_| {}).await.map(|_| ()),
            _ => self.send(message).await,
        }
    }

    pub(crate) async fn exchange(
        &mut self,
        message: &Value,
        on_notification: &mut (dyn FnMut(&Value) + Send),
    ) -> Result<Value, ClientError> {
        if let Self::Http(http) = self {
            return http
                .post(message, on_notification)
                .await?
                .ok_or_else(|| ClientError::Protocol("no response to a request".into()));
        }
        self.send(message).await?;
        let id = message.get("id").cloned();
        loop {
            let reply = self
                .next_message()
                .await?
                .ok_or_else(|| ClientError::transport("the server closed the connection"))?;
            if is_response(&reply) && reply.get("id") == id.as_ref() {
                return Ok(reply);
            }
            if reply.get("method").is_some() {
                on_notification(&reply);
            }
        }
    }

    pub(crate) fn is_alive(&mut self) -> bool {
        match self {
            Self::Stdio(child) => matches!(child.child.try_wait(), Ok(None)),
            Self::Ws(_) | Self::Http(_) => true,
        }
    }

    /// [`Self::close`], then the last lines a quiet child wrote on stderr,
    /// all of them: read once its stderr is closed (at most [`CLOSE_WAIT`]
    /// after it is gone), so that the lines it wrote as it failed are in.
    pub(crate) async fn close_with_tail(
        mut self,
    ) -> (
        Result<Option<(CloseStage, ExitStatus)>, ClientError>,
        Vec<String>,
    ) {
        let reader = match &mut self {
            Self::Stdio(child) => child.stderr_reader.take(),
            Self::Ws(_) | Self::Http(_) => None,
        };
        let tail = match &self {
            Self::Stdio(child) => child.stderr_tail.clone(),
            Self::Ws(_) | Self::Http(_) => None,
        };
        let closed = self.close().await;
        if let Some(reader) = reader {
            let _ = tokio::time::timeout(CLOSE_WAIT, reader).await;
        }
        (closed, tail.as_deref().map_or_else(Vec::new, tail_lines))
    }

    pub(crate) async fn close(self) -> Result<Option<(CloseStage, ExitStatus)>, ClientError> {
        match self {
            Self::Stdio(mut child) => {
                drop(child.stdin.take());
                if let Ok(status) = tokio::time::timeout(CLOSE_WAIT, child.child.wait()).await {
                    return Ok(Some((
                        CloseStage::Exited,
                        status.map_err(ClientError::transport)?,
                    )));
                }
                if let Some(pid) = child
                    .child
                    .id()
                    .and_then(|id| rustix::process::Pid::from_raw(id as i32))
                {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                }
                if let Ok(status) = tokio::time::timeout(CLOSE_WAIT, child.child.wait()).await {
                    return Ok(Some((
                        CloseStage::Terminated,
                        status.map_err(ClientError::transport)?,
                    )));
                }
                child.child.kill().await.map_err(ClientError::transport)?;
                let status = child.child.wait().await.map_err(ClientError::transport)?;
                Ok(Some((CloseStage::Killed, status)))
            }
            Self::Ws(mut ws) => {
                let _ = ws.socket.close(None).await;
                Ok(None)
            }
            Self::Http(http) => {
                if let Some(session) = &http.session {
                    let mut request = http
                        .client
                        .delete(&http.url)
                        .header("mcp-session-id", session);
                    if let Some(key) = &http.api_key {
                        request = request.bearer_auth(key);
                    }
                    let _ = request.send().await;
                }
                Ok(None)
            }
        }
    }
}

impl HttpConn {
    /// Posts one message. Returns the response (for a request), reading an
    /// SSE answer's notifications into `on_notification` on the way.
    async fn post(
        &mut self,
        message: &Value,
        on_notification: &mut (dyn FnMut(&Value) + Send),
    ) -> Result<Option<Value>, ClientError> {
        let mut request = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(message.to_string());
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        if let Some(protocol) = &self.protocol {
            request = request.header("mcp-protocol-version", protocol);
        }
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| ClientError::transport_chain(&e))?;
        if let Some(session) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.session = Some(session.to_owned());
        }
        let status = response.status();
        if status == reqwest::StatusCode::ACCEPTED {
            return Ok(None);
        }
        let is_sse = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let reply = if is_sse {
            // Bytes, not text, until an event is whole: a read may end inside
            // a character that takes several bytes.
            let mut pending: Vec<u8> = Vec::new();
            let mut reply = None;
            while let Some(bytes) = response.chunk().await.map_err(ClientError::transport)? {
                pending.extend_from_slice(&bytes);
                while let Some(event) = take_event(&mut pending) {
                    let event = event?;
                    let data: Vec<&str> = event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim_start)
                        .collect();
                    if data.is_empty() {
                        continue;
                    }
                    let message = parse(&data.join("\n"))?;
                    if is_response(&message) {
                        reply = Some(message);
                    } else {
                        on_notification(&message);
                    }
                }
            }
            reply.ok_or_else(|| {
                ClientError::Protocol("the SSE answer ended without a response".into())
            })?
        } else {
            let text = response.text().await.map_err(ClientError::transport)?;
            parse(&text).map_err(|_| ClientError::Transport(format!("HTTP {status}: {text}")))?
        };
        if let Some(version) = reply
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
        {
            self.protocol = Some(version.to_owned());
        }
        Ok(Some(reply))
    }
}

/// The first whole SSE event (through its blank line) taken from the
/// bytes read so far, if one has arrived.
fn take_event(pending: &mut Vec<u8>) -> Option<Result<String, ClientError>> {
    let end = pending.windows(2).position(|w| w == b"\n\n")?;
    let raw: Vec<u8> = pending.drain(..end + 2).collect();
    Some(
        String::from_utf8(raw)
            .map_err(|_| ClientError::Protocol("an SSE event that is not UTF-8".into())),
    )
}

#[cfg(test)]
mod tests {
    use super::take_event;

    #[test]
    fn an_event_whose_character_is_split_across_reads_comes_whole() {
        let event = "data: {\"message\":\"こんにちは\"}\n\n";
        let bytes = event.as_bytes();
        // Split inside the second character's three bytes.
        let cut = "data: {\"message\":\"こ".len() + 1;
        let mut pending = bytes[..cut].to_vec();
        assert!(take_event(&mut pending).is_none());
        pending.extend_from_slice(&bytes[cut..]);
        pending.extend_from_slice(b"data: 2");
        assert_eq!(take_event(&mut pending).unwrap().unwrap(), event);
        assert_eq!(pending, b"data: 2");
        assert!(take_event(&mut pending).is_none());
    }
}
