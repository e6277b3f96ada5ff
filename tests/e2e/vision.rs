//! Vision-language models end to end, on both ABIs: the real binary loads
//! the fake RKNN runtime (tests/fake-rknnrt) and the fake RKLLM runtime,
//! preprocesses each picture, runs the fake encoder, and hands the
//! embeddings to `rkllm_run` as multimodal input. The fake encoder's
//! embeddings are grid means of the pixels it was given, and the fake
//! runtime's reply starts with a line describing the images it received
//! (per-image mean colour, a digest of the floats, the markers), so these
//! tests see which picture reached the language model, and in what layout.

use std::io::Cursor;
use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use image::{ImageFormat, RgbImage};
use serde_json::{Value, json};

use crate::harness::{Fake, ScratchDir, Server, fake_rknn_runtime, fake_runtime};

pub(crate) const TEXT: &str = "A picture, described.";

/// The fake encoder: 64x64 input, 8 tokens of 12 floats (4 column bands).
pub(crate) const ENCODER: &str =
    "fake-rknn width=64 height=64 channels=3 fmt=NHWC type=UINT8 tokens=8 dim=12 outputs=1";

fn encode(picture: &RgbImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    picture.write_to(&mut out, format).unwrap();
    out.into_inner()
}

/// A 200x150 picture of one colour: padded to 200x200 with grey (128) and
/// resized to 64x64, it fills rows 8 to 55; the mean of a channel over
/// the whole input is (48 × colour + 16 × 128) / 64.
pub(crate) fn solid(colour: [u8; 3], format: ImageFormat) -> Vec<u8> {
    encode(&RgbImage::from_pixel(200, 150, image::Rgb(colour)), format)
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

pub(crate) struct Vision {
    pub(crate) server: Server,
    rknn_log: PathBuf,
    _scratch: ScratchDir,
}

impl Vision {
    /// A server with a vision model `vl` (and a text-only model `text`).
    fn start(fake: Fake, vision_table: &str) -> Self {
        Self::start_with(fake, ENCODER, vision_table, "")
    }

    /// The same with another encoder description and more config.
    pub(crate) fn start_with(
        fake: Fake,
        encoder_text: &str,
        vision_table: &str,
        more: &str,
    ) -> Self {
        let scratch = ScratchDir::new();
        let model = scratch.0.join("vl.rkllm");
        std::fs::write(&model, TEXT).unwrap();
        let encoder = scratch.0.join("vl-vision.rknn");
        std::fs::write(&encoder, encoder_text).unwrap();
        let text_model = scratch.0.join("text.rkllm");
        std::fs::write(&text_model, "Only text.").unwrap();
        let rknn_log = scratch.0.join("rknn.log");
        let config = format!(
            "{more}\n[[models]]\nname = \"vl\"\npath = {model:?}\nvision_encoder = {encoder:?}\n{vision_table}\n\
             [[models]]\nname = \"text\"\npath = {text_model:?}\n"
        );
        let runtime = fake_runtime(fake);
        let rknn = fake_rknn_runtime();
        let server = Server::start_env(
            &config,
            &[
                "--backend",
                "rkllm",
                "--runtime",
                runtime.to_str().unwrap(),
                "--rknn-runtime",
                rknn.to_str().unwrap(),
            ],
            &[
                ("FAKE_RKLLM_EMBED_DIM", "12"),
                ("FAKE_RKLLM_TOKEN_MS", "0"),
                ("FAKE_RKNN_LOG", rknn_log.to_str().unwrap()),
            ],
        );
        Self {
            server,
            rknn_log,
            _scratch: scratch,
        }
    }

    fn rknn_log(&self) -> String {
        std::fs::read_to_string(&self.rknn_log).unwrap_or_default()
    }
}

/// The `[image N: ...]` descriptions at the start of a reply.
pub(crate) fn described(text: &str) -> Vec<String> {
    text.split("] ")
        .filter_map(|part| part.strip_prefix('[').map(|p| format!("[{p}]")))
        .filter(|p| p.starts_with("[image "))
        .collect()
}

pub(crate) fn field<'a>(description: &'a str, name: &str) -> &'a str {
    let start = description.find(&format!("{name}=")).unwrap() + name.len() + 1;
    let rest = &description[start..];
    &rest[..rest.find([' ', ']']).unwrap()]
}

