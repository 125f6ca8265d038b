//! `distinct`: the distinct values of a field among matching documents (arrays unwound).

use bson::{doc, Bson, Document};
use wire::{MongoError, MongoResult};

use super::args::{collection_name, existing_to_read, opt_doc};
use crate::execution::read::{collect, FindArgs};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    super::unsupported::check_collation(cmd.get("collation"))?;
    let coll = collection_name(cmd)?;
    let key = match cmd.get("key") {
        Some(Bson::String(k)) => k.clone(),
        Some(_) => {
            return Err(MongoError::type_mismatch(
                "BSON field 'distinct.key' is the wrong type, expected type 'string'",
            ))
        }
        None => {
            return Err(MongoError::failed_to_parse(
                "BSON field 'distinct.key' is missing but a required field",
            ))
        }
    };
    let filter = opt_doc(cmd, "query")?.cloned().unwrap_or_default();
    let Some(meta) = existing_to_read(ctx, coll)? else {
        query::matcher::Matcher::new(&filter)?;
        return Ok(doc! {"values": [], "ok": 1.0});
    };
    ctx.check_read(&meta)?;
    let hint = super::args::opt_hint(cmd);
    let docs = collect(
        ctx.engine,
        &meta,
        &FindArgs {
            filter,
            hint,
            ..Default::default()
        },
        &ctx.deadline,
    )?;
    let mut seen = std::collections::HashSet::new();
    let mut values: Vec<Bson> = Vec::new();
    for d in &docs {
        for v in query::path::path_values(d, &key) {
            let items = match v {
                Bson::Array(a) => a,
                v => vec![v],
            };
            for item in items {
                // Equal values (1 and 1.0) share an encoding, so this dedupes as $eq would.
                let mut key = Vec::new();
                query::keystring::encode_value(&mut key, &item);
                if seen.insert(key) {
                    values.push(item);
                }
            }
        }
    }
    values.sort_by(query::order::compare);
    Ok(doc! {"values": values, "ok": 1.0})
}
