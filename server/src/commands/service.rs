//! The store commands through the running service's API: `pull` as
//! `POST /api/pull` (its NDJSON progress on the same bar as a pull here),
//! `list` from `GET /api/tags`, `show` from `POST /api/show`, `rm` as
//! `DELETE /api/delete`, with the service's API key.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::{Value, json};

use super::print::{self, Bar, Row};
use crate::config::StoreCommand;
use crate::store::{Manifest, Progress};

/// How long `list`, `show` and `rm` may take (a pull has no such bound:
/// the service bounds its own downloads).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest progress line taken (a success line carries the manifest).
const MAX_LINE_BYTES: usize = 16 << 20;

/// The running service, as the store commands reach it.
pub struct Service {
    http: reqwest::Client,
    addr: SocketAddr,
    key: Option<String>,
    /// Its store folder, as it reports it.
    models_dir: Option<PathBuf>,
}

/// The `error` of an error answer, else its text.
pub fn error_text(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.trim().chars().take(300).collect())
}

/// The message for a 401 from the service at `addr`.
pub fn key_refused(addr: SocketAddr, key_sent: bool) -> String {
    let what = if key_sent {
        "refused the API key sent"
    } else {
        "needs an API key"
    };
    format!(
        "the service at {addr} {what} (401): give the command one of the keys it reads \
         (`api_keys` or `api_key_file` of its configuration; here, the same settings, \
         RKLLM_SERVER_API_KEY or --api-key), or work on the store folder itself with --local"
    )
}

/// How one line of a pull's answer reads.
enum Line {
    Progress(Progress),
    Success(Value),
    Error(String),
}

impl Service {
    /// The service at `addr`, reached with `http`, sending `key`.
    pub fn new(http: reqwest::Client, addr: SocketAddr, key: Option<String>) -> Self {
        Self {
            http,
            addr,
            key,
            models_dir: None,
        }
    }

    /// The same, knowing its store folder.
    pub fn with_dir(self, models_dir: Option<PathBuf>) -> Self {
        Self { models_dir, ..self }
    }

    /// Whether an API key is sent.
    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self
            .http
            .request(method, format!("http://{}{path}", self.addr));
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// `GET path`, with the key.
    pub fn get(&self, path: &str) -> RequestBuilder {
        self.request(Method::GET, path)
    }