#[tokio::test]
async fn a_pictures_pixels_reach_the_language_model_on_both_abis() {
    let red = solid([255, 0, 0], ImageFormat::Png);
    let blue = solid([0, 0, 255], ImageFormat::Jpeg);
    let mut digests = Vec::new();
    // The 1.2 pass uses an encoder whose input is laid out NCHW: its
    // attributes give the size in that order, the runtime converts.
    let nchw = ENCODER.replace("fmt=NHWC", "fmt=NCHW");
    for (fake, encoder) in [(Fake::V1_3, ENCODER), (Fake::V1_2, nchw.as_str())] {
        let vision =
            Vision::start_with(fake, encoder, "[models.vision]\ncore_mask = \"0-2\"\n", "");
        let server = &vision.server;

        // One image, through JSON-RPC, its tag placed before the text.
        let reply = server
            .ok(
                "run",
                json!({"model": "vl", "prompt": "What is this?", "images": [b64(&red)]}),
            )
            .await;
        let text = reply["text"].as_str().unwrap();
        assert!(text.ends_with(TEXT), "{text}");
        let images = described(text);
        assert_eq!(images.len(), 1, "{text}");
        assert_eq!(field(&images[0], "tokens"), "8", "{text}");
        assert_eq!(field(&images[0], "size"), "64x64", "{text}");
        // Red where the picture is, grey bands above and below it.
        assert_eq!(field(&images[0], "rgb"), "223,32,32", "{text}");
        assert!(
            text.contains("markers=<|vision_start|>|<|vision_end|>|<|image_pad|>"),
            "{text}"
        );
        // The image tokens count as prompt tokens.
        assert!(reply["usage"]["prompt_tokens"].as_u64().unwrap() >= 8);
        digests.push(field(&images[0], "digest").to_owned());

        // Two images in one message, as data URLs, in order; the tags say
        // where they go.
        let reply = server
            .ok(
                "run",
                json!({"model": "vl", "prompt": "<image> then <image>",
                       "images": [format!("data:image/jpeg;base64,{}", b64(&blue)), b64(&red)]}),
            )
            .await;
        let text = reply["text"].as_str().unwrap();
        let images = described(text);
        assert_eq!(images.len(), 2, "{text}");
        // JPEG is lossy: the blue is close, not exact.
        let rgb: Vec<i64> = field(&images[0], "rgb")
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect();
        assert!(
            (rgb[0] - 32).abs() <= 3 && (rgb[2] - 223).abs() <= 3,
            "{text}"
        );
        assert_eq!(field(&images[1], "rgb"), "223,32,32", "{text}");
        assert_eq!(field(&images[1], "digest"), digests.last().unwrap());

        let log = vision.rknn_log();
        assert!(log.contains("core_mask 7"), "{log}");
        assert!(log.contains("inputs_set size=12288 fmt=NHWC"), "{log}");

        // A text request on the same model still works, exactly.
        let reply = server
            .ok("run", json!({"model": "vl", "prompt": "no picture"}))
            .await;
        assert_eq!(reply["text"], TEXT);
    }
    // The same picture gives the same floats on both ABIs.
    assert_eq!(digests[0], digests[1]);
}

