//! Keeps the Raft log's synced bytes out of the kernel's page cache.
//!
//! Every record appended to the Raft log lands in a new page-cache page, and on a machine
//! with memory to spare nothing ever evicts them: the cache grows by every byte the set
//! replicates, and each new page is memory the kernel must find, zero-fill or not, and map
//! (on the 2-core development guests, whose host hands memory out lazily, the first touch
//! of a page costs about ten times what it does on bare metal). Once a record is synced
//! no one needs its page: raft-rs reads recent entries from `LogStore`'s memory, and an
//! older one, wanted only by a lagging follower or a compaction, can come from the disk.
//! Dropping the synced pages lets the next append reuse memory the kernel just freed.
//! Measured with `repl-bench` (docs/journal/replication-benchmarks.md, six alternating
//! pairs): with 8
//! clients, a median of 27 µs of CPU per replicated document instead of 43.

use std::fs::File;

/// Page-cache granularity the advice is rounded to: a partial page at the end of the log
/// is still being appended to.
const PAGE: u64 = 4096;
/// The largest page-cache folio (a PMD, 2 MiB on x86-64). The kernel drops only folios
/// wholly inside the advised range, and ext4 caches appends in large folios, so a folio
/// that straddled the end of one call's range is dropped by a later call only if that
/// call starts this far back.
const LARGEST_FOLIO: u64 = 2 << 20;

/// Tracks how much of one log file has already been dropped from the page cache.
#[derive(Debug, Default)]
pub struct Uncached {
    /// Bytes from the start of the file (page-aligned) already advised away, but for a
    /// folio that may straddle this offset.
    upto: u64,
}

impl Uncached {
    /// Drops the whole pages of `file` below `synced` (bytes known to be on disk) that
    /// were not dropped before. Advice only: a failure changes nothing but memory use.
    pub fn drop_synced(&mut self, file: &File, synced: u64) {
        let end = synced / PAGE * PAGE;
        if end <= self.upto {
            return;
        }
        let from = self.upto.saturating_sub(LARGEST_FOLIO);
        if let Err(e) = advise_dont_need(file, from, end - from) {
            tracing::debug!(error = %e, "posix_fadvise(DONTNEED) on the raft log failed");
        }
        self.upto = end;
    }

    /// The file was cut at `len` (or replaced, `len` 0): pages from there on are cached again.
    pub fn cut(&mut self, len: u64) {
        self.upto = self.upto.min(len / PAGE * PAGE);
    }
}

#[cfg(target_os = "linux")]
fn advise_dont_need(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Ok(());
    };
    // SAFETY: the descriptor is open for as long as `file` is borrowed, and the call
    // reads no memory of ours.
    let rc =
        unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_DONTNEED) };
    // posix_fadvise returns the error number instead of setting errno.
    match rc {
        0 => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_dont_need(_: &File, _: u64, _: u64) -> std::io::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::Write;
    use std::os::fd::AsRawFd;

    use super::*;

    /// How many of `file`'s first `pages` pages are in the page cache (`mincore`).
    fn resident(file: &File, pages: usize) -> usize {
        let len = pages * PAGE as usize;
        // SAFETY: a shared read-only mapping (it sees the file's page cache) of an open
        // file that reaches into the last of the `pages` pages, unmapped before
        // returning; `mincore` writes one byte per page into `vec`.
        unsafe {
            let addr = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(addr, libc::MAP_FAILED, "mmap");
            let mut vec = vec![0u8; pages];
            assert_eq!(libc::mincore(addr, len, vec.as_mut_ptr()), 0, "mincore");
            libc::munmap(addr, len);
            vec.iter().filter(|b| *b & 1 == 1).count()
        }
    }

    #[test]
    fn synced_whole_pages_leave_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("log"))
            .unwrap();
        // 8 MiB in 64 KiB appends, as a log grows, and a partial page after them.
        let pages = 2048;
        for _ in 0..pages / 16 {
            file.write_all(&[7u8; 16 * PAGE as usize]).unwrap();
        }
        file.write_all(&[7u8; 100]).unwrap();
        file.sync_data().unwrap();
        assert_eq!(
            resident(&file, pages + 1),
            pages + 1,
            "written pages start cached"
        );

        let mut uncached = Uncached::default();
        // Synced up to just past 4 MiB: what lies below 4 MiB leaves the cache.
        uncached.drop_synced(&file, (pages as u64 / 2) * PAGE + 10);
        assert_eq!(resident(&file, pages / 2), 0, "the first half is gone");
        assert!(
            resident(&file, pages + 1) > pages / 2,
            "the rest is still cached"
        );

        uncached.drop_synced(&file, pages as u64 * PAGE + 100);
        assert_eq!(resident(&file, pages), 0, "every whole synced page is gone");
        assert_eq!(uncached.upto, pages as u64 * PAGE);

        uncached.cut(5 * PAGE + 1);
        assert_eq!(
            uncached.upto,
            5 * PAGE,
            "a cut file is cached again from the cut"
        );
    }
}
