//! `insert`: ordered or unordered batches; `writeErrors` indexed by position in the batch.

use bson::{doc, oid::ObjectId, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::args::{collection_name, create_on_write, opt_array, opt_bool};
use crate::node::Ctx;
use crate::write_path::insert_documents;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let docs = opt_array(cmd, "documents")?.ok_or_else(|| {
        MongoError::failed_to_parse("BSON field 'insert.documents' is missing but a required field")
    })?;
    check_batch_size(docs.len())?;
    let ordered = opt_bool(cmd, "ordered")?.unwrap_or(true);
    let meta = create_on_write(ctx, coll)?;

    // Validate and assign _ids first; invalid documents become write errors in place.
    let mut prepared = Vec::with_capacity(docs.len());
    let mut errors: Vec<(usize, MongoError)> = Vec::new();
    // Statements an earlier attempt of this retryable write already inserted.
    let mut retried = 0;
    for (i, d) in docs.iter().enumerate() {
        if ctx.begin_statement(i).is_some() {
            retried += 1;
            continue;
        }
        match prepare(d) {
            Ok(d) => prepared.push((i, d)),
            Err(e) => {
                errors.push((i, e));
                if ordered {
                    break;
                }
            }
        }
    }
    let lock = meta.write_lock.clone();
    let _guard = lock.lock().unwrap();
    let meta = ctx.node.catalog.get(&meta.ns()).unwrap_or(meta);
    // With ordered inserts, only the documents before the first invalid one are written.
    let limit = if ordered {
        errors.first().map(|(i, _)| *i).unwrap_or(usize::MAX)
    } else {
        usize::MAX
    };
    let to_write: Vec<(usize, Document)> =
        prepared.into_iter().filter(|(i, _)| *i < limit).collect();
    let positions: Vec<usize> = to_write.iter().map(|(i, _)| *i).collect();
    let docs: Vec<Document> = to_write.into_iter().map(|(_, d)| d).collect();
    let stage = |carried: std::ops::Range<usize>| {
        if let Some(r) = ctx.retry {
            for j in carried {
                r.stage(positions[j] as i32, Bson::Null);
            }
        }
    };
    let failed = insert_documents(ctx.engine, &ctx.node.catalog, &meta, &docs, ordered, &stage);
    let mut n = docs.len();
    if ordered {
        if let Some((j, _)) = failed.first() {
            n = *j;
        }
    } else {
        n -= failed.len();
    }
    for (j, e) in failed {
        errors.push((positions[j], e));
    }
    errors.sort_by_key(|(i, _)| *i);
    if ordered {
        errors.truncate(1);
    }
    Ok(write_reply((n + retried) as i64, errors))
}

pub fn check_batch_size(n: usize) -> MongoResult<()> {
    if n == 0 || n > wire::MAX_WRITE_BATCH {
        return Err(MongoError::new(
            ErrorCode::InvalidLength,
            format!(
                "Write batch sizes must be between 1 and {}. Got {n} operations.",
                wire::MAX_WRITE_BATCH
            ),
        ));
    }
    Ok(())
}

/// `{n, writeErrors?}` as drivers expect from insert/update/delete.
pub fn write_reply(n: i64, errors: Vec<(usize, MongoError)>) -> Document {
    let mut reply = doc! {"n": n as i32};
    if !errors.is_empty() {
        let errs: Vec<Bson> = errors
            .iter()
            .map(|(i, e)| Bson::Document(e.to_write_error(*i)))
            .collect();
        reply.insert("writeErrors", errs);
    }
    reply
}

/// Gives the document an `_id` (first, as MongoDB stores it) and validates it.
pub fn prepare(d: &Bson) -> MongoResult<Document> {
    let Bson::Document(d) = d else {
        return Err(MongoError::type_mismatch(
            "BSON field 'insert.documents' must contain documents",
        ));
    };
    check_id(d.get("_id"))?;
    Ok(with_id_first(d))
}

pub fn check_id(id: Option<&Bson>) -> MongoResult<()> {
    match id {
        Some(Bson::Array(_)) => Err(MongoError::new(
            ErrorCode::InvalidIdField,
            "The '_id' value cannot be of type array",
        )),
        Some(Bson::RegularExpression(_)) => Err(MongoError::new(
            ErrorCode::InvalidIdField,
            "The '_id' value cannot be of type regex",
        )),
        Some(Bson::Undefined) => Err(MongoError::new(
            ErrorCode::InvalidIdField,
            "can't use a undefined for _id",
        )),
        Some(Bson::Document(d)) if d.keys().any(|k| k.starts_with('$')) => Err(MongoError::new(
            ErrorCode::DollarPrefixedFieldName,
            format!(
                "_id fields may not contain '$'-prefixed fields: {d} is not valid for storage."
            ),
        )),
        _ => Ok(()),
    }
}

pub fn with_id_first(d: &Document) -> Document {
    match d.keys().next() {
        Some(k) if k == "_id" => d.clone(),
        _ => {
            let mut out = Document::new();
            out.insert(
                "_id",
                d.get("_id")
                    .cloned()
                    .unwrap_or_else(|| Bson::ObjectId(ObjectId::new())),
            );
            for (k, v) in d {
                if k != "_id" {
                    out.insert(k.clone(), v.clone());
                }
            }
            out
        }
    }
}
