//! The router's one command table: for every command, its names, what it needs when auth
//! is on (MongoDB's `checkAuthForOperation` for each), how it runs (answered here, or
//! forwarded to the shard that owns the data), whether it may run on a secondary, the
//! collection it names, and whether its document sequences stay raw.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;

use bson::{Bson, Document};
use wire::MongoResult;

use super::*;
use crate::auth::authz::{self, acts, Rule};
use crate::auth::roles::Action::*;
use crate::context::Session;
use crate::counters::Op;

pub type BoxFuture<'a> = Pin<Box<dyn Future<Output = MongoResult<Document>> + Send + 'a>>;
pub type Handler = for<'a> fn(&'a mut Session, &'a str, &'a Document) -> BoxFuture<'a>;

/// Wraps an `async fn(&mut Session, &str, &Document)` handler as a table entry.
macro_rules! handler {
    ($f:path) => {{
        fn call<'a>(s: &'a mut Session, db: &'a str, cmd: &'a Document) -> BoxFuture<'a> {
            Box::pin($f(s, db, cmd))
        }
        call as Handler
    }};
}

/// How a command runs.
#[derive(Clone, Copy)]
pub enum Run {
    /// Answered by the router (counted as a command).
    Router(Handler),
    /// Forwarded to the shard that owns the data, counted under this counter.
    Forward(Op),
}

/// Which member a forwarded command may run on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Member {
    /// The primary.
    Primary,
    /// Any member the read preference allows (a read; one that writes its output, such
    /// as `aggregate` with `$out`, still goes to the primary).
    ByReadPreference,
}

/// Where the collection a command names is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Names {
    Nothing,
    /// The command's own value (`{find: "c"}`).
    Value,
    /// Another field (`{getMore: id, collection: "c"}`).
    Field(&'static str),
}

pub struct Command {
    pub name: &'static str,
    /// Other spellings MongoDB accepts (`isMaster`, `findandmodify`).
    pub aliases: &'static [&'static str],
    pub rule: Rule,
    pub run: Run,
    pub member: Member,
    pub names: Names,
    /// The router passes the command's document sequences on without parsing a document
    /// of them: it reads only the body (namespace, options). Parsing and re-encoding
    /// every document of a batch at the router costs more than the shard's insert.
    /// (`update` is not one: authorizing an upsert reads its statements.)
    pub raw_sequences: bool,
}

impl Command {
    const fn new(name: &'static str, rule: Rule, run: Run) -> Command {
        Command {
            name,
            aliases: &[],
            rule,
            run,
            member: Member::Primary,
            names: Names::Nothing,
            raw_sequences: false,
        }
    }

    const fn router(name: &'static str, rule: Rule, run: Handler) -> Command {
        Command::new(name, rule, Run::Router(run))
    }

    /// A forwarded command that writes (or must reach the primary).
    const fn write(name: &'static str, op: Op, rule: Rule) -> Command {
        Command::new(name, rule, Run::Forward(op))
    }

    /// A forwarded command that may run on any member its read preference allows.
    const fn read(name: &'static str, op: Op, rule: Rule) -> Command {
        Command {
            member: Member::ByReadPreference,
            ..Command::write(name, op, rule)
        }
    }

    const fn aka(self, aliases: &'static [&'static str]) -> Command {
        Command { aliases, ..self }
    }

    /// Names a collection in its own value.
    const fn on_collection(self) -> Command {
        Command {
            names: Names::Value,
            ..self
        }
    }

    const fn raw(self) -> Command {
        Command {
            raw_sequences: true,
            ..self
        }
    }

    /// The collection `cmd` names, for commands that name one.
    pub fn collection<'a>(&self, cmd: &'a Document) -> Option<&'a str> {
        let field = match self.names {
            Names::Nothing => return None,
            Names::Value => cmd.keys().next()?.as_str(),
            Names::Field(f) => f,
        };
        match cmd.get(field) {
            Some(Bson::String(c)) => Some(c.as_str()),
            _ => None,
        }
    }

    pub fn is_forwarded(&self) -> bool {
        matches!(self.run, Run::Forward(_))
    }
}

const fn cluster(a: &'static [crate::auth::roles::Action]) -> Rule {
    Rule::Cluster(acts(a))
}
const fn named(a: &'static [crate::auth::roles::Action]) -> Rule {
    Rule::Named(acts(a))
}
const fn config_db(a: &'static [crate::auth::roles::Action]) -> Rule {
    Rule::ConfigDb(acts(a))
}
const fn coll(a: &'static [crate::auth::roles::Action]) -> Rule {
    Rule::Collection(acts(a))
}
const fn db(a: &'static [crate::auth::roles::Action]) -> Rule {
    Rule::Db(acts(a))
}

