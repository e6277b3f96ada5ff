//! The systemd notify protocol, checked against a socket the test creates.

use std::os::unix::net::UnixDatagram;

use crate::harness::{LIVENESS, ScratchDir, Server, mock_config};

fn next_message(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = socket
        .recv(&mut buf)
        .expect("a notify message before the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn wait_for(socket: &UnixDatagram, wanted: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let message = next_message(socket);
        let done = message.lines().any(|l| l == wanted);
        seen.push(message);
        if done {
            return seen;
        }
    }
}

#[tokio::test]
async fn the_server_reports_ready_watchdog_and_stopping_to_systemd() {
    let dir = ScratchDir::new();
    let path = dir.0.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket.set_read_timeout(Some(LIVENESS)).unwrap();
    let env = [
        ("NOTIFY_SOCKET", path.to_str().unwrap()),
        ("WATCHDOG_USEC", "200000"),
    ];
    let mut server = Server::start_env(&mock_config(0.0, 0, ""), &[], &env);
    let first = wait_for(&socket, "READY=1");
    assert!(
        first.iter().all(|m| !m.contains("WATCHDOG=1")),
        "READY=1 comes first: {first:?}"
    );
    wait_for(&socket, "WATCHDOG=1");
    wait_for(&socket, "WATCHDOG=1");
    server.terminate();
    wait_for(&socket, "STOPPING=1");
    assert!(server.wait_exit().success());
}
