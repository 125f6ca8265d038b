//! The authorization check made before every command. Each command-table entry carries a
//! [`Rule`]; the rule yields what the command needs (target + actions) and the
//! connection's privileges must cover all of it. When `auth` is off nothing is checked.

use std::borrow::Cow;

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::roles::{Action, ActionSet, Privileges, Target};
use super::store::Kind;
use crate::context::Session;

/// Whether a command is allowed, asking `holds` whether the user holds actions on a target.
pub type Decision = fn(holds: &dyn Fn(Target, ActionSet) -> bool, &Document) -> MongoResult<bool>;

/// What a command needs to run, declared in the command tables.
#[derive(Clone, Copy)]
pub enum Rule {
    /// Allowed before authentication (handshake, SASL, ping, logout...).
    Open,
    /// Any authenticated user.
    Authenticated,
    /// Actions on the cluster resource.
    Cluster(ActionSet),
    /// Actions on the command's database.
    Db(ActionSet),
    /// Actions on the collection named by the command's first field (or the database,
    /// when that field is not a name, as in `aggregate: 1`).
    Collection(ActionSet),
    /// Actions on the namespace the command's first field names in full, whatever the
    /// command's database (`shardCollection: "db.coll"`, `enableSharding: "db"`): the
    /// sharding admin commands, which MongoDB checks against that namespace, where
    /// `clusterManager` (and `root`) hold `enableSharding`, `moveChunk` and `splitChunk`.
    Named(ActionSet),
    /// Actions on the `config` database: sharding admin commands that name no namespace
    /// (zones, the balancer), which MongoDB checks against the `config` collections they
    /// change.
    ConfigDb(ActionSet),
    /// Needs that depend on the arguments.
    Custom(for<'a> fn(&'a str, &'a Document) -> MongoResult<Vec<Need<'a>>>),
    /// Decided from what the user holds, for a rule that is not a plain conjunction of
    /// needs (`renameCollection`'s): the function asks `holds` what it must.
    Decide(Decision),
    /// The handler checks for itself (user management; the localhost exception).
    Handler,
}

/// One thing a command needs: these actions on this target.
pub struct Need<'a> {
    pub scope: Scope<'a>,
    pub actions: ActionSet,
}

impl<'a> Need<'a> {
    pub fn on(target: Target<'a>, actions: ActionSet) -> Need<'a> {
        let scope = match target {
            Target::Cluster => Scope::Cluster,
            Target::Db(d) => Scope::Db(Cow::Borrowed(d)),
            Target::Collection(d, c) => Scope::Collection(Cow::Borrowed(d), Cow::Borrowed(c)),
        };
        Need { scope, actions }
    }
}

/// A [`Target`] whose names may be owned: those a parsed pipeline yields are not borrowed
/// from the command.
pub enum Scope<'a> {
    Cluster,
    Db(Cow<'a, str>),
    Collection(Cow<'a, str>, Cow<'a, str>),
}

impl Scope<'_> {
    pub fn target(&self) -> Target<'_> {
        match self {
            Scope::Cluster => Target::Cluster,
            Scope::Db(d) => Target::Db(d),
            Scope::Collection(d, c) => Target::Collection(d, c),
        }
    }
}

pub const fn acts(a: &[Action]) -> ActionSet {
    ActionSet::of(a)
}

/// Checks `rule` for a command on this connection.
pub async fn authorize(
    session: &mut Session,
    db: &str,
    name: &str,
    cmd: &Document,
    rule: Rule,
) -> MongoResult<()> {
    if !session.state.auth.enabled || matches!(rule, Rule::Open | Rule::Handler) {
        return Ok(());
    }
    refresh(session).await?;
    let Some(user) = &session.auth.user else {
        return Err(MongoError::new(
            ErrorCode::Unauthorized,
            format!("Command {name} requires authentication"),
        ));
    };
    match permits(rule, db, cmd, &user.privileges)? {
        true => Ok(()),
        false => Err(not_authorized(db, name, cmd)),
    }
}

/// Whether `privileges` satisfy `rule` for this command.
fn permits(rule: Rule, db: &str, cmd: &Document, privileges: &Privileges) -> MongoResult<bool> {
    if let Rule::Decide(decide) = rule {
        return decide(&|target, actions| privileges.allows(target, actions), cmd);
    }
    let needs = needs(rule, db, cmd)?;
    Ok(needs
        .into_iter()
        .all(|n| privileges.allows(n.scope.target(), n.actions)))
}

