//! Image URLs (`limits.allow_remote_images`) through the OpenAI and Ollama
//! APIs: a public (or allowed) host's picture reaches the model; nothing
//! inside the server's own network is fetched, however the URL spells it
//! or wherever a redirect points; and every failed fetch reads the same,
//! so answers tell nothing of the network behind the server.
//!
//! 127.0.0.2 plays the public image host (it is in `remote_image_allow`);
//! 127.0.0.1 is the server's own loopback, which nothing may reach.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use image::ImageFormat;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{Fake, LIVENESS, Server};
use crate::vision::{ENCODER, Vision, described, field, solid};

/// A little HTTP image host: `/red.png`, `/big.png` (over the model's
/// `max_image_bytes`), `/slow.png` (never answers), `/to?URL` (a redirect
/// to URL), `/loop` (a redirect to itself); anything else is a 404. It
/// counts the connections it accepts.
struct ImageHost {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl ImageHost {
    async fn start(ip: &str) -> Self {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&connections);
        let red = solid([255, 0, 0], ImageFormat::Png);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let red = red.clone();
                tokio::spawn(async move {
                    let mut request = vec![0u8; 4096];
                    let n = socket.read(&mut request).await.unwrap_or(0);
                    let request = String::from_utf8_lossy(&request[..n]).into_owned();
                    let path = request.split(' ').nth(1).unwrap_or_default().to_owned();
                    let (head, body) = match path.as_str() {
                        "/red.png" => ("200 OK\r\nContent-Type: image/png".to_owned(), red),
                        "/big.png" => ("200 OK".to_owned(), vec![0u8; 200_000]),
                        "/slow.png" => {
                            tokio::time::sleep(LIVENESS).await;
                            return;
                        }
                        "/loop" => ("302 Found\r\nLocation: /loop".to_owned(), Vec::new()),
                        _ => match path.strip_prefix("/to?") {
                            Some(target) => {
                                (format!("302 Found\r\nLocation: {target}"), Vec::new())
                            }
                            None => ("404 Not Found".to_owned(), Vec::new()),
                        },
                    };
                    let head = format!(
                        "HTTP/1.1 {head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(&body).await;
                });
            }
        });
        Self { addr, connections }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// The three ways a client sends an image URL.
#[derive(Debug, Clone, Copy)]
enum Api {
    OpenAi,
    OllamaChat,
    OllamaGenerate,
}

const APIS: [Api; 3] = [Api::OpenAi, Api::OllamaChat, Api::OllamaGenerate];

