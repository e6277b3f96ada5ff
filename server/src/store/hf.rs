//! Hugging Face's conventions, as the store uses them: a repository's file
//! list (`{endpoint}/api/models/{repo}/tree/{revision}`), a file's address
//! (`{endpoint}/{repo}/resolve/{revision}/{file}`, which redirects large
//! files elsewhere and names their SHA-256 in `X-Linked-Etag`), `HF_TOKEN`
//! for gated repositories, `HF_ENDPOINT` for a mirror.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};

use super::error::PullError;

/// Longest wait for a file list or a file's details (the whole answer).
const ASK_TIMEOUT: Duration = Duration::from_secs(120);

/// Largest file list read: a repository of many thousand files.
const MAX_LISTING_BYTES: usize = 16 << 20;

/// A file of a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFile {
    /// Its path in the repository.
    pub path: String,
    /// Its size.
    pub size: u64,
    /// The SHA-256 Hugging Face publishes for LFS files.
    pub sha256: Option<String>,
}

/// What the resolve address says about a file before downloading it.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    /// Where to download it from (after the first redirect).
    pub location: String,
    /// Its size, when known.
    pub size: Option<u64>,
    /// Its SHA-256, when published.
    pub sha256: Option<String>,
    /// An entity tag for resuming (`If-Range`).
    pub etag: Option<String>,
    /// The commit the revision resolved to.
    pub commit: Option<String>,
}

/// A client of a Hugging Face endpoint.
#[derive(Debug, Clone)]
pub struct Hub {
    endpoint: String,
    token: Option<String>,
    /// Plain HTTP allowed: only for an endpoint configured over http.
    allow_http: bool,
    /// The HTTP clients, made at the first pull (TLS set-up takes memory
    /// a server that never pulls should not pay).
    clients: std::sync::Arc<std::sync::OnceLock<Clients>>,
}

/// The two HTTP clients of a [`Hub`].
#[derive(Debug)]
struct Clients {
    /// For the first request of a download (its redirect is read, not followed).
    direct: reqwest::Client,
    /// For the download itself.
    follow: reqwest::Client,
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

impl Hub {
    /// A client of `endpoint` (`https://huggingface.co` or a mirror; an
    /// `http://` mirror allows plain HTTP for its downloads) sending `token`.
    ///
    /// # Errors
    /// An endpoint that is not an http(s) URL.
    pub fn new(endpoint: &str, token: Option<String>) -> Result<Self, String> {
        let endpoint = endpoint.trim_end_matches('/').to_owned();
        let allow_http = if endpoint.starts_with("https://") {
            false
        } else if endpoint.starts_with("http://") {
            true
        } else {
            return Err(format!(
                "the model endpoint {endpoint:?} must start with https:// (or http:// for a mirror)"
            ));
        };
        Ok(Self {
            endpoint,
            token: token.filter(|t| !t.is_empty()),
            allow_http,
            clients: std::sync::Arc::default(),
        })
    }

    /// The HTTP clients, made on first use.
    ///
    /// # Errors
    /// When TLS cannot be set up.
    fn clients(&self) -> Result<&Clients, PullError> {
        if let Some(clients) = self.clients.get() {
            return Ok(clients);
        }
        let made = Self::make_clients(self.allow_http).map_err(PullError::Transfer)?;
        Ok(self.clients.get_or_init(|| made))
    }