/// For handlers that check for themselves: fails unless the connection holds `actions`
/// on `target` (always passes with auth off).
pub async fn require(
    session: &mut Session,
    target: Target<'_>,
    actions: ActionSet,
    name: &str,
    db: &str,
    cmd: &Document,
) -> MongoResult<()> {
    if !session.state.auth.enabled {
        return Ok(());
    }
    refresh(session).await?;
    match &session.auth.user {
        Some(u) if u.privileges.allows(target, actions) => Ok(()),
        Some(_) => Err(not_authorized(db, name, cmd)),
        None => Err(MongoError::new(
            ErrorCode::Unauthorized,
            format!("Command {name} requires authentication"),
        )),
    }
}

/// MongoDB's localhost exception: with auth on and no user at all, a client on the
/// loopback interface may create the first user (and roles) in `admin`, and nothing else.
pub async fn localhost_exception(session: &Session, db: &str) -> MongoResult<bool> {
    if !session.state.auth.enabled
        || session.auth.user.is_some()
        || db != "admin"
        || !session.peer.ip().is_loopback()
    {
        return Ok(false);
    }
    Ok(!session.state.auth.store.any(Kind::User).await?)
}

/// Re-resolves the connection's privileges after users or roles changed.
async fn refresh(session: &mut Session) -> MongoResult<()> {
    // A field borrow, not an `Arc` clone: no shared reference count touched per command.
    let generation = session.state.auth.generation();
    let Some(user) = &session.auth.user else {
        return Ok(());
    };
    if user.generation == generation {
        return Ok(());
    }
    // Boxed: the store's reads are large futures, and every command's authorization
    // would otherwise carry them inline for this rare path.
    let auth = session.state.auth.clone();
    Box::pin(reload(session, auth, generation)).await
}

/// Reads the connection's user and roles again after a change to the store.
async fn reload(
    session: &mut Session,
    auth: std::sync::Arc<crate::auth::AuthState>,
    generation: u64,
) -> MongoResult<()> {
    let Some(user) = &session.auth.user else {
        return Ok(());
    };
    let (db, name) = (user.db.clone(), user.user.clone());
    match auth.user(&db, &name).await? {
        None => session.auth.user = None,
        Some(record) => {
            let (privileges, roles) = auth.resolve(&record.roles).await?;
            if let Some(u) = session.auth.user.as_mut() {
                u.privileges = privileges;
                u.roles = roles;
                u.direct_roles = record.roles.clone();
                u.generation = generation;
            }
        }
    }
    Ok(())
}

fn not_authorized(db: &str, name: &str, cmd: &Document) -> MongoError {
    let arg = match cmd.get(name) {
        Some(Bson::String(s)) => format!("\"{}\"", s.chars().take(120).collect::<String>()),
        Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Boolean(_))) => {
            v.to_string()
        }
        _ => "...".into(),
    };
    MongoError::new(
        ErrorCode::Unauthorized,
        format!("not authorized on {db} to execute command {{ {name}: {arg} }}"),
    )
}

/// The privileges `rule` asks of `cmd`, run on `db`.
pub fn needs<'a>(rule: Rule, db: &'a str, cmd: &'a Document) -> MongoResult<Vec<Need<'a>>> {
    Ok(match rule {
        Rule::Open | Rule::Handler | Rule::Authenticated => Vec::new(),
        Rule::Cluster(actions) => vec![Need::on(Target::Cluster, actions)],
        Rule::Db(actions) => vec![Need::on(Target::Db(db), actions)],
        Rule::Collection(actions) => vec![Need::on(first_target(db, cmd), actions)],
        Rule::Named(actions) => vec![Need::on(named_target(cmd), actions)],
        Rule::ConfigDb(actions) => vec![Need::on(Target::Db("config"), actions)],
        Rule::Custom(f) => f(db, cmd)?,
        Rule::Decide(_) => {
            return Err(MongoError::internal(
                "a decided rule has no list of needs (see `permits`)",
            ))
        }
    })
}

