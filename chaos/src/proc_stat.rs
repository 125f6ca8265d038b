//! CPU time and limits from /proc and libc: the storm scenarios report the router's user
//! and system CPU, the figure that goes to 100% when handshakes contend on the kernel's
//! random-number lock (`nonce-contention`).

use std::path::Path;

/// (user ms, system ms) from a `/proc/<pid>/stat` or `/proc/<pid>/task/<tid>/stat` file.
pub fn cpu_ms(stat_file: &Path) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(stat_file).ok()?;
    let (_, fields) = comm_and_fields(&stat)?;
    // After comm: state is field 3, utime field 14, stime field 15 (1-based).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let tick = 1000.0 / clock_ticks_per_sec();
    Some((utime * tick, stime * tick))
}

/// The thread or process name in a stat file, and the fields after it.
pub fn comm_and_fields(stat: &str) -> Option<(&str, Vec<&str>)> {
    // comm is in parentheses and may contain spaces; fields follow the last ')'.
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    Some((
        &stat[open + 1..close],
        stat.get(close + 2..)?.split(' ').collect(),
    ))
}

/// Summed CPU of a process's threads whose names start with `prefix`.
pub fn threads_cpu_ms(pid: &str, prefix: &str) -> (f64, f64) {
    let mut total = (0.0, 0.0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return total;
    };
    for t in tasks.flatten() {
        let path = t.path().join("stat");
        let named = std::fs::read_to_string(&path)
            .ok()
            .is_some_and(|s| comm_and_fields(&s).is_some_and(|(c, _)| c.starts_with(prefix)));
        if let (true, Some((u, s))) = (named, cpu_ms(&path)) {
            total.0 += u;
            total.1 += s;
        }
    }
    total
}

fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Raises the open-files limit towards `want` (the hard limit too, when privileged);
/// returns the soft limit in force.
pub fn raise_fd_limit(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < want {
            let raised = libc::rlimit {
                rlim_cur: want,
                rlim_max: want.max(lim.rlim_max),
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                lim.rlim_cur = want.min(lim.rlim_max);
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        }
    }
    lim.rlim_cur
}
