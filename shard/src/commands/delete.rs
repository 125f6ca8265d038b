//! `delete`: each statement removes one (`limit: 1`) or all (`limit: 0`) matching documents.

use bson::{Bson, Document};
use wire::{MongoError, MongoResult};

use super::args::{collection_name, existing, opt_array, opt_bool, opt_doc, opt_i64};
use super::insert::{check_batch_size, write_reply};
use crate::execution::read::{collect, FindArgs};
use crate::execution::write_path::delete_document;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let deletes = opt_array(cmd, "deletes")?.ok_or_else(|| {
        MongoError::failed_to_parse("BSON field 'delete.deletes' is missing but a required field")
    })?;
    check_batch_size(deletes.len())?;
    let ordered = opt_bool(cmd, "ordered")?.unwrap_or(true);
    // Statement shape errors fail the whole command, as MongoDB's parser does.
    for d in deletes {
        if let Bson::Document(d) = d {
            super::args::check_statement_fields(
                d,
                "delete.deletes",
                &["q", "limit", "hint", "collation"],
            )?;
            if let Some(limit) = opt_i64(d, "limit")? {
                if limit != 0 && limit != 1 {
                    return Err(MongoError::failed_to_parse(format!(
                        "The limit field in delete objects must be 0 or 1. Got {limit}"
                    )));
                }
            }
        }
    }
    let vars = super::args::let_vars(cmd)?;
    let mut n = 0i64;
    let mut errors = Vec::new();
    for (i, d) in deletes.iter().enumerate() {
        if let Some(done) = ctx.begin_statement(i) {
            n += done.as_i32().unwrap_or(0) as i64;
            continue;
        }
        match run_one(ctx, coll, d, &vars) {
            Ok(k) => n += k,
            Err(e) => {
                errors.push((i, e));
                if ordered {
                    break;
                }
            }
        }
    }
    Ok(write_reply(n, errors))
}

fn run_one(
    ctx: &Ctx,
    coll: &str,
    d: &Bson,
    vars: &Option<query::expr::Variables>,
) -> MongoResult<i64> {
    let Bson::Document(d) = d else {
        return Err(MongoError::type_mismatch(
            "BSON field 'delete.deletes' must contain objects",
        ));
    };
    let filter = opt_doc(d, "q")?.cloned().ok_or_else(|| {
        MongoError::failed_to_parse("BSON field 'delete.deletes.q' is missing but a required field")
    })?;
    let limit = opt_i64(d, "limit")?.ok_or_else(|| {
        MongoError::failed_to_parse(
            "BSON field 'delete.deletes.limit' is missing but a required field",
        )
    })?;
    if limit != 0 && limit != 1 {
        return Err(MongoError::failed_to_parse(format!(
            "The limit field in delete objects must be 0 or 1. Got {limit}"
        )));
    }
    let Some(meta) = existing(ctx, coll) else {
        query::matcher::Matcher::new(&filter)?;
        return Ok(0);
    };
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let meta = ctx.check_owner(meta)?;
    let hint = super::args::opt_hint(d);
    let args = FindArgs {
        filter,
        limit: (limit == 1).then_some(1),
        hint,
        vars: vars.clone(),
        ..Default::default()
    };
    let docs = collect(ctx.engine, &meta, &args, &ctx.deadline)?;
    for doc in &docs {
        ctx.record(|| Bson::Int32(1));
        delete_document(ctx.engine, &meta, doc)?;
    }
    Ok(docs.len() as i64)
}
