//! `$sample` over a stream: a uniform sample of n documents by reservoir sampling
//! (Vitter's Algorithm R), holding n documents however large its input, within the
//! stage's 100 MB. It does not spill: past the limit it answers as a blocking stage does.

use bson::Document;
use query::memory::{approx_size, exceeded, BLOCKING_STAGE_BYTES};
use rand::seq::SliceRandom;
use rand::Rng;
use storage::Engine;
use wire::MongoResult;

use crate::control::deadline::Deadline;
use crate::execution::cursor::{CursorSource, Materialized};

/// `n` documents drawn uniformly from what `source` has left (all of them, when fewer),
/// in random order.
pub fn sample_all(
    source: &mut dyn CursorSource,
    (engine, deadline): (&dyn Engine, &Deadline),
    n: usize,
    allow_disk_use: bool,
) -> MongoResult<Box<dyn CursorSource>> {
    sample_within(
        source,
        (engine, deadline),
        n,
        allow_disk_use,
        BLOCKING_STAGE_BYTES,
    )
}

fn sample_within(
    source: &mut dyn CursorSource,
    (engine, deadline): (&dyn Engine, &Deadline),
    n: usize,
    allow_disk_use: bool,
    limit: usize,
) -> MongoResult<Box<dyn CursorSource>> {
    let mut rng = rand::thread_rng();
    let mut kept: Vec<Document> = Vec::new();
    let (mut seen, mut bytes) = (0u64, 0usize);
    loop {
        let batch = source.next_batch(engine, 1024, deadline)?;
        let done = batch.is_empty() || source.exhausted();
        for d in batch {
            seen += 1;
            if kept.len() < n {
                bytes += approx_size(&d);
                kept.push(d);
            } else if let Ok(j) = usize::try_from(rng.gen_range(0..seen)) {
                // The seen-th document replaces a kept one with probability n / seen.
                if j < n {
                    bytes = bytes - approx_size(&kept[j]) + approx_size(&d);
                    kept[j] = d;
                }
            }
            if bytes > limit {
                return Err(exceeded("$sample", limit, allow_disk_use));
            }
        }
        if done {
            break;
        }
    }
    kept.shuffle(&mut rng);
    Ok(Box::new(Materialized::new(kept.into())))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use bson::doc;

    use super::*;

    fn sample(total: i32, n: usize, limit: usize) -> MongoResult<Vec<Document>> {
        let engine = storage::MemoryEngine::default();
        let deadline = Deadline::after_ms(0);
        let docs = (0..total).map(|i| doc! {"_id": i}).collect();
        let mut input = Materialized::new(docs);
        let mut out = sample_within(&mut input, (&engine, &deadline), n, false, limit)?;
        let mut all = Vec::new();
        while !out.exhausted() {
            all.extend(out.next_batch(&engine, 100, &deadline)?);
        }
        Ok(all)
    }

    #[test]
    fn a_sample_holds_n_distinct_documents_of_its_input() {
        let got = sample(10_000, 25, 1 << 20).unwrap();
        let ids: HashSet<i32> = got.iter().map(|d| d.get_i32("_id").unwrap()).collect();
        assert_eq!(ids.len(), 25);
        assert!(ids.iter().all(|i| (0..10_000).contains(i)));
        assert_eq!(
            sample(7, 25, 1 << 20).unwrap().len(),
            7,
            "fewer than n: all"
        );
        // Every document can be drawn: over many samples of one, the last ones too.
        let late = (0..400)
            .filter(|_| sample(10, 1, 1 << 20).unwrap()[0].get_i32("_id") == Ok(9))
            .count();
        assert!(late > 0, "the last document was never drawn");
        let e = sample(10_000, 5_000, 1000).unwrap_err();
        assert_eq!(
            e.code,
            wire::ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed as i32
        );
    }
}
