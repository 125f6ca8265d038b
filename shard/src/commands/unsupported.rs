//! Options MongoDB has and Bulwark does not implement yet. Each is refused with
//! NotImplemented (238), naming the option, never accepted and ignored: an ignored
//! collation, validator or capped size would quietly give other results than MongoDB's.

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

fn not_implemented(what: &str) -> MongoError {
    MongoError::new(
        ErrorCode::NotImplemented,
        format!("{what} is not supported"),
    )
}

/// A `collation` other than the simple one (binary comparison, the only one Bulwark has).
pub fn check_collation(collation: Option<&Bson>) -> MongoResult<()> {
    match collation {
        None => Ok(()),
        Some(Bson::Document(d)) if d.get_str("locale") == Ok("simple") => Ok(()),
        Some(Bson::Document(_)) => Err(not_implemented(
            "a collation other than {locale: \"simple\"}",
        )),
        Some(_) => Err(MongoError::type_mismatch(
            "BSON field 'collation' is the wrong type, expected type 'object'",
        )),
    }
}

/// Whether `v` asks for something (not absent, `false`, `null` or `{}`).
fn set(v: Option<&Bson>) -> bool {
    match v {
        None | Some(Bson::Boolean(false)) | Some(Bson::Null) => false,
        Some(Bson::Document(d)) => !d.is_empty(),
        Some(_) => true,
    }
}

/// `create`'s options that would change how the collection behaves.
pub fn check_create_options(cmd: &Document) -> MongoResult<()> {
    const REFUSED: &[(&str, &str)] = &[
        ("capped", "capped collections (capped, size, max)"),
        ("validator", "document validation (validator)"),
        ("timeseries", "time-series collections (timeseries)"),
        ("expireAfterSeconds", "expireAfterSeconds on a collection"),
    ];
    if let Some((_, what)) = REFUSED.iter().find(|(k, _)| set(cmd.get(*k))) {
        return Err(not_implemented(what));
    }
    // Every collection is stored clustered by `_id`: asking for exactly that is honoured.
    if let Some(clustered) = cmd.get("clusteredIndex") {
        let by_id = clustered.as_document().is_some_and(|c| {
            c.get_document("key").ok() == Some(&bson::doc! {"_id": 1})
                && c.get_bool("unique") == Ok(true)
        });
        if !by_id {
            return Err(not_implemented(
                "a clusteredIndex other than {key: {_id: 1}, unique: true}",
            ));
        }
    }
    if let Some(v) = cmd.get("changeStreamPreAndPostImages") {
        super::coll_mod::images_option(v)?;
    }
    check_collation(cmd.get("collation"))
}

/// An index specification's options that change what the index holds or who uses it.
pub fn check_index_spec(spec: &Document) -> MongoResult<()> {
    if set(spec.get("hidden")) {
        return Err(not_implemented("hidden indexes"));
    }
    let wildcard = spec
        .get_document("key")
        .is_ok_and(|k| k.keys().any(|f| f == "$**" || f.ends_with(".$**")));
    if wildcard || spec.contains_key("wildcardProjection") {
        return Err(not_implemented("wildcard indexes"));
    }
    check_collation(spec.get("collation"))
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn what_would_change_behaviour_is_refused_and_the_defaults_pass() {
        let code = |r: MongoResult<()>| r.unwrap_err().code;
        assert!(check_collation(Some(&Bson::Document(doc! {"locale": "simple"}))).is_ok());
        assert_eq!(
            code(check_collation(Some(&Bson::Document(
                doc! {"locale": "en", "strength": 2}
            )))),
            238
        );
        assert!(
            check_create_options(&doc! {"create": "c", "capped": false, "validator": {}}).is_ok()
        );
        let clustered = doc! {"create": "c", "clusteredIndex": {"key": {"_id": 1}, "unique": true}};
        assert!(check_create_options(&clustered).is_ok());
        for refused in [
            doc! {"create": "c", "capped": true, "size": 1000},
            doc! {"create": "c", "validator": {"a": {"$exists": true}}},
            doc! {"create": "c", "timeseries": {"timeField": "t"}},
            doc! {"create": "c", "clusteredIndex": {"key": {"a": 1}, "unique": true}},
            doc! {"create": "c", "collation": {"locale": "fr"}},
        ] {
            assert_eq!(code(check_create_options(&refused)), 238, "{refused}");
        }
        assert!(check_index_spec(&doc! {"key": {"a": 1}, "name": "a", "hidden": false}).is_ok());
        assert_eq!(
            code(check_index_spec(
                &doc! {"key": {"a": 1}, "name": "a", "hidden": true}
            )),
            238
        );
        assert_eq!(
            code(check_index_spec(&doc! {"key": {"$**": 1}, "name": "w"})),
            238
        );
        assert_eq!(
            code(check_index_spec(&doc! {"key": {"a.$**": 1}, "name": "w"})),
            238
        );
    }
}
