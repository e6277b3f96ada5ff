//! The bounded reads over scratch trees holding what a board's files are
//! not: FIFOs, devices, sockets, huge files, links out of the tree.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use super::*;

/// Upper bound on a read that must return; not a performance assertion.
const LIVENESS: Duration = Duration::from_secs(60);

/// A scratch folder, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("rkllm-board-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn put(&self, rel: &str, text: &str) {
        let path = self.0.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
}

/// Reads `rel` under `root` on a thread, which must return within the
/// liveness bound (a read that blocks fails the test instead of hanging it).
fn read_returns(root: &Path, rel: &str) -> io::Result<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn({
        let (root, rel) = (root.to_owned(), rel.to_owned());
        move || {
            let _ = tx.send(Tree::new(&root).read_text(&rel));
        }
    });
    rx.recv_timeout(LIVENESS)
        .unwrap_or_else(|_| panic!("reading {rel} did not return"))
}

fn refusal(result: io::Result<String>) -> String {
    match result {
        Ok(text) => panic!("read {} bytes that should have been refused", text.len()),
        Err(err) => err.to_string(),
    }
}

#[test]
fn a_fifo_without_a_writer_is_refused_at_once() {
    let dir = Scratch::new("fifo");
    mkfifo(&dir.0.join("temp"));
    let why = refusal(read_returns(&dir.0, "temp"));
    assert!(why.contains("a FIFO"), "{why}");
    // Neither is it a device node.
    assert_eq!(Tree::new(&dir.0).node_opens("temp"), None);
}

#[test]
fn a_socket_is_refused() {
    let dir = Scratch::new("socket");
    let _listener = std::os::unix::net::UnixListener::bind(dir.0.join("temp")).unwrap();
    let why = refusal(read_returns(&dir.0, "temp"));
    assert!(why.contains("a socket"), "{why}");
}

#[test]
fn devices_are_refused_and_a_link_to_one_too() {
    // Under `/dev`, where `zero` is a device (and an endless file).
    let why = refusal(read_returns(Path::new("/dev"), "zero"));
    assert!(why.contains("a character device"), "{why}");
    if under_emulator() {
        // qemu-user's `-L` puts its own root where "/" is opened, so a
        // link to /dev/zero read with "/" as the root is not the host's.
        eprintln!("a link to /dev/zero under the root /: not checked under an emulator");
        return;
    }
    let dir = Scratch::new("device");
    symlink("/dev/zero", dir.0.join("zero")).unwrap();
    let rel = dir.0.join("zero");
    let why = refusal(read_returns(Path::new("/"), rel.to_str().unwrap()));
    assert!(why.contains("a character device"), "{why}");
}

#[test]
fn a_file_longer_than_the_bound_is_refused_whole_and_one_at_it_is_read() {
    let dir = Scratch::new("long");
    dir.put("at", &"1".repeat(MAX_FILE_BYTES));
    dir.put("over", &"1".repeat(MAX_FILE_BYTES + 1));
    assert_eq!(
        read_returns(&dir.0, "at").unwrap().len(),
        MAX_FILE_BYTES,
        "a file at the bound is read whole"
    );
    let why = refusal(read_returns(&dir.0, "over"));
    assert!(why.contains("longer than 16384 bytes"), "{why}");
    // A 512 MiB file (sparse) is refused after the bound's bytes.
    let huge = std::fs::File::create(dir.0.join("huge")).unwrap();
    huge.set_len(512 << 20).unwrap();
    let why = refusal(read_returns(&dir.0, "huge"));
    assert!(why.contains("longer than"), "{why}");
}

