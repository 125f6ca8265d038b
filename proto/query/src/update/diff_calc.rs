//! The diff mongod logs for a pipeline update (`computeOplogDiff` in
//! document_diff_calculator.cpp): the two documents compared field by field, sub-documents
//! and arrays recursively. A sub-diff whose estimated size passes the size of the new value
//! is given up for an update of the whole value, and a diff not smaller than the new
//! document is given up for a replacement — so the same rules, and the same size estimates,
//! decide between an `update` and a `replace` change event.

use std::collections::BTreeSet;

use bson::{Bson, Document};

use crate::memory::{approx_size, approx_value_size};

use super::diff_tree::{digits, serialized_size, ArrayDiff, DiffNode, DocDiff};
use super::values::identical;

/// `update_oplog_entry::kSizeOfDeltaOplogEntryMetadata`: room for `$v` and `diff` around
/// the diff, counted against it from the start.
const DELTA_METADATA: usize = 15;

/// The diff from `pre` to `post`, or None where mongod logs a replacement instead.
pub(super) fn oplog_diff(pre: &Document, post: &Document) -> Option<DocDiff> {
    let (diff, _) = doc_diff(pre, post, DELTA_METADATA)?;
    (serialized_size(&diff) < approx_size(post)).then_some(diff)
}

/// A document diff with mongod's running estimate of its size (ApproxBSONSizeTracker):
/// each section is charged for its wrapper when its first entry arrives.
struct DocBuilder {
    diff: DocDiff,
    size: usize,
    sections: [bool; 3],
}

impl DocBuilder {
    fn new(padding: usize) -> DocBuilder {
        DocBuilder {
            diff: DocDiff::default(),
            size: padding + 5,
            sections: [false; 3],
        }
    }

    /// Adds an entry named `field` whose own estimated size is `value_size`.
    fn add(&mut self, field: &str, node: DiffNode, value_size: usize) {
        self.size += field.len() + 2 + value_size;
        let section = match node {
            DiffNode::Doc(_) | DiffNode::Array(_) => {
                // The "s" prefix of the sub-diff's name.
                self.size += 1;
                None
            }
            DiffNode::Delete => Some(0),
            DiffNode::Update(_) => Some(1),
            DiffNode::Insert(_) | DiffNode::Created(_) => Some(2),
        };
        if let Some(s) = section {
            if !std::mem::replace(&mut self.sections[s], true) {
                // Type byte, one-letter name, terminator and an empty document.
                self.size += 8;
            }
        }
        self.diff.add(field.to_owned(), node);
    }
}

/// `computeDocDiff`: None when the diff's estimate does not stay below `post`'s size.
fn doc_diff(pre: &Document, post: &Document, padding: usize) -> Option<(DocDiff, usize)> {
    let post_size = approx_size(post);
    let mut out = DocBuilder::new(padding);
    // Fields missing at their place in `post`: removed, unless inserted further on.
    let mut moved: BTreeSet<&str> = BTreeSet::new();
    let (mut pre_it, mut post_it) = (pre.iter(), post.iter());
    let (mut p, mut q) = (pre_it.next(), post_it.next());
    while let (Some((pk, pv)), Some((qk, qv))) = (p, q) {
        if post_size < out.size {
            return None;
        }
        if pk != qk {
            moved.insert(pk);
            p = pre_it.next();
            continue;
        }
        if !identical(pv, qv) {
            let (node, value_size) = changed_value(pv, qv);
            out.add(pk, node, value_size);
        }
        (p, q) = (pre_it.next(), post_it.next());
    }
    while let Some((pk, _)) = p {
        out.add(pk, DiffNode::Delete, 1);
        p = pre_it.next();
    }
    while let Some((qk, qv)) = q {
        moved.remove(qk.as_str());
        out.add(qk, DiffNode::Insert(qv.clone()), approx_value_size(qv));
        q = post_it.next();
    }
    for pk in moved {
        out.add(pk, DiffNode::Delete, 1);
    }
    (post_size > out.size).then_some((out.diff, out.size))
}

/// An array diff with its running size estimate.
struct ArrayBuilder {
    diff: ArrayDiff,
    size: usize,
}

impl ArrayBuilder {
    fn add(&mut self, i: usize, node: DiffNode, value_size: usize) {
        // "u<index>" or "s<index>".
        self.size += 1 + digits(i) + 2 + value_size;
        self.diff.children.insert(i, node);
    }
}

/// `computeArrayDiff`: elements compared by position; a shorter array is a resize.
fn array_diff(pre: &[Bson], post_value: &Bson, post: &[Bson]) -> Option<(ArrayDiff, usize)> {
    let post_size = approx_value_size(post_value);
    let mut out = ArrayBuilder {
        diff: ArrayDiff::default(),
        // An empty diff document holding `a: true`.
        size: 9,
    };
    for (i, (pv, qv)) in pre.iter().zip(post).enumerate() {
        if post_size < out.size {
            return None;
        }
        if !identical(pv, qv) {
            let (node, value_size) = changed_value(pv, qv);
            out.add(i, node, value_size);
        }
    }
    for (i, qv) in post.iter().enumerate().skip(pre.len()) {
        out.add(i, DiffNode::Update(qv.clone()), approx_value_size(qv));
    }
    if pre.len() > post.len() {
        out.diff.resize = Some(post.len());
        // `l: <int32>`.
        out.size += 7;
    }
    (post_size > out.size).then_some((out.diff, out.size))
}

/// A value that differs: a sub-diff when both sides are documents or both arrays and the
/// sub-diff is small enough, else the new value. Returns the entry and its estimated size.
fn changed_value(pv: &Bson, qv: &Bson) -> (DiffNode, usize) {
    let sub = match (pv, qv) {
        (Bson::Document(a), Bson::Document(b)) => {
            doc_diff(a, b, 0).map(|(d, size)| (DiffNode::Doc(d), size))
        }
        (Bson::Array(a), Bson::Array(b)) => {
            array_diff(a, qv, b).map(|(d, size)| (DiffNode::Array(d), size))
        }
        _ => None,
    };
    sub.unwrap_or_else(|| (DiffNode::Update(qv.clone()), approx_value_size(qv)))
}
