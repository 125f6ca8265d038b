//! BSON values of every type, and `Cx`, the conversion state every builder shares.

use bson::{spec::BinarySubtype, Binary, Bson, Document};
use libfuzzer_sys::arbitrary::{self, Arbitrary};

use crate::limits::MAX_DEPTH;
use crate::scalars::{no_nul, DateV, Key, Num, Str};
use crate::tables::{pick, FIELDS, REGEX_OPTS};

#[derive(Arbitrary, Debug)]
pub enum Val {
    Num(Num),
    Str(Str),
    Bool(bool),
    Null,
    Undefined,
    MinKey,
    MaxKey,
    Date(DateV),
    Oid([u8; 12]),
    Ts(u32, u32),
    Bin(u8, Vec<u8>),
    Regex(Str, u8),
    Symbol(Str),
    Code(Str),
    CodeScope(Str, Vec<(Key, Val)>),
    Doc(Vec<(Key, Val)>),
    Arr(Vec<Val>),
    /// `levels` of nesting (documents, arrays or a mix) around `leaf`, cut at the limit.
    Deep(u8, u8, Box<Val>),
    /// An array of `n` copies of a value.
    Wide(u16, Box<Val>),
}

/// Conversion state: nesting levels still available, and a budget of elements so that a
/// small input cannot expand into gigabytes (the server's 16 MiB limit is checked after).
#[derive(Default)]
pub struct Cx {
    elems: usize,
}

const MAX_ELEMS: usize = 20_000;

/// `{key: value}`.
pub fn single(key: &str, value: impl Into<Bson>) -> Document {
    let mut d = Document::new();
    d.insert(key, value);
    d
}

/// An array of documents, as a command carries them.
pub fn doc_array(docs: &[Document]) -> Bson {
    Bson::Array(docs.iter().cloned().map(Bson::Document).collect())
}

impl Cx {
    pub fn spend(&mut self, n: usize) -> bool {
        if self.elems + n > MAX_ELEMS {
            return false;
        }
        self.elems += n;
        true
    }

    /// `d` is the number of levels of nesting still allowed below this value.
    pub fn val(&mut self, v: &Val, d: usize) -> Bson {
        self.spend(1);
        match v {
            Val::Num(n) => n.build(),
            Val::Str(s) => Bson::String(self.text(s.build())),
            Val::Bool(b) => Bson::Boolean(*b),
            Val::Null => Bson::Null,
            Val::Undefined => Bson::Undefined,
            Val::MinKey => Bson::MinKey,
            Val::MaxKey => Bson::MaxKey,
            Val::Date(dt) => Bson::DateTime(dt.build()),
            Val::Oid(b) => Bson::ObjectId(bson::oid::ObjectId::from_bytes(*b)),
            Val::Ts(time, increment) => Bson::Timestamp(bson::Timestamp {
                time: *time,
                increment: *increment,
            }),
            Val::Bin(st, bytes) => Bson::Binary(Binary {
                subtype: BinarySubtype::from(*st),
                bytes: {
                    self.spend(bytes.len() / 64);
                    bytes.clone()
                },
            }),
            Val::Regex(p, o) => Bson::RegularExpression(bson::Regex {
                pattern: self.text(no_nul(p.build())),
                options: pick(REGEX_OPTS, *o).to_string(),
            }),
            Val::Symbol(s) => Bson::Symbol(self.text(s.build())),
            Val::Code(s) => Bson::JavaScriptCode(self.text(s.build())),
            Val::CodeScope(code, scope) => {
                let code = self.text(code.build());
                if d == 0 {
                    return Bson::JavaScriptCode(code);
                }
                Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
                    code,
                    scope: self.doc(scope, d - 1),
                })
            }
            Val::Doc(fields) => {
                if d == 0 {
                    return Bson::Null;
                }
                Bson::Document(self.doc(fields, d - 1))
            }
            Val::Arr(items) => {
                if d == 0 {
                    return Bson::Null;
                }
                Bson::Array(items.iter().map(|i| self.val(i, d - 1)).collect())
            }
            Val::Deep(levels, shape, leaf) => self.deep(*levels, *shape, leaf, d),
            Val::Wide(n, leaf) => self.wide(*n, leaf, d),
        }
    }

    /// `Val::Deep`: `leaf` wrapped in documents and/or arrays (as `shape` says), as many
    /// levels as `levels` asks and `d` allows.
    fn deep(&mut self, levels: u8, shape: u8, leaf: &Val, d: usize) -> Bson {
        let n = (levels as usize % (MAX_DEPTH + 8)).min(d);
        let mut cur = self.val(leaf, d - n);
        for i in 0..n {
            let as_doc = match shape % 4 {
                0 => true,
                1 => false,
                2 => i % 2 == 0,
                _ => (i / 3) % 2 == 0,
            };
            cur = if as_doc {
                let mut doc = Document::new();
                doc.insert(pick(FIELDS, shape / 4), cur);
                Bson::Document(doc)
            } else {
                Bson::Array(vec![cur])
            };
        }
        cur
    }

    /// `Val::Wide`: an array of `n` copies of `leaf`, or of one if the budget cannot pay
    /// for them all.
    fn wide(&mut self, n: u16, leaf: &Val, d: usize) -> Bson {
        if d == 0 {
            return Bson::Null;
        }
        let before = self.elems;
        let one = self.val(leaf, d - 1);
        let cost = (self.elems - before).max(1);
        let n = n as usize % 5000;
        if !self.spend(n.saturating_mul(cost)) {
            return Bson::Array(vec![one]);
        }
        Bson::Array(vec![one; n])
    }

    /// A document whose fields may nest `d` more levels.
    pub fn doc(&mut self, fields: &[(Key, Val)], d: usize) -> Document {
        let mut doc = Document::new();
        for (k, v) in fields {
            let v = self.val(v, d);
            let k = self.text(k.build());
            doc.insert(k, v);
        }
        doc
    }

    /// Charges a string's bytes to the budget (64 bytes cost one element).
    pub fn text(&mut self, s: String) -> String {
        self.spend(s.len() / 64);
        s
    }
}
