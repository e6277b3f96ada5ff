//! The store commands as clients of the running service: with a service
//! at the configuration's `listen`, `pull`, `list`, `show` and `rm` go
//! through its API (with its API key), so a model lands in the service's
//! store and not the user's; without one they work on the store folder
//! and say which. `--models-dir` before or after the subcommand.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::harness::{ScratchDir, Server, closed_port, server_command};
use crate::store::FakeHf;

const NAME: &str = "tiny_w8a8_rk3588_v1.2.1";

fn repos() -> Value {
    json!({"repos": {"acme/tiny": {"files": {
        "tiny_w8a8_rk3588_v1.2.1.rkllm": {"text": "a model for the store ", "repeat": 5000},
    }}}})
}

/// The command line's side: its configuration (`top` at the top) and its
/// user's data folder, where its own store would be.
struct User {
    config: PathBuf,
    data: PathBuf,
    hf: String,
}

impl User {
    fn new(dir: &Path, hf: &FakeHf, top: &str) -> Self {
        let config = dir.join(format!("cli-{}.toml", top.len()));
        std::fs::write(&config, format!("{top}\n[store]\nplatform = \"rk3588\"\n")).unwrap();
        Self {
            config,
            data: dir.join("user-data"),
            hf: hf.endpoint(),
        }
    }

    /// The user's own store.
    fn own_store(&self) -> PathBuf {
        self.data.join("rkllm-server").join("models")
    }

    /// Runs `rkllm-server ARGS`; (success, stdout, stderr).
    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let output = server_command()
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env("XDG_DATA_HOME", &self.data)
            .env("HF_ENDPOINT", &self.hf)
            .env_remove("HF_TOKEN")
            .output()
            .expect("run rkllm-server");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

#[test]
fn the_store_commands_go_through_a_running_service_into_its_store_with_its_api_key() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let theirs = dir.0.join("service-models");
    let server = Server::start(
        &format!(
            "[store]\nplatform = \"rk3588\"\nendpoint = \"{}\"\n",
            hf.endpoint()
        ),
        &["--models-dir", theirs.to_str().unwrap(), "--api-key", "k"],
    );
    let port = server.addr.port();
    // The service listens on 127.0.0.1 here; a CLI reading a wildcard
    // address (as a board's configuration has) reaches it on loopback.
    let user = User::new(
        &dir.0,
        &hf,
        &format!("listen = \"0.0.0.0:{port}\"\napi_keys = [\"k\"]"),
    );
    let via = format!("using the service at http://127.0.0.1:{port}");

    let (ok, out, err) = user.run(&["pull", "acme/tiny"]);
    assert!(ok, "{out}\n{err}");
    assert!(err.contains(&via), "{err}");
    assert!(out.contains(&format!("pulled {NAME}")), "{out}");
    assert!(out.contains(theirs.to_str().unwrap()), "{out}");
    assert!(theirs.join(NAME).join("manifest.json").is_file());
    assert!(
        !user.own_store().exists(),
        "the user's own store was written"
    );

    // The CLI's flags travel with the pull: a name of its own here.
    let (ok, out, err) = user.run(&["pull", "acme/tiny", "--name", "mine"]);
    assert!(ok, "{out}\n{err}");
    assert!(theirs.join("mine").join("manifest.json").is_file(), "{out}");

    // ... and are checked there, each refusal naming its field.
    for (flag, value, field) in [
        ("--revision", "../../etc", "`revision`"),
        ("--tokenizer", "./tokenizer.json", "`tokenizer`"),
    ] {
        let (ok, out, err) = user.run(&["pull", "acme/tiny", flag, value]);
        assert!(!ok && err.contains(field), "{flag}: {out}\n{err}");
    }

