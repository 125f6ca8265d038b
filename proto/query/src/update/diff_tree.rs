//! mongod's `$v: 2` update diff as a tree (`diff_tree` in document_diff_serialization.h):
//! what one update changed in one document. Operator updates build it from what each
//! modifier touched (`log.rs`), pipeline updates by comparing the two documents
//! (`diff_calc.rs`); a change stream reads it back into an update description
//! (`description.rs`). Keeping the tree, rather than going straight to the description,
//! is what makes the section order and the size rule mongod applies reproducible.

use std::collections::{BTreeMap, HashMap};

use bson::{Bson, Document};

use crate::memory::approx_value_size;

/// One entry of a diff.
#[derive(Debug)]
pub(super) enum DiffNode {
    /// A new value for a field or element that existed (`u`).
    Update(Bson),
    /// A field or element the update created (`i`; `u<index>` inside an array diff).
    Insert(Bson),
    /// A removed field (`d`).
    Delete,
    /// A sub-document created around created fields (`{$set: {"a.b": 1}}` on `{}` creates
    /// `a`): it is inserted whole, built from its children.
    Created(DocDiff),
    /// Changes inside an existing sub-document (`s<field>`).
    Doc(DocDiff),
    /// Changes inside an existing array (`s<field>` with `a: true`).
    Array(ArrayDiff),
}

/// The children of a document diff, in the order they were added: that order is kept
/// within each section when the diff is written out.
#[derive(Debug, Default)]
pub(super) struct DocDiff {
    children: Vec<(String, DiffNode)>,
    by_name: HashMap<String, usize>,
}

/// An array diff: entries by index (written in numeric order) and the new length when the
/// array got shorter.
#[derive(Debug, Default)]
pub(super) struct ArrayDiff {
    pub(super) children: BTreeMap<usize, DiffNode>,
    pub(super) resize: Option<usize>,
}

/// The sections of a document diff, in the order mongod serialises them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    Delete,
    Update,
    Insert,
    SubDiff,
}

impl DiffNode {
    fn section(&self) -> Section {
        match self {
            DiffNode::Delete => Section::Delete,
            DiffNode::Update(_) => Section::Update,
            DiffNode::Insert(_) | DiffNode::Created(_) => Section::Insert,
            DiffNode::Doc(_) | DiffNode::Array(_) => Section::SubDiff,
        }
    }

    /// The child named `part` of an interior node.
    pub(super) fn child_mut(&mut self, part: &str) -> Option<&mut DiffNode> {
        match self {
            DiffNode::Doc(d) | DiffNode::Created(d) => d.child_mut(part),
            DiffNode::Array(a) => a.children.get_mut(&super::apply::parse_index(part)?),
            _ => None,
        }
    }

    /// Adds a child to an interior node; false when this is a leaf, or an array and `part`
    /// is not an index.
    pub(super) fn add_child(&mut self, part: &str, node: DiffNode) -> bool {
        match self {
            DiffNode::Doc(d) | DiffNode::Created(d) => d.add(part.to_owned(), node),
            DiffNode::Array(a) => match super::apply::parse_index(part) {
                Some(i) => {
                    a.children.insert(i, node);
                }
                None => return false,
            },
            _ => return false,
        }
        true
    }

    /// The value an inserted or updated entry writes: a created sub-document is assembled
    /// from its children, as mongod's DocumentInsertFrame does.
    pub(super) fn written_value(&self) -> Option<Bson> {
        match self {
            DiffNode::Update(v) | DiffNode::Insert(v) => Some(v.clone()),
            DiffNode::Created(d) => {
                let mut out = Document::new();
                for (k, child) in &d.children {
                    if let Some(v) = child.written_value() {
                        out.insert(k.clone(), v);
                    }
                }
                Some(Bson::Document(out))
            }
            _ => None,
        }
    }
}

impl DocDiff {
    /// Adds a child; a second child of the same name replaces the first (mongod refuses
    /// that, which no update reaching here can cause).
    pub(super) fn add(&mut self, field: String, node: DiffNode) {
        match self.by_name.get(&field) {
            Some(&i) => self.children[i].1 = node,
            None => {
                self.by_name.insert(field.clone(), self.children.len());
                self.children.push((field, node));
            }
        }
    }

    pub(super) fn child_mut(&mut self, field: &str) -> Option<&mut DiffNode> {
        let i = *self.by_name.get(field)?;
        self.children.get_mut(i).map(|(_, n)| n)
    }

    /// The children of one section, in the order they were added.
    pub(super) fn section(&self, s: Section) -> impl Iterator<Item = (&str, &DiffNode)> {
        self.children
            .iter()
            .filter(move |(_, n)| n.section() == s)
            .map(|(k, n)| (k.as_str(), n))
    }
}

/// The BSON size of the serialised diff (`diff.objsize()`), which mongod compares with the
/// new document's size to choose between a diff and a replacement.
pub(super) fn serialized_size(d: &DocDiff) -> usize {
    let mut size = 5;
    for s in [Section::Delete, Section::Update, Section::Insert] {
        let mut entries = d.section(s).peekable();
        if entries.peek().is_none() {
            continue;
        }
        // The section itself: type byte, one-letter name and its terminator, a document.
        size += 3 + 5;
        for (k, n) in entries {
            size += 2 + k.len() + leaf_size(n);
        }
    }
    for (k, n) in d.section(Section::SubDiff) {
        // "s" + field name as the sub-diff's key.
        size += 3 + k.len() + node_size(n);
    }
    size
}

fn array_serialized_size(a: &ArrayDiff) -> usize {
    // The header `a: true`, and `l: <int32>` when resized.
    let mut size = 5 + 4 + if a.resize.is_some() { 7 } else { 0 };
    for (i, n) in &a.children {
        // "u<index>" or "s<index>".
        size += 3 + digits(*i) + node_size(n);
    }
    size
}

/// The size of an entry's value: a leaf's value, a sub-diff's serialised form.
fn node_size(n: &DiffNode) -> usize {
    match n {
        DiffNode::Doc(d) => serialized_size(d),
        DiffNode::Array(a) => array_serialized_size(a),
        other => leaf_size(other),
    }
}

fn leaf_size(n: &DiffNode) -> usize {
    match n {
        // A delete is written `field: false`.
        DiffNode::Delete => 1,
        DiffNode::Update(v) | DiffNode::Insert(v) => approx_value_size(v),
        DiffNode::Created(d) => {
            5 + d
                .children
                .iter()
                .map(|(k, c)| 2 + k.len() + leaf_size(c))
                .sum::<usize>()
        }
        DiffNode::Doc(_) | DiffNode::Array(_) => node_size(n),
    }
}

/// The number of decimal digits of an array index.
pub(super) fn digits(i: usize) -> usize {
    i.checked_ilog10().map_or(1, |d| d as usize + 1)
}
