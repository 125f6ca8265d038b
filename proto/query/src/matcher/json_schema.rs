//! `$jsonSchema` (a subset): parsing a schema document into a [`Schema`] and matching
//! values against it.

use std::cmp::Ordering;

use bson::{Bson, Document};

use crate::order::{self, values_equal};
use crate::{MongoError, MongoResult};

use super::{parse_type_selector, Re, TypeSel};

#[derive(Debug, Clone)]
enum Items {
    One(Box<Schema>),
    Tuple(Vec<Schema>),
}

#[derive(Debug, Clone)]
enum Additional {
    Allowed(bool),
    Schema(Box<Schema>),
}

/// A parsed `$jsonSchema`. Supported keywords: bsonType, type, required, properties,
/// additionalProperties, patternProperties, minProperties, maxProperties, minimum,
/// maximum, exclusiveMinimum, exclusiveMaximum, multipleOf, enum, minLength, maxLength,
/// pattern, items, additionalItems, minItems, maxItems, uniqueItems, allOf, anyOf,
/// oneOf, not, title, description.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    types: Option<Vec<TypeSel>>,
    json_types: Option<Vec<&'static str>>,
    required: Vec<String>,
    properties: Vec<(String, Schema)>,
    pattern_properties: Vec<(Re, Schema)>,
    additional: Option<Additional>,
    min_properties: Option<usize>,
    max_properties: Option<usize>,
    minimum: Option<Bson>,
    maximum: Option<Bson>,
    exclusive_minimum: bool,
    exclusive_maximum: bool,
    multiple_of: Option<f64>,
    enumeration: Option<Vec<Bson>>,
    min_length: Option<usize>,
    max_length: Option<usize>,
    pattern: Option<Re>,
    items: Option<Items>,
    additional_items: Option<Additional>,
    min_items: Option<usize>,
    max_items: Option<usize>,
    unique_items: bool,
    all_of: Vec<Schema>,
    any_of: Vec<Schema>,
    one_of: Vec<Schema>,
    not: Option<Box<Schema>>,
}

fn schema_err(msg: impl Into<String>) -> MongoError {
    MongoError::failed_to_parse(msg)
}

fn schema_count(k: &str, v: &Bson) -> MongoResult<usize> {
    match order::as_i64_exact(v) {
        Some(n) if n >= 0 => Ok(n as usize),
        _ => Err(schema_err(format!(
            "{k} must be a representable as a non-negative integer"
        ))),
    }
}

fn schema_list(k: &str, v: &Bson) -> MongoResult<Vec<Schema>> {
    let Bson::Array(items) = v else {
        return Err(schema_err(format!("{k} must be an array")));
    };
    if items.is_empty() {
        return Err(schema_err(format!("{k} must be a non-empty array")));
    }
    items
        .iter()
        .map(|i| match i {
            Bson::Document(d) => Schema::parse(d),
            _ => Err(schema_err(format!("{k} must be an array of objects"))),
        })
        .collect()
}

fn schema_obj(k: &str, v: &Bson) -> MongoResult<Schema> {
    match v {
        Bson::Document(d) => Schema::parse(d),
        _ => Err(schema_err(format!("{k} must be an object"))),
    }
}

fn schema_additional(k: &str, v: &Bson) -> MongoResult<Additional> {
    match v {
        Bson::Boolean(b) => Ok(Additional::Allowed(*b)),
        Bson::Document(d) => Ok(Additional::Schema(Box::new(Schema::parse(d)?))),
        _ => Err(schema_err(format!("{k} must be an object or a boolean"))),
    }
}

fn one_or_many(v: &Bson) -> Vec<&Bson> {
    match v {
        Bson::Array(a) => a.iter().collect(),
        other => vec![other],
    }
}

