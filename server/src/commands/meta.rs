//! What the command line asks for instead of serving: shell completions
//! and the manual page (answered before any configuration is read), a
//! store command or `doctor` (handed to [`super::run`]), and printing or
//! checking the configuration. Each answer is an exit code.

use crate::backend::RkllmBackend;
use crate::config::{BackendKind, Cli, Config, StoreCommand};
use crate::store::Store;

/// Answers `--completions` and `--man-page`, which need no configuration,
/// on stdout. Returns the exit code when one of them was asked for.
pub fn before_config(cli: &Cli) -> Option<u8> {
    if let Some(shell) = cli.completions {
        Cli::write_completions(shell, &mut std::io::stdout());
        return Some(0);
    }
    if cli.man_page {
        return Some(match Cli::write_man_page(&mut std::io::stdout()) {
            Ok(()) => 0,
            Err(err) => {
                eprintln!("rkllm-server: cannot write the manual page: {err}");
                1
            }
        });
    }
    None
}

/// What the command line asks of the configuration once it is read,
/// instead of serving.
#[derive(Debug)]
pub struct Asked {
    command: Option<StoreCommand>,
    print_config: bool,
    check_config: bool,
}

impl Asked {
    /// What `cli` asks for (taken before the configuration consumes it).
    pub fn of(cli: &Cli) -> Self {
        Self {
            command: cli.command.clone(),
            print_config: cli.print_config,
            check_config: cli.check_config,
        }
    }

    /// Runs a store command or `doctor`, else prints or checks the
    /// configuration. Returns the exit code, or `None` when nothing was
    /// asked for but serving.
    pub async fn run(self, config: &Config) -> Option<u8> {
        if let Some(command) = self.command {
            return Some(super::run(command, config).await);
        }
        if self.print_config {
            return Some(match config.to_masked_toml() {
                Ok(text) => {
                    print!("{text}");
                    0
                }
                Err(err) => {
                    eprintln!("rkllm-server: cannot print the configuration: {err}");
                    1
                }
            });
        }
        if self.check_config {
            return Some(match check(config) {
                Ok(summary) => {
                    println!("{summary}");
                    0
                }
                Err(err) => {
                    eprintln!("rkllm-server: {err}");
                    2
                }
            });
        }
        None
    }
}

/// What `--check-config` checks beyond the values themselves, as start-up
/// would but without loading a model: that model files exist and, for the
/// `rkllm` backend, that the runtime library loads with a supported
/// version and every symbol. Returns a one-line summary.
///
/// # Errors
/// What start-up would stop on, as a message.
fn check(config: &Config) -> Result<String, String> {
    config
        .check_files()
        .map_err(|e| e.in_file(config.source.as_deref()).to_string())?;
    let models = config.model_specs().len();
    let stored = Store::new(config.models_dir()).list().len();
    if config.backend == BackendKind::Rkllm && models + stored == 0 {
        return Err(format!(
            "the rkllm backend needs a model: pass --model PATH, declare [[models]], or pull one \
             into the store ({}) with `rkllm-server pull OWNER/REPO`",
            config.models_dir().display()
        ));
    }
    let backend = match config.backend {
        BackendKind::Mock => "mock".to_owned(),
        BackendKind::Rkllm => {
            let backend = RkllmBackend::new(config.rkllm_settings()).map_err(|e| e.to_string())?;
            if config.model_specs().iter().any(|m| m.vision.is_some()) {
                backend.rknn_runtime()?;
            }
            format!("rkllm, {}", backend.describe())
        }
    };
    let file = config
        .source
        .as_ref()
        .map_or_else(|| "no file".to_owned(), |p| p.display().to_string());
    Ok(format!(
        "configuration OK ({file}): backend {backend}, {models} model(s) configured, {stored} in \
         the store ({}), listen {}",
        config.models_dir().display(),
        config.listen
    ))
}