    /// `POST path` with a JSON `body` and the key, with no time bound (a
    /// probe waits its turn in the model's queue); an error answer is
    /// printed (prefixed with `what`) and gives the exit code.
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
        what: &str,
    ) -> Result<Response, u8> {
        self.send(self.request(Method::POST, path).json(body), what)
            .await
    }

    /// The service's store, as messages name it.
    fn store(&self) -> String {
        match &self.models_dir {
            Some(dir) => format!(
                "the store of the service at {} ({})",
                self.addr,
                dir.display()
            ),
            None => format!("the store of the service at {}", self.addr),
        }
    }

    /// Sends `request`; a failure to reach the service or an error answer
    /// is printed (prefixed with `what`) and gives the exit code.
    async fn send(&self, request: RequestBuilder, what: &str) -> Result<Response, u8> {
        let answer = request.send().await.map_err(|err| {
            eprintln!("rkllm-server: {what}: the service at {}: {err}", self.addr);
            1
        })?;
        let status = answer.status();
        if status.is_success() {
            return Ok(answer);
        }
        if status == StatusCode::UNAUTHORIZED {
            eprintln!(
                "rkllm-server: {what}: {}",
                key_refused(self.addr, self.has_key())
            );
            return Err(1);
        }
        let body = answer.text().await.unwrap_or_default();
        let text = error_text(&body);
        if status == StatusCode::NOT_FOUND && what != "pull" {
            eprintln!("rkllm-server: {what}: {text} in {}", self.store());
        } else {
            eprintln!("rkllm-server: {what}: {text}");
        }
        Err(1)
    }

    /// Runs a store command through the service; returns the exit code.
    pub async fn run(&self, command: StoreCommand) -> u8 {
        let result = match command {
            StoreCommand::Pull {
                source,
                name,
                revision,
                store_only,
                tokenizer,
                ..
            } => {
                let mut body = json!({"model": source, "stream": true, "store_only": store_only});
                for (key, value) in [
                    ("store_name", name),
                    ("revision", revision),
                    ("tokenizer", tokenizer),
                ] {
                    if let Some(value) = value {
                        body[key] = json!(value);
                    }
                }
                self.pull(&source, &body).await
            }
            StoreCommand::List { .. } => self.list().await,
            StoreCommand::Show { name, .. } => self.show(&name).await,
            StoreCommand::Rm { name, .. } => self.rm(&name).await,
            StoreCommand::Doctor { .. } => Ok(()),
        };
        match result {
            Ok(()) => 0,
            Err(code) => code,
        }
    }

    async fn pull(&self, source: &str, body: &Value) -> Result<(), u8> {
        if source.contains("://") {
            eprintln!(
                "rkllm-server: pull {source}: the service at {} pulls from its model endpoint \
                 only (OWNER/REPO or OWNER/REPO:FILE); to put a URL's file into its store, pull \
                 it on the store folder itself as the service's user: sudo -u rkllm \
                 rkllm-server pull --local URL",
                self.addr
            );
            return Err(2);
        }
        let what = format!("pull {source}");
        let mut answer = self
            .send(self.request(Method::POST, "/api/pull").json(body), &what)
            .await?;
        let bar = Bar::new(source);
        let mut pending: Vec<u8> = Vec::new();
        let end = loop {
            let chunk = match answer.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break None,
                Err(err) => break Some(Line::Error(format!("the answer was cut: {err}"))),
            };
            pending.extend_from_slice(&chunk);
            let mut end = None;
            while let Some(at) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=at).collect();
                match read_line(&line) {
                    Some(Line::Progress(p)) => bar.report(p),
                    Some(last) => {
                        end = Some(last);
                        break;
                    }
                    None => {}
                }
            }
            if end.is_some() {
                break end;
            }
            if pending.len() > MAX_LINE_BYTES {
                break Some(Line::Error(format!(
                    "a line of the answer is longer than {MAX_LINE_BYTES} bytes"
                )));
            }
        };
        bar.finish();
        match end {
            Some(Line::Success(line)) => {
                let manifest = serde_json::from_value::<Manifest>(line["manifest"].clone());
                match (manifest, line["path"].as_str()) {
                    (Ok(manifest), Some(path)) => print::pulled(&manifest, path.as_ref()),
                    _ => println!(
                        "pulled {} into {}",
                        line["model"].as_str().unwrap_or(source),
                        self.store()
                    ),
                }
                Ok(())
            }
            Some(Line::Error(message)) => {
                eprintln!("rkllm-server: {what}: {message}");
                Err(1)
            }
            Some(Line::Progress(_)) | None => {
                eprintln!(
                    "rkllm-server: {what}: the service at {} ended its answer before the pull \
                     ended",
                    self.addr
                );
                Err(1)
            }
        }
    }

    async fn list(&self) -> Result<(), u8> {
        let answer = self
            .send(self.get("/api/tags").timeout(ANSWER_TIMEOUT), "list")
            .await?;
        let tags: Value = answer.json().await.map_err(|err| {
            eprintln!("rkllm-server: list: the service's answer does not read: {err}");
            1
        })?;
        // The models of its store (those of its configuration are not).
        let rows: Vec<Row> = tags["models"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|m| m["stored"].is_object())
            .map(|m| Row {
                name: m["name"].as_str().unwrap_or_default().to_owned(),
                size: m["size"].as_u64().unwrap_or(0),
                pulled: m["modified_at"]
                    .as_str()
                    .unwrap_or_default()
                    .chars()
                    .take(10)
                    .collect(),
                tokenizer: m["stored"]["tokenizer"]
                    .as_str()
                    .unwrap_or("none")
                    .to_owned(),
                source: m["stored"]["source"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            })
            .collect();
        print::table(&rows, &self.store());
        Ok(())
    }

    async fn show(&self, name: &str) -> Result<(), u8> {
        let what = format!("show {name}");
        let request = self
            .request(Method::POST, "/api/show")
            .json(&json!({ "model": name }))
            .timeout(ANSWER_TIMEOUT);
        let shown: Value = self
            .send(request, &what)
            .await?
            .json()
            .await
            .map_err(|err| {
                eprintln!("rkllm-server: {what}: the service's answer does not read: {err}");
                1
            })?;
        let manifest = serde_json::from_value::<Manifest>(shown["manifest"].clone());
        match (manifest, shown["path"].as_str()) {
            (Ok(manifest), Some(path)) => {
                print::shown(&manifest, path.as_ref());
                Ok(())
            }
            _ => {
                eprintln!(
                    "rkllm-server: no model {name:?} in {}: the service serves one of that \
                     name from its configuration",
                    self.store()
                );
                Err(1)
            }
        }
    }

    async fn rm(&self, name: &str) -> Result<(), u8> {
        let request = self
            .request(Method::DELETE, "/api/delete")
            .json(&json!({ "model": name }))
            .timeout(ANSWER_TIMEOUT);
        self.send(request, &format!("rm {name}")).await?;
        println!("removed {name} from {}", self.store());
        Ok(())
    }
}

