//! The members hold the same, intact data: once the workload has ended and the cluster is
//! healthy again, `dbHash` of every database agrees across every data member of each
//! replica set (after waiting, bounded, for them to catch up), and `validate` finds every
//! collection's indexes matching its documents on every data member.
//!
//! The runner calls each member itself ([`crate::direct`]): the routers' read
//! preferences pick a member by site, and a site may hold two. A target whose members
//! the runner cannot reach (compose: they are on Docker's networks, behind a cluster key)
//! is reported as skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bson::{doc, Document};
use serde::Serialize;

use crate::cluster::Cluster;
use crate::direct::DirectMember;

/// How long one command on one member may take.
const CALL_LIMIT: Duration = Duration::from_secs(30);

#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// Why the check did not run, if it did not.
    pub skipped: Option<String>,
    /// The data members compared (arbiters hold no data).
    pub members: Vec<String>,
    /// Seconds until every member's hashes agreed (`None`: not within the bound).
    pub agreed_after_secs: Option<f64>,
    pub bound_secs: f64,
    /// The last `md5` of each database on each member.
    pub hashes: BTreeMap<String, BTreeMap<String, String>>,
    /// Collections whose hash differs between members: `db.coll` and each member's hash.
    pub differing: BTreeMap<String, BTreeMap<String, String>>,
    /// Collections validated, summed over the members.
    pub validated: usize,
    /// Each collection's `keysPerIndex` as the first member's `validate` counted them.
    pub keys_per_index: BTreeMap<String, Document>,
    /// `validate` answers that were not valid, with the member that gave them.
    pub invalid: Vec<Document>,
    /// Commands that failed (the last failure of each kind).
    pub errors: Vec<String>,
}

impl Report {
    /// One line for the run's output.
    pub fn summary(&self) -> String {
        if let Some(why) = &self.skipped {
            return format!("members agree: skipped ({why})");
        }
        let agreed = match self.agreed_after_secs {
            Some(s) => format!(
                "dbHash equal on {} data members after {s:.1}s",
                self.members.len()
            ),
            None => format!("dbHash NOT equal within {:.0}s", self.bound_secs),
        };
        format!(
            "members agree: {agreed} ({} databases, {} collections differing); validate: {} valid, {} invalid; {} errors",
            self.hashes.len(),
            self.differing.len(),
            self.validated,
            self.invalid.len(),
            self.errors.len()
        )
    }

    pub fn ok(&self) -> bool {
        self.skipped.is_some()
            || (self.agreed_after_secs.is_some()
                && self.differing.is_empty()
                && self.invalid.is_empty()
                && self.errors.is_empty())
    }
}

/// A data member and its replica set: members are compared with those of their set.
struct Member {
    set: String,
    direct: DirectMember,
}

impl Member {
    fn host(&self) -> &str {
        &self.direct.host
    }

    async fn run(&self, db: &str, cmd: Document) -> anyhow::Result<Document> {
        self.direct.run(db, cmd, CALL_LIMIT).await
    }
}

/// Compares every data member's `dbHash` until they agree (within `bound`), then
/// validates every collection on every data member.
pub async fn check<C: Cluster>(cluster: &C, bound: Duration) -> Report {
    let mut r = Report {
        bound_secs: bound.as_secs_f64(),
        ..Default::default()
    };
    let members = match data_members(cluster).await {
        Ok(Some(m)) => m,
        Ok(None) => {
            r.skipped = Some(format!(
                "the runner cannot reach the {} target's members directly",
                cluster.target()
            ));
            return r;
        }
        Err(e) => {
            r.errors.push(format!("{e:#}"));
            return r;
        }
    };
    r.members = members.iter().map(|m| m.host().to_string()).collect();
    let Some(latest) = wait_agreed(&members, bound, &mut r).await else {
        return r;
    };
    r.hashes = md5s(&latest);
    r.differing = differing(&latest);
    validate_all(&members, &latest, &mut r).await;
    r
}

/// The members that hold data, each with a direct handle; `None` when the target's
/// members are not reachable from here.
async fn data_members<C: Cluster>(cluster: &C) -> anyhow::Result<Option<Vec<Member>>> {
    let mut members = Vec::new();
    for i in 0..cluster.member_count() {
        let Some(member) = DirectMember::of(cluster, i)? else {
            return Ok(None);
        };
        let hello = member.hello(CALL_LIMIT).await?;
        if !hello.get_bool("arbiterOnly").unwrap_or(false) {
            members.push(Member {
                set: cluster.member_set(i).to_string(),
                direct: member,
            });
        }
    }
    Ok(Some(members))
}

/// Each member's `dbHash` of each database: (replica set, database) → member host →
/// reply.
type Hashes = BTreeMap<(String, String), BTreeMap<String, Document>>;

