//! The `updateDescription` of a change stream `update` event, read from an update's diff
//! the way mongod 7.0 reads its `$v: 2` oplog entry
//! (change_stream_document_diff_parser.cpp): at each level the updated and inserted
//! fields, then the removed ones, then the sub-diffs; in an array the resize, then the
//! entries by index.

use bson::{Bson, Document};

use super::diff_tree::{ArrayDiff, DiffNode, DocDiff, Section};

/// What an update did to one document, as a change stream reports it.
// One value per changed document, consumed at once: boxing the description would cost an
// allocation for nothing, which is what the lint would trade the enum's size for.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateChange {
    /// An `update` event with this description.
    Update(UpdateDescription),
    /// A `replace` event (replacement updates, and pipeline updates whose diff would be
    /// larger than the new document).
    Replace,
}

/// A change stream's `updateDescription`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdateDescription {
    /// Dotted path -> new value.
    pub updated_fields: Document,
    pub removed_fields: Vec<String>,
    /// (field, newSize) of each array made shorter.
    pub truncated_arrays: Vec<(String, i32)>,
    /// MongoDB's `disambiguatedPaths`: each reported path that has a numeric field name (not
    /// first) or a dotted one, as its components, array indexes as Int32.
    pub disambiguated_paths: Document,
}

impl UpdateDescription {
    /// `{updatedFields, removedFields, truncatedArrays}`, plus `disambiguatedPaths` (even
    /// empty, as mongod does) when `expanded` (the stream's `showExpandedEvents`).
    pub fn to_document(&self, expanded: bool) -> Document {
        let truncated: Vec<Bson> = self
            .truncated_arrays
            .iter()
            .map(|(field, size)| {
                let mut d = Document::new();
                d.insert("field", field.clone());
                d.insert("newSize", *size);
                Bson::Document(d)
            })
            .collect();
        let mut out = Document::new();
        out.insert("updatedFields", self.updated_fields.clone());
        out.insert("removedFields", self.removed_fields.clone());
        out.insert("truncatedArrays", truncated);
        if expanded {
            out.insert("disambiguatedPaths", self.disambiguated_paths.clone());
        }
        out
    }

    /// The description a change stream gives for `diff`.
    pub(super) fn from_diff(diff: &DocDiff) -> UpdateDescription {
        let mut reader = Reader::default();
        reader.doc(diff);
        reader.out
    }
}

/// One component of the path being read, with whether the path is ambiguous up to it.
struct Part {
    name: String,
    index: Option<usize>,
    ambiguous: bool,
}

#[derive(Default)]
struct Reader {
    path: Vec<Part>,
    out: UpdateDescription,
}

impl Reader {
    fn doc(&mut self, d: &DocDiff) {
        for section in [Section::Update, Section::Insert] {
            for (field, node) in d.section(section) {
                if let Some(v) = node.written_value() {
                    self.push_field(field);
                    self.updated(v);
                    self.path.pop();
                }
            }
        }
        for (field, _) in d.section(Section::Delete) {
            self.push_field(field);
            let dotted = self.dotted();
            self.out.removed_fields.push(dotted);
            self.note_ambiguity();
            self.path.pop();
        }
        for (field, node) in d.section(Section::SubDiff) {
            self.push_field(field);
            self.sub_diff(node);
            self.path.pop();
        }
    }

    fn array(&mut self, a: &ArrayDiff) {
        if let Some(size) = a.resize {
            let field = self.dotted();
            self.out
                .truncated_arrays
                .push((field, i32::try_from(size).unwrap_or(i32::MAX)));
            self.note_ambiguity();
        }
        for (&i, node) in &a.children {
            self.push_index(i);
            match node.written_value() {
                Some(v) => self.updated(v),
                None => self.sub_diff(node),
            }
            self.path.pop();
        }
    }

    fn sub_diff(&mut self, node: &DiffNode) {
        match node {
            DiffNode::Doc(d) => self.doc(d),
            DiffNode::Array(a) => self.array(a),
            _ => {}
        }
    }

    fn updated(&mut self, v: Bson) {
        let dotted = self.dotted();
        self.out.updated_fields.insert(dotted, v);
        self.note_ambiguity();
    }

    /// A field name is ambiguous when it could be read as an array index (a strict numeric
    /// component other than the first) or as two components (it has a dot); everything
    /// below an ambiguous component is too.
    fn push_field(&mut self, name: &str) {
        let ambiguous = self.path.last().is_some_and(|p| p.ambiguous)
            || (!self.path.is_empty() && is_strict_number(name))
            || name.contains('.');
        self.path.push(Part {
            name: name.to_owned(),
            index: None,
            ambiguous,
        });
    }

    /// An array index alone does not make a path ambiguous.
    fn push_index(&mut self, i: usize) {
        let ambiguous = self.path.last().is_some_and(|p| p.ambiguous);
        self.path.push(Part {
            name: i.to_string(),
            index: Some(i),
            ambiguous,
        });
    }

    fn dotted(&self) -> String {
        let names: Vec<&str> = self.path.iter().map(|p| p.name.as_str()).collect();
        names.join(".")
    }

    /// Records the current path in `disambiguatedPaths` if it is ambiguous.
    fn note_ambiguity(&mut self) {
        if !self.path.last().is_some_and(|p| p.ambiguous) {
            return;
        }
        let parts: Vec<Bson> = self
            .path
            .iter()
            .map(|p| match p.index {
                Some(i) => Bson::Int32(i32::try_from(i).unwrap_or(i32::MAX)),
                None => Bson::String(p.name.clone()),
            })
            .collect();
        let dotted = self.dotted();
        self.out.disambiguated_paths.insert(dotted, parts);
    }
}

/// mongod's `FieldRef::isNumericPathComponentStrict`: digits only, no leading zero.
fn is_strict_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && !(s.len() > 1 && s.starts_with('0'))
}
