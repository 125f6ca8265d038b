//! `$jsonSchema` documents: every keyword, nested schemas, and raw values under any
//! keyword.

use bson::{Bson, Document};
use libfuzzer_sys::arbitrary::{self, Arbitrary};

use crate::scalars::{no_nul, Key, Num, Str};
use crate::tables::{pick, SCHEMA_KEYS, SCHEMA_TYPES, TYPE_NAMES};
use crate::values::{Cx, Val};

#[derive(Arbitrary, Debug)]
pub struct Schema(Vec<SchemaKw>);

#[derive(Arbitrary, Debug)]
pub enum SchemaKw {
    BsonType(u8),
    Type(u8),
    Num(u8, Num),
    Required(Vec<Key>),
    Properties(Vec<(Key, Schema)>),
    PatternProperties(Vec<(Str, Schema)>),
    Items(Box<Schema>),
    ItemsList(Vec<Schema>),
    Logic(u8, Vec<Schema>),
    Not(Box<Schema>),
    Enum(Vec<Val>),
    Pattern(Str),
    Additional(u8, bool),
    AdditionalSchema(u8, Box<Schema>),
    Raw(u8, Val),
}

impl Cx {
    /// A `$jsonSchema` document; `d` levels may nest below it.
    pub fn schema(&mut self, s: &Schema, d: usize) -> Document {
        let mut out = Document::new();
        for kw in &s.0 {
            if !self.spend(1) {
                break;
            }
            if let Some((k, v)) = self.schema_kw(kw, d) {
                out.insert(k, v);
            }
        }
        out
    }

    /// One keyword and its value; `None` when its nesting does not fit in `d` levels.
    fn schema_kw(&mut self, kw: &SchemaKw, d: usize) -> Option<(&'static str, Bson)> {
        Some(match kw {
            SchemaKw::BsonType(i) => ("bsonType", pick(TYPE_NAMES, *i).into()),
            SchemaKw::Type(i) => ("type", pick(SCHEMA_TYPES, *i).into()),
            SchemaKw::Num(i, n) => {
                let k = [
                    "minimum",
                    "maximum",
                    "exclusiveMinimum",
                    "exclusiveMaximum",
                    "multipleOf",
                    "minLength",
                    "maxLength",
                    "minItems",
                    "maxItems",
                    "minProperties",
                    "maxProperties",
                    "uniqueItems",
                ][*i as usize % 12];
                (k, n.build())
            }
            SchemaKw::Required(ks) if d > 0 => (
                "required",
                Bson::Array(ks.iter().map(|k| Bson::String(k.build())).collect()),
            ),
            SchemaKw::Properties(ps) if d > 1 => {
                let mut props = Document::new();
                for (k, sub) in ps {
                    props.insert(k.build(), self.schema(sub, d - 2));
                }
                ("properties", Bson::Document(props))
            }
            SchemaKw::PatternProperties(ps) if d > 1 => {
                let mut props = Document::new();
                for (k, sub) in ps {
                    props.insert(no_nul(k.build()), self.schema(sub, d - 2));
                }
                ("patternProperties", Bson::Document(props))
            }
            SchemaKw::Items(sub) if d > 0 => ("items", Bson::Document(self.schema(sub, d - 1))),
            SchemaKw::ItemsList(subs) if d > 1 => ("items", self.schemas(subs, d - 2)),
            SchemaKw::Logic(i, subs) if d > 1 => {
                let k = ["allOf", "anyOf", "oneOf"][*i as usize % 3];
                (k, self.schemas(subs, d - 2))
            }
            SchemaKw::Not(sub) if d > 0 => ("not", Bson::Document(self.schema(sub, d - 1))),
            SchemaKw::Enum(vs) if d > 0 => {
                let v = vs.iter().map(|v| self.val(v, d - 1)).collect();
                ("enum", Bson::Array(v))
            }
            SchemaKw::Pattern(p) => ("pattern", Bson::String(p.build())),
            SchemaKw::Additional(i, b) => (additional(*i), Bson::Boolean(*b)),
            SchemaKw::AdditionalSchema(i, sub) if d > 0 => {
                (additional(*i), Bson::Document(self.schema(sub, d - 1)))
            }
            SchemaKw::Raw(i, v) => (pick(SCHEMA_KEYS, *i), self.val(v, d)),
            _ => return None,
        })
    }

    /// An array of schemas, each with `d` levels below it.
    fn schemas(&mut self, subs: &[Schema], d: usize) -> Bson {
        Bson::Array(
            subs.iter()
                .map(|s| Bson::Document(self.schema(s, d)))
                .collect(),
        )
    }
}

fn additional(i: u8) -> &'static str {
    ["additionalProperties", "additionalItems"][i as usize % 2]
}