    fn make_clients(allow_http: bool) -> Result<Clients, String> {
        let user_agent = concat!("rkllm-server/", env!("CARGO_PKG_VERSION"));
        let direct = reqwest::Client::builder()
            .user_agent(user_agent)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(20))
            .read_timeout(Duration::from_secs(60))
            .timeout(ASK_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
        let follow = reqwest::Client::builder()
            .user_agent(user_agent)
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() >= 10 {
                    attempt.error("too many redirects")
                } else if attempt.url().scheme() != "https" && !allow_http {
                    attempt.error("a redirect to plain http was refused")
                } else {
                    attempt.follow()
                }
            }))
            .connect_timeout(Duration::from_secs(20))
            .read_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
        Ok(Clients { direct, follow })
    }

    /// The endpoint, without a trailing `/`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Whether `url` may be downloaded from: https, or http under an
    /// endpoint configured over http.
    ///
    /// # Errors
    /// [`PullError::Insecure`].
    pub fn check_url(&self, url: &str) -> Result<(), PullError> {
        if url.starts_with("https://")
            || (self.allow_http && url.starts_with(&format!("{}/", self.endpoint)))
        {
            return Ok(());
        }
        Err(PullError::Insecure(url.to_owned()))
    }

    fn with_token(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// The error for a request to `url` that got no answer: why the host
    /// could not be reached, when that is what failed.
    fn send_error(&self, url: &str, err: &reqwest::Error) -> PullError {
        if err.is_connect() || err.is_timeout() {
            super::reach::unreachable(url, &self.endpoint, err)
        } else {
            PullError::Transfer(format!("{url}: {err}"))
        }
    }

    /// The address of `file` in `repo` at `revision`.
    pub fn resolve_url(&self, repo: &str, revision: &str, file: &str) -> String {
        format!("{}/{repo}/resolve/{revision}/{file}", self.endpoint)
    }

    /// Every file of `repo` at `revision`.
    ///
    /// # Errors
    /// Not found, refused (gated), or the transfer failed.
    pub async fn list_files(&self, repo: &str, revision: &str) -> Result<Vec<RepoFile>, PullError> {
        let url = format!(
            "{}/api/models/{repo}/tree/{revision}?recursive=true",
            self.endpoint
        );
        let response = self
            .with_token(self.clients()?.direct.get(&url))
            .send()
            .await
            .map_err(|e| self.send_error(&url, &e))?;
        check_status(
            response.status(),
            response.headers(),
            repo,
            &format!("repository {repo} at {revision}"),
        )?;
        let mut response = response;
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| PullError::Transfer(format!("the file list of {repo}: {e}")))?
        {
            if body.len() + chunk.len() > MAX_LISTING_BYTES {
                return Err(PullError::Transfer(format!(
                    "the file list of {repo} is larger than {MAX_LISTING_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        let entries: Vec<serde_json::Value> = serde_json::from_slice(&body)
            .map_err(|e| PullError::Transfer(format!("the file list of {repo}: {e}")))?;
        Ok(entries
            .iter()
            .filter(|e| e["type"] == "file")
            .filter_map(|e| {
                Some(RepoFile {
                    path: e["path"].as_str()?.to_owned(),
                    size: e["lfs"]["size"]
                        .as_u64()
                        .or_else(|| e["size"].as_u64())
                        .unwrap_or(0),
                    sha256: e["lfs"]["oid"]
                        .as_str()
                        .filter(|s| is_sha256(s))
                        .map(str::to_owned),
                })
            })
            .collect())
    }

    /// Asks `url` about the file (without downloading it): where it
    /// redirects, its size, its SHA-256 and entity tag.
    ///
    /// # Errors
    /// Not found, refused, or the transfer failed.
    pub async fn resolve(&self, url: &str, repo: &str, what: &str) -> Result<Resolved, PullError> {
        self.check_url(url)?;
        let response = self
            .with_token(self.clients()?.direct.head(url))
            .send()
            .await
            .map_err(|e| self.send_error(url, &e))?;
        let status = response.status();
        let headers = response.headers();
        let linked_size = header_str(headers, "x-linked-size").and_then(|s| s.parse().ok());
        let linked_sha = header_str(headers, "x-linked-etag")
            .map(|s| s.trim_matches('"').to_owned())
            .filter(|s| is_sha256(s));
        let etag = header_str(headers, "x-linked-etag")
            .or_else(|| header_str(headers, header::ETAG.as_str()))
            .map(str::to_owned);
        let commit = header_str(headers, "x-repo-commit").map(str::to_owned);
        if status.is_redirection() {
            let location = header_str(headers, header::LOCATION.as_str()).ok_or_else(|| {
                PullError::Transfer(format!("{url}: a redirect without a location"))
            })?;
            let location = reqwest::Url::parse(url)
                .and_then(|base| base.join(location))
                .map_err(|e| PullError::Transfer(format!("{url}: bad redirect: {e}")))?
                .to_string();
            if !location.starts_with("https://") && !self.allow_http {
                return Err(PullError::Insecure(location));
            }
            return Ok(Resolved {
                location,
                size: linked_size,
                sha256: linked_sha,
                etag,
                commit,
            });
        }
        check_status(status, headers, repo, what)?;
        Ok(Resolved {
            location: url.to_owned(),
            size: linked_size.or_else(|| {
                header_str(headers, header::CONTENT_LENGTH.as_str()).and_then(|s| s.parse().ok())
            }),
            sha256: linked_sha,
            etag,
            commit,
        })
    }

    /// The text of a small file of `repo` (a model card), at most `max`
    /// bytes, read within [`ASK_TIMEOUT`].
    ///
    /// # Errors
    /// Not found, refused, larger than `max`, not UTF-8, or the transfer
    /// failed.
    pub async fn read_text(
        &self,
        repo: &str,
        revision: &str,
        path: &str,
        max: usize,
    ) -> Result<String, PullError> {
        let what = format!("{repo}: {path}");
        let read = async {
            let url = self.resolve_url(repo, revision, path);
            let resolved = self.resolve(&url, repo, &what).await?;
            let too_large = || PullError::Transfer(format!("{what} is larger than {max} bytes"));
            if resolved.size.is_some_and(|s| s > max as u64) {
                return Err(too_large());
            }
            let mut response = self.download(&resolved, 0, repo, &what).await?;
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| PullError::Transfer(format!("{what}: {e}")))?
            {
                if body.len() + chunk.len() > max {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
            String::from_utf8(body)
                .map_err(|_| PullError::Transfer(format!("{what} is not UTF-8 text")))
        };
        tokio::time::timeout(ASK_TIMEOUT, read)
            .await
            .unwrap_or_else(|_| {
                Err(PullError::Transfer(format!(
                    "{what}: no answer within {} s",
                    ASK_TIMEOUT.as_secs()
                )))
            })
    }

    /// Starts downloading `resolved`, from byte `from` when resuming.
    ///
    /// # Errors
    /// Refused, not found, or the transfer failed.
    pub async fn download(
        &self,
        resolved: &Resolved,
        from: u64,
        repo: &str,
        what: &str,
    ) -> Result<reqwest::Response, PullError> {
        let mut request = self.clients()?.follow.get(&resolved.location);
        // The token goes to the endpoint only, never to the file host.
        if resolved
            .location
            .starts_with(&format!("{}/", self.endpoint))
        {
            request = self.with_token(request);
        }
        if from > 0 {
            request = request.header(header::RANGE, format!("bytes={from}-"));
            if let Some(etag) = &resolved.etag {
                request = request.header(header::IF_RANGE, etag);
            }
        }
        let response = request.send().await.map_err(|e| {
            let url = e
                .url()
                .map_or_else(|| resolved.location.clone(), ToString::to_string);
            match self.send_error(&url, &e) {
                PullError::Transfer(why) => PullError::Transfer(format!("{what}: {why}")),
                other => other,
            }
        })?;
        if response.status() != StatusCode::RANGE_NOT_SATISFIABLE {
            check_status(response.status(), response.headers(), repo, what)?;
        }
        Ok(response)
    }
}

/// Maps an HTTP status to the error a user can act on. Hugging Face names
/// its refusals in `X-Error-Code`: a missing repository is a 401 to an
/// anonymous request (`RepoNotFound`, as a private one is), a gated one is
/// `GatedRepo`, and a token it does not know is "Invalid credentials".
fn check_status(
    status: StatusCode,
    headers: &HeaderMap,
    repo: &str,
    what: &str,
) -> Result<(), PullError> {
    if status.is_success() {
        return Ok(());
    }
    let code = header_str(headers, "x-error-code").unwrap_or("");
    let message = header_str(headers, "x-error-message").unwrap_or("");
    match (status, code) {
        (_, "RepoNotFound") => Err(PullError::NotFound(format!(
            "repository {repo} (check its spelling: owner/name as on its Hugging Face page; a \
             private repository reads as not found unless HF_TOKEN may read it)"
        ))),
        (_, "RevisionNotFound") => Err(PullError::NotFound(format!(
            "{what} (no such branch, tag or commit in {repo})"
        ))),
        (_, "EntryNotFound") => Err(PullError::NotFound(what.to_owned())),
        (StatusCode::UNAUTHORIZED, _) if message.contains("Invalid credentials") => {
            Err(PullError::BadToken {
                repo: repo.to_owned(),
            })
        }
        (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, _) => Err(PullError::Denied {
            repo: repo.to_owned(),
            status: status.as_u16(),
        }),
        (StatusCode::NOT_FOUND, _) => Err(PullError::NotFound(what.to_owned())),
        (other, _) => Err(PullError::Transfer(format!("{what}: HTTP {other}"))),
    }
}
