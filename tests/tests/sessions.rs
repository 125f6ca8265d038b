//! The router's logical session cache, through the Rust driver: `$listLocalSessions`
//! lists the sessions commands named, per user under access control, and `endSessions`
//! and `killAllSessions` end them.

use bson::{doc, Bson, Document};
use futures::TryStreamExt;
use mongodb::error::ErrorKind;
use mongodb::options::AuthMechanism;
use tests::TestCluster;

/// The ids (`_id.id`) `$listLocalSessions` with `spec` lists to `client`.
async fn listed(client: &mongodb::Client, spec: Document) -> Result<Vec<Bson>, i32> {
    let cursor = client
        .database("admin")
        .aggregate(vec![doc! {"$listLocalSessions": spec}])
        .await
        .map_err(|e| match *e.kind {
            ErrorKind::Command(c) => c.code,
            _ => -1,
        })?;
    let docs: Vec<Document> = cursor.try_collect().await.unwrap();
    Ok(docs
        .iter()
        .map(|d| d.get_document("_id").unwrap().get("id").unwrap().clone())
        .collect())
}

fn id_of(session: &mongodb::ClientSession) -> Bson {
    session.id().get("id").unwrap().clone()
}

#[tokio::test]
async fn sessions_are_listed_until_they_end_and_the_pipeline_runs_after_the_stage() {
    let c = TestCluster::builder().memory().start().await;
    let client = c.client().await;
    let mut s = client.start_session().await.unwrap();
    let coll = client.database("app").collection::<Document>("c");
    coll.insert_one(doc! {"x": 1})
        .session(&mut s)
        .await
        .unwrap();
    let mine = id_of(&s);
    let other = c.client().await;
    let seen = listed(&other, doc! {}).await.unwrap();
    assert!(seen.contains(&mine), "{mine} in {seen:?}");

    // The stages after it run on the router, as the specification tests ask.
    let docs: Vec<Document> = other
        .database("admin")
        .aggregate(vec![
            doc! {"$listLocalSessions": {}},
            doc! {"$limit": 1},
            doc! {"$addFields": {"dummy": "dummy field"}},
            doc! {"$project": {"_id": 0, "dummy": 1}},
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(docs, vec![doc! {"dummy": "dummy field"}]);

    // On any database, with {aggregate: 1}; not on a collection.
    let on_app = client
        .database("app")
        .aggregate(vec![doc! {"$listLocalSessions": {}}])
        .await;
    assert!(on_app.is_ok(), "{on_app:?}");
    let err = coll
        .aggregate(vec![doc! {"$listLocalSessions": {}}])
        .await
        .unwrap_err();
    assert!(
        matches!(*err.kind, ErrorKind::Command(ref e) if e.code == 73),
        "{err}"
    );
    assert_eq!(listed(&other, doc! {"all": true}).await, Err(40415));

    client
        .database("admin")
        .run_command(doc! {"endSessions": [s.id().clone()]})
        .await
        .unwrap();
    let seen = listed(&other, doc! {}).await.unwrap();
    assert!(!seen.contains(&mine), "ended, yet listed: {seen:?}");

    // Used again, it is back.
    coll.insert_one(doc! {"x": 2})
        .session(&mut s)
        .await
        .unwrap();
    assert!(listed(&other, doc! {}).await.unwrap().contains(&mine));
    other
        .database("admin")
        .run_command(doc! {"killAllSessions": []})
        .await
        .unwrap();
    let seen = listed(&other, doc! {"allUsers": true}).await.unwrap();
    assert!(!seen.contains(&mine), "killed, yet listed: {seen:?}");
}

#[tokio::test]
async fn under_access_control_a_user_lists_their_own_sessions_unless_allowed_more() {
    let c = TestCluster::builder()
        .auth()
        .admin("root", "root-password")
        .memory()
        .start()
        .await;
    let root = c
        .client_as("root", "root-password", "admin", AuthMechanism::ScramSha256)
        .await;
    root.database("admin")
        .run_command(doc! {"createUser": "app", "pwd": "app-password", "roles": [{"role": "readWrite", "db": "app"}]})
        .await
        .unwrap();
    let app = c
        .client_as("app", "app-password", "admin", AuthMechanism::ScramSha256)
        .await;
    let mut s = app.start_session().await.unwrap();
    app.database("app")
        .collection::<Document>("c")
        .insert_one(doc! {"x": 1})
        .session(&mut s)
        .await
        .unwrap();
    let apps = id_of(&s);
    let mut r = root.start_session().await.unwrap();
    root.database("admin")
        .run_command(doc! {"ping": 1})
        .session(&mut r)
        .await
        .unwrap();
    let roots = id_of(&r);

    let own = listed(&app, doc! {}).await.unwrap();
    assert!(own.contains(&apps), "{own:?}");
    assert!(
        !own.contains(&roots),
        "another user's session listed: {own:?}"
    );
    // Naming themselves needs nothing more; anyone else needs listSessions.
    let named = listed(&app, doc! {"users": [{"user": "app", "db": "admin"}]}).await;
    assert!(named.unwrap().contains(&apps));
    assert_eq!(listed(&app, doc! {"allUsers": true}).await, Err(13));
    let others = doc! {"users": [{"user": "root", "db": "admin"}]};
    assert_eq!(listed(&app, others.clone()).await, Err(13));

    let everyone = listed(&root, doc! {"allUsers": true}).await.unwrap();
    assert!(
        everyone.contains(&apps) && everyone.contains(&roots),
        "{everyone:?}"
    );
    let roots_only = listed(&root, others).await.unwrap();
    assert!(roots_only.contains(&roots) && !roots_only.contains(&apps));
    let both = doc! {"allUsers": true, "users": [{"user": "app", "db": "admin"}]};
    assert_eq!(
        listed(&root, both).await,
        Err(12),
        "allUsers and users together"
    );
    // An empty list of users is the caller.
    let own = listed(&app, doc! {"users": []}).await.unwrap();
    assert!(own.contains(&apps) && !own.contains(&roots), "{own:?}");

    // killSessions: by id alone, the caller's own session of that id.
    let kill = doc! {"killSessions": [r.id().clone()]};
    app.database("admin").run_command(kill).await.unwrap();
    assert!(listed(&root, doc! {}).await.unwrap().contains(&roots));
    // With another user's uid: only for a user who may kill any session.
    let roots_doc = session_doc(&root, &roots).await;
    let denied = app
        .database("admin")
        .run_command(doc! {"killSessions": [roots_doc]})
        .await
        .unwrap_err();
    assert!(
        matches!(*denied.kind, ErrorKind::Command(ref c) if c.code == 13),
        "{denied}"
    );
    let kill = doc! {"killSessions": [session_doc(&root, &apps).await]};
    root.database("admin").run_command(kill).await.unwrap();
    let everyone = listed(&root, doc! {"allUsers": true}).await.unwrap();
    assert!(!everyone.contains(&apps), "{everyone:?}");
    assert!(everyone.contains(&roots), "{everyone:?}");
}

/// The `_id` (`{id, uid}`) `$listLocalSessions` gives the session of id `id`.
async fn session_doc(client: &mongodb::Client, id: &Bson) -> Document {
    let docs: Vec<Document> = client
        .database("admin")
        .aggregate(vec![doc! {"$listLocalSessions": {"allUsers": true}}])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    docs.into_iter()
        .map(|d| d.get_document("_id").unwrap().clone())
        .find(|s| s.get("id") == Some(id))
        .expect("the session is listed")
}
