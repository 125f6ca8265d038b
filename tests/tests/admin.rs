//! Handshake, admin and DDL commands through the router, and persistence across restarts.

use bson::{doc, Document};
use futures::TryStreamExt;
use tests::{Storage, TestCluster};

#[tokio::test]
async fn handshake_presents_as_mongos() {
    let cluster = TestCluster::start().await;
    let admin = cluster.client().await.database("admin");
    let hello = admin.run_command(doc! {"hello": 1}).await.unwrap();
    assert_eq!(hello.get_str("msg").unwrap(), "isdbgrid");
    assert!(hello.get_i32("maxWireVersion").unwrap() >= 21);
    assert_eq!(hello.get_i32("logicalSessionTimeoutMinutes").unwrap(), 30);
    assert!(hello.get_bool("isWritablePrimary").unwrap());
    let legacy = admin.run_command(doc! {"isMaster": 1}).await.unwrap();
    assert!(legacy.get_bool("ismaster").unwrap());
    let params = admin.run_command(doc! {"getParameter": "*"}).await.unwrap();
    assert!(params.contains_key("enableTestCommands"));
    let build = admin.run_command(doc! {"buildInfo": 1}).await.unwrap();
    assert!(build.get_str("version").unwrap().starts_with("7."));
    for cmd in [
        doc! {"ping": 1},
        doc! {"getCmdLineOpts": 1},
        doc! {"whatsmyuri": 1},
        doc! {"connectionStatus": 1},
        doc! {"endSessions": []},
        doc! {"killAllSessions": []},
    ] {
        admin
            .run_command(cmd.clone())
            .await
            .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    }
    let status = admin.run_command(doc! {"serverStatus": 1}).await.unwrap();
    assert_eq!(status.get_str("process").unwrap(), "mongos");
    assert!(
        status
            .get_document("connections")
            .unwrap()
            .get_i64("current")
            .unwrap()
            >= 1
    );
    assert!(
        status
            .get_document("opcounters")
            .unwrap()
            .get_i64("command")
            .unwrap()
            >= 1
    );
    // A router under no load refuses nothing (see `runtime_lag`). The probability itself
    // is not asserted to be zero: the other tests of this binary start clusters on the
    // same runtime threads meanwhile, and a late tick moves it for a few milliseconds
    // (CI saw 0.0034 at 1.1 ms of lag, below the lag at which anything is eligible).
    let shedding = status.get_document("bulwark").unwrap();
    let p = shedding.get_f64("shedProbability").unwrap();
    assert!((0.0..1.0).contains(&p), "{shedding}");
    assert_eq!(shedding.get_i64("shedByRouter"), Ok(0), "{shedding}");
    assert_eq!(shedding.get_i64("shedByAnswerTime"), Ok(0), "{shedding}");
}

#[tokio::test]
async fn databases_and_collections_lifecycle() {
    let cluster = TestCluster::start().await;
    let client = cluster.client().await;
    let db = client.database("life");
    db.create_collection("a").await.unwrap();
    let err = db.create_collection("a").await.unwrap_err();
    assert!(format!("{err}").contains("already exists"), "{err}");
    db.collection::<Document>("b")
        .insert_one(doc! {"x": 1})
        .await
        .unwrap();
    let mut names = db.list_collection_names().await.unwrap();
    names.sort();
    assert_eq!(names, vec!["a", "b"]);
    assert!(client
        .list_database_names()
        .await
        .unwrap()
        .contains(&"life".to_string()));

    client
        .database("admin")
        .run_command(doc! {"renameCollection": "life.b", "to": "life.c"})
        .await
        .unwrap();
    let found: Vec<Document> = db
        .collection::<Document>("c")
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    let err = client
        .database("admin")
        .run_command(doc! {"renameCollection": "life.nope", "to": "life.d"})
        .await
        .unwrap_err();
    assert!(format!("{err}").contains("does not exist"), "{err}");

    let stats = db.run_command(doc! {"collStats": "c"}).await.unwrap();
    assert_eq!(stats.get_i64("count").unwrap(), 1);
    let stats = db.run_command(doc! {"dbStats": 1}).await.unwrap();
    assert_eq!(stats.get_i64("collections").unwrap(), 2);
    assert_eq!(stats.get_i64("objects").unwrap(), 1);

    db.collection::<Document>("a").drop().await.unwrap();
    assert_eq!(db.list_collection_names().await.unwrap(), vec!["c"]);
    db.drop().await.unwrap();
    assert!(!client
        .list_database_names()
        .await
        .unwrap()
        .contains(&"life".to_string()));
}

#[tokio::test]
async fn data_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = TestCluster::start_in(dir.path(), Storage::WiredTiger).await;
    let coll = cluster
        .client()
        .await
        .database("keep")
        .collection::<Document>("c");
    coll.insert_many((0..500).map(|i| doc! {"_id": i, "v": i * 2}))
        .await
        .unwrap();
    coll.create_index(mongodb::IndexModel::builder().keys(doc! {"v": 1}).build())
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": 7}).await.unwrap();
    cluster.stop().await;

    let cluster = TestCluster::start_in(dir.path(), Storage::WiredTiger).await;
    let coll = cluster
        .client()
        .await
        .database("keep")
        .collection::<Document>("c");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 499);
    assert_eq!(
        coll.find_one(doc! {"v": 20})
            .await
            .unwrap()
            .unwrap()
            .get_i32("_id")
            .unwrap(),
        10
    );
    assert_eq!(coll.list_index_names().await.unwrap(), vec!["_id_", "v_1"]);
    cluster.stop().await;
}

/// `getLog` answers with the router process's log as MongoDB does; this test process
/// keeps its events with the same layer `bulwark` installs.
#[tokio::test]
async fn get_log_answers_with_recent_lines() {
    use tracing_subscriber::layer::SubscriberExt;
    let _ = tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(router::log_buffer::Recorder),
    );
    let cluster = TestCluster::start().await;
    let admin = cluster.client().await.database("admin");
    tracing::info!(marker = "get-log-test", "a line for getLog");
    let names = admin.run_command(doc! {"getLog": "*"}).await.unwrap();
    assert_eq!(
        names.get_array("names").unwrap(),
        &vec![
            bson::Bson::from("global"),
            bson::Bson::from("startupWarnings")
        ]
    );
    let global = admin.run_command(doc! {"getLog": "global"}).await.unwrap();
    let lines = global.get_array("log").unwrap();
    assert!(global.get_i64("totalLinesWritten").unwrap() >= lines.len() as i64);
    assert!(
        lines
            .iter()
            .any(|l| l.as_str().is_some_and(|l| l.contains("get-log-test"))),
        "{global}"
    );
    admin
        .run_command(doc! {"getLog": "startupWarnings"})
        .await
        .unwrap();
    let code = |r: mongodb::error::Result<Document>| match *r.unwrap_err().kind {
        mongodb::error::ErrorKind::Command(e) => e.code,
        other => panic!("{other:?}"),
    };
    assert_eq!(code(admin.run_command(doc! {"getLog": "nope"}).await), 96);
    assert_eq!(code(admin.run_command(doc! {"getLog": 1}).await), 14);
    let app = cluster.client().await.database("app");
    assert_eq!(code(app.run_command(doc! {"getLog": "global"}).await), 13);
}
