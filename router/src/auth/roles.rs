//! Privileges (a resource and a set of actions) and MongoDB's built-in roles, with the
//! action sets MongoDB documents for each ("Built-In Roles" in the manual; mongo
//! `src/mongo/db/auth/builtin_roles.yml`). Only the actions Bulwark's commands check,
//! plus the ones the built-in roles list so `rolesInfo` shows them faithfully, exist.

use bson::{doc, Bson, Document};
use wire::{MongoError, MongoResult};

macro_rules! actions {
    ($($variant:ident = $name:literal,)*) => {
        /// One MongoDB privilege action.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        pub enum Action { $($variant,)* }
        const ACTION_NAMES: &[&str] = &[$($name,)*];
    };
}

actions! {
    Find = "find", Insert = "insert", Update = "update", Remove = "remove",
    CreateCollection = "createCollection", DropCollection = "dropCollection",
    CreateIndex = "createIndex", DropIndex = "dropIndex", ListCollections = "listCollections",
    ListIndexes = "listIndexes", CollStats = "collStats", DbStats = "dbStats", DbHash = "dbHash",
    KillCursors = "killCursors", ChangeStream = "changeStream", ConvertToCapped = "convertToCapped",
    RenameCollectionSameDb = "renameCollectionSameDB", DropDatabase = "dropDatabase",
    CollMod = "collMod", Compact = "compact", ReIndex = "reIndex", Validate = "validate",
    EnableProfiler = "enableProfiler", BypassDocumentValidation = "bypassDocumentValidation",
    PlanCacheRead = "planCacheRead", PlanCacheWrite = "planCacheWrite",
    PlanCacheIndexFilter = "planCacheIndexFilter", StorageDetails = "storageDetails",
    ListSearchIndexes = "listSearchIndexes",
    ChangeCustomData = "changeCustomData", ChangePassword = "changePassword",
    CreateRole = "createRole", CreateUser = "createUser", DropRole = "dropRole",
    DropUser = "dropUser", GrantRole = "grantRole", RevokeRole = "revokeRole",
    SetAuthenticationRestriction = "setAuthenticationRestriction", ViewRole = "viewRole",
    ViewUser = "viewUser",
    ListDatabases = "listDatabases", ServerStatus = "serverStatus", GetParameter = "getParameter",
    SetParameter = "setParameter", GetCmdLineOpts = "getCmdLineOpts", HostInfo = "hostInfo",
    Inprog = "inprog", Killop = "killop", KillAnySession = "killAnySession",
    KillAnyCursor = "killAnyCursor", ListSessions = "listSessions", Top = "top",
    ConnPoolStats = "connPoolStats", Netstat = "netstat", GetLog = "getLog",
    ReplSetGetStatus = "replSetGetStatus", ReplSetGetConfig = "replSetGetConfig",
    ReplSetConfigure = "replSetConfigure", ReplSetStateChange = "replSetStateChange",
    ListShards = "listShards", GetShardMap = "getShardMap", ShardingState = "shardingState",
    AddShard = "addShard", RemoveShard = "removeShard", EnableSharding = "enableSharding",
    SplitChunk = "splitChunk", MoveChunk = "moveChunk", FlushRouterConfig = "flushRouterConfig",
    Fsync = "fsync", Unlock = "unlock", Shutdown = "shutdown", LogRotate = "logRotate",
    UseUuid = "useUUID", IndexStats = "indexStats", GetShardVersion = "getShardVersion",
    GetDefaultRwConcern = "getDefaultRWConcern", SetDefaultRwConcern = "setDefaultRWConcern",
    CheckFreeMonitoringStatus = "checkFreeMonitoringStatus", CleanupOrphaned = "cleanupOrphaned",
    DropConnections = "dropConnections", Resync = "resync", Touch = "touch",
    ApplicationMessage = "applicationMessage", AppendOplogNote = "appendOplogNote",
    InvalidateUserCache = "invalidateUserCache", SetFeatureCompatibilityVersion = "setFeatureCompatibilityVersion",
    AuthSchemaUpgrade = "authSchemaUpgrade",
}

impl Action {
    pub fn name(self) -> &'static str {
        ACTION_NAMES[self as usize]
    }

    fn from_name(name: &str) -> Option<ActionSet> {
        ACTION_NAMES
            .iter()
            .position(|n| *n == name)
            .map(|i| ActionSet(1 << i))
    }
}

/// A set of actions as a bit set (fewer than 128 actions exist here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ActionSet(u128);

