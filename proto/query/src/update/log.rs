//! What an operator update touched, recorded while it is applied, the way mongod's
//! `V2LogBuilder` (v2_log_builder.cpp) records it for the oplog: each modifier that changed
//! something logs its path as updated (with the whole new value there), created (from the
//! first component that did not exist) or deleted. The change stream's description is read
//! from the diff built from that log, so it reports exactly what mongod's would.

use bson::{Bson, Document};

use super::apply::lookup;
use super::diff_tree::{DiffNode, DocDiff};

#[derive(Debug)]
enum Kind {
    Updated(Bson),
    /// `first_new` is the index of the first component the update created.
    Created {
        value: Bson,
        first_new: usize,
    },
    Deleted,
}

#[derive(Debug)]
struct Entry {
    path: Vec<String>,
    kind: Kind,
}

/// The log of one application; a log that is off records nothing (plain `apply`).
#[derive(Debug)]
pub(super) struct UpdateLog {
    on: bool,
    entries: Vec<Entry>,
}

impl UpdateLog {
    pub(super) fn off() -> UpdateLog {
        UpdateLog {
            on: false,
            entries: Vec::new(),
        }
    }

    pub(super) fn on() -> UpdateLog {
        UpdateLog {
            on: true,
            entries: Vec::new(),
        }
    }

    /// An existing field or element now holds `value`.
    pub(super) fn updated(&mut self, path: &[String], value: &Bson) {
        if self.on {
            self.push(path, Kind::Updated(value.clone()));
        }
    }

    /// `path[first_new..]` was created, ending in `value`.
    pub(super) fn created(&mut self, path: &[String], first_new: usize, value: &Bson) {
        if self.on {
            let kind = Kind::Created {
                value: value.clone(),
                first_new,
            };
            self.push(path, kind);
        }
    }

    /// The last `count` elements of the array at `path` were appended (mongod's $push
    /// logs them one by one rather than the whole array).
    pub(super) fn appended(&mut self, path: &[String], arr: &[Bson], count: usize) {
        if !self.on {
            return;
        }
        let start = arr.len().saturating_sub(count);
        for (i, v) in arr.iter().enumerate().skip(start) {
            let mut element = path.to_vec();
            element.push(i.to_string());
            self.created(&element, path.len(), v);
        }
    }

    pub(super) fn deleted(&mut self, path: &[String]) {
        if self.on {
            self.push(path, Kind::Deleted);
        }
    }

    fn push(&mut self, path: &[String], kind: Kind) {
        self.entries.push(Entry {
            path: path.to_vec(),
            kind,
        });
    }

    /// The diff the log describes (`V2LogBuilder::serialize`). `after` is the updated
    /// document: which path components are array indexes is read from it (the containers
    /// of a logged path are the same before and after the log entry, as no two modifiers
    /// may touch the same path).
    pub(super) fn into_diff(self, after: &Document) -> DocDiff {
        let mut root = DiffNode::Doc(DocDiff::default());
        for e in self.entries {
            let indexes = array_components(after, &e.path);
            let (leaf, first_new) = match e.kind {
                Kind::Updated(v) => (DiffNode::Update(v), None),
                Kind::Created { value, first_new } => (DiffNode::Insert(value), Some(first_new)),
                Kind::Deleted => (DiffNode::Delete, None),
            };
            add_at_path(&mut root, &e.path, &indexes, leaf, first_new);
        }
        match root {
            DiffNode::Doc(d) => d,
            _ => DocDiff::default(),
        }
    }
}

/// For each component of `path`, whether it indexes an array (its container in `after` is
/// one); mongod's RuntimeUpdatePath component types.
fn array_components(after: &Document, path: &[String]) -> Vec<bool> {
    let mut out = Vec::with_capacity(path.len());
    let mut container: Option<&Bson> = None;
    for (i, part) in path.iter().enumerate() {
        out.push(matches!(container, Some(Bson::Array(_))));
        container = if i == 0 {
            after.get(part)
        } else {
            container.and_then(|c| lookup(c, part))
        };
    }
    out
}

/// `addNodeAtPath`: walks down from `root`, creating the interior nodes that are missing —
/// an array diff above an array index, a created sub-document from the first created
/// component on, a document sub-diff otherwise — and adds `leaf` at the end.
fn add_at_path(
    root: &mut DiffNode,
    path: &[String],
    indexes: &[bool],
    leaf: DiffNode,
    first_new: Option<usize>,
) {
    let Some((last, interior)) = path.split_last() else {
        return;
    };
    let mut cur = root;
    for (i, part) in interior.iter().enumerate() {
        if cur.child_mut(part).is_none() {
            let node = if indexes.get(i + 1).copied().unwrap_or(false) {
                DiffNode::Array(Default::default())
            } else if first_new.is_some_and(|f| i >= f) {
                DiffNode::Created(DocDiff::default())
            } else {
                DiffNode::Doc(DocDiff::default())
            };
            if !cur.add_child(part, node) {
                return;
            }
        }
        match cur.child_mut(part) {
            Some(next) => cur = next,
            None => return,
        }
    }
    cur.add_child(last, leaf);
}
