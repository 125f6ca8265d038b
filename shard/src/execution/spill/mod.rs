//! Blocking stages over a stream, within MongoDB's 100 MB each: sorts (`sort`) and
//! `$group` (`group`), which spill to disk with `allowDiskUse`, and `$sample` (`sample`),
//! which holds only its sample. Runs go to anonymous temporary files (unlinked
//! when created) in the member's `_tmp` directory, as MongoDB spills under its dbpath, so
//! neither a crash nor a dropped cursor leaves one behind, and a full data disk answers
//! OutOfDiskSpace.

mod group;
mod sample;
mod sort;

use std::fs::File;
use std::io::{BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;

use bson::Document;
use wire::{ErrorCode, MongoError, MongoResult};

pub use group::group_all;
pub use sample::sample_all;
pub use sort::{sort_all, ExternalSort, Sorted, SortedSource};

/// Whether a blocking stage may spill (the command's `allowDiskUse`), and where.
#[derive(Debug, Clone, Default)]
pub struct DiskUse {
    pub allowed: bool,
    /// The member's spill directory; the system's temporary directory when None (a node
    /// without a data directory).
    pub dir: Option<PathBuf>,
}

impl DiskUse {
    /// Spilling allowed, to the system's temporary directory (unit tests).
    #[cfg(test)]
    pub fn temp() -> DiskUse {
        DiskUse {
            allowed: true,
            dir: None,
        }
    }

    fn file(&self) -> MongoResult<File> {
        match &self.dir {
            Some(dir) => tempfile::tempfile_in(dir),
            None => tempfile::tempfile(),
        }
        .map_err(io_error)
    }
}

/// One sorted run on disk, read back one document at a time.
pub struct Run {
    reader: BufReader<File>,
    left: usize,
    head: Option<Document>,
}

impl Run {
    /// Writes `docs`, in their order, as a run.
    fn write(docs: &[Document], disk: &DiskUse) -> MongoResult<Run> {
        let mut w = BufWriter::new(disk.file()?);
        for d in docs {
            d.to_writer(&mut w)
                .map_err(|e| MongoError::internal(format!("writing a spill run: {e}")))?;
        }
        w.flush().map_err(io_error)?;
        let mut file = w.into_inner().map_err(|e| io_error(e.into_error()))?;
        file.seek(SeekFrom::Start(0)).map_err(io_error)?;
        let mut run = Run {
            reader: BufReader::new(file),
            left: docs.len(),
            head: None,
        };
        run.advance()?;
        Ok(run)
    }

    /// Returns the current head and reads the next.
    fn advance(&mut self) -> MongoResult<Option<Document>> {
        let next = if self.left == 0 {
            None
        } else {
            self.left -= 1;
            Some(
                Document::from_reader(&mut self.reader)
                    .map_err(|e| MongoError::internal(format!("reading back a spill run: {e}")))?,
            )
        };
        Ok(std::mem::replace(&mut self.head, next))
    }
}

fn io_error(e: std::io::Error) -> MongoError {
    if e.raw_os_error() == Some(libc::ENOSPC) {
        return MongoError::new(ErrorCode::OutOfDiskSpace, format!("spilling to disk: {e}"));
    }
    MongoError::internal(format!("spilling to disk: {e}"))
}