impl Schema {
    pub fn parse(d: &Document) -> MongoResult<Schema> {
        // Schemas nest (up to the document depth limit) through the keywords that take
        // sub-schemas; they are parsed here, in a small frame, and every other keyword
        // in `parse_keyword`, whose frame is large but never on the recursive path.
        let mut s = Schema::default();
        for (k, v) in d {
            match k.as_str() {
                "properties" => {
                    let Bson::Document(props) = v else {
                        return Err(schema_err(
                            "$jsonSchema keyword 'properties' must be an object",
                        ));
                    };
                    for (name, sub) in props {
                        s.properties.push((name.clone(), schema_obj(name, sub)?));
                    }
                }
                "patternProperties" => {
                    let Bson::Document(props) = v else {
                        return Err(schema_err(
                            "$jsonSchema keyword 'patternProperties' must be an object",
                        ));
                    };
                    for (pat, sub) in props {
                        s.pattern_properties
                            .push((Re::new(pat, "")?, schema_obj(pat, sub)?));
                    }
                }
                "additionalProperties" => s.additional = Some(schema_additional(k, v)?),
                "items" => {
                    s.items = Some(match v {
                        Bson::Document(d) => Items::One(Box::new(Schema::parse(d)?)),
                        Bson::Array(_) => Items::Tuple(schema_list(k, v)?),
                        _ => {
                            return Err(schema_err(
                                "$jsonSchema keyword 'items' must be an array or an object",
                            ))
                        }
                    })
                }
                "additionalItems" => s.additional_items = Some(schema_additional(k, v)?),
                "allOf" => s.all_of = schema_list(k, v)?,
                "anyOf" => s.any_of = schema_list(k, v)?,
                "oneOf" => s.one_of = schema_list(k, v)?,
                "not" => s.not = Some(Box::new(schema_obj(k, v)?)),
                _ => Schema::parse_keyword(&mut s, k, v)?,
            }
        }
        if s.types.is_some() && s.json_types.is_some() {
            return Err(schema_err(
                "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'",
            ));
        }
        Ok(s)
    }

