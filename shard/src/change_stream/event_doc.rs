//! Change event documents in MongoDB's shape, and which events a stream's scope sees.

use bson::{doc, Bson, Document};
use query::change_stream::{BeforeChange, EventPos, FullDocument, Scope, Spec, Token};
use storage::Engine;
use wire::{ErrorCode, MongoError, MongoResult};

use super::entry_events::RawEvent;
use crate::catalog::keys::id_key;
use crate::repl::events::Kind;

/// Databases whose changes no stream shows.
const INTERNAL_DBS: [&str; 3] = ["admin", "config", "local"];

/// Whether a stream over `scope` shows `ev`.
pub fn in_scope(scope: &Scope, spec: &Spec, ev: &RawEvent) -> bool {
    if ev.kind.expanded_only() && !spec.expanded {
        return false;
    }
    let (db, coll) = split_ns(&ev.ns);
    if coll.is_some_and(|c| c.starts_with("system.")) {
        return false;
    }
    match scope {
        Scope::Collection { db: d, coll: c } => {
            db == d && coll == Some(c.as_str()) && ev.kind != Kind::DropDatabase
        }
        Scope::Database(d) => db == d,
        Scope::Cluster => !INTERNAL_DBS.contains(&db),
    }
}

/// Whether `ev`, which the stream shows, ends it with an `invalidate`.
pub fn invalidates(scope: &Scope, ev: &RawEvent) -> bool {
    match scope {
        Scope::Collection { .. } => matches!(ev.kind, Kind::Drop | Kind::Rename),
        Scope::Database(_) => ev.kind == Kind::DropDatabase,
        Scope::Cluster => false,
    }
}

pub fn token(time: u64, ev: &RawEvent, invalidate: bool) -> Token {
    Token {
        time,
        event: Some(EventPos {
            index: ev.pos,
            invalidate,
            key: if ev.key.is_empty() {
                Vec::new()
            } else {
                bson::to_vec(&ev.key).unwrap_or_default()
            },
        }),
    }
}

/// The event document for `ev` of the entry at `time`.
pub fn build(ev: &RawEvent, time: u64, spec: &Spec, engine: &dyn Engine) -> MongoResult<Document> {
    let mut d = header(&token(time, ev, false), ev.kind.name(), time);
    if let (true, Some(uuid)) = (spec.expanded, ev.uuid) {
        d.insert("collectionUUID", uuid);
    }
    match ev.kind {
        Kind::Insert | Kind::Replace => {
            d.insert("fullDocument", opt(ev.after.clone()));
        }
        Kind::Update => {
            if let Some(full) = full_document(ev, spec, engine)? {
                d.insert("fullDocument", full);
            }
        }
        _ => {}
    }
    d.insert("ns", ns_doc(&ev.ns));
    if !ev.key.is_empty() {
        d.insert("documentKey", ev.key.clone());
    }
    if ev.kind == Kind::Update {
        let mut desc = ev.detail.clone().unwrap_or_default();
        if !spec.expanded {
            desc.remove("disambiguatedPaths");
        }
        d.insert("updateDescription", desc);
    }
    if let Some(detail) = &ev.detail {
        add_ddl_detail(&mut d, ev.kind, detail, spec.expanded);
    }
    if matches!(ev.kind, Kind::Update | Kind::Replace | Kind::Delete) {
        match (spec.before_change, &ev.before) {
            (BeforeChange::Off, _) => {}
            (_, Some(before)) => {
                d.insert("fullDocumentBeforeChange", before.clone());
            }
            (BeforeChange::WhenAvailable, None) => {
                d.insert("fullDocumentBeforeChange", Bson::Null);
            }
            (BeforeChange::Required, None) => return Err(no_image("pre-image")),
        }
    }
    Ok(d)
}

/// The `invalidate` that follows `ev`.
pub fn invalidate(ev: &RawEvent, time: u64) -> Document {
    header(&token(time, ev, true), "invalidate", time)
}

fn header(token: &Token, kind: &str, time: u64) -> Document {
    doc! {
        "_id": token.to_document(),
        "operationType": kind,
        "clusterTime": proto::cluster_clock::to_bson(time),
        "wallTime": bson::DateTime::from_millis(i64::from(proto::cluster_clock::seconds(time)) * 1000),
    }
}

/// An update's `fullDocument`: the document as it is now (`updateLookup`), or the
/// post-image, shown when the collection records images (`changeStreamPreAndPostImages`).
fn full_document(ev: &RawEvent, spec: &Spec, engine: &dyn Engine) -> MongoResult<Option<Bson>> {
    let post = ev.before.as_ref().and(ev.after.clone());
    Ok(match spec.full_document {
        FullDocument::Default => None,
        FullDocument::UpdateLookup => {
            let current = match ev.key.get("_id") {
                Some(id) => engine.get(&ev.table, &id_key(id)).ok().flatten(),
                None => None,
            };
            let doc = current
                .map(|v| crate::execution::write_path::decode_document(&v))
                .transpose()?;
            Some(opt(doc))
        }
        FullDocument::WhenAvailable => Some(opt(post)),
        FullDocument::Required => Some(Bson::Document(post.ok_or_else(|| no_image("post-image"))?)),
    })
}

fn no_image(which: &str) -> MongoError {
    MongoError::new(
        ErrorCode::NoMatchingDocument,
        format!(
            "Change stream was configured to require a {which} for all update, delete and \
             replace events, but the {which} was not found: the collection did not record \
             images (changeStreamPreAndPostImages) when the change was made"
        ),
    )
}

fn add_ddl_detail(d: &mut Document, kind: Kind, detail: &Document, expanded: bool) {
    match kind {
        Kind::Rename => {
            if let Some(Bson::String(to)) = detail.get("to") {
                d.insert("to", ns_doc(to));
            }
            if expanded {
                let mut desc = detail.clone();
                if let Some(Bson::String(to)) = detail.get("to") {
                    desc.insert("to", ns_doc(to));
                }
                d.insert("operationDescription", desc);
            }
        }
        Kind::Create
        | Kind::CreateIndexes
        | Kind::DropIndexes
        | Kind::Modify
        | Kind::ShardCollection => {
            d.insert("operationDescription", detail.clone());
        }
        _ => {}
    }
}

fn split_ns(ns: &str) -> (&str, Option<&str>) {
    match ns.split_once('.') {
        Some((db, coll)) => (db, Some(coll)),
        None => (ns, None),
    }
}

fn ns_doc(ns: &str) -> Document {
    match split_ns(ns) {
        (db, Some(coll)) => doc! {"db": db, "coll": coll},
        (db, None) => doc! {"db": db},
    }
}

fn opt(d: Option<Document>) -> Bson {
    d.map(Bson::Document).unwrap_or(Bson::Null)
}
