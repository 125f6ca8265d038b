//! `update`: operator, replacement and pipeline updates; upsert; multi; arrayFilters.
//! The single-document helpers here are shared with `findAndModify`.

use bson::{doc, Bson, Document};
use query::matcher::Matcher;
use query::update::{UpdateChange, UpdateContext, UpdateSpec};
use wire::{ErrorCode, MongoError, MongoResult};

use super::args::{collection_name, create_on_write, existing, opt_array, opt_bool};
use super::insert::{check_batch_size, check_id, with_id_first};
use crate::catalog::CollectionMeta;
use crate::execution::read::{collect, FindArgs};
use crate::execution::write_path::{insert_documents, replace_document};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let updates = opt_array(cmd, "updates")?.ok_or_else(|| {
        MongoError::failed_to_parse("BSON field 'update.updates' is missing but a required field")
    })?;
    check_batch_size(updates.len())?;
    let ordered = opt_bool(cmd, "ordered")?.unwrap_or(true);
    let vars = super::args::let_vars(cmd)?;
    // Statement shape errors fail the whole command, as MongoDB's parser does.
    for u in updates {
        if let Bson::Document(u) = u {
            super::args::check_statement_fields(u, "update.updates", UPDATE_STATEMENT_FIELDS)?;
        }
    }
    let (mut n, mut modified) = (0i64, 0i64);
    let mut upserted = Vec::new();
    let mut errors = Vec::new();
    for (i, u) in updates.iter().enumerate() {
        let outcome = match ctx.begin_statement(i) {
            Some(done) => Ok(Outcome::recorded(&done)),
            None => run_one(ctx, coll, u, &vars),
        };
        match outcome {
            Ok(out) => {
                n += out.matched;
                modified += out.modified;
                if let Some(id) = out.upserted_id {
                    n += 1;
                    upserted.push(Bson::Document(doc! {"index": i as i32, "_id": id}));
                }
            }
            Err(e) => {
                errors.push((i, e));
                if ordered {
                    break;
                }
            }
        }
    }
    let mut reply = super::insert::write_reply(n, errors);
    reply.insert("nModified", modified as i32);
    if !upserted.is_empty() {
        reply.insert("upserted", upserted);
    }
    Ok(reply)
}

const UPDATE_STATEMENT_FIELDS: &[&str] = &[
    "q",
    "u",
    "upsert",
    "multi",
    "arrayFilters",
    "hint",
    "collation",
    "c",
    "upsertSupplied",
];

pub(super) struct Outcome {
    pub matched: i64,
    pub modified: i64,
    pub upserted_id: Option<Bson>,
}

impl Outcome {
    /// What a retryable write recorded for a statement that changed one document.
    pub fn record(&self) -> Bson {
        let mut d = doc! {"n": self.matched, "nModified": self.modified};
        if let Some(id) = &self.upserted_id {
            d.insert("upserted", id.clone());
        }
        Bson::Document(d)
    }

    fn recorded(b: &Bson) -> Outcome {
        let d = b.as_document().cloned().unwrap_or_default();
        Outcome {
            matched: d.get_i64("n").unwrap_or(0),
            modified: d.get_i64("nModified").unwrap_or(0),
            upserted_id: d.get("upserted").cloned(),
        }
    }
}

fn run_one(
    ctx: &Ctx,
    coll: &str,
    u: &Bson,
    vars: &Option<query::expr::Variables>,
) -> MongoResult<Outcome> {
    let Bson::Document(u) = u else {
        return Err(MongoError::type_mismatch(
            "BSON field 'update.updates' must contain objects",
        ));
    };
    let filter = super::args::opt_doc(u, "q")?.cloned().unwrap_or_default();
    let update = u.get("u").ok_or_else(|| {
        MongoError::failed_to_parse("BSON field 'update.updates.u' is missing but a required field")
    })?;
    let array_filters = array_filters(u)?;
    let mut spec = UpdateSpec::parse(update, array_filters.as_deref())?;
    if let Some(v) = vars {
        spec = spec.with_variables(v.clone());
    }
    let multi = opt_bool(u, "multi")?.unwrap_or(false);
    let upsert = opt_bool(u, "upsert")?.unwrap_or(false);
    if multi && spec.is_replacement() {
        return Err(MongoError::failed_to_parse(
            "multi update is not supported for replacement-style update",
        ));
    }
    let hint = super::args::opt_hint(u);
    let meta = match existing(ctx, coll) {
        Some(m) => m,
        None if upsert => create_on_write(ctx, coll)?,
        None => {
            Matcher::new(&filter)?;
            return Ok(Outcome {
                matched: 0,
                modified: 0,
                upserted_id: None,
            });
        }
    };
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let meta = ctx.check_owner(meta)?;
    let args = FindArgs {
        filter: filter.clone(),
        limit: if multi { None } else { Some(1) },
        hint,
        vars: vars.clone(),
        ..Default::default()
    };
    let docs = collect(ctx.engine, &meta, &args, &ctx.deadline)?;
    if docs.is_empty() {
        if !upsert {
            return Ok(Outcome {
                matched: 0,
                modified: 0,
                upserted_id: None,
            });
        }
        let inserted = upsert_insert(ctx, &meta, &filter, &spec, &|d| {
            Outcome {
                matched: 0,
                modified: 0,
                upserted_id: d.get("_id").cloned(),
            }
            .record()
        })?;
        return Ok(Outcome {
            matched: 0,
            modified: 0,
            upserted_id: inserted.get("_id").cloned(),
        });
    }
    let mut matcher = Matcher::new(&filter)?;
    if let Some(v) = vars {
        matcher = matcher.with_variables(v.clone());
    }
    let mut modified = 0;
    for old in &docs {
        ctx.deadline.check()?;
        let one = |_: &Document| {
            Outcome {
                matched: 1,
                modified: 1,
                upserted_id: None,
            }
            .record()
        };
        if apply_to_existing(ctx, &meta, &matcher, &spec, old, &one)?.1 {
            modified += 1;
        }
    }
    Ok(Outcome {
        matched: docs.len() as i64,
        modified,
        upserted_id: None,
    })
}