    /// The keywords without sub-schemas.
    #[inline(never)]
    fn parse_keyword(s: &mut Schema, k: &str, v: &Bson) -> MongoResult<()> {
        {
            match k {
                "bsonType" => {
                    let mut sels = Vec::new();
                    for t in one_or_many(v) {
                        match t {
                            Bson::String(_) => sels.push(parse_type_selector(t)?),
                            _ => return Err(MongoError::type_mismatch("$jsonSchema keyword 'bsonType' must be a string or an array of strings")),
                        }
                    }
                    s.types = Some(sels);
                }
                "type" => {
                    let mut names = Vec::new();
                    for t in one_or_many(v) {
                        let Bson::String(name) = t else {
                            return Err(MongoError::type_mismatch("$jsonSchema keyword 'type' must be a string or an array of strings"));
                        };
                        let known: &'static str = match name.as_str() {
                            "object" => "object",
                            "array" => "array",
                            "number" => "number",
                            "boolean" => "boolean",
                            "string" => "string",
                            "null" => "null",
                            "integer" => {
                                return Err(schema_err(
                                    "$jsonSchema type 'integer' is not currently supported.",
                                ))
                            }
                            other => {
                                return Err(MongoError::bad_value(format!(
                                    "Unknown type name alias: {other}"
                                )))
                            }
                        };
                        names.push(known);
                    }
                    s.json_types = Some(names);
                }
                "required" => {
                    let Bson::Array(items) = v else {
                        return Err(schema_err(
                            "$jsonSchema keyword 'required' must be an array",
                        ));
                    };
                    for i in items {
                        match i {
                            Bson::String(f) => s.required.push(f.clone()),
                            _ => {
                                return Err(schema_err(
                                    "$jsonSchema keyword 'required' must contain only strings",
                                ))
                            }
                        }
                    }
                }
                "minProperties" => s.min_properties = Some(schema_count(k, v)?),
                "maxProperties" => s.max_properties = Some(schema_count(k, v)?),
                "minimum" | "maximum" => {
                    if !order::is_number(v) {
                        return Err(MongoError::type_mismatch(format!(
                            "$jsonSchema keyword '{k}' must be a number"
                        )));
                    }
                    if k == "minimum" {
                        s.minimum = Some(v.clone())
                    } else {
                        s.maximum = Some(v.clone())
                    }
                }
                "exclusiveMinimum" | "exclusiveMaximum" => {
                    let Bson::Boolean(b) = v else {
                        return Err(MongoError::type_mismatch(format!(
                            "$jsonSchema keyword '{k}' must be a boolean"
                        )));
                    };
                    if k == "exclusiveMinimum" {
                        s.exclusive_minimum = *b
                    } else {
                        s.exclusive_maximum = *b
                    }
                }
                "multipleOf" => match order::as_f64(v) {
                    Some(m) if m > 0.0 => s.multiple_of = Some(m),
                    _ => {
                        return Err(schema_err(
                            "$jsonSchema keyword 'multipleOf' must be a positive number",
                        ))
                    }
                },
                "enum" => {
                    let Bson::Array(items) = v else {
                        return Err(schema_err("$jsonSchema keyword 'enum' must be an array"));
                    };
                    if items.is_empty() {
                        return Err(schema_err(
                            "$jsonSchema keyword 'enum' cannot be an empty array",
                        ));
                    }
                    s.enumeration = Some(items.clone());
                }
                "minLength" => s.min_length = Some(schema_count(k, v)?),
                "maxLength" => s.max_length = Some(schema_count(k, v)?),
                "pattern" => match v {
                    Bson::String(p) => s.pattern = Some(Re::new(p, "")?),
                    _ => {
                        return Err(MongoError::type_mismatch(
                            "$jsonSchema keyword 'pattern' must be a string",
                        ))
                    }
                },
                "minItems" => s.min_items = Some(schema_count(k, v)?),
                "maxItems" => s.max_items = Some(schema_count(k, v)?),
                "uniqueItems" => match v {
                    Bson::Boolean(b) => s.unique_items = *b,
                    _ => {
                        return Err(MongoError::type_mismatch(
                            "$jsonSchema keyword 'uniqueItems' must be a boolean",
                        ))
                    }
                },
                "title" | "description" => {
                    if !matches!(v, Bson::String(_)) {
                        return Err(MongoError::type_mismatch(format!(
                            "$jsonSchema keyword '{k}' must be a string"
                        )));
                    }
                }
                other => return Err(schema_err(format!("Unknown $jsonSchema keyword: {other}"))),
            }
        }
        Ok(())
    }

    /// The top level of a `$jsonSchema` applies to the document as an object.
    pub fn matches_doc(&self, d: &Document) -> bool {
        self.matches(&Bson::Document(d.clone()))
    }

    pub fn matches(&self, v: &Bson) -> bool {
        if let Some(types) = &self.types {
            if !types.iter().any(|t| t.matches(v)) {
                return false;
            }
        }
        if let Some(names) = &self.json_types {
            let ok = names.iter().any(|n| match *n {
                "object" => matches!(v, Bson::Document(_)),
                "array" => matches!(v, Bson::Array(_)),
                "number" => order::is_number(v),
                "boolean" => matches!(v, Bson::Boolean(_)),
                "string" => matches!(v, Bson::String(_)),
                "null" => matches!(v, Bson::Null),
                _ => false,
            });
            if !ok {
                return false;
            }
        }
        if let Some(e) = &self.enumeration {
            if !e.iter().any(|x| values_equal(x, v)) {
                return false;
            }
        }
        if !self.all_of.iter().all(|s| s.matches(v)) {
            return false;
        }
        if !self.any_of.is_empty() && !self.any_of.iter().any(|s| s.matches(v)) {
            return false;
        }
        if !self.one_of.is_empty() && self.one_of.iter().filter(|s| s.matches(v)).count() != 1 {
            return false;
        }
        if let Some(n) = &self.not {
            if n.matches(v) {
                return false;
            }
        }
        match v {
            n if order::is_number(n) => self.matches_number(n),
            Bson::String(s) => self.matches_string(s),
            Bson::Document(d) => self.matches_object(d),
            Bson::Array(a) => self.matches_array(a),
            _ => true,
        }
    }

    fn matches_number(&self, n: &Bson) -> bool {
        if let Some(min) = &self.minimum {
            let o = order::compare_numbers(n, min).unwrap_or(Ordering::Less);
            if o == Ordering::Less || (self.exclusive_minimum && o == Ordering::Equal) {
                return false;
            }
        }
        if let Some(max) = &self.maximum {
            let o = order::compare_numbers(n, max).unwrap_or(Ordering::Greater);
            if o == Ordering::Greater || (self.exclusive_maximum && o == Ordering::Equal) {
                return false;
            }
        }
        if let Some(m) = self.multiple_of {
            let x = order::as_f64(n).unwrap_or(f64::NAN);
            if !(x / m).is_finite() || (x / m).fract() != 0.0 {
                return false;
            }
        }
        true
    }

    fn matches_string(&self, s: &str) -> bool {
        let len = s.chars().count();
        self.min_length.is_none_or(|m| len >= m)
            && self.max_length.is_none_or(|m| len <= m)
            && self.pattern.as_ref().is_none_or(|p| p.is_match(s))
    }

    fn matches_object(&self, d: &Document) -> bool {
        if !self.required.iter().all(|f| d.contains_key(f)) {
            return false;
        }
        if self.min_properties.is_some_and(|m| d.len() < m)
            || self.max_properties.is_some_and(|m| d.len() > m)
        {
            return false;
        }
        for (k, v) in d {
            let mut covered = false;
            if let Some((_, s)) = self.properties.iter().find(|(name, _)| name == k) {
                covered = true;
                if !s.matches(v) {
                    return false;
                }
            }
            for (re, s) in &self.pattern_properties {
                if re.is_match(k) {
                    covered = true;
                    if !s.matches(v) {
                        return false;
                    }
                }
            }
            if !covered {
                match &self.additional {
                    Some(Additional::Allowed(false)) => return false,
                    Some(Additional::Schema(s)) if !s.matches(v) => return false,
                    _ => {}
                }
            }
        }
        true
    }

    fn matches_array(&self, a: &[Bson]) -> bool {
        if self.min_items.is_some_and(|m| a.len() < m)
            || self.max_items.is_some_and(|m| a.len() > m)
        {
            return false;
        }
        if self.unique_items {
            for (i, x) in a.iter().enumerate() {
                if a[..i].iter().any(|y| values_equal(x, y)) {
                    return false;
                }
            }
        }
        match &self.items {
            None => true,
            Some(Items::One(s)) => a.iter().all(|e| s.matches(e)),
            Some(Items::Tuple(list)) => {
                if !a.iter().zip(list).all(|(e, s)| s.matches(e)) {
                    return false;
                }
                match &self.additional_items {
                    Some(Additional::Allowed(false)) => a.len() <= list.len(),
                    Some(Additional::Schema(s)) => a.iter().skip(list.len()).all(|e| s.matches(e)),
                    _ => true,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::{doc, Document};

    use crate::matcher::Matcher;

    #[test]
    fn json_schema() {
        let schema = doc! {"$jsonSchema": {
            "bsonType": "object",
            "required": ["name"],
            "properties": {
                "name": {"bsonType": "string", "minLength": 2, "maxLength": 5},
                "age": {"bsonType": ["int", "long"], "minimum": 0, "maximum": 150, "exclusiveMaximum": true},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "uniqueItems": true},
                "score": {"type": "number", "multipleOf": 0.5},
                "code": {"type": "string", "pattern": "^[A-Z]+$"},
                "sub": {"bsonType": "object", "additionalProperties": false, "properties": {"x": {}}},
                "either": {"anyOf": [{"bsonType": "int"}, {"bsonType": "string"}]},
                "neg": {"not": {"bsonType": "string"}},
            },
        }};
        let matcher = Matcher::new(&schema).unwrap();
        let cases: Vec<(Document, bool)> = vec![
            (doc! {"name": "bob"}, true),
            (doc! {}, false),
            (doc! {"name": "b"}, false),
            (doc! {"name": "bobbybob"}, false),
            (doc! {"name": 5}, false),
            (doc! {"name": "bob", "age": 30}, true),
            (doc! {"name": "bob", "age": 30.0}, false),
            (doc! {"name": "bob", "age": -1}, false),
            (doc! {"name": "bob", "age": 150}, false),
            (doc! {"name": "bob", "tags": ["a", "b"]}, true),
            (doc! {"name": "bob", "tags": ["a", "a"]}, false),
            (doc! {"name": "bob", "tags": ["c"]}, false),
            (doc! {"name": "bob", "tags": []}, false),
            (doc! {"name": "bob", "score": 2.5}, true),
            (doc! {"name": "bob", "score": 2.2}, false),
            (doc! {"name": "bob", "code": "ABC"}, true),
            (doc! {"name": "bob", "code": "abc"}, false),
            (doc! {"name": "bob", "sub": {"x": 1}}, true),
            (doc! {"name": "bob", "sub": {"y": 1}}, false),
            (doc! {"name": "bob", "either": "s"}, true),
            (doc! {"name": "bob", "either": 1.5}, false),
            (doc! {"name": "bob", "neg": 1}, true),
            (doc! {"name": "bob", "neg": "s"}, false),
            (doc! {"name": "bob", "other": "anything"}, true),
        ];
        for (d, want) in cases {
            assert_eq!(matcher.matches(&d), want, "{d}");
        }
        let closed = Matcher::new(&doc! {"$jsonSchema": {"properties": {"_id": {}, "a": {}}, "additionalProperties": false}}).unwrap();
        assert!(closed.matches(&doc! {"_id": 1, "a": 2}));
        assert!(!closed.matches(&doc! {"_id": 1, "b": 2}));
        let e = Matcher::new(&doc! {"$jsonSchema": {"type": "integer"}}).unwrap_err();
        assert!(e.message.contains("not currently supported"));
    }
}
