//! The store commands on the store folder itself, when no service runs
//! (or `--local`): `pull`, `list`, `show`, `rm`. A running server sees
//! their changes within seconds.

use super::print::{self, Bar, Row};
use crate::backend::RkllmBackend;
use crate::config::{BackendKind, Config, StoreCommand};
use crate::store::{HubTokenizer, Progress, Service, TokenizerSetting};

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
                match hub_tokenizer(&tokenizer) {
                    Ok(hub) => request.tokenizer = Some(hub),
                    Err(code) => return code,
                }
            }
            pull(&service, &source, &request).await
        }
        StoreCommand::List { .. } => list(&service),
        StoreCommand::Show { name, .. } => show(&service, &name),
        StoreCommand::Doctor { .. } => 0,
        StoreCommand::Rm { name, .. } => rm(&service, &name),
    }
}

/// The tokenizer `pull --tokenizer` names, which must be a repository's;
/// else what is wrong is said on stderr and the exit code returned.
fn hub_tokenizer(tokenizer: &str) -> Result<HubTokenizer, u8> {
    match TokenizerSetting::parse(tokenizer) {
        Ok(TokenizerSetting::Hub(hub)) => Ok(hub),
        Ok(TokenizerSetting::File(_)) => {
            eprintln!(
                "rkllm-server: pull --tokenizer {tokenizer:?}: a pull takes the \
                 tokenizer from a Hugging Face repository, OWNER/REPO or \
                 OWNER/REPO:PATH (a file of your own goes in a [[models]] entry's \
                 `tokenizer`)"
            );
            Err(2)
        }
        Err(err) => {
            eprintln!("rkllm-server: pull --tokenizer: {err}");
            Err(2)
        }
    }
}

/// `list`: the stored models as a table.
fn list(service: &Service) -> u8 {
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

/// `show NAME`: one stored model.
fn show(service: &Service, name: &str) -> u8 {
    match service.store.get(name) {
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
    }
}

/// `rm NAME`: removes a stored model.
fn rm(service: &Service, name: &str) -> u8 {
    match service.store.remove(name) {
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
    }
}

/// `pull`: with a progress bar, then what was stored.
async fn pull(service: &Service, source: &str, request: &crate::store::PullRequest) -> u8 {
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
