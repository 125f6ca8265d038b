//! Every benchmark program still runs to the end, at a size too small to measure
//! anything. A benchmark that no longer starts is found here, not when someone needs its
//! figures: `handshake-bench` stopped starting its routers once internal authentication
//! became mandatory with auth, and nothing noticed.
//!
//! These check only that each program exits 0 and prints its figures' header; they time
//! nothing.

use std::process::Command;

fn run(exe: &str, args: &[&str], expect: &str) {
    let out = Command::new(exe)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap_or_else(|e| panic!("{exe} did not start: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{exe} {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(expect),
        "{exe} printed no `{expect}`:\n{stdout}\n{stderr}"
    );
}

#[test]
fn handshake_bench_runs() {
    run(
        env!("CARGO_BIN_EXE_handshake-bench"),
        &["--secs", "1", "--clients", "4", "--idle", "50"],
        "handshakes/s",
    );
}

#[test]
fn txn_bench_runs() {
    run(
        env!("CARGO_BIN_EXE_txn-bench"),
        &["--ops", "20", "--clients", "2", "--runs", "1"],
        "ratio transactions/updates",
    );
}

#[test]
fn crud_bench_runs() {
    run(
        env!("CARGO_BIN_EXE_crud-bench"),
        &[
            "--runs",
            "1",
            "--docs",
            "500",
            "--lookups",
            "50",
            "--clients",
            "2",
        ],
        "ratio",
    );
}
