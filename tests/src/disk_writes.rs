//! The bytes this process has sent toward storage, for benchmarks that report them per
//! operation: how many times a replicated document is written is a cost the CPU figures
//! do not show whole (the kernel's writeback runs in its own threads).

/// `write_bytes` of `/proc/self/io`: bytes this process caused to be sent to the block
/// layer (counted when page-cache pages are dirtied, or at a direct write). Truncating or
/// deleting a file before writeback does not subtract what was counted.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiskWrites(u64);

impl DiskWrites {
    /// Zero where `/proc/self/io` cannot be read (the figure then reads as 0).
    pub fn now() -> DiskWrites {
        let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        let bytes = io
            .lines()
            .find_map(|l| l.strip_prefix("write_bytes:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        DiskWrites(bytes)
    }

    /// Bytes written between `earlier` and this reading.
    pub fn since(&self, earlier: DiskWrites) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}
