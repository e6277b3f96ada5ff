//! The `rkllm-server` binary: wiring only.

#![deny(unsafe_code)]

use std::process::ExitCode;

use rkllm_server::{Cli, Config};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // A runner process (see `backend::process`): no flags, no config.
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new("--runner")) {
        let code = rkllm_server::startup::run_runner();
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    // A sandbox helper (see `sandbox`): its memory bound, nothing else.
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new("--sandbox")) {
        let memory = std::env::args()
            .nth(2)
            .and_then(|m| m.parse().ok())
            .unwrap_or(rkllm_server::sandbox::DEFAULT_RENDER_MEMORY);
        let code = rkllm_server::sandbox::serve(memory);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    serve()
}

#[tokio::main]
async fn serve() -> ExitCode {
    let cli = Cli::parse_or_exit();
    if let Some(shell) = cli.completions {
        Cli::write_completions(shell, &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    if cli.man_page {
        return match Cli::write_man_page(&mut std::io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("rkllm-server: cannot write the manual page: {err}");
                ExitCode::FAILURE
            }
        };
    }
    let (print_config, check_config) = (cli.print_config, cli.check_config);
    let command = cli.command.clone();
    let config = match Config::load(cli) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("rkllm-server: {err}");
            return ExitCode::from(2);
        }
    };
    if let Some(command) = command {
        return ExitCode::from(rkllm_server::commands::run(command, &config).await);
    }
    if print_config {
        return match config.to_masked_toml() {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("rkllm-server: cannot print the configuration: {err}");
                ExitCode::FAILURE
            }
        };
    }
    if check_config {
        return match rkllm_server::startup::check(&config) {
            Ok(summary) => {
                println!("{summary}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("rkllm-server: {err}");
                ExitCode::from(2)
            }
        };
    }
    // In stdio mode fd 1 becomes a private protocol output and fd 1 itself
    // goes to stderr, before anything (the runtime at model load) prints.
    let protocol_output = if config.stdio {
        match rkllm_server::transport::stdio::claim_stdout() {
            Ok(output) => Some(output),
            Err(err) => {
                eprintln!("rkllm-server: cannot set up stdio: {err}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(&config.log_level))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    rkllm_server::startup::raise_open_file_limit(config.websocket.max_connections);
    match &config.source {
        Some(file) => tracing::info!(file = %file.display(), "configuration read"),
        None => tracing::info!(
            "no configuration file ({} does not exist): defaults, environment and flags",
            rkllm_server::config::DEFAULT_CONFIG_FILE
        ),
    }
    let (addr, tcp_addr, agent_addr) =
        match (config.listen_addr(), config.tcp_addr(), config.agent_addr()) {
            (Ok(addr), Ok(tcp), Ok(agent)) => (addr, tcp, agent),
            (Err(err), _, _) | (_, Err(err), _) | (_, _, Err(err)) => {
                eprintln!("rkllm-server: {}", err.in_file(config.source.as_deref()));
                return ExitCode::from(2);
            }
        };
    let backend = match config.backend {
        rkllm_server::config::BackendKind::Mock => "mock",
        rkllm_server::config::BackendKind::Rkllm => "rkllm",
    };
    let models = config
        .model_specs()
        .iter()
        .map(|m| m.name.clone())
        .collect::<Vec<_>>()
        .join(", ");
    let state = match rkllm_server::startup::build(&config) {
        Ok(state) => state,
        Err(err) => {
            eprintln!("rkllm-server: cannot start: {err}");
            return ExitCode::FAILURE;
        }
    };
    // The listeners beside HTTP: the line protocol and the agent check.
    for (addr, key, what, spawn) in [
        (
            tcp_addr,
            "tcp",
            "line protocol",
            rkllm_server::spawn_tcp as fn(_, _) -> _,
        ),
        (
            agent_addr,
            "agent_listen",
            "agent check",
            rkllm_server::spawn_agent,
        ),
    ] {
        let Some(addr) = addr else { continue };
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                if let Ok(local) = listener.local_addr() {
                    eprintln!("rkllm-server {what} on tcp://{local}");
                }
                spawn(listener, std::sync::Arc::clone(&state));
            }
            Err(err) => {
                eprintln!(
                    "rkllm-server: cannot listen on {addr} ({key}): {err}{}",
                    rkllm_server::config::listen_hint(addr, &err)
                );
                return ExitCode::FAILURE;
            }
        }
    }
    let systemd = std::sync::Arc::new(rkllm_server::notify::SystemdNotifier::from_env());
    let stopping = {
        let systemd = std::sync::Arc::clone(&systemd);
        async move {
            shutdown_signal().await;
            systemd.stopping();
        }
    };
    if let Some(output) = protocol_output {
        tracing::info!(backend = %backend, models = %models, "serving on stdio");
        systemd.ready();
        // The pings start once ready is sent, so that systemd never sees one first.
        let _watchdog = systemd.spawn_watchdog(std::sync::Arc::clone(&state));
        rkllm_server::run_stdio(state, output, stopping).await;
        return ExitCode::SUCCESS;
    }
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!(
                "rkllm-server: cannot listen on {addr}: {err}{}",
                rkllm_server::config::listen_hint(addr, &err)
            );
            return ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(local) => {
            tracing::info!(backend = %backend, models = %models, "serving");
            eprintln!("rkllm-server listening on http://{local}");
        }
        Err(err) => eprintln!("rkllm-server: cannot read the bound address: {err}"),
    }
    systemd.ready();
    let _watchdog = systemd.spawn_watchdog(std::sync::Arc::clone(&state));
    rkllm_server::run(listener, state, stopping).await;
    ExitCode::SUCCESS
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
