//! Images in the OpenAI and Ollama APIs: where a request's images come
//! from (a data URL, bare base64, or, when the operator allows it, an
//! http(s) URL the server fetches) and turning them into bytes.

use std::time::Duration;

use futures_util::StreamExt as _;

use crate::backend::ImageData;
use crate::backend::image::decode_base64_image;

/// Where one image of a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// Sent with the request (data URL or base64), already decoded.
    Inline(Vec<u8>),
    /// An http(s) URL to fetch.
    Remote(String),
}

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteImages {
    /// Whether http(s) image URLs are fetched at all.
    pub allowed: bool,
    /// Time allowed for one fetch, start to end.
    pub timeout: Duration,
    /// Largest image fetched, in bytes.
    pub max_bytes: usize,
}

/// Turns the sources into bytes, fetching remote ones when allowed.
///
/// # Errors
/// A message for the client naming the image: a refused or failed fetch.
pub async fn load(
    sources: Vec<ImageSource>,
    remote: RemoteImages,
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
                let bytes = fetch(&url, remote)
                    .await
                    .map_err(|e| format!("image {} ({url}) could not be fetched: {e}", i + 1))?;
                images.push(ImageData(bytes));
            }
        }
    }
    Ok(images)
}

async fn fetch(url: &str, remote: RemoteImages) -> Result<Vec<u8>, String> {
    let client = reqwest::Client::builder()
        .timeout(remote.timeout)
        .redirect(reqwest::redirect::Policy::limited(3))
        .build()
        .map_err(|e| e.to_string())?;
    let response = client.get(url).send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    if response
        .content_length()
        .is_some_and(|n| n > remote.max_bytes as u64)
    {
        return Err(format!("it is over {} bytes", remote.max_bytes));
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        if body.len() + chunk.len() > remote.max_bytes {
            return Err(format!("it is over {} bytes", remote.max_bytes));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
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
        };
        let err = load(
            vec![ImageSource::Remote("https://example.com/a.png".into())],
            remote,
        )
        .await
        .unwrap_err();
        assert!(err.contains("allow_remote_images"), "{err}");
    }
}