#[tokio::test]
async fn images_arrive_through_the_openai_and_ollama_apis() {
    let vision = Vision::start(Fake::V1_3, "");
    let server = &vision.server;
    let red = solid([255, 0, 0], ImageFormat::WebP);
    let green = solid([0, 255, 0], ImageFormat::Png);
    let openai = server
        .send(
            reqwest::Method::POST,
            "/v1/chat/completions",
            Some(json!({"model": "vl", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "Compare "},
                {"type": "image_url", "image_url": {"url": format!("data:image/webp;base64,{}", b64(&red))}},
                {"type": "text", "text": " with "},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", b64(&green))}}
            ]}]})),
            None,
        )
        .await;
    assert_eq!(openai.status(), 200);
    let body: Value = openai.json().await.unwrap();
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    let images = described(text);
    assert_eq!(images.len(), 2, "{text}");
    assert_eq!(field(&images[0], "rgb"), "223,32,32", "{text}");
    assert_eq!(field(&images[1], "rgb"), "32,223,32", "{text}");

    let ollama = server
        .send(
            reqwest::Method::POST,
            "/api/chat",
            Some(json!({"model": "vl", "stream": false, "messages": [
                {"role": "user", "content": "What is it?", "images": [b64(&green)]}]})),
            None,
        )
        .await;
    assert_eq!(ollama.status(), 200);
    let body: Value = ollama.json().await.unwrap();
    let text = body["message"]["content"].as_str().unwrap();
    assert_eq!(field(&described(text)[0], "rgb"), "32,223,32", "{text}");

    let generate = server
        .send(
            reqwest::Method::POST,
            "/api/generate",
            Some(json!({"model": "vl", "stream": false, "prompt": "", "images": [b64(&red)]})),
            None,
        )
        .await;
    assert_eq!(generate.status(), 200);
    let body: Value = generate.json().await.unwrap();
    let text = body["response"].as_str().unwrap();
    assert_eq!(field(&described(text)[0], "rgb"), "223,32,32", "{text}");

    // The capability is reported everywhere.
    let models = server.ok("models", json!({})).await;
    let find = |name: &str| {
        models["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(find("vl")["capabilities"], json!(["completion", "vision"]));
    assert_eq!(find("text")["capabilities"], json!(["completion"]));
    let listed = server.get_json("/v1/models", None).await;
    assert!(
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "vl" && m["capabilities"] == json!(["completion", "vision"])),
        "{listed}"
    );
    let show = server.post_json("/api/show", json!({"model": "vl"})).await;
    assert!(
        show["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("vision")),
        "{show}"
    );
}

#[tokio::test]
async fn bad_images_get_clear_errors_and_disturb_nothing() {
    let vision = Vision::start(
        Fake::V1_2,
        "[models.vision]\nmax_images = 2\nmax_image_pixels = 100000\n",
    );
    let server = &vision.server;
    let red = b64(&solid([255, 0, 0], ImageFormat::Png));
    let huge = b64(&encode(
        &RgbImage::from_pixel(400, 300, image::Rgb([1, 2, 3])),
        ImageFormat::Png,
    ));
    let mut truncated = solid([255, 0, 0], ImageFormat::Png);
    truncated.truncate(30);
    // Malformed input is -32602; an image over a limit -32007, like a
    // prompt over its limit.
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"model": "vl", "prompt": "x", "images": [b64(b"GIF89a not supported")]}),
            "image 1 is not a JPEG, PNG or WebP image",
        ),
        (
            json!({"model": "vl", "prompt": "x", "images": [b64(&truncated)]}),
            "image 1 is not a valid png image",
        ),
        (
            json!({"model": "vl", "prompt": "x", "images": ["%%% not base64"]}),
            "image 1 is not valid base64",
        ),
        (
            json!({"model": "vl", "prompt": "x", "images": [red, red, red]}),
            "at most 2 images per request",
        ),
        (
            json!({"model": "vl", "prompt": "x", "images": [huge]}),
            "image 1 is 400x300 (120000 pixels), over the limit of 100000 pixels",
        ),
        (
            json!({"model": "text", "prompt": "x", "images": [red]}),
            "model `text` does not take images",
        ),
        (
            json!({"model": "vl", "prompt": "<image> <image>", "images": [red]}),
            "the prompt has 2 `<image>` tags for 1 images",
        ),
        (
            json!({"model": "vl", "prompt": "x", "images": "not a list"}),
            "`images` must be an array",
        ),
    ];
    for (params, expected) in &cases {
        let response = server.call("run", params.clone()).await;
        let message = response["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(expected), "{expected:?} not in {response}");
        let code = if message.contains("over the limit") || message.contains("at most") {
            -32007
        } else {
            -32602
        };
        assert_eq!(response["error"]["code"], code, "{response}");
        assert_eq!(response["error"]["data"]["field"], "images", "{response}");
    }

    // The OpenAI and Ollama APIs answer 400 in their own shapes: OpenAI's
    // {"error": {"message", "type"}}, Ollama's {"error": "..."}.
    let image_part = |url: String| json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]);
    let refusals = [
        (
            "/v1/chat/completions",
            json!({"model": "text", "messages": image_part(format!("data:image/png;base64,{red}"))}),
            "does not take images",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "vl", "messages": image_part("https://example.com/cat.png".into())}),
            "allow_remote_images",
        ),
        (
            "/api/generate",
            json!({"model": "vl", "prompt": "x", "stream": false, "images": [b64(b"not an image")]}),
            "not a JPEG, PNG or WebP",
        ),
    ];
    for (path, request, expected) in refusals {
        let response = server
            .send(reqwest::Method::POST, path, Some(request), None)
            .await;
        assert_eq!(response.status(), 400, "{path}");
        let body: Value = response.json().await.unwrap();
        let message = if path.starts_with("/v1/") {
            assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
            &body["error"]["message"]
        } else {
            &body["error"]
        };
        assert!(
            message.as_str().unwrap().contains(expected),
            "{expected:?} not in {body}"
        );
    }

    // A PNG whose header is sound but whose pixel data is damaged passes
    // the check and fails in the runner, for that request only.
    let mut photo = encode(
        &RgbImage::from_fn(300, 200, |x, y| {
            image::Rgb([(x % 256) as u8, (y % 256) as u8, 90])
        }),
        ImageFormat::Png,
    );
    let middle = photo.len() / 2;
    for byte in &mut photo[middle..middle + 16] {
        *byte ^= 0x5a;
    }
    let damaged = b64(&photo);
    let response = server
        .call(
            "run",
            json!({"model": "vl", "prompt": "x", "images": [damaged]}),
        )
        .await;
    assert_eq!(response["error"]["code"], -32004, "{response}");
    let message = response["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("image 1 could not be decoded"),
        "{message}"
    );

    // Nothing else was disturbed: a good image and a text request work.
    let reply = server
        .ok(
            "run",
            json!({"model": "vl", "prompt": "x", "images": [red]}),
        )
        .await;
    assert_eq!(
        field(&described(reply["text"].as_str().unwrap())[0], "rgb"),
        "223,32,32"
    );
    let reply = server
        .ok("run", json!({"model": "text", "prompt": "x"}))
        .await;
    assert_eq!(reply["text"], "Only text.");
}

