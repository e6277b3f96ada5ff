//! The model-store commands of the command line: `pull` (with a progress
//! bar on a terminal), `list`, `show`, `rm` (a running server sees their
//! changes within seconds); and `doctor`, handed to [`crate::doctor`].

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::backend::RkllmBackend;
use crate::config::{BackendKind, Config, StoreCommand};
use crate::store::{Progress, TokenizerSetting, details_of};

/// Runs `command` against the configured store; returns the exit code.
pub async fn run(command: StoreCommand, config: &Config) -> u8 {
    if let StoreCommand::Doctor { json, verify } = command {
        let config = config.clone();
        let options = crate::doctor::Options { verify };
        return tokio::task::spawn_blocking(move || crate::doctor::run(&config, json, options))
            .await
            .unwrap_or(1);
    }
    // The runtime's version helps choose among a repository's files.
    let runtime_version = match (&command, config.backend) {
        (StoreCommand::Pull { .. }, BackendKind::Rkllm) => {
            RkllmBackend::new(config.rkllm_settings())
                .ok()
                .and_then(|b| b.version())
        }
        _ => None,
    };
    // Whether a vision model can run here matters to a pull only.
    let vision_runtime = match &command {
        StoreCommand::Pull {
            store_only: false, ..
        } => config.vision_runtime(),
        _ => Ok(()),
    };
    let service = match config.store_service(runtime_version, vision_runtime) {
        Ok(service) => service,
        Err(err) => {
            eprintln!("rkllm-server: {err}");
            return 2;
        }
    };
    match command {
        StoreCommand::Pull {
            source,
            name,
            revision,
            store_only,
            tokenizer,
        } => {
            let mut request = service.request(&source, name, revision, store_only);
            if let Some(tokenizer) = tokenizer {
                match TokenizerSetting::parse(&tokenizer) {
                    Ok(TokenizerSetting::Hub(hub)) => request.tokenizer = Some(hub),
                    Ok(TokenizerSetting::File(_)) => {
                        eprintln!(
                            "rkllm-server: pull --tokenizer {tokenizer:?}: a pull takes the \
                             tokenizer from a Hugging Face repository, OWNER/REPO or \
                             OWNER/REPO:PATH (a file of your own goes in a [[models]] entry's \
                             `tokenizer`)"
                        );
                        return 2;
                    }
                    Err(err) => {
                        eprintln!("rkllm-server: pull --tokenizer: {err}");
                        return 2;
                    }
                }
            }
            pull(&service, &source, &request).await
        }
        StoreCommand::List => {
            let models = service.store.list();
            if models.is_empty() {
                println!(
                    "no models in {} (pull one: rkllm-server pull OWNER/REPO)",
                    service.store.dir().display()
                );
                return 0;
            }
            println!(
                "{:<40} {:>10}  {:<10}  {:<32}  SOURCE",
                "NAME", "SIZE", "PULLED", "TOKENIZER"
            );
            for m in models {
                let tokenizer = m
                    .tokenizer
                    .as_ref()
                    .map_or("none", |t| t.repository.as_str());
                println!(
                    "{:<40} {:>10}  {:<10}  {:<32}  {}",
                    m.name,
                    human_bytes(m.size),
                    pulled_date(m.pulled_unix),
                    tokenizer,
                    m.source.spec
                );
            }
            0
        }
        StoreCommand::Show { name } => match service.store.get(&name) {
            Ok(Some(m)) => {
                let shown = serde_json::json!({
                    "manifest": m,
                    "path": service.store.model_dir(&m.name).join(&m.file),
                    "details": details_of(&m.file),
                });
                println!(
                    "{}",
                    serde_json::to_string_pretty(&shown).unwrap_or_default()
                );
                0
            }
            Ok(None) => {
                eprintln!(
                    "rkllm-server: no model {name:?} in {}",
                    service.store.dir().display()
                );
                1
            }
            Err(err) => {
                eprintln!("rkllm-server: {err}");
                1
            }
        },
        StoreCommand::Doctor { .. } => 0,
        StoreCommand::Rm { name } => match service.store.remove(&name) {
            Ok(true) => {
                println!("removed {name}");
                0
            }
            Ok(false) => {
                eprintln!(
                    "rkllm-server: no model {name:?} in {}",
                    service.store.dir().display()
                );
                1
            }
            Err(err) => {
                eprintln!("rkllm-server: cannot remove {name}: {err}");
                1
            }
        },
    }
}

async fn pull(
    service: &crate::store::Service,
    source: &str,
    request: &crate::store::PullRequest,
) -> u8 {
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
    let mut on_progress = |p: Progress| match p {
        Progress::Resolving => bar.set_message(format!("resolving {source}")),
        Progress::Waiting => bar.set_message("waiting for another pull of this model"),
        Progress::Downloading {
            file,
            completed,
            total,
            ..
        } => {
            if let Some(total) = total {
                bar.set_length(total);
            }
            bar.set_position(completed);
            bar.set_message(file);
        }
        Progress::Verifying => bar.set_message("verifying sha256"),
        Progress::Writing => bar.set_message("writing the manifest"),
        Progress::Done { .. } => {}
    };
    let result =
        crate::store::pull::pull(&service.store, &service.hub, request, &mut on_progress).await;
    bar.finish_and_clear();
    match result {
        Ok(manifest) => {
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
                service.store.model_dir(&manifest.name).display()
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
            0
        }
        Err(err) => {
            eprintln!("rkllm-server: pull {source}: {err}");
            1
        }
    }
}

fn human_bytes(bytes: u64) -> String {
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
fn pulled_date(unix: u64) -> String {
    let time = std::time::UNIX_EPOCH + Duration::from_secs(unix);
    crate::transport::clock::rfc3339(time)
        .chars()
        .take(10)
        .collect()
}