/// Asks the vision model about the picture at `url`: the status, and the
/// reply's text (200) or the error message.
async fn ask(server: &Server, api: Api, url: &str) -> (u16, String) {
    let (path, body) = match api {
        Api::OpenAi => (
            "/v1/chat/completions",
            json!({"model": "vl", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": url}}]}]}),
        ),
        Api::OllamaChat => (
            "/api/chat",
            json!({"model": "vl", "stream": false, "messages": [
                {"role": "user", "content": "What is this?", "images": [url]}]}),
        ),
        Api::OllamaGenerate => (
            "/api/generate",
            json!({"model": "vl", "stream": false, "prompt": "What is this?", "images": [url]}),
        ),
    };
    let response = server
        .send(reqwest::Method::POST, path, Some(body), None)
        .await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    let text = match (api, status) {
        (Api::OpenAi, 200) => &body["choices"][0]["message"]["content"],
        (Api::OpenAi, _) => &body["error"]["message"],
        (Api::OllamaChat, 200) => &body["message"]["content"],
        (Api::OllamaGenerate, 200) => &body["response"],
        (_, _) => &body["error"],
    };
    (status, text.as_str().unwrap_or_default().to_owned())
}

/// What every failed fetch answers, whatever the reason.
const NOT_FETCHED: &str = "image 1 could not be fetched";

fn start(max_image_bytes: usize) -> Vision {
    Vision::start_with(
        Fake::V1_3,
        ENCODER,
        &format!("[models.vision]\nmax_image_bytes = {max_image_bytes}\n"),
        "[limits]\nallow_remote_images = true\nremote_image_timeout_secs = 2\n\
         remote_image_allow = [\"127.0.0.2\"]\n",
    )
}

/// Waits (within the liveness bound) for a log line containing `text`.
async fn logged(server: &Server, text: &str) -> bool {
    let deadline = std::time::Instant::now() + LIVENESS;
    loop {
        if server.log().iter().any(|line| line.contains(text)) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn image_urls_into_the_servers_own_network_are_refused_before_connecting() {
    let vision = start(100_000);
    let server = &vision.server;
    // A service on the server's loopback, with a picture the old code
    // would happily have fetched, and the allowed "public" host.
    let inner = ImageHost::start("127.0.0.1").await;
    let public = ImageHost::start("127.0.0.2").await;
    let port = inner.addr.port();
    let refused = [
        format!("http://localhost:{port}/red.png"),
        format!("http://127.0.0.1:{port}/red.png"),
        format!("http://[::ffff:127.0.0.1]:{port}/red.png"),
        format!("http://2130706433:{port}/red.png"),
        format!("http://0x7f.1:{port}/red.png"),
        format!("http://0.0.0.0:{port}/red.png"),
        format!("http://example.com@127.0.0.1:{port}/red.png"),
        // User info is refused even towards an allowed host.
        format!("http://user:pw@{}/red.png", public.addr),
        // Private and link-local: refused before any connection, so no
        // network is needed.
        format!("http://10.0.0.1:{port}/red.png"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        // The server's own metrics.
        format!("http://{}/metrics", server.addr),
        // An allowed host redirecting into loopback, by address and by name.
        format!("http://{}/to?http://127.0.0.1:{port}/red.png", public.addr),
        format!("http://{}/to?http://localhost:{port}/red.png", public.addr),
    ];
    for url in &refused {
        for api in APIS {
            let (status, message) = ask(server, api, url).await;
            assert_eq!(status, 400, "{api:?} {url}: {message}");
            assert_eq!(message, NOT_FETCHED, "{api:?} {url}");
        }
    }
    // None of it reached the loopback service.
    assert_eq!(inner.connections(), 0);
    // The operator learns why from the log.
    assert!(
        logged(server, "127.0.0.1 is not a public address").await,
        "{:#?}",
        server.log()
    );
    assert!(
        logged(
            server,
            "`localhost` resolves only to addresses that are not public"
        )
        .await,
        "{:#?}",
        server.log()
    );
}

#[tokio::test]
async fn every_failed_fetch_reads_the_same_and_an_allowed_host_serves_its_picture() {
    let vision = start(100_000);
    let server = &vision.server;
    let host = ImageHost::start("127.0.0.2").await;
    // A port on the allowed address with nothing listening.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
        listener.local_addr().unwrap()
    };
    let failing = [
        format!("http://{closed}/red.png"),
        format!("http://{}/nothing.png", host.addr),
        format!("http://{}/big.png", host.addr),
        format!("http://{}/slow.png", host.addr),
        format!("http://{}/loop", host.addr),
        format!("http://{}/to?file:///etc/passwd", host.addr),
        "http://no-such-host.invalid/red.png".to_owned(),
    ];
    for url in &failing {
        for api in APIS {
            let (status, message) = ask(server, api, url).await;
            assert_eq!(status, 400, "{api:?} {url}: {message}");
            assert_eq!(message, NOT_FETCHED, "{api:?} {url}");
        }
    }
    // The same host's picture, directly and through a redirect.
    for url in [
        format!("http://{}/red.png", host.addr),
        format!("http://{0}/to?http://{0}/red.png", host.addr),
    ] {
        for api in APIS {
            let (status, text) = ask(server, api, &url).await;
            assert_eq!(status, 200, "{api:?} {url}: {text}");
            assert_eq!(
                field(&described(&text)[0], "rgb"),
                "223,32,32",
                "{api:?} {url}: {text}"
            );
        }
    }
}