/// The namespace the first field names in full: `db.coll`, or `db`. A first field that
/// is not a string names nothing, and the command needs the actions on the cluster.
fn named_target(cmd: &Document) -> Target<'_> {
    match cmd.iter().next() {
        Some((_, Bson::String(ns))) => match ns.split_once('.') {
            Some((d, c)) => Target::Collection(d, c),
            None => Target::Db(ns),
        },
        _ => Target::Cluster,
    }
}

/// The collection named by the first field, or the database when it names none.
pub(super) fn first_target<'a>(db: &'a str, cmd: &'a Document) -> Target<'a> {
    match cmd.iter().next() {
        Some((_, Bson::String(c))) => Target::Collection(db, c),
        _ => Target::Db(db),
    }
}

fn any_upsert(cmd: &Document, field: &str) -> bool {
    match cmd.get(field) {
        Some(Bson::Array(a)) => a.iter().any(|u| {
            u.as_document()
                .is_some_and(|u| u.get_bool("upsert").unwrap_or(false))
        }),
        _ => false,
    }
}

use Action::*;

pub fn update_needs<'a>(db: &'a str, cmd: &'a Document) -> MongoResult<Vec<Need<'a>>> {
    let mut a = acts(&[Update]);
    if any_upsert(cmd, "updates") {
        a = a.union(acts(&[Insert]));
    }
    Ok(vec![Need::on(first_target(db, cmd), a)])
}

pub fn find_and_modify_needs<'a>(db: &'a str, cmd: &'a Document) -> MongoResult<Vec<Need<'a>>> {
    let a = if cmd.get_bool("remove").unwrap_or(false) {
        acts(&[Find, Remove])
    } else if cmd.get_bool("upsert").unwrap_or(false) {
        acts(&[Find, Update, Insert])
    } else {
        acts(&[Find, Update])
    };
    Ok(vec![Need::on(first_target(db, cmd), a)])
}

pub fn get_more_needs<'a>(db: &'a str, cmd: &'a Document) -> MongoResult<Vec<Need<'a>>> {
    let target = match cmd.get("collection") {
        Some(Bson::String(c)) => Target::Collection(db, c),
        _ => Target::Db(db),
    };
    Ok(vec![Need::on(target, acts(&[Find]))])
}

/// `renameCollection: "db.a", to: "db.b"` (run on admin), as MongoDB decides it: within
/// one database `renameCollectionSameDB` on it suffices, unless the user could read the
/// target but not the source (a rename would then reveal the source); otherwise, as
/// across databases, `find` and `dropCollection` on the source and `insert` and
/// `createIndex` on the target. `dropTarget` adds `dropCollection` on the target.
pub fn rename_allowed(
    holds: &dyn Fn(Target, ActionSet) -> bool,
    cmd: &Document,
) -> MongoResult<bool> {
    let ns = |f: &str| -> MongoResult<(&str, &str)> {
        cmd.get_str(f)
            .ok()
            .and_then(|s| s.split_once('.'))
            .ok_or_else(|| {
                MongoError::new(
                    ErrorCode::InvalidNamespace,
                    format!("Invalid {f} namespace"),
                )
            })
    };
    let (sdb, scoll) = ns("renameCollection")?;
    let (tdb, tcoll) = ns("to")?;
    let (source, target) = (
        Target::Collection(sdb, scoll),
        Target::Collection(tdb, tcoll),
    );
    let drop_ok =
        !cmd.get_bool("dropTarget").unwrap_or(false) || holds(target, acts(&[DropCollection]));
    if !drop_ok {
        return Ok(false);
    }
    if sdb == tdb && holds(Target::Db(sdb), acts(&[RenameCollectionSameDb])) {
        let reads = |t| holds(t, acts(&[Find]));
        if reads(source) || !reads(target) {
            return Ok(true);
        }
    }
    Ok(holds(source, acts(&[Find, DropCollection])) && holds(target, acts(&[Insert, CreateIndex])))
}

/// `listDatabases`: with the `listDatabases` cluster action, every database. Without it,
/// MongoDB lists the databases the user has some privilege on, unless the command says
/// `authorizedDatabases: false`; so the command needs the action only then.
pub fn list_databases_needs<'a>(_db: &'a str, cmd: &'a Document) -> MongoResult<Vec<Need<'a>>> {
    Ok(match cmd.get("authorizedDatabases") {
        Some(Bson::Boolean(false)) => vec![Need::on(Target::Cluster, acts(&[ListDatabases]))],
        _ => Vec::new(),
    })
}