#[test]
fn links_are_followed_inside_the_root_and_never_out_of_it() {
    let scratch = Scratch::new("links");
    let root = scratch.0.join("root");
    scratch.put(
        "root/sys/devices/platform/dmc/devfreq/dmc/cur_freq",
        "2112000000\n",
    );
    scratch.put(
        "root/sys/firmware/devicetree/base/compatible",
        "rockchip,rk3588\0",
    );
    scratch.put("outside/temp", "99000\n");
    std::fs::create_dir_all(root.join("sys/class/devfreq")).unwrap();
    std::fs::create_dir_all(root.join("proc")).unwrap();
    std::fs::create_dir_all(root.join("sys/class/thermal/thermal_zone0")).unwrap();
    // sysfs's relative link, and the absolute one of /proc/device-tree.
    symlink(
        "../../devices/platform/dmc/devfreq/dmc",
        root.join("sys/class/devfreq/dmc"),
    )
    .unwrap();
    symlink(
        "/sys/firmware/devicetree/base",
        root.join("proc/device-tree"),
    )
    .unwrap();
    let tree = Tree::new(&root);
    assert_eq!(
        tree.read_text("sys/class/devfreq/dmc/cur_freq").unwrap(),
        "2112000000\n"
    );
    assert_eq!(
        tree.read("proc/device-tree/compatible").unwrap(),
        b"rockchip,rk3588\0"
    );
    assert_eq!(tree.list("sys/class/devfreq/dmc").unwrap(), ["cur_freq"]);
    // Out of the tree: by an absolute path, by enough `..`, and by `..`
    // in the path asked for. Each is resolved inside the root, where
    // there is no such file.
    let zone = root.join("sys/class/thermal/thermal_zone0");
    symlink(scratch.0.join("outside/temp"), zone.join("temp")).unwrap();
    symlink("../../../../../outside/temp", zone.join("temp2")).unwrap();
    for rel in [
        "sys/class/thermal/thermal_zone0/temp",
        "sys/class/thermal/thermal_zone0/temp2",
        "../outside/temp",
        "sys/../../outside/temp",
    ] {
        let err = tree.read_text(rel).expect_err(rel);
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{rel}: {err}");
    }
    // `..` stops at the root, as `/..` is `/`.
    assert_eq!(
        tree.read_text("../../sys/class/devfreq/dmc/cur_freq")
            .unwrap(),
        "2112000000\n"
    );
}

#[test]
fn a_loop_of_links_ends_in_an_error() {
    let dir = Scratch::new("loop");
    symlink("b", dir.0.join("a")).unwrap();
    symlink("a", dir.0.join("b")).unwrap();
    let err = read_returns(&dir.0, "a").unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(rustix::io::Errno::LOOP.raw_os_error()),
        "{err}"
    );
}

#[test]
fn a_path_deeper_than_the_bound_is_an_error() {
    let dir = Scratch::new("deep");
    let at = vec!["d"; MAX_DEPTH].join("/");
    let over = vec!["d"; MAX_DEPTH + 1].join("/");
    dir.put(&format!("{over}/x"), "1\n");
    let tree = Tree::new(&dir.0);
    assert_eq!(tree.list(&at).unwrap(), ["d"]);
    let err = tree.read_text(&format!("{over}/x")).unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(rustix::io::Errno::NAMETOOLONG.raw_os_error()),
        "{err}"
    );
}

#[test]
fn a_directory_with_more_entries_than_the_bound_is_refused() {
    let dir = Scratch::new("entries");
    for n in 0..MAX_ENTRIES {
        dir.put(&format!("at/{n}"), "");
        dir.put(&format!("over/{n}"), "");
    }
    dir.put("over/one-more", "");
    let tree = Tree::new(&dir.0);
    assert_eq!(tree.list("at").unwrap().len(), MAX_ENTRIES);
    let why = tree.list("over").unwrap_err().to_string();
    assert!(why.contains("more than"), "{why}");
}

#[test]
fn a_file_in_place_of_a_folder_or_a_folder_in_place_of_a_file_is_an_error() {
    let dir = Scratch::new("kinds");
    dir.put("file", "1\n");
    std::fs::create_dir_all(dir.0.join("folder")).unwrap();
    let tree = Tree::new(&dir.0);
    assert!(tree.list("file").is_err());
    assert!(tree.read("file/x").is_err());
    let why = tree.read("folder").unwrap_err().to_string();
    assert!(why.contains("a directory"), "{why}");
    assert!(tree.exists("folder") && tree.exists("file") && !tree.exists("none"));
}

#[test]
fn a_node_is_opened_only_when_it_is_a_device_or_a_fake_trees_file() {
    let dir = Scratch::new("nodes");
    dir.put("dev/dri/renderD129", "");
    let tree = Tree::new(&dir.0);
    assert_eq!(tree.node_opens("dev/dri/renderD129"), Some(true));
    assert_eq!(tree.node_opens("dev/rknpu"), None);
    assert_eq!(tree.node_opens("dev/dri"), None);
    // /dev/null is a device anyone may open.
    assert_eq!(Tree::new(Path::new("/dev")).node_opens("null"), Some(true));
}

#[test]
fn the_path_being_read_is_noted_and_cleared_after() {
    let dir = Scratch::new("noted");
    dir.put("a", "1\n");
    let now = Mutex::new(None);
    let tree = Tree::noting(&dir.0, &now);
    tree.read("a").unwrap();
    assert_eq!(*now.lock(), None);
    assert_eq!(tree.path("a"), dir.0.join("a"));
}

/// Whether the tests run under an emulator (`RKLLM_E2E_RUNNER`, which
/// cross/test-aarch64.sh sets for the whole suite).
fn under_emulator() -> bool {
    std::env::var("RKLLM_E2E_RUNNER").is_ok_and(|r| !r.trim().is_empty())
}
