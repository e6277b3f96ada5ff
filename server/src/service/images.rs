//! Images in the OpenAI and Ollama APIs: where a request's images come
//! from (a data URL, bare base64, or, when the operator allows it, an
//! http(s) URL the server fetches) and turning them into bytes.

use std::net::IpAddr;
use std::time::Duration;

use futures_util::StreamExt as _;
use reqwest::Url;

use super::address_filter::{AddressFilter, Refusal};
use crate::backend::image::decode_base64_image;
use crate::model::ImageSource;
use crate::model::image::ImageData;

/// Reads one image reference: a `data:` URL, an http(s) URL or bare
/// base64. `index` is the image's number (from 1), for messages.
///
/// # Errors
/// A message naming the image.
pub fn parse_source(text: &str, index: usize) -> Result<ImageSource, String> {
    let lower = text.get(..8).unwrap_or(text).to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Ok(ImageSource::Remote(text.to_owned()));
    }
    decode_base64_image(text)
        .map(ImageSource::Inline)
        .map_err(|e| format!("image {index} {e}"))
}

/// How remote images may be fetched (config `[limits]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteImages {
    /// Whether http(s) image URLs are fetched at all.
    pub allowed: bool,
    /// Time allowed for one fetch, start to end.
    pub timeout: Duration,
    /// Largest image fetched, in bytes.
    pub max_bytes: usize,
    /// The addresses a fetch may connect to (public ones, and
    /// `remote_image_allow`).
    pub filter: AddressFilter,
}

/// Redirects followed in one fetch, each checked as the first URL.
const MAX_REDIRECTS: usize = 3;

/// Turns the sources into bytes, fetching remote ones when allowed.
///
/// # Errors
/// A message for the client naming the image. Every fetch that fails,
/// whatever the reason (an address the filter refuses, DNS, a refused
/// connection, a timeout, an HTTP error, a body too large), reads the
/// same, so that answers tell nothing of the network behind the server;
/// the reason is logged.
pub async fn load(
    sources: Vec<ImageSource>,
    remote: &RemoteImages,
) -> Result<Vec<ImageData>, String> {
    let mut images = Vec::with_capacity(sources.len());
    for (i, source) in sources.into_iter().enumerate() {
        match source {
            ImageSource::Inline(bytes) => images.push(ImageData(bytes)),
            ImageSource::Remote(url) => {
                if !remote.allowed {
                    return Err(format!(
                        "image {} is a URL; this server takes images as data URLs or base64 \
                         (fetching image URLs is off: limits.allow_remote_images)",
                        i + 1
                    ));
                }
                match fetch(&url, remote).await {
                    Ok(bytes) => images.push(ImageData(bytes)),
                    Err(err) => {
                        tracing::info!(
                            image = i + 1,
                            url = %without_user_info(&url),
                            "image URL not fetched: {}",
                            err_chain(&err)
                        );
                        return Err(format!("image {} could not be fetched", i + 1));
                    }
                }
            }
        }
    }
    Ok(images)
}

/// Why a fetch failed (logged, never sent to the client).
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("not a valid URL: {0}")]
    Url(String),
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("connected to {0}, which the filter refuses")]
    Connected(IpAddr),
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error("HTTP {0}")]
    Status(reqwest::StatusCode),
    #[error("over {0} bytes")]
    TooLarge(usize),
}

async fn fetch(text: &str, remote: &RemoteImages) -> Result<Vec<u8>, FetchError> {
    let url = Url::parse(text).map_err(|e| FetchError::Url(e.to_string()))?;
    remote.filter.check_url(&url)?;
    let client = reqwest::Client::builder()
        .timeout(remote.timeout)
        // Through a proxy the proxy would resolve the name, past the filter.
        .no_proxy()
        .dns_resolver(remote.filter.resolver())
        .redirect(remote.filter.redirect_policy(MAX_REDIRECTS))
        .build()?;
    let response = client.get(url).send().await?;
    // The resolver and the URL checks already keep every connection to
    // permitted addresses; this only confirms it.
    if let Some(peer) = response.remote_addr()
        && !remote.filter.permits(peer.ip())
    {
        return Err(FetchError::Connected(peer.ip()));
    }
    let status = response.status();
    if !status.is_success() {
        return Err(FetchError::Status(status));
    }
    if response
        .content_length()
        .is_some_and(|n| n > remote.max_bytes as u64)
    {
        return Err(FetchError::TooLarge(remote.max_bytes));
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > remote.max_bytes {
            return Err(FetchError::TooLarge(remote.max_bytes));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error and its sources, for the log (the HTTP client's errors keep
/// the cause, a refusal by the resolver say, in their sources).
fn err_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The URL for the log, without a user name or password.
fn without_user_info(text: &str) -> String {
    match Url::parse(text) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.into()
        }
        Err(_) => text.chars().take(200).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_told_apart() {
        assert_eq!(
            parse_source("https://example.com/a.png", 1).unwrap(),
            ImageSource::Remote("https://example.com/a.png".into())
        );
        assert_eq!(
            parse_source("data:image/png;base64,AAEC", 1).unwrap(),
            ImageSource::Inline(vec![0, 1, 2])
        );
        assert_eq!(
            parse_source("AAEC", 1).unwrap(),
            ImageSource::Inline(vec![0, 1, 2])
        );
        let err = parse_source("%%%", 2).unwrap_err();
        assert!(err.starts_with("image 2 "), "{err}");
    }

    #[tokio::test]
    async fn remote_images_are_refused_unless_allowed() {
        let remote = RemoteImages {
            allowed: false,
            timeout: Duration::from_secs(1),
            max_bytes: 1024,
            filter: AddressFilter::default(),
        };
        let err = load(
            vec![ImageSource::Remote("https://example.com/a.png".into())],
            &remote,
        )
        .await
        .unwrap_err();
        assert!(err.contains("allow_remote_images"), "{err}");
    }
}
