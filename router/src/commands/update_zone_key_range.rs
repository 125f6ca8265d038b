//! `updateZoneKeyRange`: assigns a range of shard-key values of a collection to a zone
//! (`zone: null` removes the range). Ranges of one collection may not overlap
//! (`RangeOverlapConflict`), and the zone must be on some shard (`ZoneNotFound`).
//! Collections sharded while empty start with chunks that follow their zones.

use bson::{doc, Bson, Document};
use query::shard_key::ShardKey;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::sharding::{admin_only, catalog, require};

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "updateZoneKeyRange")?;
    let cluster = require(session)?;
    let ns = cmd
        .get_str("updateZoneKeyRange")
        .map_err(|_| MongoError::type_mismatch("'updateZoneKeyRange' must be a namespace"))?;
    let (min, max) = match (cmd.get_document("min"), cmd.get_document("max")) {
        (Ok(min), Ok(max)) => (min, max),
        _ => {
            return Err(MongoError::failed_to_parse(
                "'min' and 'max' must be objects",
            ))
        }
    };
    let zone = match cmd.get("zone") {
        Some(Bson::String(z)) => Some(z.as_str()),
        Some(Bson::Null) => None,
        _ => {
            return Err(MongoError::failed_to_parse(
                "'zone' must be a string or null",
            ))
        }
    };
    // The bounds read against the collection's key, or, before it is sharded, a key
    // made of the bounds' own fields.
    let key = match cluster.table(ns).await? {
        Some(t) => t.key.clone(),
        None => ShardKey::parse(&min.keys().map(|k| (k.clone(), Bson::Int32(1))).collect())?,
    };
    let lo = key.bound_from_prefix(min)?;
    let hi = key.bound_from_prefix(max)?;
    if !query::order::compare_arrays(&lo, &hi).is_lt() {
        return Err(MongoError::bad_value(format!(
            "min {min} must be below max {max}"
        )));
    }
    let Some(zone) = zone else {
        catalog::set_zone_range(&cluster.config, ns, min, max, None).await?;
        return Ok(doc! {});
    };
    let zoned = catalog::shards(&cluster.config).await?.iter().any(|s| {
        s.get_array("tags")
            .is_ok_and(|t| t.iter().any(|z| z.as_str() == Some(zone)))
    });
    if !zoned {
        return Err(MongoError::new(
            ErrorCode::ZoneNotFound,
            format!("zone {zone} does not exist: add a shard to it first"),
        ));
    }
    for other in catalog::zone_ranges(&cluster.config, ns).await? {
        let (Ok(omin), Ok(omax)) = (other.get_document("min"), other.get_document("max")) else {
            continue;
        };
        let same = omin == min && omax == max;
        let olo = key.bound_from_prefix(omin)?;
        let ohi = key.bound_from_prefix(omax)?;
        let overlaps = query::order::compare_arrays(&lo, &ohi).is_lt()
            && query::order::compare_arrays(&olo, &hi).is_lt();
        if overlaps && !same {
            return Err(MongoError::new(
                ErrorCode::RangeOverlapConflict,
                format!(
                    "zone range {min} -> {max} overlaps {omin} -> {omax} of zone {}",
                    other.get_str("tag").unwrap_or_default()
                ),
            ));
        }
    }
    catalog::set_zone_range(&cluster.config, ns, min, max, Some(zone)).await?;
    Ok(doc! {})
}