pub static COMMANDS: &[Command] = &[
    // Data commands, forwarded.
    Command::write("insert", Op::Insert, coll(&[Insert]))
        .on_collection()
        .raw(),
    Command::write("update", Op::Update, Rule::Custom(authz::update_needs)).on_collection(),
    Command::write("delete", Op::Delete, coll(&[Remove]))
        .on_collection()
        .raw(),
    Command::read("find", Op::Query, coll(&[Find])).on_collection(),
    Command {
        names: Names::Field("collection"),
        ..Command::write("getMore", Op::GetMore, Rule::Custom(authz::get_more_needs))
    },
    Command::write(
        "findAndModify",
        Op::Command,
        Rule::Custom(authz::find_and_modify_needs),
    )
    .aka(&["findandmodify"])
    .on_collection(),
    Command::write("killCursors", Op::Command, coll(&[KillCursors])).on_collection(),
    Command::read("count", Op::Command, coll(&[Find])).on_collection(),
    Command::read("distinct", Op::Command, coll(&[Find])).on_collection(),
    Command::read(
        "aggregate",
        Op::Command,
        Rule::Custom(crate::auth::aggregate_needs::aggregate_needs),
    )
    .on_collection(),
    Command::read("explain", Op::Command, Rule::Custom(explain_needs)),
    Command::write("create", Op::Command, coll(&[CreateCollection])).on_collection(),
    Command::write("drop", Op::Command, coll(&[DropCollection])).on_collection(),
    Command::write("dropDatabase", Op::Command, db(&[DropDatabase])),
    Command::write(
        "renameCollection",
        Op::Command,
        Rule::Decide(authz::rename_allowed),
    ),
    Command::read("listCollections", Op::Command, db(&[ListCollections])),
    Command::read(
        "listDatabases",
        Op::Command,
        Rule::Custom(authz::list_databases_needs),
    ),
    Command::write("createIndexes", Op::Command, coll(&[CreateIndex])).on_collection(),
    Command::write("collMod", Op::Command, coll(&[CollMod])).on_collection(),
    Command::read("listIndexes", Op::Command, coll(&[ListIndexes])).on_collection(),
    Command::write("dropIndexes", Op::Command, coll(&[DropIndex]))
        .aka(&["deleteIndexes"])
        .on_collection(),
    Command::read("collStats", Op::Command, coll(&[CollStats])).on_collection(),
    Command::read("dbStats", Op::Command, db(&[DbStats])),
    Command::read("dbHash", Op::Command, db(&[DbHash])),
    Command::read("validate", Op::Command, coll(&[Validate])).on_collection(),
    // Replica-set commands go to the member the read preference picks (a test steps down
    // or asks a particular member), so they are sent like reads.
    Command::read(
        "replSetGetStatus",
        Op::Command,
        cluster(&[ReplSetGetStatus]),
    ),
    Command::read(
        "replSetStepDown",
        Op::Command,
        cluster(&[ReplSetStateChange]),
    ),
    Command::read("replSetStepUp", Op::Command, cluster(&[ReplSetStateChange])),
    Command::read("replSetFreeze", Op::Command, cluster(&[ReplSetStateChange])),
    // MongoDB's test command; forwarded only with test commands enabled (`dispatch`).
    Command::write("sleep", Op::Command, Rule::Authenticated),
    // Answered by the router.
    Command::router("ping", Rule::Open, handler!(ping::run)),
    Command::router(
        "configureFailPoint",
        Rule::Authenticated,
        handler!(configure_fail_point::run),
    ),
    Command::router("buildInfo", Rule::Open, handler!(build_info::run)).aka(&["buildinfo"]),
    Command::router(
        "getParameter",
        cluster(&[GetParameter]),
        handler!(get_parameter::run),
    ),
    Command::router(
        "getCmdLineOpts",
        cluster(&[GetCmdLineOpts]),
        handler!(get_cmd_line_opts::run),
    ),
    Command::router("whatsmyuri", Rule::Open, handler!(whatsmyuri::run)),
    Command::router(
        "connectionStatus",
        Rule::Open,
        handler!(connection_status::run),
    ),
    Command::router("logout", Rule::Open, handler!(connection_status::logout)),
    Command::router("endSessions", Rule::Open, handler!(sessions::end_sessions)),
    Command::router(
        "commitTransaction",
        Rule::Authenticated,
        handler!(commit_transaction::run),
    ),
    Command::router(
        "abortTransaction",
        Rule::Authenticated,
        handler!(abort_transaction::run),
    ),
    Command::router(
        "killAllSessions",
        cluster(&[KillAnySession]),
        handler!(sessions::kill_all_sessions),
    ),
    Command::router(
        "killAllSessionsByPattern",
        cluster(&[KillAnySession]),
        handler!(sessions::kill_all_sessions),
    ),
    Command::router(
        "killSessions",
        Rule::Authenticated,
        handler!(sessions::kill_sessions),
    ),
    Command::router(
        "refreshSessions",
        Rule::Authenticated,
        handler!(sessions::refresh_sessions),
    ),
    Command::router(
        "startSession",
        Rule::Authenticated,
        handler!(sessions::start_session),
    ),
    Command::router("hostInfo", cluster(&[HostInfo]), handler!(host_info::run)),
    Command::router("getLog", cluster(&[GetLog]), handler!(get_log::run)),
    Command::router("listCommands", Rule::Open, handler!(list_commands::run)),
    Command::router(
        "createSearchIndexes",
        Rule::Authenticated,
        handler!(search_indexes::run),
    ),
    Command::router(
        "updateSearchIndex",
        Rule::Authenticated,
        handler!(search_indexes::run),
    ),
    Command::router(
        "dropSearchIndex",
        Rule::Authenticated,
        handler!(search_indexes::run),
    ),
    Command::router("hello", Rule::Open, handler!(sasl::hello)).aka(&["isMaster", "ismaster"]),
    Command::router("saslStart", Rule::Open, handler!(sasl::start)),
    Command::router("saslContinue", Rule::Open, handler!(sasl::cont)),
    Command::router("authenticate", Rule::Open, handler!(authenticate::run)),
    // User and role management: each handler checks its own privileges.
    Command::router("createUser", Rule::Handler, handler!(create_user::run)),
    Command::router("updateUser", Rule::Handler, handler!(update_user::run)),
    Command::router("dropUser", Rule::Handler, handler!(drop_user::run)),
    Command::router(
        "dropAllUsersFromDatabase",
        Rule::Handler,
        handler!(drop_user::drop_all),
    ),
    Command::router("usersInfo", Rule::Handler, handler!(users_info::run)),
    Command::router(
        "grantRolesToUser",
        Rule::Handler,
        handler!(grant_roles::grant),
    ),
    Command::router(
        "revokeRolesFromUser",
        Rule::Handler,
        handler!(grant_roles::revoke),
    ),
    Command::router("createRole", Rule::Handler, handler!(create_role::run)),
    Command::router("updateRole", Rule::Handler, handler!(update_role::run)),
    Command::router(
        "grantRolesToRole",
        Rule::Handler,
        handler!(grant_roles::grant_to_role),
    ),
    Command::router(
        "revokeRolesFromRole",
        Rule::Handler,
        handler!(grant_roles::revoke_from_role),
    ),
    Command::router(
        "grantPrivilegesToRole",
        Rule::Handler,
        handler!(grant_privileges::grant),
    ),
    Command::router(
        "revokePrivilegesFromRole",
        Rule::Handler,
        handler!(grant_privileges::revoke),
    ),
    Command::router("dropRole", Rule::Handler, handler!(drop_role::run)),
    Command::router("rolesInfo", Rule::Handler, handler!(roles_info::run)),
    Command::router(
        "serverStatus",
        cluster(&[ServerStatus]),
        handler!(server_status::run),
    ),
    Command::router("currentOp", Rule::Handler, handler!(current_op::command)),
    Command::router("killOp", Rule::Handler, handler!(kill_op::run)),
    // Sharding administration.
    Command::router(
        "shardCollection",
        named(&[EnableSharding]),
        handler!(shard_collection::run),
    )
    .aka(&["shardcollection"]),
    Command::router(
        "enableSharding",
        named(&[EnableSharding]),
        handler!(enable_sharding::run),
    )
    .aka(&["enablesharding"]),
    Command::router("addShard", cluster(&[AddShard]), handler!(add_shard::run)).aka(&["addshard"]),
    Command::router(
        "listShards",
        cluster(&[ListShards]),
        handler!(list_shards::run),
    )
    .aka(&["listshards"]),
    Command::router(
        "addShardToZone",
        config_db(&[EnableSharding]),
        handler!(add_shard_to_zone::add),
    ),
    Command::router(
        "removeShardFromZone",
        config_db(&[EnableSharding]),
        handler!(add_shard_to_zone::remove),
    ),
    Command::router(
        "updateZoneKeyRange",
        named(&[EnableSharding]),
        handler!(update_zone_key_range::run),
    ),
    Command::router("split", named(&[SplitChunk]), handler!(split::run)),
    Command::router(
        "moveChunk",
        named(&[MoveChunk]),
        handler!(move_chunk::move_chunk),
    ),
    Command::router(
        "movePrimary",
        named(&[MoveChunk]),
        handler!(move_primary::run),
    ),
    Command::router(
        "moveRange",
        named(&[MoveChunk]),
        handler!(move_chunk::move_range),
    ),
    Command::router(
        "balancerStart",
        config_db(&[EnableSharding]),
        handler!(balancer_mode::start),
    ),
    Command::router(
        "balancerStop",
        config_db(&[EnableSharding]),
        handler!(balancer_mode::stop),
    ),
    Command::router(
        "balancerStatus",
        cluster(&[ListShards]),
        handler!(balancer_status::run),
    ),
    Command::router(
        "removeShard",
        cluster(&[RemoveShard]),
        handler!(remove_shard::run),
    ),
    Command::router(
        "flushRouterConfig",
        cluster(&[FlushRouterConfig]),
        handler!(flush_router_config::run),
    ),
];

