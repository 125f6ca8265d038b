//! Parsing an operator update (`{$set: {...}, $inc: {...}}`) into the update tree.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bson::{Bson, Document};

use crate::expr::{num_f64, num_of, type_name};
use crate::matcher::Matcher;
use crate::{MongoError, MongoResult};

use super::array::{parse_add_to_set, parse_pull, parse_push};
use super::number::parse_bit;
use super::tree::{
    creates_path, insert_node, is_array_part, parse_array_filters, parse_update_path, Leaf,
    ModifierUpdate, Node, Op, Rename,
};
use super::values::{fmt_doc, fmt_elem};

/// The update operators (`$set`, ...): a document whose keys are not all among them is
/// refused.
pub const MODIFIERS: &[&str] = &[
    "$set",
    "$unset",
    "$inc",
    "$mul",
    "$min",
    "$max",
    "$rename",
    "$setOnInsert",
    "$currentDate",
    "$push",
    "$addToSet",
    "$pop",
    "$pull",
    "$pullAll",
    "$bit",
];

impl ModifierUpdate {
    pub(super) fn parse(
        update: &Document,
        array_filters: &[Document],
    ) -> MongoResult<ModifierUpdate> {
        let filters = parse_array_filters(array_filters)?;
        let mut m = ModifierUpdate {
            root: Node::object(),
            renames: Vec::new(),
            filters: HashMap::new(),
            paths: Vec::new(),
        };
        let mut used: HashSet<String> = HashSet::new();
        for (op, arg) in update {
            if !MODIFIERS.contains(&op.as_str()) {
                return Err(MongoError::failed_to_parse(format!(
                    "Unknown modifier: {op}. Expected a valid update modifier or pipeline-style update specified as an array"
                )));
            }
            let Bson::Document(fields) = arg else {
                return Err(MongoError::failed_to_parse(format!(
                    "Modifiers operate on fields but we found type {} instead. For example: {{$mod: {{<field>: ...}}}} not {{{}}}",
                    type_name(arg),
                    fmt_elem(op, arg)
                )));
            };
            for (path, value) in fields {
                let parts = parse_update_path(path, &filters, &mut used)?;
                if creates_path(op) {
                    crate::depth::check_update_path(path)?;
                }
                if op == "$rename" {
                    m.add_rename(path, parts, value, &filters, &mut used)?;
                    continue;
                }
                let leaf = parse_op(op, path, value)?;
                insert_node(&mut m.root, &parts, Node::Leaf(Arc::new(leaf)), path)?;
                m.paths.push(path.clone());
            }
        }
        for (id, _) in filters.iter() {
            if !used.contains(id) {
                return Err(MongoError::failed_to_parse(format!(
                    "The array filter for identifier '{id}' was not used in the update {}",
                    fmt_doc(update)
                )));
            }
        }
        m.filters = filters
            .into_iter()
            .map(|(k, (_, matcher))| (k, matcher))
            .collect();
        Ok(m)
    }

    fn add_rename(
        &mut self,
        from: &str,
        from_parts: Vec<String>,
        to: &Bson,
        filters: &HashMap<String, (Document, Matcher)>,
        used: &mut HashSet<String>,
    ) -> MongoResult<()> {
        let Bson::String(to) = to else {
            return Err(MongoError::bad_value(format!(
                "The 'to' field for $rename must be a string: {}",
                fmt_elem(from, to)
            )));
        };
        let to_parts = parse_update_path(to, filters, used)?;
        crate::depth::check_update_path(to)?;
        let dynamic = |p: &[String]| p.iter().any(|c| c == "$" || is_array_part(c));
        if dynamic(&from_parts) {
            return Err(MongoError::bad_value(format!(
                "The source field for $rename may not be dynamic: {from}"
            )));
        }
        if dynamic(&to_parts) {
            return Err(MongoError::bad_value(format!(
                "The destination field for $rename may not be dynamic: {to}"
            )));
        }
        let spec = fmt_elem(from, &Bson::String(to.clone()));
        if from_parts == to_parts {
            return Err(MongoError::bad_value(format!(
                "The source and target field for $rename must differ: {spec}"
            )));
        }
        let n = from_parts.len().min(to_parts.len());
        if from_parts[..n] == to_parts[..n] {
            return Err(MongoError::bad_value(format!(
                "The source and target field for $rename must not be on the same path: {spec}"
            )));
        }
        let idx = self.renames.len();
        self.renames.push(Rename {
            from: from.to_owned(),
            to: to.clone(),
        });
        insert_node(
            &mut self.root,
            &from_parts,
            Node::Leaf(Arc::new(Leaf {
                op: Op::RenameFrom(idx),
            })),
            from,
        )?;
        insert_node(
            &mut self.root,
            &to_parts,
            Node::Leaf(Arc::new(Leaf {
                op: Op::RenameTo(idx),
            })),
            to,
        )?;
        self.paths.push(from.to_owned());
        self.paths.push(to.clone());
        Ok(())
    }
}

