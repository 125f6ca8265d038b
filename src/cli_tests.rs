//! What a person sees when they run `bulwark`: a start-up error is one line with its
//! causes (no debug dump, no stack trace, even with `RUST_BACKTRACE` set), and a log
//! written to a file or pipe has no terminal colour codes.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_bulwark");

fn config(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn router(config: &tempfile::NamedTempFile) -> Output {
    Command::new(BIN)
        .args(["router", "--config"])
        .arg(config.path())
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap()
}

fn one_line_failure(out: &Output, expect: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("bulwark: ") && stderr.contains(expect),
        "{stderr}"
    );
    assert!(
        !stderr.contains("backtrace") && !stderr.contains('\x1b'),
        "{stderr}"
    );
}

#[test]
fn an_unknown_config_key_is_one_line() {
    let out = router(&config("bogus_key = 1\n"));
    one_line_failure(&out, "unknown field `bogus_key`");
}

#[test]
fn an_address_in_use_is_one_line() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let out = router(&config(&format!(
        "listen = \"{addr}\"\nshard = \"127.0.0.1:1\"\n"
    )));
    one_line_failure(&out, "Address already in use");
}

#[test]
fn a_log_written_to_a_pipe_has_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    // Below the ephemeral range, apart from the default local cluster's ports.
    let ports = ["--port", "25017", "--member-port", "25117"];
    let mut child = Command::new(BIN)
        .args(["local", "--shards", "1"])
        .args(ports)
        .arg("--dir")
        .arg(dir.path())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Lines are read as they come, until the first INFO line: a loaded machine may take
    // a while to start the cluster, and the test waits for that, not for a fixed time.
    let stderr = child.stderr.take().unwrap();
    let (lines, seen) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut text = String::new();
    while !text.contains("INFO") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match seen.recv_timeout(left) {
            Ok(line) => text.push_str(&(line + "\n")),
            Err(_) => break,
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    text.extend(seen.try_iter().map(|l| l + "\n"));
    let stderr = text;
    assert!(stderr.contains("INFO"), "no log lines: {stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr}");
}
