//! The store commands on the store folder itself, when no service runs
//! (or `--local`): `pull`, `list`, `show`, `rm`. A running server sees
//! their changes within seconds.

use super::print::{self, Bar, Row};
use crate::backend::RkllmBackend;
use crate::config::{BackendKind, Config, StoreCommand};
use crate::store::{Progress, TokenizerSetting};

/// Runs `command` on the store of `config`; returns the exit code.
pub async fn run(command: StoreCommand, config: &Config) -> u8 {
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
            ..
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
        StoreCommand::List { .. } => {
            let rows: Vec<Row> = service
                .store
                .list()
                .into_iter()
                .map(|m| Row {
                    tokenizer: m
                        .tokenizer
                        .as_ref()
                        .map_or_else(|| "none".to_owned(), |t| t.repository.clone()),
                    pulled: print::pulled_date(m.pulled_unix),
                    source: m.source.spec,
                    size: m.size,
                    name: m.name,
                })
                .collect();
            print::table(&rows, &service.store.dir().display().to_string());
            0
        }
        StoreCommand::Show { name, .. } => match service.store.get(&name) {
            Ok(Some(m)) => {
                print::shown(&m, &service.store.model_dir(&m.name).join(&m.file));
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
        StoreCommand::Rm { name, .. } => match service.store.remove(&name) {
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
    let bar = Bar::new(source);
    let mut on_progress = |p: Progress| bar.report(p);
    let result =
        crate::store::pull::pull(&service.store, &service.hub, request, &mut on_progress).await;
    bar.finish();
    match result {
        Ok(manifest) => {
            print::pulled(&manifest, &service.store.model_dir(&manifest.name));
            0
        }
        Err(err) => {
            eprintln!("rkllm-server: pull {source}: {err}");
            1
        }
    }
}