fn parse_op(op: &str, path: &str, value: &Bson) -> MongoResult<Leaf> {
    let op = match op {
        "$set" => Op::Set(value.clone()),
        "$setOnInsert" => Op::SetOnInsert(value.clone()),
        "$unset" => Op::Unset,
        "$inc" | "$mul" => {
            if num_of(value).is_none() {
                let verb = if op == "$inc" {
                    "increment"
                } else {
                    "multiply"
                };
                return Err(MongoError::type_mismatch(format!(
                    "Cannot {verb} with non-numeric argument: {{{}}}",
                    fmt_elem(path, value)
                )));
            }
            if op == "$inc" {
                Op::Inc(value.clone())
            } else {
                Op::Mul(value.clone())
            }
        }
        "$min" => Op::Min(value.clone()),
        "$max" => Op::Max(value.clone()),
        "$currentDate" => Op::CurrentDate {
            timestamp: parse_current_date(value)?,
        },
        "$push" => Op::Push(parse_push(value)?),
        "$addToSet" => Op::AddToSet(parse_add_to_set(value)?),
        "$pop" => {
            let n = integer_arg(path, value)?;
            if n != 1 && n != -1 {
                return Err(MongoError::failed_to_parse(format!(
                    "$pop expects 1 or -1, found: {n}"
                )));
            }
            Op::Pop { front: n == -1 }
        }
        "$pull" => Op::Pull(parse_pull(value)?),
        "$pullAll" => match value {
            Bson::Array(a) => Op::PullAll(a.clone()),
            other => {
                return Err(MongoError::bad_value(format!(
                    "$pullAll requires an array argument but was given a {}",
                    type_name(other)
                )))
            }
        },
        "$bit" => Op::Bit(parse_bit(value)?),
        _ => return Err(MongoError::internal(format!("unhandled modifier {op}"))),
    };
    Ok(Leaf { op })
}

/// mongod's `parseIntegerElementToLong` as used by `$pop`.
fn integer_arg(path: &str, value: &Bson) -> MongoResult<i64> {
    let n = match value {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) => {
            if d.fract() != 0.0 || !d.is_finite() {
                return Err(MongoError::failed_to_parse(format!(
                    "Expected an integer: {}",
                    fmt_elem(path, value)
                )));
            }
            Some(*d as i64)
        }
        Bson::Decimal128(_) => num_of(value).map(|n| num_f64(n) as i64),
        _ => None,
    };
    n.ok_or_else(|| {
        MongoError::failed_to_parse(format!("Expected a number in: {}", fmt_elem(path, value)))
    })
}

fn parse_current_date(value: &Bson) -> MongoResult<bool> {
    match value {
        Bson::Boolean(_) => Ok(false),
        Bson::Document(d) => {
            let mut found = None;
            for (k, v) in d {
                if k != "$type" {
                    return Err(MongoError::bad_value(format!("Unrecognized $currentDate option: {k}")));
                }
                match v {
                    Bson::String(s) if s == "date" => found = Some(false),
                    Bson::String(s) if s == "timestamp" => found = Some(true),
                    _ => {}
                }
            }
            found.ok_or_else(|| {
                MongoError::bad_value(
                    "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}",
                )
            })
        }
        other => Err(MongoError::bad_value(format!(
            "{} is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({{$type: 'timestamp/date'}}).",
            type_name(other)
        ))),
    }
}