static BY_NAME: LazyLock<HashMap<&'static str, &'static Command>> = LazyLock::new(|| {
    let mut map = HashMap::new();
    for c in COMMANDS {
        for name in std::iter::once(&c.name).chain(c.aliases) {
            let earlier = map.insert(*name, c);
            debug_assert!(earlier.is_none(), "{name} is in the command table twice");
        }
    }
    map
});

/// The command called `name` (or one of its aliases).
pub fn find(name: &str) -> Option<&'static Command> {
    BY_NAME.get(name).copied()
}

/// The collection the command `name` names in `cmd`, if it names one.
pub fn collection_of<'a>(name: &str, cmd: &'a Document) -> Option<&'a str> {
    find(name)?.collection(cmd)
}

/// The collection a command is about: for `explain`, the explained command's.
pub fn target_collection<'a>(name: &str, cmd: &'a Document) -> Option<&'a str> {
    if name == "explain" {
        let inner = cmd.get_document("explain").ok()?;
        return collection_of(inner.keys().next()?, inner);
    }
    collection_of(name, cmd)
}

/// `explain`: whatever the explained command needs.
fn explain_needs<'a>(db: &'a str, cmd: &'a Document) -> MongoResult<Vec<authz::Need<'a>>> {
    let inner = cmd
        .get_document("explain")
        .map_err(|_| wire::MongoError::failed_to_parse("explain must be a document"))?;
    let name = inner.keys().next().map(String::as_str).unwrap_or("");
    match find(name).map(|c| c.rule) {
        Some(rule @ Rule::Custom(_)) | Some(rule @ Rule::Collection(_)) => {
            authz::needs(rule, db, inner)
        }
        _ => Err(wire::MongoError::new(
            wire::ErrorCode::CommandNotFound,
            format!("Explain failed due to unknown command: {name}"),
        )),
    }
}

