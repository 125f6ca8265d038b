//! `insert`: ordered or unordered batches; `writeErrors` indexed by position in the batch.

use bson::{doc, oid::ObjectId, Bson, Document, RawBsonRef, RawDocument};
use wire::{ErrorCode, MongoError, MongoResult};

use super::args::{collection_name, create_on_write, opt_array, opt_bool};
use crate::error::invalid_bson;
use crate::execution::write_path::{insert_new, NewDoc};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let source = match ctx.raw_documents {
        Some(raw) => Source::Raw(raw),
        None => Source::Parsed(opt_array(cmd, "documents")?.ok_or_else(|| {
            MongoError::failed_to_parse(
                "BSON field 'insert.documents' is missing but a required field",
            )
        })?),
    };
    check_batch_size(source.len())?;
    let ordered = opt_bool(cmd, "ordered")?.unwrap_or(true);
    let meta = create_on_write(ctx, coll)?;

    // Validate and assign _ids first; invalid documents become write errors in place.
    let mut prepared = Vec::with_capacity(source.len());
    let mut errors: Vec<(usize, MongoError)> = Vec::new();
    // Statements an earlier attempt of this retryable write already inserted.
    let mut retried = 0;
    for i in 0..source.len() {
        if ctx.begin_statement(i).is_some() {
            retried += 1;
            continue;
        }
        match source.prepare(i) {
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
    // Shared: inserts of one collection run side by side (see `CollectionMeta::write_lock`).
    let _guard = ctx.node.catalog.shared(&lock);
    let meta = ctx.check_owner(meta)?;
    // With ordered inserts, only the documents before the first invalid one are written.
    let limit = if ordered {
        errors.first().map(|(i, _)| *i).unwrap_or(usize::MAX)
    } else {
        usize::MAX
    };
    prepared.retain(|(i, _)| *i < limit);
    let positions: Vec<usize> = prepared.iter().map(|(i, _)| *i).collect();
    let docs = prepared
        .iter()
        .map(|(_, d)| d.new_doc())
        .collect::<MongoResult<Vec<_>>>()?;
    let stage = |carried: std::ops::Range<usize>| {
        if let Some(r) = ctx.retry {
            for j in carried {
                r.stage(ctx.stmt_id(positions[j]), Bson::Null);
            }
        }
    };
    let failed = insert_new(ctx.engine, &ctx.node.catalog, &meta, &docs, ordered, &stage);
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

/// Where the batch's documents are: parsed in the command, or raw BSON beside it.
enum Source<'a> {
    Parsed(&'a [Bson]),
    Raw(&'a [&'a RawDocument]),
}

/// A document ready to store, borrowed from the command when it already has `_id` first.
enum Prepared<'a> {
    Borrowed(&'a Document),
    Owned(Document),
    Raw(Bson, &'a RawDocument),
}

impl<'a> Source<'a> {
    fn len(&self) -> usize {
        match self {
            Source::Parsed(d) => d.len(),
            Source::Raw(d) => d.len(),
        }
    }

    fn prepare(&self, i: usize) -> MongoResult<Prepared<'a>> {
        match *self {
            Source::Parsed(docs) => {
                let Bson::Document(d) = &docs[i] else {
                    return Err(not_a_document());
                };
                check_id(d.get("_id"))?;
                Ok(match d.keys().next() {
                    Some(k) if k == "_id" => Prepared::Borrowed(d),
                    _ => Prepared::Owned(with_id_first(d)),
                })
            }
            Source::Raw(docs) => {
                let raw = docs[i];
                let first = raw.iter().next().transpose().map_err(invalid_bson)?;
                if let Some(("_id", v)) = first {
                    let id = Bson::try_from(v.to_raw_bson()).map_err(invalid_bson)?;
                    check_id(Some(&id))?;
                    return Ok(Prepared::Raw(id, raw));
                }
                let d = Document::try_from(raw).map_err(invalid_bson)?;
                check_id(d.get("_id"))?;
                Ok(Prepared::Owned(with_id_first(&d)))
            }
        }
    }
}

impl Prepared<'_> {
    fn new_doc(&self) -> MongoResult<NewDoc<'_>> {
        match self {
            Prepared::Borrowed(d) => NewDoc::parsed(d),
            Prepared::Owned(d) => NewDoc::parsed(d),
            Prepared::Raw(id, raw) => Ok(NewDoc::raw(id.clone(), raw)),
        }
    }
}

fn not_a_document() -> MongoError {
    MongoError::type_mismatch("BSON field 'insert.documents' must contain documents")
}

/// An `insert` command as its options (a small parsed document) and its documents as
/// raw BSON borrowed from `command`, each checked as the router checks them. `None` when
/// the command is not an insert or its documents are not all documents: it is then
/// parsed whole, and the insert reports what is wrong in MongoDB's words.
pub fn split_raw(command: &[u8]) -> Option<(Document, Vec<&RawDocument>)> {
    let raw = RawDocument::from_bytes(command).ok()?;
    let mut body = Document::new();
    let mut documents = None;
    for (n, element) in raw.iter().enumerate() {
        let (key, value) = element.ok()?;
        if n == 0 && key != "insert" {
            return None;
        }
        if key != "documents" {
            body.insert(key, Bson::try_from(value.to_raw_bson()).ok()?);
            continue;
        }
        let RawBsonRef::Array(array) = value else {
            return None;
        };
        let mut docs = Vec::new();
        for d in array {
            let RawBsonRef::Document(d) = d.ok()? else {
                return None;
            };
            wire::bson_check::validate_document(d.as_bytes(), wire::MAX_NESTING_DEPTH).ok()?;
            docs.push(d);
        }
        documents = Some(docs);
    }
    Some((body, documents?))
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

#[cfg(test)]
mod tests {
    use super::split_raw;
    use bson::doc;

    #[test]
    fn split_raw_takes_only_inserts_of_documents() {
        let cmd =
            doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2, "a": "x"}], "ordered": false};
        let bytes = bson::to_vec(&cmd).unwrap();
        let (body, docs) = split_raw(&bytes).unwrap();
        assert_eq!(body, doc! {"insert": "c", "ordered": false});
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].get_str("a").unwrap(), "x");
        // Anything else is parsed whole, so the insert reports it in MongoDB's words.
        for other in [
            doc! {"find": "c", "documents": [{"_id": 1}]},
            doc! {"insert": "c", "documents": [{"_id": 1}, 5]},
            doc! {"insert": "c", "documents": {"_id": 1}},
            doc! {"insert": "c"},
        ] {
            assert!(
                split_raw(&bson::to_vec(&other).unwrap()).is_none(),
                "{other}"
            );
        }
    }
}
