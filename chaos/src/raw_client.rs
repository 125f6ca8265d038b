//! A minimal MongoDB client over raw TCP: connect, SCRAM-SHA-256 (speculative, in
//! `hello`), one command, close. Storms need thousands of these per second, and a full
//! driver (with its monitors and pools) per short-lived connection would measure the
//! driver instead of the router.

use std::net::SocketAddr;
use std::time::Duration;

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Document};
use router::auth::scram::{ClientConversation, Mechanism};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A user to log in as, and the salted password once computed (drivers cache it too, so
/// a storm costs the server's side of SCRAM, not the client's key derivation).
#[derive(Clone)]
pub struct Login {
    pub user: String,
    pub password: String,
    pub salted: Option<Vec<u8>>,
}

impl Login {
    pub fn new(user: &str, password: &str) -> Login {
        Login {
            user: user.into(),
            password: password.into(),
            salted: None,
        }
    }
}

pub async fn connect(addr: &SocketAddr) -> anyhow::Result<TcpStream> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    // Close with RST: tens of thousands of short connections would otherwise exhaust
    // loopback ports in TIME_WAIT. (Deprecated because a non-zero linger blocks on drop;
    // a zero linger never does.)
    #[allow(deprecated)]
    s.set_linger(Some(Duration::ZERO))?;
    Ok(s)
}

/// Connect, authenticate, `ping`, close.
pub async fn handshake(addr: &SocketAddr, login: &mut Login) -> anyhow::Result<()> {
    let mut s = connect(addr).await?;
    authenticate(&mut s, login).await?;
    let pong = command(&mut s, 3, doc! {"ping": 1, "$db": "admin"}).await?;
    anyhow::ensure!(pong.get_f64("ok") == Ok(1.0), "ping failed: {pong}");
    Ok(())
}

/// SCRAM-SHA-256 in two round trips: `hello` with `speculativeAuthenticate`, then one
/// `saslContinue` (`skipEmptyExchange`).
pub async fn authenticate(s: &mut TcpStream, login: &mut Login) -> anyhow::Result<()> {
    let mut nonce = [0u8; 18];
    router::auth::nonce::NonceSource::User.fill(&mut nonce);
    let mut conv = ClientConversation::new(
        Mechanism::Sha256,
        &login.user,
        &login.password,
        &router::auth::scram::b64(&nonce),
    );
    let hello = command(
        s,
        1,
        doc! {"hello": 1, "$db": "admin", "speculativeAuthenticate": {
            "saslStart": 1, "mechanism": "SCRAM-SHA-256", "db": "admin",
            "payload": Binary { subtype: BinarySubtype::Generic, bytes: conv.first().into_bytes() },
            "options": {"skipEmptyExchange": true},
        }},
    )
    .await?;
    let spec = hello.get_document("speculativeAuthenticate")?;
    let server_first = String::from_utf8(spec.get_binary_generic("payload")?.clone())?;
    let fin = conv
        .final_message(&server_first, &mut login.salted)
        .map_err(anyhow::Error::msg)?;
    let reply = command(
        s,
        2,
        doc! {"saslContinue": 1, "$db": "admin", "conversationId": spec.get_i32("conversationId")?,
        "payload": Binary { subtype: BinarySubtype::Generic, bytes: fin.into_bytes() }},
    )
    .await?;
    let server_final = String::from_utf8(reply.get_binary_generic("payload")?.clone())?;
    anyhow::ensure!(
        reply.get_bool("done")? && conv.verify_server(&server_final),
        "authentication failed: {reply}"
    );
    Ok(())
}

/// One OP_MSG command and its reply.
pub async fn command(s: &mut TcpStream, id: i32, cmd: Document) -> anyhow::Result<Document> {
    s.write_all(&wire::encode_op_msg(id, 0, &cmd, None)).await?;
    let mut buf = Vec::new();
    let mut rd = BufReader::new(&mut *s);
    wire::read_frame(&mut rd, &mut buf)
        .await?
        .ok_or_else(|| anyhow::anyhow!("connection closed"))?;
    Ok(wire::decode_reply(&buf)?.1)
}
