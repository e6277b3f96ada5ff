//! What the store commands print, the same whether the store is worked on
//! here or through the running service: the pull's progress bar, what a
//! pull stored, the list's table and a shown model.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use crate::store::{Manifest, Progress, details_of};

/// A pull's progress bar on stderr (hidden when stderr is not a terminal).
pub struct Bar {
    bar: ProgressBar,
    source: String,
}

impl Bar {
    /// A bar for the pull of `source`.
    pub fn new(source: &str) -> Self {
        let bar = ProgressBar::with_draw_target(
            None,
            if std::io::stderr().is_terminal() {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            },
        );
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Self {
            bar,
            source: source.to_owned(),
        }
    }

    /// Shows what the pull is doing.
    pub fn report(&self, progress: Progress) {
        match progress {
            Progress::Resolving => self.bar.set_message(format!("resolving {}", self.source)),
            Progress::Waiting => self
                .bar
                .set_message("waiting for another pull of this model"),
            Progress::Downloading {
                file,
                completed,
                total,
                ..
            } => {
                if let Some(total) = total {
                    self.bar.set_length(total);
                }
                self.bar.set_position(completed);
                self.bar.set_message(file);
            }
            Progress::Verifying => self.bar.set_message("verifying sha256"),
            Progress::Writing => self.bar.set_message("writing the manifest"),
            Progress::Done { .. } => {}
        }
    }

    /// Takes the bar off the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// What a pull stored into `dir` (the model's folder), and what it lacks.
pub fn pulled(manifest: &Manifest, dir: &Path) {
    println!(
        "pulled {} ({}, sha256 {}{}) into {}",
        manifest.name,
        human_bytes(manifest.size),
        manifest.sha256,
        if manifest.sha256_verified {
            ", verified"
        } else {
            ", computed: the source published none"
        },
        dir.display()
    );
    match (&manifest.tokenizer, &manifest.tokenizer_missing) {
        (Some(t), _) => println!(
            "tokenizer from {} ({}{}), for structured output",
            if t.path == crate::store::TOKENIZER_FILE {
                t.repository.clone()
            } else {
                format!("{}:{}", t.repository, t.path)
            },
            t.tokens
                .map_or_else(String::new, |n| format!("{n} tokens, ")),
            human_bytes(t.size)
        ),
        (None, why) => eprintln!(
            "warning: no tokenizer: {}; structured output (a format, a forced tool \
             call) is refused for this model until it has one: pull it again with \
             --tokenizer OWNER/REPO",
            why.as_deref().unwrap_or("none found")
        ),
    }
    match manifest.tokenizer.as_ref().map(|t| (t, &t.chat_template)) {
        Some((t, Some(_))) => println!(
            "chat template from {}'s tokenizer_config.json: a conversation sent whole \
             reaches the model in its own format",
            t.repository
        ),
        Some((t, None)) => eprintln!(
            "warning: no chat template recorded: {}; a conversation sent whole goes to \
             the runtime's own template as a `role: text` transcript (set \
             `chat_template` in a [[models]] entry to give it one)",
            t.chat_template_missing.as_deref().unwrap_or("none found")
        ),
        None => {}
    }
}

/// One row of `list`.
pub struct Row {
    /// The model's name.
    pub name: String,
    /// Its file's size.
    pub size: u64,
    /// When it was pulled, `YYYY-MM-DD`.
    pub pulled: String,
    /// Its tokenizer's repository, or `none`.
    pub tokenizer: String,
    /// What it was pulled as.
    pub source: String,
}

/// The list's table; `store` names the store when it is empty.
pub fn table(rows: &[Row], store: &str) {
    if rows.is_empty() {
        println!("no models in {store} (pull one: rkllm-server pull OWNER/REPO)");
        return;
    }
    println!(
        "{:<40} {:>10}  {:<10}  {:<32}  SOURCE",
        "NAME", "SIZE", "PULLED", "TOKENIZER"
    );
    for r in rows {
        println!(
            "{:<40} {:>10}  {:<10}  {:<32}  {}",
            r.name,
            human_bytes(r.size),
            r.pulled,
            r.tokenizer,
            r.source
        );
    }
}

/// A stored model as `show` prints it: its manifest, its file and what
/// the file's name says.
pub fn shown(manifest: &Manifest, path: &Path) {
    let shown = json!({
        "manifest": manifest,
        "path": path,
        "details": details_of(&manifest.file),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&shown).unwrap_or_default()
    );
}

/// `bytes` in B, KiB, MiB, …
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `YYYY-MM-DD` of a Unix time.
pub fn pulled_date(unix: u64) -> String {
    let time = std::time::UNIX_EPOCH + Duration::from_secs(unix);
    crate::transport::clock::rfc3339(time)
        .chars()
        .take(10)
        .collect()
}
