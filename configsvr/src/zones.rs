//! Zones as the balancer and `shardCollection` place chunks by them: the ranges recorded
//! for a collection (`updateZoneKeyRange`), each with the shards in its zone
//! (`addShardToZone`).

use query::shard_key::ShardKey;
use wire::MongoResult;

use router::sharding::catalog;
use router::sharding::routing::ZoneRange;

/// The zone ranges recorded for `ns`, with the shards of each zone.
pub async fn zone_ranges(
    cluster: &router::sharding::Cluster,
    ns: &str,
    key: &ShardKey,
) -> MongoResult<Vec<ZoneRange>> {
    let shards = catalog::shards(&cluster.config).await?;
    let in_zone = |zone: &str| -> Vec<String> {
        shards
            .iter()
            .filter(|s| {
                s.get_array("tags")
                    .is_ok_and(|t| t.iter().any(|z| z.as_str() == Some(zone)))
            })
            .filter_map(|s| s.get_str("_id").ok().map(str::to_string))
            .collect()
    };
    let mut out = Vec::new();
    for r in catalog::zone_ranges(&cluster.config, ns).await? {
        let (Ok(min), Ok(max)) = (r.get_document("min"), r.get_document("max")) else {
            continue;
        };
        out.push(ZoneRange {
            min: key.bound_from_prefix(min)?,
            max: key.bound_from_prefix(max)?,
            shards: in_zone(r.get_str("tag").unwrap_or_default()),
        });
    }
    Ok(out)
}