pub fn array_filters(u: &Document) -> MongoResult<Option<Vec<Document>>> {
    match opt_array(u, "arrayFilters")? {
        None => Ok(None),
        Some(items) => items
            .iter()
            .map(|f| match f {
                Bson::Document(d) => Ok(d.clone()),
                _ => Err(MongoError::type_mismatch(
                    "arrayFilters must contain objects",
                )),
            })
            .collect::<MongoResult<Vec<_>>>()
            .map(Some),
    }
}

/// Applies `spec` to one stored document; returns the new document and whether it changed.
/// `record` gives, from the new document, what a retryable write records for the change.
pub fn apply_to_existing(
    ctx: &Ctx,
    meta: &CollectionMeta,
    matcher: &Matcher,
    spec: &UpdateSpec,
    old: &Document,
    record: &dyn Fn(&Document) -> Bson,
) -> MongoResult<(Document, bool)> {
    let mut new = old.clone();
    let uctx = UpdateContext {
        is_upsert_insert: false,
        matched_array_index: matcher.matches_with_position(old).flatten(),
        now: bson::DateTime::now(),
    };
    let change = spec.apply_described(&mut new, &uctx)?;
    if new.get("_id") != old.get("_id") {
        return Err(MongoError::new(
            ErrorCode::ImmutableField,
            "Performing an update on the path '_id' would modify the immutable field '_id'",
        ));
    }
    if let Some(change) = change {
        let new = with_id_first(&new);
        would_change_owning_shard(ctx, meta, old, &new)?;
        ctx.record(|| record(&new));
        let described = match change {
            UpdateChange::Update(d) => Some(d.to_document(true)),
            UpdateChange::Replace => None,
        };
        replace_document(
            ctx.engine,
            &ctx.node.catalog,
            meta,
            (old, &new),
            described.as_ref(),
        )?;
        return Ok((new, true));
    }
    Ok((new, false))
}

/// Refuses a change of a document's shard key to a value another shard owns, with the
/// document before and after (`WouldChangeOwningShard`, 283, as mongod answers mongos):
/// the router moves it, inserting the new one there and deleting this one here
/// (`_shardsvrDeleteIfUnchanged`). Routers send such updates only as retryable writes.
fn would_change_owning_shard(
    ctx: &Ctx,
    meta: &CollectionMeta,
    old: &Document,
    new: &Document,
) -> MongoResult<()> {
    let (Some(owner), Some(crate::catalog::shard_version::Routed::At(_))) =
        (&meta.ownership, &ctx.shard_version)
    else {
        return Ok(());
    };
    if owner.owns(new) {
        return Ok(());
    }
    if ctx.txn.is_some() {
        // The router moves a document only as a retryable write of its own, outside
        // the client's transaction.
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            "an update inside a transaction cannot change a document's shard key to a \
             value another shard owns (not supported yet)",
        ));
    }
    Err(MongoError::new(
        ErrorCode::WouldChangeOwningShard,
        "This update would cause the doc to change owning shards",
    )
    .with_extra(doc! {"errInfo": {"preImage": old.clone(), "postImage": new.clone()}}))
}

/// Inserts the document an upsert creates when nothing matched; returns it. `record` as
/// for [`apply_to_existing`].
pub fn upsert_insert(
    ctx: &Ctx,
    meta: &CollectionMeta,
    filter: &Document,
    spec: &UpdateSpec,
    record: &dyn Fn(&Document) -> Bson,
) -> MongoResult<Document> {
    let doc = spec.upsert_document(filter, bson::DateTime::now())?;
    check_id(doc.get("_id"))?;
    let errors = insert_documents(
        ctx.engine,
        &ctx.node.catalog,
        meta,
        std::slice::from_ref(&doc),
        true,
        &|_| ctx.record(|| record(&doc)),
    );
    match errors.into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(doc),
    }
}
