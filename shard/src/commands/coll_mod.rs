//! `collMod`: changes a collection's options. Only `changeStreamPreAndPostImages` is
//! offered (whether change events carry the document before and after the change); any
//! other option is refused rather than accepted and ignored.

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::args::{collection_name, existing_or};
use crate::execution::change_events;
use crate::node::Ctx;
use crate::repl::events::Kind;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let meta = existing_or(ctx, coll, |ns| format!("ns does not exist: {ns}"))?;
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let meta = ctx.node.catalog.get(&meta.ns()).unwrap_or(meta);
    let mut changed = Document::new();
    for (k, v) in cmd.iter().skip(1) {
        match k.as_str() {
            "changeStreamPreAndPostImages" => {
                images_option(v)?;
                changed.insert(k.clone(), v.clone());
            }
            k if wire::command_fields::is_generic(k) => {}
            other => {
                return Err(MongoError::new(
                    ErrorCode::InvalidOptions,
                    format!("collMod option '{other}' is not supported"),
                ))
            }
        }
    }
    let mut updated = meta.derive(meta.indexes.clone());
    for (k, v) in &changed {
        updated.options.insert(k.clone(), v.clone());
    }
    let mut batch = storage::WriteBatch::default();
    ctx.node.catalog.stage(&mut batch, &updated);
    change_events::ddl(
        &mut batch,
        (Kind::Modify, &meta.ns(), Some(meta.uuid)),
        Some(&changed),
    );
    ctx.engine
        .write_owned(batch)
        .map_err(crate::error::storage_to_mongo)?;
    ctx.node.catalog.install(updated);
    Ok(Document::new())
}

/// `{enabled: <bool>}`, as `create` and `collMod` take it.
pub fn images_option(v: &Bson) -> MongoResult<bool> {
    let bad = || {
        MongoError::new(
            ErrorCode::TypeMismatch,
            "changeStreamPreAndPostImages takes {enabled: <bool>}",
        )
    };
    let Bson::Document(d) = v else {
        return Err(bad());
    };
    if d.keys().any(|k| k != "enabled") {
        return Err(MongoError::new(
            ErrorCode::UnknownField,
            "changeStreamPreAndPostImages takes only 'enabled'",
        ));
    }
    d.get_bool("enabled").map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn the_images_option_is_checked() {
        assert!(images_option(&doc! {"enabled": true}.into()).unwrap());
        assert!(images_option(&Bson::Int32(1)).is_err());
        assert!(images_option(&doc! {"enabled": 1}.into()).is_err());
        assert!(images_option(&doc! {"enabled": true, "x": 1}.into()).is_err());
    }
}
