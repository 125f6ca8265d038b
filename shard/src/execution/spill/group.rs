//! An aggregation's `$group` over a stream: it holds its groups, not its input, within
//! MongoDB's 100 MB. Past that, with `allowDiskUse`, the groups so far go to disk as a run
//! of partial groups sorted on their key, and the output merges the runs, folding the
//! partials of each key together (`query::agg::GroupMerger`).

use std::collections::VecDeque;

use bson::{doc, Document};
use query::agg::{Emit, Group, GroupMerger, GroupTable, PARTIAL_KEY};
use query::expr::Variables;
use query::memory::{exceeded, BLOCKING_STAGE_BYTES};
use query::sort::SortSpec;
use storage::Engine;
use wire::MongoResult;

use super::{DiskUse, Run, Sorted};
use crate::control::deadline::Deadline;
use crate::execution::cursor::{CursorSource, Materialized};

/// Every group of what `source` has left (as `emit` says: documents, or partial states
/// for the router to merge): in memory when they fit, otherwise merged from runs on disk
/// as the cursor reads them.
pub fn group_all(
    source: &mut dyn CursorSource,
    engine: &dyn Engine,
    deadline: &Deadline,
    how: (&Group, &Variables, Emit),
    disk: &DiskUse,
) -> MongoResult<Box<dyn CursorSource>> {
    let limit = BLOCKING_STAGE_BYTES;
    group_within(source, (engine, deadline), how, disk, limit)
}

fn group_within(
    source: &mut dyn CursorSource,
    (engine, deadline): (&dyn Engine, &Deadline),
    (group, vars, emit): (&Group, &Variables, Emit),
    disk: &DiskUse,
    limit: usize,
) -> MongoResult<Box<dyn CursorSource>> {
    let order = partial_order();
    let mut table = GroupTable::new(group, vars);
    let mut runs = Vec::new();
    loop {
        let batch = source.next_batch(engine, 1024, deadline)?;
        let done = batch.is_empty() || source.exhausted();
        for d in &batch {
            table.add(d)?;
            if table.bytes() > limit {
                if !disk.allowed {
                    return Err(exceeded("$group", limit, false));
                }
                let partials = order.sort_stable(table.take_partials());
                runs.push(Run::write(&partials, disk)?);
            }
        }
        if done {
            break;
        }
    }
    if runs.is_empty() {
        let groups = match emit {
            Emit::Output => table.finish()?,
            Emit::Partial => table.take_partials(),
        };
        return Ok(Box::new(Materialized::new(VecDeque::from(groups))));
    }
    let partials = order.sort_stable(table.take_partials());
    runs.push(Run::write(&partials, disk)?);
    Ok(Box::new(MergedGroups {
        partials: Sorted::Merged(runs),
        order,
        merger: GroupMerger::new(group.clone(), vars.clone(), emit),
        done: false,
    }))
}

/// Partial groups sort on their canonical key: equal keys meet, and runs merge in the
/// order they were written, so each key's partials fold in arrival order.
fn partial_order() -> SortSpec {
    SortSpec::new(&doc! {PARTIAL_KEY: 1}).expect("a valid sort")
}

/// The output of a `$group` that spilled: one group at a time, folded from its runs.
struct MergedGroups {
    partials: Sorted,
    order: SortSpec,
    merger: GroupMerger,
    done: bool,
}

impl CursorSource for MergedGroups {
    fn next_batch(
        &mut self,
        _: &dyn Engine,
        max_docs: usize,
        deadline: &Deadline,
    ) -> MongoResult<Vec<Document>> {
        let mut out = Vec::new();
        while out.len() < max_docs && !self.done {
            deadline.check()?;
            let finished = match self.partials.next(Some(&self.order))? {
                Some(partial) => self.merger.push(partial)?,
                None => {
                    self.done = true;
                    self.merger.finish()?
                }
            };
            out.extend(finished);
        }
        Ok(out)
    }

