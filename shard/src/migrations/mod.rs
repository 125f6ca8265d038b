//! A shard's side of moving documents to another shard. The config server primary
//! coordinates a chunk migration and a router moves a document whose shard key changed;
//! the shard does the steps they ask for, each a command (`commands/move_clone.rs`,
//! `begin_move.rs` and the others). What those steps share lives here: the range and the
//! ownership a migration step names (`migration`), the durable intent of a document on its
//! way to another shard (`doc_moves`), and deleting a range this shard no longer owns once
//! no reader needs it (`range_deleter`). The donor's log of documents written while a
//! range is copied is part of the collection's metadata (`catalog::moves`), since every
//! write records into it.
//!
//! These modules work with what a member has: a step runs with its command's context and
//! the range deleter with the node, so `migrations`, `commands` and `node` import each
//! other.

pub mod doc_moves;
pub mod migration;
pub mod range_deleter;