impl ActionSet {
    pub const fn of(actions: &[Action]) -> ActionSet {
        let mut bits = 0u128;
        let mut i = 0;
        while i < actions.len() {
            bits |= 1 << actions[i] as u8;
            i += 1;
        }
        ActionSet(bits)
    }

    pub const fn union(self, other: ActionSet) -> ActionSet {
        ActionSet(self.0 | other.0)
    }

    pub const fn without(self, other: ActionSet) -> ActionSet {
        ActionSet(self.0 & !other.0)
    }

    pub fn contains(self, other: ActionSet) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn names(self) -> Vec<Bson> {
        ACTION_NAMES
            .iter()
            .enumerate()
            .filter(|(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, n)| Bson::String((*n).to_string()))
            .collect()
    }
}

/// What a privilege applies to (MongoDB's resource patterns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// `{cluster: true}`
    Cluster,
    /// `{anyResource: true}`: every collection, system ones included, and the cluster.
    AnyResource,
    /// `{db: "", collection: ""}`: every non-system collection of every database.
    AnyNormal,
    /// `{db: D, collection: ""}`: database D and its non-system collections.
    Db(String),
    /// `{db: "", collection: C}`: collection C in any database.
    CollectionInAnyDb(String),
    /// `{db: D, collection: C}`
    Collection(String, String),
}

/// What a command acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    Cluster,
    Db(&'a str),
    Collection(&'a str, &'a str),
}

impl Resource {
    fn matches(&self, target: Target) -> bool {
        let system = |c: &str| c.starts_with("system.");
        // MongoDB's "any normal" resource leaves out `config` (the sharding catalog) and
        // `local`: the *AnyDatabase roles do not reach them.
        let normal_db = |d: &str| d != "config" && d != "local";
        match (self, target) {
            (Resource::AnyResource, _) => true,
            (Resource::Cluster, Target::Cluster) => true,
            (Resource::AnyNormal, Target::Db(d)) => normal_db(d),
            (Resource::AnyNormal, Target::Collection(d, c)) => normal_db(d) && !system(c),
            (Resource::Db(d), Target::Db(t)) => d == t,
            (Resource::Db(d), Target::Collection(t, c)) => d == t && !system(c),
            (Resource::CollectionInAnyDb(c), Target::Collection(_, t)) => c == t,
            (Resource::Collection(d, c), Target::Collection(td, tc)) => d == td && c == tc,
            _ => false,
        }
    }

    pub fn to_document(&self) -> Document {
        match self {
            Resource::Cluster => doc! {"cluster": true},
            Resource::AnyResource => doc! {"anyResource": true},
            Resource::AnyNormal => doc! {"db": "", "collection": ""},
            Resource::Db(d) => doc! {"db": d, "collection": ""},
            Resource::CollectionInAnyDb(c) => doc! {"db": "", "collection": c},
            Resource::Collection(d, c) => doc! {"db": d, "collection": c},
        }
    }