/// One line of `/api/pull`'s answer; `None` for one that is not JSON or
/// says nothing the bar shows.
fn read_line(line: &[u8]) -> Option<Line> {
    let line: Value = serde_json::from_slice(line).ok()?;
    if let Some(error) = line["error"].as_str() {
        return Some(Line::Error(error.to_owned()));
    }
    let status = line["status"].as_str()?;
    Some(match status {
        "success" => Line::Success(line),
        "pulling manifest" => Line::Progress(Progress::Resolving),
        "verifying sha256 digest" => Line::Progress(Progress::Verifying),
        "writing manifest" => Line::Progress(Progress::Writing),
        _ if status.starts_with("waiting") => Line::Progress(Progress::Waiting),
        _ => {
            let file = status.strip_prefix("pulling ")?;
            Line::Progress(Progress::Downloading {
                file: file.to_owned(),
                sha256: None,
                completed: line["completed"].as_u64()?,
                total: line["total"].as_u64(),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_progress_line_of_the_service_reads_as_the_pull_here_reports_it() {
        let read = |text: &str| match read_line(text.as_bytes()) {
            Some(Line::Progress(p)) => Some(p),
            _ => None,
        };
        assert_eq!(
            read(r#"{"status":"pulling manifest"}"#),
            Some(Progress::Resolving)
        );
        assert_eq!(
            read(r#"{"status":"pulling m.rkllm","digest":"","completed":5,"total":9}"#),
            Some(Progress::Downloading {
                file: "m.rkllm".into(),
                sha256: None,
                completed: 5,
                total: Some(9)
            })
        );
        assert_eq!(
            read(r#"{"status":"verifying sha256 digest"}"#),
            Some(Progress::Verifying)
        );
        assert_eq!(
            read(r#"{"status":"writing manifest"}"#),
            Some(Progress::Writing)
        );
        assert_eq!(
            read(r#"{"status":"waiting for another pull of this model"}"#),
            Some(Progress::Waiting)
        );
        assert!(matches!(
            read_line(br#"{"error":"checksum mismatch"}"#),
            Some(Line::Error(e)) if e == "checksum mismatch"
        ));
        assert!(matches!(
            read_line(br#"{"status":"success","model":"m"}"#),
            Some(Line::Success(_))
        ));
        assert!(read_line(b"not json").is_none());
    }

    #[test]
    fn an_error_answer_gives_its_error_else_its_text() {
        assert_eq!(error_text(r#"{"error":"no such model"}"#), "no such model");
        assert_eq!(error_text(" plain words \n"), "plain words");
    }
}
