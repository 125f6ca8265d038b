//! What a blocking stage (a sort, the input of `$group`, `$bucket`, `$facet`, ...) may hold
//! in memory: MongoDB's 100 MB per stage. Past it the operation fails with MongoDB's error
//! rather than growing until the member runs out of memory.

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

/// MongoDB's `internalQueryMaxBlockingSortMemoryUsageBytes` (and the `$group` limit).
pub const BLOCKING_STAGE_BYTES: usize = 100 * 1024 * 1024;

/// About the BSON size of `doc`, computed without encoding it and without recursion.
pub fn approx_size(doc: &Document) -> usize {
    let mut stack: Vec<&Bson> = Vec::new();
    let top = 5 + elements(doc.iter().map(|(k, v)| (k.len(), v)), &mut stack);
    top + nested(stack)
}

/// About the BSON size of one value (without its key).
pub fn approx_value_size(v: &Bson) -> usize {
    let mut stack: Vec<&Bson> = Vec::new();
    let top = scalar_size(v, &mut stack);
    top + nested(stack)
}

/// The sizes of the containers' contents left on `stack`, walked without recursion.
fn nested(mut stack: Vec<&Bson>) -> usize {
    let mut total = 0;
    while let Some(v) = stack.pop() {
        total += match v {
            Bson::Document(d) => elements(d.iter().map(|(k, v)| (k.len(), v)), &mut stack),
            Bson::Array(a) => elements(
                a.iter().enumerate().map(|(i, v)| (digits(i), v)),
                &mut stack,
            ),
            _ => 0,
        };
    }
    total
}

/// The elements' sizes (type byte, key, value), nested containers left on `stack`.
fn elements<'a>(
    items: impl Iterator<Item = (usize, &'a Bson)>,
    stack: &mut Vec<&'a Bson>,
) -> usize {
    items
        .map(|(key_len, v)| 2 + key_len + scalar_size(v, stack))
        .sum()
}

/// The size of a scalar, or 5 (the container's own bytes) for a document or array, whose
/// contents are pushed on `stack`.
fn scalar_size<'a>(v: &'a Bson, stack: &mut Vec<&'a Bson>) -> usize {
    match v {
        Bson::Document(_) | Bson::Array(_) => {
            stack.push(v);
            5
        }
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => s.len() + 5,
        Bson::Binary(b) => b.bytes.len() + 5,
        Bson::RegularExpression(r) => r.pattern.len() + r.options.len() + 2,
        Bson::JavaScriptCodeWithScope(c) => c.code.len() + 64,
        Bson::Boolean(_) => 1,
        Bson::Int32(_) => 4,
        Bson::ObjectId(_) => 12,
        Bson::Decimal128(_) => 16,
        Bson::Null | Bson::Undefined | Bson::MaxKey | Bson::MinKey => 0,
        _ => 8,
    }
}

fn digits(i: usize) -> usize {
    i.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// A running total for one blocking stage.
pub struct MemoryBudget {
    used: usize,
    limit: usize,
    stage: &'static str,
    allow_disk_use: bool,
}

impl MemoryBudget {
    /// `stage` names it in the error ("Sort", "$group", ...); `allow_disk_use` is the
    /// command's option.
    pub fn new(stage: &'static str, allow_disk_use: bool) -> MemoryBudget {
        MemoryBudget::with_limit(stage, allow_disk_use, BLOCKING_STAGE_BYTES)
    }

    pub fn with_limit(stage: &'static str, allow_disk_use: bool, limit: usize) -> MemoryBudget {
        MemoryBudget {
            used: 0,
            limit,
            stage,
            allow_disk_use,
        }
    }

    /// What the stage holds so far.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Counts `doc` as held; fails once the stage holds more than its limit. Without
    /// `allowDiskUse` this is MongoDB's QueryExceededMemoryLimitNoDiskUseAllowed (292).
    /// With it MongoDB would spill to disk: a sort does (`shard::execution::spill` spills on
    /// this error), other stages do not and fail with ExceededMemoryLimit (146), saying so,
    /// rather than growing without bound.
    pub fn hold(&mut self, doc: &Document) -> MongoResult<()> {
        self.used = self.used.saturating_add(approx_size(doc));
        if self.used <= self.limit {
            return Ok(());
        }
        Err(exceeded(self.stage, self.limit, self.allow_disk_use))
    }
}

/// The error of a stage past its memory `limit`: without `allowDiskUse` MongoDB's
/// QueryExceededMemoryLimitNoDiskUseAllowed (292); with it ExceededMemoryLimit (146), for
/// what cannot spill.
pub fn exceeded(stage: &str, limit: usize, allow_disk_use: bool) -> MongoError {
    if allow_disk_use {
        MongoError::new(
            ErrorCode::ExceededMemoryLimit,
            format!(
                "{stage} exceeded memory limit of {limit} bytes, and this stage does not spill to disk (allowDiskUse)"
            ),
        )
    } else {
        MongoError::new(
            ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
            format!(
                "{stage} exceeded memory limit of {limit} bytes, but did not opt in to external sorting. Aborting operation. Pass allowDiskUse:true to opt in."
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn the_estimate_is_the_bson_size_for_common_types() {
        let d = doc! {"_id": 1, "s": "hello", "n": 2.5, "a": [1, 2, {"x": "y"}], "o": {"b": true}};
        assert_eq!(approx_size(&d), bson::to_vec(&d).unwrap().len());
    }

    #[test]
    fn a_stage_past_its_limit_fails_with_mongodb_codes() {
        let d = doc! {"s": "x".repeat(100)};
        let mut b = MemoryBudget::with_limit("Sort", false, 250);
        b.hold(&d).unwrap();
        b.hold(&d).unwrap();
        let e = b.hold(&d).unwrap_err();
        assert_eq!(e.code, 292);
        assert!(
            e.message
                .contains("Sort exceeded memory limit of 250 bytes"),
            "{}",
            e.message
        );
        let mut b = MemoryBudget::with_limit("$group", true, 100);
        assert_eq!(b.hold(&d).unwrap_err().code, 146);
    }
}
