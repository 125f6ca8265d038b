//! What compacting the Raft log costs its thread, with the default retention.
//!
//! Fills a log with `--mb` MiB of 100 KiB entries (one insert batch of 100 documents of
//! 1 KiB each), syncing every ten, then compacts it keeping the newest `--retain-mb` MiB,
//! as the driver does after a checkpoint. It prints how long the compaction held the
//! caller (the Raft thread, in a member), the CPU that took, and the log's size on disk
//! before and after. Repeats `--rounds` times, appending the same amount again before
//! each round. Then it reopens the log, as a restarted member does, and prints how much
//! the process's peak resident memory rose meanwhile.
//!
//! `cargo run --release -p shard --example log_compaction -- --mb 512 --retain-mb 256`

use std::time::Instant;

use raft::eraftpb::Entry;
use raft::Storage;
use shard::repl::log::DurableLog;

const ENTRY_BYTES: usize = 100 * 1024;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rusage() -> libc::rusage {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage
}

fn cpu_seconds() -> f64 {
    let usage = rusage();
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The process's peak resident set so far, in MiB.
fn peak_rss_mib() -> u64 {
    rusage().ru_maxrss as u64 / 1024
}

fn disk_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn main() {
    let mb = arg("--mb", 512);
    let retain_mb = arg("--retain-mb", 256);
    let rounds = arg("--rounds", 3);
    let dir = tempfile::tempdir().unwrap();
    let mut log = DurableLog::open(dir.path(), &[1, 2, 3], true).unwrap();
    let payload: Vec<u8> = (0..ENTRY_BYTES).map(|i| (i % 251) as u8).collect();
    let per_round = mb * 1024 * 1024 / ENTRY_BYTES as u64;
    let mut next = log.storage().last_index().unwrap() + 1;
    for round in 1..=rounds {
        for chunk in 0..per_round.div_ceil(10) {
            let n = 10.min(per_round - chunk * 10);
            let entries: Vec<Entry> = (0..n)
                .map(|i| Entry {
                    index: next + i,
                    term: 1,
                    data: payload.clone().into(),
                    ..Default::default()
                })
                .collect();
            next += n;
            log.append(&entries).unwrap();
            log.flush().unwrap();
        }
        log.set_commit(next - 1).unwrap();
        let before = disk_bytes(dir.path());
        let to = log.tail_start(retain_mb * 1024 * 1024).saturating_sub(1);
        let (start, cpu) = (Instant::now(), cpu_seconds());
        log.compact(to).unwrap();
        let (held, cpu) = (start.elapsed(), cpu_seconds() - cpu);
        println!(
            "round {round}: compacted up to {to} of {}: held the caller {:.1} ms, {:.1} ms of CPU; \
             on disk {} MiB before, {} MiB after",
            next - 1,
            held.as_secs_f64() * 1e3,
            cpu * 1e3,
            before >> 20,
            disk_bytes(dir.path()) >> 20
        );
    }
    drop(log);
    let (peak, start) = (peak_rss_mib(), Instant::now());
    let log = DurableLog::open(dir.path(), &[1, 2, 3], true).unwrap();
    println!(
        "reopened a log of {} MiB ({} entries) in {:.0} ms: peak resident memory {} MiB before, {} MiB after",
        disk_bytes(dir.path()) >> 20,
        log.storage().last_index().unwrap() + 1 - log.first_index(),
        start.elapsed().as_secs_f64() * 1e3,
        peak,
        peak_rss_mib()
    );
}