    fn exhausted(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use bson::{doc, Bson};
    use query::agg::Pipeline;

    use super::*;

    fn group_of(spec: Document) -> Group {
        let pipeline = Pipeline::parse(&[doc! {"$group": spec}]).unwrap();
        match pipeline.split_blocking(Variables::default()) {
            Some((query::agg::Blocking::Group(g), _, _)) => g,
            _ => panic!("a $group"),
        }
    }

    fn run(
        group: &Group,
        docs: &[Document],
        disk: &DiskUse,
        limit: usize,
    ) -> MongoResult<Vec<Document>> {
        run_emitting(group, docs, disk, limit, Emit::Output)
    }

    fn run_emitting(
        group: &Group,
        docs: &[Document],
        disk: &DiskUse,
        limit: usize,
        emit: Emit,
    ) -> MongoResult<Vec<Document>> {
        let engine = storage::MemoryEngine::default();
        let deadline = Deadline::after_ms(0);
        let mut input = Materialized::new(docs.iter().cloned().collect());
        let vars = Variables::default();
        let how = (group, &vars, emit);
        let mut out = group_within(&mut input, (&engine, &deadline), how, disk, limit)?;
        let mut all = Vec::new();
        while !out.exhausted() {
            all.extend(out.next_batch(&engine, 7, &deadline)?);
        }
        all.sort_by(|a, b| {
            query::expr::compare_values(
                &a.get("_id").cloned().unwrap_or(Bson::Null),
                &b.get("_id").cloned().unwrap_or(Bson::Null),
            )
        });
        Ok(all)
    }

    fn every_accumulator() -> Group {
        group_of(doc! {
            "_id": {"$mod": ["$i", 37]},
            "n": {"$sum": 1},
            "total": {"$sum": "$i"},
            "avg": {"$avg": "$i"},
            "first": {"$first": "$i"},
            "last": {"$last": "$i"},
            "all": {"$push": "$i"},
            "set": {"$addToSet": {"$mod": ["$i", 5]}},
            "lo": {"$min": "$i"},
            "hi": {"$max": "$i"},
            "sd": {"$stdDevPop": "$i"},
            "top": {"$topN": {"n": 3, "sortBy": {"r": -1}, "output": "$i"}},
            "lastTwo": {"$lastN": {"n": 2, "input": "$i"}},
            "most": {"$maxN": {"n": 2, "input": "$r"}},
            "merged": {"$mergeObjects": {"last": "$i"}},
        })
    }

    fn input() -> Vec<Document> {
        (0..3000)
            .map(|i: i32| doc! {"i": i, "r": (i * 7919) % 1009})
            .collect()
    }

    /// Equal groups, but for the last bits of a standard deviation.
    fn assert_same_groups(expected: &[Document], got: &[Document]) {
        assert_eq!(expected.len(), got.len());
        for (a, b) in expected.iter().zip(got) {
            let (Some(Bson::Double(x)), Some(Bson::Double(y))) = (a.get("sd"), b.get("sd")) else {
                panic!("standard deviations");
            };
            assert!((x - y).abs() < 1e-9, "{x} vs {y}");
            let without_sd = |d: &Document| {
                let mut d = d.clone();
                d.remove("sd");
                d
            };
            assert_eq!(without_sd(a), without_sd(b));
        }
    }

    #[test]
    fn a_spilled_group_equals_the_group_in_memory() {
        let (group, docs) = (every_accumulator(), input());
        let in_memory = run(&group, &docs, &DiskUse::default(), BLOCKING_STAGE_BYTES).unwrap();
        assert_eq!(in_memory.len(), 37);
        // A few hundred bytes a run: dozens of runs, each key spread over many.
        let spilled = run(&group, &docs, &DiskUse::temp(), 4000).unwrap();
        assert_same_groups(&in_memory, &spilled);
    }

    #[test]
    fn partial_groups_from_shards_merge_into_the_whole_group() {
        let (group, docs) = (every_accumulator(), input());
        let whole = run(&group, &docs, &DiskUse::default(), BLOCKING_STAGE_BYTES).unwrap();
        // Two shards, one of which spills; the router folds their partials in.
        let (first, second) = docs.split_at(1200);
        let partial = |docs: &[Document], limit| {
            run_emitting(&group, docs, &DiskUse::temp(), limit, Emit::Partial).unwrap()
        };
        let vars = Variables::default();
        let mut router = GroupTable::new(&group, &vars);
        for p in partial(first, 4000)
            .into_iter()
            .chain(partial(second, BLOCKING_STAGE_BYTES))
        {
            router.absorb(p).unwrap();
        }
        let mut merged = router.finish().unwrap();
        merged.sort_by(|a, b| {
            query::expr::compare_values(a.get("_id").unwrap(), b.get("_id").unwrap())
        });
        assert_same_groups(&whole, &merged);
    }

    #[test]
    fn without_allow_disk_use_a_group_past_its_limit_fails_with_292() {
        let group = group_of(doc! {"_id": "$i", "n": {"$sum": 1}});
        let docs: Vec<Document> = (0..100).map(|i: i32| doc! {"i": i}).collect();
        let e = run(&group, &docs, &DiskUse::default(), 1000).unwrap_err();
        assert_eq!(
            e.code,
            wire::ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed as i32
        );
        assert!(run(&group, &docs, &DiskUse::temp(), 1000).is_ok());
    }

    #[test]
    fn a_group_counts_the_values_it_holds_not_the_values_it_saw() {
        let s = "x".repeat(1000);
        // Ten groups, each seeing a thousand documents of 1 KB.
        let docs: Vec<Document> = (0..10_000)
            .map(|i: i32| doc! {"g": i % 10, "s": s.clone()})
            .collect();
        let last = group_of(doc! {"_id": "$g", "v": {"$last": "$s"}});
        assert_eq!(
            run(&last, &docs, &DiskUse::default(), 20_000)
                .unwrap()
                .len(),
            10,
            "about 10 KB held"
        );
        let root = group_of(doc! {"_id": "$g", "v": {"$first": "$$ROOT"}, "w": {"$max": "$s"}});
        let e = run(&root, &docs, &DiskUse::default(), 15_000).unwrap_err();
        assert_eq!(
            e.code,
            wire::ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed as i32,
            "about 20 KB held"
        );
    }
}