/// Hashes every database on every member until all members' `md5`s agree or `bound`
/// passes; the last hashes taken (`None` if none could be).
async fn wait_agreed(members: &[Member], bound: Duration, r: &mut Report) -> Option<Hashes> {
    let started = Instant::now();
    let mut latest = None;
    loop {
        match hash_all(members).await {
            Ok(h) => {
                let agreed = h.values().all(|by_member| {
                    let md5s: BTreeSet<_> =
                        by_member.values().map(|d| d.get_str("md5").ok()).collect();
                    md5s.len() == 1
                });
                latest = Some(h);
                if agreed {
                    r.agreed_after_secs = Some(started.elapsed().as_secs_f64());
                    r.errors.clear();
                    return latest;
                }
            }
            Err(e) => r.errors = vec![format!("dbHash: {e:#}")],
        }
        if started.elapsed() >= bound {
            return latest;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `dbHash` of every database any member of a set lists, on every member of that set.
async fn hash_all(members: &[Member]) -> anyhow::Result<Hashes> {
    let mut dbs = BTreeSet::new();
    for m in members {
        let listed = m
            .run("admin", doc! {"listDatabases": 1, "nameOnly": true})
            .await?;
        for d in listed.get_array("databases")? {
            if let Some(name) = d.as_document().and_then(|d| d.get_str("name").ok()) {
                dbs.insert((m.set.clone(), name.to_string()));
            }
        }
    }
    let mut hashes = Hashes::new();
    for (set, db) in dbs {
        let mut by_member = BTreeMap::new();
        for m in members.iter().filter(|m| m.set == set) {
            by_member.insert(m.host().to_string(), m.run(&db, doc! {"dbHash": 1}).await?);
        }
        hashes.insert((set, db), by_member);
    }
    Ok(hashes)
}

/// How a report names a database of a set.
fn named((set, db): &(String, String)) -> String {
    format!("{set}/{db}")
}

/// Database → member → `md5`.
fn md5s(hashes: &Hashes) -> BTreeMap<String, BTreeMap<String, String>> {
    hashes
        .iter()
        .map(|(key, by_member)| {
            let md5 = by_member
                .iter()
                .map(|(m, d)| (m.clone(), d.get_str("md5").unwrap_or("?").to_string()))
                .collect();
            (named(key), md5)
        })
        .collect()
}

/// The collections whose hash is not the same on every member (absent counts as a
/// hash of its own): `db.coll` → member → hash.
fn differing(hashes: &Hashes) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (key, by_member) in hashes {
        for coll in collections(by_member) {
            let each: BTreeMap<String, String> = by_member
                .iter()
                .map(|(m, d)| (m.clone(), collection_hash(d, &coll)))
                .collect();
            if each.values().collect::<BTreeSet<_>>().len() > 1 {
                out.insert(format!("{}.{coll}", named(key)), each);
            }
        }
    }
    out
}

/// Every collection any member's `dbHash` names.
fn collections(by_member: &BTreeMap<String, Document>) -> BTreeSet<String> {
    by_member
        .values()
        .filter_map(|d| d.get_document("collections").ok())
        .flat_map(|c| c.keys().cloned())
        .collect()
}

fn collection_hash(reply: &Document, coll: &str) -> String {
    reply
        .get_document("collections")
        .and_then(|c| c.get_str(coll))
        .unwrap_or("absent")
        .to_string()
}

/// `validate` of every collection (as the hashes name them) on every member.
async fn validate_all(members: &[Member], hashes: &Hashes, r: &mut Report) {
    for ((set, db), by_member) in hashes {
        for coll in collections(by_member) {
            for m in members.iter().filter(|m| &m.set == set) {
                match m.run(db, doc! {"validate": &coll, "full": true}).await {
                    Ok(v) if v.get_bool("valid") == Ok(true) => {
                        r.validated += 1;
                        if let Ok(keys) = v.get_document("keysPerIndex") {
                            let ns = format!("{set}/{db}.{coll}");
                            r.keys_per_index.entry(ns).or_insert_with(|| keys.clone());
                        }
                    }
                    Ok(v) => r.invalid.push(doc! {"member": m.host(), "result": v}),
                    Err(e) => r.errors.push(format!("validate: {e:#}")),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashed(collections: Document) -> Document {
        doc! {"collections": collections, "md5": "whole"}
    }

    #[test]
    fn a_collection_hashed_otherwise_or_absent_on_a_member_is_named() {
        let by_member = BTreeMap::from([
            (
                "m1".to_string(),
                hashed(doc! {"a": "1", "b": "2", "c": "3"}),
            ),
            ("m2".to_string(), hashed(doc! {"a": "1", "b": "9"})),
        ]);
        let hashes = Hashes::from([(("shard0".to_string(), "db".to_string()), by_member)]);
        let found = differing(&hashes);
        assert_eq!(
            found.keys().collect::<Vec<_>>(),
            ["shard0/db.b", "shard0/db.c"]
        );
        assert_eq!(found["shard0/db.b"]["m2"], "9");
        assert_eq!(found["shard0/db.c"]["m2"], "absent");
        let report = Report {
            agreed_after_secs: Some(0.0),
            differing: found,
            ..Default::default()
        };
        assert!(!report.ok());
        assert!(Report {
            agreed_after_secs: Some(0.0),
            ..Default::default()
        }
        .ok());
    }
}
