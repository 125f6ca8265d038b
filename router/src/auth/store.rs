//! Where users and roles live. The router sees only the `UserStore` trait; today the
//! documents sit on the shard in `admin.system.users` / `admin.system.roles` (MongoDB's
//! own layout), and when the config server exists a second implementation will keep them
//! there, without any caller changing.

use bson::{doc, Bson, Document};
use wire::{MongoError, MongoResult};

use crate::shard_client::{Forward, ShardHandle};

/// Which kind of auth document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    User,
    Role,
}

impl Kind {
    pub fn collection(self) -> &'static str {
        match self {
            Kind::User => "system.users",
            Kind::Role => "system.roles",
        }
    }

    /// The field holding the name (`user` or `role`).
    pub fn name_field(self) -> &'static str {
        match self {
            Kind::User => "user",
            Kind::Role => "role",
        }
    }
}

/// The `_id` MongoDB gives a user or role document: `"<db>.<name>"`.
pub fn doc_id(db: &str, name: &str) -> String {
    format!("{db}.{name}")
}

/// Storage for user and role documents (each has `_id`, `db` and `user` or `role`).
#[async_trait::async_trait]
pub trait UserStore: Send + Sync {
    async fn get(&self, kind: Kind, db: &str, name: &str) -> MongoResult<Option<Document>>;
    /// All documents of `kind`, or only those of database `db`.
    async fn list(&self, kind: Kind, db: Option<&str>) -> MongoResult<Vec<Document>>;
    /// Fails with `DuplicateKey` when the document exists.
    async fn insert(&self, kind: Kind, doc: Document) -> MongoResult<()>;
    /// Replaces the document with the same `_id`; false when there is none.
    async fn replace(&self, kind: Kind, doc: Document) -> MongoResult<bool>;
    /// Deletes one document, or every document of `db` when `name` is `None`.
    async fn delete(&self, kind: Kind, db: &str, name: Option<&str>) -> MongoResult<u64>;
    async fn any(&self, kind: Kind) -> MongoResult<bool>;
    /// The cluster-wide count of user and role changes, which every router watches
    /// (`revocation`).
    async fn generation(&self) -> MongoResult<i64>;
    /// Counts one change, once it is stored.
    async fn bump_generation(&self) -> MongoResult<()>;
}

/// Users and roles kept on the shard, reached with ordinary CRUD commands over the
/// router's existing gRPC channel.
pub struct ShardUserStore {
    shard: ShardHandle,
}

/// What the shard sees as the client of these calls (logs, currentOp).
const INTERNAL_CLIENT: &str = "router-auth";
const AUTH_DB: &str = "admin";

impl ShardUserStore {
    pub fn new(shard: ShardHandle) -> ShardUserStore {
        ShardUserStore { shard }
    }

    async fn call(&self, cmd: Document) -> MongoResult<Document> {
        let (reply, _, _) = self
            .shard
            .run(AUTH_DB, &cmd, &Forward::default(), INTERNAL_CLIENT)
            .await?;
        crate::shard_client::reply_ok(reply)
    }

    async fn find(&self, coll: &str, filter: Document, limit: i64) -> MongoResult<Vec<Document>> {
        let reply = self
            .call(doc! {"find": coll, "filter": filter, "limit": limit, "batchSize": limit, "singleBatch": true})
            .await?;
        let batch = reply
            .get_document("cursor")
            .and_then(|c| c.get_array("firstBatch"))
            .map_err(|_| MongoError::internal("user store: malformed find reply"))?;
        Ok(batch
            .iter()
            .filter_map(|d| d.as_document().cloned())
            .collect())
    }
}

/// Where the change count lives: MongoDB keeps its auth schema version in this
/// collection too.
const GENERATION_COLLECTION: &str = "system.version";
const GENERATION_ID: &str = "userCacheGeneration";

/// Most users or roles a listing returns (one batch; auth catalogs are small).
const MAX_LISTED: i64 = 100_000;

#[async_trait::async_trait]
impl UserStore for ShardUserStore {
    async fn get(&self, kind: Kind, db: &str, name: &str) -> MongoResult<Option<Document>> {
        let mut found = self
            .find(kind.collection(), doc! {"_id": doc_id(db, name)}, 1)
            .await?;
        Ok(found.pop())
    }

    async fn list(&self, kind: Kind, db: Option<&str>) -> MongoResult<Vec<Document>> {
        let filter = db.map(|db| doc! {"db": db}).unwrap_or_default();
        self.find(kind.collection(), filter, MAX_LISTED).await
    }

    async fn insert(&self, kind: Kind, doc: Document) -> MongoResult<()> {
        self.call(doc! {"insert": kind.collection(), "documents": [doc]})
            .await?;
        Ok(())
    }

    async fn replace(&self, kind: Kind, doc: Document) -> MongoResult<bool> {
        let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
        let reply = self
            .call(doc! {"update": kind.collection(), "updates": [{"q": {"_id": id}, "u": doc}]})
            .await?;
        Ok(reply.get_i32("n").unwrap_or(0) > 0)
    }

    async fn delete(&self, kind: Kind, db: &str, name: Option<&str>) -> MongoResult<u64> {
        let q = match name {
            Some(n) => doc! {"_id": doc_id(db, n)},
            None => doc! {"db": db},
        };
        let limit = i32::from(name.is_some());
        let reply = self
            .call(doc! {"delete": kind.collection(), "deletes": [{"q": q, "limit": limit}]})
            .await?;
        Ok(reply.get_i32("n").unwrap_or(0) as u64)
    }

    async fn any(&self, kind: Kind) -> MongoResult<bool> {
        Ok(!self
            .find(kind.collection(), Document::new(), 1)
            .await?
            .is_empty())
    }

    async fn generation(&self) -> MongoResult<i64> {
        let found = self
            .find(GENERATION_COLLECTION, doc! {"_id": GENERATION_ID}, 1)
            .await?;
        Ok(found.first().and_then(|d| d.get_i64("n").ok()).unwrap_or(0))
    }

    async fn bump_generation(&self) -> MongoResult<()> {
        self.call(doc! {"update": GENERATION_COLLECTION, "updates": [
            {"q": {"_id": GENERATION_ID}, "u": {"$inc": {"n": 1_i64}}, "upsert": true},
        ]})
        .await?;
        Ok(())
    }
}
