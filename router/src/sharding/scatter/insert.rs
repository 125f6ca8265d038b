//! `insert` into a sharded collection: each document goes to the shard owning its key.
//! Ordered inserts go in runs of consecutive documents bound for one shard and stop at
//! the first error; unordered ones go to all shards at once. `writeErrors` carry the
//! indexes of the client's batch.

use bson::oid::ObjectId;
use bson::{doc, Document};
use wire::MongoResult;

use super::write_reply::{retryable_ids, statements, Merged};
use super::Ctx;

pub async fn run(ctx: &Ctx<'_>, mut cmd: Document) -> MongoResult<Document> {
    let mut docs = statements(&mut cmd, "documents")?;
    let ordered = cmd.get_bool("ordered").unwrap_or(true);
    // The key may include `_id`, so it must exist before targeting (a shard would give a
    // missing one its own, after the document was placed).
    for d in &mut docs {
        if !d.contains_key("_id") {
            let mut with_id = doc! {"_id": ObjectId::new()};
            with_id.extend(std::mem::take(d));
            *d = with_id;
        }
    }
    let targets: Vec<MongoResult<String>> = docs
        .iter()
        .map(|d| ctx.table.shard_for_doc(d).map(str::to_string))
        .collect();
    let batch = |indexes: &[usize]| {
        let mut sub = cmd.clone();
        let docs: Vec<Document> = indexes.iter().map(|&i| docs[i].clone()).collect();
        sub.insert("documents", docs);
        retryable_ids(&mut sub, indexes);
        sub
    };
    let mut merged = Merged::default();
    if ordered {
        let mut i = 0;
        while i < docs.len() {
            let shard = match &targets[i] {
                Ok(s) => s.clone(),
                Err(e) => {
                    merged.write_errors.push(e.to_write_error(i));
                    break;
                }
            };
            let run: Vec<usize> = (i..docs.len())
                .take_while(|&j| targets[j].as_ref().ok() == Some(&shard))
                .collect();
            let answers = ctx.each_own(vec![(shard, batch(&run))]).await?;
            merged.add(&answers[0].reply, &run);
            if !merged.write_errors.is_empty() {
                break;
            }
            i += run.len();
        }
        return Ok(merged.reply());
    }
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        match t {
            Ok(s) => match groups.iter_mut().find(|(name, _)| name == s) {
                Some((_, g)) => g.push(i),
                None => groups.push((s.clone(), vec![i])),
            },
            Err(e) => merged.write_errors.push(e.to_write_error(i)),
        }
    }
    let calls = groups.iter().map(|(s, g)| (s.clone(), batch(g))).collect();
    let answers = ctx.each_own(calls).await?;
    for (a, (_, g)) in answers.iter().zip(&groups) {
        merged.add(&a.reply, g);
    }
    Ok(merged.reply())
}