#[tokio::test]
async fn a_missing_rknn_runtime_fails_only_the_vision_model_naming_its_path() {
    let scratch = ScratchDir::new();
    let model = scratch.0.join("vl.rkllm");
    std::fs::write(&model, TEXT).unwrap();
    let text_model = scratch.0.join("txt.rkllm");
    std::fs::write(&text_model, TEXT).unwrap();
    let encoder = scratch.0.join("vl.rknn");
    std::fs::write(&encoder, ENCODER).unwrap();
    let runtime = fake_runtime(Fake::V1_3);
    let config = format!(
        "[[models]]\nname = \"txt\"\npath = {text_model:?}\ndefault = true\n\
         [[models]]\nname = \"vl\"\npath = {model:?}\nvision_encoder = {encoder:?}\n"
    );
    // Not there at all, then a library that is not the RKNN runtime (the
    // missing function is named): the server starts either way, serves the
    // text model and lists the vision model as failed with the cause.
    let cases = [
        (
            "/nonexistent/librknnrt.so".to_owned(),
            "the RKNN runtime /nonexistent/librknnrt.so does not exist",
        ),
        (
            runtime.to_str().unwrap().to_owned(),
            "lacks a function the vision encoder needs",
        ),
    ];
    for (rknn, cause) in cases {
        let server = Server::start(
            &config,
            &[
                "--backend",
                "rkllm",
                "--runtime",
                runtime.to_str().unwrap(),
                "--rknn-runtime",
                &rknn,
            ],
        );
        let models = server.ok("models", json!({})).await;
        let vl = models["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "vl")
            .unwrap()
            .clone();
        assert_eq!(vl["state"], "failed", "{vl}");
        assert!(vl["error"].as_str().unwrap().contains(cause), "{vl}");
        let reply = server
            .ok("run", json!({"model": "txt", "prompt": "hello"}))
            .await;
        assert_eq!(reply["finish_reason"], "stop", "{reply}");
        let refused = server
            .call("run", json!({"model": "vl", "prompt": "hello"}))
            .await;
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains(cause),
            "{refused}"
        );
        let ready = server
            .send(reqwest::Method::GET, "/ready", None, None)
            .await;
        assert_eq!(ready.status(), 200);
        let ready: Value = ready.json().await.unwrap();
        assert_eq!(ready["failed"][0]["model"], "vl", "{ready}");
        let tags = server.get_json("/api/tags", None).await;
        let tagged = tags["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "vl")
            .unwrap()
            .clone();
        assert_eq!(tagged["state"], "failed", "{tagged}");
        assert!(
            tagged["error"].as_str().unwrap().contains(cause),
            "{tagged}"
        );
        let logged = server
            .log()
            .iter()
            .filter(|line| line.contains("cannot be served") && line.contains("vl"))
            .count();
        assert_eq!(logged, 1, "{:?}", server.log());
    }
}