    pub fn from_document(d: &Document) -> MongoResult<Resource> {
        if d.get_bool("cluster").unwrap_or(false) {
            return Ok(Resource::Cluster);
        }
        if d.get_bool("anyResource").unwrap_or(false) {
            return Ok(Resource::AnyResource);
        }
        let (Ok(db), Ok(coll)) = (d.get_str("db"), d.get_str("collection")) else {
            return Err(MongoError::failed_to_parse(format!(
                "resource must have string 'db' and 'collection' fields, or cluster: true: {d}"
            )));
        };
        Ok(match (db, coll) {
            ("", "") => Resource::AnyNormal,
            (db, "") => Resource::Db(db.into()),
            ("", c) => Resource::CollectionInAnyDb(c.into()),
            (db, c) => Resource::Collection(db.into(), c.into()),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Privilege {
    pub resource: Resource,
    pub actions: ActionSet,
}

impl Privilege {
    pub fn to_document(&self) -> Document {
        doc! {"resource": self.resource.to_document(), "actions": self.actions.names()}
    }

    /// Parses `{resource: {...}, actions: [...]}` from `createRole`.
    pub fn from_document(d: &Document) -> MongoResult<Privilege> {
        let resource = d
            .get_document("resource")
            .map_err(|_| MongoError::failed_to_parse("privilege must have a 'resource' document"))
            .and_then(Resource::from_document)?;
        let names = d
            .get_array("actions")
            .map_err(|_| MongoError::failed_to_parse("privilege must have an 'actions' array"))?;
        let mut actions = ActionSet::default();
        for n in names {
            let name = n.as_str().unwrap_or_default();
            actions = actions.union(Action::from_name(name).ok_or_else(|| {
                MongoError::bad_value(format!("Unrecognized action privilege string: {name}"))
            })?);
        }
        Ok(Privilege { resource, actions })
    }
}

/// A set of privileges held by a connection, checked on every command.
#[derive(Debug, Clone, Default)]
pub struct Privileges(pub Vec<Privilege>);

impl Privileges {
    pub fn allows(&self, target: Target, wanted: ActionSet) -> bool {
        let held = self
            .0
            .iter()
            .filter(|p| p.resource.matches(target))
            .fold(ActionSet::default(), |acc, p| acc.union(p.actions));
        held.contains(wanted)
    }

    /// Whether any privilege reaches database `db` or a collection in it (what MongoDB's
    /// `listDatabases` with `authorizedDatabases` lists).
    pub fn any_on_db(&self, db: &str) -> bool {
        self.0.iter().any(|p| {
            !p.actions.is_empty()
                && match &p.resource {
                    Resource::AnyResource | Resource::AnyNormal => true,
                    Resource::Db(d) | Resource::Collection(d, _) => d == db,
                    Resource::Cluster | Resource::CollectionInAnyDb(_) => false,
                }
        })
    }

    pub fn extend(&mut self, more: impl IntoIterator<Item = Privilege>) {
        self.0.extend(more)
    }
}

use Action::*;

const READ: ActionSet = ActionSet::of(&[
    ChangeStream,
    CollStats,
    DbHash,
    DbStats,
    Find,
    KillCursors,
    ListCollections,
    ListIndexes,
    ListSearchIndexes,
]);
const READ_WRITE: ActionSet = READ.union(ActionSet::of(&[
    ConvertToCapped,
    CreateCollection,
    CreateIndex,
    DropCollection,
    DropIndex,
    Insert,
    Remove,
    RenameCollectionSameDb,
    Update,
]));
const DB_ADMIN: ActionSet = ActionSet::of(&[
    BypassDocumentValidation,
    CollMod,
    CollStats,
    Compact,
    ConvertToCapped,
    CreateCollection,
    CreateIndex,
    DbStats,
    DropCollection,
    DropDatabase,
    DropIndex,
    EnableProfiler,
    ListCollections,
    ListIndexes,
    PlanCacheIndexFilter,
    PlanCacheRead,
    PlanCacheWrite,
    ReIndex,
    RenameCollectionSameDb,
    StorageDetails,
    Validate,
]);
const DB_ADMIN_PROFILE: ActionSet = ActionSet::of(&[
    ChangeStream,
    CollStats,
    ConvertToCapped,
    CreateCollection,
    DbHash,
    DbStats,
    DropCollection,
    Find,
    KillCursors,
    ListCollections,
    ListIndexes,
    PlanCacheRead,
]);
const USER_ADMIN: ActionSet = ActionSet::of(&[
    ChangeCustomData,
    ChangePassword,
    CreateRole,
    CreateUser,
    DropRole,
    DropUser,
    GrantRole,
    RevokeRole,
    SetAuthenticationRestriction,
    ViewRole,
    ViewUser,
]);
const CLUSTER_MONITOR: ActionSet = ActionSet::of(&[
    CheckFreeMonitoringStatus,
    ConnPoolStats,
    GetCmdLineOpts,
    GetDefaultRwConcern,
    GetLog,
    GetParameter,
    GetShardMap,
    HostInfo,
    Inprog,
    ListDatabases,
    ListSessions,
    ListShards,
    Netstat,
    ReplSetGetConfig,
    ReplSetGetStatus,
    ServerStatus,
    ShardingState,
    Top,
]);
const CLUSTER_MONITOR_ANY_DB: ActionSet =
    ActionSet::of(&[CollStats, DbStats, GetShardVersion, IndexStats, UseUuid]);
const HOST_MANAGER: ActionSet = ActionSet::of(&[
    ApplicationMessage,
    ConnPoolStats,
    DropConnections,
    FlushRouterConfig,
    Fsync,
    InvalidateUserCache,
    KillAnyCursor,
    KillAnySession,
    Killop,
    LogRotate,
    Resync,
    SetParameter,
    Shutdown,
    Touch,
    Unlock,
]);
const CLUSTER_MANAGER: ActionSet = ActionSet::of(&[
    AddShard,
    AppendOplogNote,
    ApplicationMessage,
    CleanupOrphaned,
    FlushRouterConfig,
    GetDefaultRwConcern,
    ListSessions,
    ListShards,
    RemoveShard,
    ReplSetConfigure,
    ReplSetGetConfig,
    ReplSetGetStatus,
    ReplSetStateChange,
    Resync,
    SetDefaultRwConcern,
    SetFeatureCompatibilityVersion,
]);
const CLUSTER_MANAGER_ANY_DB: ActionSet = ActionSet::of(&[EnableSharding, MoveChunk, SplitChunk]);
/// hostManager's on every normal database (clusterManager does not hold it).
const HOST_MANAGER_ANY_DB: ActionSet = ActionSet::of(&[KillCursors]);

/// Built-in roles valid in any database.
const DB_ROLES: &[&str] = &["read", "readWrite", "dbAdmin", "userAdmin", "dbOwner"];
/// Built-in roles that exist only in `admin`.
const ADMIN_ROLES: &[&str] = &[
    "clusterMonitor",
    "hostManager",
    "clusterManager",
    "clusterAdmin",
    "readAnyDatabase",
    "readWriteAnyDatabase",
    "userAdminAnyDatabase",
    "dbAdminAnyDatabase",
    "root",
];

pub fn is_builtin(role: &str, db: &str) -> bool {
    DB_ROLES.contains(&role) || (db == "admin" && ADMIN_ROLES.contains(&role))
}

/// Every built-in role that exists in `db` (for `rolesInfo` with `showBuiltinRoles`).
pub fn builtin_names(db: &str) -> impl Iterator<Item = &'static str> {
    let admin = if db == "admin" { ADMIN_ROLES } else { &[] };
    DB_ROLES.iter().chain(admin.iter()).copied()
}

/// The privileges of built-in role `role` in database `db`, or `None` if no such role.
pub fn builtin_privileges(role: &str, db: &str) -> Option<Vec<Privilege>> {
    if !is_builtin(role, db) {
        return None;
    }
    let p = |resource, actions| Privilege { resource, actions };
    let on_db = |actions| p(Resource::Db(db.to_string()), actions);
    let any = |actions| p(Resource::AnyNormal, actions);
    let cluster = |actions| p(Resource::Cluster, actions);
    let list_dbs = || cluster(ActionSet::of(&[ListDatabases]));
    let db_admin = || {
        vec![
            on_db(DB_ADMIN),
            p(
                Resource::Collection(db.into(), "system.profile".into()),
                DB_ADMIN_PROFILE,
            ),
        ]
    };
    let user_admin_any = || {
        vec![
            any(USER_ADMIN),
            cluster(ActionSet::of(&[
                AuthSchemaUpgrade,
                InvalidateUserCache,
                ListDatabases,
            ])),
            p(
                Resource::Collection("admin".into(), "system.users".into()),
                READ,
            ),
            p(
                Resource::Collection("admin".into(), "system.roles".into()),
                READ,
            ),
        ]
    };
    // What the cluster roles hold on `config` and `local`, which "any database"
    // privileges do not reach: clusterMonitor reads them, clusterManager also writes.
    let on = |d: &str, actions| p(Resource::Db(d.into()), actions);
    let monitor_catalog = || vec![on("config", READ), on("local", READ)];
    let manage_catalog = || {
        let write = ActionSet::of(&[Insert, Update, Remove]).union(CLUSTER_MANAGER_ANY_DB);
        vec![on("config", READ.union(write)), on("local", write)]
    };
    let cluster_admin = || {
        [
            vec![
                cluster(CLUSTER_MONITOR.union(HOST_MANAGER).union(CLUSTER_MANAGER)),
                any(CLUSTER_MONITOR_ANY_DB
                    .union(CLUSTER_MANAGER_ANY_DB)
                    .union(HOST_MANAGER_ANY_DB)
                    .union(ActionSet::of(&[DropDatabase]))),
            ],
            monitor_catalog(),
            manage_catalog(),
        ]
        .concat()
    };
    // Stored JavaScript (`system.js`) is part of what the read and write roles reach,
    // unlike the other system collections.
    let js = |actions| p(Resource::Collection(db.into(), "system.js".into()), actions);
    let js_any = |actions| p(Resource::CollectionInAnyDb("system.js".into()), actions);
    Some(match role {
        "read" => vec![on_db(READ), js(READ)],
        "readWrite" => vec![on_db(READ_WRITE), js(READ_WRITE)],
        "dbAdmin" => db_admin(),
        "userAdmin" => vec![on_db(USER_ADMIN)],
        "dbOwner" => [
            vec![on_db(READ_WRITE), js(READ_WRITE), on_db(USER_ADMIN)],
            db_admin(),
        ]
        .concat(),
        "clusterMonitor" => [
            vec![cluster(CLUSTER_MONITOR), any(CLUSTER_MONITOR_ANY_DB)],
            monitor_catalog(),
        ]
        .concat(),
        "hostManager" => vec![cluster(HOST_MANAGER), any(HOST_MANAGER_ANY_DB)],
        "clusterManager" => [
            vec![cluster(CLUSTER_MANAGER), any(CLUSTER_MANAGER_ANY_DB)],
            manage_catalog(),
        ]
        .concat(),
        "clusterAdmin" => cluster_admin(),
        "readAnyDatabase" => vec![any(READ), js_any(READ), list_dbs()],
        "readWriteAnyDatabase" => vec![any(READ_WRITE), js_any(READ_WRITE), list_dbs()],
        "dbAdminAnyDatabase" => vec![any(DB_ADMIN), list_dbs()],
        "userAdminAnyDatabase" => user_admin_any(),
        // root = readWriteAnyDatabase + dbAdminAnyDatabase + userAdminAnyDatabase +
        // clusterAdmin + backup/restore; the last two reach system collections too.
        "root" => [
            vec![
                any(READ_WRITE.union(DB_ADMIN)),
                p(
                    Resource::AnyResource,
                    READ_WRITE.union(ActionSet::of(&[Validate])),
                ),
            ],
            user_admin_any(),
            cluster_admin(),
        ]
        .concat(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn privs(role: &str, db: &str) -> Privileges {
        Privileges(builtin_privileges(role, db).unwrap())
    }

    #[test]
    fn read_role_reads_its_database_only() {
        let p = privs("read", "app");
        let find = ActionSet::of(&[Find]);
        assert!(p.allows(Target::Collection("app", "c"), find));
        assert!(!p.allows(Target::Collection("other", "c"), find));
        assert!(!p.allows(Target::Collection("app", "system.users"), find));
        assert!(!p.allows(Target::Collection("app", "c"), ActionSet::of(&[Insert])));
    }

    #[test]
    fn stored_javascript_is_read_and_written_with_the_data() {
        let find = ActionSet::of(&[Find]);
        let insert = ActionSet::of(&[Insert]);
        let js = Target::Collection("app", "system.js");
        assert!(privs("read", "app").allows(js, find));
        assert!(!privs("read", "app").allows(js, insert));
        assert!(privs("readWrite", "app").allows(js, insert));
        assert!(privs("dbOwner", "app").allows(js, insert));
        assert!(privs("readAnyDatabase", "admin").allows(js, find));
        assert!(privs("readWriteAnyDatabase", "admin").allows(js, insert));
        assert!(!privs("dbAdmin", "app").allows(js, find));
    }

    #[test]
    fn killing_cursors_anywhere_is_host_managers_not_cluster_managers() {
        let kill = ActionSet::of(&[KillCursors]);
        let c = Target::Collection("app", "c");
        assert!(!privs("clusterManager", "admin").allows(c, kill));
        assert!(privs("hostManager", "admin").allows(c, kill));
        assert!(privs("clusterAdmin", "admin").allows(c, kill));
    }

    #[test]
    fn admin_only_roles_exist_only_in_admin() {
        assert!(builtin_privileges("root", "app").is_none());
        assert!(builtin_privileges("root", "admin").is_some());
        assert!(builtin_privileges("nope", "admin").is_none());
        let root = privs("root", "admin");
        assert!(root.allows(
            Target::Cluster,
            ActionSet::of(&[ServerStatus, ListDatabases])
        ));
        assert!(root.allows(Target::Db("x"), ActionSet::of(&[CreateUser, DropDatabase])));
    }

    #[test]
    fn privilege_documents_round_trip() {
        let d = doc! {"resource": {"db": "a", "collection": ""}, "actions": ["find", "insert"]};
        let p = Privilege::from_document(&d).unwrap();
        assert_eq!(p.to_document(), d);
        let bad = doc! {"resource": {"db": "a", "collection": ""}, "actions": ["fly"]};
        assert!(Privilege::from_document(&bad).is_err());
    }
}