/// Trims a `listDatabases` reply to the databases the connection may see.
pub fn filter_databases(session: &Session, reply: &mut Document) {
    if !session.state.auth.enabled {
        return;
    }
    let Some(user) = &session.auth.user else {
        return;
    };
    if user
        .privileges
        .allows(Target::Cluster, acts(&[ListDatabases]))
    {
        return;
    }
    if let Ok(dbs) = reply.get_array_mut("databases") {
        dbs.retain(|d| {
            d.as_document()
                .and_then(|d| d.get_str("name").ok())
                .is_some_and(|name| user.privileges.any_on_db(name))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::roles::builtin_privileges;
    use bson::doc;

    fn allowed(role: &str, rule: Rule, db: &str, cmd: &Document) -> bool {
        let p = Privileges(builtin_privileges(role, "admin").unwrap());
        permits(rule, db, cmd, &p).unwrap()
    }

    #[test]
    fn sharding_admin_commands_are_checked_on_the_namespace_they_name() {
        let shard = doc! {"shardCollection": "app.c", "key": {"k": 1}};
        let named = || Rule::Named(acts(&[EnableSharding]));
        // root and clusterManager hold enableSharding on every database, not on the
        // cluster resource: checked on the cluster, root was refused shardCollection.
        assert!(allowed("root", named(), "admin", &shard));
        assert!(allowed("clusterManager", named(), "admin", &shard));
        assert!(!allowed(
            "root",
            Rule::Cluster(acts(&[EnableSharding])),
            "admin",
            &shard
        ));
        assert!(!allowed("clusterMonitor", named(), "admin", &shard));
        let move_primary = doc! {"movePrimary": "app", "to": "shard1"};
        assert!(allowed(
            "root",
            Rule::Named(acts(&[MoveChunk])),
            "admin",
            &move_primary
        ));
        let zones = doc! {"addShardToZone": "shard0", "zone": "A"};
        assert!(allowed(
            "root",
            Rule::ConfigDb(acts(&[EnableSharding])),
            "admin",
            &zones
        ));
        assert!(allowed(
            "clusterManager",
            Rule::ConfigDb(acts(&[EnableSharding])),
            "admin",
            &zones
        ));
        assert!(!allowed(
            "readAnyDatabase",
            Rule::ConfigDb(acts(&[EnableSharding])),
            "admin",
            &zones
        ));
    }

    fn custom(privileges: &[Document]) -> Privileges {
        Privileges(
            privileges
                .iter()
                .map(|d| crate::auth::roles::Privilege::from_document(d).unwrap())
                .collect(),
        )
    }

    #[test]
    fn a_rename_within_a_database_cannot_reveal_a_collection_the_user_cannot_read() {
        let rename = |from: &str, to: &str| doc! {"renameCollection": from, "to": to};
        // Renames in `app`, and reads only `app.public`.
        let p = custom(&[
            doc! {"resource": {"db": "app", "collection": ""}, "actions": ["renameCollectionSameDB"]},
            doc! {"resource": {"db": "app", "collection": "public"}, "actions": ["find"]},
        ]);
        let allowed =
            |cmd: &Document| permits(Rule::Decide(rename_allowed), "admin", cmd, &p).unwrap();
        assert!(
            !allowed(&rename("app.secret", "app.public")),
            "secret -> readable"
        );
        assert!(
            allowed(&rename("app.public", "app.other")),
            "readable -> unreadable"
        );
        assert!(allowed(&rename("app.a", "app.b")), "neither readable");
        assert!(!allowed(&rename("app.a", "other.b")), "across databases");
        let mut drop_target = rename("app.a", "app.b");
        drop_target.insert("dropTarget", true);
        assert!(!allowed(&drop_target), "dropTarget needs dropCollection");
        // The built-in roles, as the authorization matrix has them.
        let same_db = rename("app.a", "app.b");
        for (role, expected) in [("readWrite", true), ("dbAdmin", true), ("read", false)] {
            let p = Privileges(builtin_privileges(role, "app").unwrap());
            let got = permits(Rule::Decide(rename_allowed), "admin", &same_db, &p).unwrap();
            assert_eq!(got, expected, "{role}");
        }
    }
}
