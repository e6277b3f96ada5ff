//! What the user typed, so that messages name it: the defaults shown in
//! `--help` (the flags are optional, so that the file's values are not
//! overridden, and clap would show none), which flags and variables were
//! given, and errors in their values named by the flag or variable rather
//! than the configuration key.

use std::net::SocketAddr;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};

use super::{
    ConfigError, DEFAULT_CONFIG_FILE, DEFAULT_LISTEN, DEFAULT_MOCK_TOKENS_PER_SECOND,
    DEFAULT_RKNN_RUNTIME, DEFAULT_RUNTIME,
};

/// A flag or variable given on the command line or in the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    /// The flag's id (its field name).
    pub id: String,
    /// Whether it came from its environment variable.
    pub from_env: bool,
}

/// Configuration keys and the flags (by id) that set them.
const KEYS: &[(&str, &str)] = &[
    ("listen", "listen"),
    ("model", "model"),
    ("tokenizer", "tokenizer"),
    ("tcp", "tcp"),
    ("agent_listen", "agent_listen"),
    ("node_id", "node_id"),
    ("store.models_dir", "models_dir"),
    ("engine.preload", "preload"),
    ("engine.runner_prefix", "runner_prefix"),
    ("mock.tokens_per_second", "mock_tokens_per_second"),
    ("mock.lanes", "mock_lanes"),
    ("log_level", "log_level"),
    ("runtime", "runtime"),
];

/// The command with the defaults of its optional flags in its help.
pub fn with_defaults(command: Command) -> Command {
    let tps = DEFAULT_MOCK_TOKENS_PER_SECOND.to_string();
    let defaults: [(&str, &str); 9] = [
        ("config", DEFAULT_CONFIG_FILE),
        ("listen", DEFAULT_LISTEN),
        ("backend", "mock"),
        ("runtime", DEFAULT_RUNTIME),
        ("runtime_abi", "auto"),
        ("rknn_runtime", DEFAULT_RKNN_RUNTIME),
        ("mock_tokens_per_second", &tps),
        (
            "models_dir",
            "[store] models_dir, else $XDG_DATA_HOME/rkllm-server/models",
        ),
        ("log_level", "info"),
    ];
    defaults.iter().fold(command, |command, (id, default)| {
        command.mut_arg(*id, |arg| {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            let arg = arg.help(format!("{help} [default: {default}]"));
            match arg.get_long_help().map(ToString::to_string) {
                Some(long) => arg.long_help(format!("{long} [default: {default}]")),
                None => arg,
            }
        })
    })
}

/// The flags and variables given, from clap's matches.
pub fn given(matches: &ArgMatches) -> Vec<Given> {
    matches
        .ids()
        .filter_map(|id| {
            let from_env = match matches.value_source(id.as_str())? {
                ValueSource::CommandLine => false,
                ValueSource::EnvVariable => true,
                _ => return None,
            };
            Some(Given {
                id: id.as_str().to_owned(),
                from_env,
            })
        })
        .collect()
}

/// `err` naming the flag or variable the user typed, when the value of
/// its key came from one.
pub fn rename(err: ConfigError, given: &[Given]) -> ConfigError {
    let ConfigError::Invalid { key, message } = &err else {
        return err;
    };
    let Some((_, id)) = KEYS.iter().find(|(k, _)| k == key) else {
        return err;
    };
    let Some(given) = given.iter().find(|g| g.id == *id) else {
        return err;
    };
    let command = <super::Cli as clap::CommandFactory>::command();
    let Some(arg) = command.get_arguments().find(|a| a.get_id() == id) else {
        return err;
    };
    let long = arg.get_long().unwrap_or(id);
    let named = match (given.from_env, arg.get_env()) {
        (true, Some(var)) => format!(
            "the environment variable {} (the variable of --{long})",
            var.to_string_lossy()
        ),
        _ => format!("--{long}"),
    };
    ConfigError::Given {
        named,
        message: message.clone(),
    }
}

/// What to do when an address is taken or refused, for the message of a
/// failed bind.
pub fn listen_hint(addr: SocketAddr, err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "; another program listens there (another rkllm-server, or the service: \
             `systemctl status rkllm-server`); see which with `ss -ltnp 'sport = :{}'`, stop \
             it, or choose another address with --listen (RKLLM_SERVER_LISTEN, `listen` in \
             the configuration)",
            addr.port()
        ),
        std::io::ErrorKind::PermissionDenied => format!(
            "; ports below 1024 need privileges: choose a port above 1023 with --listen (now \
             {})",
            addr.port()
        ),
        std::io::ErrorKind::AddrNotAvailable => {
            "; no network interface of this machine has that address: use 0.0.0.0 (all) or \
             one `ip -brief address` lists"
                .to_owned()
        }
        _ => String::new(),
    }
}
