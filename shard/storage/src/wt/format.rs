//! The on-disk format of a data directory.
//!
//! WiredTiger 10 cannot read files written by WiredTiger 3.1 (nor the reverse), and a
//! member that opened another build's files would at best fail deep inside recovery. A
//! small file beside WiredTiger's names the format the directory was created in; a
//! directory in another format is refused with one clear error before WiredTiger sees it.

use std::io::Write;
use std::path::Path;

use crate::{Result, StorageError};

/// The name of the file that records the format.
pub const FORMAT_FILE: &str = "BULWARK_FORMAT";
/// The format this build writes and reads: bump it whenever files written by the previous
/// build cannot be read by this one.
pub const FORMAT: &str = "bulwark-storage 2 (WiredTiger 10.0.0)";
/// What a directory with WiredTiger files and no format file was written by.
const BEFORE_FORMAT_FILES: &str = "bulwark-storage 1 (WiredTiger 3.1.0)";

/// Checks that `dir` is empty or holds this build's format, and records the format in a
/// new directory.
pub fn check_or_record(dir: &Path) -> Result<()> {
    let file = dir.join(FORMAT_FILE);
    match std::fs::read_to_string(&file) {
        Ok(found) if found.trim() == FORMAT => Ok(()),
        Ok(found) => Err(mismatch(dir, found.trim())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.join("WiredTiger").exists() {
                return Err(mismatch(dir, BEFORE_FORMAT_FILES));
            }
            record(dir, &file)
        }
        Err(e) => Err(e.into()),
    }
}

fn mismatch(dir: &Path, found: &str) -> StorageError {
    StorageError::Format {
        dir: dir.display().to_string(),
        found: found.to_string(),
        expected: FORMAT.to_string(),
    }
}

/// Written to a temporary name and renamed, so a crash never leaves a torn format file.
fn record(dir: &Path, file: &Path) -> Result<()> {
    let tmp = dir.join(format!("{FORMAT_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(format!("{FORMAT}\n").as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, file)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_directory_records_the_format_and_opens_again() {
        let dir = tempfile::tempdir().unwrap();
        check_or_record(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(FORMAT_FILE)).unwrap();
        assert_eq!(text.trim(), FORMAT);
        check_or_record(dir.path()).unwrap();
    }

    #[test]
    fn data_from_an_older_build_is_refused_with_both_formats_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("WiredTiger"),
            "WiredTiger\nWiredTiger 3.1.0\n",
        )
        .unwrap();
        let e = check_or_record(dir.path()).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(BEFORE_FORMAT_FILES), "{text}");
        assert!(text.contains(FORMAT), "{text}");
        assert!(!dir.path().join(FORMAT_FILE).exists());
    }

    #[test]
    fn another_recorded_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FORMAT_FILE), "bulwark-storage 9\n").unwrap();
        let e = check_or_record(dir.path()).unwrap_err();
        assert!(
            matches!(e, StorageError::Format { ref found, .. } if found == "bulwark-storage 9")
        );
    }
}