/// Every name the router knows, aliases included (`listCommands`).
pub fn names() -> impl Iterator<Item = &'static str> {
    COMMANDS
        .iter()
        .flat_map(|c| std::iter::once(c.name).chain(c.aliases.iter().copied()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_listed_once() {
        let mut seen = std::collections::HashSet::new();
        for name in names() {
            assert!(seen.insert(name), "{name} twice");
            assert!(find(name).is_some(), "{name} not found");
        }
    }

    #[test]
    fn collections_come_from_the_value_or_a_field() {
        let find_cmd = bson::doc! {"find": "c"};
        assert_eq!(find("find").unwrap().collection(&find_cmd), Some("c"));
        let agg = bson::doc! {"aggregate": 1};
        assert_eq!(find("aggregate").unwrap().collection(&agg), None);
        let more = bson::doc! {"getMore": 5_i64, "collection": "d"};
        assert_eq!(find("getMore").unwrap().collection(&more), Some("d"));
        assert_eq!(find("ping").unwrap().collection(&find_cmd), None);
    }

    #[test]
    fn only_reads_go_by_read_preference() {
        for name in [
            "find",
            "aggregate",
            "count",
            "listIndexes",
            "replSetStepDown",
        ] {
            assert_eq!(
                find(name).unwrap().member,
                Member::ByReadPreference,
                "{name}"
            );
        }
        for name in ["insert", "update", "getMore", "create", "findandmodify"] {
            assert_eq!(find(name).unwrap().member, Member::Primary, "{name}");
        }
        assert!(find("insert").unwrap().raw_sequences);
        assert!(!find("update").unwrap().raw_sequences);
    }
}
