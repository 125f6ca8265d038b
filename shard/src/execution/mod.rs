//! Running a command's reads and writes against storage, below the commands that parse
//! them: choosing an access path for a filter (`plan`), executing it page by page
//! (`scan`), opening a read over the matches (`read`), serving the results in batches
//! (`cursor`, and `pipeline_cursor` for an aggregation's streaming stages), spilling
//! blocking stages to disk (`spill`), and writing a document with its index entries in
//! one storage batch (`write_path`). They share the document and batch vocabulary a scan
//! produces and a cursor consumes, and need only the catalog, errors, deadlines and the
//! write checks of `control`, never a command's context or the node.

pub mod change_events;
pub mod cursor;
pub mod pipeline_cursor;
pub mod plan;
pub mod read;
pub mod scan;
pub mod spill;
pub mod write_path;
