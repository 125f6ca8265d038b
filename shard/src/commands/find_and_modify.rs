//! `findAndModify`: update, replace or remove one document and return it (before or after).

use bson::{doc, Bson, Document};
use query::matcher::Matcher;
use query::projection::Projection;
use query::update::UpdateSpec;
use wire::{MongoError, MongoResult};

use super::args::{collection_name, create_on_write, existing, opt_bool, opt_doc};
use super::update::{apply_to_existing, array_filters, upsert_insert};
use crate::execution::read::{collect, FindArgs};
use crate::execution::write_path::delete_document;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    super::unsupported::check_collation(cmd.get("collation"))?;
    let coll = collection_name(cmd)?;
    let filter = opt_doc(cmd, "query")?.cloned().unwrap_or_default();
    let sort = opt_doc(cmd, "sort")?.cloned();
    let remove = opt_bool(cmd, "remove")?.unwrap_or(false);
    let return_new = opt_bool(cmd, "new")?.unwrap_or(false);
    let upsert = opt_bool(cmd, "upsert")?.unwrap_or(false);
    let update = cmd.get("update").filter(|u| !matches!(u, Bson::Null));
    let fields = match opt_doc(cmd, "fields")? {
        Some(f) if !f.is_empty() => Some(Projection::new(f)?),
        _ => None,
    };
    match (remove, update) {
        (true, Some(_)) => {
            return Err(MongoError::failed_to_parse(
                "Cannot specify both an update and remove=true",
            ))
        }
        (false, None) => {
            return Err(MongoError::failed_to_parse(
                "Either an update or remove=true must be specified",
            ))
        }
        _ => {}
    }
    if remove && return_new {
        return Err(MongoError::failed_to_parse("Cannot specify both new=true and remove=true; 'remove' always returns the deleted document"));
    }
    if remove && upsert {
        return Err(MongoError::failed_to_parse(
            "Cannot specify both upsert=true and remove=true ",
        ));
    }
    let spec = match update {
        Some(u) => {
            let spec = UpdateSpec::parse(u, array_filters(cmd)?.as_deref())?;
            Some(match super::args::let_vars(cmd)? {
                Some(v) => spec.with_variables(v),
                None => spec,
            })
        }
        None => None,
    };
    // A retry of a findAndModify that took effect answers what the first attempt did.
    if let Some(Bson::Document(done)) = ctx.begin_statement(0) {
        return Ok(done);
    }
    let meta = match existing(ctx, coll) {
        Some(m) => m,
        None if upsert => create_on_write(ctx, coll)?,
        None => {
            Matcher::new(&filter)?;
            return Ok(reply(None, doc! {"n": 0}, &fields));
        }
    };
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let meta = ctx.check_owner(meta)?;
    let hint = super::args::opt_hint(cmd);
    let vars = super::args::let_vars(cmd)?;
    let args = FindArgs {
        filter: filter.clone(),
        sort,
        limit: Some(1),
        hint,
        vars: vars.clone(),
        ..Default::default()
    };
    let found = collect(ctx.engine, &meta, &args, &ctx.deadline)?
        .into_iter()
        .next();
    let engine = ctx.engine;
    match (found, spec) {
        (Some(old), None) => {
            let out = reply(Some(old.clone()), doc! {"n": 1}, &fields);
            ctx.record(|| Bson::Document(out.clone()));
            delete_document(engine, &meta, &old)?;
            Ok(out)
        }
        (None, None) => Ok(reply(None, doc! {"n": 0}, &fields)),
        (Some(old), Some(spec)) => {
            let mut matcher = Matcher::new(&filter)?;
            if let Some(v) = vars {
                matcher = matcher.with_variables(v);
            }
            let answer = |new: &Document| {
                let value = if return_new { new } else { &old };
                reply(
                    Some(value.clone()),
                    doc! {"n": 1, "updatedExisting": true},
                    &fields,
                )
            };
            let (new, _) = apply_to_existing(ctx, &meta, &matcher, &spec, &old, &|new| {
                Bson::Document(answer(new))
            })?;
            Ok(answer(&new))
        }
        (None, Some(spec)) if upsert => {
            let answer = |inserted: &Document| {
                let id = inserted.get("_id").cloned().unwrap_or(Bson::Null);
                let value = return_new.then(|| inserted.clone());
                reply(
                    value,
                    doc! {"n": 1, "updatedExisting": false, "upserted": id},
                    &fields,
                )
            };
            let inserted =
                upsert_insert(ctx, &meta, &filter, &spec, &|d| Bson::Document(answer(d)))?;
            Ok(answer(&inserted))
        }
        (None, Some(_)) => Ok(reply(
            None,
            doc! {"n": 0, "updatedExisting": false},
            &fields,
        )),
    }
}

fn reply(value: Option<Document>, last_error: Document, fields: &Option<Projection>) -> Document {
    let value = match (value, fields) {
        (Some(v), Some(p)) => p.apply(&v).map(Bson::Document).unwrap_or(Bson::Null),
        (Some(v), None) => Bson::Document(v),
        (None, _) => Bson::Null,
    };
    doc! {"lastErrorObject": last_error, "value": value, "ok": 1.0}
}