    let (ok, out, err) = user.run(&["list"]);
    assert!(ok && err.contains(&via), "{out}\n{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with(NAME))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains("acme/tiny"), "{row}");
    assert!(out.lines().any(|l| l.starts_with("mine ")), "{out}");
    assert!(
        !out.contains("mock"),
        "a configured model is not the store's: {out}"
    );

    let (ok, out, err) = user.run(&["show", NAME]);
    assert!(ok && err.contains(&via), "{out}\n{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["manifest"]["name"], NAME);
    assert_eq!(shown["manifest"]["source"]["spec"], "acme/tiny");
    assert!(
        Path::new(shown["path"].as_str().unwrap()).starts_with(&theirs),
        "{shown}"
    );

    let (ok, out, err) = user.run(&["rm", "mine"]);
    assert!(ok && err.contains(&via), "{out}\n{err}");
    assert!(!theirs.join("mine").exists());
    let (ok, _, err) = user.run(&["rm", "mine"]);
    assert!(!ok && err.contains("not found"), "{err}");
    let (ok, _, err) = user.run(&["show", "nothing-here"]);
    assert!(!ok && err.contains("nothing-here"), "{err}");

    // The service's own folder named with --models-dir, before or after
    // the subcommand, is still worked on through the service.
    for args in [
        ["--models-dir", theirs.to_str().unwrap(), "list"],
        ["list", "--models-dir", theirs.to_str().unwrap()],
    ] {
        let (ok, out, err) = user.run(&args);
        assert!(
            ok && err.contains(&via) && out.contains(NAME),
            "{out}\n{err}"
        );
    }
    // Another folder, before or after: worked on directly, as asked.
    let other = dir.0.join("other-models");
    for args in [
        ["--models-dir", other.to_str().unwrap(), "list"],
        ["list", "--models-dir", other.to_str().unwrap()],
    ] {
        let (ok, out, err) = user.run(&args);
        assert!(ok, "{out}\n{err}");
        assert!(
            err.contains(&format!(
                "--models-dir {} is not the store of the service at 127.0.0.1:{port}",
                other.display()
            )) && err.contains(&format!("using the store {}", other.display())),
            "{err}"
        );
        assert!(
            out.contains(&format!("no models in {}", other.display())),
            "{out}"
        );
    }
    // --local works on the folder even though the service runs.
    let (ok, out, err) = user.run(&["list", "--local"]);
    assert!(ok, "{out}\n{err}");
    assert!(err.contains("--local: using the store"), "{err}");
    assert!(!out.contains(NAME), "{out}");

    // A URL is for the command line on the folder: refused, saying so.
    let url = format!("{}/acme/tiny/resolve/main/{NAME}.rkllm", hf.endpoint());
    let (ok, _, err) = user.run(&["pull", &url]);
    assert!(!ok && err.contains("--local"), "{err}");

    // A wrong key (before or after the subcommand) and none at all are
    // refused naming the settings, never a silent switch to the folder.
    for args in [
        ["--api-key", "wrong", "list"],
        ["list", "--api-key", "wrong"],
    ] {
        let (ok, out, err) = user.run(&args);
        assert!(!ok, "{out}");
        assert!(
            err.contains("refused the API key") && err.contains("api_keys"),
            "{err}"
        );
    }
    // With a folder named, that folder is worked on instead, saying why.
    let (ok, out, err) = user.run(&[
        "--api-key",
        "wrong",
        "list",
        "--models-dir",
        other.to_str().unwrap(),
    ]);
    assert!(ok, "{out}\n{err}");
    assert!(
        err.contains("answered 401 Unauthorized, and a store folder is named")
            && err.contains(&format!("using the store {}", other.display())),
        "{err}"
    );
    let keyless = User::new(&dir.0, &hf, &format!("listen = \"127.0.0.1:{port}\""));
    let (ok, _, err) = keyless.run(&["pull", "acme/tiny"]);
    assert!(!ok, "{err}");
    assert!(
        err.contains("needs an API key") && err.contains("RKLLM_SERVER_API_KEY"),
        "{err}"
    );
    assert!(!keyless.own_store().exists());
}

#[test]
fn without_a_service_the_store_commands_use_the_folder_and_say_which() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let port = closed_port();
    let user = User::new(&dir.0, &hf, &format!("listen = \"127.0.0.1:{port}\""));
    let none = format!("no service at 127.0.0.1:{port}: using the store");

    // The user's own store when nothing names one.
    let (ok, out, err) = user.run(&["pull", "acme/tiny"]);
    assert!(ok, "{out}\n{err}");
    assert!(
        err.contains(&format!("{none} {}", user.own_store().display())),
        "{err}"
    );
    assert!(user.own_store().join(NAME).join("manifest.json").is_file());

    // --models-dir before and after the subcommand.
    for (at, args) in [
        ("before", vec!["--models-dir", "DIR", "pull", "acme/tiny"]),
        ("after", vec!["pull", "acme/tiny", "--models-dir", "DIR"]),
    ] {
        let store = dir.0.join(at);
        let store_text = store.to_str().unwrap();
        let args: Vec<&str> = args
            .into_iter()
            .map(|a| if a == "DIR" { store_text } else { a })
            .collect();
        let (ok, out, err) = user.run(&args);
        assert!(ok, "{at}: {out}\n{err}");
        assert!(err.contains(&format!("{none} {store_text}")), "{at}: {err}");
        assert!(store.join(NAME).join("manifest.json").is_file(), "{at}");
        let (ok, out, _) = user.run(&["list", "--models-dir", store_text]);
        assert!(ok && out.contains(NAME), "{at}: {out}");
        let (ok, out, err) = user.run(&["--models-dir", store_text, "rm", NAME]);
        assert!(ok, "{at}: {out}\n{err}");
        assert!(!store.join(NAME).exists(), "{at}");
    }
}

#[test]
fn a_service_that_takes_no_store_commands_over_its_api_has_its_folder_worked_on() {
    let hf = FakeHf::start(&repos());
    let dir = ScratchDir::new();
    let theirs = dir.0.join("service-models");
    let server = Server::start(
        "[store]\napi_pull = false\n",
        &["--models-dir", theirs.to_str().unwrap()],
    );
    let port = server.addr.port();
    let user = User::new(&dir.0, &hf, &format!("listen = \"127.0.0.1:{port}\""));
    let (ok, out, err) = user.run(&["pull", "acme/tiny"]);
    assert!(ok, "{out}\n{err}");
    assert!(
        err.contains("api_pull = false")
            && err.contains(&format!("using the store {}", theirs.display())),
        "{err}"
    );
    assert!(theirs.join(NAME).join("manifest.json").is_file());
    assert!(!user.own_store().exists());
}
