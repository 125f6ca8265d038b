//! The CPU this process has used, for benchmarks that report CPU per operation beside
//! throughput. On a shared virtual machine the throughput moves with the host (time
//! stolen by other guests is no one's CPU time here), while the CPU an operation costs
//! moves much less, so an A/B of two builds can be read from fewer runs.

use std::time::Duration;

/// User and system CPU time used so far by every thread of this process.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTime {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTime {
    pub fn now() -> CpuTime {
        // SAFETY: getrusage writes one `rusage` into the zeroed value it is given.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
        if rc != 0 {
            return CpuTime::default();
        }
        let of = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        CpuTime {
            user: of(usage.ru_utime),
            system: of(usage.ru_stime),
        }
    }

    /// The CPU used between `earlier` and this reading.
    pub fn since(&self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }

    pub fn total(&self) -> Duration {
        self.user + self.system
    }

    /// Microseconds of CPU per document, for `docs` documents.
    pub fn us_per_doc(&self, docs: usize) -> f64 {
        self.total().as_secs_f64() * 1e6 / docs.max(1) as f64
    }

    /// [`CpuTime::us_per_doc`] and the system share of it, for printing.
    pub fn per_doc(&self, docs: usize) -> String {
        format!(
            "cpu {:.1} us/doc ({:.0}% system)",
            self.us_per_doc(docs),
            100.0 * self.system.as_secs_f64() / self.total().as_secs_f64().max(1e-9)
        )
    }
}
