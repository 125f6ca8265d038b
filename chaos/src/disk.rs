//! Small filesystems for members' data, and filling them: the `disk-full` scenario. A
//! tmpfs has a hard size and reports ENOSPC like a full disk; mounting one needs root.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};

const BALLAST: &str = "ballast";

/// Mounts a tmpfs of `mb` MiB at `at` (created if missing).
pub fn mount_small(at: &Path, mb: u64) -> anyhow::Result<()> {
    std::fs::create_dir_all(at)?;
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
        .arg(at)
        .status()
        .context("running mount")?;
    if !status.success() {
        bail!(
            "mounting a {mb} MiB tmpfs at {} failed ({status}): the disk-full scenario needs root",
            at.display()
        );
    }
    Ok(())
}

pub fn unmount(at: &Path) {
    // Lazily: a process killed a moment ago may still hold files open.
    let _ = Command::new("umount").arg("-l").arg(at).status();
}

/// Writes a ballast file at `at` until the filesystem refuses (ENOSPC).
pub fn fill(at: &Path) -> anyhow::Result<()> {
    let path = at.join(BALLAST);
    let mut f =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let chunk = vec![0u8; 1 << 20];
    loop {
        match f.write(&chunk) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return Ok(()),
            Err(e) => return Err(e).context("writing the ballast"),
        }
    }
}

/// Removes the ballast: the filesystem has room again.
pub fn free(at: &Path) -> anyhow::Result<()> {
    std::fs::remove_file(at.join(BALLAST)).context("removing the ballast")
}
