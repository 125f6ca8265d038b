//! `listPreparedTransactions` (internal): the transactions prepared on this member, for
//! the config server's recovery of those whose router stopped between the two phases
//! (`configsvr::prepared_recovery`).

use bson::{doc, Bson, Document};
use wire::MongoResult;

use super::prepare_transaction::replica_of;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, _cmd: &Document) -> MongoResult<Document> {
    let replica = replica_of(ctx)?;
    let listed: Vec<Bson> = replica
        .prepared
        .list()
        .into_iter()
        .map(|(session, held)| {
            let session = bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: session,
            };
            Bson::Document(doc! {
                "session": session,
                "txnNumber": held.number,
                "prepareTimestamp": proto::cluster_clock::to_bson(held.at),
                "coordinator": held.coordinator,
                "preparedForMillis": held.since.elapsed().as_millis() as i64,
            })
        })
        .collect();
    Ok(doc! {"transactions": listed})
}
