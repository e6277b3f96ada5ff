//! The `rkllm-server` binary: wiring only.

#![deny(unsafe_code)]

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use rkllm_server::config::BackendKind;
use rkllm_server::notify::SystemdNotifier;
use rkllm_server::{AppState, Cli, Config, commands};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    rkllm_server::memory::settle();
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

/// Reads the configuration, answers what the command line asks instead
/// of serving, or else sets up logging, builds the state, binds and
/// serves until a signal.
#[tokio::main]
async fn serve() -> ExitCode {
    let cli = Cli::parse_or_exit();
    if let Some(code) = commands::before_config(&cli) {
        return ExitCode::from(code);
    }
    let asked = commands::Asked::of(&cli);
    let config = match Config::load(cli) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("rkllm-server: {err}");
            return ExitCode::from(2);
        }
    };
    if let Some(code) = asked.run(&config).await {
        return ExitCode::from(code);
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
    init_tracing(&config);
    rkllm_server::startup::raise_open_file_limit(config.websocket.max_connections);
    log_source(&config);
    let (addr, tcp_addr, agent_addr) =
        match (config.listen_addr(), config.tcp_addr(), config.agent_addr()) {
            (Ok(addr), Ok(tcp), Ok(agent)) => (addr, tcp, agent),
            (Err(err), _, _) | (_, Err(err), _) | (_, _, Err(err)) => {
                eprintln!("rkllm-server: {}", err.in_file(config.source.as_deref()));
                return ExitCode::from(2);
            }
        };
    let serving = Serving::of(&config);
    let state = match rkllm_server::startup::build(&config) {
        Ok(state) => state,
        Err(err) => {
            eprintln!("rkllm-server: cannot start: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(code) = listen_beside(tcp_addr, agent_addr, &state).await {
        return code;
    }
    match protocol_output {
        Some(output) => serve_stdio(state, output, &serving).await,
        None => serve_http(state, addr, &serving).await,
    }
}

/// Serves the line protocol on stdio until end of input or a signal.
async fn serve_stdio(state: Arc<AppState>, output: std::fs::File, serving: &Serving) -> ExitCode {
    let (systemd, stopping) = systemd_and_signal();
    tracing::info!(backend = %serving.backend, models = %serving.models, "serving on stdio");
    systemd.ready();
    // The pings start once ready is sent, so that systemd never sees one first.
    let _watchdog = systemd.spawn_watchdog(Arc::clone(&state));
    rkllm_server::run_stdio(state, output, stopping).await;
    ExitCode::SUCCESS
}

/// Binds `addr` and serves HTTP and WebSocket on it until a signal.
async fn serve_http(state: Arc<AppState>, addr: SocketAddr, serving: &Serving) -> ExitCode {
    let (systemd, stopping) = systemd_and_signal();
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
            tracing::info!(backend = %serving.backend, models = %serving.models, "serving");
            eprintln!("rkllm-server listening on http://{local}");
        }
        Err(err) => eprintln!("rkllm-server: cannot read the bound address: {err}"),
    }
    systemd.ready();
    let _watchdog = systemd.spawn_watchdog(Arc::clone(&state));
    rkllm_server::run(listener, state, stopping).await;
    ExitCode::SUCCESS
}

/// The systemd notifier, and what resolves on SIGINT or SIGTERM once it
/// has told systemd that the service is stopping.
fn systemd_and_signal() -> (
    Arc<SystemdNotifier>,
    impl Future<Output = ()> + Send + 'static,
) {
    let systemd = Arc::new(SystemdNotifier::from_env());
    let stopping = {
        let systemd = Arc::clone(&systemd);
        async move {
            shutdown_signal().await;
            systemd.stopping();
        }
    };
    (systemd, stopping)
}

/// Log lines go to stderr, filtered by `log_level`, in colour on a terminal.
fn init_tracing(config: &Config) {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(&config.log_level))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Says where the configuration came from.
fn log_source(config: &Config) {
    match &config.source {
        Some(file) => tracing::info!(file = %file.display(), "configuration read"),
        None => tracing::info!(
            "no configuration file ({} does not exist): defaults, environment and flags",
            rkllm_server::config::DEFAULT_CONFIG_FILE
        ),
    }
}

/// What the "serving" log line says.
struct Serving {
    backend: &'static str,
    /// The configured models' names.
    models: String,
}

impl Serving {
    fn of(config: &Config) -> Self {
        let backend = match config.backend {
            BackendKind::Mock => "mock",
            BackendKind::Rkllm => "rkllm",
        };
        let models = config
            .model_specs()
            .iter()
            .map(|m| m.name.clone())
            .collect::<Vec<_>>()
            .join(", ");
        Self { backend, models }
    }
}

/// Binds the listeners beside HTTP, the line protocol and the agent check
/// (each when configured), and serves them on `state`. A bind that fails
/// is said on stderr and gives the exit code.
async fn listen_beside(
    tcp_addr: Option<SocketAddr>,
    agent_addr: Option<SocketAddr>,
    state: &Arc<AppState>,
) -> Result<(), ExitCode> {
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
                spawn(listener, Arc::clone(state));
            }
            Err(err) => {
                eprintln!(
                    "rkllm-server: cannot listen on {addr} ({key}): {err}{}",
                    rkllm_server::config::listen_hint(addr, &err)
                );
                return Err(ExitCode::FAILURE);
            }
        }
    }
    Ok(())
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
