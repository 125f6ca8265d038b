//! What an `aggregate` needs: its pipeline is parsed by the parser the shard runs
//! (`query::agg::Pipeline`), so every stage that names a collection is seen at any depth
//! (`$facet`, `$lookup` and `$unionWith` sub-pipelines), in every form, exactly as the
//! shard will read it. A pipeline that does not parse is refused before anything runs.

use std::borrow::Cow;

use bson::Document;
use query::agg::{Access, Pipeline};
use wire::MongoResult;

use super::authz::{acts, first_target, Need, Scope};
use super::roles::{Action::*, ActionSet};

/// Find on the source (or `collStats`/`indexStats` for those first stages, nothing for
/// `$documents`); find on every collection read; insert and remove on a `$out` target;
/// insert and/or update on a `$merge` target.
pub fn aggregate_needs<'a>(db: &'a str, cmd: &'a Document) -> MongoResult<Vec<Need<'a>>> {
    let stages = query::agg::command_stages(cmd)?;
    let first = stages
        .first()
        .and_then(|s| s.keys().next())
        .map(String::as_str);
    let (source, rest) = match first {
        Some("$collStats") => (Some(acts(&[CollStats])), &stages[1..]),
        Some("$indexStats") => (Some(acts(&[IndexStats])), &stages[1..]),
        Some("$documents") => (None, &stages[..]),
        _ => (Some(acts(&[Find])), &stages[..]),
    };
    let pipeline = Pipeline::parse(rest)?;
    let mut out: Vec<Need<'a>> = source
        .map(|a| Need::on(first_target(db, cmd), a))
        .into_iter()
        .collect();
    for access in pipeline.accesses() {
        let target_db = access.db.map_or(Cow::Borrowed(db), Cow::Owned);
        out.push(Need {
            scope: Scope::Collection(target_db, Cow::Owned(access.coll)),
            actions: actions(access.access),
        });
    }
    Ok(out)
}

fn actions(access: Access) -> ActionSet {
    match access {
        Access::Read => acts(&[Find]),
        Access::Replace => acts(&[Insert, Remove]),
        Access::Merge { inserts, updates } => match (inserts, updates) {
            (true, true) => acts(&[Insert, Update]),
            (false, true) => acts(&[Update]),
            _ => acts(&[Insert]),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::roles::{builtin_privileges, Privileges};
    use bson::{doc, Bson};

    fn allowed(role: &str, db: &str, cmd: &Document) -> MongoResult<bool> {
        let p = Privileges(builtin_privileges(role, "admin").unwrap());
        Ok(aggregate_needs(db, cmd)?
            .iter()
            .all(|n| p.allows(n.scope.target(), n.actions)))
    }

    fn on_admin(pipeline: Bson) -> Document {
        doc! {"aggregate": 1, "pipeline": pipeline, "cursor": {}}
    }

    #[test]
    fn credentials_are_unreachable_through_any_stage_at_any_depth() {
        let reads = [
            bson::bson!([{"$documents": [{"a": "root"}]}, {"$graphLookup": {"from": "system.users", "startWith": "$a", "connectFromField": "user", "connectToField": "user", "as": "u"}}]),
            bson::bson!([{"$documents": [{}]}, {"$facet": {"f": [{"$lookup": {"from": "system.users", "pipeline": [], "as": "u"}}]}}]),
            bson::bson!([{"$documents": [{}]}, {"$lookup": {"from": "c", "as": "u", "pipeline": [{"$unionWith": "system.users"}]}}]),
            bson::bson!([{"$documents": [{}]}, {"$unionWith": {"coll": "c", "pipeline": [{"$lookup": {"from": "system.roles", "localField": "a", "foreignField": "b", "as": "r"}}]}}]),
            bson::bson!([{"$documents": [{}]}, {"$facet": {"g": [{"$graphLookup": {"from": "system.users", "startWith": "$a", "connectFromField": "a", "connectToField": "a", "as": "u"}}]}}]),
        ];
        for p in reads {
            let cmd = on_admin(p.clone());
            assert!(!allowed("readAnyDatabase", "admin", &cmd).unwrap(), "{p}");
            assert!(allowed("root", "admin", &cmd).unwrap(), "{p}");
        }
    }

    #[test]
    fn lookup_from_another_database_is_refused_not_ignored() {
        let cmd = on_admin(
            bson::bson!([{"$documents": [{}]}, {"$lookup": {"from": {"db": "admin", "coll": "system.users"}, "pipeline": [], "as": "u"}}]),
        );
        let e = allowed("root", "app", &cmd).unwrap_err();
        assert_eq!(e.code, wire::ErrorCode::FailedToParse as i32);
    }

    #[test]
    fn output_stages_need_write_actions_on_their_target() {
        let out = doc! {"aggregate": "c", "pipeline": [{"$out": {"db": "admin", "coll": "system.users"}}], "cursor": {}};
        assert!(!allowed("readWriteAnyDatabase", "app", &out).unwrap());
        assert!(!allowed("readWrite", "app", &out).unwrap());
        let out = doc! {"aggregate": "c", "pipeline": [{"$out": "x"}], "cursor": {}};
        assert!(allowed("readWriteAnyDatabase", "app", &out).unwrap());
        assert!(!allowed("readAnyDatabase", "app", &out).unwrap());
        let merge = doc! {"aggregate": "c", "pipeline": [{"$merge": {"into": {"db": "admin", "coll": "system.users"}}}], "cursor": {}};
        assert!(!allowed("readWriteAnyDatabase", "app", &merge).unwrap());
    }

    #[test]
    fn source_stages_need_their_own_actions() {
        let docs = on_admin(bson::bson!([{"$documents": [{"a": 1}]}]));
        assert!(allowed("read", "admin", &docs).unwrap());
        let stats =
            doc! {"aggregate": "c", "pipeline": [{"$collStats": {"count": {}}}], "cursor": {}};
        assert!(allowed("clusterMonitor", "app", &stats).unwrap());
        let unknown = doc! {"aggregate": "c", "pipeline": [{"$nope": {}}], "cursor": {}};
        assert!(allowed("root", "app", &unknown).is_err());
    }
}
