//! The commands of the command line besides serving: the model store's
//! `pull` (with a progress bar on a terminal), `list`, `show` and `rm`,
//! and `doctor`, handed to [`crate::doctor`]; and the flags answered
//! instead of serving: completions and the manual page
//! ([`before_config`]), printing and checking the configuration
//! ([`Asked`]).
//!
//! One store, whoever runs the command: when the service runs (at the
//! configuration's `listen`, a wildcard address reached on loopback), the
//! store commands go through its API with its API key, so a model lands
//! where the service serves it; otherwise (or with `--local`, or a
//! `--models-dir` that is not the service's store) they work on the store
//! folder itself. Which one is used is said on stderr, once.

mod find;
mod local;
mod meta;
mod print;
mod probe;
mod service;

pub use meta::{Asked, before_config};

use crate::config::{Config, StoreCommand};

/// Runs `command`; returns the exit code.
pub async fn run(command: StoreCommand, config: &Config) -> u8 {
    let local = match &command {
        StoreCommand::Doctor {
            json,
            model,
            no_measure,
            local,
            probe: true,
            ..
        } => {
            let options = crate::doctor::probe::ProbeOptions {
                model: model.clone(),
                measure: !no_measure,
            };
            return probe::run(config, options, *json, *local).await;
        }
        StoreCommand::Doctor { json, verify, .. } => {
            let (config, json) = (config.clone(), *json);
            let options = crate::doctor::Options { verify: *verify };
            return tokio::task::spawn_blocking(move || crate::doctor::run(&config, json, options))
                .await
                .unwrap_or(1);
        }
        StoreCommand::Pull { local, .. }
        | StoreCommand::List { local }
        | StoreCommand::Show { local, .. }
        | StoreCommand::Rm { local, .. } => *local,
    };
    match find::find(config, local).await {
        find::Found::Service(service) => service.run(command).await,
        find::Found::Local(dir) => {
            let mut config = config.clone();
            config.store.models_dir = Some(dir);
            local::run(command, &config).await
        }
        find::Found::Failed(code) => code,
    }
}
