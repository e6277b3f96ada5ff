//! Which store a store command works on: the running service's, through
//! its API, or the store folder itself; said on stderr in one line.
//!
//! "Running" is decided by asking the configured `listen` address for
//! `/api/tags` with a short connect timeout: nothing there (refused, no
//! answer) means the folder. An answer without this server's
//! `X-Rkllm-Node` header is another program, and the folder is used too.
//! A refused API key is an error naming the settings, never a silent
//! switch to the folder (unless `--models-dir` names one: that folder is
//! then worked on, and the line says why).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use super::service::{Service, error_text, key_refused};
use crate::config::{Config, DEFAULT_CONFIG_FILE};

/// How long the service's address is tried before the folder is used.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the service may take to answer the first request.
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);
/// The store of the packaged service (its systemd unit's
/// `RKLLM_SERVER_MODELS_DIR`).
pub const SERVICE_MODELS_DIR: &str = "/var/lib/rkllm-server/models";

/// Where a store command goes.
pub enum Found {
    /// Through the running service.
    Service(Service),
    /// To this store folder.
    Local(PathBuf),
    /// Neither: the message is printed, here is the exit code.
    Failed(u8),
}

/// The folder the store commands use without a service: `models_dir`
/// when it is set (flag, variable or file), else the packaged service's
/// store when the configuration read is the installed one, else the
/// user's own.
pub fn local_dir(config: &Config) -> PathBuf {
    local_dir_of(
        config.store.models_dir.as_deref(),
        config.source.as_deref(),
        crate::store::default_dir,
    )
}

fn local_dir_of(
    models_dir: Option<&Path>,
    source: Option<&Path>,
    default: impl FnOnce() -> PathBuf,
) -> PathBuf {
    match (models_dir, source) {
        (Some(dir), _) => dir.to_owned(),
        (None, Some(file)) if file == Path::new(DEFAULT_CONFIG_FILE) => {
            PathBuf::from(SERVICE_MODELS_DIR)
        }
        (None, _) => default(),
    }
}

/// The address a client reaches a server listening on `addr` at: a
/// wildcard address is reached on loopback.
pub fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), addr.port())
        }
        _ => addr,
    }
}

/// Whether two folders are one (by their real paths when they exist).
fn same_dir(a: &Path, b: &Path) -> bool {
    let real = |p: &Path| {
        std::fs::canonicalize(p)
            .or_else(|_| std::path::absolute(p))
            .unwrap_or_else(|_| p.to_owned())
    };
    real(a) == real(b)
}

/// Says which folder is used and why.
fn local(dir: PathBuf, why: &str) -> Found {
    eprintln!("rkllm-server: {why}: using the store {}", dir.display());
    Found::Local(dir)
}

/// The service running at the configuration's address, when one answers
/// as rkllm-server (whatever its store).
pub async fn running(config: &Config) -> Option<Service> {
    let addr = reachable(config.listen_addr().ok()?);
    let http = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .ok()?;
    let service = Service::new(http, addr, config.api_keys.first().cloned());
    let answer = service
        .get("/health")
        .timeout(PROBE_TIMEOUT)
        .send()
        .await
        .ok()?;
    answer
        .headers()
        .contains_key("x-rkllm-node")
        .then_some(service)
}

/// Finds where the store commands go (see the module's comment).
pub async fn find(config: &Config, force_local: bool) -> Found {
    let dir = local_dir(config);
    if force_local {
        return local(dir, "--local");
    }
    let addr = match config.listen_addr() {
        Ok(addr) => reachable(addr),
        Err(err) => return local(dir, &format!("no service address ({err})")),
    };
    let http = match reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        // The service is asked directly: never through a proxy of the
        // environment, and its API key never follows a redirect.
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(http) => http,
        Err(err) => return local(dir, &format!("no HTTP client ({err})")),
    };
    let service = Service::new(http, addr, config.api_keys.first().cloned());
    let answer = match service.get("/api/tags").timeout(PROBE_TIMEOUT).send().await {
        Ok(answer) => answer,
        Err(err) if err.is_timeout() && !err.is_connect() => {
            return local(
                dir,
                &format!(
                    "the service at {addr} did not answer within {} s",
                    PROBE_TIMEOUT.as_secs()
                ),
            );
        }
        Err(_) => return local(dir, &format!("no service at {addr}")),
    };
    if !answer.headers().contains_key("x-rkllm-node") {
        return local(dir, &format!("{addr} answers, but not as rkllm-server"));
    }
    let status = answer.status();
    let explicit = config.given.iter().find(|g| g.id == "models_dir");
    if explicit.is_some() && !status.is_success() {
        // Its store cannot be read; the folder asked for is worked on.
        return local(
            dir,
            &format!("the service at {addr} answered {status}, and a store folder is named"),
        );
    }
    if status == StatusCode::UNAUTHORIZED {
        eprintln!("rkllm-server: {}", key_refused(addr, service.has_key()));
        return Found::Failed(1);
    }
    let body = answer.text().await.unwrap_or_default();
    if !status.is_success() {
        eprintln!(
            "rkllm-server: the service at {addr} answered {status}: {} (--local works on the \
             store folder itself)",
            error_text(&body)
        );
        return Found::Failed(1);
    }
    let tags: Value = serde_json::from_str(&body).unwrap_or_default();
    let service_dir = tags["store"]["models_dir"].as_str().map(PathBuf::from);
    if let (Some(given), Some(theirs)) = (explicit, &service_dir)
        && !same_dir(&dir, theirs)
    {
        let named = if given.from_env {
            "RKLLM_SERVER_MODELS_DIR"
        } else {
            "--models-dir"
        };
        return local(
            dir.clone(),
            &format!(
                "{named} {} is not the store of the service at {addr} ({})",
                dir.display(),
                theirs.display()
            ),
        );
    }
    if tags["store"]["api_pull"] == false {
        return local(
            service_dir.unwrap_or(dir),
            &format!(
                "the service at {addr} takes no store commands over its API ([store] api_pull \
                 = false)"
            ),
        );
    }
    eprintln!(
        "rkllm-server: using the service at http://{addr}{}",
        service_dir
            .as_ref()
            .map_or_else(String::new, |d| format!(" (its store: {})", d.display()))
    );
    Found::Service(service.with_dir(service_dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_is_models_dir_else_the_services_with_the_installed_config_else_the_users() {
        let user = || PathBuf::from("/home/u/.local/share/rkllm-server/models");
        let installed = Path::new(DEFAULT_CONFIG_FILE);
        let other = Path::new("/tmp/mine.toml");
        let set = Path::new("/srv/models");
        assert_eq!(local_dir_of(Some(set), Some(installed), user), set);
        assert_eq!(local_dir_of(Some(set), None, user), set);
        assert_eq!(
            local_dir_of(None, Some(installed), user),
            Path::new(SERVICE_MODELS_DIR)
        );
        assert_eq!(local_dir_of(None, Some(other), user), user());
        assert_eq!(local_dir_of(None, None, user), user());
    }

    #[test]
    fn a_wildcard_listen_address_is_reached_on_loopback() {
        for (listen, reached) in [
            ("0.0.0.0:8080", "127.0.0.1:8080"),
            ("[::]:9000", "[::1]:9000"),
            ("192.168.1.5:8080", "192.168.1.5:8080"),
            ("127.0.0.1:1", "127.0.0.1:1"),
        ] {
            let listen: SocketAddr = listen.parse().unwrap();
            assert_eq!(reachable(listen).to_string(), reached);
        }
    }
}
